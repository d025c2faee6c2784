// Tests for train/mlp_memory_plan.h: the MLP step's buffers by hand, their sizes against what
// train_mlp really allocates, and static plans for 1, 2, 4 and 8 cores replayed through an
// HbmArena with the planned policy.
#include "vtpu/train/mlp_memory_plan.h"

#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/memory/hbm_arena.h"
#include "tests/memory/plan_replay.h"

namespace vtpu {
namespace {

uint64_t round256(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

TEST(MlpMemoryPlanTest, DefaultConfigOnOneCoreByHand) {
  // 64 rows, 64 hidden: x 64x64, y 64x10, z1 and a1 64x64, logits 64x10, bucket 75*64+10+1 f32.
  const std::vector<BufferInterval> iv = mlp_step_buffer_intervals(MlpConfig{}, 1);
  ASSERT_EQ(iv.size(), 6u);
  const struct {
    const char* label;
    uint64_t bytes;
    int64_t start, end;
  } want[] = {{"mlp/x", 16384, 0, 10},    {"mlp/y", 2560, 0, 5},
              {"mlp/z1", 16384, 1, 11},   {"mlp/a1", 16384, 2, 9},
              {"mlp/logits", 2560, 3, 8}, {"mlp/grads+loss", 19244, 6, 13}};
  for (size_t i = 0; i < iv.size(); ++i) {
    EXPECT_EQ(iv[i].label, want[i].label);
    EXPECT_EQ(iv[i].bytes, want[i].bytes) << want[i].label;
    EXPECT_EQ(iv[i].start, want[i].start) << want[i].label;
    EXPECT_EQ(iv[i].end, want[i].end) << want[i].label;
  }
  // Peak at times 6..8: x, z1, a1, logits and the bucket (19456 aligned) = 71168 bytes. The
  // planner reaches it: the bucket at 0, x, z1, a1 and logits stacked above, and y (dead before
  // the bucket is written) reusing the bucket's space.
  const HeapPlan plan = plan_heap(iv);
  EXPECT_EQ(plan.peak_live_bytes(), 71168u);
  EXPECT_EQ(plan.heap_bytes(), 71168u);
  EXPECT_EQ(plan.offsets()[5], 0u);  // bucket
  EXPECT_EQ(plan.offsets()[1], 0u);  // y
}

TEST(MlpMemoryPlanTest, SizesScaleWithTheLocalBatch) {
  MlpConfig c;
  c.global_batch = 96;
  c.hidden = 100;
  const std::vector<BufferInterval> iv = mlp_step_buffer_intervals(c, 4);  // 24 rows per core
  EXPECT_EQ(iv[0].bytes, 24u * 64 * 4);
  EXPECT_EQ(iv[1].bytes, 24u * 10 * 4);
  EXPECT_EQ(iv[2].bytes, 24u * 100 * 4);
  EXPECT_EQ(iv[3].bytes, 24u * 100 * 4);
  EXPECT_EQ(iv[4].bytes, 24u * 10 * 4);
  EXPECT_EQ(iv[5].bytes, (75u * 100 + 10 + 1) * 4);
}

TEST(MlpMemoryPlanTest, RejectsBadConfigs) {
  EXPECT_THROW(mlp_step_buffer_intervals(MlpConfig{}, 3), InvalidArgumentError);  // 64 / 3
  EXPECT_THROW(mlp_step_buffer_intervals(MlpConfig{}, 0), InvalidArgumentError);
  MlpConfig huge;
  huge.global_batch = int64_t{1} << 62;
  EXPECT_THROW(mlp_step_buffer_intervals(huge, 1), InvalidArgumentError);  // x overflows
}

// The plan's buffers are the trainer's: after one step on a small synthetic dataset, each core's
// BFC peak is the persistent buffers (training set, parameters) plus exactly these buffers, each
// rounded to 256 B as both BFC and the plan round.
TEST(MlpMemoryPlanTest, BytesMatchWhatTheTrainerAllocates) {
  DigitsSplit split;
  constexpr int64_t kRows = 40;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int k = 0; k < DigitsDataset::kNumFeatures; ++k)
      split.train.pixels.push_back(static_cast<float>((r * 7 + k * 3) % 17) / 16.0f);
    split.train.labels.push_back(static_cast<int>(r % 10));
  }
  split.test = split.train;
  MlpConfig c;
  c.steps = 1;
  c.global_batch = 32;
  c.hidden = 48;
  c.log_every = 0;
  constexpr int kCores = 2;
  RuntimeOptions o;
  o.num_cores = kCores;
  o.hbm_bytes_per_core = uint64_t{64} << 20;
  Runtime rt(o);
  const MlpResult r = train_mlp(rt, split, c);
  uint64_t step_bytes = 0;
  for (const BufferInterval& b : mlp_step_buffer_intervals(c, kCores)) {
    step_bytes += round256(b.bytes);
  }
  const uint64_t persistent = round256(4 * kRows * 64) + round256(4 * kRows * 10) +
                              round256(4 * static_cast<uint64_t>(mlp_num_parameters(c.hidden)));
  for (const MemoryStats& s : r.hbm) EXPECT_EQ(s.peak_bytes_in_use, persistent + step_bytes);
}

class MlpMemoryPlanCoresTest : public ::testing::TestWithParam<int> {};

// The target: a static plan within 3% of the lower bound (peak live bytes), replayed for
// three steps through an arena that holds exactly the plan's heap.
TEST_P(MlpMemoryPlanCoresTest, PlanIsWithinThreePercentOfPeakAndReplays) {
  const int cores = GetParam();
  auto plan = std::make_shared<const HeapPlan>(plan_heap(mlp_step_buffer_intervals({}, cores)));
  const double ratio =
      static_cast<double>(plan->heap_bytes()) / static_cast<double>(plan->peak_live_bytes());
  std::cout << "MLP step (default config) on " << cores << " core(s): heap " << plan->heap_bytes()
            << " B, peak live " << plan->peak_live_bytes() << " B, ratio " << ratio << ", order "
            << plan->order_name() << "\n";
  RecordProperty("heap_bytes", std::to_string(plan->heap_bytes()));
  RecordProperty("peak_live_bytes", std::to_string(plan->peak_live_bytes()));
  EXPECT_LE(ratio, 1.03);
  PolicyOptions po;
  po.heap_plan = plan;
  HbmArena arena(ArenaOptions{.capacity_bytes = plan->heap_bytes(),
                              .policy = "planned",
                              .policy_options = po,
                              .backing = true});
  vtpu::testing::replay_plan(arena, *plan, 3);
}

// Beyond the defaults: hidden widths and batches where the bucket is much smaller or much larger
// than the activations.
TEST(MlpMemoryPlanTest, PlansStayWithinThreePercentAcrossConfigs) {
  for (int64_t hidden : {1, 16, 100, 1024, 4096}) {
    for (int64_t batch : {8, 64, 512, 4096}) {
      for (int cores : {1, 2, 8}) {
        MlpConfig c;
        c.hidden = hidden;
        c.global_batch = batch;
        const HeapPlan plan = plan_heap(mlp_step_buffer_intervals(c, cores));
        EXPECT_LE(static_cast<double>(plan.heap_bytes()),
                  1.03 * static_cast<double>(plan.peak_live_bytes()))
            << "hidden " << hidden << ", batch " << batch << ", " << cores << " cores: heap "
            << plan.heap_bytes() << ", peak " << plan.peak_live_bytes();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cores, MlpMemoryPlanCoresTest, ::testing::Values(1, 2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::to_string(p.param) + "cores";
                         });

}  // namespace
}  // namespace vtpu
