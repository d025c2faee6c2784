// Tests for stress/stress_workload.h: every generator is deterministic per seed (and per core),
// writes a valid trace, and has the shape its comment promises (checked from the events alone).
#include "vtpu/stress/stress_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

StressWorkloadOptions small(const std::string& name, uint64_t seed = 1) {
  StressWorkloadOptions o;
  o.name = name;
  o.seed = seed;
  o.events_per_core = 5000;
  o.live_buffers = 200;
  o.layers = 6;
  o.activation_bytes = 64 * kKiB;
  o.weight_bytes = 16 * kKiB;
  o.max_requests = 8;
  o.kv_block_bytes = 4 * kKiB;
  o.max_blocks = 32;
  return o;
}

class EveryWorkload : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryWorkload, SameSeedSameEventsAndValidTrace) {
  const auto a = make_stress_workload(small(GetParam()), 3);
  const auto b = make_stress_workload(small(GetParam()), 3);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 5000u);
  for (const TraceEvent& e : a) EXPECT_EQ(e.core, 3);
  EXPECT_NO_THROW(validate_trace_events(a, GetParam()));
}

TEST_P(EveryWorkload, SeedAndCoreChangeTheEvents) {
  const auto base = make_stress_workload(small(GetParam(), 1), 0);
  const auto other_seed = make_stress_workload(small(GetParam(), 2), 0);
  auto other_core = make_stress_workload(small(GetParam(), 1), 1);
  for (TraceEvent& e : other_core) e.core = 0;  // compare the sizes and order, not the core
  EXPECT_NE(base, other_seed);
  EXPECT_NE(base, other_core);
}

// Regression: --events did not bound training_step (nor variable_batch, kv_cache or
// an odd count of a steady state): generators ran whole steps past it. Now every workload has
// exactly events_per_core events, including counts inside the setup or the first step, and the
// cut stream is a valid trace and a prefix of a longer one (the same seed gives the same events).
TEST_P(EveryWorkload, EventsPerCoreIsExact) {
  const auto longer = make_stress_workload(small(GetParam()), 0);
  for (const uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{7}, uint64_t{11}, uint64_t{38},
                           uint64_t{39}, uint64_t{201}, uint64_t{4999}}) {
    StressWorkloadOptions o = small(GetParam());
    o.events_per_core = n;
    const auto events = make_stress_workload(o, 0);
    ASSERT_EQ(events.size(), n) << GetParam();
    EXPECT_NO_THROW(validate_trace_events(events, GetParam()));
    EXPECT_TRUE(std::equal(events.begin(), events.end(), longer.begin())) << GetParam() << " " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(StressWorkload, EveryWorkload,
                         ::testing::ValuesIn(stress_workload_names()));

// Live buffers, by id, and the labels of the events in order.
struct Replayed {
  std::map<uint64_t, TraceEvent> live;
  std::vector<std::pair<TraceOp, std::string>> ops;  // op and the buffer's label
};
Replayed replay(const std::vector<TraceEvent>& events) {
  Replayed r;
  for (const TraceEvent& e : events) {
    if (e.op == TraceOp::kAlloc) {
      r.live[e.id] = e;
      r.ops.emplace_back(e.op, e.label);
    } else {
      r.ops.emplace_back(e.op, r.live.at(e.id).label);
      r.live.erase(e.id);
    }
  }
  return r;
}

TEST(StressWorkloadTest, TrainingStepShape) {
  StressWorkloadOptions o = small("training_step");
  o.layers = 3;
  o.events_per_core = 38;  // setup plus exactly one step
  const auto events = make_stress_workload(o, 0);
  const Replayed r = replay(events);
  // Setup: 3 weights, 3 optimizer states. Step: forward 3 x (act, scratch alloc+free), loss;
  // backward 3 x (grad, act_grad, 2 frees); final act_grad free; optimizer 3 x (tmp alloc+free,
  // grad free): 6 + 9 + 1 + 12 + 1 + 9 = 38 events.
  ASSERT_EQ(events.size(), 38u);
  std::vector<std::string> act_frees;
  for (const auto& [op, label] : r.ops)
    if (op == TraceOp::kFree && label.ends_with("/act")) act_frees.push_back(label);
  EXPECT_EQ(act_frees, (std::vector<std::string>{"layer2/act", "layer1/act", "layer0/act"}));
  // After a step only the weights and optimizer state (2 x weight) are live.
  uint64_t weights = 0, state = 0;
  for (const auto& [id, e] : r.live) {
    if (e.label.ends_with("/weight"))
      weights += e.bytes;
    else if (e.label.ends_with("/opt_state"))
      state += e.bytes;
    else
      ADD_FAILURE() << "still live after the step: " << e.label;
  }
  EXPECT_EQ(r.live.size(), 6u);
  EXPECT_EQ(state, 2 * weights);
}

TEST(StressWorkloadTest, TrainingStepRepeatsTheSameSizesEveryStep) {
  const auto events = make_stress_workload(small("training_step"), 0);
  std::map<std::string, std::set<uint64_t>> sizes;
  for (const TraceEvent& e : events)
    if (e.op == TraceOp::kAlloc) sizes[e.label].insert(e.bytes);
  for (const auto& [label, s] : sizes) EXPECT_EQ(s.size(), 1u) << label;
}

TEST(StressWorkloadTest, VariableBatchChangesActivationSizes) {
  const auto events = make_stress_workload(small("variable_batch"), 0);
  std::set<uint64_t> act0, weight_grad0;
  for (const TraceEvent& e : events) {
    if (e.op != TraceOp::kAlloc) continue;
    if (e.label == "layer0/act") act0.insert(e.bytes);
    if (e.label == "layer0/grad") weight_grad0.insert(e.bytes);
  }
  EXPECT_GE(act0.size(), 4u);          // eight batch fractions are possible
  EXPECT_EQ(weight_grad0.size(), 1u);  // gradients have the weights' shape
}

TEST(StressWorkloadTest, KvCacheGrowsByOneBlockAndBoundsRequests) {
  const StressWorkloadOptions o = small("kv_cache");
  const auto events = make_stress_workload(o, 0);
  std::map<std::string, uint64_t> last_size;  // per request label: its buffer's size
  std::map<uint64_t, TraceEvent> live;
  size_t grown = 0;
  for (const TraceEvent& e : events) {
    if (e.op == TraceOp::kAlloc) {
      EXPECT_EQ(e.bytes % o.kv_block_bytes, 0u);
      EXPECT_LE(e.bytes, o.kv_block_bytes * static_cast<uint64_t>(o.max_blocks));
      if (auto it = last_size.find(e.label); it != last_size.end()) {
        EXPECT_EQ(e.bytes, it->second + o.kv_block_bytes) << e.label;
        ++grown;
      }
      last_size[e.label] = e.bytes;
      live[e.id] = e;
    } else {
      live.erase(e.id);
    }
    // At most one request holds two buffers (old and grown) at a time.
    EXPECT_LE(live.size(), static_cast<size_t>(o.max_requests) + 1);
  }
  EXPECT_GT(grown, 1000u);
}

// Regression: stress_setup_events is the count of allocations before the first
// steady-state event, checked on the events: the fill (then a free), the weights and optimizer
// state (then layer 0's activation), the prompts (then a request grows and frees its old buffer).
TEST_P(EveryWorkload, SetupEventsEndWhereTheSteadyStateStarts) {
  const StressWorkloadOptions o = small(GetParam());
  const std::string& w = GetParam();
  const uint64_t setup = stress_setup_events(o);
  const uint64_t expected = w == "kv_cache"                                   ? 8
                            : (w == "training_step" || w == "variable_batch") ? 12
                                                                              : 200;
  ASSERT_EQ(setup, expected) << w;
  const auto events = make_stress_workload(o, 0);
  std::set<uint64_t> setup_ids;
  for (uint64_t i = 0; i < setup; ++i) {
    EXPECT_EQ(events[i].op, TraceOp::kAlloc) << w << " " << i;
    setup_ids.insert(events[i].id);
  }
  if (w == "kv_cache") {
    EXPECT_EQ(events[setup].op, TraceOp::kAlloc);  // the grown buffer, then the old one's free
    EXPECT_EQ(events[setup + 1].op, TraceOp::kFree);
    EXPECT_EQ(setup_ids.count(events[setup + 1].id), 1u);
  } else if (w == "training_step" || w == "variable_batch") {
    EXPECT_EQ(events[setup - 1].label, "layer5/opt_state");
    EXPECT_EQ(events[setup].label, "layer0/act");
  } else {
    EXPECT_EQ(events[setup].op, TraceOp::kFree);
  }
}

TEST(StressWorkloadTest, SteadyStateDescriptionSaysHowManyEventsFill) {
  StressWorkloadOptions o = small("lognormal");
  EXPECT_NE(describe_stress_workload(o).find(
                "5000 events per core (200 fill the arena, 4800 in the steady state)"),
            std::string::npos)
      << describe_stress_workload(o);
}

// training_step, variable_batch and kv_cache give their setup count too
// (2 x 6 layers of weights and optimizer state; 8 prompts), the rest of the 5000 events after it.
TEST(StressWorkloadTest, EveryDescriptionSaysHowManyEventsAreSetup) {
  for (const char* w : {"training_step", "variable_batch"}) {
    const StressWorkloadOptions o = small(w);
    EXPECT_NE(
        describe_stress_workload(o).find(
            "5000 events per core (12 setup: weights and optimizer state; 4988 in the steps)"),
        std::string::npos)
        << describe_stress_workload(o);
  }
  const StressWorkloadOptions kv = small("kv_cache");
  EXPECT_NE(describe_stress_workload(kv).find("5000 events per core (8 setup: the first "
                                              "requests' prompts; 4992 growing and replacing "
                                              "requests)"),
            std::string::npos)
      << describe_stress_workload(kv);
}

TEST(StressWorkloadTest, SteadyStateKeepsLiveBuffers) {
  const StressWorkloadOptions o = small("bimodal");
  const auto events = make_stress_workload(o, 0);
  EXPECT_EQ(replay(events).live.size(), o.live_buffers);
}

TEST(StressWorkloadTest, BadOptionsNameTheField) {
  StressWorkloadOptions o = small("nope");
  EXPECT_THROW(make_stress_workload(o, 0), InvalidArgumentError);
  o = small("training_step");
  o.layers = 0;
  try {
    make_stress_workload(o, 0);
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("layers"), std::string::npos) << e.what();
  }
  o = small("kv_cache");
  o.max_blocks = 2;
  EXPECT_THROW(make_stress_workload(o, 0), InvalidArgumentError);
  EXPECT_THROW(make_stress_workload(small("kv_cache"), -1), InvalidArgumentError);
}

// The messages name the `vtpu stress` option a user typed, then the field (a bare
// "activation_bytes 512" named only the struct field).
TEST(StressWorkloadTest, BadOptionsNameTheCommandLineOption) {
  const auto message = [](const StressWorkloadOptions& o) {
    try {
      o.validate();
    } catch (const InvalidArgumentError& e) {
      return e.message();
    }
    return std::string("no error");
  };
  StressWorkloadOptions o = small("training_step");
  o.activation_bytes = 512;
  EXPECT_EQ(message(o),
            "stress workload training_step: --activation-bytes 512 (activation_bytes; expected "
            "1 KiB..1 TiB)");
  o = small("kv_cache");
  o.kv_block_bytes = uint64_t{1} << 40;
  o.max_blocks = 32;  // 32 TiB
  EXPECT_EQ(message(o),
            "stress workload kv_cache: --kv-block-bytes 1099511627776 x --max-blocks 32 is above "
            "16 TiB (kv_block_bytes * max_blocks; expected at most 16 TiB)");
  o = small("uniform");
  o.live_buffers = 0;
  EXPECT_EQ(message(o), "stress workload uniform: --live 0 (live_buffers; expected >= 1)");
}

}  // namespace
}  // namespace vtpu
