// Cost model: every expected value is worked by hand from the v5e figures (16 GiB HBM
// at 8.1e11 B/s, 1.97e14 bf16 FLOP/s, 4.5e10 B/s one-way per ICI link, 1 us per hop, 2-D torus)
// and the formulas in planner/cost_model.h.
#include "vtpu/planner/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

constexpr double kB = 67108864.0;  // 64 MiB

CostModel v5e() { return CostModel(HardwareProfile::get("v5e")); }

TEST(CostModelTest, AllGatherOverOneTorusAxisUsesThatAxisRing) {
  // Mesh 2x4, all-gather over the axis of 4 (mesh axis 1 -> torus dimension 1): one bidirectional
  // ring, 2 links: beta = 1 / 9e10. alpha = 3 ring steps x 1 us.
  const CollectiveCost c = v5e().collective(CollectiveKind::kAllGather, kB, {1}, {4});
  EXPECT_DOUBLE_EQ(c.alpha_seconds, 3e-6);
  EXPECT_DOUBLE_EQ(c.beta_seconds_per_byte, 1.0 / 9e10);
  // 3e-6 + 0.75 * 67108864 / 9e10 = 3e-6 + 50331648 / 9e10
  EXPECT_NEAR(c.seconds, 5.62240533e-4, 1e-12);
  EXPECT_DOUBLE_EQ(c.sent_bytes_per_core, 50331648.0);
}

TEST(CostModelTest, ReduceScatterEqualsAllGatherAndAllReduceIsTwice) {
  const CostModel m = v5e();
  const double ag = m.collective(CollectiveKind::kAllGather, kB, {1}, {4}).seconds;
  EXPECT_DOUBLE_EQ(m.collective(CollectiveKind::kReduceScatter, kB, {1}, {4}).seconds, ag);
  const CollectiveCost ar = m.collective(CollectiveKind::kAllReduce, kB, {1}, {4});
  EXPECT_NEAR(ar.seconds, 1.124481066e-3, 1e-12);
  EXPECT_DOUBLE_EQ(ar.sent_bytes_per_core, 2 * 50331648.0);
}

TEST(CostModelTest, TwoAxesOfATorusUseFourLinks) {
  // Both axes of 2x4 (n = 8): alpha = 7 us, beta = 1 / (4 x 4.5e10) = 1 / 1.8e11.
  const CollectiveCost c = v5e().collective(CollectiveKind::kAllGather, kB, {0, 1}, {2, 4});
  EXPECT_DOUBLE_EQ(c.alpha_seconds, 7e-6);
  EXPECT_DOUBLE_EQ(c.beta_seconds_per_byte, 1.0 / 1.8e11);
  // 7e-6 + (7/8) * 67108864 / 1.8e11 = 7e-6 + 58720256 / 1.8e11
  EXPECT_NEAR(c.seconds, 3.33223644e-4, 1e-12);
}

TEST(CostModelTest, OneAxisIsSlowerThanTwoForTheSameGroupSize) {
  // 8 devices on one ring (a 1x8 mesh) against 2x4: the single ring has half the links.
  const CostModel m = v5e();
  const double one = m.collective(CollectiveKind::kAllGather, kB, {0}, {8}).seconds;
  const double two = m.collective(CollectiveKind::kAllGather, kB, {0, 1}, {2, 4}).seconds;
  EXPECT_NEAR(one, 7e-6 + 58720256 / 9e10, 1e-12);
  EXPECT_GT(one, 1.9 * two);
}

TEST(CostModelTest, ASizeOneAxisIsNoTorusDimension) {
  // A 1x8 mesh: the group over (x, y) is the same 8 chips on the one ring of y as the group over
  // y alone: 2 links, beta = 1 / 9e10, 7e-6 + (7/8) * 67108864 / 9e10 = 659.45 us, twice the
  // 2x4 mesh's 333.22 us (TwoAxesOfATorusUseFourLinks) less the alpha.
  const CostModel m = v5e();
  const CollectiveCost y = m.collective(CollectiveKind::kAllGather, kB, {1}, {8});
  const CollectiveCost xy = m.collective(CollectiveKind::kAllGather, kB, {0, 1}, {1, 8});
  const CollectiveCost yx = m.collective(CollectiveKind::kAllGather, kB, {1, 0}, {8, 1});
  EXPECT_NEAR(y.seconds, 7e-6 + 58720256 / 9e10, 1e-12);
  EXPECT_NEAR(y.seconds, 6.59447289e-4, 1e-12);
  for (const CollectiveCost& c : {xy, yx}) {
    EXPECT_DOUBLE_EQ(c.beta_seconds_per_byte, 1.0 / 9e10);
    EXPECT_DOUBLE_EQ(c.alpha_seconds, 7e-6);
    EXPECT_DOUBLE_EQ(c.seconds, y.seconds);
  }
  // All-to-all over (x, y) of 1x8: one phase on the ring of 8, c = 16/7:
  // 7e-6 + (1 / 9e10) * (7/64) * B * 16/7 = 7e-6 + B / (4 * 9e10).
  const CollectiveCost a2a = m.collective(CollectiveKind::kAllToAll, kB, {0, 1}, {1, 8});
  EXPECT_NEAR(a2a.seconds, 7e-6 + kB / 4 / 9e10, 1e-12);
  EXPECT_DOUBLE_EQ(a2a.seconds, m.collective(CollectiveKind::kAllToAll, kB, {1}, {8}).seconds);
}

TEST(CostModelTest, AllToAllOnARingUsesTheDerivedConstant) {
  // n = 4, each core holds X = 16 MiB, B = 4X. Shortest-path all-to-all on a bidirectional ring
  // of 4 moves X/4 to each of 3 peers over 1, 2, 1 hops: X * floor(16/4) / 4 = X byte-hops per
  // core, over 2 links each way... total time X * 4 / (2 * 4 * 4.5e10) = X / 9e10.
  const CostModel m = v5e();
  EXPECT_DOUBLE_EQ(m.all_to_all_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(m.all_to_all_factor(4), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.all_to_all_factor(8), 16.0 / 7.0);
  const CollectiveCost c = m.collective(CollectiveKind::kAllToAll, kB, {1}, {4});
  EXPECT_NEAR(c.seconds, 3e-6 + 16777216 / 9e10, 1e-12);
  EXPECT_DOUBLE_EQ(c.sent_bytes_per_core, 3.0 / 16.0 * kB);
}

TEST(CostModelTest, AllToAllOverTwoTorusDimensionsRunsOnePhasePerDimension) {
  // 2x4, X = 8 MiB per core, B = 8X. Phase over 2 (c = 1): 1 us + (1/9e10) * (1/4) * 2X;
  // phase over 4 (c = 4/3): 3 us + (1/9e10) * (3/16) * 4X * 4/3.
  const double x = 8388608.0;
  const CollectiveCost c = v5e().collective(CollectiveKind::kAllToAll, 8 * x, {0, 1}, {2, 4});
  EXPECT_NEAR(c.seconds, 1e-6 + x / 2 / 9e10 + 3e-6 + x / 9e10, 1e-12);
}

TEST(CostModelTest, PermuteIsOneHopOfOneLink) {
  const CollectiveCost c =
      v5e().collective(CollectiveKind::kCollectivePermute, 4.5e6, {0, 1}, {2, 4});
  EXPECT_NEAR(c.seconds, 1e-6 + 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(c.sent_bytes_per_core, 4.5e6);
}

TEST(CostModelTest, ComputeAndHbmTimeTakeTheRooflineMax) {
  const CostModel m = v5e();
  EXPECT_NEAR(m.compute_seconds(1e12, "bf16"), 1e12 / 1.97e14, 1e-15);
  EXPECT_NEAR(m.hbm_seconds(8.1e9), 0.01, 1e-15);
  EXPECT_NEAR(m.op_seconds(1e12, 8.1e9, "bf16"), 0.01, 1e-15);            // HBM-bound
  EXPECT_NEAR(m.op_seconds(1e13, 8.1e9, "bf16"), 1e13 / 1.97e14, 1e-15);  // compute-bound
  EXPECT_EQ(m.hbm_bytes_per_core(), 17179869184u);
  EXPECT_THROW(m.compute_seconds(1, "f8"), InvalidArgumentError);
}

TEST(CostModelTest, NothingToMoveCostsNothing) {
  const CostModel m = v5e();
  EXPECT_EQ(m.collective(CollectiveKind::kAllReduce, kB, {0}, {1}).seconds, 0.0);
  EXPECT_EQ(m.collective(CollectiveKind::kAllReduce, 0, {0}, {4}).seconds, 0.0);
}

TEST(CostModelTest, UniformModelIsTheOldReshardFormula) {
  const CostModel m = CostModel::uniform(5e-5, 5e-9, 3.0);
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, 1e6, {0}, {4}).seconds,
              5e-5 + 5e-9 * 0.75 * 1e6, 1e-15);
  EXPECT_NEAR(m.collective(CollectiveKind::kAllToAll, 1e6, {0}, {4}).seconds,
              5e-5 + 5e-9 * 3.0 / 16.0 * 1e6 * 3.0, 1e-15);
  EXPECT_NEAR(m.collective(CollectiveKind::kCollectivePermute, 1e6, {0}, {4}).seconds,
              5e-5 + 5e-9 * 1e6, 1e-15);
  EXPECT_THROW(CostModel::uniform(-1, 1, 1), InvalidArgumentError);
}

TEST(CostModelTest, CalibratedFitsKeepAlphaAndBeta) {
  HardwareProfile p = HardwareProfile::get("this_machine");
  p.collectives.clear();
  p.collectives["all_gather"] = {CollectiveFit{7e-5, 1e-9, 8, {}}};
  p.collectives["all_to_all"] = {CollectiveFit{7e-5, 3e-9, 8, {}}};
  const CostModel m(p);
  // On the calibration group: alpha as fitted.
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, 1e6, {0}, {8}).seconds,
              7e-5 + 1e-9 * 7.0 / 8.0 * 1e6, 1e-15);
  // Four cores: the same alpha (a constant per collective), (n-1)/n = 3/4.
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, 1e6, {0}, {4}).seconds,
              7e-5 + 1e-9 * 0.75 * 1e6, 1e-15);
  // The all-to-all's own beta; c reported as the ratio to the all-gather's.
  EXPECT_NEAR(m.collective(CollectiveKind::kAllToAll, 8e6, {0}, {8}).seconds,
              7e-5 + 3e-9 * 7.0 / 64.0 * 8e6, 1e-15);
  EXPECT_DOUBLE_EQ(m.all_to_all_factor(8), 3.0);
  // No reduce_scatter fit and no usable link model on shared memory: falls back to the links.
  EXPECT_GT(m.collective(CollectiveKind::kReduceScatter, 1e6, {0}, {8}).seconds, 0.0);
}

/// A host profile with round figures: 2 CPUs, 1e10 f32 FLOP/s, 4e9 B/s memory, a 1 MiB cache
/// at 4e10 B/s, and an all-reduce calibrated on 8 cores.
HardwareProfile host_profile() {
  HardwareProfile p = HardwareProfile::get("v5e");
  p.name = "host";
  p.peak_flops_per_second = {{"f32", 1e10}};
  p.hbm_bytes_per_second = 4e9;
  p.topology = "shared_memory";
  p.host_cpus = 2;
  p.cache_bytes = 1 << 20;
  p.cache_bytes_per_second = 4e10;
  p.collectives = {{"all_reduce", {CollectiveFit{4e-5, 2e-9, 8, {}}}}};
  return p;
}

TEST(CostModelTest, VirtualCoresBeyondTheHostCpusShareThem) {
  const CostModel base(host_profile());
  EXPECT_DOUBLE_EQ(base.compute_seconds(1e10, "f32"), 1.0);  // core count unset: as before
  const CostModel two = base.for_cores(2), eight = base.for_cores(8);
  EXPECT_DOUBLE_EQ(two.oversubscription(), 1.0);
  EXPECT_DOUBLE_EQ(base.for_cores(3).oversubscription(), 1.5);
  EXPECT_DOUBLE_EQ(eight.oversubscription(), 4.0);  // 8 threads on 2 CPUs: a quarter CPU each
  EXPECT_DOUBLE_EQ(eight.compute_seconds(1e10, "f32"), 4.0);
  EXPECT_DOUBLE_EQ(eight.hbm_seconds(4e9), 4.0);
  // The all-reduce fit ran on 8 busy cores (x4 inside it): as fitted on an 8-core mesh, even for
  // a group of 2 in it, 2 (4e-5 + 2e-9 x 1/2 x 1e6) = 2.08e-3 s; a 2-core mesh divides alpha and
  // beta by 4: 2 (1e-5 + 5e-10 x 1/2 x 1e6) = 5.2e-4 s.
  EXPECT_NEAR(eight.collective(CollectiveKind::kAllReduce, 1e6, {0}, {2}).seconds, 2.08e-3, 1e-15);
  const CollectiveCost c = two.collective(CollectiveKind::kAllReduce, 1e6, {0}, {2});
  EXPECT_NEAR(c.alpha_seconds, 1e-5, 1e-18);
  EXPECT_NEAR(c.seconds, 5.2e-4, 1e-15);
  EXPECT_NEAR(base.collective(CollectiveKind::kAllReduce, 1e6, {0}, {2}).seconds, 2.08e-3, 1e-15);
  EXPECT_THROW(base.for_cores(-1), InvalidArgumentError);
}

TEST(CostModelTest, WorkingSetsThatFitTheCacheStreamAtItsBandwidth) {
  const CostModel one = CostModel(host_profile()).for_cores(1);
  EXPECT_TRUE(one.fits_in_cache(524288));
  EXPECT_NEAR(one.memory_seconds(4e6, 524288), 1e-4, 1e-18);   // 4e6 B at 4e10 B/s
  EXPECT_NEAR(one.memory_seconds(4e6, 2097152), 1e-3, 1e-18);  // 2 MiB does not fit: 4e9 B/s
  // 8 cores on 2 CPUs: 4 threads take turns on each CPU and share its cache.
  const CostModel eight = CostModel(host_profile()).for_cores(8);
  EXPECT_TRUE(eight.fits_in_cache(262144));  // x 4 = 1 MiB exactly
  EXPECT_FALSE(eight.fits_in_cache(262145));
  EXPECT_NEAR(eight.memory_seconds(4e6, 262144), 4e-4, 1e-18);
  EXPECT_NEAR(eight.memory_seconds(4e6, 524288), 4e-3, 1e-18);
  // The roofline takes the larger: 2e6 FLOPs take 2e-4 s.
  EXPECT_NEAR(one.op_seconds(2e6, 4e6, 524288, "f32"), 2e-4, 1e-18);
  EXPECT_NEAR(one.op_seconds(2e6, 4e6, 2097152, "f32"), 1e-3, 1e-18);
}

TEST(CostModelTest, TpuProfilesIgnoreTheCoreCount) {
  for (const char* name : {"v4", "v5e", "v5p"}) {
    const CostModel m(HardwareProfile::get(name));
    const CostModel m8 = m.for_cores(8);
    EXPECT_EQ(m8.oversubscription(), 1.0) << name;
    EXPECT_FALSE(m8.fits_in_cache(1)) << name;
    EXPECT_EQ(m8.compute_seconds(1e12, "bf16"), m.compute_seconds(1e12, "bf16")) << name;
    EXPECT_EQ(m8.memory_seconds(8.1e9, 1), m.hbm_seconds(8.1e9)) << name;
    EXPECT_EQ(m8.collective(CollectiveKind::kAllGather, kB, {0, 1}, {2, 4}).seconds,
              m.collective(CollectiveKind::kAllGather, kB, {0, 1}, {2, 4}).seconds)
        << name;
    EXPECT_EQ(m8.describe(), m.describe()) << name;
  }
}

TEST(CostModelTest, BadArgumentsAreErrors) {
  const CostModel m = v5e();
  EXPECT_THROW(m.collective(CollectiveKind::kAllGather, 1, {0, 1}, {2}), InvalidArgumentError);
  EXPECT_THROW(m.collective(CollectiveKind::kAllGather, 1, {0}, {0}), InvalidArgumentError);
  EXPECT_THROW(m.collective(CollectiveKind::kBroadcast, 1, {0}, {2}), UnimplementedError);
}

TEST(CostModelTest, ProfileCollectivesRoundTripAndAreValidated) {
  HardwareProfile p = HardwareProfile::get("v5e");
  p.collectives["all_reduce"] = {CollectiveFit{1e-5, 2e-9, 8, {}}};
  const HardwareProfile q = HardwareProfile::from_json(p.to_json());
  ASSERT_EQ(q.collectives.count("all_reduce"), 1u);
  ASSERT_EQ(q.collectives.at("all_reduce").size(), 1u);
  EXPECT_TRUE(p.to_json()["collectives"]["all_reduce"].is_object());  // one fit: the object form
  EXPECT_DOUBLE_EQ(q.collectives.at("all_reduce").at(0).beta_seconds_per_byte, 2e-9);
  EXPECT_EQ(q.collectives.at("all_reduce").at(0).group_size, 8);
  nlohmann::json j = p.to_json();
  j["collectives"]["broadcast"] = j["collectives"]["all_reduce"];
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
  j = p.to_json();
  j["collectives"]["all_reduce"]["group_size"] = 1;
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
}

// A profile that calibrates only some collectives prices the others from its
// links, exactly as the uncalibrated profile does, and the cost-model line names them.
TEST(CostModelTest, PartlyCalibratedProfilePricesTheRestFromTheLinks) {
  HardwareProfile p = HardwareProfile::get("v5e");
  p.collectives["all_gather"] = {CollectiveFit{2e-5, 1e-10, 8, {}}};
  const CostModel m(p), links = v5e();
  // all_gather: the fit, 2e-5 + 1e-10 x 3/4 x 64 MiB.
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, kB, {1}, {4}).seconds,
              2e-5 + 1e-10 * 0.75 * kB, 1e-15);
  // The others: the link model, 3 us + 0.75 B / 9e10 for a reduce-scatter over the axis of 4.
  for (CollectiveKind k :
       {CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce, CollectiveKind::kAllToAll}) {
    EXPECT_EQ(m.collective(k, kB, {1}, {4}).seconds, links.collective(k, kB, {1}, {4}).seconds)
        << collective_name(k);
  }
  EXPECT_NEAR(m.collective(CollectiveKind::kReduceScatter, kB, {1}, {4}).seconds,
              3e-6 + 0.75 * kB / 9e10, 1e-15);
  const std::string line = m.describe();
  EXPECT_NE(line.find("(calibrated; all_gather alpha 2e-05 s, beta 1e-10 s/B on 8 cores)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("not calibrated, priced from the links: reduce_scatter, all_reduce, "
                      "all_to_all (v5e (torus_2d)"),
            std::string::npos)
      << line;
  // An all-to-all calibrated alone: c against the links' all-gather beta 1 / (2 x 4.5e10).
  HardwareProfile q = HardwareProfile::get("v5e");
  q.collectives["all_to_all"] = {CollectiveFit{2e-5, 3.0 / 9e10, 8, {}}};
  EXPECT_NEAR(CostModel(q).all_to_all_factor(4), 3.0, 1e-12);
  // Fully calibrated: nothing from the links.
  EXPECT_EQ(CostModel::this_machine().describe().find("priced from the links"), std::string::npos);
}

/// host_profile() with all-gather and all-reduce fits on 2 and 8 cores (listed 8 first: the order
/// in the profile does not matter) and an all-to-all fit on 8 only.
HardwareProfile two_size_profile() {
  HardwareProfile p = host_profile();
  p.collectives = {
      {"all_gather", {CollectiveFit{5e-5, 5e-10, 8, {}}, CollectiveFit{1e-6, 2e-10, 2, {}}}},
      {"all_reduce", {CollectiveFit{3e-5, 4e-10, 8, {}}, CollectiveFit{2e-6, 1e-10, 2, {}}}},
      {"all_to_all", {CollectiveFit{5e-5, 1.5e-9, 8, {}}}}};
  return p;
}

TEST(CostModelTest, FitsAtSeveralGroupSizesPriceEachGroupWithItsOwn) {
  const CostModel base(two_size_profile());
  const CostModel two = base.for_cores(2), eight = base.for_cores(8);
  // 2-core mesh, group of 2, the 2-core fits as measured (s(2) / s(2) = 1), B = 1e6:
  // all-gather 1e-6 + 2e-10 x 1/2 x 1e6 = 1.01e-4; all-reduce 2 (2e-6 + 1e-10 x 1/2 x 1e6)
  // = 1.04e-4.
  EXPECT_NEAR(two.collective(CollectiveKind::kAllGather, 1e6, {0}, {2}).seconds, 1.01e-4, 1e-15);
  const CollectiveCost ar2 = two.collective(CollectiveKind::kAllReduce, 1e6, {0}, {2});
  EXPECT_NEAR(ar2.seconds, 1.04e-4, 1e-15);
  EXPECT_NEAR(ar2.alpha_seconds, 2e-6, 1e-18);
  // 8-core mesh, group of 8, the 8-core fits as measured: all-gather 5e-5 + 5e-10 x 7/8 x 1e6 =
  // 4.875e-4; all-reduce 2 (3e-5 + 4e-10 x 7/8 x 1e6) = 7.6e-4.
  EXPECT_NEAR(eight.collective(CollectiveKind::kAllGather, 1e6, {0}, {8}).seconds, 4.875e-4, 1e-15);
  EXPECT_NEAR(eight.collective(CollectiveKind::kAllReduce, 1e6, {0}, {8}).seconds, 7.6e-4, 1e-15);
  // A group of 2 in the 8-core mesh: the 2-core fit times s(8) / s(2) = 4: 4 x 1.01e-4.
  EXPECT_NEAR(eight.collective(CollectiveKind::kAllGather, 1e6, {1}, {2}).seconds, 4.04e-4, 1e-15);
  // Core count unset: the group's own fit, unscaled.
  EXPECT_NEAR(base.collective(CollectiveKind::kAllReduce, 1e6, {0}, {2}).seconds, 1.04e-4, 1e-15);
  EXPECT_NEAR(base.collective(CollectiveKind::kAllReduce, 1e6, {0}, {8}).seconds, 7.6e-4, 1e-15);
  // The all-to-all has only an 8-core fit: a group of 2 on a 2-core mesh uses it divided by
  // s(8) / s(2) = 4: 1.25e-5 + 3.75e-10 x 1/4 x 1e6 = 1.0625e-4. c as priced against the 2-core
  // all-gather beta 2e-10: 3.75e-10 / 2e-10 = 1.875.
  EXPECT_NEAR(two.collective(CollectiveKind::kAllToAll, 1e6, {0}, {2}).seconds, 1.0625e-4, 1e-15);
  EXPECT_NEAR(two.all_to_all_factor(2), 1.875, 1e-12);
  EXPECT_NEAR(eight.all_to_all_factor(8), 3.0, 1e-12);  // 1.5e-9 / 5e-10, both on 8 cores
  // A collective permute over 8 devices sends each block to one peer: the 2-core all-gather fit
  // (a pair's exchange), with its formula alpha + beta B: unset core count 1e-6 + 2e-10 x 1e6 =
  // 2.01e-4; on the 8-core mesh times s(8) / s(2) = 4.
  EXPECT_NEAR(base.collective(CollectiveKind::kCollectivePermute, 1e6, {0}, {8}).seconds, 2.01e-4,
              1e-15);
  EXPECT_NEAR(eight.collective(CollectiveKind::kCollectivePermute, 1e6, {0}, {8}).seconds, 8.04e-4,
              1e-15);
}

TEST(CostModelTest, AMeasuredCurveIsInterpolatedInsideItsRangeAndExtendedByBeta) {
  HardwareProfile p = host_profile();
  CollectiveFit ag{1e-6, 1e-9, 8, {}};
  ag.measured = {{8, 10e-6}, {1024, 20e-6}, {4096, 50e-6}};
  CollectiveFit ar = ag;  // all-reduce: the same curve (times of the whole all-reduce)
  CollectiveFit two{1e-6, 2e-10, 2, {}};
  two.measured = {{8, 1e-6}, {2048, 3e-6}};
  p.collectives = {{"all_gather", {ag, two}}, {"all_reduce", {ar}}};
  const CostModel m(p);
  // Inside: linear between (1024, 20 us) and (4096, 50 us): B = 2560 is halfway, 35 us.
  const CollectiveCost inside = m.collective(CollectiveKind::kAllGather, 2560, {0}, {8});
  EXPECT_TRUE(inside.measured);
  EXPECT_NEAR(inside.seconds, 35e-6, 1e-15);
  EXPECT_NEAR(inside.alpha_seconds, 10e-6, 1e-18);  // the curve's first time
  // On a point: its time. Below the first size: the first time.
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, 1024, {0}, {8}).seconds, 20e-6, 1e-15);
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, 4, {0}, {8}).seconds, 10e-6, 1e-15);
  // Above: 50 us + beta (n-1)/n (B - 4096) = 50e-6 + 1e-9 x 7/8 x 4096 = 53.584 us; the
  // all-reduce's formula counts that term twice: 50e-6 + 2 x 3.584e-6 = 57.168 us.
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, 8192, {0}, {8}).seconds, 53.584e-6, 1e-15);
  const CollectiveCost big_ar = m.collective(CollectiveKind::kAllReduce, 8192, {0}, {8});
  EXPECT_NEAR(big_ar.seconds, 57.168e-6, 1e-15);
  EXPECT_NEAR(big_ar.alpha_seconds, 5e-6, 1e-18);  // half the first time, as the formula's alpha
  // The formula alone would have said 2 (1e-6 + 1e-9 x 7/8 x 8192) = 16.336 us.
  // The sent bytes do not depend on the pricing: 2 x 7/8 x 8192.
  EXPECT_NEAR(big_ar.sent_bytes_per_core, 14336, 1e-9);
  // Oversubscription scales the curve like the formula: a group of 2 in an 8-core program on
  // this 2-CPU host reads the 2-core curve times s(8) / s(2) = 4: at B = 1028 (halfway) 2 us x 4.
  EXPECT_NEAR(m.for_cores(8).collective(CollectiveKind::kAllGather, 1028, {0}, {2}).seconds, 8e-6,
              1e-15);
  // A permute of a 1024-byte block reads the 2-core all-gather curve at 2 x 1024 = 2048: 3 us.
  EXPECT_NEAR(m.collective(CollectiveKind::kCollectivePermute, 1024, {0}, {8}).seconds, 3e-6,
              1e-15);
  // Beyond the 2-core curve a permute adds its formula's beta x B for the extra block bytes: a
  // 2048-byte block reads the curve at 4096, past its last size 2048, so 3 us + 2e-10 x 1024.
  EXPECT_NEAR(m.collective(CollectiveKind::kCollectivePermute, 2048, {0}, {8}).seconds,
              3e-6 + 2e-10 * 1024, 1e-15);
  // The description names the curve.
  EXPECT_NE(m.describe().find("measured curve, 3 sizes 8 B..4.00 KiB"), std::string::npos)
      << m.describe();
}

TEST(CostModelTest, AMeasuredCurveIsPricedThroughItsMonotoneEnvelope) {
  // A curve that dips (16 B and 32 B faster than 8 B), as the shipped 2-core all-reduce does.
  HardwareProfile p = host_profile();
  CollectiveFit ar{1e-6, 1e-9, 2, {}};
  ar.measured = {{8, 4e-6}, {16, 2e-6}, {32, 3e-6}, {64, 6e-6}};
  p.collectives = {{"all_reduce", {ar}}};
  const CostModel m(p);
  // Envelope (running max): 8 B 4 us, 16 B 4 us, 32 B 4 us, 64 B 6 us.
  const auto ar_at = [&](double b) {
    return m.collective(CollectiveKind::kAllReduce, b, {0}, {2});
  };
  EXPECT_NEAR(ar_at(16).seconds, 4e-6, 1e-18);  // measured 2 us, lifted to 8 B's 4 us
  EXPECT_NEAR(ar_at(24).seconds, 4e-6, 1e-18);  // between two lifted points (raw: 2.5 us)
  EXPECT_NEAR(ar_at(48).seconds, 5e-6, 1e-18);  // halfway from E(32) = 4 us to E(64) = 6 us
  // Above the last size: E(64) + 2 x beta x 1/2 x (128 - 64) = 6e-6 + 1e-9 x 64 = 6.064 us.
  EXPECT_NEAR(ar_at(128).seconds, 6.064e-6, 1e-18);
  // The share the planner charges per layer, seconds - 2 alpha (alpha = 4 us / 2), is 0 inside
  // the dip, not 2 - 4 = -2 us.
  const CollectiveCost dip = ar_at(16);
  EXPECT_NEAR(dip.alpha_seconds, 2e-6, 1e-18);
  EXPECT_NEAR(dip.seconds - 2 * dip.alpha_seconds, 0.0, 1e-18);
  // The static reader itself, with no beta past the curve: the same envelope.
  EXPECT_NEAR(CostModel::measured_seconds(ar, 32, 0.0), 4e-6, 1e-18);
  EXPECT_NEAR(CostModel::measured_seconds(ar, 1000, 0.0), 6e-6, 1e-18);
}

// a calibration on a busy host had one 2-core all-gather row of
// 118.6 us between rows of about 2.7 us; through the running maximum it priced every size above
// it at 118.6 us. A spike (CostModel::is_measured_spike, factor 3) is left out of the curve.
TEST(CostModelTest, ASpikeInAMeasuredCurveIsLeftOut) {
  CollectiveFit ag{1e-6, 1e-9, 2, {}};
  ag.measured = {{1024, 2.7e-6}, {2048, 118.6e-6}, {4096, 2.9e-6}, {8192, 3.1e-6}};
  EXPECT_FALSE(CostModel::is_measured_spike(ag.measured, 0));
  EXPECT_TRUE(CostModel::is_measured_spike(ag.measured, 1));  // 118.6 > 3 x 2.9
  EXPECT_FALSE(CostModel::is_measured_spike(ag.measured, 2));
  EXPECT_FALSE(CostModel::is_measured_spike(ag.measured, 3));
  // 2048 B lies between 1024 B (2.7 us) and 4096 B (2.9 us): 2.7 + 0.2 x 1024 / 3072 us.
  EXPECT_NEAR(CostModel::measured_seconds(ag, 2048, 0.0), 2.7e-6 + 0.2e-6 / 3, 1e-15);
  EXPECT_NEAR(CostModel::measured_seconds(ag, 8192, 0.0), 3.1e-6, 1e-18);
  HardwareProfile p = host_profile();
  p.collectives = {{"all_gather", {ag}}};
  const CostModel m(p);
  EXPECT_NEAR(m.collective(CollectiveKind::kAllGather, 6144, {0}, {2}).seconds, 3.0e-6, 1e-15);

  // The first point: a spike when above 3x the second; alpha is then the second's time.
  CollectiveFit first{1e-6, 1e-9, 2, {}};
  first.measured = {{8, 50e-6}, {16, 1e-6}, {32, 1.1e-6}};
  EXPECT_TRUE(CostModel::is_measured_spike(first.measured, 0));
  EXPECT_NEAR(CostModel::measured_seconds(first, 8, 0.0), 1e-6, 1e-18);
  p.collectives = {{"all_gather", {first}}};
  EXPECT_NEAR(CostModel(p).collective(CollectiveKind::kAllGather, 8, {0}, {2}).alpha_seconds, 1e-6,
              1e-18);

  // The last point may grow with its size: 10 us after 2 us at twice the bytes is within
  // 3 x 2 x 2 = 12 us, 40 us is a spike; past the curve the last trusted point is extended by
  // beta: 2 us + 1e-9 s/B x (4096 - 2048) B = 4.048 us.
  CollectiveFit steep{1e-6, 1e-9, 2, {}};
  steep.measured = {{1024, 1e-6}, {2048, 2e-6}, {4096, 10e-6}};
  EXPECT_FALSE(CostModel::is_measured_spike(steep.measured, 2));
  CollectiveFit last = steep;
  last.measured.back().second = 40e-6;
  EXPECT_TRUE(CostModel::is_measured_spike(last.measured, 2));
  EXPECT_NEAR(CostModel::measured_seconds(last, 4096, 1.0), 4.048e-6, 1e-15);
  // A point far below its neighbours is kept (noise only adds time); fewer than 3 points: none.
  CollectiveFit dip{1e-6, 1e-9, 2, {}};
  dip.measured = {{8, 9e-6}, {16, 1e-6}, {32, 9e-6}};
  EXPECT_FALSE(CostModel::is_measured_spike(dip.measured, 1));
  EXPECT_FALSE(CostModel::is_measured_spike({{8, 1e-6}, {16, 90e-6}}, 1));
}

TEST(CostModelTest, AGroupBetweenCalibratedSizesUsesTheNearestInLogN) {
  const CostModel base(two_size_profile());
  // 4 is halfway between 2 and 8 in log2 (1 each way): the tie goes to the larger, 8.
  ASSERT_NE(base.calibrated_fit("all_gather", 4), nullptr);
  EXPECT_EQ(base.calibrated_fit("all_gather", 4)->group_size, 8);
  // On a 4-core mesh it is scaled by s(4) / s(8) = 2 / 4: 2.5e-5 + 2.5e-10 x 3/4 x 1e6 = 2.125e-4.
  const CollectiveCost four =
      base.for_cores(4).collective(CollectiveKind::kAllGather, 1e6, {0}, {4});
  EXPECT_NEAR(four.alpha_seconds, 2.5e-5, 1e-18);
  EXPECT_NEAR(four.seconds, 2.125e-4, 1e-15);
  // On an 8-core mesh (a 2x4 mesh's axis of 4), as measured: 5e-5 + 5e-10 x 3/4 x 1e6 = 4.25e-4.
  EXPECT_NEAR(base.for_cores(8).collective(CollectiveKind::kAllGather, 1e6, {1}, {4}).seconds,
              4.25e-4, 1e-15);
  // 3 is nearer 2 (log2 3 - 1 = 0.58 < 3 - log2 3 = 1.42): the 2-core fit, times s(3) / s(2) =
  // 1.5 on a 3-core mesh: 1.5 (1e-6 + 2e-10 x 2/3 x 1e6) = 2.015e-4.
  EXPECT_EQ(base.calibrated_fit("all_gather", 3)->group_size, 2);
  EXPECT_NEAR(base.for_cores(3).collective(CollectiveKind::kAllGather, 1e6, {0}, {3}).seconds,
              2.015e-4, 1e-15);
  // 5 and 16 are nearer 8; the all-to-all has only 8.
  EXPECT_EQ(base.calibrated_fit("all_gather", 5)->group_size, 8);
  EXPECT_EQ(base.calibrated_fit("all_reduce", 16)->group_size, 8);
  EXPECT_EQ(base.calibrated_fit("all_to_all", 2)->group_size, 8);
  EXPECT_EQ(base.calibrated_fit("reduce_scatter", 2), nullptr);
  // The cost-model line lists every fit, smallest group first.
  const std::string line = base.describe();
  EXPECT_NE(line.find("all_gather alpha 1e-06 s, beta 2e-10 s/B on 2 cores, alpha 5e-05 s, beta "
                      "5e-10 s/B on 8 cores"),
            std::string::npos)
      << line;
}

/// host_profile() with kernel rates: GEMMs measured at sizes {8, 64} with rate 1e9 x 2^(i_m +
/// i_k + i_n) (1e9 FLOP/s at (8, 8, 8), 8e9 at (64, 64, 64)), passes 1e9/s, transcendentals 1e8/s,
/// and round row fits.
HardwareProfile kernel_profile() {
  HardwareProfile p = host_profile();
  p.peak_flops_per_second["bf16"] = 1.97e14;  // a dtype the f32 table does not cover
  p.kernels.gemm_sizes = {8, 64};
  for (int im = 0; im < 2; ++im)
    for (int ik = 0; ik < 2; ++ik)
      for (int in = 0; in < 2; ++in)
        p.kernels.gemm_flops_per_second.push_back(1e9 * (1 << (im + ik + in)));
  p.kernels.elementwise_per_second = {{"pass", 1e9}, {"transcendental", 1e8}};
  p.kernels.row_kernels = {
      {"layer_norm", {1e-6, 1e-9}}, {"softmax", {2e-6, 1e-9}}, {"cross_entropy", {1e-6, 1e-8}}};
  return p;
}

TEST(CostModelTest, GemmRatesInterpolateTheMeasuredTableInLogSpace) {
  const CostModel m(kernel_profile());
  ASSERT_TRUE(m.has_kernel_rates());
  EXPECT_NEAR(m.gemm_flops_per_second(8, 8, 8, "f32"), 1e9, 1e-3);
  EXPECT_NEAR(m.gemm_flops_per_second(64, 64, 64, "f32"), 8e9, 1e-2);
  EXPECT_NEAR(m.gemm_flops_per_second(8, 8, 64, "f32"), 2e9, 1e-3);
  EXPECT_NEAR(m.gemm_flops_per_second(64, 8, 8, "f32"), 2e9, 1e-3);
  // sqrt(8 x 64) in every coordinate is halfway in log2: log-rate halfway, 1e9 x 2^1.5.
  const double mid = std::sqrt(8.0 * 64.0);
  EXPECT_NEAR(m.gemm_flops_per_second(mid, mid, mid, "f32"), 1e9 * std::pow(2.0, 1.5), 1e-2);
  // Clamped outside the table.
  EXPECT_NEAR(m.gemm_flops_per_second(2, 4, 1, "f32"), 1e9, 1e-3);
  EXPECT_NEAR(m.gemm_flops_per_second(4096, 8, 8, "f32"), 2e9, 1e-3);
  // Time: 3 GEMMs of 64^3 = 3 x 524288 FLOPs at 8e9 FLOP/s; x 4 on 8 cores of 2 CPUs.
  EXPECT_NEAR(m.gemm_seconds(64, 64, 64, "f32", 3), 1.96608e-4, 1e-15);
  EXPECT_NEAR(m.for_cores(8).gemm_seconds(64, 64, 64, "f32", 3), 4 * 1.96608e-4, 1e-15);
  EXPECT_EQ(m.gemm_seconds(0, 64, 64, "f32"), 0.0);
  // The table is f32: another dtype uses the peak.
  EXPECT_DOUBLE_EQ(m.gemm_flops_per_second(64, 64, 64, "bf16"), m.peak_flops_per_core("bf16"));
}

TEST(CostModelTest, WarmGemmTableIsUsedWhenTheWorkingSetFitsTheCache) {
  // kernel_profile()'s cold table plus a warm one at 3 x 2^(i_m + i_k + i_n) x 1e9 (3x the cold
  // rate everywhere); host_profile()'s cache: 1 MiB per CPU, 2 CPUs.
  HardwareProfile p = kernel_profile();
  for (double cold : p.kernels.gemm_flops_per_second)
    p.kernels.gemm_warm_flops_per_second.push_back(3 * cold);
  const CostModel m(p);
  const double mib = 1 << 20;
  // Fits (1 MiB <= 1 MiB): warm, interpolated in log space as the cold table is.
  EXPECT_NEAR(m.gemm_flops_per_second(64, 64, 64, "f32", mib), 24e9, 1e-2);
  EXPECT_NEAR(m.gemm_flops_per_second(8, 8, 64, "f32", 1000), 6e9, 1e-3);
  const double mid = std::sqrt(8.0 * 64.0);
  EXPECT_NEAR(m.gemm_flops_per_second(mid, mid, mid, "f32", 1000), 3e9 * std::pow(2.0, 1.5), 1e-2);
  // One byte over, or no working set given (+infinity): cold.
  EXPECT_NEAR(m.gemm_flops_per_second(64, 64, 64, "f32", mib + 1), 8e9, 1e-2);
  EXPECT_NEAR(m.gemm_flops_per_second(64, 64, 64, "f32"), 8e9, 1e-2);
  // 3 GEMMs of 64^3 = 1,572,864 FLOPs: 6.5536e-5 s warm, 1.96608e-4 s cold.
  EXPECT_NEAR(m.gemm_seconds(64, 64, 64, "f32", 3, 4096), 6.5536e-5, 1e-15);
  EXPECT_NEAR(m.gemm_seconds(64, 64, 64, "f32", 3, 2 * mib), 1.96608e-4, 1e-15);
  // 8 cores on 2 CPUs: 4 threads share each CPU's cache, so 300 KiB x 4 > 1 MiB is cold (and
  // every time x 4), while 256 KiB x 4 = 1 MiB still fits.
  EXPECT_NEAR(m.for_cores(8).gemm_seconds(64, 64, 64, "f32", 3, 300 * 1024), 4 * 1.96608e-4, 1e-15);
  EXPECT_NEAR(m.for_cores(8).gemm_seconds(64, 64, 64, "f32", 3, 256 * 1024), 4 * 6.5536e-5, 1e-15);
  EXPECT_NE(m.describe().find("(m, k, n) (warm when the working set fits the cache)"),
            std::string::npos)
      << m.describe();
  EXPECT_EQ(CostModel(kernel_profile()).describe().find("warm"), std::string::npos);
  // Without the warm table (kernel_profile(), a profile measured before it), every GEMM is cold.
  EXPECT_NEAR(CostModel(kernel_profile()).gemm_flops_per_second(64, 64, 64, "f32", 1000), 8e9,
              1e-2);
  // Without a cache level nothing fits: cold.
  p.cache_bytes = 0;
  p.cache_bytes_per_second = 0;
  EXPECT_NEAR(CostModel(p).gemm_flops_per_second(64, 64, 64, "f32", 1000), 8e9, 1e-2);
  // The table is f32: another dtype uses the peak, warm or not.
  EXPECT_DOUBLE_EQ(m.gemm_flops_per_second(64, 64, 64, "bf16", 1000),
                   m.peak_flops_per_core("bf16"));
}

TEST(CostModelTest, TheLastLevelCacheHoldsWhatMissesTheL2WhenEveryCoresCopyFits) {
  // host_profile(): 1 MiB of L2 per CPU at 4e10 B/s, memory 4e9 B/s, 2 CPUs; plus a 16 MiB
  // last-level cache at 2e10 B/s, and kernel_profile()'s GEMM tables with a warm one at 3x.
  HardwareProfile p = kernel_profile();
  for (double cold : p.kernels.gemm_flops_per_second)
    p.kernels.gemm_warm_flops_per_second.push_back(3 * cold);
  p.llc_bytes = 16 << 20;
  p.llc_bytes_per_second = 2e10;
  const double mib = 1 << 20;
  const CostModel one = CostModel(p).for_cores(1), eight = CostModel(p).for_cores(8);
  // One core: 2 MiB misses the L2 and fits the L3: 4e6 B at 2e10 B/s = 2e-4 s (4e9 B/s
  // without the level: 1e-3 s); 1 MiB stays the L2's (1e-4 s); 16 MiB + 1 B is memory's.
  EXPECT_FALSE(one.fits_in_cache(2 * mib));
  EXPECT_TRUE(one.fits_in_last_level_cache(2 * mib));
  EXPECT_FALSE(one.fits_in_last_level_cache(mib));  // the L2 holds it
  EXPECT_NEAR(one.memory_seconds(4e6, 2 * mib), 2e-4, 1e-18);
  EXPECT_NEAR(one.memory_seconds(4e6, mib), 1e-4, 1e-18);
  EXPECT_NEAR(one.memory_seconds(4e6, 16 * mib + 1), 1e-3, 1e-18);
  // Eight cores share it: 2 MiB x 8 = 16 MiB fits, 2 MiB + 1 B x 8 does not; times x 4
  // (8 threads on 2 CPUs): 8e-4 s from the L3, 4e-3 s from memory.
  EXPECT_TRUE(eight.fits_in_last_level_cache(2 * mib));
  EXPECT_FALSE(eight.fits_in_last_level_cache(2 * mib + 1));
  EXPECT_NEAR(eight.memory_seconds(4e6, 2 * mib), 8e-4, 1e-18);
  EXPECT_NEAR(eight.memory_seconds(4e6, 2 * mib + 1), 4e-3, 1e-18);
  // GEMMs of an L3-resident working set use the warm table (24e9 at 64^3), memory's the cold
  // (8e9): 3 GEMMs of 64^3 take 6.5536e-5 s warm and 1.96608e-4 s cold.
  EXPECT_NEAR(one.gemm_flops_per_second(64, 64, 64, "f32", 8 * mib), 24e9, 1e-2);
  EXPECT_NEAR(one.gemm_flops_per_second(64, 64, 64, "f32", 17 * mib), 8e9, 1e-2);
  EXPECT_NEAR(eight.gemm_seconds(64, 64, 64, "f32", 3, 2 * mib), 4 * 6.5536e-5, 1e-15);
  EXPECT_NEAR(eight.gemm_seconds(64, 64, 64, "f32", 3, 3 * mib), 4 * 1.96608e-4, 1e-15);
  // A training step keeping 3 MiB per core: a 1 MiB layer is in the L3 on one core (3 MiB <=
  // 16 MiB) and not on eight (24 MiB > 16 MiB), although 8 x 1 MiB would fit.
  EXPECT_TRUE(one.with_step_footprint(3 * mib).fits_in_last_level_cache(1.5 * mib));
  EXPECT_FALSE(eight.with_step_footprint(3 * mib).fits_in_last_level_cache(1.5 * mib));
  EXPECT_TRUE(eight.with_step_footprint(2 * mib).fits_in_last_level_cache(1.5 * mib));
  EXPECT_NEAR(eight.with_step_footprint(3 * mib).memory_seconds(4e6, 1.5 * mib), 4e-3, 1e-18);
  EXPECT_THROW(one.with_step_footprint(-1), InvalidArgumentError);
  // Unset core count (the reshard planner): one copy.
  EXPECT_TRUE(CostModel(p).fits_in_last_level_cache(16 * mib));
  EXPECT_NE(one.describe().find("<= 16.00 MiB over all cores at 2e+10 B/s (last-level cache)"),
            std::string::npos)
      << one.describe();
  // Without the level (a profile measured before it): memory, cold.
  p.llc_bytes = 0;
  p.llc_bytes_per_second = 0;
  EXPECT_FALSE(CostModel(p).for_cores(1).fits_in_last_level_cache(2 * mib));
  EXPECT_NEAR(CostModel(p).for_cores(1).memory_seconds(4e6, 2 * mib), 1e-3, 1e-18);
  EXPECT_NEAR(CostModel(p).for_cores(1).gemm_flops_per_second(64, 64, 64, "f32", 8 * mib), 8e9,
              1e-2);
}

TEST(CostModelTest, ElementwiseAndRowKernelsUseTheirMeasuredRates) {
  const CostModel m(kernel_profile());
  EXPECT_NEAR(m.elementwise_seconds("transcendental", 1e6), 1e-2, 1e-15);
  EXPECT_NEAR(m.elementwise_seconds("pass", 1e6), 1e-3, 1e-15);
  EXPECT_NEAR(m.row_seconds("softmax", 100, 64), 100 * (2e-6 + 64e-9), 1e-15);
  EXPECT_NEAR(m.for_cores(8).row_seconds("layer_norm", 10, 1000), 4 * 10 * 2e-6, 1e-15);
  EXPECT_EQ(m.row_seconds("cross_entropy", 0, 64), 0.0);
  // The TPU profiles have none: their compute stays FLOPs at the peak.
  EXPECT_FALSE(v5e().has_kernel_rates());
  EXPECT_THROW(v5e().elementwise_seconds("transcendental", 1), FailedPreconditionError);
  EXPECT_THROW(v5e().row_seconds("softmax", 1, 1), FailedPreconditionError);
  EXPECT_DOUBLE_EQ(v5e().gemm_flops_per_second(64, 64, 64, "bf16"),
                   v5e().peak_flops_per_core("bf16"));
  EXPECT_NE(m.describe().find("compute per kernel: measured GEMM rates 8..64"), std::string::npos)
      << m.describe();
}

TEST(CostModelTest, KernelRatesRoundTripAndAreValidated) {
  const HardwareProfile p = kernel_profile();
  const HardwareProfile q = HardwareProfile::from_json(p.to_json());
  EXPECT_EQ(q.kernels.gemm_sizes, p.kernels.gemm_sizes);
  EXPECT_EQ(q.kernels.gemm_flops_per_second, p.kernels.gemm_flops_per_second);
  EXPECT_EQ(q.kernels.elementwise_per_second, p.kernels.elementwise_per_second);
  EXPECT_DOUBLE_EQ(q.kernels.row_kernels.at("softmax").seconds_per_row, 2e-6);
  EXPECT_DOUBLE_EQ(q.kernels.row_kernels.at("cross_entropy").seconds_per_element, 1e-8);
  const auto rejected = [](const nlohmann::json& j, const std::string& needle) {
    try {
      HardwareProfile::from_json(j);
      ADD_FAILURE() << j["kernels"].dump() << " was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = p.to_json();
  j["kernels"]["gemm_flops_per_second"].erase(0);
  rejected(j, "gemm_flops_per_second has 7 entries (expected 8");
  j = p.to_json();
  j["kernels"]["gemm_sizes"] = {64, 8};
  rejected(j, "gemm_sizes[1] is 8 (expected strictly increasing");
  j = p.to_json();
  j["kernels"]["elementwise_per_second"]["sin"] = 1e9;
  rejected(j, "elementwise_per_second.sin: unknown kernel");
  j = p.to_json();
  j["kernels"]["elementwise_per_second"].erase("transcendental");
  rejected(j, "lacks elementwise_per_second.transcendental");
  j = p.to_json();
  j["kernels"]["row_kernels"]["softmax"]["seconds_per_element"] = 0;
  rejected(j, "row_kernels.softmax is seconds_per_row 2e-06, seconds_per_element 0");
  j = p.to_json();
  j["kernels"]["gemm_flops_per_second"][3] = 0;
  rejected(j, "kernels.gemm_flops_per_second[3]");
  j = p.to_json();
  j["kernels"]["rows"] = 1;
  rejected(j, "kernels.rows: unknown key");
  // The warm table: optional (absent above, and not written when empty), but when present one
  // rate >= 1 FLOP/s per (m, k, n), as the cold one.
  EXPECT_FALSE(p.to_json()["kernels"].contains("gemm_warm_flops_per_second"));
  HardwareProfile warm = p;
  warm.kernels.gemm_warm_flops_per_second.assign(8, 5e9);
  EXPECT_EQ(HardwareProfile::from_json(warm.to_json()).kernels.gemm_warm_flops_per_second,
            warm.kernels.gemm_warm_flops_per_second);
  j = warm.to_json();
  j["kernels"]["gemm_warm_flops_per_second"].erase(0);
  rejected(j, "kernels.gemm_warm_flops_per_second has 7 entries (expected 8, one per (m, k, n)");
  j = warm.to_json();
  j["kernels"]["gemm_warm_flops_per_second"][5] = -2e9;
  rejected(j, "field 'kernels.gemm_warm_flops_per_second[5]' is -2e+09 (expected a finite rate");
  j = warm.to_json();
  j["kernels"]["gemm_warm_flops_per_second"][2] = 0;
  rejected(j, "field 'kernels.gemm_warm_flops_per_second[2]' is 0 (expected a finite rate >= 1");
  j = warm.to_json();
  j["kernels"]["gemm_warm_flops_per_second"][1] = "fast";
  rejected(j, "kernels.gemm_warm_flops_per_second[1]: expected a finite number, got \"fast\"");
  j = warm.to_json();
  j["kernels"]["gemm_warm_flops_per_second"] = 5e9;
  rejected(j, "kernels.gemm_warm_flops_per_second: expected an array, got 5000000000.0");
}

// vtpu reshard and vtpu plan printed describe(), about 1,450
// characters on one line for this_machine (every fit and its curve, and for a reshard the kernel
// rates it does not use). summary() is their default; describe() keeps every term.
TEST(CostModelTest, SummaryIsOneShortLineAndDescribeKeepsEveryTerm) {
  HardwareProfile p = kernel_profile();
  p.collectives = two_size_profile().collectives;  // all_gather, all_reduce on 2 and 8; a2a on 8
  const CostModel m = CostModel(p).for_cores(8);
  const std::string collectives =
      "cost model: host (calibrated all_gather, all_reduce on 2, 8 cores; all_to_all on 8 "
      "cores); not calibrated, priced from the links: reduce_scatter; 8 virtual cores on 2 host "
      "CPUs: work x 4";
  EXPECT_EQ(m.summary(), collectives + "; compute: measured kernel rates");
  EXPECT_EQ(m.summary(/*with_compute=*/false), collectives);
  const std::string full = m.describe(), links_only = m.describe(/*with_compute=*/false);
  for (const std::string& line : {full, links_only}) {
    EXPECT_NE(line.find("all_gather alpha 1e-06 s, beta 2e-10 s/B on 2 cores, alpha 5e-05 s, beta "
                        "5e-10 s/B on 8 cores"),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("priced from the links: reduce_scatter (host (shared_memory)"),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("; 8 virtual cores on 2 host CPUs: work x 4"), std::string::npos) << line;
  }
  EXPECT_NE(full.find("compute per kernel: measured GEMM rates 8..64"), std::string::npos) << full;
  EXPECT_NE(full.find("working sets <= 1.00 MiB per CPU"), std::string::npos) << full;
  EXPECT_EQ(links_only.find("compute"), std::string::npos) << links_only;
  EXPECT_EQ(links_only.find("working sets"), std::string::npos) << links_only;
  // Without calibrated fits there is nothing to shorten: the link line, or the uniform model.
  EXPECT_EQ(v5e().summary(), v5e().describe());
  const CostModel uniform = CostModel::uniform(5e-5, 5e-9, 3);
  EXPECT_EQ(uniform.summary(),
            "cost model: alpha 5e-05 s, beta 5e-09 s/B (0.2 GB/s), all-to-all factor 3");
  EXPECT_EQ(uniform.describe(), uniform.summary());
}

}  // namespace
}  // namespace vtpu
