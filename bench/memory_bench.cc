// Google Benchmark of the allocator policies, registered for every name in
// known_allocator_policies(), so a new policy is measured without touching this file.
//
//   BM_AllocFreePair/<policy>/<live>       one iteration = free a random live buffer, then
//                                          allocate a new one (lognormal sizes, median 16 KiB,
//                                          sigma 1.5), holding <live> buffers in a 16 GiB range
//   BM_ArenaAllocFreePair/<policy>/<live>  the same through a metadata-only HbmArena
//   BM_TraceReplay/<policy>/<trace>        one iteration = replay a real trace from
//                                          $VTPU_TRACE_DIR (default ../shared/traces) on a fresh
//                                          policy; time per alloc or free op
//   BM_DependentLoad/<KiB>                 one iteration = one load whose address comes from the
//                                          previous one, over <KiB> of 64-byte lines in random
//                                          cyclic order: what one cache miss costs on this machine
//                                          at a given metadata footprint (BFC and TLSF keep a
//                                          32-byte record per chunk and 26-51 B of index per
//                                          chunk in use: ~0.07 MiB at 1k live buffers, ~0.6 MiB
//                                          at 10k, 7-8 MiB at 100k). A free+alloc pair of a
//                                          random buffer cannot cost less than its chain of
//                                          dependent loads (the caller's handle, the index
//                                          bucket, the chunk record), whatever the policy.
//
// Every run checks its results: an allocation that fails stops the benchmark with an error, and
// the policy's check_consistency() runs after the timed loop (the arena's for the arena form).
//
//   build/bench/vtpu_memory_bench --benchmark_filter='AllocFreePair/bfc'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/units.h"
#include "memory/alloc_workload.h"
#include "memory/allocator_policy.h"
#include "memory/hbm_arena.h"
#include "memory/policy_benchmark.h"
#include "memory/trace.h"

namespace {

constexpr uint64_t kCapacityBytes = 16 * vtpu::kGiB;
constexpr size_t kRingSize = size_t{1} << 16;  // pre-drawn (victim, size) pairs, cycled
constexpr uint64_t kSeed = 1;

// Victims and sizes drawn before timing, so the loop measures the allocator, not the engine.
struct PairSchedule {
  std::vector<uint64_t> fill_sizes;
  std::vector<uint32_t> victims;
  std::vector<uint64_t> sizes;

  explicit PairSchedule(uint64_t live) {
    const vtpu::SizeSampler sampler{vtpu::SizeOptions{}};
    std::mt19937_64 rng(kSeed);
    fill_sizes.resize(live);
    for (uint64_t& s : fill_sizes) s = sampler.sample(rng);
    victims.resize(kRingSize);
    sizes.resize(kRingSize);
    for (size_t i = 0; i < kRingSize; ++i) {
      victims[i] = static_cast<uint32_t>(vtpu::uniform_uint64(rng, 0, live - 1));
      sizes[i] = sampler.sample(rng);
    }
  }
};

void BM_AllocFreePair(benchmark::State& state, const std::string& policy_name) {
  const auto live = static_cast<uint64_t>(state.range(0));
  const PairSchedule schedule(live);
  auto policy = vtpu::make_allocator_policy(policy_name, kCapacityBytes);
  std::vector<uint64_t> offsets(live);
  for (uint64_t i = 0; i < live; ++i) {
    auto a = policy->allocate(schedule.fill_sizes[i]);
    if (!a) {
      state.SkipWithError("out of memory during the fill");
      return;
    }
    offsets[i] = a->offset;
  }
  size_t k = 0;
  for (auto _ : state) {
    const size_t r = k++ & (kRingSize - 1);
    uint64_t& slot = offsets[schedule.victims[r]];
    policy->free(slot);
    const std::optional<vtpu::PolicyAllocation> a = policy->allocate(schedule.sizes[r]);
    if (!a) {
      state.SkipWithError("out of memory");
      break;
    }
    slot = a->offset;
  }
  policy->check_consistency();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2);  // allocs + frees
  state.SetLabel("free+alloc pair");
}

void BM_ArenaAllocFreePair(benchmark::State& state, const std::string& policy_name) {
  const auto live = static_cast<uint64_t>(state.range(0));
  const PairSchedule schedule(live);
  vtpu::ArenaOptions o;
  o.capacity_bytes = kCapacityBytes;
  o.policy = policy_name;
  o.backing = false;
  vtpu::HbmArena arena(o);
  std::vector<vtpu::BufferId> ids(live);
  try {
    for (uint64_t i = 0; i < live; ++i) ids[i] = arena.allocate(schedule.fill_sizes[i]);
    size_t k = 0;
    for (auto _ : state) {
      const size_t r = k++ & (kRingSize - 1);
      vtpu::BufferId& slot = ids[schedule.victims[r]];
      arena.free(slot);
      slot = arena.allocate(schedule.sizes[r]);
    }
  } catch (const vtpu::OutOfMemoryError& e) {
    state.SkipWithError(e.what());
    return;
  }
  arena.check_consistency();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2);
  state.SetLabel("free+alloc pair via HbmArena");
}

void BM_TraceReplay(benchmark::State& state, const std::string& policy_name,
                    std::shared_ptr<const vtpu::ReplayProgram> program) {
  vtpu::ReplayOptions o;
  o.capacity_bytes = kCapacityBytes;
  o.measure_latency = false;
  o.min_throughput_seconds = 0;  // one pass per iteration: Google Benchmark does the repeating
  for (auto _ : state) {
    const vtpu::ReplayResult r = vtpu::replay_benchmark(policy_name, *program, o);
    if (r.num_ooms != 0) {
      state.SkipWithError("out of memory during the replay");
      break;
    }
    state.SetIterationTime(r.timed_seconds);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(program->ops().size()));
  state.SetLabel("alloc or free op");
}

void BM_DependentLoad(benchmark::State& state) {
  struct alignas(64) Line {
    const Line* next;
  };
  const auto num_lines = static_cast<size_t>(state.range(0)) * 1024 / sizeof(Line);
  std::vector<size_t> order(num_lines);
  for (size_t i = 0; i < num_lines; ++i) order[i] = i;
  std::mt19937_64 rng(kSeed);
  std::shuffle(order.begin() + 1, order.end(), rng);  // one cycle through every line
  std::vector<Line> lines(num_lines);
  for (size_t i = 0; i < num_lines; ++i) lines[order[i]].next = &lines[order[(i + 1) % num_lines]];
  const Line* p = &lines[0];
  for (size_t i = 0; i < num_lines; ++i) p = p->next;  // warm: every line once
  if (p != &lines[0]) {
    state.SkipWithError("the chase is not one cycle through every line");
    return;
  }
  for (auto _ : state) {
    p = p->next;
    benchmark::DoNotOptimize(p);
  }
  state.SetLabel("dependent load");
}

std::filesystem::path trace_dir() {
  if (const char* dir = std::getenv("VTPU_TRACE_DIR")) return dir;
  return std::filesystem::path(VTPU_SHARED_DIR) / "traces";
}

void register_benchmarks() {
  for (const std::string& policy : vtpu::known_allocator_policies()) {
    for (auto* b : {benchmark::RegisterBenchmark(("BM_AllocFreePair/" + policy).c_str(),
                                                 BM_AllocFreePair, policy),
                    benchmark::RegisterBenchmark(("BM_ArenaAllocFreePair/" + policy).c_str(),
                                                 BM_ArenaAllocFreePair, policy)}) {
      b->Arg(1000)->Arg(10000)->Arg(100000);  // live buffers
    }
  }
  benchmark::RegisterBenchmark("BM_DependentLoad", BM_DependentLoad)
      ->Arg(64)
      ->Arg(256)
      ->Arg(1024)
      ->Arg(8192)
      ->Arg(32768);  // KiB
  // Traces are read once; a missing directory just leaves these benchmarks out.
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(trace_dir(), ec)) {
    if (entry.path().extension() == ".jsonl") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    const vtpu::Trace trace = vtpu::read_trace(file.string());
    auto program = std::make_shared<const vtpu::ReplayProgram>(trace.events, file.string());
    for (const std::string& policy : vtpu::known_allocator_policies()) {
      benchmark::RegisterBenchmark(
          ("BM_TraceReplay/" + policy + "/" + file.stem().string()).c_str(), BM_TraceReplay, policy,
          program)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
