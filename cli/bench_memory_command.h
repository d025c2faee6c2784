// `vtpu bench memory`: allocator policy latency and throughput (bench/policy_benchmark.h), on a
// steady-state workload at several live buffer counts or on a replayed vtpu trace.
//
//   vtpu bench memory [--allocators A,B] [--live L1,L2] [--pairs K] [--hot W] [--workload W]
//                     [--trace FILE] [--capacity SIZE] [--via policy,arena] [--seed S] [--json]
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct BenchMemoryCommand;

/// Adds the `memory` subcommand to `bench`. Keep the returned handle alive until after
/// run_bench_memory_if_selected().
std::shared_ptr<BenchMemoryCommand> add_bench_memory_command(CLI::App& bench);

/// After parsing: when `bench memory` was selected, runs it, sets *exit_code (0; 2 for a usage
/// error CLI11 cannot see: a list naming a thing twice, a capacity a policy refuses, a workload
/// over the event limit) and returns true; false when it was not selected. An unreadable or empty
/// trace throws a vtpu::Error naming the file.
bool run_bench_memory_if_selected(const BenchMemoryCommand& command, int* exit_code);

}  // namespace vtpu
