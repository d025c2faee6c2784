// `vtpu bench collectives`: the command-line face of bench/collective_bench.h, kept out of
// vtpu_main.cc so that the command is one registration call there.
//
//   vtpu bench collectives [--cores 8] [--op all_reduce] [--min-bytes 8] [--max-bytes 64M]
//                          [--dtype f32] [--reduce sum] [--algorithm auto] [--iters 20]
//                          [--warmup 5] [--link-slot-bytes SIZE] [--link-slots K] [--json]
//   vtpu bench collectives --calibrate OUT.json [--cores 8] [--max-bytes 4M] [--iters 10]
//     fits alpha and beta of all_gather, reduce_scatter, all_reduce and all_to_all
//     (bench/calibration.h) and writes a this_machine hardware profile
//
// --op: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce. --algorithm: auto
// (the table's algorithm column names what ran for each size) or one the op offers (--help lists
// them).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct BenchCollectivesCommand;

/// Adds the `collectives` subcommand under `bench`. Keep the returned handle alive until after
/// run_bench_collectives_if_selected().
std::shared_ptr<BenchCollectivesCommand> add_bench_collectives_command(CLI::App& bench);

/// After parsing: when `collectives` was selected, runs it, sets *exit_code (0 ok; 1 a wrong
/// result; 2 a usage error CLI11 could not see, with the message on stderr) and returns true;
/// false when the subcommand was not selected. A failure while running throws vtpu::Error.
bool run_bench_collectives_if_selected(const BenchCollectivesCommand& command, int* exit_code);

}  // namespace vtpu
