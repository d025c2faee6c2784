// What the digits MLP trainer tests share (mlp_trainer_test, mlp_tp_trainer_test,
// fsdp_trainer_test): the runtime they train on, the real digits split, a short training config,
// and BFC's rounding for their worked HBM figures.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/mlp_trainer.h"
#include "vtpu/runtime/runtime_options.h"
#include "tests/test_data.h"

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
