// Tests for bench/policy_benchmark.h: percentile arithmetic on known data, event compilation,
// and replays whose counts (samples, ops, OOMs, skipped frees, peak bytes) are predicted
// independently. Timings themselves are only checked for sanity: performance lives in bench/.
#include "vtpu/bench/policy_benchmark.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/memory/bfc_policy.h"

namespace vtpu {
namespace {

TraceEvent alloc(double t, uint64_t id, uint64_t bytes, int core = 0) {
  TraceEvent e;
  e.t_us = t;
  e.core = core;
  e.op = TraceOp::kAlloc;
  e.id = id;
  e.bytes = bytes;
  return e;
}

TraceEvent free_of(double t, uint64_t id, int core = 0) {
  TraceEvent e;
  e.t_us = t;
  e.core = core;
  e.op = TraceOp::kFree;
  e.id = id;
  return e;
}

void expect_sane(const ReplayResult& r) {
  EXPECT_LE(r.latency.median_ns, r.latency.p99_ns);
  EXPECT_LE(r.latency.p99_ns, r.latency.p9999_ns);
  EXPECT_LE(r.latency.p9999_ns, r.latency.max_ns);
  EXPECT_GE(r.latency.median_ns, 0);
  EXPECT_GT(r.ops_per_second, 0);
  EXPECT_GT(r.timed_seconds, 0);
  EXPECT_GT(r.clock_overhead_ns, 0);
}

TEST(PolicyBenchmarkTest, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 10000; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  const LatencySummary s = summarize_latencies(v);
  EXPECT_EQ(s.samples, 10000u);
  EXPECT_EQ(s.median_ns, 5000);  // ceil(0.5 * 10000) = 5000th smallest
  EXPECT_EQ(s.p99_ns, 9900);
  EXPECT_EQ(s.p9999_ns, 9999);
  EXPECT_EQ(s.max_ns, 10000);
  EXPECT_DOUBLE_EQ(s.mean_ns, 5000.5);
  const LatencySummary one = summarize_latencies({7});
  EXPECT_EQ(one.median_ns, 7);
  EXPECT_EQ(one.p9999_ns, 7);
  const LatencySummary none = summarize_latencies({});
  EXPECT_EQ(none.samples, 0u);
  EXPECT_EQ(none.max_ns, 0);
  // Three samples: the median is the 2nd, p99 the 3rd.
  const LatencySummary three = summarize_latencies({30, 10, 20});
  EXPECT_EQ(three.median_ns, 20);
  EXPECT_EQ(three.p99_ns, 30);
}

TEST(PolicyBenchmarkTest, ClockOverheadIsPlausible) {
  const double ns = measure_clock_overhead_ns(1000);
  EXPECT_GT(ns, 0);
  EXPECT_LT(ns, 100000);
}

TEST(PolicyBenchmarkTest, ProgramSkipsOomAndDefragmentAndGivesEveryAllocASlot) {
  std::vector<TraceEvent> events = {alloc(0, 1, 100), alloc(1, 2, 200)};
  TraceEvent oom = alloc(2, 3, 1 << 30);
  oom.op = TraceOp::kOom;
  events.push_back(oom);
  TraceEvent defrag;
  defrag.t_us = 3;
  defrag.op = TraceOp::kDefragment;
  events.push_back(defrag);
  events.push_back(free_of(4, 1));
  events.push_back(alloc(5, 1, 300));  // id 1 again: a new slot
  events.push_back(alloc(5, 1, 400, /*core=*/7));
  const ReplayProgram p(events);
  EXPECT_EQ(p.num_events(), 7u);
  EXPECT_EQ(p.skipped_events(), 2u);
  EXPECT_EQ(p.num_slots(), 4u);
  ASSERT_EQ(p.ops().size(), 5u);
  EXPECT_EQ(p.ops()[2].slot, 0u);  // the free of id 1 names the first slot
  EXPECT_FALSE(p.ops()[2].is_alloc);
  EXPECT_EQ(p.ops()[3].slot, 2u);
  EXPECT_EQ(p.ops()[3].bytes, 300u);
  EXPECT_EQ(p.ops()[4].core, 1u);  // dense core index
  EXPECT_EQ(p.cores(), (std::vector<int>{0, 7}));
  EXPECT_EQ(p.op_index_of_event(0), 0u);
  EXPECT_EQ(p.op_index_of_event(2), 2u);  // events 2 and 3 are skipped: next op is event 4
  EXPECT_EQ(p.op_index_of_event(4), 2u);
  EXPECT_EQ(p.op_index_of_event(7), 5u);
  events.push_back(free_of(6, 99));
  EXPECT_THROW(ReplayProgram{events}, InvalidArgumentError);
}

TEST(PolicyBenchmarkTest, RejectsBadOptions) {
  const std::vector<TraceEvent> events = {alloc(0, 1, 100)};
  const ReplayProgram p(events);
  ReplayOptions o;
  EXPECT_THROW(replay_benchmark("no-such-policy", p, o), InvalidArgumentError);
  o.ops_per_sample = 0;
  EXPECT_THROW(replay_benchmark("bfc", p, o), InvalidArgumentError);
  o.ops_per_sample = 1;
  o.timed_from_event = 2;
  EXPECT_THROW(replay_benchmark("bfc", p, o), InvalidArgumentError);
  o.timed_from_event = 1;  // nothing timed is allowed, and does not repeat the pass forever
  const ReplayResult nothing = replay_benchmark("bfc", p, o);
  EXPECT_EQ(nothing.timed_ops, 0u);
  EXPECT_EQ(nothing.throughput_passes, 1);
  o.timed_from_event = 0;
  o.capacity_bytes = 1;  // below BFC's 256 B minimum
  EXPECT_THROW(replay_benchmark("bfc", p, o), InvalidArgumentError);
}

// Peak of the summed requested bytes, from the events alone.
uint64_t peak_requested_bytes(const std::vector<TraceEvent>& events) {
  std::map<uint64_t, uint64_t> live;
  uint64_t sum = 0, peak = 0;
  for (const TraceEvent& e : events) {
    if (e.op == TraceOp::kAlloc) {
      live[e.id] = e.bytes;
      sum += e.bytes;
      peak = std::max(peak, sum);
    } else if (e.op == TraceOp::kFree) {
      sum -= live.at(e.id);
      live.erase(e.id);
    }
  }
  return peak;
}

TEST(PolicyBenchmarkTest, SteadyStateCountsOnEveryPolicyAndThroughTheArena) {
  SteadyStateOptions w;
  w.live_buffers = 200;
  w.pairs = 5000;
  const uint64_t peak = peak_requested_bytes(make_steady_state_workload(w));
  for (const std::string& name : known_allocator_policies()) {
    for (bool arena : {false, true}) {
      ReplayOptions o;
      o.through_arena = arena;
      o.clock_overhead_reads = 1000;
      const ReplayResult r = steady_state_benchmark(name, w, o);
      SCOPED_TRACE(name + (arena ? " via arena" : " via policy"));
      EXPECT_EQ(r.policy, name);
      EXPECT_EQ(r.through_arena, arena);
      EXPECT_EQ(r.warmup_ops, 200u);
      EXPECT_EQ(r.timed_ops, 10000u);
      EXPECT_EQ(r.ops_per_sample, 2);
      EXPECT_EQ(r.latency.samples, 5000u);  // one per pair
      EXPECT_EQ(r.num_ooms, 0u);
      EXPECT_EQ(r.skipped_frees, 0u);
      EXPECT_GE(r.throughput_passes, 1);
      EXPECT_GE(r.peak_bytes_in_use, peak);  // chunks are at least the requests
      expect_sane(r);
      const nlohmann::json j = r;
      EXPECT_EQ(j["via"], arena ? "arena" : "policy");
      EXPECT_EQ(j["latency"]["samples"], 5000u);
    }
  }
}

// BFC on a 1 KiB range: the second alloc cannot fit, so its free is skipped; the arena agrees.
TEST(PolicyBenchmarkTest, CountsOomsAndSkipsTheirFrees) {
  const std::vector<TraceEvent> events = {alloc(0, 0, 1024), alloc(1, 1, 256), free_of(2, 1),
                                          free_of(3, 0), alloc(4, 2, 512)};
  const ReplayProgram p(events);
  for (bool arena : {false, true}) {
    ReplayOptions o;
    o.capacity_bytes = 1024;
    o.through_arena = arena;
    o.clock_overhead_reads = 100;
    const ReplayResult r = replay_benchmark("bfc", p, o);
    EXPECT_EQ(r.num_ooms, 1u);
    EXPECT_EQ(r.skipped_frees, 1u);
    EXPECT_EQ(r.timed_ops, 5u);
    EXPECT_EQ(r.latency.samples, 5u);
    EXPECT_EQ(r.peak_bytes_in_use, 1024u);
  }
}

// Every core gets its own policy of the full capacity: two cores that each fill the range do not
// run out, although together they hold twice the capacity.
TEST(PolicyBenchmarkTest, OnePolicyPerCore) {
  const std::vector<TraceEvent> events = {alloc(0, 0, 4096, 0), alloc(0, 0, 4096, 5),
                                          free_of(1, 0, 5), free_of(1, 0, 0)};
  for (bool arena : {false, true}) {
    ReplayOptions o;
    o.capacity_bytes = 4096;
    o.through_arena = arena;
    o.clock_overhead_reads = 100;
    const ReplayResult r = replay_benchmark("bfc", ReplayProgram(events), o);
    EXPECT_EQ(r.num_ooms, 0u);
    EXPECT_EQ(r.peak_bytes_in_use, 8192u);  // the two cores' peaks, summed
  }
}

TEST(PolicyBenchmarkTest, ReplaysARealTraceWithoutOom) {
  const std::string path = std::string(VTPU_TRACE_DIR) + "/pytorch_mlp_train.jsonl";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "real traces not found at " << path;
  }
  const Trace t = read_trace(path);
  const ReplayProgram p(t.events, path);
  for (const std::string& name : known_allocator_policies()) {
    ReplayOptions o;
    o.clock_overhead_reads = 1000;
    const ReplayResult r = replay_benchmark(name, p, o);
    EXPECT_EQ(r.num_ooms, 0u) << name;
    EXPECT_EQ(r.timed_ops, t.events.size()) << name;
    EXPECT_EQ(r.latency.samples, t.events.size()) << name;
    EXPECT_GE(r.peak_bytes_in_use, 920064u) << name;  // the README's peak live bytes
    expect_sane(r);
  }
}

}  // namespace
}  // namespace vtpu
