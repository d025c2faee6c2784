// Tests for runtime/thread_pinning.h: the pin_threads decision (hand-worked per mode, cores and
// CPUs), its text and JSON, and the Runtime's record of it.
#include "vtpu/runtime/thread_pinning.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"
#include "vtpu/common/host.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

TEST(ThreadPinningTest, AutoPinsTwoToCpusCoresWhenTheyFitAndNeverOneOrMore) {
  const std::vector<int> cpus = {3, 5};  // an affinity mask of CPUs 3 and 5
  const ThreadPinning two = plan_thread_pinning("auto", 2, cpus);
  EXPECT_EQ(two.cpus, (std::vector<int>{3, 5}));
  EXPECT_EQ(two.describe(), "auto (pinned: cores 0,1 -> CPUs 3,5)");
  const ThreadPinning one = plan_thread_pinning("auto", 1, cpus);
  EXPECT_FALSE(one.pinned());
  EXPECT_EQ(one.describe(), "auto (not pinned: 1 core, no peer to hand off to)");
  const ThreadPinning eight = plan_thread_pinning("auto", 8, cpus);
  EXPECT_FALSE(eight.pinned());
  EXPECT_EQ(eight.describe(), "auto (not pinned: 8 cores > 2 CPUs)");
  EXPECT_EQ(eight.host_cpus, 2);
  EXPECT_EQ(eight.cores, 8);
}

TEST(ThreadPinningTest, OnPinsRoundRobinAndOffNever) {
  const ThreadPinning on = plan_thread_pinning("on", 5, {0, 1});
  EXPECT_EQ(on.cpus, (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(on.describe(), "on (pinned: cores 0..4 -> CPUs 0,1 round-robin)");
  EXPECT_EQ(plan_thread_pinning("on", 1, {7}).describe(), "on (pinned: cores 0 -> CPUs 7)");
  EXPECT_EQ(plan_thread_pinning("off", 2, {0, 1}).describe(), "off (not pinned: pin_threads off)");
  EXPECT_THROW(plan_thread_pinning("sometimes", 2, {0, 1}), InvalidArgumentError);
  EXPECT_THROW(plan_thread_pinning("auto", 2, {}), InvalidArgumentError);
}

TEST(ThreadPinningTest, JsonRoundTrips) {
  for (const ThreadPinning& p :
       {plan_thread_pinning("auto", 2, {0, 1}), plan_thread_pinning("auto", 8, {0, 1}),
        plan_thread_pinning("on", 3, {0, 1})}) {
    EXPECT_EQ(ThreadPinning::from_json(p.to_json()), p) << p.to_json().dump();
  }
  EXPECT_EQ(plan_thread_pinning("auto", 2, {0, 1}).to_json(),
            nlohmann::json::parse(
                R"({"mode": "auto", "cores": 2, "host_cpus": 2, "pinned": true, "cpus": [0, 1]})"));
  EXPECT_THROW(ThreadPinning::from_json(nlohmann::json::parse(
                   R"({"mode": "auto", "cores": 2, "host_cpus": 2, "pinned": true, "cpu": [0]})")),
               InvalidArgumentError);
}

// The Runtime applies plan_thread_pinning to its cores and says so.
TEST(ThreadPinningTest, TheRuntimeRecordsWhatItApplied) {
  RuntimeOptions o;
  o.num_cores = 2;
  o.hbm_bytes_per_core = 1 << 20;
  for (const char* mode : {"off", "on"}) {
    o.pin_threads = mode;
    Runtime runtime(o);
    EXPECT_EQ(runtime.thread_pinning(), plan_thread_pinning(mode, 2, usable_cpu_ids()));
  }
}

}  // namespace
}  // namespace vtpu
