// Tests for stress/alloc_workload.h: determinism (and golden values, so that a seed keeps its
// meaning across compilers and standard libraries), validity of the steady-state workload, and
// distribution sanity with bounds computed from the parameters.
#include "vtpu/stress/alloc_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/memory/allocator_policy.h"

namespace vtpu {
namespace {

constexpr size_t kSamples = 100000;

SizeOptions with(SizeDistribution d) {
  SizeOptions o;
  o.distribution = d;
  return o;
}

// P(|Z| < z) for Z the Irwin-Hall sum of 12 uniforms minus 6, from its closed-form CDF.
double irwin_hall_within(double z) {
  auto cdf = [](double x) {
    double sum = 0, binom = 1, fact = 1;
    for (int k = 1; k <= 12; ++k) fact *= k;
    for (int k = 0; k <= 12 && k <= x; ++k) {
      sum += (k % 2 ? -1 : 1) * binom * std::pow(x - k, 12);
      binom = binom * (12 - k) / (k + 1);
    }
    return sum / fact;
  };
  return cdf(6 + z) - cdf(6 - z);
}

TEST(AllocWorkloadTest, NamesRoundTrip) {
  for (SizeDistribution d :
       {SizeDistribution::kUniform, SizeDistribution::kLogNormal, SizeDistribution::kBimodal})
    EXPECT_EQ(parse_size_distribution(size_distribution_name(d)), d);
  try {
    parse_size_distribution("gaussian");
    FAIL() << "accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("'gaussian'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("lognormal"), std::string::npos);
  }
}

TEST(AllocWorkloadTest, SameSeedSameSizesDifferentSeedDifferentSizes) {
  for (SizeDistribution d :
       {SizeDistribution::kUniform, SizeDistribution::kLogNormal, SizeDistribution::kBimodal}) {
    const auto a = sample_sizes(with(d), 1000, 42);
    EXPECT_EQ(a, sample_sizes(with(d), 1000, 42));
    EXPECT_NE(a, sample_sizes(with(d), 1000, 43));
  }
}

// Golden values: the first sizes for seed 1 with the default parameters. They depend only on
// mt19937_64 (fixed by the standard) and our own arithmetic, so they must hold on every platform;
// a change here means a seed no longer names the same workload. The values were cross-checked
// with an independent Python implementation of mt19937_64 and the same transforms.
TEST(AllocWorkloadTest, GoldenSizesForSeedOne) {
  EXPECT_EQ(sample_sizes(with(SizeDistribution::kUniform), 5, 1),
            (std::vector<uint64_t>{56648, 21648, 59022, 7961, 54681}));
  EXPECT_EQ(sample_sizes(with(SizeDistribution::kLogNormal), 5, 1),
            (std::vector<uint64_t>{7489, 1110, 12325, 3446, 256}));
  EXPECT_EQ(sample_sizes(with(SizeDistribution::kBimodal), 5, 1),
            (std::vector<uint64_t>{21648, 7961, 20749, 53647, 35039}));
  SizeOptions half = with(SizeDistribution::kBimodal);
  half.bimodal.large_fraction = 0.5;
  EXPECT_EQ(sample_sizes(half, 8, 1), (std::vector<uint64_t>{3883704, 1729139, 6853296, 6555513,
                                                             35039, 5760935, 1833, 7027284}));
}

TEST(AllocWorkloadTest, UniformIntegerEdges) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(uniform_uint64(rng, 5, 5), 5u);
  uniform_uint64(rng, 0, ~uint64_t{0});  // the full range does not divide by zero
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(uniform_uint64(rng, 10, 13));
  EXPECT_EQ(seen, (std::set<uint64_t>{10, 11, 12, 13}));
}

TEST(AllocWorkloadTest, UniformSanity) {
  SizeOptions o = with(SizeDistribution::kUniform);
  o.uniform.min_bytes = 1000;
  o.uniform.max_bytes = 50000;
  const auto s = sample_sizes(o, kSamples, 3);
  double sum = 0;
  for (uint64_t v : s) {
    ASSERT_GE(v, 1000u);
    ASSERT_LE(v, 50000u);
    sum += static_cast<double>(v);
  }
  const double lo = 1000, hi = 50000;
  const double mean = (lo + hi) / 2;
  const double se = (hi - lo) / std::sqrt(12.0) / std::sqrt(double(kSamples));
  EXPECT_NEAR(sum / kSamples, mean, 5 * se);
  // Both ends are reached to within 0.1% of the range.
  EXPECT_LT(*std::min_element(s.begin(), s.end()), lo + (hi - lo) * 0.001);
  EXPECT_GT(*std::max_element(s.begin(), s.end()), hi - (hi - lo) * 0.001);
}

TEST(AllocWorkloadTest, LogNormalSanity) {
  SizeOptions o = with(SizeDistribution::kLogNormal);
  o.lognormal.median_bytes = 16384;
  o.lognormal.sigma = 1.5;
  o.lognormal.min_bytes = 256;
  o.lognormal.max_bytes = 64 << 20;
  auto s = sample_sizes(o, kSamples, 5);
  for (uint64_t v : s) {
    ASSERT_GE(v, 256u);
    ASSERT_LE(v, 64u << 20);
  }
  const double n = kSamples;
  // Sample median of ln(size): standard error 1.2533 sigma / sqrt(n).
  std::vector<uint64_t> sorted = s;
  std::nth_element(sorted.begin(), sorted.begin() + kSamples / 2, sorted.end());
  const double ln_median = std::log(static_cast<double>(sorted[kSamples / 2]));
  EXPECT_NEAR(ln_median, std::log(16384.0), 5 * 1.2533 * 1.5 / std::sqrt(n));
  // Share within 1 and 2 sigma of the median in log space.
  for (double z : {1.0, 2.0}) {
    const double lo = 16384 * std::exp(-1.5 * z), hi = 16384 * std::exp(1.5 * z);
    const double p = irwin_hall_within(z);
    const double share = static_cast<double>(std::count_if(s.begin(), s.end(),
                                                           [&](uint64_t v) {
                                                             return static_cast<double>(v) > lo &&
                                                                    static_cast<double>(v) < hi;
                                                           })) /
                         n;
    EXPECT_NEAR(share, p, 5 * std::sqrt(p * (1 - p) / n)) << "within " << z << " sigma";
  }
  // The clamp: P(size < 256) = P(Z < ln(256/16384) / 1.5 = -2.77), about 0.0023 for Irwin-Hall.
  const double at_min = static_cast<double>(std::count(s.begin(), s.end(), 256u)) / n;
  const double p_low = (1 - irwin_hall_within(std::log(16384.0 / 256) / 1.5)) / 2;
  EXPECT_NEAR(at_min, p_low, 5 * std::sqrt(p_low / n) + 1e-4);
}

TEST(AllocWorkloadTest, LogNormalWithZeroSigmaIsTheMedian) {
  SizeOptions o = with(SizeDistribution::kLogNormal);
  o.lognormal.median_bytes = 1000.4;
  o.lognormal.sigma = 0;
  for (uint64_t v : sample_sizes(o, 100, 1)) EXPECT_EQ(v, 1000u);
}

TEST(AllocWorkloadTest, BimodalSanity) {
  SizeOptions o = with(SizeDistribution::kBimodal);
  o.bimodal.large_fraction = 0.05;
  o.bimodal.small_min_bytes = 256;
  o.bimodal.small_max_bytes = 4096;
  o.bimodal.large_min_bytes = 1 << 20;
  o.bimodal.large_max_bytes = 8 << 20;
  const auto s = sample_sizes(o, kSamples, 9);
  double large = 0, small_sum = 0, large_sum = 0;
  for (uint64_t v : s) {
    const bool is_small = v >= 256 && v <= 4096;
    const bool is_large = v >= (1u << 20) && v <= (8u << 20);
    ASSERT_TRUE(is_small || is_large) << v;
    if (is_large) {
      ++large;
      large_sum += static_cast<double>(v);
    } else {
      small_sum += static_cast<double>(v);
    }
  }
  const double n = kSamples;
  EXPECT_NEAR(large / n, 0.05, 5 * std::sqrt(0.05 * 0.95 / n));
  const double small_n = n - large;
  EXPECT_NEAR(small_sum / small_n, (256 + 4096) / 2.0,
              5 * (4096 - 256) / std::sqrt(12.0) / std::sqrt(small_n));
  EXPECT_NEAR(large_sum / large, (1 + 8) / 2.0 * (1 << 20),
              5 * (7 << 20) / std::sqrt(12.0) / std::sqrt(large));
}

TEST(AllocWorkloadTest, BimodalExtremeFractions) {
  SizeOptions o = with(SizeDistribution::kBimodal);
  o.bimodal.large_fraction = 0;
  for (uint64_t v : sample_sizes(o, 1000, 1)) EXPECT_LE(v, o.bimodal.small_max_bytes);
  o.bimodal.large_fraction = 1;
  for (uint64_t v : sample_sizes(o, 1000, 1)) EXPECT_GE(v, o.bimodal.large_min_bytes);
}

TEST(AllocWorkloadTest, RejectsBadParameters) {
  SizeOptions o = with(SizeDistribution::kUniform);
  o.uniform.min_bytes = 0;
  EXPECT_THROW(SizeSampler{o}, InvalidArgumentError);
  o.uniform.min_bytes = 10;
  o.uniform.max_bytes = 9;
  EXPECT_THROW(SizeSampler{o}, InvalidArgumentError);
  o = with(SizeDistribution::kLogNormal);
  o.lognormal.sigma = -1;
  EXPECT_THROW(SizeSampler{o}, InvalidArgumentError);
  o.lognormal.sigma = 1;
  o.lognormal.median_bytes = 0;
  EXPECT_THROW(SizeSampler{o}, InvalidArgumentError);
  o = with(SizeDistribution::kBimodal);
  o.bimodal.large_fraction = 1.5;
  EXPECT_THROW(SizeSampler{o}, InvalidArgumentError);
  o.bimodal.large_fraction = 0.5;
  o.bimodal.large_min_bytes = o.bimodal.large_max_bytes + 1;
  EXPECT_THROW(SizeSampler{o}, InvalidArgumentError);

  SteadyStateOptions w;
  w.live_buffers = 0;
  EXPECT_THROW(make_steady_state_workload(w), InvalidArgumentError);
  w.live_buffers = 10;
  w.core = -1;
  EXPECT_THROW(make_steady_state_workload(w), InvalidArgumentError);
  w.core = 0;
  w.pairs = kMaxWorkloadEvents;
  EXPECT_THROW(make_steady_state_workload(w), InvalidArgumentError);
}

TEST(AllocWorkloadTest, SteadyStateShapeAndDeterminism) {
  SteadyStateOptions w;
  w.live_buffers = 50;
  w.pairs = 400;
  w.core = 3;
  w.seed = 11;
  const auto events = make_steady_state_workload(w);
  ASSERT_EQ(events.size(), 50u + 2 * 400u);
  EXPECT_EQ(events, make_steady_state_workload(w));
  w.seed = 12;
  EXPECT_NE(events, make_steady_state_workload(w));
  validate_trace_events(events, "steady state");  // ids live exactly when they should be
  std::set<uint64_t> live;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    EXPECT_EQ(e.core, 3);
    EXPECT_EQ(e.t_us, static_cast<double>(i));
    if (i < 50) {
      EXPECT_EQ(e.op, TraceOp::kAlloc);
      EXPECT_EQ(e.id, i);
    } else if ((i - 50) % 2 == 0) {
      EXPECT_EQ(e.op, TraceOp::kFree);
    } else {
      EXPECT_EQ(e.op, TraceOp::kAlloc);
      EXPECT_EQ(e.id, 50 + (i - 50) / 2);
    }
    if (e.op == TraceOp::kAlloc) {
      EXPECT_GE(e.bytes, 1u);
      live.insert(e.id);
    } else {
      live.erase(e.id);
    }
    if (i >= 50 && (i - 50) % 2 == 1) {
      EXPECT_EQ(live.size(), 50u);
    }
  }
}

TEST(AllocWorkloadTest, SteadyStateVictimsAreSpreadOverTheLiveSet) {
  SteadyStateOptions w;
  w.live_buffers = 10;
  w.pairs = 20000;
  const auto events = make_steady_state_workload(w);
  // Victim chosen uniformly among the 10 slots: the fill ids 0..9 die at geometric times, and
  // after 20000 pairs each slot was hit ~2000 times. Count frees per original slot via ids.
  std::map<uint64_t, uint64_t> slot_of;  // id -> slot
  for (uint64_t i = 0; i < 10; ++i) slot_of[i] = i;
  std::vector<uint64_t> hits(10);
  uint64_t pending_slot = 0;
  for (size_t i = 10; i < events.size(); ++i) {
    if (events[i].op == TraceOp::kFree) {
      pending_slot = slot_of.at(events[i].id);
      ++hits[pending_slot];
    } else {
      slot_of[events[i].id] = pending_slot;
    }
  }
  for (uint64_t h : hits) EXPECT_NEAR(static_cast<double>(h), 2000.0, 5 * std::sqrt(2000.0 * 0.9));
}

// With W hot buffers, the first L-W fill ids are never freed and every free is of one of the W
// most recent live ids: the fill ids L-W..L-1 or a later id.
TEST(AllocWorkloadTest, SteadyStateHotBuffersKeepTheRestLive) {
  SteadyStateOptions w;
  w.live_buffers = 100;
  w.hot_buffers = 10;
  w.pairs = 5000;
  const auto events = make_steady_state_workload(w);
  validate_trace_events(events, "steady state, hot");
  std::set<uint64_t> freed;
  for (size_t i = 100; i < events.size(); ++i) {
    if (events[i].op == TraceOp::kFree) {
      EXPECT_GE(events[i].id, 90u);
      freed.insert(events[i].id);
    }
  }
  for (uint64_t id = 90; id < 100; ++id) EXPECT_TRUE(freed.count(id)) << id;  // P(miss) ~ 1e-200
  w.hot_buffers = 101;
  EXPECT_THROW(make_steady_state_workload(w), InvalidArgumentError);
  w.hot_buffers = 100;  // W = L is the uniform case over the whole live set
  w.seed = 5;
  SteadyStateOptions u = w;
  u.hot_buffers = 0;
  EXPECT_EQ(make_steady_state_workload(w), make_steady_state_workload(u));
}

TEST(AllocWorkloadTest, SteadyStateReplaysCleanlyOnEveryPolicy) {
  for (SizeDistribution d :
       {SizeDistribution::kUniform, SizeDistribution::kLogNormal, SizeDistribution::kBimodal}) {
    SteadyStateOptions w;
    w.live_buffers = 300;
    w.pairs = 3000;
    w.sizes = with(d);
    const auto events = make_steady_state_workload(w);
    for (const std::string& name : known_allocator_policies()) {
      auto policy = make_allocator_policy(name, uint64_t{16} << 30);
      std::map<uint64_t, uint64_t> offsets;
      for (const TraceEvent& e : events) {
        if (e.op == TraceOp::kAlloc) {
          auto a = policy->allocate(e.bytes);
          ASSERT_TRUE(a.has_value()) << name << " " << size_distribution_name(d);
          offsets[e.id] = a->offset;
        } else {
          policy->free(offsets.at(e.id));
          offsets.erase(e.id);
        }
      }
      policy->check_consistency();
      EXPECT_EQ(offsets.size(), 300u);
    }
  }
}

}  // namespace
}  // namespace vtpu
