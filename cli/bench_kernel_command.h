// `vtpu bench kernel matmul` and `vtpu bench hardware`: the command-line face of
// bench/kernel_bench.h, kept out of vtpu_main.cc so that each command is one registration call.
//
//   vtpu bench kernel matmul [--buffers 1,2,3] [--m 2048 --n 128 --k 2048] [--bm 256 --bn 128
//                            --bk 256] [--hardware v5e] [--repeats 10] [--vmem-limit 16M]
//                            [--dma-bytes-per-second B] [--json]
//   vtpu bench hardware [--out FILE] [--copy-bytes 64M] [--gemm-n 1024]
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct BenchKernelCommand;

/// Adds `kernel` and `hardware` under `bench`. Keep the handle alive until after
/// run_bench_kernel_if_selected().
std::shared_ptr<BenchKernelCommand> add_bench_kernel_command(CLI::App& bench);

/// After parsing: when `kernel` or `hardware` was selected, runs it, sets *exit_code (0 ok, 1 a
/// wrong result) and returns true; false otherwise. A failure while running throws vtpu::Error.
bool run_bench_kernel_if_selected(const BenchKernelCommand& command, int* exit_code);

}  // namespace vtpu
