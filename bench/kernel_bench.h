// Benchmarks of the pipelined kernels (runtime/pallas_kernels.h) and the measurement behind the
// "this machine" hardware profile.
//
//   vtpu bench kernel matmul --buffers 1,2,3 [--m --n --k --bm --bn --bk] [--hardware PROFILE]
//   vtpu bench hardware [--out FILE]
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/pallas_call.h"

namespace vtpu {

struct KernelBenchOptions {
  int64_t m = 2048, n = 128, k = 2048;   // matmul (m, k) x (k, n), f32
  int64_t bm = 256, bn = 128, bk = 256;  // blocks
  std::vector<int> buffers = {1, 2, 3};  // VMEM buffers per operand, one run each
  std::string hardware = "v5e";          // profile for the simulated time
  int repeats = 10;                      // timed runs per configuration (median reported)
  uint64_t vmem_limit_bytes = 0;         // 0: the profile's scoped limit
  double dma_bytes_per_second = 0.0;     // 0: unthrottled DMA engine
  int64_t dma_timeout_ms = 30000;        // every DMA wait gives up after this long
  uint64_t seed = 0;
};

/// One configuration's result. Seconds and FLOP/s.
struct KernelBenchRow {
  int num_buffers = 0;
  double median_wall_seconds = 0.0;
  double min_wall_seconds = 0.0;
  double flops_per_second = 0.0;
  double fraction_of_eigen = 0.0;        // flops_per_second / eigen_flops_per_second
  double median_dma_wait_seconds = 0.0;  // core blocked on copies
  double median_body_seconds = 0.0;      // inside the kernel body (Eigen on blocks)
  uint64_t vmem_bytes = 0;               // charged, tile-padded
  uint64_t vmem_logical_bytes = 0;       // without padding
  uint64_t bytes_copied = 0;             // in + out per run
  double max_abs_error = 0.0;            // against Eigen's product
  SimulatedTime simulated;               // on the hardware profile
};

struct KernelBenchResult {
  KernelBenchOptions options;
  HardwareProfile profile;
  int64_t grid_steps = 0;
  double eigen_median_seconds = 0.0;  // Eigen single-threaded GEMM, same shapes
  double eigen_min_seconds = 0.0;
  double eigen_flops_per_second = 0.0;
  std::vector<KernelBenchRow> rows;
};
void to_json(nlohmann::json& j, const KernelBenchResult& r);

/// Limits of check_matmul_bench_size (`vtpu bench kernel matmul` without --force).
inline constexpr double kMaxEstimatedBenchSeconds = 60.0;
inline constexpr double kMaxBenchFractionOfRam = 0.5;

/// The estimated cost of run_matmul_bench(options). Seconds and bytes.
struct MatmulBenchEstimate {
  double seconds = 0.0;           // compute at flops_per_second + throttled DMA, all runs
  double flops_per_second = 0.0;  // this machine's f32 GEMM rate (profiles/this_machine.json)
  uint64_t host_bytes = 0;        // A, B, C in HBM + Eigen's reference C
  uint64_t physical_ram_bytes = 0;
};
MatmulBenchEstimate estimate_matmul_bench(const KernelBenchOptions& options);
/// Throws InvalidArgumentError, with the estimate, when the run is estimated to take over
/// kMaxEstimatedBenchSeconds or host memory over kMaxBenchFractionOfRam of physical RAM.
void check_matmul_bench_size(const KernelBenchOptions& options);

/// Runs the matmul benchmark on one virtual core. Throws vtpu::Error for bad options.
KernelBenchResult run_matmul_bench(const KernelBenchOptions& options);
/// Prints the table of `vtpu bench kernel matmul`.
void print_matmul_bench(const KernelBenchResult& r);

/// Measures this machine and returns a profile named "this_machine": hbm_bytes_per_second is the
/// best memcpy bandwidth over `copy_bytes` (bytes copied per second, each byte read once and
/// written once), peak f32 FLOP/s the best single-threaded Eigen GEMM of `gemm_n`^3. The on-core
/// memory sizes are vtpu's defaults (software arenas), link bandwidth the memcpy bandwidth (the
/// links are memcpy through ring buffers; calibrate with `vtpu bench collectives`). host_cpus is
/// the online CPU count; cache_bytes the L2 per CPU and cache_bytes_per_second the best of 2000
/// warm memcpy of a quarter of it (both 0 when the system reports no L2 size).
/// Also measures the kernel rates (measure_kernel_rates, below) into `kernels`.
/// The last-level cache (llc_bytes and llc_bytes_per_second) comes from a sweep of copies
/// (measure_copy_sweep, last_level_cache_from_sweep below).
HardwareProfile measure_this_machine(uint64_t copy_bytes = uint64_t{64} << 20, int gemm_n = 1024);

/// One point of a copy sweep: a memcpy whose source and destination together are
/// `working_set_bytes` (bytes), and its bandwidth in bytes copied per second (the unit of
/// hbm_bytes_per_second).
struct CopySweepPoint {
  uint64_t working_set_bytes = 0;
  double bytes_per_second = 0.0;
};
/// Copies with working sets 2 x `first_working_set_bytes`, 4 x, ... up to and including
/// `last_working_set_bytes` (bytes; the last rounded down to that doubling), each the best of
/// enough repetitions to copy 512 MiB (at least 5), on this thread: the bandwidth of each
/// level of the memory hierarchy, as lmbench's bw_mem and Intel's MLC sweep it. About 0.3 s with
/// 2 MiB..256 MiB. Throws InvalidArgumentError for a first size of 0 or a last size below it.
std::vector<CopySweepPoint> measure_copy_sweep(uint64_t first_working_set_bytes,
                                               uint64_t last_working_set_bytes);
/// The last-level cache seen from a copy sweep (working sets doubling from twice the L2, the
/// last one in memory): the leading run of points whose bandwidth is at least
/// kLastLevelCacheEdge x the first point's, since a cache level's copy bandwidth is flat up to
/// its capacity and then falls by half or more (the knee that lmbench's and MLC's sweeps show).
/// Its largest working set is llc_bytes, and the median of its bandwidths llc_bytes_per_second.
/// {0, 0} (no level between the L2 and memory) when the sweep has fewer than 2 points, the run is
/// empty or reaches the last point (no edge before memory), or its bandwidth is under
/// kLastLevelCacheOverMemory x the last point's. Pure.
/// Why the first point and not memory's: this VM's 256 MiB copy measured 6.2e9 B/s and
/// 1.4e10 B/s a quarter of an hour apart, while the L3's edge stayed between 16 and 32 MiB
/// (4.3e10 and 3.6e10 B/s at 16 MiB, 2.2e10 at 32 MiB both times, 4.6e10 and 5.4e10 at 2 MiB).
CopySweepPoint last_level_cache_from_sweep(const std::vector<CopySweepPoint>& sweep);
/// See last_level_cache_from_sweep.
inline constexpr double kLastLevelCacheEdge = 0.6;
inline constexpr double kLastLevelCacheOverMemory = 1.5;

/// The kernel rates of a host profile (runtime/hardware_profile.h, KernelRates), measured on this
/// thread: the single-threaded Eigen f32 GEMM at every (m, k, n) in gemm_sizes^3 (strictly
/// increasing), the elementwise kernels over `elementwise_elements` floats, and the row kernels
/// (the trainers' train/nn_kernels.h) fitted over row lengths 16..1024. Every call reads its
/// operands from a 32 MiB rotation, never from the L2 (as in a training step, whose kernels read
/// what earlier kernels wrote megabytes ago). The GEMMs are measured a second time warm
/// (gemm_warm_flops_per_second: the same operands in every call, so those that fit stay in the
/// cache, as in a small model whose whole step fits). Best of several batches of calls, so that
/// a loaded host's preemptions do not decide a figure. Takes a few seconds with sizes 8..1024.
/// Throws InvalidArgumentError for sizes outside 1..1024 or not increasing, or elements
/// outside 1024..2^20.
KernelRates measure_kernel_rates(const std::vector<int64_t>& gemm_sizes,
                                 int64_t elementwise_elements);

}  // namespace vtpu
