// `vtpu stress`: the command-line face of stress/stress_harness.h, kept out of vtpu_main.cc so
// that the command is one registration call there.
//
//   vtpu stress [--cores 8] [--workload training_step] [--trace FILE] [--allocators bfc,tlsf]
//               [--auto-defragment on|off|both] [--hbm-bytes 16G] [--seed 1] [--events 100000]
//               [--load on|off] [--backing] [--stop-on-oom] [--capacity-search on|off]
//               [--capacity-search-max SIZE] [--json FILE] [--html FILE] ... (--help lists the
//               workload and load knobs; with --trace, a workload option is a usage error)
//
// Exit codes: 0 success; 1 a vtpu error (bad trace, out of memory with --stop-on-oom, after the
// full out-of-memory report; an integrity or all-reduce check that failed); 2 bad usage.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct StressCommand;

/// Adds the `stress` subcommand to `app`. Keep the returned handle alive until after
/// run_stress_if_selected().
std::shared_ptr<StressCommand> add_stress_command(CLI::App& app);

/// After parsing: when `stress` was selected, runs it, sets *exit_code and returns true; false
/// when it was not selected. Errors while running are printed (stderr) and give exit code 1.
bool run_stress_if_selected(const StressCommand& command, int argc, char** argv, int* exit_code);

}  // namespace vtpu
