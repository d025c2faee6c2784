// What the digits MLP trainer tests share (mlp_trainer_test, mlp_tp_trainer_test,
// fsdp_trainer_test): the runtime they train on, the real digits split, a short training config,
// and BFC's rounding for their worked HBM figures.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "tests/test_data.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/runtime/runtime_options.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/mlp_trainer.h"

namespace vtpu::testing {

/// `cores` virtual cores with 64 MiB of HBM each: room for every test config, small enough that
/// the arenas stay cheap.
inline RuntimeOptions mlp_runtime_options(int cores) {
  RuntimeOptions o;
  o.num_cores = cores;
  o.hbm_bytes_per_core = 64ull << 20;
  return o;
}

/// A short run: `steps` steps of `global_batch` rows, `hidden` hidden units, `seed`, no logging;
/// every other field at MlpConfig's default (SGD at 0.2, Eigen, one micro-batch).
inline MlpConfig mlp_test_config(int64_t steps, int64_t global_batch, int64_t hidden,
                                 uint64_t seed = 0) {
  MlpConfig c;
  c.steps = steps;
  c.global_batch = global_batch;
  c.hidden = hidden;
  c.seed = seed;
  c.log_every = 0;
  return c;
}

/// BFC hands out chunks in multiples of 256 bytes.
inline uint64_t round256(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

/// An f32 (rows, cols) array under the TPU tiling T(8,128): rows up to a multiple of 8, columns
/// of 128 (a vector of n counts as (1, n)). `pad` false: the logical rows x cols x 4.
inline uint64_t f32_tiled(int64_t rows, int64_t cols, bool pad = true) {
  if (!pad) return static_cast<uint64_t>(rows * cols) * 4;
  return static_cast<uint64_t>((rows + 7) / 8 * 8) *
         static_cast<uint64_t>((cols + 127) / 128 * 128) * 4;
}

/// The charged bytes of f32[n] under the TPU vector layout T(1024): n rounded up to 1024.
inline uint64_t f32_vector(int64_t n, bool pad = true) {
  if (!pad) return static_cast<uint64_t>(n) * 4;
  return static_cast<uint64_t>((n + 1023) / 1024 * 1024) * 4;
}

/// The charged bytes of the MLP's flat parameters of `hidden` units (W1 64 x H, b1 H, W2 H x 10,
/// b2 10), each tensor as its own array, before BFC's rounding; the gradient bucket adds the
/// 4-byte loss scalar.
inline uint64_t mlp_params_bytes(int64_t hidden, bool pad = true) {
  return f32_tiled(64, hidden, pad) + f32_vector(hidden, pad) + f32_tiled(hidden, 10, pad) +
         f32_vector(10, pad);
}

/// What the replicated training set (pixels rows x 64, one-hot labels rows x 10) costs one core,
/// as device_put charges it (its own tests work that out): measured on a fresh runtime.
inline uint64_t replicated_digits_bytes(const DigitsDataset& train, RuntimeOptions options) {
  Runtime rt(options);
  const ReplicatedDigits data = replicate_digits(rt, train, "mlp");
  return rt.core(0).hbm().memory_stats().bytes_in_use;
}

/// A fixture (`Base` ::testing::Test, or ::testing::TestWithParam<P> for a parameterised one)
/// whose split_ holds the real digits, split as the trainers split them. A missing data file fails
/// the test with the fix (VTPU_REQUIRE_DIGITS).
template <typename Base = ::testing::Test>
class DigitsFixture : public Base {
 protected:
  void SetUp() override {
    VTPU_REQUIRE_DIGITS();
    split_ = split_digits(load_digits_csv(digits_path()));
  }
  DigitsSplit split_;
};

}  // namespace vtpu::testing
