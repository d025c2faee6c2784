// Google Benchmark: a named psum inside shard_map against the same Communicator::all_reduce on the
// same communicator (the mesh's, for axis 'i'), f32 sum of 8 bytes over 8 cores. The named form
// adds the axis-name lookup (cached per core) and allocates its result, so it is compared with
// the raw call into a new buffer each time; the donated form (psum(std::move(x), ...)) reduces in
// place and is compared with the raw call into a buffer made once. One run_spmd per iteration
// runs kInner collectives back to back, so the launch cost is amortised; every result is checked.
// A fixed iteration count: the reported time is per collective, a kInner-th of the wall time.
//
//   build/bench/vtpu_named_psum_bench --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//   (one command line)
#include <benchmark/benchmark.h>

#include <chrono>
#include <stdexcept>
#include <vector>

#include "vtpu/sharding/shard_map.h"

namespace {

constexpr int kCores = 8;
constexpr int kInner = 200;
constexpr int64_t kElements = 2;  // 8 bytes of f32

enum class Form { kCommunicator, kCommunicatorNewBuffer, kNamed, kNamedDonated };

void check(std::span<const float> v) {
  for (float x : v) {
    if (x != static_cast<float>(kCores)) throw std::runtime_error("wrong psum result");
  }
}

void run(benchmark::State& state, Form form) {
  vtpu::RuntimeOptions o;
  o.num_cores = kCores;
  o.hbm_bytes_per_core = uint64_t{64} << 20;
  vtpu::Runtime rt(o);
  vtpu::DeviceMesh mesh = vtpu::make_mesh(rt, {kCores}, {"i"});
  auto f = vtpu::shard_map(mesh, {}, {}, [&](vtpu::ShardMapContext& ctx, auto) {
    const float ones[kElements] = {1.0f, 1.0f};
    vtpu::LocalArray x = vtpu::LocalArray::from_host<float>(ctx.core(), ones, {kElements});
    vtpu::LocalArray out =
        vtpu::LocalArray::empty(ctx.core(), vtpu::ElementType::kF32, {kElements});
    vtpu::Communicator& comm = ctx.communicator("i");
    const int64_t shape[] = {kElements};
    for (int k = 0; k < kInner; ++k) {
      switch (form) {
        case Form::kCommunicator:
          comm.all_reduce<float>(ctx.core(), x.data<float>(), out.data<float>());
          break;
        case Form::kCommunicatorNewBuffer: {
          // The raw call doing what psum(x) does: a new result buffer in HBM each time.
          vtpu::DeviceBuffer b = ctx.core().allocate_array(vtpu::ElementType::kF32, shape, "out");
          comm.all_reduce<float>(ctx.core(), x.data<float>(), b.as<float>());
          out = vtpu::LocalArray::adopt(vtpu::ElementType::kF32, {kElements}, std::move(b));
          break;
        }
        case Form::kNamed:
          out = ctx.psum(x, "i");
          break;
        case Form::kNamedDonated:
          std::ranges::fill(x.data<float>(), 1.0f);
          x = ctx.psum(std::move(x), "i");
          break;
      }
    }
    check(form == Form::kNamedDonated ? x.data<float>() : out.data<float>());
    return std::vector<vtpu::LocalArray>{};
  });
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s / kInner);
  }
}

void BM_CommunicatorAllReduce(benchmark::State& state) { run(state, Form::kCommunicator); }
void BM_CommunicatorAllReduceNewBuffer(benchmark::State& state) {
  run(state, Form::kCommunicatorNewBuffer);
}
void BM_NamedPsum(benchmark::State& state) { run(state, Form::kNamed); }
void BM_NamedPsumDonated(benchmark::State& state) { run(state, Form::kNamedDonated); }

BENCHMARK(BM_CommunicatorAllReduce)->Iterations(20)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CommunicatorAllReduceNewBuffer)
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NamedPsum)->Iterations(20)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NamedPsumDonated)->Iterations(20)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
