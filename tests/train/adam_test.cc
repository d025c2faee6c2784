#include "vtpu/train/adam.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vtpu/common/error.h"

namespace vtpu {
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

// ZeRO's partitioned optimizer: updating a vector shard by shard gives bit-identical parameters
// and moments to updating it whole, wherever a shard starts and however long it is. adam_update
// runs on Eigen's SIMD packets with scalar code for an unaligned head and a short tail, so the
// cuts include shards shorter than a packet, odd offsets and a long shard at an odd offset.
TEST(AdamTest, ShardedUpdateIsBitIdenticalToTheWholeUpdate) {
  const size_t n = 2051;
  std::vector<float> whole(n), grads(n);
  for (size_t i = 0; i < n; ++i) {
    whole[i] = 0.01f * static_cast<float>(i % 97) - 0.2f;
    grads[i] = 1e-3f * static_cast<float>((i * 7919) % 23) - 0.011f;
  }
  std::vector<float> sharded = whole, m1(n, 0.0f), v1(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f);
  const std::vector<size_t> cuts{0, 1, 4, 13, 26, 27, 544, 1027, 2050, n};
  for (int64_t t = 1; t <= 5; ++t) {
    adam_update(whole, grads, m1, v1, t, 1e-2f, AdamOptions{});
    for (size_t s = 0; s + 1 < cuts.size(); ++s) {
      const size_t a = cuts[s], len = cuts[s + 1] - cuts[s];
      adam_update(std::span<float>(sharded).subspan(a, len),
                  std::span<const float>(grads).subspan(a, len),
                  std::span<float>(m2).subspan(a, len), std::span<float>(v2).subspan(a, len), t,
                  1e-2f, AdamOptions{});
    }
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(sharded[i]), std::bit_cast<uint32_t>(whole[i])) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(m2[i]), std::bit_cast<uint32_t>(m1[i])) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(v2[i]), std::bit_cast<uint32_t>(v1[i])) << i;
  }
}

// The vectorised update against Algorithm 1 computed per element in double, on 1000 elements
// over 20 steps: each parameter within 1e-5 relative of the double reference.
TEST(AdamTest, VectorisedUpdateMatchesADoubleReferencePerElement) {
  const size_t n = 1000;
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd(n), md(n, 0.0), vd(n, 0.0);
  for (size_t i = 0; i < n; ++i) pd[i] = p[i] = std::sin(0.37f * static_cast<float>(i));
  const AdamOptions o;
  const double b1 = o.beta1, b2 = o.beta2, eps = o.eps, lr = 1e-2;
  for (int64_t t = 1; t <= 20; ++t) {
    for (size_t i = 0; i < n; ++i) {
      g[i] = 0.1f * std::cos(0.11f * static_cast<float>(i * t)) + 1e-3f;
    }
    adam_update(p, g, m, v, t, static_cast<float>(lr), o);
    for (size_t i = 0; i < n; ++i) {
      md[i] = b1 * md[i] + (1 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1 - b2) * g[i] * g[i];
      const double mh = md[i] / (1 - std::pow(b1, t)), vh = vd[i] / (1 - std::pow(b2, t));
      pd[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(p[i], pd[i], 1e-5 * std::max(1.0, std::abs(pd[i]))) << i;
  }
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
    EXPECT_NE(std::string(e.what()).find("Adam betas are 1, 0.999 (expected each < 1)"),
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
}  // namespace vtpu
