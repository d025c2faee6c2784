// The alpha-beta fit of `vtpu bench collectives --calibrate` on synthetic sweeps with a known
// alpha and beta.
#include "vtpu/bench/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/test_data.h"
#include "vtpu/bench/kernel_bench.h"
#include "vtpu/common/error.h"
#include "vtpu/planner/cost_model.h"

namespace vtpu {
namespace {

/// Sizes 8 B .. 4 MiB doubling, as the calibration sweeps them.
std::vector<double> sizes() {
  std::vector<double> s;
  for (double b = 8; b <= 4194304; b *= 2) s.push_back(b);
  return s;
}

TEST(CalibrationTest, ExactDataGivesBackAlphaAndBeta) {
  const double alpha = 4e-5, beta = 2.5e-9;
  for (const char* op : {"all_gather", "reduce_scatter", "all_to_all"}) {
    std::vector<double> x, t;
    for (double s : sizes()) {
      x.push_back(calibration_x(op, s, 8));
      t.push_back(alpha + beta * x.back());
    }
    const LinearFit f = fit_alpha_beta(x, t);
    EXPECT_NEAR(f.a, alpha, alpha * 1e-9) << op;
    EXPECT_NEAR(f.b, beta, beta * 1e-9) << op;
    EXPECT_LT(f.max_relative_error, 1e-9);
    EXPECT_EQ(f.points, 20u);
  }
}

TEST(CalibrationTest, AllReduceRowsGiveTheModelsAlphaAndBeta) {
  // An all-reduce of S bytes on 8 cores takes 2 (alpha + beta 7/8 S) under the model.
  const double alpha = 3e-5, beta = 1e-9;
  std::vector<double> x, t;
  for (double s : sizes()) {
    x.push_back(calibration_x("all_reduce", s, 8));
    t.push_back(2 * (alpha + beta * 7.0 / 8.0 * s));
  }
  const CollectiveFit fit = collective_fit_of("all_reduce", fit_alpha_beta(x, t), 8);
  EXPECT_NEAR(fit.alpha_seconds, alpha, alpha * 1e-9);
  EXPECT_NEAR(fit.beta_seconds_per_byte, beta, beta * 1e-9);
  EXPECT_EQ(fit.group_size, 8);
  // Loaded into a profile, the cost model reproduces the synthetic times.
  HardwareProfile p = HardwareProfile::get(testing::fixed_profile_path());
  p.collectives["all_reduce"] = {fit};
  const CostModel m(p);
  EXPECT_NEAR(m.collective(CollectiveKind::kAllReduce, 1 << 20, {0}, {8}).seconds,
              2 * (alpha + beta * 7.0 / 8.0 * (1 << 20)), 1e-12);
}

TEST(CalibrationTest, RowsBecomeTheCostModelsMeasuredCurveAtItsB) {
  // B of a row: the size S for all_gather, reduce_scatter and all_reduce (the whole array), n S
  // for all_to_all (S per core).
  EXPECT_EQ(calibration_formula_bytes("all_gather", 4096, 8), 4096);
  EXPECT_EQ(calibration_formula_bytes("reduce_scatter", 4096, 8), 4096);
  EXPECT_EQ(calibration_formula_bytes("all_reduce", 4096, 8), 4096);
  EXPECT_EQ(calibration_formula_bytes("all_to_all", 4096, 8), 32768);
  EXPECT_THROW(calibration_formula_bytes("broadcast", 4096, 8), InvalidArgumentError);
  // An all-to-all row of S = 4096 per core on 8 cores that took t: the cost model, given the row
  // as its curve, prices the all-to-all of the whole 32 KiB at t, whatever its fitted line says.
  HardwareProfile p = HardwareProfile::get(testing::fixed_profile_path());
  CollectiveFit fit{1e-5, 1e-9, 8, {}};
  fit.measured = {{calibration_formula_bytes("all_to_all", 2048, 8), 30e-6},
                  {calibration_formula_bytes("all_to_all", 4096, 8), 70e-6}};
  p.collectives["all_to_all"] = {fit};
  const CostModel m(p);
  EXPECT_NEAR(m.collective(CollectiveKind::kAllToAll, 32768, {0}, {8}).seconds, 70e-6, 1e-15);
  EXPECT_NEAR(m.collective(CollectiveKind::kAllToAll, 24576, {0}, {8}).seconds, 50e-6, 1e-15);
}

// Regression: a fit's `sources` text gave the sweep's options (8 B..4.00 MiB) and `vtpu plan
// --verbose` the curve's B (256 B..32.00 MiB for the 8-core all-to-all): two ranges for one fit.
// Both now print CostModel::measured_sizes_text.
TEST(CalibrationTest, TheSourcesTextAndTheCostModelLineGiveTheSameSizes) {
  // An all-to-all swept from S = 32 B to 4 MiB per core on 8 cores: B = 8 S, 256 B .. 32 MiB.
  std::vector<double> x, t;
  CollectiveFit cf{1e-5, 1e-9, 8, {}};
  for (double s = 32; s <= 4194304; s *= 2) {
    x.push_back(calibration_x("all_to_all", s, 8));
    t.push_back(1e-5 + 1e-9 * x.back());
    cf.measured.emplace_back(calibration_formula_bytes("all_to_all", s, 8), t.back());
  }
  ASSERT_EQ(cf.measured.size(), 18u);  // 2^5 .. 2^22
  const LinearFit fit = fit_alpha_beta(x, t);
  EXPECT_EQ(CostModel::measured_sizes_text(cf), "18 sizes 256 B..32.00 MiB");
  EXPECT_EQ(calibration_source_text(cf, fit, 30),
            "fitted by `vtpu bench collectives --calibrate`: 18 sizes 256 B..32.00 MiB on 8 "
            "cores, 30 timed calls each (median of the slowest core), weighted least squares; max "
            "relative residual 0%; the measured curve is kept and interpolated");
  HardwareProfile p = HardwareProfile::get(testing::fixed_profile_path());
  p.collectives["all_to_all"] = {cf};
  EXPECT_NE(CostModel(p).describe().find("on 8 cores (measured curve, 18 sizes 256 B..32.00 MiB)"),
            std::string::npos)
      << CostModel(p).describe();
  EXPECT_EQ(CostModel::measured_sizes_text(CollectiveFit{1e-5, 1e-9, 8, {}}), "");

  // The shipped calibrated profile, as `vtpu bench collectives --calibrate` wrote it: each fit's
  // source names the range describe() gives it, whatever figures a recalibration wrote.
  const HardwareProfile shipped = HardwareProfile::get("this_machine");
  const std::string line = CostModel(shipped).describe();
  size_t fits = 0;
  for (const auto& [op, op_fits] : shipped.collectives) {
    for (const CollectiveFit& f : op_fits) {
      const std::string sizes = CostModel::measured_sizes_text(f);
      ASSERT_FALSE(sizes.empty()) << op;
      const std::string cores = " on " + std::to_string(f.group_size) + " cores";
      const std::string source =
          shipped.sources.at("collectives." + op + "." + std::to_string(f.group_size));
      EXPECT_NE(source.find(": " + sizes + cores + ","), std::string::npos) << source;
      EXPECT_NE(line.find(cores + " (measured curve, " + sizes + ")"), std::string::npos)
          << op << sizes << cores;
      ++fits;
    }
  }
  EXPECT_GT(fits, 0u);
  // An all-gather swept from S = 32 B (one f32 per core on 8 cores) to 4 MiB: B = S.
  CollectiveFit gather{1e-5, 1e-9, 8, {}};
  for (double size = 32; size <= 4194304; size *= 2) {
    gather.measured.push_back(
        {static_cast<double>(calibration_formula_bytes("all_gather", size, 8)),
         1e-5 + 1e-9 * size});
  }
  EXPECT_EQ(CostModel::measured_sizes_text(gather), "18 sizes 32 B..4.00 MiB");
}

TEST(CalibrationTest, NoisyDataStaysClose) {
  // +-5% multiplicative noise; the relative weighting keeps both ends: alpha within 5%,
  // beta within 2%.
  const double alpha = 5e-5, beta = 5e-9;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> noise(-0.05, 0.05);
  std::vector<double> x, t;
  for (int rep = 0; rep < 5; ++rep) {
    for (double s : sizes()) {
      x.push_back(calibration_x("all_gather", s, 8));
      t.push_back((alpha + beta * x.back()) * (1 + noise(rng)));
    }
  }
  const LinearFit f = fit_alpha_beta(x, t);
  EXPECT_NEAR(f.a, alpha, 0.05 * alpha);
  EXPECT_NEAR(f.b, beta, 0.02 * beta);
  EXPECT_LT(f.max_relative_error, 0.11);
}

TEST(CalibrationTest, UnweightedLeastSquaresWouldLoseAlpha) {
  // Why the fit weights by 1/t: with times from 40 us to 10 ms, an absolute-residual fit lets
  // the big rows pick alpha; one 10% error on the largest row moves it by more than half of
  // alpha (worked by hand: 1.29e-5 instead of 4e-5), the weighted fit by 0.2%.
  const double alpha = 4e-5, beta = 2.5e-9;
  std::vector<double> x, t;
  for (double s : sizes()) {
    x.push_back(calibration_x("all_gather", s, 8));
    t.push_back(alpha + beta * x.back());
  }
  t.back() *= 1.10;
  const LinearFit f = fit_alpha_beta(x, t);
  EXPECT_NEAR(f.a, alpha, 0.01 * alpha);
  // Ordinary least squares (closed form) on the same rows misses alpha by more than half.
  double mx = 0, mt = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / static_cast<double>(x.size());
    mt += t[i] / static_cast<double>(x.size());
  }
  double sxt = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxt += (x[i] - mx) * (t[i] - mt);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  const double ols_a = mt - sxt / sxx * mx;
  EXPECT_GT(std::abs(ols_a - alpha), 0.5 * alpha) << ols_a;
}

TEST(CalibrationTest, NegativeInterceptIsClampedToZero) {
  // Times on the line 1e-9 x - 5e-7: the free fit's intercept is -5e-7 < 0.
  std::vector<double> x = {1e3, 1e4, 1e5, 1e6}, t;
  for (double v : x) t.push_back(1e-9 * v - 5e-7);
  const LinearFit f = fit_alpha_beta(x, t);
  EXPECT_EQ(f.a, 0.0);
  EXPECT_GT(f.b, 0.0);
}

/// The message of the InvalidArgumentError `fn` throws ("" and a failure when it throws none).
template <typename Fn>
std::string invalid_message(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgumentError& e) {
    return std::string(e.message());
  }
  ADD_FAILURE() << "expected InvalidArgumentError";
  return "";
}

// Regression: the messages named the function ("fit_alpha_beta: 1 points");
// they now say what the fit is.
TEST(CalibrationTest, BadInputIsAnError) {
  const std::vector<double> one = {1.0}, two = {1.0, 2.0}, same = {3.0, 3.0};
  const std::vector<double> bad_t = {1.0, -1.0};
  EXPECT_EQ(invalid_message([&] { fit_alpha_beta(one, one); }),
            "alpha-beta fit t = alpha + beta * x: 1 measured size (expected at least 2 sizes, to "
            "fit a latency alpha and a time per byte beta)");
  EXPECT_EQ(invalid_message([&] { fit_alpha_beta(two, one); }),
            "alpha-beta fit t = alpha + beta * x: 2 sizes but 1 times (expected one time per "
            "size)");
  EXPECT_EQ(invalid_message([&] { fit_alpha_beta(two, bad_t); }),
            "alpha-beta fit t = alpha + beta * x: a measured time is -1 s (expected finite times "
            "> 0)");
  EXPECT_EQ(invalid_message([&] { fit_alpha_beta(same, two); }),
            "alpha-beta fit t = alpha + beta * x: every size has x = 3 (expected at least two "
            "different sizes)");
  EXPECT_THROW(calibration_x("broadcast", 8, 8), InvalidArgumentError);
}

// Regression: `--calibrate --min-bytes 8 --max-bytes 8` failed after 12 s of
// measuring with "fit_alpha_beta: 1 points"; the range is checked before anything is measured.
// Sizes double from min_bytes; f32 elements (4 B); a size that leaves a core less than one
// element is skipped (all_gather of S bytes on n cores: S / 4 / n elements per core).
TEST(CalibrationTest, OptionsAreCheckedBeforeMeasuring) {
  CalibrationOptions o;
  o.cores = {2};
  o.min_bytes = 8;
  o.max_bytes = 16;
  EXPECT_EQ(check_calibration_options(o), "");  // 8 and 16 B: 2 sizes of every collective
  o.max_bytes = 8;                              // 8 B only
  const std::string one_size = check_calibration_options(o);
  EXPECT_TRUE(testing::names_all(
      one_size, {"--min-bytes 8", "--max-bytes 8", "all_gather", "2 cores", "1 size"}));
  // calibrate_this_machine refuses it too, with the same message, at once (no sweep runs: this
  // test takes no time).
  EXPECT_TRUE(testing::names_all(invalid_message([&] { calibrate_this_machine(o); }), {one_size}));
  // On 4 cores 8 B is half an element per core (skipped), 16 B one: one size again.
  o.cores = {4};
  o.max_bytes = 16;
  EXPECT_TRUE(testing::names_all(check_calibration_options(o),
                                 {"--max-bytes 16", "all_gather", "4 cores", "1 size"}));
  o.cores = {2};
  o.min_bytes = 64 << 20;
  o.max_bytes = 8;
  EXPECT_TRUE(
      testing::names_all(check_calibration_options(o), {"--min-bytes 67108864", "--max-bytes 8"}));
  o.min_bytes = 3;
  o.max_bytes = 3;
  EXPECT_TRUE(testing::names_all(check_calibration_options(o),
                                 {"--max-bytes 3", "all_gather", "2 cores", "f32", "4 bytes"}));
  o.min_bytes = 8;
  o.max_bytes = 4 << 20;
  o.cores = {};
  EXPECT_TRUE(testing::names_all(check_calibration_options(o), {"group sizes", "2,4,8"}));
  o.cores = {4, 1};
  EXPECT_TRUE(testing::names_all(check_calibration_options(o), {"group size 1", ">= 2"}));
  o.cores = {2, 4, 2};
  EXPECT_TRUE(testing::names_all(check_calibration_options(o), {"group size 2", "distinct"}));
  o.cores = {2, 4, 8};  // the defaults
  EXPECT_EQ(check_calibration_options(o), "");
}

// Regression: `--calibrate OUT --min-bytes 8 --max-bytes 16` on a loaded
// machine timed 16 B faster than 8 B; the fit's beta was negative, printed as a negative
// bandwidth, and the profile was rejected only after every sweep with a message about a profile
// field. The fit of falling times now fails at once, naming the collective and the range.
TEST(CalibrationTest, TimesThatFallWithSizeAreAnErrorNamingTheCollective) {
  const std::vector<double> x = {7, 14}, t = {2.0e-5, 1.0e-5};  // 8 B and 16 B on 8 cores
  const LinearFit f = fit_alpha_beta(x, t);
  EXPECT_LT(f.b, 0.0);
  CalibrationOptions o;
  o.min_bytes = 8;
  o.max_bytes = 16;
  try {
    check_fit_grows("all_gather", f, o, 8);
    ADD_FAILURE() << "a negative beta was accepted";
  } catch (const InvalidArgumentError& e) {
    // The collective, the range, the group size and the negative beta: (1e-5 - 2e-5) / 7 s/B.
    EXPECT_TRUE(testing::names_all(e.what(), {"all_gather", "8 B..16 B", "8 cores", "-1.43e-06"}));
  }
  std::vector<double> rising = {1.0e-5, 2.0e-5};
  EXPECT_NO_THROW(check_fit_grows("all_gather", fit_alpha_beta(x, rising), o, 8));
}

// Regression: a calibration under load average ~10 wrote fits with
// 97-98% residuals and no warning. Two hand-worked fits of t = a + b x on x = 0, 1, 2, weights
// 1/t (normal equations over u = 1/t, v = x/t):
//   t = 1, 2, 4: a = 32/33, b = 14/11, residuals -1/33, 4/33, -4/33 -> max 4/33 = 12.1%;
//   t = 1, 8, 4: a = 284/273, b = 164/91, residuals 11/273, -176/273, 44/273 -> max 64.5%.
TEST(CalibrationTest, NoisyFitsAndALoadedHostWarn) {
  const std::vector<double> x = {0, 1, 2};
  const LinearFit good = fit_alpha_beta(x, std::vector<double>{1, 2, 4});
  EXPECT_NEAR(good.a, 32.0 / 33, 1e-12);
  EXPECT_NEAR(good.b, 14.0 / 11, 1e-12);
  EXPECT_NEAR(good.max_relative_error, 4.0 / 33, 1e-12);
  const LinearFit noisy = fit_alpha_beta(x, std::vector<double>{1, 8, 4});
  EXPECT_NEAR(noisy.a, 284.0 / 273, 1e-12);
  EXPECT_NEAR(noisy.b, 164.0 / 91, 1e-12);
  EXPECT_NEAR(noisy.max_relative_error, 176.0 / 273, 1e-12);

  CalibrationQuality q;
  q.worst_residual = good.max_relative_error;
  q.worst_fit = "all_gather on 2 cores";
  q.load_start = 1.5;
  q.load_end = 2.0;  // equal to the CPU count: not above it
  q.host_cpus = 2;
  EXPECT_EQ(calibration_warning(q), "");
  EXPECT_TRUE(testing::names_all(calibration_quality_text(q),
                                 {"1.50", "2.00", "2 CPUs", "12%", "all_gather on 2 cores"}));
  q.worst_residual = kMaxTrustedResidual;  // 50% exactly: not above it
  EXPECT_EQ(calibration_warning(q), "");

  q.worst_residual = noisy.max_relative_error;
  q.worst_fit = "all_reduce on 2 cores";
  // The worst residual, its fit and the 50% bound.
  EXPECT_TRUE(testing::names_all(calibration_warning(q), {"64%", "all_reduce on 2 cores", "50%"}));

  q.worst_residual = good.max_relative_error;
  q.worst_fit = "all_gather on 2 cores";
  q.load_start = 10.33;
  q.load_end = 2.01;
  // Both load averages above the host's 2 CPUs; the fit is fine, so no residual is named.
  const std::string loaded = calibration_warning(q);
  EXPECT_TRUE(testing::names_all(loaded, {"10.33", "2.01", "2 CPUs"}));
  EXPECT_EQ(loaded.find("residual 12%"), std::string::npos) << loaded;
  // Unknown load averages (-1) and an unknown CPU count never warn on their own.
  q.load_start = q.load_end = -1;
  EXPECT_EQ(calibration_warning(q), "");
  EXPECT_TRUE(testing::names_all(calibration_quality_text(q), {"unknown", "2 CPUs", "12%"}));
  EXPECT_EQ(calibration_quality_text(q).find("-1"), std::string::npos)
      << calibration_quality_text(q);
  q.load_start = 50;
  q.host_cpus = 0;
  EXPECT_EQ(calibration_warning(q), "");
}

}  // namespace
}  // namespace vtpu

// The copy sweep measured on this VM once (working set = source +
// destination; bytes copied per second): the edge is 0.6 x 4.64e10 = 2.784e10 B/s, so 2..16 MiB
// pass, 32 MiB (2.24e10) ends the run, and the level is 16 MiB at the median of 4.64e10,
// 4.26e10, 4.69e10, 4.34e10 = (4.34e10 + 4.64e10) / 2, over 1.5 x the 6.2e9 of memory.
TEST(CalibrationTest, TheLastLevelCacheEndsWhereTheCopyBandwidthFallsUnderItsEdge) {
  using vtpu::CopySweepPoint;
  using vtpu::last_level_cache_from_sweep;
  const uint64_t mib = 1 << 20;
  const std::vector<CopySweepPoint> sweep = {
      {2 * mib, 4.64e10},  {4 * mib, 4.26e10},  {8 * mib, 4.69e10},  {16 * mib, 4.34e10},
      {32 * mib, 2.24e10}, {64 * mib, 2.02e10}, {128 * mib, 7.75e9}, {256 * mib, 6.2e9}};
  const CopySweepPoint llc = last_level_cache_from_sweep(sweep);
  EXPECT_EQ(llc.working_set_bytes, 16 * mib);
  EXPECT_DOUBLE_EQ(llc.bytes_per_second, (4.34e10 + 4.64e10) / 2);
  // 09:05: memory at 1.43e10 and 16 MiB at 3.58e10 (0.67 of the first point's 5.36e10): the
  // same 16 MiB.
  const std::vector<CopySweepPoint> later = {
      {2 * mib, 5.36e10},  {4 * mib, 4.55e10},  {8 * mib, 4.41e10},   {16 * mib, 3.58e10},
      {32 * mib, 2.23e10}, {64 * mib, 1.75e10}, {128 * mib, 1.73e10}, {256 * mib, 1.43e10}};
  EXPECT_EQ(last_level_cache_from_sweep(later).working_set_bytes, 16 * mib);
  EXPECT_DOUBLE_EQ(last_level_cache_from_sweep(later).bytes_per_second, (4.41e10 + 4.55e10) / 2);
  // A later point back above the edge does not extend the run (64 MiB at 3e10).
  std::vector<CopySweepPoint> bumpy = sweep;
  bumpy[5].bytes_per_second = 3e10;
  EXPECT_EQ(last_level_cache_from_sweep(bumpy).working_set_bytes, 16 * mib);
  // No level between the L2 and memory: a flat sweep has no edge before its last point.
  std::vector<CopySweepPoint> flat = sweep;
  for (CopySweepPoint& pt : flat) pt.bytes_per_second = 6.2e9;
  EXPECT_EQ(last_level_cache_from_sweep(flat).working_set_bytes, 0u);
  EXPECT_EQ(last_level_cache_from_sweep(flat).bytes_per_second, 0.0);
  // An edge, but the level is not 1.5x faster than memory: none.
  EXPECT_EQ(last_level_cache_from_sweep({{2 * mib, 1e10}, {4 * mib, 5e9}, {8 * mib, 8e9}})
                .working_set_bytes,
            0u);
  EXPECT_EQ(last_level_cache_from_sweep({{2 * mib, 5e10}}).working_set_bytes, 0u);
  EXPECT_EQ(last_level_cache_from_sweep({}).working_set_bytes, 0u);
}

TEST(CalibrationTest, TheCopySweepDoublesFromTwiceTheFirstSizeToTheLast) {
  using vtpu::measure_copy_sweep;
  const auto sweep = measure_copy_sweep(64 * 1024, 1 << 20);  // 128 KiB, 256 KiB, ..., 1 MiB
  ASSERT_EQ(sweep.size(), 4u);
  for (size_t i = 0; i < sweep.size(); ++i) {
    EXPECT_EQ(sweep[i].working_set_bytes, uint64_t{128 * 1024} << i);
    EXPECT_GT(sweep[i].bytes_per_second, 0.0);
  }
  EXPECT_THROW(measure_copy_sweep(0, 1 << 20), vtpu::InvalidArgumentError);
  EXPECT_THROW(measure_copy_sweep(1 << 20, 1 << 20), vtpu::InvalidArgumentError);
}
