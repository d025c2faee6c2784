// Google Benchmark: the auto-sharding planner (planner/auto_planner.h) on a chain of identical
// dense layers (4 -> 4 features, batch 8, f32, Adam) on a 2x4 mesh with the v5e profile, far from
// and near the HBM limit. Near the limit the DP's frontier holds a
// label for every count of split layers that can still fit, O(L) labels per layer, and the chain
// costs O(L^2 log L); far from it, a few labels per layer. Each run checks that a candidate wins
// and that its HBM is within the limit.
//
//   build/bench/vtpu_planner_bench --benchmark_filter='NearTheLimit'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/cost_model.h"
#include "vtpu/planner/model_graph.h"

namespace {

vtpu::ModelGraph dense_chain(int64_t n) {
  std::string layers;
  for (int64_t i = 0; i < n; ++i) {
    layers += std::string(i ? "," : "") + R"({"name": "fc)" + std::to_string(i) +
              R"(", "kind": "dense", "in": 4, "out": 4})";
  }
  return vtpu::ModelGraph::parse(R"({"name": "chain", "batch": 8, "layers": [)" + layers + "]}");
}

/// Arguments: layers, HBM limit in bytes per core (0: the profile's 16 GiB).
void BM_PlanDenseChain(benchmark::State& state) {
  const vtpu::ModelGraph m = dense_chain(state.range(0));
  const uint64_t limit = static_cast<uint64_t>(state.range(1));
  const vtpu::CostModel v5e(vtpu::HardwareProfile::get("v5e"));
  for (auto _ : state) {
    const vtpu::AutoShardingPlan p =
        vtpu::plan_auto_sharding(m, {2, 4}, {"data", "model"}, v5e, limit);
    if (p.winner < 0 ||
        (limit != 0 &&
         p.candidates[static_cast<size_t>(p.winner)].arena_bytes_per_core() > limit)) {
      state.SkipWithError("no winner within the limit");
      break;
    }
    benchmark::DoNotOptimize(p.winner);
  }
}
// Far from the limit (the 16 GiB default), then near it: about 200 bytes per layer, the limit
// that 1,000 layers just fit with tensor parallelism (vtpu plan ... --hbm-bytes 200K).
BENCHMARK(BM_PlanDenseChain)
    ->Name("BM_PlanDenseChain/FarFromTheLimit")
    ->Args({1000, 0})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlanDenseChain)
    ->Name("BM_PlanDenseChain/NearTheLimit")
    ->Args({250, 50 << 10})
    ->Args({500, 100 << 10})
    ->Args({1000, 200 << 10})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
