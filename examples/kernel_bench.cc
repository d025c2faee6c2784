#include "examples/kernel_bench.h"

#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>

#include "common/error.h"
#include "common/units.h"
#include "runtime/pallas_kernels.h"
#include "runtime/runtime.h"

namespace vtpu::examples {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMatrix>;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void fill(std::span<float> v, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& x : v) x = d(gen);
}

}  // namespace

MatmulBenchEstimate estimate_matmul_bench(const KernelBenchOptions& o) {
  MatmulBenchEstimate e;
  const double m = static_cast<double>(o.m), n = static_cast<double>(o.n),
               k = static_cast<double>(o.k);
  const double runs = static_cast<double>(o.repeats + 1);  // round 0 warms up
  e.flops_per_second = 1e10;  // if the profile cannot be read: a slow single core
  try {
    e.flops_per_second = HardwareProfile::get("this_machine").peak_flops("f32");
  } catch (const Error&) {
  }
  // Eigen's reference and one pallas_call per buffer count in every round.
  e.seconds =
      2.0 * m * n * k * runs * static_cast<double>(1 + o.buffers.size()) / e.flops_per_second;
  if (o.dma_bytes_per_second > 0) {
    // A is fetched once per column block of C, B once per row block, C written once.
    auto blocks = [](double dim, int64_t b) {
      return std::ceil(dim / static_cast<double>(std::max<int64_t>(b, 1)));
    };
    const double bytes = 4.0 * (m * k * blocks(n, o.bn) + k * n * blocks(m, o.bm) + m * n);
    e.seconds += bytes * runs * static_cast<double>(o.buffers.size()) / o.dma_bytes_per_second;
  }
  const double host = 4.0 * (m * k + k * n + 2.0 * m * n);
  e.host_bytes = host >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(host);
  e.physical_ram_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  return e;
}

void check_matmul_bench_size(const KernelBenchOptions& o) {
  const MatmulBenchEstimate e = estimate_matmul_bench(o);
  const bool too_long = e.seconds > kMaxEstimatedBenchSeconds;
  const bool too_big = static_cast<double>(e.host_bytes) >
                       kMaxBenchFractionOfRam * static_cast<double>(e.physical_ram_bytes);
  if (!too_long && !too_big) return;
  char text[512];
  std::snprintf(text, sizeof text,
                "bench kernel matmul (%lld, %lld) x (%lld, %lld), %zu buffer counts, %d repeats: "
                "estimated %.0f s (limit %.0f s; %.3g FLOP at %.3g FLOP/s from the this_machine "
                "profile%s) and %s of host memory (limit %.0f%% of %s RAM)",
                static_cast<long long>(o.m), static_cast<long long>(o.k),
                static_cast<long long>(o.k), static_cast<long long>(o.n), o.buffers.size(),
                o.repeats, e.seconds, kMaxEstimatedBenchSeconds,
                2.0 * static_cast<double>(o.m) * static_cast<double>(o.n) *
                    static_cast<double>(o.k) * (o.repeats + 1) *
                    static_cast<double>(1 + o.buffers.size()),
                e.flops_per_second,
                o.dma_bytes_per_second > 0 ? ", plus copies at --dma-bytes-per-second" : "",
                format_bytes(e.host_bytes).c_str(), 100.0 * kMaxBenchFractionOfRam,
                format_bytes(e.physical_ram_bytes).c_str());
  throw InvalidArgumentError(std::string(text) + ": " +
                             (too_long && too_big ? "too long and too much memory"
                              : too_long          ? "too long"
                                                  : "too much memory") +
                             "; use smaller --m/--n/--k or fewer --repeats, or pass --force");
}

KernelBenchResult run_matmul_bench(const KernelBenchOptions& o) {
  if (o.m < 1 || o.n < 1 || o.k < 1 || o.repeats < 1 || o.buffers.empty()) {
    throw InvalidArgumentError(
        "bench kernel matmul needs m, n, k >= 1, repeats >= 1 and at "
        "least one --buffers value");
  }
  Eigen::setNbThreads(1);
  KernelBenchResult result;
  result.options = o;
  result.profile = HardwareProfile::get(o.hardware);
  RuntimeOptions ro;
  ro.num_cores = 1;  // one virtual core: the other CPU core is free for its DMA engine
  ro.hbm_bytes_per_core = std::max<uint64_t>(
      uint64_t{1} << 30, 4 * static_cast<uint64_t>(o.m * o.k + o.k * o.n + o.m * o.n) * 2);
  ro.hardware_profile = o.hardware;
  ro.vmem_limit_bytes = o.vmem_limit_bytes;
  ro.dma_bytes_per_second = o.dma_bytes_per_second;
  ro.dma_timeout = std::chrono::milliseconds(o.dma_timeout_ms);
  Runtime rt(ro);
  const uint64_t f = sizeof(float);
  DeviceBuffer a = rt.allocate(0, static_cast<uint64_t>(o.m * o.k) * f, "bench/a");
  DeviceBuffer b = rt.allocate(0, static_cast<uint64_t>(o.k * o.n) * f, "bench/b");
  DeviceBuffer c = rt.allocate(0, static_cast<uint64_t>(o.m * o.n) * f, "bench/c");
  fill(a.as<float>(), o.seed);
  fill(b.as<float>(), o.seed + 1);
  std::memset(c.data(), 0, c.size_bytes());
  const Map A(a.as<float>().data(), o.m, o.k), B(b.as<float>().data(), o.k, o.n);
  Map C(c.as<float>().data(), o.m, o.n);
  const double flops =
      2.0 * static_cast<double>(o.m) * static_cast<double>(o.n) * static_cast<double>(o.k);

  // Eigen single-threaded GEMM on the same shapes, from the same HBM buffers, into a host matrix.
  // Rounds interleave Eigen and every buffer count, so that load from other processes on the
  // machine falls on all of them alike; round 0 warms up (first touch of the VMEM pages).
  RowMatrix want(o.m, o.n);
  const HbmMatrix ha{&a, o.m, o.k}, hb{&b, o.k, o.n}, hc{&c, o.m, o.n};
  std::vector<MatmulCall> calls;
  for (int buffers : o.buffers) {
    MatmulOptions mo;
    mo.bm = o.bm;
    mo.bn = o.bn;
    mo.bk = o.bk;
    mo.num_buffers = buffers;
    calls.push_back(make_matmul_call(ha, hb, hc, mo));
    KernelBenchRow row;
    row.num_buffers = buffers;
    row.simulated = simulate_pallas_call(calls.back().inputs, calls.back().outputs,
                                         calls.back().options, buffers, result.profile);
    result.rows.push_back(row);
  }
  std::vector<double> eigen_times;
  std::vector<std::vector<double>> wall(calls.size()), wait(calls.size()), body(calls.size());
  for (int r = 0; r < o.repeats + 1; ++r) {
    const auto t0 = Clock::now();
    want.noalias() = A * B;
    if (r > 0) eigen_times.push_back(seconds_since(t0));
    for (size_t i = 0; i < calls.size(); ++i) {
      const MatmulCall& call = calls[i];
      KernelBenchRow& row = result.rows[i];
      std::memset(c.data(), 0, c.size_bytes());
      rt.run_spmd([&](CoreContext& ctx) {
        const PallasCallStats st =
            pallas_call(ctx.core(), call.inputs, call.outputs, call.options, call.body);
        row.vmem_bytes = st.vmem_bytes;
        row.vmem_logical_bytes = st.vmem_logical_bytes;
        row.bytes_copied = st.bytes_in + st.bytes_out;
        result.grid_steps = st.grid_steps;
        if (r == 0) return;
        wall[i].push_back(st.wall_seconds);
        wait[i].push_back(st.dma_wait_seconds);
        body[i].push_back(st.body_seconds);
      });
      row.max_abs_error =
          std::max(row.max_abs_error, static_cast<double>((C - want).cwiseAbs().maxCoeff()));
    }
  }
  result.eigen_median_seconds = median(eigen_times);
  result.eigen_min_seconds = *std::min_element(eigen_times.begin(), eigen_times.end());
  result.eigen_flops_per_second = flops / result.eigen_median_seconds;
  for (size_t i = 0; i < calls.size(); ++i) {
    KernelBenchRow& row = result.rows[i];
    row.median_wall_seconds = median(wall[i]);
    row.min_wall_seconds = *std::min_element(wall[i].begin(), wall[i].end());
    row.median_dma_wait_seconds = median(wait[i]);
    row.median_body_seconds = median(body[i]);
    row.flops_per_second = flops / row.median_wall_seconds;
    row.fraction_of_eigen = row.flops_per_second / result.eigen_flops_per_second;
  }
  return result;
}

void print_matmul_bench(const KernelBenchResult& r) {
  const KernelBenchOptions& o = r.options;
  std::printf(
      "vtpu bench kernel matmul: f32 (%lld, %lld) x (%lld, %lld), blocks bm=%lld bk=%lld bn=%lld, "
      "grid %lld steps, 1 virtual core, %d timed runs each (median)\n",
      static_cast<long long>(o.m), static_cast<long long>(o.k), static_cast<long long>(o.k),
      static_cast<long long>(o.n), static_cast<long long>(o.bm), static_cast<long long>(o.bk),
      static_cast<long long>(o.bn), static_cast<long long>(r.grid_steps), o.repeats);
  std::printf("Eigen single-threaded GEMM, same shapes: %.3f ms (min %.3f), %.2f GFLOP/s\n",
              1e3 * r.eigen_median_seconds, 1e3 * r.eigen_min_seconds,
              1e-9 * r.eigen_flops_per_second);
  if (o.dma_bytes_per_second > 0) {
    std::printf("DMA engine throttled to %.3g bytes/s (--dma-bytes-per-second)\n",
                o.dma_bytes_per_second);
  }
  const std::string sim = "simulated on " + r.profile.name;
  std::printf("%-8s %9s %9s %9s %8s %9s %9s %9s %10s | %s\n", "buffers", "wall ms", "min ms",
              "GFLOP/s", "% Eigen", "vs 1 buf", "DMA wait", "body ms", "VMEM", sim.c_str());
  std::printf("%-8s %9s %9s %9s %8s %9s %9s %9s %10s | %10s %8s %8s %8s %s\n", "", "", "", "", "",
              "", "ms", "", "", "total us", "compute", "DMA", "exposed", "bound");
  double base = 0.0;
  for (const auto& row : r.rows) {
    if (row.num_buffers == 1) base = row.median_wall_seconds;
  }
  for (const auto& row : r.rows) {
    char vs[32] = "-";
    if (base > 0 && row.num_buffers != 1) {
      std::snprintf(vs, sizeof vs, "%+.1f%%", 100.0 * (row.median_wall_seconds / base - 1.0));
    }
    const SimulatedTime& s = row.simulated;
    std::printf(
        "%-8d %9.3f %9.3f %9.2f %7.1f%% %9s %9.3f %9.3f %10s | %10.2f %8.2f %8.2f %8.2f %s\n",
        row.num_buffers, 1e3 * row.median_wall_seconds, 1e3 * row.min_wall_seconds,
        1e-9 * row.flops_per_second, 100.0 * row.fraction_of_eigen, vs,
        1e3 * row.median_dma_wait_seconds, 1e3 * row.median_body_seconds,
        format_bytes(row.vmem_bytes).c_str(), 1e6 * s.total_seconds, 1e6 * s.compute_seconds,
        1e6 * s.dma_seconds, 1e6 * s.exposed_dma_seconds, s.dma_bound() ? "DMA" : "compute");
  }
  double max_err = 0.0;
  for (const auto& row : r.rows) max_err = std::max(max_err, row.max_abs_error);
  std::printf("check: max |C - Eigen| = %.3g over all runs\n", max_err);
}

void to_json(nlohmann::json& j, const KernelBenchResult& r) {
  const KernelBenchOptions& o = r.options;
  j = nlohmann::json{{"m", o.m},
                     {"n", o.n},
                     {"k", o.k},
                     {"bm", o.bm},
                     {"bn", o.bn},
                     {"bk", o.bk},
                     {"hardware", r.profile.name},
                     {"repeats", o.repeats},
                     {"dma_bytes_per_second", o.dma_bytes_per_second},
                     {"dma_timeout_ms", o.dma_timeout_ms},
                     {"grid_steps", r.grid_steps},
                     {"eigen_median_seconds", r.eigen_median_seconds},
                     {"eigen_min_seconds", r.eigen_min_seconds},
                     {"eigen_flops_per_second", r.eigen_flops_per_second},
                     {"rows", nlohmann::json::array()}};
  for (const auto& row : r.rows) {
    j["rows"].push_back({{"num_buffers", row.num_buffers},
                         {"median_wall_seconds", row.median_wall_seconds},
                         {"min_wall_seconds", row.min_wall_seconds},
                         {"flops_per_second", row.flops_per_second},
                         {"fraction_of_eigen", row.fraction_of_eigen},
                         {"median_dma_wait_seconds", row.median_dma_wait_seconds},
                         {"median_body_seconds", row.median_body_seconds},
                         {"vmem_bytes", row.vmem_bytes},
                         {"vmem_logical_bytes", row.vmem_logical_bytes},
                         {"bytes_copied", row.bytes_copied},
                         {"max_abs_error", row.max_abs_error},
                         {"simulated", row.simulated}});
  }
}

HardwareProfile measure_this_machine(uint64_t copy_bytes, int gemm_n) {
  Eigen::setNbThreads(1);
  std::vector<std::byte> src(copy_bytes, std::byte{1}), dst(copy_bytes, std::byte{0});
  double best_copy = 1e30;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), copy_bytes);
    best_copy = std::min(best_copy, seconds_since(t0));
  }
  // The cache level: copies of a quarter of the L2 (source and destination together fill half of
  // it), warm, best of many short runs: a copy of a few microseconds is rarely preempted, so the
  // best run is the idle-CPU figure even on a loaded host.
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const uint64_t cache_bytes = l2 > 0 ? static_cast<uint64_t>(l2) : 0;
  double cache_bytes_per_second = 0.0;
  const uint64_t cache_copy_bytes = cache_bytes / 4;
  constexpr int kCacheCopies = 2000;
  if (cache_copy_bytes > 0) {
    std::vector<std::byte> csrc(cache_copy_bytes, std::byte{1}), cdst(cache_copy_bytes);
    double best = 1e30;
    for (int r = 0; r < kCacheCopies; ++r) {
      const auto t0 = Clock::now();
      std::memcpy(cdst.data(), csrc.data(), cache_copy_bytes);
      best = std::min(best, seconds_since(t0));
      csrc[static_cast<size_t>(r) % cache_copy_bytes] = cdst[0];  // keep the copies live
    }
    cache_bytes_per_second = static_cast<double>(cache_copy_bytes) / best;
  }
  RowMatrix a = RowMatrix::Random(gemm_n, gemm_n), b = RowMatrix::Random(gemm_n, gemm_n),
            c(gemm_n, gemm_n);
  double best_gemm = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    c.noalias() = a * b;
    best_gemm = std::min(best_gemm, seconds_since(t0));
  }
  const double n = gemm_n;
  HardwareProfile p;
  p.name = "this_machine";
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  p.description = std::string("measured on ") + host + " on " + date +
                  " by `vtpu bench hardware` (one CPU core per virtual core)";
  p.peak_flops_per_second["f32"] = 2.0 * n * n * n / best_gemm;
  p.hbm_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  p.hbm_bytes_per_second = static_cast<double>(copy_bytes) / best_copy;
  p.vmem_bytes = 16 * kMiB;
  p.scoped_vmem_limit_bytes = 16 * kMiB;
  p.smem_bytes = kMiB;
  p.accumulator_bytes = 4 * kMiB;
  p.link_bytes_per_second = p.hbm_bytes_per_second;
  p.link_latency_seconds = 0.0;
  p.links_per_chip = 2;
  p.topology = "shared_memory";
  p.host_cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  p.cache_bytes = cache_bytes_per_second > 0 ? cache_bytes : 0;
  p.cache_bytes_per_second = p.cache_bytes > 0 ? cache_bytes_per_second : 0.0;
  p.sources = {
      {"peak_flops_per_second.f32",
       "measured: best of 5 single-threaded Eigen GEMMs, f32 " + std::to_string(gemm_n) + "^3"},
      {"hbm_bytes", "measured: physical RAM (sysconf)"},
      {"hbm_bytes_per_second",
       "measured: best of 7 memcpy of " + format_bytes(copy_bytes) + " (bytes copied per second)"},
      {"vmem_bytes", "vtpu default (a software arena)"},
      {"scoped_vmem_limit_bytes", "vtpu default, as Pallas's 16 MiB"},
      {"smem_bytes", "vtpu default (a software arena)"},
      {"accumulator_bytes", "vtpu default (a software arena)"},
      {"link_bytes_per_second",
       "assumed equal to the memcpy bandwidth (links are memcpy through ring buffers); calibrate "
       "with vtpu bench collectives"},
      {"link_latency_seconds", "assumed 0; calibrate with vtpu bench collectives"},
      {"topology", "all cores share one memory"},
      {"host_cpus",
       "measured: online CPUs (sysconf(_SC_NPROCESSORS_ONLN)); the virtual cores' threads share "
       "them"}};
  if (p.cache_bytes > 0) {
    p.sources["cache_bytes"] = "measured: L2 per CPU (sysconf(_SC_LEVEL2_CACHE_SIZE))";
    p.sources["cache_bytes_per_second"] = "measured: best of " + std::to_string(kCacheCopies) +
                                          " warm memcpy of " + format_bytes(cache_copy_bytes) +
                                          " (a quarter of the L2; bytes copied per second)";
  }
  p.validate();
  return p;
}

}  // namespace vtpu::examples
