// Tests for the arena event log: alloc, free, oom and defragment events in the vtpu trace format,
// read back with the trace reader, and replayable.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/trace.h"
#include "tests/temp_path.h"

namespace vtpu {
namespace {

ArenaOptions recording(uint64_t capacity_bytes) {
  ArenaOptions o;
  o.capacity_bytes = capacity_bytes;
  o.backing = false;
  o.core_id = 5;
  o.record_events = true;
  return o;
}

TEST(EventLogTest, RecordsEveryKindOfEventInOrder) {
  HbmArena arena(recording(1000 * kMiB));
  std::vector<BufferId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(arena.allocate(100 * kMiB, "b" + std::to_string(i)));
  for (int i = 0; i < 10; i += 2) arena.free(ids[i]);
  arena.pin(ids[1]);
  arena.pin(ids[9]);
  // 300 MiB: total free 500 MiB >= 300, so the arena compacts (ids 3, 5, 7 slide down) and
  // retries; the gap between the pinned buffers at 100 and 900 MiB is then 500 MiB.
  const BufferId big = arena.allocate(300 * kMiB, "big");
  EXPECT_THROW(arena.allocate(900 * kMiB, "too big"), OutOfMemoryError);

  const std::vector<TraceEvent> log = arena.event_log();
  ASSERT_EQ(log.size(), 10u + 5u + 1u + 1u + 1u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(log[i].op, TraceOp::kAlloc);
    EXPECT_EQ(log[i].id, ids[i]);
    EXPECT_EQ(log[i].bytes, 100 * kMiB);
    EXPECT_EQ(log[i].label, "b" + std::to_string(i));
  }
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(log[10 + k].op, TraceOp::kFree);
    EXPECT_EQ(log[10 + k].id, ids[2 * k]);
  }
  EXPECT_EQ(log[15].op, TraceOp::kDefragment);
  EXPECT_EQ(log[15].buffers_moved, 3u);
  EXPECT_EQ(log[15].bytes_moved, 300 * kMiB);
  EXPECT_EQ(log[16].op, TraceOp::kAlloc);
  EXPECT_EQ(log[16].id, big);
  EXPECT_EQ(log[17].op, TraceOp::kOom);
  EXPECT_EQ(log[17].bytes, 900 * kMiB);
  EXPECT_EQ(log[17].label, "too big");
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].core, 5);
    if (i > 0) {
      EXPECT_GE(log[i].t_us, log[i - 1].t_us);
    }
  }
  EXPECT_NO_THROW(validate_trace_events(log, "event log"));

  const std::string path = test_temp_path("vtpu_event_log_test.jsonl");
  arena.write_event_log(path);
  const Trace back = read_trace(path);
  EXPECT_EQ(back.header.at("format"), "vtpu-trace");
  ASSERT_EQ(back.events.size(), log.size());
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(back.events[i].op, log[i].op);
    EXPECT_EQ(back.events[i].id, log[i].id);
    EXPECT_EQ(back.events[i].bytes, log[i].bytes);
    EXPECT_EQ(back.events[i].label, log[i].label);
    EXPECT_NEAR(back.events[i].t_us, log[i].t_us, 1e-3);
  }
}

TEST(EventLogTest, ReplayingTheLogReproducesTheArenaState) {
  HbmArena arena(recording(64 * kMiB));
  std::vector<BufferId> ids;
  for (int i = 0; i < 50; ++i) ids.push_back(arena.allocate(1000 + 37 * i));
  for (int i = 0; i < 50; i += 3) arena.free(ids[i]);
  const MemoryStats original = arena.memory_stats();

  ArenaOptions o = recording(64 * kMiB);
  o.record_events = false;
  HbmArena replay(o);
  std::map<uint64_t, BufferId> map;
  for (const TraceEvent& e : arena.event_log()) {
    if (e.op == TraceOp::kAlloc) map[e.id] = replay.allocate(e.bytes, e.label);
    if (e.op == TraceOp::kFree) replay.free(map.at(e.id));
  }
  const MemoryStats again = replay.memory_stats();
  EXPECT_EQ(again.bytes_in_use, original.bytes_in_use);
  EXPECT_EQ(again.largest_free_block_bytes, original.largest_free_block_bytes);
  EXPECT_EQ(again.num_live_buffers, original.num_live_buffers);
}

TEST(EventLogTest, OffByDefault) {
  ArenaOptions o = recording(kMiB);
  o.record_events = false;
  HbmArena arena(o);
  arena.free(arena.allocate(100));
  EXPECT_TRUE(arena.event_log().empty());
}

}  // namespace
}  // namespace vtpu
