// Google Benchmark of the pipelined kernels (runtime/pallas_kernels.h) on one virtual core, next
// to Eigen on the same shapes: the tiled matmul with 1, 2 and 3 VMEM buffers per operand against
// a single-threaded Eigen GEMM, and the row softmax against an Eigen softmax. Each case checks its
// result against Eigen once before timing (SkipWithError on a mismatch) and reports FLOP/s of
// wall time (UseRealTime: the DMA engine works on its own thread).
// Shapes are small so that the whole program runs in seconds; `vtpu bench kernel matmul` is the
// configurable command-line benchmark.
//
//   build/bench/vtpu_kernel_bench --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <random>

#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/pallas_kernels.h"
#include "vtpu/runtime/virtual_core.h"

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMatrix>;

constexpr int64_t kM = 512, kK = 512, kN = 128;  // matmul (kM, kK) x (kK, kN)
constexpr int64_t kBm = 128, kBk = 128, kBn = 128;
constexpr int64_t kRows = 1024, kCols = 512, kBlockRows = 64;  // softmax

struct Matrix {
  vtpu::DeviceBuffer buf;
  vtpu::HbmMatrix hbm;
  Map view() const { return Map(buf.as<float>().data(), hbm.rows, hbm.cols); }
};

Matrix make(vtpu::VirtualCore& core, int64_t rows, int64_t cols, unsigned seed) {
  Matrix m{vtpu::DeviceBuffer(core.hbm_shared(), static_cast<uint64_t>(rows * cols) * 4, "m"), {}};
  m.hbm = vtpu::HbmMatrix{&m.buf, rows, cols};
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& v : m.buf.as<float>()) v = d(gen);
  return m;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_PallasMatmul(benchmark::State& state) {
  Eigen::setNbThreads(1);
  vtpu::VirtualCore core(0, 64 << 20, vtpu::ArenaLimit::fraction(1.0), vtpu::ArenaOptions{});
  Matrix a = make(core, kM, kK, 1), b = make(core, kK, kN, 2), c = make(core, kM, kN, 3);
  vtpu::MatmulOptions o;
  o.bm = kBm;
  o.bk = kBk;
  o.bn = kBn;
  o.num_buffers = static_cast<int>(state.range(0));
  vtpu::pallas_matmul(core, a.hbm, b.hbm, c.hbm, o);
  const RowMatrix want = a.view() * b.view();
  if ((c.view() - want).cwiseAbs().maxCoeff() > 1e-3f) state.SkipWithError("differs from Eigen");
  for (auto _ : state) {
    vtpu::pallas_matmul(core, a.hbm, b.hbm, c.hbm, o);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * kM * kN * kK);
}
BENCHMARK(BM_PallasMatmul)
    ->ArgName("buffers")
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_EigenGemm(benchmark::State& state) {
  Eigen::setNbThreads(1);
  vtpu::VirtualCore core(0, 64 << 20, vtpu::ArenaLimit::fraction(1.0), vtpu::ArenaOptions{});
  Matrix a = make(core, kM, kK, 1), b = make(core, kK, kN, 2);
  RowMatrix c(kM, kN);
  for (auto _ : state) {
    c.noalias() = a.view() * b.view();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * kM * kN * kK);
}
BENCHMARK(BM_EigenGemm)->Unit(benchmark::kMicrosecond)->UseRealTime();

RowMatrix eigen_softmax(const RowMatrix& x) {
  RowMatrix y(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const Eigen::ArrayXf e = (x.row(r).array() - x.row(r).maxCoeff()).exp();
    y.row(r) = (e / e.sum()).matrix().transpose();
  }
  return y;
}

void BM_PallasSoftmax(benchmark::State& state) {
  vtpu::VirtualCore core(0, 64 << 20, vtpu::ArenaLimit::fraction(1.0), vtpu::ArenaOptions{});
  Matrix x = make(core, kRows, kCols, 4), y = make(core, kRows, kCols, 5);
  const int buffers = static_cast<int>(state.range(0));
  vtpu::pallas_softmax(core, x.hbm, y.hbm, kBlockRows, buffers);
  if ((y.view() - eigen_softmax(x.view())).cwiseAbs().maxCoeff() > 1e-5f)
    state.SkipWithError("differs from Eigen");
  for (auto _ : state) {
    vtpu::pallas_softmax(core, x.hbm, y.hbm, kBlockRows, buffers);
    benchmark::ClobberMemory();
  }
  set_flops(state, 5.0 * kRows * kCols);  // max, subtract, exp, sum, divide per element
}
BENCHMARK(BM_PallasSoftmax)
    ->ArgName("buffers")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_EigenSoftmax(benchmark::State& state) {
  vtpu::VirtualCore core(0, 64 << 20, vtpu::ArenaLimit::fraction(1.0), vtpu::ArenaOptions{});
  Matrix x = make(core, kRows, kCols, 4);
  const RowMatrix in = x.view();
  for (auto _ : state) {
    RowMatrix y = eigen_softmax(in);
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state, 5.0 * kRows * kCols);
}
BENCHMARK(BM_EigenSoftmax)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
