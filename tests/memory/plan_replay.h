// Shared by the planned-policy and MLP memory-plan tests: replays a heap plan's program through
// an HbmArena step after step and checks every placement against the plan.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/heap_planner.h"

namespace vtpu::testing {

/// Runs `steps` copies of the plan's program through `arena` (policy "planned" over `plan`): at
/// each buffer's start it first frees the buffers whose live range ended earlier (earliest end
/// first), then allocates the buffer; a step ends by freeing the rest. With backing, each buffer
/// is filled with its own byte and checked intact when freed, so overlapping live buffers would
/// show. Checks offsets against the plan and arena consistency after every operation, and that
/// the arena's peak bytes in use equal the plan's peak live bytes.
inline void replay_plan(HbmArena& arena, const HeapPlan& plan, int steps) {
  struct Live {
    size_t interval;
    BufferId id;
  };
  const auto& iv = plan.intervals();
  auto pattern = [](int step, size_t i) { return static_cast<unsigned char>(step * 31 + i * 7); };
  auto free_one = [&](int step, const Live& b) {
    if (std::byte* p = arena.data(b.id)) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(p);
      const uint64_t n = iv[b.interval].bytes;
      EXPECT_TRUE(std::all_of(bytes, bytes + n,
                              [&](unsigned char c) { return c == pattern(step, b.interval); }))
          << "buffer '" << iv[b.interval].label << "' was overwritten in step " << step;
    }
    arena.free(b.id);
    arena.check_consistency();
  };
  auto by_end = [&](const Live& a, const Live& b) {
    return iv[a.interval].end != iv[b.interval].end ? iv[a.interval].end < iv[b.interval].end
                                                    : a.interval < b.interval;
  };
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<Live> live;
    for (size_t i : plan.allocation_order()) {
      std::sort(live.begin(), live.end(), by_end);
      while (!live.empty() && iv[live.front().interval].end < iv[i].start) {
        free_one(step, live.front());
        live.erase(live.begin());
      }
      const BufferId id = arena.allocate(iv[i].bytes, iv[i].label);
      EXPECT_EQ(arena.offset(id), plan.offsets()[i]) << iv[i].label;
      if (std::byte* p = arena.data(id)) std::memset(p, pattern(step, i), iv[i].bytes);
      arena.check_consistency();
      live.push_back(Live{i, id});
    }
    std::sort(live.begin(), live.end(), by_end);
    for (const Live& b : live) free_one(step, b);
  }
  const MemoryStats stats = arena.memory_stats();
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.num_allocs, plan.size() * static_cast<uint64_t>(steps));
  EXPECT_EQ(stats.peak_bytes_in_use, plan.peak_live_bytes());
}

}  // namespace vtpu::testing
