#include "examples/adam.h"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "common/error.h"

namespace vtpu::examples {
namespace {

// Two steps of Kingma & Ba's Algorithm 1 worked in double (Python) for lr 0.1 and the default
// betas and eps: g = 0.5 then -0.25 from p = 1.
//   t=1: m = 0.05, v = 2.5e-4, m_hat = 0.5, v_hat = 0.25, p = 1 - 0.1 * 0.5 / 0.5 = 0.9
//   t=2: m = 0.02, v = 3.1225e-4, m_hat = 0.02 / 0.19, v_hat = 3.1225e-4 / 0.001999,
//        p = 0.9 - 0.1 * m_hat / sqrt(v_hat) = 0.8733662987
// The moments carry f32's rounding of the betas (1 - 0.999f is 1.00005e-3), hence relative
// tolerances of 1e-6 (m) and 1e-4 (v).
TEST(AdamTest, TwoStepsMatchTheAlgorithmByHand) {
  std::vector<float> p{1.0f}, m{0.0f}, v{0.0f};
  const AdamOptions o;
  std::vector<float> g{0.5f};
  adam_update(p, g, m, v, 1, 0.1f, o);
  EXPECT_NEAR(p[0], 0.9f, 1e-6);
  EXPECT_NEAR(m[0], 0.05f, 0.05 * 1e-6);
  EXPECT_NEAR(v[0], 2.5e-4f, 2.5e-4 * 1e-4);
  g[0] = -0.25f;
  adam_update(p, g, m, v, 2, 0.1f, o);
  EXPECT_NEAR(p[0], 0.8733662987f, 2e-6);
  EXPECT_NEAR(m[0], 0.02f, 0.02 * 1e-6);
  EXPECT_NEAR(v[0], 3.1225e-4f, 3.1225e-4 * 1e-4);
}

// FSDP's padding: an element whose gradient is always 0 keeps p, m and v exactly 0.
TEST(AdamTest, ZeroGradientKeepsZeroPaddingZero) {
  std::vector<float> p(5, 0.0f), g(5, 0.0f), m(5, 0.0f), v(5, 0.0f);
  for (int64_t t = 1; t <= 10; ++t) adam_update(p, g, m, v, t, 0.5f, AdamOptions{});
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i], 0.0f);
    EXPECT_EQ(m[i], 0.0f);
    EXPECT_EQ(v[i], 0.0f);
  }
}

// ZeRO's partitioned optimizer: updating a vector shard by shard (uneven cuts, 3 shards) gives
// bit-identical parameters and moments to updating it whole.
TEST(AdamTest, ShardedUpdateIsBitIdenticalToTheWholeUpdate) {
  const size_t n = 37;
  std::vector<float> whole(n), grads(n);
  for (size_t i = 0; i < n; ++i) {
    whole[i] = 0.01f * static_cast<float>(i) - 0.2f;
    grads[i] = 1e-3f * static_cast<float>((i * 7919) % 23) - 0.011f;
  }
  std::vector<float> sharded = whole, m1(n, 0.0f), v1(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f);
  const size_t cuts[] = {0, 13, 26, n};
  for (int64_t t = 1; t <= 5; ++t) {
    adam_update(whole, grads, m1, v1, t, 1e-2f, AdamOptions{});
    for (int s = 0; s < 3; ++s) {
      const size_t a = cuts[s], len = cuts[s + 1] - cuts[s];
      adam_update(std::span<float>(sharded).subspan(a, len),
                  std::span<const float>(grads).subspan(a, len),
                  std::span<float>(m2).subspan(a, len), std::span<float>(v2).subspan(a, len), t,
                  1e-2f, AdamOptions{});
    }
  }
  EXPECT_EQ(sharded, whole);
  EXPECT_EQ(m2, m1);
  EXPECT_EQ(v2, v1);
}

TEST(AdamTest, BadInput) {
  std::vector<float> p(2), g(3), m(2), v(2);
  try {
    adam_update(p, g, m, v, 1, 0.1f, AdamOptions{});
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("params 2, grads 3, m 2, v 2"), std::string::npos)
        << e.what();
  }
  g.resize(2);
  EXPECT_THROW(adam_update(p, g, m, v, 0, 0.1f, AdamOptions{}), InvalidArgumentError);
  AdamOptions o;
  o.beta1 = 1.0f;
  try {
    o.validate();
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("Adam betas are 1.000000, 0.999000 (expected each < 1)"),
              std::string::npos)
        << e.what();
  }
  o = AdamOptions{};
  o.eps = 0.0f;
  EXPECT_THROW(o.validate(), InvalidArgumentError);
  o = AdamOptions{};
  o.beta2 = -0.5f;
  EXPECT_THROW(o.validate(), InvalidArgumentError);
  EXPECT_NO_THROW(AdamOptions{}.validate());
}

}  // namespace
}  // namespace vtpu::examples
