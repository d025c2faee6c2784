// Tests for runtime/virtual_core.h: one thread, in-order work, its own arena, draining destructor.
#include "runtime/virtual_core.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "common/error.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;

ArenaOptions tiny_arena(int core_id) {
  ArenaOptions o;
  o.capacity_bytes = 64 * 1024;
  o.backing = false;
  o.core_id = core_id;
  return o;
}

TEST(VirtualCoreTest, OwnsAnArenaWithItsCoreId) {
  VirtualCore core(7, tiny_arena(7));
  EXPECT_EQ(core.core_id(), 7);
  EXPECT_EQ(core.hbm().core_id(), 7);
  EXPECT_EQ(core.hbm().capacity_bytes(), 64u * 1024);
  EXPECT_EQ(core.hbm_shared().get(), &core.hbm());
}

TEST(VirtualCoreTest, RunsPostedWorkInOrderOnItsOwnThread) {
  VirtualCore core(0, tiny_arena(0));
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
    VirtualCore core(0, tiny_arena(0));
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
  ArenaOptions o = tiny_arena(0);
  o.capacity_bytes = 100;
  EXPECT_THROW({ VirtualCore core(0, o); }, InvalidArgumentError);
  o = tiny_arena(0);
  o.policy = "no-such-policy";
  EXPECT_THROW({ VirtualCore core(0, o); }, InvalidArgumentError);
}

TEST(VirtualCoreTest, ArenaOutlivesTheCoreThroughSharedOwnership) {
  std::shared_ptr<HbmArena> arena;
  {
    VirtualCore core(2, tiny_arena(2));
    arena = core.hbm_shared();
  }
  const BufferId id = arena->allocate(1000);
  EXPECT_EQ(arena->memory_stats().bytes_in_use, 1024u);
  arena->free(id);
  EXPECT_EQ(arena->core_id(), 2);
}

}  // namespace
}  // namespace vtpu
