// Google Benchmark of the all-reduce with the Communicator's automatic algorithm choice
// (recursive doubling up to Communicator::kSmallMessageBytes, the ring above; the label names it):
// f32 sum over N virtual cores, one run_spmd per
// benchmark iteration running kInner collectives back to back, so the launch cost is amortised.
// Reports time per all-reduce, and algbw / busbw with nccl-tests' definitions
// (algbw = bytes / time, busbw = algbw * 2(n-1)/n). Every result is checked against n * 1.0.
//
//   build/bench/vtpu_all_reduce_bench --benchmark_filter='cores:8'
#include <benchmark/benchmark.h>

#include <chrono>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/runtime/runtime.h"

namespace {

constexpr int kInner = 20;

void BM_AllReduce(benchmark::State& state) {
  const int cores = static_cast<int>(state.range(0));
  const auto bytes = static_cast<uint64_t>(state.range(1));
  vtpu::RuntimeOptions o;
  o.num_cores = cores;
  o.hbm_bytes_per_core = 1ull << 30;
  vtpu::Runtime rt(o);
  std::vector<int> group(static_cast<size_t>(cores));
  std::iota(group.begin(), group.end(), 0);
  vtpu::Communicator comm(rt, group);
  std::vector<vtpu::DeviceBuffer> bufs(static_cast<size_t>(cores));
  rt.run_spmd([&](vtpu::CoreContext& ctx) {
    bufs[static_cast<size_t>(ctx.core_id())] = ctx.allocate(bytes, "bench");
  });
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    rt.run_spmd([&](vtpu::CoreContext& ctx) {
      auto x = bufs[static_cast<size_t>(ctx.core_id())].as<float>();
      for (int k = 0; k < kInner; ++k) {
        std::fill(x.begin(), x.end(), 1.0f);
        comm.all_reduce<float>(ctx, x);
      }
      for (float v : x)
        if (v != static_cast<float>(cores)) throw std::runtime_error("wrong all-reduce result");
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s / kInner);
  }
  const double n = cores;
  state.counters["algbw_GBps"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw_GBps"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9 * 2.0 * (n - 1) / n,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("f32 sum, " + std::string(vtpu::algorithm_name(comm.select_algorithm(bytes))));
}

BENCHMARK(BM_AllReduce)
    ->ArgNames({"cores", "bytes"})
    ->ArgsProduct({{2, 4, 8}, {8, 64 << 10, 1 << 20, 8 << 20}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
