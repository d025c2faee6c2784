// Google Benchmark: the digits MLP trainer's GEMMs (train/mlp_tp_trainer.cc, batch 64, 64
// inputs, 64 hidden units, 10 classes) as the trainer writes them, next to the plain A * B that
// `vtpu bench hardware` measures for the cost model's GEMM table (bench/kernel_bench.cc), at
// the same (m, k, n). The question: does a GEMM with a transposed operand, such as the
// weight gradient X^T dZ, run at the table's A * B rate? All operands are row-major Eigen maps
// over contiguous floats, single-threaded, and warm (the same operands every iteration, as the
// table's warm rate and a training step whose working set stays cached). BM_ThreadCpuClock times
// the clock read the table's measurement takes after every call.
//
//   build/bench/vtpu_gemm_transpose_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true    (one command line)
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <ctime>
#include <random>
#include <vector>

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMatrix>;
using CMap = Eigen::Map<const RowMatrix>;

/// How the (m, k) x (k, n) product reads its operands.
enum Form : int64_t {
  kPlain = 0,       // C = A B, A stored (m, k), B stored (k, n): the table's GEMM
  kTransposeA = 1,  // C = A^T B, A stored (k, m): the weight gradients X^T dZ1, A1^T dZ2
  kTransposeB = 2,  // C = A B^T, B stored (n, k): the input gradient dZ2 W2^T
};

std::vector<float> random_floats(int64_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = d(gen);
  return v;
}

/// Arguments: m, k, n, form.
void BM_Gemm(benchmark::State& state) {
  Eigen::setNbThreads(1);
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const auto form = static_cast<Form>(state.range(3));
  const std::vector<float> a = random_floats(m * k, 1), b = random_floats(k * n, 2);
  std::vector<float> c(static_cast<size_t>(m * n));
  Map cm(c.data(), m, n);
  // The same product in every form: the transposed forms store A^T or B^T.
  const RowMatrix want = CMap(a.data(), m, k) * CMap(b.data(), k, n);
  const RowMatrix at = CMap(a.data(), m, k).transpose();
  const RowMatrix bt = CMap(b.data(), k, n).transpose();
  const auto run = [&] {
    switch (form) {
      case kPlain:
        cm.noalias() = CMap(a.data(), m, k) * CMap(b.data(), k, n);
        break;
      case kTransposeA:
        cm.noalias() = CMap(at.data(), k, m).transpose() * CMap(b.data(), k, n);
        break;
      case kTransposeB:
        cm.noalias() = CMap(a.data(), m, k) * CMap(bt.data(), n, k).transpose();
        break;
    }
  };
  run();
  if ((cm - want).cwiseAbs().maxCoeff() > 1e-3f) state.SkipWithError("differs from A * B");
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * k * n),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// The MLP's five GEMMs per step on one core (batch 64): forward X W1 (64, 64, 64) and A1 W2
// (64, 64, 10); backward A1^T dZ2 (64, 64, 10, A transposed), dZ2 W2^T (64, 10, 64, B transposed)
// and X^T dZ1 (64, 64, 64, A transposed). Each with its plain A * B at the same (m, k, n).
BENCHMARK(BM_Gemm)
    ->ArgNames({"m", "k", "n", "form"})
    ->Args({64, 64, 64, kPlain})
    ->Args({64, 64, 64, kTransposeA})
    ->Args({64, 64, 10, kPlain})
    ->Args({64, 64, 10, kTransposeA})
    ->Args({64, 10, 64, kPlain})
    ->Args({64, 10, 64, kTransposeB})
    // Table grid points around n = 10 and k = 10 (the table has 8 and 16, interpolated between).
    ->Args({64, 64, 8, kPlain})
    ->Args({64, 64, 16, kPlain})
    ->Args({64, 8, 64, kPlain})
    ->Args({64, 16, 64, kPlain})
    // Batch 32 (2 cores): the row count halves.
    ->Args({32, 64, 64, kPlain})
    ->Args({64, 32, 64, kTransposeA})
    ->Args({64, 32, 64, kPlain});

/// One read of the thread's CPU clock, which the kernel-rate table's best_seconds_per_call
/// (bench/kernel_bench.cc) takes after every call: compare with the GEMM times above.
void BM_ThreadCpuClock(benchmark::State& state) {
  timespec t{};
  for (auto _ : state) {
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    benchmark::DoNotOptimize(t);
  }
}
BENCHMARK(BM_ThreadCpuClock);

}  // namespace

BENCHMARK_MAIN();
