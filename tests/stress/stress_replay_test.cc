// Tests for stress/stress_replay.h: metrics on hand-worked sequences (the issue's 64 MiB arena of
// 16 x 4 MiB blocks with every other one freed), the worst-moment block map, OOM skipping,
// checksums across defragmentation, cross-core frees from other threads, the stream compiler,
// the heap plan for `planned`, and the capacity search against capacities worked out by hand.
#include "vtpu/stress/stress_replay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/stress/stress_workload.h"

namespace vtpu {
namespace {

TraceEvent alloc(uint64_t id, uint64_t bytes, std::string label = {}, int core = 0) {
  TraceEvent e;
  e.t_us = static_cast<double>(id);
  e.core = core;
  e.op = TraceOp::kAlloc;
  e.id = id;
  e.bytes = bytes;
  e.label = std::move(label);
  return e;
}
TraceEvent free_of(uint64_t id, int core = 0) {
  TraceEvent e;
  e.t_us = 1000.0 + static_cast<double>(id);
  e.core = core;
  e.op = TraceOp::kFree;
  e.id = id;
  return e;
}

// The events with t_us set to their index, so that time never goes backwards on a core.
std::vector<TraceEvent> timed(std::vector<TraceEvent> ev) {
  for (size_t i = 0; i < ev.size(); ++i) ev[i].t_us = static_cast<double>(i);
  return ev;
}

// 16 x 4 MiB blocks fill 64 MiB; blocks 0, 2, ..., 14 are freed; then a 16 MiB request (free
// total 32 MiB, largest free block 4 MiB) and a 40 MiB request (more than is free).
std::vector<TraceEvent> issue_example() {
  std::vector<TraceEvent> ev;
  for (uint64_t i = 0; i < 16; ++i) ev.push_back(alloc(i, 4 * kMiB, "block" + std::to_string(i)));
  for (uint64_t i = 0; i < 16; i += 2) ev.push_back(free_of(i));
  TraceEvent big = alloc(100, 16 * kMiB, "big");
  big.t_us = 2000;
  ev.push_back(big);
  TraceEvent huge = alloc(101, 40 * kMiB, "huge");
  huge.t_us = 2001;
  ev.push_back(huge);
  return timed(ev);
}

StressReplayOptions options(std::string policy, bool defrag, uint64_t capacity = 64 * kMiB) {
  StressReplayOptions o;
  o.policy = std::move(policy);
  o.auto_defragment = defrag;
  o.capacity_bytes = capacity;
  o.latency_sample_every = 1;
  return o;
}

StressCoreMetrics run(const CoreStream& s, const StressReplayOptions& o) {
  CoreReplayer r(s, o);
  r.run_all();
  return r.finish();
}

class IssueExample : public ::testing::TestWithParam<std::string> {};

TEST_P(IssueExample, FragmentationIsSevenEighthsAndSixteenMibIsAFalseOom) {
  const auto streams = compile_core_streams(issue_example(), 1, "issue");
  const StressCoreMetrics m = run(streams[0], options(GetParam(), false));
  EXPECT_DOUBLE_EQ(m.fragmentation_max, 0.875);  // 1 - 4 MiB / 32 MiB
  EXPECT_EQ(m.false_ooms, 1u);                   // 16 MiB <= 32 MiB free
  EXPECT_EQ(m.true_ooms, 1u);                    // 40 MiB > 32 MiB free
  EXPECT_EQ(m.events, 26u);
  EXPECT_EQ(m.allocs, 16u);
  EXPECT_EQ(m.frees, 8u);
  EXPECT_EQ(m.peak_live_bytes, 64 * kMiB);
  EXPECT_EQ(m.peak_reserved_bytes, 64 * kMiB);
  EXPECT_DOUBLE_EQ(m.reserved_over_live(), 1.0);
  EXPECT_EQ(m.alloc_latency_ns.size(), 18u);  // every attempt timed (latency_sample_every 1)
  EXPECT_EQ(m.free_latency_ns.size(), 8u);
  // Fragmentation after each event: 0 for the 16 allocs (nothing free) and the first free, then
  // 1 - 1/k after the k-th free (k = 2..8), and 0.875 after both failed requests.
  double sum = 0;
  for (int k = 2; k <= 8; ++k) sum += 1.0 - 1.0 / k;
  sum += 2 * 0.875;
  EXPECT_NEAR(m.fragmentation_mean(), sum / 26, 1e-12);
  // Reserved fragmentation: block 15 keeps the extent at 64 MiB, so the k-th free leaves k of 16
  // blocks as holes (k/16), 0 after the allocs, and 8/16 after both failed requests.
  EXPECT_DOUBLE_EQ(m.reserved_fragmentation_max, 0.5);
  EXPECT_NEAR(m.reserved_fragmentation_mean(), (36.0 / 16 + 2 * 0.5) / 26, 1e-12);
  // The worst moment is the 8th free (event 23): 16 chunks of 4 MiB, free and used alternating.
  ASSERT_TRUE(m.worst.captured);
  EXPECT_EQ(m.worst.event, 23u);
  EXPECT_DOUBLE_EQ(m.worst.fragmentation, 0.875);
  EXPECT_DOUBLE_EQ(m.worst.reserved_fragmentation, 0.5);
  ASSERT_EQ(m.worst.blocks.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    const StressBlock& b = m.worst.blocks[i];
    EXPECT_EQ(b.offset, i * 4 * kMiB);
    EXPECT_EQ(b.bytes, 4 * kMiB);
    EXPECT_EQ(b.used, i % 2 == 1);
    if (b.used) {
      EXPECT_EQ(b.label, "block" + std::to_string(i));
      EXPECT_EQ(b.id, i);
      EXPECT_EQ(b.requested_bytes, 4 * kMiB);
    }
  }
}

TEST_P(IssueExample, AutoDefragmentationTurnsTheFalseOomIntoASuccess) {
  const auto streams = compile_core_streams(issue_example(), 1, "issue");
  const StressCoreMetrics m = run(streams[0], options(GetParam(), true));
  EXPECT_EQ(m.false_ooms, 0u);
  EXPECT_EQ(m.true_ooms, 1u);  // 40 MiB still exceeds the 16 MiB left
  EXPECT_EQ(m.allocs, 17u);
  EXPECT_EQ(m.defragmentations, 1u);              // the 40 MiB request is a true OOM: no compaction
  EXPECT_EQ(m.defrag_bytes_moved, 8 * 4 * kMiB);  // all 8 odd blocks slide down
  EXPECT_EQ(m.peak_live_bytes, 64 * kMiB);
  // After the compaction the 8 blocks fill [0, 32) MiB and the 16 MiB request lands at 32: the
  // extent is 48 MiB with no hole (the replay re-reads it after a compaction; before it, block
  // 15 ended at 64 MiB).
  ASSERT_EQ(m.timeline.size(), 26u);
  EXPECT_EQ(m.timeline[24].bytes_reserved, 48 * kMiB);
  EXPECT_EQ(m.timeline[24].bytes_in_use, 48 * kMiB);
  EXPECT_EQ(m.timeline[23].bytes_reserved, 64 * kMiB);
  EXPECT_DOUBLE_EQ(m.reserved_fragmentation_max, 0.5);  // before the compaction, as above
}

// Regression: at 16 GiB the untouched top of the arena is the largest free block, so
// fragmentation reads ~0 and the worst moment was event 0. a, b, c of 4 KiB, then b freed:
// fragmentation = 1 - (16 GiB - 12 KiB) / (16 GiB - 8 KiB) (~2.4e-7), while a third of the
// 12 KiB extent is a hole. The worst moment is b's free, by reserved fragmentation; freeing c
// (the highest chunk) leaves a alone, an extent of 4 KiB with no hole.
TEST(StressReplayTest, ReservedFragmentationIgnoresTheUntouchedTopOfALargeArena) {
  for (const char* policy : {"bfc", "first_fit", "tlsf"}) {
    const auto streams =
        compile_core_streams(timed({alloc(1, 4 * kKiB, "a"), alloc(2, 4 * kKiB, "b"),
                                    alloc(3, 4 * kKiB, "c"), free_of(2), free_of(3)}),
                             1, "u27");
    const StressCoreMetrics m = run(streams[0], options(policy, true, 16 * kGiB));
    const double gib16 = 16.0 * 1024 * 1024 * 1024;
    EXPECT_NEAR(m.fragmentation_max, 1.0 - (gib16 - 12288) / (gib16 - 8192), 1e-12) << policy;
    EXPECT_LT(m.fragmentation_max, 1e-6) << policy;
    EXPECT_DOUBLE_EQ(m.reserved_fragmentation_max, 1.0 / 3) << policy;
    EXPECT_NEAR(m.reserved_fragmentation_mean(), (1.0 / 3) / 5, 1e-12) << policy;
    ASSERT_TRUE(m.worst.captured) << policy;
    EXPECT_EQ(m.worst.event, 3u) << policy;
    EXPECT_DOUBLE_EQ(m.worst.reserved_fragmentation, 1.0 / 3) << policy;
    ASSERT_EQ(m.timeline.size(), 5u) << policy;
    const uint64_t extent_kib[] = {4, 8, 12, 12, 4};
    for (size_t i = 0; i < 5; ++i)
      EXPECT_EQ(m.timeline[i].bytes_reserved, extent_kib[i] * kKiB) << policy << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, IssueExample, ::testing::Values("bfc", "first_fit"));

// Regression: a trace written core by core (all of trace core 0, then all of trace core 2)
// folded onto 2 virtual cores puts both trace cores on core 0. Their buffers are live at the same
// time (t 0..10 on both), so the folded stream must interleave them by t_us and peak at 2 MiB of
// live bytes, not replay core 2's buffer after core 0's was freed (1 MiB). Trace core 1 stays alone
// on core 1 in file order.
TEST(StressReplayTest, FoldedTraceCoresMergeByTime) {
  auto at = [](TraceEvent e, double t) {
    e.t_us = t;
    return e;
  };
  const std::vector<TraceEvent> ev = {
      at(alloc(1, kMiB, "a", 0), 0.0), at(free_of(1, 0), 10.0),  // trace core 0
      at(alloc(7, 64, "c", 1), 3.0),   at(free_of(7, 1), 4.0),   // trace core 1
      at(alloc(1, kMiB, "b", 2), 1.0), at(free_of(1, 2), 9.0)};  // trace core 2, same id
  const auto streams = compile_core_streams(ev, 2, "folded");
  ASSERT_EQ(streams[0].ops.size(), 4u);
  EXPECT_TRUE(streams[0].ops[0].is_alloc);
  EXPECT_TRUE(streams[0].ops[1].is_alloc);
  EXPECT_FALSE(streams[0].ops[2].is_alloc);
  EXPECT_FALSE(streams[0].ops[3].is_alloc);
  EXPECT_EQ(streams[0].ops[1].t_us, 1.0);
  EXPECT_EQ(streams[0].ops[2].slot, 1u);  // t 9: trace core 2's buffer (the second alloc) first
  EXPECT_EQ(streams[0].ops[3].slot, 0u);
  ASSERT_EQ(streams[1].ops.size(), 2u);
  const StressCoreMetrics m = run(streams[0], options("bfc", false));
  EXPECT_EQ(m.peak_live_bytes, 2 * kMiB);
}

TEST(StressReplayTest, SkippedAllocationSkipsItsFree) {
  std::vector<TraceEvent> ev = {alloc(0, 48 * kMiB), alloc(1, 32 * kMiB), free_of(1), free_of(0)};
  const auto streams = compile_core_streams(timed(ev), 1, "t");
  const StressCoreMetrics m = run(streams[0], options("bfc", true));
  EXPECT_EQ(m.true_ooms, 1u);
  EXPECT_EQ(m.skipped_frees, 1u);
  EXPECT_EQ(m.frees, 1u);
  EXPECT_EQ(m.peak_live_bytes, 48 * kMiB);
}

TEST(StressReplayTest, StopOnOomThrowsTheArenaReport) {
  const auto streams = compile_core_streams(issue_example(), 1, "issue");
  StressReplayOptions o = options("bfc", false);
  o.stop_on_oom = true;
  CoreReplayer r(streams[0], o);
  try {
    r.run_all();
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.report().requested_bytes, 16 * kMiB);
    EXPECT_EQ(e.report().largest_free_block_bytes, 4 * kMiB);
    EXPECT_EQ(e.report().total_free_bytes, 32 * kMiB);
    EXPECT_EQ(e.report().label, "big");
    // Regression: the replay gave the arena no labels, so every live buffer of the
    // report was "(unlabelled)". The live ones are the odd blocks, each at offset 4 MiB x index.
    ASSERT_EQ(e.report().largest_live_buffers.size(), 8u);
    for (const LiveBufferInfo& b : e.report().largest_live_buffers) {
      EXPECT_EQ(b.label, "block" + std::to_string(b.offset / (4 * kMiB))) << b.offset;
      EXPECT_EQ(b.offset / (4 * kMiB) % 2, 1u) << b.offset;
    }
    EXPECT_EQ(e.report().to_string().find("(unlabelled)"), std::string::npos);
    EXPECT_NE(e.report().to_string().find("at offset 4194304  block1"), std::string::npos)
        << e.report().to_string();
  }
}

TEST(StressReplayTest, TimelineIsEvenlySpacedAndTracksTheHeapTop) {
  std::vector<TraceEvent> ev;
  for (uint64_t i = 0; i < 10; ++i) ev.push_back(alloc(i, 1 * kMiB));
  for (uint64_t i = 9; i >= 5; --i) ev.push_back(free_of(i));  // the top half, from the top
  const auto streams = compile_core_streams(timed(ev), 1, "t");
  StressReplayOptions o = options("bfc", false);
  o.timeline_samples = 5;  // stride ceil(15 / 5) = 3: events 0, 3, 6, 9, 12 and the last, 14
  const StressCoreMetrics m = run(streams[0], o);
  ASSERT_EQ(m.timeline.size(), 6u);
  const uint64_t expect_event[] = {0, 3, 6, 9, 12, 14};
  const uint64_t expect_top_mib[] = {1, 4, 7, 10, 7, 5};  // 10 - (frees so far) after event 9
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_EQ(m.timeline[k].event, expect_event[k]);
    EXPECT_EQ(m.timeline[k].bytes_reserved, expect_top_mib[k] * kMiB) << k;
    EXPECT_EQ(m.timeline[k].bytes_in_use, expect_top_mib[k] * kMiB) << k;
  }
}

TEST(StressReplayTest, ChecksumsSurviveDefragmentationAndCatchCorruption) {
  const auto streams = compile_core_streams(issue_example(), 1, "issue");
  StressReplayOptions o = options("bfc", true);
  o.backing = true;
  {
    const StressCoreMetrics m = run(streams[0], o);
    EXPECT_EQ(m.defragmentations, 1u);
    // 8 frees, then all 9 live right after the allocation that compacted, and 9 at the end.
    EXPECT_EQ(m.integrity_checks, 8u + 9u + 9u);
    EXPECT_EQ(m.integrity_failures, 0u);
  }
  CoreReplayer r(streams[0], o);
  r.begin();
  for (size_t i = 0; i < 16; ++i) r.run_op(i);
  // Flip one byte of block 3 behind the replayer's back: the final check must see it.
  const MemoryChunkRecord rec = r.arena().chunk_records()[3];
  ASSERT_TRUE(rec.in_use);
  // No buffer was freed yet, so its BufferId is its allocation sequence number (hbm_arena.h).
  std::byte* p = r.arena().data(rec.alloc_seq);
  p[12345] ^= std::byte{1};
  const StressCoreMetrics m = r.finish();
  EXPECT_EQ(m.integrity_checks, 16u);
  EXPECT_EQ(m.integrity_failures, 1u);
}

TEST(StressReplayTest, CrossCoreFreesFromOtherThreads) {
  // Core 0 allocates 4000 buffers; two other threads free the odd ones while core 0 keeps
  // allocating (its own stream frees the even ones).
  std::vector<TraceEvent> ev;
  for (uint64_t i = 0; i < 4000; ++i) ev.push_back(alloc(i, 4096 + i));
  for (uint64_t i = 0; i < 4000; ++i) ev.push_back(free_of(i));
  const auto streams = compile_core_streams(timed(ev), 1, "t");
  StressReplayOptions o = options("tlsf", true);
  o.backing = true;
  o.concurrent = true;
  CoreReplayer r(streams[0], o);
  r.begin();
  for (size_t i = 0; i < 4000; ++i) r.run_op(i);
  std::vector<std::thread> others;
  for (int t = 0; t < 2; ++t) {
    others.emplace_back([&, t] {
      for (uint32_t slot = 1 + 2 * t; slot < 4000; slot += 4) r.free_slot(slot);
    });
  }
  for (size_t i = 4000; i < 8000; i += 2) r.run_op(i);  // the even slots' own frees
  for (auto& t : others) t.join();
  const StressCoreMetrics m = r.finish();
  EXPECT_EQ(m.frees, 4000u);
  EXPECT_EQ(m.cross_core_frees, 2000u);
  EXPECT_EQ(m.integrity_failures, 0u);
  EXPECT_EQ(r.arena().memory_stats().num_live_buffers, 0u);
  EXPECT_NO_THROW(r.arena().check_consistency());
}

// Regression: the summary's reserved/live was max(peak reserved) / max(peak live), which
// read 1.000 (64 MiB / 64 MiB, both core 0's) while core 1 was at 4 MiB / 3 MiB = 1.333.
TEST(StressReplayTest, SummaryRatioIsTheWorstCoresOwn) {
  StressCoreMetrics a, b;
  a.peak_reserved_bytes = 64 * kMiB;
  a.peak_live_bytes = 64 * kMiB;
  b.core = 1;
  b.peak_reserved_bytes = 4 * kMiB;
  b.peak_live_bytes = 3 * kMiB;
  const StressCoreMetrics s = merge_core_metrics(std::vector<StressCoreMetrics>{a, b});
  EXPECT_EQ(s.peak_reserved_bytes, 64 * kMiB);
  EXPECT_DOUBLE_EQ(s.reserved_over_live(), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(stress_metrics_json(s, false)["reserved_over_live"].get<double>(), 4.0 / 3.0);
}

TEST(StressReplayTest, CompileKeepsTraceCoresApartOnOneStream) {
  // Trace cores 0 and 2 both use id 7; with 2 streams both land on stream 0.
  std::vector<TraceEvent> ev = {alloc(7, 100, "a", 0), alloc(7, 200, "b", 2), alloc(1, 300, "c", 1),
                                free_of(7, 2), free_of(7, 0)};
  uint64_t skipped = 99;
  const auto s = compile_core_streams(timed(ev), 2, "t", &skipped);
  EXPECT_EQ(skipped, 0u);
  ASSERT_EQ(s.size(), 2u);
  ASSERT_EQ(s[0].ops.size(), 4u);
  EXPECT_EQ(s[0].ops[2].slot, 1u);  // core 2's free of id 7 frees core 2's buffer (slot 1)
  EXPECT_EQ(s[0].ops[3].slot, 0u);
  EXPECT_EQ(s[0].labels[s[0].ops[1].label], "b");
  EXPECT_EQ(s[1].ops.size(), 1u);
  EXPECT_EQ(s[1].core, 1);
  std::vector<TraceEvent> bad = {free_of(3)};
  EXPECT_THROW(compile_core_streams(bad, 1, "bad"), InvalidArgumentError);
}

// Three 1 MiB buffers A B C, free B, then 2 MiB. Without compaction the 2 MiB buffer goes above
// C: 5 MiB are needed. With it, A and C slide down and 4 MiB (the peak live bytes) suffice.
std::vector<TraceEvent> hole_then_bigger() {
  return timed({alloc(0, kMiB), alloc(1, kMiB), alloc(2, kMiB), free_of(1), alloc(3, 2 * kMiB)});
}

TEST(StressReplayTest, MinCapacityMatchesTheHandWorkedValue) {
  const auto s = compile_core_streams(hole_then_bigger(), 1, "t");
  for (const char* policy : {"bfc", "first_fit"}) {
    const auto off = find_min_capacity(s[0], options(policy, false), 64 * kMiB);
    ASSERT_TRUE(off.has_value());
    EXPECT_GE(*off, 5 * kMiB) << policy;
    EXPECT_LE(*off, 5 * kMiB + 8 * kKiB) << policy;
    const auto on = find_min_capacity(s[0], options(policy, true), 64 * kMiB);
    ASSERT_TRUE(on.has_value());
    EXPECT_GE(*on, 4 * kMiB) << policy;
    EXPECT_LE(*on, 4 * kMiB + 8 * kKiB) << policy;
  }
  EXPECT_FALSE(find_min_capacity(s[0], options("bfc", false), 4 * kMiB).has_value());
}

// Regression: the docs said "up to 1000" timeline samples, and 20000 events gave 1001:
// event 0, every 20th, and the last. The docs now give that rule; this pins it.
TEST(StressReplayTest, TimelineSamplesEventZeroEveryStrideAndTheLast) {
  std::vector<TraceEvent> events;
  for (uint64_t id = 0; id < 10000; ++id) {
    events.push_back(alloc(id, 256));
    events.push_back(free_of(id));
  }
  const auto s = compile_core_streams(timed(std::move(events)), 1, "t");
  ASSERT_EQ(s[0].ops.size(), 20000u);
  const StressCoreMetrics m = run(s[0], options("bfc", false));  // timeline_samples 1000
  ASSERT_EQ(m.timeline.size(), 1001u);
  for (size_t k = 0; k < 1000; ++k) EXPECT_EQ(m.timeline[k].event, 20 * k) << k;
  EXPECT_EQ(m.timeline[1000].event, 19999u);
  EXPECT_EQ(m.timeline[1000].bytes_in_use, 0u);  // after the last free
  EXPECT_EQ(m.timeline[0].bytes_in_use, 256u);   // after the first alloc
}

// Regression: min_capacity was an odd byte count (72294241 B). Capacities tried are now
// multiples of 4 KiB. Hand-worked: one 10000-byte buffer (10240 B once bfc or first_fit rounds it
// to 256 B) cannot fit 8 KiB and fits 12 KiB, the next multiple; the old search tried 10000 and
// 20000 B, then bisected to 12500 B.
TEST(StressReplayTest, MinCapacityIsAMultipleOfTheSearchGranule) {
  ASSERT_EQ(kCapacitySearchGranuleBytes, 4 * kKiB);
  const auto one = compile_core_streams(timed({alloc(0, 10000)}), 1, "t");
  for (const char* policy : {"bfc", "first_fit"}) {
    EXPECT_EQ(find_min_capacity(one[0], options(policy, false), 64 * kMiB), 12 * kKiB) << policy;
  }
  // A larger stream: every answer of every policy is a multiple, and completes there.
  StressWorkloadOptions w;
  w.name = "lognormal";
  w.events_per_core = 3000;
  w.live_buffers = 300;
  const auto streams = compile_core_streams(make_stress_workload(w, 0), 1, "lognormal");
  for (const char* policy : {"bfc", "tlsf", "first_fit", "buddy"}) {
    for (const bool defrag : {false, true}) {
      const auto found = find_min_capacity(streams[0], options(policy, defrag), 4 * kGiB);
      ASSERT_TRUE(found.has_value()) << policy;
      EXPECT_EQ(*found % kCapacitySearchGranuleBytes, 0u) << policy << " " << *found;
      const StressCoreMetrics m = run(streams[0], options(policy, defrag, *found));
      EXPECT_EQ(m.true_ooms + m.false_ooms, 0u) << policy << " " << defrag;
    }
  }
  // The bound is tried as given when it is not a multiple: 10241 B holds the buffer.
  EXPECT_EQ(find_min_capacity(one[0], options("bfc", false), 10241), 10241u);
}

// Regression: the search tried the peak live bytes first even above its bound, so
// with a 3 MiB bound it returned 4 MiB (bfc with compaction). Now, for every policy, a result
// never exceeds the bound, and a peak live above the bound is "not found" without a replay.
TEST(StressReplayTest, MinCapacityNeverExceedsTheBoundForAnyPolicy) {
  const auto s = compile_core_streams(hole_then_bigger(), 1, "t");  // peak live 4 MiB
  for (const std::string policy : {"bfc", "tlsf", "first_fit", "buddy", "planned"}) {
    for (const bool defrag : {false, true}) {
      StressReplayOptions o = options(policy, defrag);
      if (policy == "planned") o.heap_plan = plan_for_stream(s[0]);
      std::atomic<uint64_t> replays{0};
      EXPECT_FALSE(find_min_capacity(s[0], o, 3 * kMiB, &replays).has_value()) << policy;
      EXPECT_EQ(replays.load(), 0u) << policy;
      for (const uint64_t bound : {4 * kMiB, 4 * kMiB + 4 * kKiB, 5 * kMiB, 64 * kMiB}) {
        const auto found = find_min_capacity(s[0], o, bound, &replays);
        if (found) {
          EXPECT_LE(*found, bound) << policy << " " << bound;
        }
      }
      EXPECT_GT(replays.load(), 0u) << policy;
    }
  }
  // bfc with compaction needs exactly the peak live bytes: found at a bound of 4 MiB.
  EXPECT_EQ(find_min_capacity(s[0], options("bfc", true), 4 * kMiB), 4 * kMiB);
}

TEST(StressReplayTest, PlannedPolicyReplaysItsOwnPlan) {
  const auto s = compile_core_streams(hole_then_bigger(), 1, "t");
  StressReplayOptions o = options("planned", false);
  o.heap_plan = plan_for_stream(s[0]);
  // A, C and the 2 MiB buffer are live together; B's slot is free when D is allocated.
  EXPECT_EQ(o.heap_plan->peak_live_bytes(), 4 * kMiB);
  const StressCoreMetrics m = run(s[0], o);
  EXPECT_EQ(m.false_ooms + m.true_ooms, 0u);
  EXPECT_EQ(m.peak_reserved_bytes, o.heap_plan->heap_bytes());
}

// Regression: planned's min capacity is its plan's heap bytes exactly, not a bisection
// bound up to max(4 KiB, 0.1%) above them (191479164 B against a 191391744 B plan in the report).
TEST(StressReplayTest, PlannedMinCapacityIsItsHeapExactly) {
  StressWorkloadOptions w;
  w.name = "lognormal";
  w.events_per_core = 2000;
  w.live_buffers = 200;
  const auto streams = compile_core_streams(make_stress_workload(w, 0), 1, "lognormal");
  StressReplayOptions o = options("planned", false);
  o.heap_plan = plan_for_stream(streams[0]);
  const uint64_t heap = o.heap_plan->heap_bytes();
  ASSERT_GT(heap, o.heap_plan->peak_live_bytes());  // the bisection would start below the heap
  EXPECT_EQ(find_min_capacity(streams[0], o, 64 * kGiB), std::optional<uint64_t>(heap));
  EXPECT_EQ(find_min_capacity(streams[0], o, heap - 1), std::nullopt);
}

TEST(StressReplayTest, MergeSumsCountsAndTakesMaxima) {
  StressCoreMetrics a, b;
  a.events = 10;
  a.false_ooms = 1;
  a.peak_live_bytes = 100;
  a.peak_reserved_bytes = 150;
  a.fragmentation_max = 0.5;
  a.wall_seconds = 1.0;
  a.min_capacity_bytes = 300;
  b.events = 30;
  b.true_ooms = 2;
  b.peak_live_bytes = 200;
  b.peak_reserved_bytes = 220;
  b.fragmentation_max = 0.25;
  b.wall_seconds = 2.0;
  b.min_capacity_bytes = 250;
  const StressCoreMetrics arr[] = {a, b};
  const StressCoreMetrics s = merge_core_metrics(arr);
  EXPECT_EQ(s.events, 40u);
  EXPECT_EQ(s.false_ooms, 1u);
  EXPECT_EQ(s.true_ooms, 2u);
  EXPECT_EQ(s.peak_live_bytes, 200u);
  EXPECT_EQ(s.peak_reserved_bytes, 220u);
  EXPECT_DOUBLE_EQ(s.fragmentation_max, 0.5);
  EXPECT_DOUBLE_EQ(s.events_per_second(), 10.0 + 15.0);
  EXPECT_EQ(s.min_capacity_bytes, 300u);
}

}  // namespace
}  // namespace vtpu
