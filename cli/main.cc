// The `vtpu` command-line program: builds the CLI11 app, registers the subcommands (one file
// each in cli/) and runs the one selected. `vtpu --help`, `vtpu SUBCOMMAND --help` and each
// subcommand's header list the options.
//
//   vtpu train mlp|transformer|fsdp ...   cli/train_mlp_command.h, train_transformer_command.h,
//                                         train_fsdp_command.h (--plan: train_mlp_plan_command.h)
//   vtpu bench memory|fragmentation|collectives|kernel|hardware ...
//                                         cli/bench_*_command.h
//   vtpu stress ...                       cli/stress_command.h
//   vtpu reshard ...                      cli/reshard_command.h
//   vtpu plan MODEL.json ...              cli/plan_command.h
//   vtpu --version                        "vtpu <version>"
//
// Bare `vtpu`, `vtpu train` and `vtpu bench` print their help on stdout and exit 0, as a group
// of commands does in git-style tools (docker, kubectl, gh): there is nothing to run but the
// choice to show.
//
// Exit codes: 0 success (and --help, --version); 1 a vtpu error while running (the message names
// the value and what was expected: a bad data or config file, out of HBM, ...); 2 bad
// command-line usage or a bad VTPU_* environment variable (cli/environment_check.h). Nothing ends
// in std::terminate: whatever reaches main is one line and exit 1 (docs/CLI.md).
//
// Under an MPI launcher (`mpirun -np H vtpu train mlp ...`, cli/run_processes.h) every process
// runs the command; only process 0 prints, an error names the process it happened in, and a
// failed run ends the whole job (distributed::abort_job with the exit code) so that no process
// waits for one that stopped.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "vtpu/cli/bench_collectives_command.h"
#include "vtpu/cli/bench_fragmentation_command.h"
#include "vtpu/cli/bench_kernel_command.h"
#include "vtpu/cli/bench_memory_command.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/environment_check.h"
#include "vtpu/cli/parse_error_text.h"
#include "vtpu/cli/plan_command.h"
#include "vtpu/cli/reshard_command.h"
#include "vtpu/cli/run_processes.h"
#include "vtpu/cli/stress_command.h"
#include "vtpu/cli/train_fsdp_command.h"
#include "vtpu/cli/train_mlp_command.h"
#include "vtpu/cli/train_transformer_command.h"
#include "vtpu/common/error.h"
#include "vtpu/distributed/distributed.h"

#ifndef VTPU_VERSION
#error "VTPU_VERSION (the CMake project version) must be defined by cli/CMakeLists.txt"
#endif

namespace {

/// Every subcommand's handle, in the order of the help listings.
struct Commands {
  CLI::App* train = nullptr;
  CLI::App* bench = nullptr;
  std::shared_ptr<vtpu::TrainMlpCommand> mlp;
  std::shared_ptr<vtpu::TrainTransformerCommand> transformer;
  std::shared_ptr<vtpu::TrainFsdpCommand> fsdp;
  std::shared_ptr<vtpu::BenchMemoryCommand> memory;
  std::shared_ptr<vtpu::BenchFragmentationCommand> fragmentation;
  std::shared_ptr<vtpu::BenchCollectivesCommand> collectives;
  std::shared_ptr<vtpu::BenchKernelCommand> kernel;
  std::shared_ptr<vtpu::ReshardCommand> reshard;
  std::shared_ptr<vtpu::StressCommand> stress;
  std::shared_ptr<vtpu::PlanCommand> plan;
};

Commands add_commands(CLI::App& app) {
  Commands c;
  c.train = app.add_subcommand("train", "Train an example model across virtual cores");
  // No hard requirement here, so that `vtpu train nope` reports the unexpected "nope" by name.
  c.train->require_subcommand(0, 1);
  c.mlp = vtpu::add_train_mlp_command(*c.train);
  c.transformer = vtpu::add_train_transformer_command(*c.train);
  c.fsdp = vtpu::add_train_fsdp_command(*c.train);
  c.bench = app.add_subcommand("bench", "Benchmarks");
  c.bench->require_subcommand(0, 1);
  c.memory = vtpu::add_bench_memory_command(*c.bench);
  c.fragmentation = vtpu::add_bench_fragmentation_command(*c.bench);
  c.collectives = vtpu::add_bench_collectives_command(*c.bench);
  c.kernel = vtpu::add_bench_kernel_command(*c.bench);  // kernel and hardware
  c.reshard = vtpu::add_reshard_command(app);
  c.stress = vtpu::add_stress_command(app);
  c.plan = vtpu::add_plan_command(app);
  return c;
}

/// The subcommands that run across the processes of an MPI job; the others run in one process.
const std::set<std::string> kMultiProcessCommands = {"train mlp", "train transformer", "train fsdp",
                                                     "bench collectives", "reshard"};

/// The selected subcommand's path, "train mlp"; "" for none.
std::string selected_path(const CLI::App& app) {
  std::string path;
  for (const CLI::App* a = &app; !a->get_subcommands().empty();) {
    a = a->get_subcommands().front();
    path += (path.empty() ? "" : " ") + a->get_name();
  }
  return path;
}

/// Where this process reports its errors: stderr, or in process k > 0 of a run (whose stdout
/// and stderr are silenced, as only process 0 prints) the stderr it started with.
FILE* error_stream = stderr;

/// In process k > 0 of a run: stdout and stderr to /dev/null, and error_stream to a copy of the
/// original stderr.
void silence_other_processes() {
  if (vtpu::run_process_index() == 0) return;
  const int fd = dup(STDERR_FILENO);
  if (FILE* f = fd >= 0 ? fdopen(fd, "w") : nullptr) error_stream = f;
  if (std::freopen("/dev/null", "w", stdout) == nullptr ||
      std::freopen("/dev/null", "w", stderr) == nullptr) {
    std::fprintf(error_stream, "vtpu: warning: process %d prints too (/dev/null not writable)\n",
                 vtpu::run_process_index());
  }
}

/// "vtpu: error: MESSAGE", with the process named in a run of several.
void report_error(const char* kind, const char* message) {
  if (vtpu::run_process_count() > 1) {
    std::fprintf(error_stream, "vtpu: %s: process %d of %d: %s\n", kind, vtpu::run_process_index(),
                 vtpu::run_process_count(), message);
  } else {
    std::fprintf(error_stream, "vtpu: %s: %s\n", kind, message);
  }
  std::fflush(error_stream);
}

/// How long a process other than 0 waits after its failure before it ends the job: process 0
/// prints what every process found (a usage error, a verdict) and, failing too, ends the job
/// itself; an abort from another process first would kill it before it printed.
constexpr std::chrono::seconds kReportGrace{2};

/// Ends the run with `code`: leaves the MPI job after success; after a failure in a run of
/// several processes ends the whole job, which may have processes waiting on this one.
int finish(int code) {
  std::fflush(stdout);
  if (code != 0 && vtpu::run_process_count() > 1) {
    if (vtpu::run_process_index() != 0) std::this_thread::sleep_for(kReportGrace);
    vtpu::distributed::abort_job(code);
  }
  vtpu::distributed::shutdown();
  return code;
}

/// Runs the selected subcommand and returns its exit code; 0 when none ran.
int run_selected(const Commands& c, int argc, char** argv) {
  int code = 0;
  if (vtpu::run_train_mlp_if_selected(*c.mlp, &code) ||
      vtpu::run_train_transformer_if_selected(*c.transformer, &code) ||
      vtpu::run_train_fsdp_if_selected(*c.fsdp, &code) ||
      vtpu::run_bench_memory_if_selected(*c.memory, &code) ||
      vtpu::run_bench_fragmentation_if_selected(*c.fragmentation, &code) ||
      vtpu::run_bench_collectives_if_selected(*c.collectives, &code) ||
      vtpu::run_bench_kernel_if_selected(*c.kernel, &code) ||
      vtpu::run_reshard_if_selected(*c.reshard, &code) ||
      vtpu::run_stress_if_selected(*c.stress, argc, argv, &code) ||
      vtpu::run_plan_if_selected(*c.plan, &code)) {
    return code;
  }
  return 0;
}

int run_main(int argc, char** argv) {
  // Before the commands are set up: their runtime options read VTPU_* as defaults.
  if (!vtpu::check_usage(vtpu::check_environment_variables)) return 2;
  CLI::App app{
      "vtpu: a virtual TPU pod on one machine (virtual cores, HBM arenas, collectives, "
      "sharding)"};
  app.set_version_flag("--version", std::string("vtpu ") + VTPU_VERSION);
  // No hard requirement, so that `vtpu nope` reports the unexpected "nope" by name; bare `vtpu`
  // prints the help.
  app.require_subcommand(0, 1);
  const Commands commands = add_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return vtpu::report_usage_error(vtpu::parse_error_text(e, argc, argv));
  }
  // Bare `vtpu`, or a group without its subcommand: the help of what was given, as --help prints
  // it (app.help() shows the selected subcommand's).
  if (app.get_subcommands().empty()) {
    std::printf("%s", app.help().c_str());
    return 0;
  }
  for (const CLI::App* group : {commands.train, commands.bench}) {
    if (*group && group->get_subcommands().empty()) {
      std::printf("%s", app.help().c_str());
      return 0;
    }
  }
  if (const std::string path = selected_path(app);
      vtpu::run_process_count() > 1 && !kMultiProcessCommands.contains(path)) {
    return vtpu::report_usage_error(
        "vtpu " + path + " runs in one process; an MPI launcher started " +
        std::to_string(vtpu::run_process_count()) +
        " (expected it without mpirun; under mpirun: train mlp|transformer|fsdp, bench "
        "collectives, reshard)");
  }
  try {
    return run_selected(commands, argc, argv);
  } catch (const vtpu::Error& e) {
    report_error("error", e.what());
    return 1;
  } catch (const CLI::ParseError& e) {
    // An option value that can only be checked once the command has run part way (vtpu plan
    // --strategy: the candidates' names depend on the mesh).
    return vtpu::report_usage_error(vtpu::parse_error_text(e, argc, argv));
  } catch (const std::exception& e) {
    report_error("internal error", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Joins the MPI job when a launcher started this process (distributed/), before anything
  // prints: the other processes' output is silenced from the start.
  try {
    vtpu::distributed::initialize();
  } catch (const vtpu::Error& e) {
    std::fprintf(stderr, "vtpu: error: %s\n", e.what());
    return 1;
  }
  silence_other_processes();
  // Whatever escapes run_main (an error while the commands are set up, or one that is not a
  // std::exception) is one line and exit 1, never std::terminate's abort.
  int code = 1;
  try {
    code = run_main(argc, argv);
  } catch (const vtpu::Error& e) {
    report_error("error", e.what());
  } catch (const std::exception& e) {
    report_error("internal error", e.what());
  } catch (...) {
    report_error("internal error", "an exception that is not a std::exception");
  }
  try {
    return finish(code);
  } catch (const std::exception& e) {
    report_error("error", e.what());
    return code != 0 ? code : 1;
  }
}
