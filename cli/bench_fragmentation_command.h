// `vtpu bench fragmentation`: seeded random workloads near a target occupancy
// (stress/fragmentation_check.h), counting the out-of-memory failures that total free bytes
// would have covered (false OOMs), with and without auto-defragmentation.
//
//   vtpu bench fragmentation [--allocators A,B] [--defrag on,off] [--workloads N] [--ops K]
//                            [--occupancy F] [--capacity SIZE] [--seed S] [--json]
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct BenchFragmentationCommand;

/// Adds the `fragmentation` subcommand to `bench`. Keep the returned handle alive until after
/// run_bench_fragmentation_if_selected().
std::shared_ptr<BenchFragmentationCommand> add_bench_fragmentation_command(CLI::App& bench);

/// After parsing: when `bench fragmentation` was selected, runs it, sets *exit_code to 0 and
/// returns true; false when it was not selected.
bool run_bench_fragmentation_if_selected(const BenchFragmentationCommand& command, int* exit_code);

}  // namespace vtpu
