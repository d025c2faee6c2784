#include "vtpu/bench/kernel_bench.h"

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
#include <tuple>

#include "vtpu/bench/calibration.h"
#include "vtpu/common/error.h"
#include "vtpu/common/host.h"
#include "vtpu/common/median.h"
#include "vtpu/common/units.h"
#include "vtpu/runtime/pallas_kernels.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/train/nn_kernels.h"

namespace vtpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMatrix>;
using CMap = Eigen::Map<const RowMatrix>;
using Clock = std::chrono::steady_clock;

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
  result.eigen_median_seconds = median_of(eigen_times);
  result.eigen_min_seconds = *std::min_element(eigen_times.begin(), eigen_times.end());
  result.eigen_flops_per_second = flops / result.eigen_median_seconds;
  for (size_t i = 0; i < calls.size(); ++i) {
    KernelBenchRow& row = result.rows[i];
    row.median_wall_seconds = median_of(wall[i]);
    row.min_wall_seconds = *std::min_element(wall[i].begin(), wall[i].end());
    row.median_dma_wait_seconds = median_of(wait[i]);
    row.median_body_seconds = median_of(body[i]);
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

namespace {

/// CPU seconds of this thread (CLOCK_THREAD_CPUTIME_ID): unlike the wall clock, it does not run
/// while a loaded host has the thread preempted.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// Best CPU seconds per call of `call`, over `batches` batches of calls that each run at least
/// `min_batch_seconds` of this thread's CPU time (so that the clock's resolution does not decide
/// a short kernel's figure). Thread CPU time, so that preemption on a loaded host does not count;
/// the best batch is the one least disturbed by other programs sharing the CPU's caches. The
/// clock is read after runs of 1, 2, 4, ... calls, not after every call: on this VM one read of
/// CLOCK_THREAD_CPUTIME_ID costs about 1.3 us of CPU (a system call; bench/
/// gemm_transpose_bench.cc's BM_ThreadCpuClock), which a read per call added to every call and
/// so halved the measured rate of a 1 us GEMM (issue 6: the (64, 64, 8) GEMM's table rate was
/// 24e9 FLOP/s, Google Benchmark's 57e9).
template <typename F>
double best_seconds_per_call(F&& call, int batches = 5, double min_batch_seconds = 2e-4) {
  call();  // warm: first-touch pages, Eigen's blocking buffers
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    int64_t calls = 0;
    const double t0 = thread_cpu_seconds();
    double elapsed = 0;
    for (int64_t run = 1; elapsed < min_batch_seconds; run *= 2) {
      for (int64_t i = 0; i < run; ++i) call();
      calls += run;
      elapsed = thread_cpu_seconds() - t0;
    }
    best = std::min(best, elapsed / static_cast<double>(calls));
  }
  return best;
}

/// Operands of the kernel measurements, rotated through pools much larger than the L2, so that
/// every call reads operands that are not in the cache: as in a training step, whose kernels read
/// what earlier kernels wrote megabytes ago (the transformer's step touches 16 MiB). Inputs come
/// from a pool of values uniform in [-1, 1] that is never written; outputs go to a separate
/// rotating pool that is never read as an input (so no value is fed back: repeated GELUs would
/// shrink inputs towards 0, where tanh takes a fast path).
class OperandPool {
 public:
  explicit OperandPool(int64_t floats)
      : in_(static_cast<size_t>(floats)), out_(static_cast<size_t>(floats)) {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : in_) x = u(gen);
  }
  /// The next `floats` contiguous input floats (read only).
  const float* in(int64_t floats) { return next(in_, in_offset_, floats); }
  /// The next `floats` contiguous output floats.
  float* out(int64_t floats) { return next(out_, out_offset_, floats); }

 private:
  static float* next(std::vector<float>& v, int64_t& offset, int64_t floats) {
    if (offset + floats > static_cast<int64_t>(v.size())) offset = 0;
    float* p = v.data() + offset;
    offset += (floats + 15) / 16 * 16;  // 64-byte steps
    return p;
  }
  std::vector<float> in_, out_;
  int64_t in_offset_ = 0, out_offset_ = 0;
};

/// KernelRates' elementwise kernels over `elements` floats, and its row kernels at row lengths
/// 16..1024 (about `elements` per call), each fitted to seconds per row = a + b x length by
/// fit_alpha_beta (bench/calibration.h, relative residuals). The kernels are the trainers'
/// (train/nn_kernels.h); operands come from `pool`.
void measure_elementwise_rates(int64_t elements, OperandPool& pool, KernelRates& r) {
  const double n = static_cast<double>(elements);
  using Arr = Eigen::Map<Eigen::ArrayXf>;
  using CArr = Eigen::Map<const Eigen::ArrayXf>;
  r.elementwise_per_second["pass"] = n / best_seconds_per_call([&] {
                                       CArr x(pool.in(elements), elements);
                                       Arr y(pool.out(elements), elements);
                                       y = x * 1.5f + 0.5f;
                                     });
  // The trainers' activation: GELU forward and its derivative, one tanh each (2 per element),
  // the derivative scaling an incoming gradient as the backward does.
  r.elementwise_per_second["transcendental"] = 2 * n / best_seconds_per_call([&] {
                                                 CArr x(pool.in(elements), elements);
                                                 Arr y(pool.out(elements), elements);
                                                 CArr g(pool.in(elements), elements);
                                                 Arr dx(pool.out(elements), elements);
                                                 nn::gelu_forward(x.data(), y.data(), elements);
                                                 dx = g;
                                                 nn::gelu_backward(x.data(), dx.data(), elements);
                                               });
  std::vector<double> lengths, ln, ce, sm_lengths, sm;
  for (int64_t len = 16; len <= 1024; len *= 2) {
    const int64_t rows = std::max<int64_t>(elements / len, 16);
    std::vector<float> mu(static_cast<size_t>(rows)), rs(static_cast<size_t>(rows));
    std::vector<float> gain(static_cast<size_t>(len), 1.0f), bias(static_cast<size_t>(len), 0.0f);
    std::vector<float> dg(static_cast<size_t>(len)), db(static_cast<size_t>(len));
    const double ln_s = best_seconds_per_call([&] {
      const float* x = pool.in(rows * len);
      float* y = pool.out(rows * len);
      float* dx = pool.out(rows * len);
      nn::layer_norm_forward(x, y, mu.data(), rs.data(), gain.data(), bias.data(), rows, len);
      nn::layer_norm_backward(x, y, mu.data(), rs.data(), gain.data(), dx, dg.data(), db.data(),
                              rows, len);
    });
    if (len <= 256) {  // attention blocks up to 256 KiB: the sequence lengths vtpu trains
      // One causal attention block of len x len, forward then backward (len rows). Both work in
      // place, so each call copies its operands into fresh slices first; the copies (two passes
      // over the block, which the trainer does not make) are timed alone and subtracted, but
      // never below half the measured time.
      const int64_t block = len * len;
      const double sm_s = best_seconds_per_call([&] {
        const float* scores = pool.in(block);
        float* probs = pool.out(block);
        float* dp = pool.out(block);
        std::copy_n(scores, block, probs);
        nn::causal_softmax_forward(probs, len);
        std::copy_n(scores, block, dp);
        nn::softmax_backward(probs, dp, len, 0.25f);
      });
      const double copy_s = best_seconds_per_call([&] {
        const float* scores = pool.in(block);
        float* probs = pool.out(block);
        float* dp = pool.out(block);
        std::copy_n(scores, block, probs);
        std::copy_n(scores, block, dp);
      });
      sm_lengths.push_back(static_cast<double>(len));
      sm.push_back(std::max(sm_s - copy_s, 0.5 * sm_s) / static_cast<double>(len));
    }
    // The cross-entropy works in place on its logits: as above, copy then subtract the copy.
    const double ce_s = best_seconds_per_call([&] {
      const float* src = pool.in(rows * len);
      float* logits = pool.out(rows * len);
      std::copy_n(src, rows * len, logits);
      nn::softmax_cross_entropy(logits, rows, len, 1e-3f,
                                [](int64_t i) { return static_cast<int32_t>(i % 7); });
    });
    const double ce_copy_s = best_seconds_per_call([&] {
      const float* src = pool.in(rows * len);
      std::copy_n(src, rows * len, pool.out(rows * len));
    });
    lengths.push_back(static_cast<double>(len));
    ln.push_back(ln_s / static_cast<double>(rows));
    ce.push_back(std::max(ce_s - ce_copy_s, 0.5 * ce_s) / static_cast<double>(rows));
  }
  for (const auto& [name, xs, ts] :
       {std::tuple<const char*, std::vector<double>*, std::vector<double>*>{"layer_norm", &lengths,
                                                                            &ln},
        {"softmax", &sm_lengths, &sm},
        {"cross_entropy", &lengths, &ce}}) {
    const LinearFit f = fit_alpha_beta(*xs, *ts);
    // A slope of 0 (flat times: noise) would fail validation; 1e-15 s per element is below any
    // real kernel.
    r.row_kernels[name] = {f.a, f.b > 0 ? f.b : 1e-15};
  }
}

}  // namespace

KernelRates measure_kernel_rates(const std::vector<int64_t>& gemm_sizes,
                                 int64_t elementwise_elements) {
  for (size_t i = 0; i < gemm_sizes.size(); ++i) {
    if (gemm_sizes[i] < 1 || gemm_sizes[i] > 1024 ||
        (i > 0 && gemm_sizes[i] <= gemm_sizes[i - 1])) {
      throw InvalidArgumentError("GEMM size " + std::to_string(gemm_sizes[i]) +
                                 " (expected strictly increasing sizes in 1..1024)");
    }
  }
  if (elementwise_elements < 1024 || elementwise_elements > (int64_t{1} << 20)) {
    throw InvalidArgumentError("elementwise elements " + std::to_string(elementwise_elements) +
                               " (expected 1024..2^20)");
  }
  Eigen::setNbThreads(1);
  // 32 MiB of inputs (16 times the largest GEMM's, 2 x 1024^2 floats) and 32 MiB of outputs:
  // far beyond the L2.
  OperandPool pool(int64_t{8} << 20);
  KernelRates r;
  r.gemm_sizes = gemm_sizes;
  for (int64_t m : gemm_sizes) {
    for (int64_t k : gemm_sizes) {
      for (int64_t n : gemm_sizes) {
        // Contiguous row-major operands of exactly (m, k) and (k, n), as the trainers' maps.
        const double s = best_seconds_per_call(
            [&] {
              CMap am(pool.in(m * k), m, k), bm(pool.in(k * n), k, n);
              Map cm(pool.out(m * n), m, n);
              cm.noalias() = am * bm;
            },
            3);
        // Warm: the same operands every call (the first, untimed call brings them in), as in a
        // step whose whole working set stays in the cache. Operands beyond the cache measure
        // about the cold rate.
        const float* wa = pool.in(m * k);
        const float* wb = pool.in(k * n);
        float* wc = pool.out(m * n);
        const double warm_s = best_seconds_per_call(
            [&] {
              CMap am(wa, m, k), bm(wb, k, n);
              Map cm(wc, m, n);
              cm.noalias() = am * bm;
            },
            3);
        const double flops =
            2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
        r.gemm_flops_per_second.push_back(flops / s);
        r.gemm_warm_flops_per_second.push_back(flops / warm_s);
      }
    }
  }
  measure_elementwise_rates(elementwise_elements, pool, r);
  r.validate("this_machine");
  return r;
}

std::vector<CopySweepPoint> measure_copy_sweep(uint64_t first_working_set_bytes,
                                               uint64_t last_working_set_bytes) {
  if (first_working_set_bytes == 0 || last_working_set_bytes < 2 * first_working_set_bytes) {
    throw InvalidArgumentError("copy sweep: working sets 2 x " +
                               std::to_string(first_working_set_bytes) + " .. " +
                               std::to_string(last_working_set_bytes) +
                               " bytes (expected a first size >= 1 and a last >= twice it)");
  }
  constexpr uint64_t kBytesPerSize = uint64_t{512} << 20;
  std::vector<std::byte> src(last_working_set_bytes / 2, std::byte{1}),
      dst(last_working_set_bytes / 2, std::byte{0});
  std::vector<CopySweepPoint> sweep;
  for (uint64_t ws = 2 * first_working_set_bytes; ws <= last_working_set_bytes; ws *= 2) {
    const uint64_t half = ws / 2;
    const uint64_t reps = std::max<uint64_t>(5, kBytesPerSize / half);
    double best = 1e30;
    for (uint64_t r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), half);
      best = std::min(best, seconds_since(t0));
      src[r % half] = dst[0];  // keep the copies live
    }
    sweep.push_back({ws, static_cast<double>(half) / best});
  }
  return sweep;
}

CopySweepPoint last_level_cache_from_sweep(const std::vector<CopySweepPoint>& sweep) {
  if (sweep.size() < 2 || !(sweep.front().bytes_per_second > 0)) return {};
  const double threshold = kLastLevelCacheEdge * sweep.front().bytes_per_second;
  std::vector<double> run;
  CopySweepPoint level;
  for (size_t i = 0; i + 1 < sweep.size(); ++i) {
    if (!(sweep[i].bytes_per_second >= threshold)) break;
    run.push_back(sweep[i].bytes_per_second);
    level.working_set_bytes = sweep[i].working_set_bytes;
  }
  if (run.empty() || run.size() + 1 == sweep.size()) return {};  // no edge before memory
  level.bytes_per_second = median_of(run);
  if (!(level.bytes_per_second >= kLastLevelCacheOverMemory * sweep.back().bytes_per_second)) {
    return {};
  }
  return level;
}

HardwareProfile measure_this_machine(uint64_t copy_bytes, int gemm_n) {
  // The GEMM table's sizes: powers of 2 that bracket the trainers' shapes (head dim 16, d_model
  // 64, 10 classes, up to 1024 tokens); larger shapes are priced at the 1024 rate (clamped).
  static const std::vector<int64_t> kKernelGemmSizes = {8, 16, 32, 64, 128, 256, 512, 1024};
  constexpr int64_t kKernelElements = 65536;  // 256 KiB of floats: in the L2 with the output
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
  // The last-level cache behind the L2: a sweep of copies from twice the L2 to 256 MiB, far
  // past this VM's L3 (the sysconf L3 size is the host's whole 508 MiB, not this guest's).
  constexpr uint64_t kSweepLastBytes = uint64_t{256} << 20;
  CopySweepPoint llc;
  std::vector<CopySweepPoint> sweep;
  if (cache_bytes_per_second > 0) {
    sweep = measure_copy_sweep(cache_bytes, kSweepLastBytes);
    llc = last_level_cache_from_sweep(sweep);
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
  p.host_cpus = usable_cpus();
  p.cache_bytes = cache_bytes_per_second > 0 ? cache_bytes : 0;
  p.cache_bytes_per_second = p.cache_bytes > 0 ? cache_bytes_per_second : 0.0;
  p.llc_bytes = llc.working_set_bytes;
  p.llc_bytes_per_second = llc.bytes_per_second;
  p.kernels = measure_kernel_rates(kKernelGemmSizes, kKernelElements);
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
       "measured: the CPUs of the process's affinity mask (sched_getaffinity); the virtual cores' "
       "threads share them"}};
  const std::string cold =
      "; inputs rotated through a 32 MiB pool (outputs through another), so that no call finds "
      "them in the L2 (as in a "
      "training step)";
  p.sources["kernels.gemm_flops_per_second"] =
      "measured: single-threaded Eigen f32 GEMMs of contiguous row-major (m, k) x (k, n) at every "
      "(m, k, n) in gemm_sizes^3, FLOP/s of the best of 3 batches of calls (each >= 0.2 ms of "
      "thread CPU time)" +
      cold;
  p.sources["kernels.gemm_warm_flops_per_second"] =
      "measured: the same GEMMs as kernels.gemm_flops_per_second, each right after its cold "
      "measurement, with the same operands in every call (warm: in the cache when they fit)";
  p.sources["kernels.elementwise_per_second.pass"] =
      "measured: Eigen y = 1.5 x + 0.5 over 65536 floats, elements per second (best of 5 "
      "batches)" +
      cold;
  p.sources["kernels.elementwise_per_second.transcendental"] =
      "measured: the trainers' GELU forward and backward (train/nn_kernels.h; one tanh "
      "each, Eigen's vectorised float tanh) over 65536 floats, transcendentals per second (best "
      "of 5 batches)" +
      cold;
  p.sources["kernels.row_kernels"] =
      "measured: the trainers' kernels (train/nn_kernels.h) on rows of 16..1024 elements "
      "(about 65536 per call; best of 5 batches): layer_norm forward + backward, softmax one "
      "causal attention block forward + backward per row (16..256), cross_entropy softmax "
      "cross-entropy per row; seconds per row fitted to seconds_per_row + seconds_per_element x "
      "length by least squares on relative residuals" +
      cold;
  if (p.cache_bytes > 0) {
    p.sources["cache_bytes"] = "measured: L2 per CPU (sysconf(_SC_LEVEL2_CACHE_SIZE))";
    p.sources["cache_bytes_per_second"] = "measured: best of " + std::to_string(kCacheCopies) +
                                          " warm memcpy of " + format_bytes(cache_copy_bytes) +
                                          " (a quarter of the L2; bytes copied per second)";
  }
  if (p.llc_bytes > 0) {
    std::string points;
    for (const CopySweepPoint& pt : sweep) {
      char one[64];
      std::snprintf(one, sizeof one, "%s%s %.3g", points.empty() ? "" : ", ",
                    format_bytes(pt.working_set_bytes).c_str(), pt.bytes_per_second);
      points += one;
    }
    p.sources["llc_bytes"] =
        "measured: the largest working set (source + destination) of a copy sweep from twice "
        "the L2 before the bandwidth first falls under 60% of the sweep's first point (the "
        "level's edge); bytes copied per second by working set: " +
        points;
    p.sources["llc_bytes_per_second"] =
        "measured: the median bandwidth of the sweep's sizes up to llc_bytes (bytes copied per "
        "second)";
  }
  p.validate();
  return p;
}

}  // namespace vtpu
