// bench/estimate_report.h: the plan's estimate is read as written (by the one plan reader,
// parse_train_plan), compared only when it has a step time for the run's batch, the ratios and
// verdicts are the hand-worked ones, and the step meter forwards the log where the trainer would
// have.
#include "vtpu/bench/estimate_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/test_data.h"
#include "vtpu/common/error.h"
#include "vtpu/planner/plan_file.h"

namespace vtpu {
namespace {

// A valid plan file (data parallel over one axis 'x' of 2) with `estimate` as given.
nlohmann::json plan_with(nlohmann::json estimate) {
  return {{"format", "vtpu-plan"},
          {"version", 1},
          {"mesh", {{"axes", nlohmann::json::array({"x"})}, {"shape", nlohmann::json::array({2})}}},
          {"strategy", {{"name", "dp(x)"}, {"data", "x"}}},
          {"estimate", std::move(estimate)}};
}

// The estimate as the one plan reader (parse_train_plan, planner/plan_file.h) reads it.
std::optional<PlanEstimate> read(const nlohmann::json& plan, const std::string& source) {
  return parse_train_plan(plan, source).estimate;
}

// The InvalidArgumentError text of reading `plan` from "bad.json"; "no error" when it reads.
std::string message(const nlohmann::json& plan) {
  try {
    read(plan, "bad.json");
  } catch (const InvalidArgumentError& e) {
    return e.message();
  }
  return "no error";
}

TEST(EstimateReportTest, ReadsTheEstimateAsWritten) {
  const auto e = read(plan_with({{"step_seconds", 2.5e-4},
                                 {"compute_seconds", 1e-4},
                                 {"comm_seconds", 1.5e-4},
                                 {"hbm_bytes_per_core", 42896},
                                 {"input_bytes_per_core", 2368},
                                 {"oversubscription", 4.0},
                                 {"hardware", "this_machine"},
                                 {"batch", 64}}),
                      "p.json");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->source, "p.json");
  EXPECT_EQ(e->strategy, "dp(x)");
  EXPECT_EQ(e->hardware, "this_machine");
  EXPECT_DOUBLE_EQ(e->step_seconds, 2.5e-4);
  EXPECT_DOUBLE_EQ(e->compute_seconds, 1e-4);
  EXPECT_DOUBLE_EQ(e->comm_seconds, 1.5e-4);
  EXPECT_EQ(e->hbm_bytes_per_core, 42896u);
  EXPECT_EQ(e->input_bytes_per_core, 2368u);
  EXPECT_DOUBLE_EQ(e->oversubscription, 4.0);
  EXPECT_EQ(e->batch, 64);
  EXPECT_NO_THROW(e->check_batch(64));
  try {
    e->check_batch(32);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& err) {
    EXPECT_TRUE(testing::names_all(err.message(), {"64", "32"}));
  }
  // An older plan: no input bytes, no oversubscription, no batch.
  const auto old = read(plan_with({{"step_seconds", 1e-3}, {"hbm_bytes_per_core", 100}}), "old");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->input_bytes_per_core, 0u);
  EXPECT_DOUBLE_EQ(old->oversubscription, 1.0);
  EXPECT_NO_THROW(old->check_batch(7));
}

// A run is compared with a plan's estimate only when it has a step time; a batch it names must be
// the run's.
TEST(EstimateReportTest, ComparableEstimateNeedsAStepTimeAndTheSameBatch) {
  const TrainPlan planned =
      parse_train_plan(plan_with({{"step_seconds", 0.5}, {"batch", 16}}), "p.json");
  ASSERT_TRUE(comparable_estimate(planned, 16).has_value());
  EXPECT_DOUBLE_EQ(comparable_estimate(planned, 16)->step_seconds, 0.5);
  EXPECT_THROW(comparable_estimate(planned, 8), InvalidArgumentError);
  // A hand-written plan that gives only the batch: the batch is read, there is nothing to compare.
  const TrainPlan batch_only = parse_train_plan(plan_with({{"batch", 16}}), "b.json");
  EXPECT_EQ(batch_only.estimated_batch(), 16);
  EXPECT_DOUBLE_EQ(batch_only.estimate->step_seconds, 0.0);
  EXPECT_FALSE(comparable_estimate(batch_only, 8).has_value());
  EXPECT_FALSE(comparable_estimate(parse_train_plan(plan_with(nullptr), "n"), 8).has_value());
}

TEST(EstimateReportTest, AHandWrittenPlanHasNoEstimateAndABadOneIsAnError) {
  EXPECT_FALSE(read(plan_with(nlohmann::json::object()), "p").has_value());
  EXPECT_FALSE(read(plan_with(nullptr), "p").has_value());
  nlohmann::json no_estimate = plan_with(nullptr);
  no_estimate.erase("estimate");
  EXPECT_FALSE(read(no_estimate, "p").has_value());
  EXPECT_EQ(parse_train_plan(no_estimate, "p").estimated_batch(), 0);
  EXPECT_NE(message(plan_with({{"step_seconds", "fast"}, {"hbm_bytes_per_core", 1}}))
                .find("estimate.step_seconds is \"fast\" (expected a number > 0)"),
            std::string::npos);
  EXPECT_NE(message(plan_with({{"step_seconds", 0}, {"hbm_bytes_per_core", 1}}))
                .find("step_seconds is 0 (expected a number > 0)"),
            std::string::npos);
  // Each error names the field, its value and the range expected.
  EXPECT_TRUE(
      testing::names_all(message(plan_with({{"step_seconds", 1}, {"hbm_bytes_per_core", -5}})),
                         {"estimate.hbm_bytes_per_core", "-5", ">= 0", "2^62"}));
  EXPECT_TRUE(testing::names_all(message(plan_with({{"step_seconds", 1}, {"oversubscription", 0}})),
                                 {"estimate.oversubscription", "0", "> 0"}));
  EXPECT_NE(message(plan_with({{"hardware", 5}})).find("estimate.hardware is 5"),
            std::string::npos);
  EXPECT_TRUE(testing::names_all(message(plan_with(3)), {"estimate", "3", "object"}));
  EXPECT_NE(message(plan_with({{"step_seconds", 1}})).find("no error"), std::string::npos);
  EXPECT_TRUE(testing::names_all(message(nlohmann::json::array()), {"'bad.json'", "object"}));
}

TEST(EstimateReportTest, RatiosAndVerdictsAreTheHandWorkedOnes) {
  PlanEstimate e;
  e.source = "p.json";
  e.strategy = "dp(x)";
  e.step_seconds = 0.5;
  e.hbm_bytes_per_core = 40000;
  e.input_bytes_per_core = 2000;
  MeasuredRun m;
  m.num_cores = 8;
  m.steps = 10;
  m.median_step_seconds = 0.625;  // 0.625 / 0.5 = 1.25 exactly: the edge is within
  m.cpu_seconds_per_step = 2.0;   // over min(8 cores, 2 CPUs) = 1.0 s: 2x the estimate
  m.peak_hbm_bytes_per_core = 450000;
  m.unmodelled_hbm_bytes = 400000;  // comparable 50000 against 42000
  m.unmodelled_what = "training set";
  m.host_cpus = 2;
  m.load_average = {3.5, 2.0, 1.0};
  EstimateReport r = compare_estimate(e, m);  // the probe fields are set below
  EXPECT_DOUBLE_EQ(r.step_ratio, 1.25);
  EXPECT_TRUE(r.step_within);
  EXPECT_EQ(r.estimated_hbm, 42000u);
  EXPECT_EQ(r.comparable_hbm, 50000u);
  EXPECT_DOUBLE_EQ(r.hbm_ratio, 50000.0 / 42000.0);
  EXPECT_TRUE(r.hbm_within);
  EXPECT_DOUBLE_EQ(r.cpu_bound_seconds, 1.0);
  EXPECT_DOUBLE_EQ(r.cpu_ratio, 2.0);
  const std::string text = r.to_string();
  for (const char* needle :
       {"planner estimate vs measured (plan p.json: dp(x) on ?; 8 cores, 10 steps)",
        "1.25x (within", "42000", "50000", "1.19x (within 25%)", "CPU time / 2 CPUs (no waiting)",
        "2.00x", "- training set 400000 (not in the model file)", "load average 3.50 2.00 1.00"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  }
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["comparable_hbm_bytes_per_core"], 50000);
  EXPECT_EQ(j["step_within_25_percent"], true);

  // Just past the edge, and an HBM peak below the unmodelled bytes (clamped at 0).
  m.median_step_seconds = 0.25;  // 0.5x
  m.unmodelled_hbm_bytes = 500000;
  const EstimateReport low = compare_estimate(e, m);
  EXPECT_DOUBLE_EQ(low.step_ratio, 0.5);
  EXPECT_FALSE(low.step_within);
  EXPECT_EQ(low.comparable_hbm, 0u);
  EXPECT_FALSE(low.hbm_within);
  EXPECT_NE(low.to_string().find("0.50x (outside 25%)"), std::string::npos) << low.to_string();
  // One core on two CPUs: the CPU time is divided by 1.
  m.num_cores = 1;
  EXPECT_DOUBLE_EQ(compare_estimate(e, m).cpu_bound_seconds, 2.0);
}

// Regression: an estimate for a TPU profile (vtpu plan's default --hardware v5e)
// was judged against virtual cores on this host ("5769.60x (outside 25%)"). Its step row is now
// printed but not judged; a host profile's (this_machine, or a file of another name) still is.
TEST(EstimateReportTest, ATpuEstimatesStepTimeIsNotJudgedOnThisHost) {
  PlanEstimate e;
  e.step_seconds = 0.5;
  e.hbm_bytes_per_core = 1000;
  MeasuredRun m;
  m.num_cores = 2;
  m.steps = 3;
  m.median_step_seconds = 0.625;
  m.peak_hbm_bytes_per_core = 1000;
  for (const char* tpu : {"v4", "v5e", "v5p"}) {
    e.hardware = tpu;
    const EstimateReport r = compare_estimate(e, m);
    EXPECT_FALSE(r.step_comparable) << tpu;
    EXPECT_FALSE(r.step_within) << tpu;
    EXPECT_TRUE(r.hbm_within) << tpu;
    // The reason names the TPU and the remedy; the table prints the ratio with it.
    const std::string why = r.to_json()["step_not_judged"];
    EXPECT_TRUE(testing::names_all(why, {tpu, "--hardware"}));
    EXPECT_TRUE(testing::names_all(r.to_string(), {"1.25x", why}));
    EXPECT_EQ(r.to_json()["step_comparable"], false);
    EXPECT_TRUE(r.to_json()["step_ratio"].is_null());
    EXPECT_TRUE(r.to_json()["step_within_25_percent"].is_null());
    EXPECT_TRUE(r.to_json()["probe"].is_null());
  }
  for (const char* host : {"this_machine", "my_calibrated_host", ""}) {
    e.hardware = host;
    const EstimateReport r = compare_estimate(e, m);
    EXPECT_TRUE(r.step_comparable) << host;
    EXPECT_TRUE(r.step_within) << host;
    EXPECT_NE(r.to_string().find("1.25x (within 25%)"), std::string::npos) << r.to_string();
    EXPECT_TRUE(r.to_json()["step_not_judged"].is_null());
  }
  e.hardware = "v5e";
  EXPECT_TRUE(compare_estimate(e, m).to_json()["step_not_judged"].is_string());
}

// A profile calibrated pinned and a run unpinned (or the reverse) differ
// about 3.5x per 2-core hand-off; the report warns when the profile's record for the run's core
// count (else the nearest in log n) is pinned where the run is not. No timing: hand-built runs.
TEST(EstimateReportTest, AThreadPinningThatDiffersFromTheProfilesIsAWarning) {
  HardwareProfile profile = HardwareProfile::get(testing::fixed_profile_path());
  profile.thread_pinning = {plan_thread_pinning("auto", 2, {0, 1}),
                            plan_thread_pinning("auto", 8, {0, 1})};
  PlanEstimate e;
  e.hardware = "this_machine";
  e.step_seconds = 1e-3;
  e.profile = profile;
  MeasuredRun m;
  m.num_cores = 2;
  m.steps = 3;
  m.median_step_seconds = 1e-3;
  m.host_cpus = 2;

  m.thread_pinning = plan_thread_pinning("off", 2, {0, 1});  // the profile's 2 cores were pinned
  EstimateReport r = compare_estimate(e, m);
  const std::string warning =
      "thread pinning differs from the profile's: this run off (not pinned: pin_threads off), the "
      "profile's 2-core collectives were calibrated with auto (pinned: cores 0,1 -> CPUs 0,1); "
      "pinning alone changes a 2-core hand-off about 3.5x, so the estimate's collectives are "
      "priced for the other mode (run or calibrate with the same pin_threads: --config or "
      "VTPU_PIN_THREADS)";
  EXPECT_EQ(r.thread_pinning_warning, warning);
  EXPECT_NE(r.to_string().find("  threads: pin_threads off (not pinned: pin_threads off)\n"),
            std::string::npos)
      << r.to_string();
  EXPECT_NE(r.to_string().find("  warning: " + warning + "\n"), std::string::npos) << r.to_string();
  nlohmann::json j = r.to_json()["thread_pinning"];
  EXPECT_EQ(j["differs"], true);
  EXPECT_EQ(j["warning"], warning);
  EXPECT_EQ(j["run"]["mode"], "off");
  EXPECT_EQ(j["profile"]["cores"], 2);
  EXPECT_EQ(j["profile"]["pinned"], true);

  // Pinned like the profile: no warning (the mode may differ: on and auto both pin 2 of 2 CPUs).
  m.thread_pinning = plan_thread_pinning("on", 2, {0, 1});
  r = compare_estimate(e, m);
  EXPECT_EQ(r.thread_pinning_warning, "");
  EXPECT_EQ(r.to_string().find("warning:"), std::string::npos) << r.to_string();
  EXPECT_EQ(r.to_json()["thread_pinning"]["differs"], false);
  EXPECT_TRUE(r.to_json()["thread_pinning"]["warning"].is_null());

  // 6 cores: the nearest record in log n is 8 cores' (|ln 6/8| < |ln 6/2|), unpinned; a run with
  // pin_threads on pins its 6 cores round-robin: a warning naming the 8-core record.
  m.num_cores = 6;
  m.thread_pinning = plan_thread_pinning("on", 6, {0, 1});
  r = compare_estimate(e, m);
  EXPECT_NE(r.thread_pinning_warning.find("the profile's 8-core collectives were calibrated with "
                                          "auto (not pinned: 8 cores > 2 CPUs)"),
            std::string::npos)
      << r.thread_pinning_warning;

  // A profile without the record (calibrated before it existed): nothing to compare.
  e.profile->thread_pinning.clear();
  r = compare_estimate(e, m);
  EXPECT_EQ(r.thread_pinning_warning, "");
  EXPECT_FALSE(r.profile_thread_pinning.has_value());
  EXPECT_TRUE(r.to_json()["thread_pinning"]["profile"].is_null());
  EXPECT_EQ(r.to_json()["thread_pinning"]["run"]["mode"], "on");
}

TEST(EstimateReportTest, TheProfileRecordForARunIsTheNearestGroupSizeInLogN) {
  const std::vector<ThreadPinning> records = {plan_thread_pinning("auto", 2, {0, 1}),
                                              plan_thread_pinning("auto", 4, {0, 1}),
                                              plan_thread_pinning("auto", 8, {0, 1})};
  EXPECT_EQ(profile_thread_pinning(records, 2)->cores, 2);
  EXPECT_EQ(profile_thread_pinning(records, 3)->cores, 4);  // |ln 3/4| < |ln 3/2|
  EXPECT_EQ(profile_thread_pinning(records, 1)->cores, 2);
  EXPECT_EQ(profile_thread_pinning(records, 64)->cores, 8);
  EXPECT_EQ(profile_thread_pinning({}, 2), nullptr);
  // A tie (4 between 2 and 8) goes to the larger.
  EXPECT_EQ(profile_thread_pinning({records[0], records[2]}, 4)->cores, 8);
}

// Regression: `train mlp --estimate-from PLAN --kernels pallas` was judged against
// an estimate of the Eigen kernels' rates. A caller marks such a step row not judged, with the
// reason, before the collective probe (which then does not run).
TEST(EstimateReportTest, AStepRowMarkedNotJudgedSaysWhyAndIsNotProbed) {
  PlanEstimate e;
  e.step_seconds = 0.5;
  e.hbm_bytes_per_core = 1000;
  e.hardware = "this_machine";  // a host profile with calibrated collectives: judged and probed
  MeasuredRun m;
  m.num_cores = 2;
  m.steps = 3;
  m.median_step_seconds = 0.625;
  m.peak_hbm_bytes_per_core = 1000;
  EstimateReport r = compare_estimate(e, m);
  ASSERT_TRUE(r.step_comparable);
  ASSERT_TRUE(r.step_within);
  r.mark_step_not_judged("the estimate prices other kernels");
  EXPECT_FALSE(r.step_comparable);
  EXPECT_FALSE(r.step_within);
  EXPECT_TRUE(r.hbm_within);  // 1000 / 1000
  EXPECT_NE(r.to_string().find("1.25x (not judged: the estimate prices other kernels)"),
            std::string::npos)
      << r.to_string();
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["step_comparable"], false);
  EXPECT_EQ(j["step_not_judged"], "the estimate prices other kernels");
  EXPECT_TRUE(j["step_ratio"].is_null());
  EXPECT_TRUE(j["step_within_25_percent"].is_null());
  const TrainPlan plan =
      parse_train_plan(plan_with({{"step_seconds", 0.5}, {"hbm_bytes_per_core", 1000}}), "p.json");
  CollectiveProbeOptions quick;
  quick.iters = 2;
  quick.warmup = 0;
  add_collective_probe(r, plan, quick);
  EXPECT_TRUE(r.probes.empty());
  EXPECT_EQ(r.probed_step_seconds, 0.0);
  EXPECT_TRUE(r.to_json()["probe"].is_null());
}

// The planner prices one pass per step, so a run of K > 1
// micro-batches is not judged against it; K = 1 changes nothing.
TEST(EstimateReportTest, AMicroBatchedRunIsNotJudgedAgainstAOnePassEstimate) {
  PlanEstimate e;
  e.step_seconds = 0.5;
  e.hbm_bytes_per_core = 1000;
  e.hardware = "this_machine";
  MeasuredRun m;
  m.num_cores = 2;
  m.steps = 3;
  m.median_step_seconds = 0.625;
  m.peak_hbm_bytes_per_core = 1000;
  EstimateReport one = compare_estimate(e, m);
  mark_micro_batches_not_judged(one, 1);
  EXPECT_TRUE(one.step_comparable);
  EXPECT_TRUE(one.step_within);  // 0.625 / 0.5 = 1.25
  EstimateReport four = compare_estimate(e, m);
  mark_micro_batches_not_judged(four, 4);
  EXPECT_FALSE(four.step_comparable);
  EXPECT_EQ(four.to_json()["step_not_judged"],
            "the estimate is for 1 micro-batch per step; this run used 4");
  // Regression: the HBM row was still judged, 1.41x "outside 25%" for the
  // gradient-accumulation buffer the estimate does not price. A peak of 1410 against 1000: the
  // one-pass run is judged outside, the micro-batched one not judged, with the reason.
  m.peak_hbm_bytes_per_core = 1410;
  EstimateReport one_big = compare_estimate(e, m);
  mark_micro_batches_not_judged(one_big, 1);
  EXPECT_TRUE(one_big.hbm_comparable);
  EXPECT_FALSE(one_big.hbm_within);
  EXPECT_NE(one_big.to_string().find("1.41x (outside 25%)"), std::string::npos);
  EXPECT_EQ(one_big.to_json()["hbm_within_25_percent"], false);
  EXPECT_TRUE(one_big.to_json()["hbm_not_judged"].is_null());
  EstimateReport two = compare_estimate(e, m);
  mark_micro_batches_not_judged(two, 2);
  const std::string reason =
      "the estimate is for 1 micro-batch per step; this run used 2, whose gradient-accumulation "
      "buffer it does not price";
  EXPECT_FALSE(two.hbm_comparable);
  EXPECT_FALSE(two.hbm_within);
  EXPECT_EQ(two.hbm_not_judged_reason, reason);
  EXPECT_NE(two.to_string().find("HBM per core (bytes)                         1000           "
                                 "1410  1.41x (not judged: " +
                                 reason + ")\n"),
            std::string::npos)
      << two.to_string();
  const nlohmann::json j = two.to_json();
  EXPECT_TRUE(j["hbm_within_25_percent"].is_null()) << j;
  EXPECT_TRUE(j["hbm_ratio"].is_null()) << j;
  EXPECT_EQ(j["hbm_comparable"], false);
  EXPECT_EQ(j["hbm_not_judged"], reason);
  EXPECT_EQ(j["comparable_hbm_bytes_per_core"], 1410);
}

// `vtpu plan --emit` embeds the profile it priced with (estimate.hardware_profile). A calibrated
// profile file names itself this_machine, like the shipped one; the run must be judged and
// probed against the embedded profile, not the shipped profile of that name.
TEST(EstimateReportTest, ThePlansEmbeddedProfileIsTheOneJudgedAndProbed) {
  MeasuredRun m;
  m.num_cores = 2;
  m.steps = 3;
  m.median_step_seconds = 0.625;
  m.peak_hbm_bytes_per_core = 1000;
  // A TPU's figures under the host's name: not judged (the shipped this_machine would be).
  HardwareProfile tpu = HardwareProfile::get("v5e");
  tpu.name = "this_machine";
  const auto e = read(plan_with({{"step_seconds", 0.5},
                                 {"hbm_bytes_per_core", 1000},
                                 {"hardware", "this_machine"},
                                 {"hardware_profile", tpu.to_json()},
                                 {"hardware_file", "/tmp/cal.json"}}),
                      "p.json");
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(e->profile.has_value());
  EXPECT_EQ(e->profile->host_cpus, 0);
  EXPECT_EQ(e->profile->hbm_bytes, tpu.hbm_bytes);
  EXPECT_EQ(e->hardware, "this_machine");
  EXPECT_EQ(e->hardware_file, "/tmp/cal.json");
  const EstimateReport r = compare_estimate(*e, m);
  EXPECT_FALSE(r.step_comparable);
  EXPECT_NE(r.to_string().find("(plan p.json: dp(x) on this_machine from /tmp/cal.json; 2 cores, "
                               "3 steps)"),
            std::string::npos)
      << r.to_string();
  EXPECT_EQ(r.to_json()["hardware_file"], "/tmp/cal.json");
  // A host profile without calibrated collectives: judged, and nothing to probe (the fixed
  // profile has calibrated fits, so probing it would give rows).
  HardwareProfile host = HardwareProfile::get(testing::fixed_profile_path());
  ASSERT_FALSE(host.collectives.empty());
  host.collectives.clear();
  const TrainPlan plan = parse_train_plan(plan_with({{"step_seconds", 0.5},
                                                     {"hbm_bytes_per_core", 1000},
                                                     {"hardware_profile", host.to_json()}}),
                                          "h.json");
  ASSERT_TRUE(plan.estimate.has_value());
  EXPECT_EQ(plan.estimate->hardware, "fixed_host");  // from the profile
  EXPECT_TRUE(plan.estimate->hardware_file.empty());
  EstimateReport hr = compare_estimate(*plan.estimate, m);
  EXPECT_TRUE(hr.step_comparable);
  EXPECT_TRUE(hr.step_within);  // 0.625 / 0.5 = 1.25
  CollectiveProbeOptions quick;
  quick.iters = 2;
  quick.warmup = 0;
  add_collective_probe(hr, plan, quick);
  EXPECT_TRUE(hr.probes.empty());
  EXPECT_TRUE(hr.probe_error.empty()) << hr.probe_error;
  // The report repeats vtpu plan's warning: every hand-off was priced at the links' 0 s latency.
  ASSERT_EQ(host.link_latency_seconds, 0.0);
  // It names the profile, the latency it priced with and the calibration that fixes it.
  ASSERT_EQ(hr.warnings.size(), 1u);
  const std::string warning = hr.warnings[0];
  for (const char* value : {"fixed_host", "0.000 us", "--calibrate"}) {
    EXPECT_NE(warning.find(value), std::string::npos) << value << " in " << warning;
  }
  EXPECT_NE(hr.to_string().find(warning), std::string::npos) << hr.to_string();
  EXPECT_EQ(hr.to_json()["warnings"], nlohmann::json::array({warning}));
  // The file vtpu plan read it from, when there was one.
  PlanEstimate from_file = *plan.estimate;
  from_file.hardware_file = "/tmp/hw.json";
  const std::string file_warning = compare_estimate(from_file, m).warnings.at(0);
  EXPECT_NE(file_warning.find("/tmp/hw.json"), std::string::npos) << file_warning;
  // A calibrated profile (the fixed one) and a TPU's: no warning.
  PlanEstimate calibrated = *plan.estimate;
  calibrated.profile = HardwareProfile::get(testing::fixed_profile_path());
  EXPECT_TRUE(compare_estimate(calibrated, m).warnings.empty());
  EXPECT_EQ(compare_estimate(calibrated, m).to_json()["warnings"], nlohmann::json::array());
  EXPECT_TRUE(compare_estimate(*e, m).warnings.empty());
  EXPECT_TRUE(hr.to_json()["hardware_file"].is_null());
  // The profile's host had host.host_cpus CPUs: a run on another count is told so.
  EXPECT_EQ(hr.profile_host_cpus, host.host_cpus);
  EXPECT_EQ(hr.to_json()["profile_host_cpus"], host.host_cpus);
  MeasuredRun wide = m;
  wide.host_cpus = host.host_cpus + 62;
  const std::string other = compare_estimate(*plan.estimate, wide).to_string();
  // Both CPU counts are named; with the same count the report says nothing of them.
  const std::string profile_cpus = std::to_string(host.host_cpus) + " CPUs";
  EXPECT_TRUE(testing::names_all(other, {profile_cpus, std::to_string(host.host_cpus + 62)}));
  wide.host_cpus = host.host_cpus;
  EXPECT_EQ(compare_estimate(*plan.estimate, wide).to_string().find(profile_cpus + " and"),
            std::string::npos);
  // Bad embedded profiles name the field.
  EXPECT_TRUE(testing::names_all(
      message(plan_with(
          {{"step_seconds", 1}, {"hardware", "v5e"}, {"hardware_profile", host.to_json()}})),
      {"estimate.hardware_profile", "'fixed_host'", "estimate.hardware", "'v5e'"}));
  nlohmann::json broken = host.to_json();
  broken["host_cpus"] = -1;
  EXPECT_TRUE(
      testing::names_all(message(plan_with({{"step_seconds", 1}, {"hardware_profile", broken}})),
                         {"estimate.hardware_profile", "host_cpus"}));
  EXPECT_TRUE(testing::names_all(message(plan_with({{"step_seconds", 1}, {"hardware_file", 7}})),
                                 {"estimate.hardware_file", "7"}));
}

TEST(EstimateReportTest, TheCollectiveProbeIsPrintedAndJudgedBesideTheProfilesEstimate) {
  PlanEstimate e;
  e.step_seconds = 16e-6;
  e.hardware = "this_machine";
  MeasuredRun m;
  m.num_cores = 2;
  m.median_step_seconds = 32e-6;  // 2.00x the profile's estimate
  EstimateReport r = compare_estimate(e, m);
  EXPECT_FALSE(r.step_within);
  // As add_collective_probe fills it: the host's hand-off is 1.7 us slower than the profile's,
  // and the plan's seven collectives make the estimate 16 + 7 x 1.7 = 27.9 us: 32 / 27.9 = 1.147.
  r.probes = {{"all_gather", 2, 4096, 0.9e-6, 2.6e-6, {}},
              {"all_reduce", 2, 4096, 0.9e-6, 2.6e-6, {}}};
  r.probed_step_seconds = 27.9e-6;
  r.probed_step_ratio = m.median_step_seconds / r.probed_step_seconds;
  r.probed_step_within = true;
  const std::string text = r.to_string();
  // The probed row gives the probed estimate, the measurement and their ratio; each probe row
  // its op, group, and the measured and profile times.
  EXPECT_TRUE(testing::names_all(text, {"27.900 us", "32.000 us", "1.15x"}));
  EXPECT_TRUE(testing::names_all(text, {"all_gather", "2 cores", "2.600 us", "0.900 us"}));
  const nlohmann::json j = r.to_json()["probe"];
  EXPECT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["op"], "all_gather");
  EXPECT_EQ(j["rows"][0]["group_size"], 2);
  EXPECT_DOUBLE_EQ(j["rows"][0]["measured_seconds"].get<double>(), 2.6e-6);
  EXPECT_DOUBLE_EQ(j["step_seconds"].get<double>(), 27.9e-6);
  EXPECT_EQ(j["step_within_25_percent"], true);
  EXPECT_EQ(j["judged"], true);
  // A busy host: a probe at 20,000x the profile's time. The probed estimate would absorb the
  // whole slowdown, so it is printed but not judged.
  r.probes = {{"all_gather", 2, 4096, 1e-6, 20e-3, {}}, {"all_reduce", 2, 4096, 1e-6, 2e-6, {}}};
  r.probe_worst_ratio = worst_probe_ratio(r.probes);
  EXPECT_DOUBLE_EQ(r.probe_worst_ratio, 20000.0);
  r.probe_judged = false;
  r.probed_step_within = false;
  r.probed_step_seconds = 40e-6;
  r.probed_step_ratio = m.median_step_seconds / r.probed_step_seconds;
  EXPECT_NE(r.to_string().find("0.80x (not judged: a collective probed 20000x the profile's time, "
                               "more than 10x: the host was busy)"),
            std::string::npos)
      << r.to_string();
  EXPECT_TRUE(r.to_json()["probe"]["step_within_25_percent"].is_null());
  EXPECT_EQ(r.to_json()["probe"]["judged"], false);
}

TEST(EstimateReportTest, StepMeterTicksEveryStepAndForwardsWhereTheTrainerWould) {
  StepMeter meter;
  std::vector<int64_t> logged;
  const auto cb = meter.wrap([&](int64_t step, double) { logged.push_back(step); }, 3, 10);
  for (int64_t s = 0; s < 10; ++s) cb(s, 1.0);
  EXPECT_EQ(logged, (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(meter.intervals(), 9u);
  EXPECT_GE(meter.median_cpu_seconds(), 0.0);
  EXPECT_GE(meter.median_wall_seconds(), 0.0);
  // every = 0: never forwards; an empty callback is fine.
  StepMeter quiet;
  const auto none = quiet.wrap({}, 0, 4);
  for (int64_t s = 0; s < 4; ++s) none(s, 0.0);
  EXPECT_EQ(quiet.intervals(), 3u);
  EXPECT_EQ(StepMeter().median_cpu_seconds(), 0.0);
}

// Hand-worked: steps of 51 us wall, so a CPU reading is due every 4 ticks (204 us >= 200), at 0,
// 4, 8, ...; the process burns 2 CPU-seconds per wall-second (two busy cores) except between
// ticks 4 and 8, where it burns 3. CPU per step is then 100 us, 150 us, 100 us: median 100 us.
TEST(EstimateReportTest, StepMeterReadsTheCpuClockAtMostOncePer200usOfWallTime) {
  StepMeter meter;
  int reads = 0;
  double cpu = 0;
  for (int t = 0; t <= 12; ++t) {
    const double wall = 51e-6 * t;
    meter.record(wall, [&] {
      ++reads;
      return cpu;
    });
    cpu += (t >= 4 && t < 8) ? 150e-6 : 100e-6;
  }
  EXPECT_EQ(reads, 4);  // ticks 0, 4, 8, 12
  EXPECT_EQ(meter.cpu_readings(), 4u);
  EXPECT_EQ(meter.intervals(), 12u);
  EXPECT_NEAR(meter.median_cpu_seconds(), 100e-6, 1e-12);
  EXPECT_NEAR(meter.median_wall_seconds(), 51e-6, 1e-12);
  // Steps of 1 ms: a reading at every tick.
  StepMeter slow;
  int slow_reads = 0;
  for (int t = 0; t < 5; ++t) slow.record(1e-3 * t, [&] { return 0.5e-3 * ++slow_reads; });
  EXPECT_EQ(slow_reads, 5);
  EXPECT_NEAR(slow.median_cpu_seconds(), 0.5e-3, 1e-12);
  // A short run: 5 ticks 20 us apart read at the first and, marked last, at the last tick: one
  // interval of 4 steps, 4 x 30 us of CPU.
  StepMeter brief;
  for (int t = 0; t < 5; ++t)
    brief.record(
        20e-6 * t, [&] { return 30e-6 * t; }, t == 4);
  EXPECT_EQ(brief.cpu_readings(), 2u);
  EXPECT_NEAR(brief.median_cpu_seconds(), 30e-6, 1e-15);
  // Uneven steps: per 4-step window three steps of 50 us and one of 650 us (800 us), the
  // process keeping 2 CPUs busy throughout (1600 us of CPU per window). Readings are due at ticks
  // 0, 4 (t = 800 us), 8, 12. The median wall step is 50 us; the CPU rate is 1600 / 800 = 2 in
  // every window, so the CPU per step is 2 x 50 us = 100 us, and / 2 CPUs = 50 us, the wall step.
  // (CPU / steps per window would say 400 us: / 2 CPUs = 200 us, 4x the wall step.)
  StepMeter uneven;
  double t_uneven = 0;
  for (int t = 0; t <= 12; ++t) {
    uneven.record(t_uneven, [&] { return 2 * t_uneven; });
    t_uneven += t % 4 == 3 ? 650e-6 : 50e-6;
  }
  EXPECT_EQ(uneven.cpu_readings(), 4u);
  EXPECT_NEAR(uneven.median_wall_seconds(), 50e-6, 1e-15);
  EXPECT_NEAR(uneven.median_cpu_seconds(), 100e-6, 1e-12);
  // Through wrap(): the callback of the last of `steps` reads the CPU clock. It runs on the real
  // clocks: the middle step reads too when the host preempted this thread for 200 us between the
  // calls (seen once under load), so 2 or 3 readings; without the last one it would be 1.
  StepMeter wrapped;
  const auto cb = wrapped.wrap({}, 0, 3);
  for (int64_t s = 0; s < 3; ++s) cb(s, 0.0);
  EXPECT_GE(wrapped.cpu_readings(), 2u);
  EXPECT_LE(wrapped.cpu_readings(), 3u);
}

}  // namespace
}  // namespace vtpu
