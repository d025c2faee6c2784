#include "vtpu/train/fsdp_trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/train/mlp_test_fixture.h"
#include "vtpu/common/error.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {
namespace {

using testing::mlp_runtime_options;

using testing::round256;

// The hand-worked byte counts below are logical bytes: padding off.
RuntimeOptions unpadded_options(int cores) {
  RuntimeOptions o = mlp_runtime_options(cores);
  o.pad_arrays = false;
  return o;
}

class FsdpTrainerTest : public testing::DigitsFixture<> {
 protected:
  // hidden 37: the FlatParameters have 65 * 37 = 2405 elements, which none of 2, 3, 4 and 8
  // divides, and 10 * 37 + 10 = 380, which 3 and 8 do not divide: every core count pads.
  static FsdpConfig config(bool prefetch, const std::string& optimizer = "sgd") {
    FsdpConfig c;
    c.mlp = testing::mlp_test_config(40, 24, 37, 7);  // 24: a multiple of 2, 3, 4 and 8
    c.mlp.optimizer = optimizer;
    c.mlp.learning_rate = optimizer == "adam" ? 0.01f : 0.2f;
    c.prefetch = prefetch;
    return c;
  }
  // The reference of an N-core run: train_mlp on 1 core accumulating N micro-batches, which adds
  // the same per-core partial gradients in the same (rank) order as the N-core reduction.
  MlpResult reference(MlpConfig c, int n) const {
    c.micro_batches = n;
    Runtime rt(mlp_runtime_options(1));
    return train_mlp(rt, split_, c);
  }
  // Core 0's HBM breakdown of data-parallel train_mlp on n cores after its last step (its peak).
  HbmBreakdown data_parallel_peak(const std::string& optimizer, int n) const {
    MlpConfig dp = config(true, optimizer).mlp;
    HbmBreakdown peak;
    dp.at_peak = [&](Runtime& rt) { peak = hbm_breakdown(rt.core(0).hbm().chunk_records()); };
    Runtime rt(unpadded_options(n));
    train_mlp(rt, split_, dp);
    return peak;
  }
};

TEST(FsdpFlatParamsTest, VectorsAreChargedWholeTilesOf1024Floats) {
  EXPECT_EQ(fsdp_vector_charged_bytes(1, true), 4096u);
  EXPECT_EQ(fsdp_vector_charged_bytes(1024, true), 4096u);
  EXPECT_EQ(fsdp_vector_charged_bytes(1025, true), 8192u);
  EXPECT_EQ(fsdp_vector_charged_bytes(1025, false), 4100u);
  EXPECT_EQ(fsdp_vector_charged_bytes(0, true), 0u);
  EXPECT_THROW(fsdp_vector_charged_bytes(-1, true), InvalidArgumentError);
}

TEST(FsdpFlatParamsTest, PaddingIsFlatParameterStyle) {
  // Worked by hand: 2405 = 3 * 801 + 2, so 3 shards of 802 and 1 padding element; 380 = 3 * 126
  // + 2, so 3 shards of 127 and 1 padding element.
  const std::vector<FlatParamShape> f = fsdp_flat_params(37, 3);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].name, "layer0");
  EXPECT_EQ(f[0].numel, 2405);
  EXPECT_EQ(f[0].padded_numel, 2406);
  EXPECT_EQ(f[0].shard_numel, 802);
  EXPECT_EQ(f[1].numel, 380);
  EXPECT_EQ(f[1].padded_numel, 381);
  EXPECT_EQ(f[1].shard_numel, 127);
  // The default 64 hidden units on 8 cores: 4160 divides evenly, 650 pads to 656.
  const std::vector<FlatParamShape> d = fsdp_flat_params(64, 8);
  EXPECT_EQ(d[0].padded_numel, 4160);
  EXPECT_EQ(d[0].shard_numel, 520);
  EXPECT_EQ(d[1].padded_numel, 656);
  EXPECT_EQ(d[1].shard_numel, 82);
  // More cores than elements in a unit: some shards are all padding.
  const std::vector<FlatParamShape> t = fsdp_flat_params(1, 100);
  EXPECT_EQ(t[0].numel, 65);
  EXPECT_EQ(t[0].padded_numel, 100);
  EXPECT_EQ(t[0].shard_numel, 1);
  EXPECT_THROW(fsdp_flat_params(0, 2), InvalidArgumentError);
  EXPECT_THROW(fsdp_flat_params(4, 0), InvalidArgumentError);
}

// The loss at every step equals the single-core run's, for 1, 2, 3, 4 and 8 cores, with and
// without prefetch, with SGD and with Adam; and the final parameters match. The single-core run
// accumulates N micro-batches, so it adds the same f32 partial gradients in the same order as the
// reduce-scatter, but Eigen's SIMD/scalar split of a 37-wide row depends on the buffer's address
// and the CPU's vector width, so the runs agree to f32 rounding, not bit for bit: within 1e-6
// with SGD; Adam divides by sqrt(v) and grows that rounding to about 4e-4 in 40 steps on an AVX2
// CPU, so its losses are held to 1e-3. A wrong shard offset or padding is off by far more.
TEST_F(FsdpTrainerTest, LossesMatchTheSingleCoreRunForEveryCoreCount) {
  for (const char* optimizer : {"sgd", "adam"}) {
    for (bool prefetch : {true, false}) {
      for (int n : {1, 2, 3, 4, 8}) {
        const MlpResult base = reference(config(prefetch, optimizer).mlp, n);
        Runtime rt(mlp_runtime_options(n));
        const FsdpResult r = train_fsdp(rt, split_, config(prefetch, optimizer), {});
        ASSERT_EQ(r.losses.size(), base.losses.size());
        const bool adam = std::string(optimizer) == "adam";
        const double loss_bound = adam ? 1e-3 : 1e-6, parameter_bound = 1e-6;
        const double worst = max_relative_difference(r.losses, base.losses);
        EXPECT_LE(worst, loss_bound) << optimizer << ", " << n << " cores, prefetch " << prefetch;
        ASSERT_EQ(r.parameters.size(), base.parameters.size());
        // Adam's parameters are compared through the losses only: single elements drift further.
        for (size_t i = 0; i < r.parameters.size() && !adam; ++i) {
          ASSERT_NEAR(r.parameters[i], base.parameters[i], parameter_bound)
              << optimizer << ", " << n << " cores, parameter " << i;
        }
        EXPECT_TRUE(r.padding_is_zero) << optimizer << ", " << n << " cores";
        EXPECT_EQ(r.optimizer, optimizer);
        EXPECT_LT(r.losses.back(), 0.6 * r.losses.front());  // it learns
        // Per step: 4 all-gathers of a shard (2 forward, 2 backward), 2 reduce-scatters of the
        // padded flat gradients, 1 all-reduce of the loss; bytes are the inputs' (per core).
        const std::vector<FlatParamShape> f = fsdp_flat_params(37, n);
        const uint64_t steps = 40;
        for (int c = 0; c < n; ++c) {
          EXPECT_EQ(r.all_gather[c].num_collectives, 4 * steps);
          EXPECT_EQ(r.all_gather[c].bytes, steps * 2 * 4 * (f[0].shard_numel + f[1].shard_numel));
          EXPECT_EQ(r.reduce_scatter[c].num_collectives, 2 * steps);
          EXPECT_EQ(r.reduce_scatter[c].bytes, steps * 4 * (f[0].padded_numel + f[1].padded_numel));
          EXPECT_EQ(r.loss_all_reduce[c].num_collectives, steps);
        }
      }
    }
  }
}

// Issue 6's hidden 1024 case: the 1e-4 check failed against a 1-core run that sums the whole
// batch in one GEMM (f32 rounding of a different summation, amplified by training). Against the
// 1-core run that accumulates N micro-batches (the reduction order of the N-core runs), FSDP and
// data parallel on 2, 3 and 8 cores match within 1e-4, with SGD and Adam, over 30 steps.
TEST_F(FsdpTrainerTest, HiddenThousandMatchesTheSingleCoreRun) {
  for (const char* optimizer : {"sgd", "adam"}) {
    for (int n : {2, 3, 8}) {
      FsdpConfig c = config(true, optimizer);
      c.mlp.hidden = 1024;
      c.mlp.steps = 30;
      c.mlp.global_batch = 48;  // a multiple of 2, 3 and 8
      const MlpResult base = reference(c.mlp, n);
      Runtime rt(mlp_runtime_options(n));
      const FsdpResult f = train_fsdp(rt, split_, c, {});
      Runtime rt_dp(mlp_runtime_options(n));
      const MlpResult dp = train_mlp(rt_dp, split_, c.mlp);
      EXPECT_LE(max_relative_difference(f.losses, base.losses), 1e-4) << optimizer << ", " << n;
      EXPECT_LE(max_relative_difference(dp.losses, base.losses), 1e-4) << optimizer << ", " << n;
      EXPECT_TRUE(f.padding_is_zero);
      EXPECT_LT(f.losses.back(), 0.6 * f.losses.front());
    }
  }
}

// Regression: `vtpu train fsdp --cores 8 --hidden 1` printed "FSDP vs
// data parallel: max relative difference 1.18e-07". With one hidden unit Eigen computes dA1 =
// dZ2 W2^T (8 x 10 times 10 x 1) coefficient by coefficient, and its SIMD/scalar split depended
// on W2's address, which the flat layout puts 65 floats in and FSDP's gathered unit at 0; both
// trainers now work on copies of W2 and dW2 at Eigen's alignment. FSDP, data parallel and the
// micro-batched single core give the same bits (8 rows per core on 8 cores, 2 on 32).
TEST_F(FsdpTrainerTest, HiddenOneIsBitIdenticalToDataParallel) {
  for (int n : {8, 32}) {
    FsdpConfig c;
    c.mlp = testing::mlp_test_config(50, 64, 1, 0);
    Runtime rt(mlp_runtime_options(n));
    const FsdpResult f = train_fsdp(rt, split_, c, {});
    Runtime rt_dp(mlp_runtime_options(n));
    const MlpResult dp = train_mlp(rt_dp, split_, c.mlp);
    const MlpResult base = reference(c.mlp, n);
    EXPECT_EQ(f.losses, dp.losses) << n << " cores";
    EXPECT_EQ(f.parameters, dp.parameters) << n << " cores";
    EXPECT_EQ(dp.losses, base.losses) << n << " cores";
    EXPECT_EQ(dp.parameters, base.parameters) << n << " cores";
    EXPECT_LT(f.losses.back(), f.losses.front());  // it learns, even with one hidden unit
  }
}

// Persistent HBM per core is exactly the shard bytes, worked by hand for 3 cores and hidden 37
// with padding off:
// layer 0 shards of 802 floats (3208 B, a 3328 B chunk), layer 1 shards of 127 floats (508 B, a
// 512 B chunk), for the parameters and again for the gradients; no optimizer state (SGD). The
// data-parallel replica holds 2785 floats (11140 B, an 11264 B chunk) and its bucket 2786.
// With Adam, m and v add two more shards of each layer (ZeRO-3's 16 bytes per parameter split
// N ways, here in f32: 4 x (params) / N), and the replica two more 11264 B chunks.
TEST_F(FsdpTrainerTest, AdamStateIsShardedLikeTheParameters) {
  const int n = 3;
  const uint64_t shard_chunks = 3328 + 512;
  for (bool prefetch : {false, true}) {
    Runtime rt(unpadded_options(n));
    const FsdpResult r = train_fsdp(rt, split_, config(prefetch, "adam"), {});
    EXPECT_EQ(r.peak.params, shard_chunks);
    EXPECT_EQ(r.peak.grads, shard_chunks);
    EXPECT_EQ(r.peak.opt_state, 2 * shard_chunks);
    EXPECT_EQ(r.peak.persistent_state(), 4 * shard_chunks);
    // After training: the training set, the parameter shards and the m and v shards.
    for (int c = 0; c < n; ++c) {
      const MemoryStats& s = r.hbm[static_cast<size_t>(c)];
      const int64_t rows = split_.train.num_rows();
      EXPECT_EQ(s.bytes_in_use,
                round256(4 * rows * 64) + round256(4 * rows * 10) + 3 * shard_chunks);
    }
  }
  const HbmBreakdown dp_peak = data_parallel_peak("adam", n);
  EXPECT_EQ(dp_peak.params, 11264u);
  EXPECT_EQ(dp_peak.grads, 11264u);
  EXPECT_EQ(dp_peak.opt_state, 2 * 11264u);
  // The ratio the report prints: 4 x 11264 / (4 x 3840) = 2.93 on 3 cores.
  EXPECT_EQ(dp_peak.persistent_state(), 4 * 11264u);
}

TEST_F(FsdpTrainerTest, PersistentHbmIsExactlyTheShardBytes) {
  const int n = 3;
  const int64_t rows = split_.train.num_rows(), b = 24 / n, h = 37;
  const uint64_t training_set = round256(4 * rows * 64) + round256(4 * rows * 10);
  const uint64_t shard_chunks = 3328 + 512;
  const uint64_t activations = round256(4 * b * 64) + 2 * round256(4 * b * 10) +
                               2 * round256(4 * b * h);  // x, y, logits, z1, a1
  // Padded layers: 2406 floats (9624 B, a 9728 B chunk) and 381 floats (1524 B, 1536 B).
  const uint64_t layer0 = 9728, layer1 = 1536;
  for (bool prefetch : {false, true}) {
    Runtime rt(unpadded_options(n));
    const FsdpResult r = train_fsdp(rt, split_, config(prefetch), {});
    EXPECT_EQ(r.peak.params, shard_chunks);
    EXPECT_EQ(r.peak.grads, shard_chunks);
    EXPECT_EQ(r.peak.opt_state, 0u);
    EXPECT_EQ(r.peak.persistent_state(), 2 * shard_chunks);
    EXPECT_EQ(r.peak.training_set, training_set);
    EXPECT_EQ(r.peak.activations, activations);
    EXPECT_EQ(r.peak.other, 256u);  // the loss scalar
    // The temporaries at the peak. Without prefetch: the gathered layer 0 alone (the backward
    // frees it before the gradient temporary). With prefetch: in layer 1's backward, gathered
    // layer 1, the prefetched gathered layer 0 and layer 1's unsharded gradient.
    const uint64_t temps = prefetch ? layer0 + 2 * layer1 : layer0;
    EXPECT_EQ(r.peak.gathered + r.peak.unsharded_grads, temps);
    if (!prefetch) {
      EXPECT_EQ(r.peak.gathered, layer0);
    }
    const uint64_t peak = training_set + 2 * shard_chunks + activations + 256 + temps;
    for (int c = 0; c < n; ++c) {
      const MemoryStats& s = r.hbm[static_cast<size_t>(c)];
      // After training (the result is read before the trainer returns): the training set and
      // the parameter shards.
      EXPECT_EQ(s.bytes_in_use, training_set + shard_chunks) << "core " << c;
      EXPECT_EQ(s.peak_bytes_in_use, peak) << "core " << c;
    }
    EXPECT_EQ(r.peak.total(), peak);
  }
  // Against data parallel on the same cores: parameters and bucket are whole replicas.
  const HbmBreakdown dp_peak = data_parallel_peak("sgd", n);
  EXPECT_EQ(dp_peak.params, 11264u);
  EXPECT_EQ(dp_peak.grads, 11264u);
  EXPECT_EQ(dp_peak.gathered + dp_peak.unsharded_grads + dp_peak.other, 0u);
  EXPECT_EQ(dp_peak.activations, activations);
}

// With padding on (the default) every FSDP buffer is charged as the 1-D f32 vector it is, under
// the vector tiling T(1024): rounded up to 1024 floats, 4096 B. Worked by hand for 3 cores and
// hidden 37: the shards of 802 and 127 floats take 4096 B each; the gathered (and unsharded
// gradient) layer 0 of 2406 floats 3072 x 4 = 12288 B, layer 1 of 381 4096 B. The loss scalar
// f32[] is untiled: 4 B, a 256 B chunk. Padding off gives the same losses and parameters.
TEST_F(FsdpTrainerTest, BuffersAreChargedTheirPaddedBytes) {
  const int n = 3;
  const uint64_t shard_bytes = 4096 + 4096, layer0 = 12288, layer1 = 4096;
  for (const std::string optimizer : {"sgd", "adam"}) {
    for (bool prefetch : {false, true}) {
      Runtime rt(mlp_runtime_options(n));
      ASSERT_TRUE(rt.options().pad_arrays);
      const FsdpResult r = train_fsdp(rt, split_, config(prefetch, optimizer), {});
      EXPECT_EQ(r.peak.params, shard_bytes);
      EXPECT_EQ(r.peak.grads, shard_bytes);
      EXPECT_EQ(r.peak.opt_state, optimizer == "adam" ? 2 * shard_bytes : 0u);
      EXPECT_EQ(r.peak.other, 256u);
      // The same temporaries at the peak as without padding (see above), at their padded bytes.
      EXPECT_EQ(r.peak.gathered + r.peak.unsharded_grads, prefetch ? layer0 + 2 * layer1 : layer0);
      Runtime plain(unpadded_options(n));
      const FsdpResult u = train_fsdp(plain, split_, config(prefetch, optimizer), {});
      EXPECT_EQ(r.losses, u.losses);
      EXPECT_EQ(r.parameters, u.parameters);
    }
  }
}

TEST_F(FsdpTrainerTest, BadConfigs) {
  Runtime rt(mlp_runtime_options(4));
  auto expect_message = [&](const FsdpConfig& bad, const std::string& needle) {
    try {
      train_fsdp(rt, split_, bad, {});
      FAIL() << needle;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  FsdpConfig c = config(true);
  c.mlp.global_batch = 10;
  expect_message(c, "global batch 10 cannot be split evenly across 4 cores");
  c = config(true);
  c.mlp.kernels = "pallas";
  EXPECT_THROW(train_fsdp(rt, split_, c, {}), InvalidArgumentError);
  c = config(true);
  c.mlp.micro_batches = 2;
  expect_message(c, "micro_batches is 2 (expected 1)");
  c = config(true);
  c.mlp.optimizer = "lamb";
  expect_message(c, "optimizer is 'lamb' (expected sgd or adam)");
  EXPECT_THROW(max_relative_difference({1.0}, {1.0, 2.0}), InvalidArgumentError);
  // Too little HBM: the arena's out-of-memory error, never a crash.
  RuntimeOptions tiny = mlp_runtime_options(2);
  tiny.hbm_bytes_per_core = 64 << 10;
  Runtime small(tiny);
  EXPECT_THROW(train_fsdp(small, split_, config(true), {}), ResourceExhaustedError);
}

}  // namespace
}  // namespace vtpu
