// The processes of one `vtpu` run. Under an MPI launcher (`mpirun -np H vtpu train mlp
// --cores 8`) every process runs the same command line, hosts its share of the global cores
// (distributed/, runtime/process_group.h) and computes the same results; only process 0 prints.
// main.cc joins the job before parsing (distributed::initialize), silences the other processes'
// output, and ends the job: distributed::shutdown after success, distributed::abort_job after an
// error, so that no process waits for one that stopped.
//
// `--cores` is the global count, split evenly over the processes; `--cores-per-process K` is the
// same as `--cores K x H`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/runtime/process_group.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {

/// The processes of this run and this one's index (1 and 0 without an MPI launcher). Thread-safe.
int run_process_count();
int run_process_index();
/// The group of the run's processes (distributed::initialize()'s).
std::shared_ptr<ProcessGroup> run_process_group();

/// Adds `--cores-per-process K` to `app`, storing it in `cores_per_process`.
CLI::Option* add_cores_per_process_option(CLI::App& app, std::optional<int>& cores_per_process);

/// The global core count that --cores (`cores`) and --cores-per-process (`per_process`) give: K x
/// the process count for K alone, --cores alone as given, nothing for neither. Throws
/// InvalidArgumentError (a usage error) when both are given and disagree, naming both and the
/// process count.
std::optional<int> global_cores(std::optional<int> cores, std::optional<int> per_process);

/// Throws InvalidArgumentError (a usage error) unless `cores` splits evenly over the run's
/// processes: "--cores 6 cannot be split evenly across 4 processes (expected a multiple of 4)",
/// where `what` ("--cores 6", "--mesh 2x3") names where the count came from.
void check_cores_split(int64_t cores, const std::string& what);

/// Throws InvalidArgumentError (a usage error) naming the first of `outputs` (flag, value) that
/// is set, in a run of several processes: those files would describe one process's cores only
/// (or be written by every process at once). `command` names the command.
void check_one_process_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                               const std::string& command);

/// " in 2 processes of 4" for `cores` over the run's processes, "" in one process: what the
/// commands' headers add after "8 virtual cores".
std::string processes_text(int64_t cores);

/// A Runtime over every process of the run: `options.num_cores` is the global count (Runtime's
/// two-argument constructor with run_process_group()).
std::unique_ptr<Runtime> make_run_runtime(const RuntimeOptions& options);

}  // namespace vtpu
