// `vtpu stress soak`: the command-line face of stress/soak.h (scripts/soak.sh runs it).
//
//   vtpu stress soak [--seconds 10] [--cores 8] [--allocator bfc] [--hbm-bytes 16M]
//                    [--occupancy 0.9] [--defragment on|growth] [--seed 1] [--json]
//
// Exit codes: 0 no checksum mismatch, lost buffer or wrong all-reduce; 1 any of them (the
// counters say which), or a vtpu error while running; 2 bad usage.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct SoakCommand;

/// Adds the `soak` subcommand to `stress` (the `vtpu stress` app). Keep the returned handle alive
/// until after run_soak_if_selected().
std::shared_ptr<SoakCommand> add_soak_command(CLI::App& stress);

/// After parsing: when `stress soak` was selected, runs it, sets *exit_code and returns true; false
/// when it was not selected.
bool run_soak_if_selected(const SoakCommand& command, int* exit_code);

}  // namespace vtpu
