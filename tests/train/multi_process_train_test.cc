// The trainers when one Runtime spans several processes (simulated by threads,
// tests/threaded_processes.h): every process gets the one-process run's losses and final
// parameters bit for bit, and every core's figures (HBM, collective stats) in core order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/threaded_processes.h"
#include "tests/train/mlp_test_fixture.h"
#include "tests/train/transformer_test_config.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_tp_trainer.h"
#include "vtpu/train/mlp_trainer.h"
#include "vtpu/train/transformer_trainer.h"

namespace vtpu {
namespace {

using testing::DigitsFixture;
using testing::mlp_runtime_options;
using testing::mlp_test_config;
using testing_util::ThreadedProcesses;

// Runs `train(runtime)` on one runtime of `cores` cores, then on `processes` simulated processes
// of cores / processes each; returns the one-process result and every process's.
template <typename Result, typename Train>
std::pair<Result, std::vector<Result>> one_and_many(int cores, int processes, Train&& train) {
  Runtime one(mlp_runtime_options(cores));
  Result want = train(one);
  ThreadedProcesses procs(processes);
  std::vector<Result> got(static_cast<size_t>(processes));
  procs.run([&](int p) {
    Runtime rt(mlp_runtime_options(cores), procs.group(p));
    got[static_cast<size_t>(p)] = train(rt);
  });
  return {std::move(want), std::move(got)};
}

// Per-core figures that do not depend on timing: the arenas and the bytes each core reduced.
void expect_same_hbm(const std::vector<MemoryStats>& got, const std::vector<MemoryStats>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t c = 0; c < want.size(); ++c) {
    EXPECT_EQ(got[c].peak_bytes_in_use, want[c].peak_bytes_in_use) << "core " << c;
    EXPECT_EQ(got[c].num_allocs, want[c].num_allocs) << "core " << c;
  }
}
void expect_same_traffic(const std::vector<CollectiveStats>& got,
                         const std::vector<CollectiveStats>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t c = 0; c < want.size(); ++c) {
    EXPECT_EQ(got[c].num_collectives, want[c].num_collectives) << "core " << c;
    EXPECT_EQ(got[c].bytes, want[c].bytes) << "core " << c;
  }
}

using MultiProcessMlpTest = DigitsFixture<>;

TEST_F(MultiProcessMlpTest, TwoProcessesOfFourCoresRepeatEightCoresBitForBit) {
  const MlpConfig c = mlp_test_config(12, 64, 32);
  const auto [want, got] =
      one_and_many<MlpResult>(8, 2, [&](Runtime& rt) { return train_mlp(rt, split_, c); });
  EXPECT_EQ(want.num_processes, 1);
  for (const MlpResult& r : got) {
    EXPECT_EQ(r.num_processes, 2);
    EXPECT_EQ(r.losses, want.losses);  // exact: the same sums in the same order
    EXPECT_EQ(r.parameters, want.parameters);
    EXPECT_EQ(r.test_accuracy, want.test_accuracy);
    EXPECT_TRUE(r.replicas_identical());
    expect_same_hbm(r.hbm, want.hbm);
    expect_same_traffic(r.all_reduce, want.all_reduce);
  }
}

TEST_F(MultiProcessMlpTest, TensorParallelGroupsInsideAndAcrossProcesses) {
  const MlpConfig c = mlp_test_config(8, 32, 32);
  // 2 x 4: each tensor group inside one process, the data groups across the two; 4 x 2 on four
  // processes: the same with the data groups across all four.
  for (const auto& [data, tensor, processes] : {std::tuple{2, 4, 2}, std::tuple{4, 2, 4}}) {
    const auto layout = DataTensorLayout::grid(data, tensor);
    const auto [want, got] = one_and_many<MlpTensorParallelResult>(8, processes, [&](Runtime& rt) {
      return train_mlp_tensor_parallel(rt, split_, c, layout);
    });
    for (const MlpTensorParallelResult& r : got) {
      EXPECT_EQ(r.run.losses, want.run.losses) << data << "x" << tensor;
      EXPECT_EQ(r.run.parameters, want.run.parameters) << data << "x" << tensor;
      EXPECT_TRUE(r.run.replicas_identical());
      expect_same_traffic(r.tensor_all_reduce, want.tensor_all_reduce);
    }
  }
}

TEST_F(MultiProcessMlpTest, FsdpOverTwoProcessesRepeatsOneProcessBitForBit) {
  FsdpConfig c;
  c.mlp = mlp_test_config(10, 64, 32);
  const auto [want, got] =
      one_and_many<FsdpResult>(8, 2, [&](Runtime& rt) { return train_fsdp(rt, split_, c); });
  for (const FsdpResult& r : got) {
    EXPECT_EQ(r.num_processes, 2);
    EXPECT_EQ(r.losses, want.losses);
    EXPECT_EQ(r.parameters, want.parameters);
    EXPECT_TRUE(r.padding_is_zero);
    expect_same_hbm(r.hbm, want.hbm);
    expect_same_traffic(r.all_gather, want.all_gather);
    expect_same_traffic(r.reduce_scatter, want.reduce_scatter);
  }
}

TEST(MultiProcessTransformerTest, DataAxisAcrossTwoProcessesRepeatsOneProcessBitForBit) {
  TransformerConfig c = testing::small_config();
  c.steps = 5;
  const TokenText tokens = make_token_text(testing::english_text(), c.vocab);
  const auto [want, got] = one_and_many<TransformerResult>(8, 2, [&](Runtime& rt) {
    return train_transformer(rt, tokens.tokens, c, TransformerMesh{2, 4});
  });
  for (const TransformerResult& r : got) {
    EXPECT_EQ(r.num_processes, 2);
    EXPECT_EQ(r.losses, want.losses);
    EXPECT_EQ(r.shards, want.shards);
    EXPECT_TRUE(r.replicas_identical());
    expect_same_hbm(r.hbm, want.hbm);
    expect_same_traffic(r.data_all_reduce, want.data_all_reduce);
    expect_same_traffic(r.tensor_all_reduce, want.tensor_all_reduce);
  }
}

}  // namespace
}  // namespace vtpu
