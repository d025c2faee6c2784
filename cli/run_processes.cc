#include "vtpu/cli/run_processes.h"

#include "vtpu/common/error.h"
#include "vtpu/distributed/distributed.h"

namespace vtpu {

int run_process_count() { return distributed::process_count(); }
int run_process_index() { return distributed::process_index(); }
std::shared_ptr<ProcessGroup> run_process_group() { return distributed::initialize(); }

CLI::Option* add_cores_per_process_option(CLI::App& app, std::optional<int>& cores_per_process) {
  return app
      .add_option("--cores-per-process", cores_per_process,
                  "Virtual cores of each process under an MPI launcher (mpirun -np H): the same "
                  "as --cores K x H")
      ->check(CLI::Range(1, 1024));
}

std::optional<int> global_cores(std::optional<int> cores, std::optional<int> per_process) {
  if (!per_process) return cores;
  const int processes = run_process_count();
  const int64_t total = int64_t{*per_process} * processes;
  if (cores && *cores != total) {
    throw InvalidArgumentError("--cores " + std::to_string(*cores) + " and --cores-per-process " +
                               std::to_string(*per_process) + " disagree on " +
                               std::to_string(processes) + " process" +
                               (processes == 1 ? "" : "es") + " (expected --cores " +
                               std::to_string(total) + ", or only one of them)");
  }
  if (total > 1024) {
    throw InvalidArgumentError("--cores-per-process " + std::to_string(*per_process) + " on " +
                               std::to_string(processes) + " processes gives " +
                               std::to_string(total) + " cores (expected at most 1024)");
  }
  return static_cast<int>(total);
}

void check_cores_split(int64_t cores, const std::string& what) {
  const int processes = run_process_count();
  if (cores % processes != 0) {
    throw InvalidArgumentError(what + " cannot be split evenly across " +
                               std::to_string(processes) + " processes (expected a multiple of " +
                               std::to_string(processes) + " cores)");
  }
}

void check_one_process_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                               const std::string& command) {
  const int processes = run_process_count();
  if (processes == 1) return;
  for (const auto& [flag, value] : outputs) {
    if (value.empty()) continue;
    throw InvalidArgumentError(flag + " " + value + " cannot be used with " + command + " on " +
                               std::to_string(processes) +
                               " processes (expected it left out under an MPI launcher: the file "
                               "would hold one process's cores)");
  }
}

std::string processes_text(int64_t cores) {
  const int processes = run_process_count();
  if (processes == 1) return "";
  return " in " + std::to_string(processes) + " processes of " + std::to_string(cores / processes);
}

std::unique_ptr<Runtime> make_run_runtime(const RuntimeOptions& options) {
  return std::make_unique<Runtime>(options, run_process_group());
}

}  // namespace vtpu
