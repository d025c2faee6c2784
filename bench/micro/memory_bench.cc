// Google Benchmark of the allocator policies, registered for every name in
// known_allocator_policies(), so a new policy is measured without touching this file.
//
//   BM_AllocFreePair/<policy>/<live>       one iteration = free a random live buffer, then
//                                          allocate a new one (lognormal sizes, median 16 KiB,
//                                          sigma 1.5), holding <live> buffers in a 16 GiB range
//   BM_ArenaAllocFreePair/<policy>/<live>  the same through a metadata-only HbmArena
//   BM_TraceReplay/<policy>/<trace>        one iteration = replay a real trace from
//                                          $VTPU_TRACE_DIR (default data/traces) on a fresh
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
//   BM_PlanHeap/<workload>/<events>        one iteration = plan_heap on one core's stream of a
//                                          seeded stress workload (both global orders, the
//                                          plan validated), as `vtpu stress --allocators planned`
//                                          does before its replay; time per plan, and placements
//                                          (2 per buffer) per second
//   BM_StressReplay/<policy>/<workload>    one iteration = a CoreReplayer's whole replay of 1M
//                                          events of a seeded stress workload, metadata-only,
//                                          with its metrics (fragmentation read after every
//                                          event, sampled latencies, timeline, worst moment),
//                                          as `vtpu stress --load off --capacity-search off`;
//                                          items = events, so items_per_second is the replay
//                                          rate issue 5 asks >= 10M/s of
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

#include "vtpu/common/units.h"
#include "vtpu/stress/alloc_workload.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/heap_planner.h"
#include "vtpu/bench/policy_benchmark.h"
#include "vtpu/stress/stress_replay.h"
#include "vtpu/stress/stress_workload.h"
#include "vtpu/memory/trace.h"

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

// Core 0's stream of a seeded stress workload (seed 1, the CLI's defaults otherwise).
std::shared_ptr<const vtpu::CoreStream> stress_stream(const std::string& workload,
                                                      uint64_t events) {
  vtpu::StressWorkloadOptions o;
  o.name = workload;
  o.events_per_core = events;
  const std::vector<vtpu::TraceEvent> trace = vtpu::make_stress_workload(o, 0);
  std::vector<vtpu::CoreStream> streams = vtpu::compile_core_streams(trace, 1, workload);
  return std::make_shared<const vtpu::CoreStream>(std::move(streams.at(0)));
}

void BM_PlanHeap(benchmark::State& state, const std::string& workload) {
  const auto stream = stress_stream(workload, static_cast<uint64_t>(state.range(0)));
  std::shared_ptr<const vtpu::HeapPlan> plan;
  for (auto _ : state) {
    plan = vtpu::plan_for_stream(*stream);
    benchmark::DoNotOptimize(plan.get());
  }
  if (plan->size() != stream->num_slots() || plan->heap_bytes() < plan->peak_live_bytes()) {
    state.SkipWithError("the plan does not hold every buffer above its peak live bytes");
    return;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(2 * plan->size()));  // placements, both orders
  state.counters["buffers"] = static_cast<double>(plan->size());
  state.counters["heap_over_peak_live"] =
      static_cast<double>(plan->heap_bytes()) / static_cast<double>(plan->peak_live_bytes());
  state.SetLabel("placement (2 per buffer)");
}

void BM_StressReplay(benchmark::State& state, const std::string& policy,
                     const std::string& workload) {
  constexpr uint64_t kEvents = 1000000;
  const auto stream = stress_stream(workload, kEvents);
  vtpu::StressReplayOptions o;  // 16 GiB, metadata-only, the CLI's metrics
  o.policy = policy;
  if (policy == "planned") o.heap_plan = vtpu::plan_for_stream(*stream);  // not timed
  for (auto _ : state) {
    vtpu::CoreReplayer replayer(*stream, o);
    if (!replayer.run_all()) {
      state.SkipWithError("stopped at an out-of-memory error");
      return;
    }
    const vtpu::StressCoreMetrics m = replayer.finish();
    if (m.events != stream->ops.size() || m.false_ooms + m.true_ooms != 0) {
      state.SkipWithError("the replay skipped events or ran out of memory");
      return;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kEvents));
  state.SetLabel("event (alloc or free) with its metrics");
}

std::filesystem::path trace_dir() {
  if (const char* dir = std::getenv("VTPU_TRACE_DIR")) return dir;
  return VTPU_TRACE_DIR;
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
  for (const char* workload : {"lognormal", "training_step", "kv_cache"}) {
    benchmark::RegisterBenchmark((std::string("BM_PlanHeap/") + workload).c_str(), BM_PlanHeap,
                                 std::string(workload))
        ->Arg(100000)
        ->Arg(1000000)  // events
        ->Unit(benchmark::kMillisecond);
    for (const char* policy : {"bfc", "tlsf", "planned"}) {
      benchmark::RegisterBenchmark(
          (std::string("BM_StressReplay/") + policy + "/" + workload).c_str(), BM_StressReplay,
          std::string(policy), std::string(workload))
          ->Unit(benchmark::kMillisecond);
    }
  }
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
