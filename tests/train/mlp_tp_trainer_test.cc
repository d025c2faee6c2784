// The digits MLP with Megatron tensor parallelism (train/mlp_tp_trainer.h): the shards are the
// right blocks, the losses match the single-core train_mlp run within 1e-4 relative on 1-D and
// 2-D layouts (the planner's tp and dp+tp strategies) with SGD and with Adam, one tensor
// all-reduce per step (per micro-batch), 1/T of the parameters and optimizer state per core, and
// clear errors.
#include "vtpu/train/mlp_tp_trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "tests/train/mlp_test_fixture.h"
#include "vtpu/common/error.h"
#include "vtpu/train/fsdp_trainer.h"

namespace vtpu {
namespace {

using testing::mlp_runtime_options;
using testing::mlp_test_config;

// Hand-worked: hidden 4 over 2 shards, parameters numbered 0.. in the flat [W1 (64 x 4), b1 (4),
// W2 (4 x 10), b2 (10)] (310 floats). Shard 1 holds W1 columns 2..3 (row k: 4k + 2, 4k + 3), b1
// 258..259, W2 rows 2..3 (260 + 20 .. 260 + 39) and all of b2 (300..309).
TEST(MlpTpTrainerTest, ShardsAreMegatronBlocks) {
  std::vector<float> full(310);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
  EXPECT_EQ(mlp_tp_shard_parameters(4, 2), 75 * 2 + 10);
  const std::vector<float> s = mlp_tp_shard(full, 4, 2, 1);
  ASSERT_EQ(s.size(), 160u);
  EXPECT_EQ(s[0], 2.0f);      // W1[0][2]
  EXPECT_EQ(s[1], 3.0f);      // W1[0][3]
  EXPECT_EQ(s[2], 6.0f);      // W1[1][2]
  EXPECT_EQ(s[127], 255.0f);  // W1[63][3]
  EXPECT_EQ(s[128], 258.0f);  // b1[2]
  EXPECT_EQ(s[129], 259.0f);  // b1[3]
  EXPECT_EQ(s[130], 280.0f);  // W2[2][0]
  EXPECT_EQ(s[149], 299.0f);  // W2[3][9]
  EXPECT_EQ(s[150], 300.0f);  // b2[0]
  EXPECT_EQ(s[159], 309.0f);  // b2[9]
  EXPECT_THROW(mlp_tp_shard(full, 4, 3, 0), InvalidArgumentError);
  EXPECT_THROW(mlp_tp_shard(full, 4, 2, 2), InvalidArgumentError);
  EXPECT_THROW(mlp_tp_shard(std::vector<float>(10), 4, 2, 0), InvalidArgumentError);
}

struct Case {
  std::vector<int64_t> mesh;
  std::vector<std::string> data, tensor;
  std::string name;
};

// "mesh 2x4, data axes [model], tensor axes [data]" in the CTest name, not the struct's bytes
// (its vectors' pointers would change the name with every build).
void PrintTo(const Case& c, std::ostream* os) {
  const auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& a : v) s += (s.empty() ? "" : ", ") + a;
    return "[" + s + "]";
  };
  std::string mesh;
  for (int64_t n : c.mesh) mesh += (mesh.empty() ? "" : "x") + std::to_string(n);
  *os << "mesh " << mesh << ", data axes " << list(c.data) << ", tensor axes " << list(c.tensor);
}

class MlpTpVsSingleCoreTest : public testing::DigitsFixture<::testing::TestWithParam<Case>> {};

TEST_P(MlpTpVsSingleCoreTest, LossesMatchTheSingleCoreRunWithin1e4) {
  const Case& k = GetParam();
  const MlpConfig c = mlp_test_config(60, 32, 64);
  Runtime one(mlp_runtime_options(1));
  const MlpResult ref = train_mlp(one, split_, c);
  const Mesh mesh(k.mesh, {"data", "model"});
  const DataTensorLayout layout = DataTensorLayout::from_mesh(mesh, k.data, k.tensor);
  Runtime rt(mlp_runtime_options(static_cast<int>(mesh.size())));
  const MlpTensorParallelResult r = train_mlp_tensor_parallel(rt, split_, c, layout);
  EXPECT_LE(max_relative_difference(r.run.losses, ref.losses), 1e-4);
  EXPECT_LT(r.run.losses.back(), 0.5 * r.run.losses.front());  // it trains
  EXPECT_TRUE(r.run.replicas_identical());
  EXPECT_FALSE(r.run.replica_mismatch.has_value());
  // The gathered final parameters are the single-core ones up to f32 summation order.
  ASSERT_EQ(r.run.parameters.size(), ref.parameters.size());
  for (size_t i = 0; i < ref.parameters.size(); ++i) {
    ASSERT_NEAR(r.run.parameters[i], ref.parameters[i], 1e-4 + 1e-3 * std::abs(ref.parameters[i]))
        << i;
  }
  EXPECT_NEAR(r.run.test_accuracy, ref.test_accuracy, 0.01);
  // Per step: one all-reduce of the (b x 10) logits over the tensor group, one gradient bucket
  // (75 H / T + 10 + 1 floats) over the data group.
  const int64_t b = c.global_batch / layout.data;
  const int64_t shard = 75 * c.hidden / layout.tensor + 10;
  EXPECT_EQ(r.shard_parameters, shard);
  for (size_t core = 0; core < r.tensor_all_reduce.size(); ++core) {
    EXPECT_EQ(r.tensor_all_reduce[core].num_collectives, static_cast<uint64_t>(c.steps));
    EXPECT_EQ(r.tensor_all_reduce[core].bytes, static_cast<uint64_t>(c.steps * b * 10 * 4));
    // A data group of one core runs no all-reduce (as train_transformer_on_layout).
    const uint64_t dp_calls = layout.data > 1 ? static_cast<uint64_t>(c.steps) : 0;
    EXPECT_EQ(r.run.all_reduce[core].num_collectives, dp_calls);
    EXPECT_EQ(r.run.all_reduce[core].bytes, dp_calls * static_cast<uint64_t>((shard + 1) * 4));
  }
}

// --optimizer adam (train/adam.h) on the shards, as train_mlp and train_fsdp have it: the
// losses match the single-core Adam run within 1e-4 relative and the model learns at Adam's
// small learning rate (plain SGD at that rate would not, and is far from the Adam losses); core
// 0's two moments are each shaped like its parameter shard (its four tensors), allocated once
// with the parameters and visible at the peak (the at_peak hook runs under every layout).
TEST_P(MlpTpVsSingleCoreTest, AdamMatchesTheSingleCoreAdamRunWithin1e4) {
  const Case& k = GetParam();
  MlpConfig c = mlp_test_config(40, 32, 64);
  c.optimizer = "adam";
  c.learning_rate = 0.01f;
  Runtime one(mlp_runtime_options(1));
  const MlpResult ref = train_mlp(one, split_, c);
  MlpConfig sgd = c;
  sgd.optimizer = "sgd";
  Runtime one_sgd(mlp_runtime_options(1));
  const MlpResult sgd_ref = train_mlp(one_sgd, split_, sgd);

  const Mesh mesh(k.mesh, {"data", "model"});
  const DataTensorLayout layout = DataTensorLayout::from_mesh(mesh, k.data, k.tensor);
  MlpConfig tc = c;
  HbmBreakdown peak;
  int peaks = 0;
  tc.at_peak = [&](Runtime& rt) {
    peak = hbm_breakdown(rt.core(0).hbm().chunk_records());
    ++peaks;
  };
  Runtime rt(mlp_runtime_options(static_cast<int>(mesh.size())));
  const MlpTensorParallelResult r = train_mlp_tensor_parallel(rt, split_, tc, layout);
  EXPECT_LE(max_relative_difference(r.run.losses, ref.losses), 1e-4);
  EXPECT_GT(max_relative_difference(r.run.losses, sgd_ref.losses), 1e-2);
  EXPECT_LT(r.run.losses.back(), 0.6 * r.run.losses.front());  // it learns
  EXPECT_TRUE(r.run.replicas_identical());
  EXPECT_FALSE(r.run.replica_mismatch.has_value());
  EXPECT_EQ(peaks, 1);
  // The shard's four tensors, each padded under T(8,128).
  const uint64_t shard_bytes = testing::mlp_params_bytes(c.hidden / layout.tensor);
  EXPECT_EQ(peak.params, testing::round256(shard_bytes));
  EXPECT_EQ(peak.opt_state, 2 * testing::round256(shard_bytes));
}

INSTANTIATE_TEST_SUITE_P(Layouts, MlpTpVsSingleCoreTest,
                         ::testing::Values(Case{{1, 2}, {}, {"model"}, "tp2"},
                                           Case{{1, 8}, {}, {"model"}, "tp8"},
                                           Case{{2, 2}, {"data"}, {"model"}, "dp2_tp2"},
                                           Case{{2, 4}, {"data"}, {"model"}, "dp2_tp4"},
                                           Case{{2, 4}, {"model"}, {"data"}, "dp4_tp2_transposed"},
                                           Case{{2, 4}, {}, {"data", "model"}, "tp8_two_axes"}),
                         [](const auto& info) { return info.param.name; });

// Gradient accumulation runs under tensor parallelism too (one training loop): on D x T = 1 x 2
// with 2 micro-batches a core performs the f32 additions of the 2 x 2 layout's data shards, in
// rank order, and its tensor all-reduces sum the same partial logits, so the runs are
// bit-identical. Each micro-batch has its own all-reduce of the (b / K x 10) logits.
class MlpTpMicroBatchTest : public testing::DigitsFixture<> {};

TEST_F(MlpTpMicroBatchTest, MicroBatchesReproduceDataShardsExactly) {
  MlpConfig c = mlp_test_config(25, 32, 64);
  Runtime rt4(mlp_runtime_options(4));
  const MlpTensorParallelResult shards =
      train_mlp_tensor_parallel(rt4, split_, c, DataTensorLayout::grid(2, 2));
  c.micro_batches = 2;
  Runtime rt2(mlp_runtime_options(2));
  const MlpTensorParallelResult micro =
      train_mlp_tensor_parallel(rt2, split_, c, DataTensorLayout::grid(1, 2));
  EXPECT_EQ(micro.run.losses, shards.run.losses);
  EXPECT_EQ(micro.run.parameters, shards.run.parameters);
  EXPECT_EQ(micro.tensor_all_reduce[0].num_collectives, 2u * 25u);
  EXPECT_EQ(micro.tensor_all_reduce[0].bytes, 2u * 25u * 16u * 10u * 4u);
}

// Padding is a charge, not a computation: with RuntimeOptions::pad_arrays off, the data-parallel
// (2 x 1) and the dp+tp (2 x 2) runs give the same losses, parameters and collectives bit for
// bit, and core 0's parameter shard is charged its logical bytes (75 Hs + 10 floats) instead of
// its four tensors' padded ones (W1 64 x 128, b1 8 x 128, W2 Hs x 128 rows rounded to 8, b2
// 8 x 128 floats, for Hs <= 128).
class MlpTpPaddingTest : public testing::DigitsFixture<> {};

TEST_F(MlpTpPaddingTest, PaddingOffChangesOnlyTheHbmFigures) {
  for (const int64_t tensor : {1, 2}) {
    MlpConfig c = mlp_test_config(20, 32, 64);
    const DataTensorLayout layout = DataTensorLayout::grid(2, tensor);
    const int64_t hs = c.hidden / tensor;
    std::vector<MlpTensorParallelResult> runs;
    for (const bool pad : {true, false}) {
      HbmBreakdown peak;
      c.at_peak = [&](Runtime& rt) { peak = hbm_breakdown(rt.core(0).hbm().chunk_records()); };
      RuntimeOptions o = mlp_runtime_options(static_cast<int>(layout.num_cores()));
      o.pad_arrays = pad;
      Runtime rt(o);
      runs.push_back(train_mlp_tensor_parallel(rt, split_, c, layout));
      const uint64_t params = pad ? (64u + 8 + static_cast<uint64_t>(hs) + 8) * 128 * 4
                                  : static_cast<uint64_t>(75 * hs + 10) * 4;
      EXPECT_EQ(peak.params, testing::round256(params)) << "tensor " << tensor << ", pad " << pad;
    }
    EXPECT_EQ(runs[0].run.losses, runs[1].run.losses) << "tensor " << tensor;
    EXPECT_EQ(runs[0].run.parameters, runs[1].run.parameters) << "tensor " << tensor;
    EXPECT_TRUE(runs[1].run.replicas_identical());
    for (size_t core = 0; core < runs[0].run.all_reduce.size(); ++core) {
      EXPECT_EQ(runs[0].run.all_reduce[core].bytes, runs[1].run.all_reduce[core].bytes);
      EXPECT_EQ(runs[0].tensor_all_reduce[core].bytes, runs[1].tensor_all_reduce[core].bytes);
    }
    EXPECT_GT(runs[0].run.hbm[0].peak_bytes_in_use, runs[1].run.hbm[0].peak_bytes_in_use);
  }
}

TEST(MlpTpTrainerErrorsTest, BadConfigsAreClear) {
  VTPU_REQUIRE_DIGITS();
  const DigitsSplit split = split_digits(load_digits_csv(testing::digits_path()));
  MlpConfig c = mlp_test_config(1, 8, 37);
  Runtime rt(mlp_runtime_options(2));
  try {
    train_mlp_tensor_parallel(rt, split, c, DataTensorLayout::grid(1, 2));
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("hidden 37 does not split over a tensor-parallel group "
                                         "of 2 cores"),
              std::string::npos)
        << e.what();
  }
  c.hidden = 64;
  EXPECT_THROW(train_mlp_tensor_parallel(rt, split, c, DataTensorLayout::grid(2, 2)),
               InvalidArgumentError);  // 4 cores on a runtime of 2
  c.kernels = "pallas";
  EXPECT_THROW(train_mlp_tensor_parallel(rt, split, c, DataTensorLayout::grid(1, 2)),
               UnimplementedError);
  c.kernels = "eigen";
  c.global_batch = 7;
  EXPECT_THROW(train_mlp_tensor_parallel(rt, split, c, DataTensorLayout::grid(2, 1)),
               InvalidArgumentError);  // 7 rows over 2 data shards
}

}  // namespace
}  // namespace vtpu
