// The trainers' Adam update (train/adam.cc, compiled with -fno-math-errno so that GCC
// vectorises its sqrt and divisions) against the same loop compiled with the default flags here
// (std::sqrt may set errno, so GCC 12 keeps it scalar), on the
// same vectors. Run:
//   build/bench/vtpu_optimizer_bench --benchmark_filter=Adam
// and compare the two rows of one size: bytes_per_second counts the 7 f32 words read or written
// per element (p, g, m, v read; p, m, v written).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "vtpu/train/adam.h"

namespace {

using vtpu::AdamOptions;

// train/adam.cc's loop, in a translation unit with the default -fmath-errno.
void adam_scalar_loop(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                      std::vector<float>& v, int64_t t, float lr, const AdamOptions& o) {
  const float c1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(o.beta1), t));
  const float c2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(o.beta2), t));
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * g[i];
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * g[i] * g[i];
    p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + o.eps);
  }
}

template <bool kVectorised>
void BM_Adam(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.37f * static_cast<float>(i));
    g[i] = 0.01f * std::cos(1.1f * static_cast<float>(i));
  }
  const AdamOptions o;
  int64_t t = 0;
  for (auto _ : state) {
    ++t;
    if constexpr (kVectorised) {
      vtpu::adam_update(p, g, m, v, t, 1e-3f, o);
    } else {
      adam_scalar_loop(p, g, m, v, t, 1e-3f, o);
    }
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(7 * sizeof(float) * n));
}

// 4096 elements (in L1/L2), 120704 (the transformer example's parameters), 1 Mi (beyond L2).
BENCHMARK(BM_Adam<true>)->Name("BM_AdamUpdate")->Arg(4096)->Arg(120704)->Arg(1 << 20);
BENCHMARK(BM_Adam<false>)->Name("BM_AdamLoopWithErrno")->Arg(4096)->Arg(120704)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
