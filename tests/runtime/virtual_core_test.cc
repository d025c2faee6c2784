// Tests for runtime/virtual_core.h: one thread, in-order work, its own arena, draining destructor.
#include "vtpu/runtime/virtual_core.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/runtime/device_buffer.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kTinyBytes = 64 * 1024;

ArenaOptions tiny_arena() {
  ArenaOptions o;
  o.backing = false;
  return o;
}

// A core whose whole 64 KiB device is its default arena.
std::unique_ptr<VirtualCore> tiny_core(int core_id, uint64_t total_bytes = kTinyBytes,
                                       ArenaOptions o = tiny_arena()) {
  return std::make_unique<VirtualCore>(core_id, total_bytes, ArenaLimit::fraction(1.0), o);
}

TEST(VirtualCoreTest, OwnsAnArenaWithItsCoreId) {
  auto core_ptr = tiny_core(7);
  VirtualCore& core = *core_ptr;
  EXPECT_EQ(core.core_id(), 7);
  EXPECT_EQ(core.hbm().core_id(), 7);
  EXPECT_EQ(core.hbm().capacity_bytes(), 64u * 1024);
  EXPECT_EQ(core.hbm_shared().get(), &core.hbm());
}

TEST(VirtualCoreTest, RunsPostedWorkInOrderOnItsOwnThread) {
  auto core_ptr = tiny_core(0);
  VirtualCore& core = *core_ptr;
  EXPECT_FALSE(core.on_core_thread());
  std::vector<int> order;  // touched only on the core's thread until `done`
  std::vector<std::thread::id> threads;
  std::promise<void> done;
  for (int i = 0; i < 100; ++i) {
    core.post([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  bool on_core = false;
  core.post([&] {
    on_core = core.on_core_thread();
    done.set_value();
  });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(on_core);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  for (const auto& t : threads) EXPECT_EQ(t, threads.front());
  EXPECT_NE(threads.front(), std::this_thread::get_id());
}

TEST(VirtualCoreTest, DestructorDrainsTheQueue) {
  std::atomic<int> ran{0};
  {
    auto core_ptr = tiny_core(0);
    VirtualCore& core = *core_ptr;
    for (int i = 0; i < 10; ++i) {
      core.post([&] {
        std::this_thread::sleep_for(2ms);
        ran.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(ran.load(), 10);
}

TEST(VirtualCoreTest, ArenaErrorsPropagateFromTheConstructor) {
  EXPECT_THROW(tiny_core(0, 100), InvalidArgumentError);  // below BFC's 256 B chunk
  EXPECT_THROW(tiny_core(0, 0), InvalidArgumentError);
  ArenaOptions o = tiny_arena();
  o.policy = "no-such-policy";
  EXPECT_THROW(tiny_core(0, kTinyBytes, o), InvalidArgumentError);
}

TEST(VirtualCoreTest, DefaultArenaTakesItsFractionAndLeavesRoomForPools) {
  VirtualCore core(1, 1000 * 1024, ArenaLimit::fraction(0.75), tiny_arena());
  EXPECT_EQ(core.hbm().capacity_bytes(), 750u * 1024);
  EXPECT_EQ(core.hbm_device().total_bytes(), 1000u * 1024);
  auto pool = core.hbm_device().create_arena(ArenaLimit::fraction(0.25), tiny_arena());
  EXPECT_EQ(pool->capacity_bytes(), 250u * 1024);
  EXPECT_EQ(pool->core_id(), 1);
  EXPECT_THROW(core.hbm_device().create_arena(ArenaLimit::bytes(256), tiny_arena()),
               ResourceExhaustedError);
}

TEST(VirtualCoreTest, ArenaOutlivesTheCoreThroughSharedOwnership) {
  std::shared_ptr<HbmArena> arena;
  {
    auto core_ptr = tiny_core(2);
    VirtualCore& core = *core_ptr;
    arena = core.hbm_shared();
  }
  const BufferId id = arena->allocate(1000);
  EXPECT_EQ(arena->memory_stats().bytes_in_use, 1024u);
  arena->free(id);
  EXPECT_EQ(arena->core_id(), 2);
}

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

// The on-core memories: VMEM, SMEM and accumulator arenas beside HBM, sized by options,
// reported per memory space, and a clear ResourceExhausted error when VMEM is exceeded.
TEST(VirtualCoreMemoryTest, HasVmemSmemAndAccumulatorReportedPerMemorySpace) {
  CoreMemoryOptions m;
  m.vmem_bytes = 2 << 20;
  m.smem_bytes = 64 << 10;
  m.accumulator_bytes = 512 << 10;
  VirtualCore core(5, 1 << 20, ArenaLimit::fraction(1.0), tiny_arena(), m);
  DeviceBuffer v = core.allocate(MemorySpace::kVmem, 100000, "block");
  const auto stats = core.memory_stats_by_space();
  ASSERT_EQ(stats.size(), 4u);
  EXPECT_EQ(stats.at("hbm").bytes_limit, 1u << 20);
  EXPECT_EQ(stats.at("vmem").bytes_limit, 2u << 20);
  EXPECT_EQ(stats.at("smem").bytes_limit, 64u << 10);
  EXPECT_EQ(stats.at("accumulator").bytes_limit, 512u << 10);
  EXPECT_EQ(stats.at("vmem").padded_bytes_in_use, 100000u);
  EXPECT_EQ(stats.at("smem").bytes_in_use, 0u);
  EXPECT_EQ(v.core_id(), 5);
}

TEST(VirtualCoreMemoryTest, ExceedingVmemGivesRequestedAndAvailableBytes) {
  CoreMemoryOptions m;
  m.vmem_bytes = 1 << 20;
  VirtualCore core(0, 1 << 20, ArenaLimit::fraction(1.0), tiny_arena(), m);
  DeviceBuffer held = core.allocate(MemorySpace::kVmem, 256 << 10, "held");
  try {
    core.allocate(MemorySpace::kVmem, 1 << 20, "too_big");
    FAIL() << "expected ScratchExhaustedError";
  } catch (const ScratchExhaustedError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(e.space(), MemorySpace::kVmem);
    EXPECT_EQ(e.requested_bytes(), 1u << 20);
    EXPECT_EQ(e.available_bytes(), (1u << 20) - (256u << 10));
    const std::string what = e.what();
    EXPECT_NE(what.find("vmem"), std::string::npos) << what;
    EXPECT_NE(what.find("1048576 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("786432 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("too_big"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace vtpu
