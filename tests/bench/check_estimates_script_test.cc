// scripts/check-estimates.sh --from DIR: the table and verdict it prints from runs' JSON files
// (the `estimate_vs_measured` object of `vtpu train ... --plan ... --json`). The fixtures below
// are hand-written, so each expected median and verdict is worked out by hand in the comments.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tests/run_command.h"
#include "tests/temp_path.h"
#include "tests/test_data.h"

namespace {

using ScriptRun = vtpu::CommandRun;  // output: stdout and stderr together

ScriptRun run_script(const std::string& args) {
  return vtpu::run_command("timeout 60 " + std::string(VTPU_SOURCE_DIR) +
                           "/scripts/check-estimates.sh " + args + " 2>&1");
}

bool have_jq() { return std::system("command -v jq > /dev/null 2>&1") == 0; }

/// One run's `--json` output, reduced to the fields the script reads. `probed` is the probed
/// step ratio (nullopt: no probe, as on 1 core); `probe_judged` false marks a busy-host probe.
nlohmann::json run_json(const std::string& strategy, double estimate_s, double measured_s,
                        double hbm_ratio, std::optional<double> probed = std::nullopt,
                        bool probe_judged = true) {
  nlohmann::json e = {{"strategy", strategy},
                      {"estimate", {{"step_seconds", estimate_s}}},
                      {"measured", {{"median_step_seconds", measured_s}}},
                      {"step_ratio", measured_s / estimate_s},
                      {"hbm_ratio", hbm_ratio},
                      {"probe", nullptr}};
  if (probed) e["probe"] = {{"step_ratio", *probed}, {"judged", probe_judged}};
  return {{"estimate_vs_measured", e}};
}

/// Writes the eight examples x `rounds` files: example i, round r is `dir`/run{i}-{r}.json. Every
/// example defaults to a run exactly on its estimate (ratio 1) unless `edit` changes it.
template <typename Edit>
std::filesystem::path write_runs(const std::string& name, int rounds, Edit edit) {
  const std::filesystem::path dir = vtpu::test_temp_dir() / name;
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 8; ++i) {
    for (int r = 1; r <= rounds; ++r) {
      nlohmann::json j = run_json("dp(x)", 1e-3, 1e-3, 1.0);
      edit(i, r, j);
      std::ofstream(dir / ("run" + std::to_string(i) + "-" + std::to_string(r) + ".json")) << j;
    }
  }
  return dir;
}

std::string row_of(const std::string& output, const std::string& example) {
  const size_t at = output.find("| " + example + " |");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

TEST(CheckEstimatesScriptTest, EachExampleIsJudgedOnTheMedianRoundWithTheProbeWhereJudged) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  const auto dir = write_runs("median", 3, [](int i, int r, nlohmann::json& j) {
    if (i == 0) {
      // mlp 1 core, no probe: 9 us, 16 us, 10 us against 10 us -> ratios 0.9, 1.6, 1.0; the
      // median round is 1.0 (the 1.6 outlier does not decide), measured median 10 us.
      const double measured[] = {9e-6, 16e-6, 10e-6};
      j = run_json("single core", 10e-6, measured[r - 1], 1.03);
    } else if (i == 1) {
      // mlp 2 cores: plain 1.3 in every round, probed 1.1, 1.2, 1.0 -> judged median 1.1.
      const double probed[] = {1.1, 1.2, 1.0};
      j = run_json("dp(x)", 10e-6, 13e-6, 1.02, probed[r - 1]);
    } else if (i == 2) {
      // mlp 8 cores: the round-2 probe saw a busy host (not judged: "busy"), so round 2 counts
      // its plain ratio 1.1: judged 1.2, 1.1, 1.3 -> median 1.2, within.
      const double plain[] = {1.5, 1.1, 1.4};
      const double probed[] = {1.2, 0.9, 1.3};
      j = run_json("tp(x)", 10e-6, plain[r - 1] * 10e-6, 1.09, probed[r - 1], r != 2);
    } else if (i == 6) {
      // transformer 1x2: step on the estimate, HBM 1.3x in two rounds of three -> outside.
      j = run_json("dp(model)", 4e-3, 4e-3, r == 1 ? 1.0 : 1.3, 1.0);
    } else if (i == 7) {
      // transformer 2x4: 1.3, 1.26, 1.1 -> median 1.26 > 1.25, outside.
      const double ratio[] = {1.3, 1.26, 1.1};
      j = run_json("dp(data,model)", 5e-3, ratio[r - 1] * 5e-3, 1.1, ratio[r - 1]);
    }
  });
  const ScriptRun run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;  // two examples outside
  EXPECT_EQ(row_of(run.output, "mlp 1 core"),
            "| mlp 1 core | single core | 10 us | 10 us | 0.9, 1.6, 1 | - | 1 | 1.03 | - | - | "
            "within 25% |");
  EXPECT_EQ(row_of(run.output, "mlp 2 cores"),
            "| mlp 2 cores | dp(x) | 10 us | 13 us | 1.3, 1.3, 1.3 | 1.1, 1.2, 1 | 1.1 | 1.02 | "
            "- | - | within 25% |");
  EXPECT_EQ(row_of(run.output, "mlp 8 cores"),
            "| mlp 8 cores | tp(x) | 10 us | 14 us | 1.5, 1.1, 1.4 | 1.2, busy, 1.3 | 1.2 | 1.09 | "
            "- | - | within 25% |");
  EXPECT_EQ(row_of(run.output, "transformer 1x2"),
            "| transformer 1x2 | dp(model) | 4 ms | 4 ms | 1, 1, 1 | 1, 1, 1 | 1 | 1.3 | "
            "- | - | **outside 25%** |");
  EXPECT_EQ(
      row_of(run.output, "transformer 2x4"),
      "| transformer 2x4 | dp(data,model) | 5 ms | 6.3 ms | 1.3, 1.26, 1.1 | 1.3, 1.26, 1.1 | "
      "1.26 | 1.1 | - | - | **outside 25%** |");
  EXPECT_EQ(row_of(run.output, "fsdp 2 cores"),
            "| fsdp 2 cores | dp(x) | 1 ms | 1 ms | 1, 1, 1 | - | 1 | 1 | - | - | within 25% |");
}

TEST(CheckEstimatesScriptTest,
     AnEvenNumberOfRoundsTakesTheMeanOfTheMiddleTwoAndAllWithinExitsZero) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  const auto dir = write_runs("even", 4, [](int i, int r, nlohmann::json& j) {
    // transformer 1x1: ratios 0.7, 0.8, 0.9, 2.0 -> median (0.8 + 0.9) / 2 = 0.85, within.
    const double ratio[] = {0.7, 0.8, 0.9, 2.0};
    if (i == 5) j = run_json("single core", 10e-3, ratio[r - 1] * 10e-3, 1.19);
  });
  const ScriptRun run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(
      row_of(run.output, "transformer 1x1"),
      "| transformer 1x1 | single core | 10 ms | 8.5 ms | 0.7, 0.8, 0.9, 2 | - | 0.85 | 1.19 | "
      "- | - | within 25% |");
}

// The probed ratio is judged with a given profile and with the calibration of the minute (the
// run wrote profile.json) alike.
TEST(CheckEstimatesScriptTest, TheProbedRatioIsJudgedWithAnyProfile) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  const auto dir = write_runs("calibrated", 3, [](int i, int, nlohmann::json& j) {
    // mlp 2 cores: 13 us against 10 us (1.3) in every round, 1.0 with the probe.
    if (i == 1) j = run_json("dp(x)", 10e-6, 13e-6, 1.02, 1.0);
  });
  ScriptRun run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("| judged (median, probed) |"), std::string::npos) << run.output;
  EXPECT_EQ(row_of(run.output, "mlp 2 cores"),
            "| mlp 2 cores | dp(x) | 10 us | 13 us | 1.3, 1.3, 1.3 | 1, 1, 1 | 1 | 1.02 | - | - | "
            "within 25% |");
  std::ofstream(dir / "profile.json") << "{}";
  run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("| judged (median, probed) |"), std::string::npos) << run.output;
  EXPECT_EQ(row_of(run.output, "mlp 2 cores"),
            "| mlp 2 cores | dp(x) | 10 us | 13 us | 1.3, 1.3, 1.3 | 1, 1, 1 | 1 | 1.02 | - | - | "
            "within 25% |");
}

// The default run calibrates once per round (profile-1.json ..): each round's ratio is against
// its own estimate, the estimate column is the median estimate, and the probed ratio is judged.
TEST(CheckEstimatesScriptTest, ACalibrationPerRoundJudgesEachRoundAgainstItsOwnEstimate) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  const auto dir = write_runs("per_round", 3, [](int i, int r, nlohmann::json& j) {
    // transformer 1x1: estimates 10, 12, 8 ms (three calibrations), measured 9, 9, 9 ms ->
    // ratios 0.9, 0.75, 1.125; median ratio 0.9, median estimate 10 ms.
    const double estimate[] = {10e-3, 12e-3, 8e-3};
    if (i == 5) j = run_json("single core", estimate[r - 1], 9e-3, 1.19);
    // mlp 2 cores: plain 1.3 in every round, 1.4 probed: judged probed, outside.
    if (i == 1) j = run_json("dp(x)", 10e-6, 13e-6, 1.02, 1.4);
  });
  std::ofstream(dir / "profile-1.json") << "{}";
  const ScriptRun run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("| estimate (median of rounds) |"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("| judged (median, probed) |"), std::string::npos) << run.output;
  EXPECT_EQ(row_of(run.output, "transformer 1x1"),
            "| transformer 1x1 | single core | 10 ms | 9 ms | 0.9, 0.75, 1.13 | - | 0.9 | 1.19 | "
            "- | - | within 25% |");
  EXPECT_EQ(row_of(run.output, "mlp 2 cores"),
            "| mlp 2 cores | dp(x) | 10 us | 13 us | 1.3, 1.3, 1.3 | 1.4, 1.4, 1.4 | 1.4 | 1.02 | "
            "- | - | **outside 25%** |");
}

// A run that failed is recorded ({"failed": error}) and its row says so, outside; a run the
// trainer did not judge (step_ratio null: a TPU profile) is "not judged", outside; a file that
// is not a run's output is named.
TEST(CheckEstimatesScriptTest, FailedAndUnjudgedRunsAreRowsOutsideAndBadFilesAreNamed) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  const auto dir = write_runs("failed", 3, [](int i, int r, nlohmann::json& j) {
    if (i == 2 && r == 2) j = {{"failed", "vtpu: error: DeadlineExceeded: all_reduce timed out"}};
    if (i == 4) j["estimate_vs_measured"]["step_ratio"] = nullptr;
  });
  ScriptRun run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(row_of(run.output, "mlp 8 cores"),
            "| mlp 8 cores | dp(x) | - | - | 1, failed, 1 | - | round 2 failed: vtpu: error: "
            "DeadlineExceeded: all_reduce timed out | - | - | - | **outside 25%** |");
  EXPECT_EQ(row_of(run.output, "fsdp 8 cores"),
            "| fsdp 8 cores | dp(x) | 1 ms | 1 ms | not judged | - | not judged (the trainer "
            "marks the estimate not comparable on this host) | - | - | - | **outside 25%** |");
  EXPECT_EQ(row_of(run.output, "mlp 1 core"),
            "| mlp 1 core | dp(x) | 1 ms | 1 ms | 1, 1, 1 | - | 1 | 1 | - | - | within 25% |");
  std::ofstream(dir / "run5-3.json", std::ios::trunc) << "";
  run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("run5-3.json (transformer 1x1, round 3) is not a run's --json output"),
            std::string::npos)
      << run.output;
}

// Regression: a busy host's wall ratios were indistinguishable from a wrong
// estimate. The table gives the median CPU ratio and each round's load average (before the run),
// and a round that started above the host's CPUs is named in the footer and on stderr.
TEST(CheckEstimatesScriptTest, TheTableShowsTheCpuRatioAndLoadAndWarnsOfABusyHost) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  const auto dir = write_runs("busy", 3, [](int i, int r, nlohmann::json& j) {
    // transformer 1x1: wall 5.2x in every round, CPU ratios 1.19, 1.09, 1.29 -> median 1.19.
    const double cpu[] = {1.19, 1.09, 1.29};
    if (i == 5) {
      j = run_json("single core", 10e-3, 52e-3, 1.19);
      j["estimate_vs_measured"]["cpu_ratio"] = cpu[r - 1];
    }
  });
  std::ofstream(dir / "host_cpus.txt") << "2\n";
  const char* start[] = {"7.80 7.90 8.00 3/500 1234\n", "1.50 2.00 2.50 1/500 1234\n",
                         "2.00 2.00 2.00 1/500 1234\n"};  // round 3 at 2.00: not above 2 CPUs
  for (int r = 1; r <= 3; ++r) {
    std::ofstream(dir / ("loadavg-" + std::to_string(r) + ".txt")) << start[r - 1];
    std::ofstream(dir / ("loadavg5-" + std::to_string(r) + ".txt")) << start[r - 1];
  }
  ScriptRun run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(row_of(run.output, "transformer 1x1"),
            "| transformer 1x1 | single core | 10 ms | 52 ms | 5.2, 5.2, 5.2 | - | 5.2 | 1.19 | "
            "1.19 | 7.80, 1.50, 2.00 | **outside 25%** |");
  // Example 0 has no load files and no cpu_ratio: "-" for each.
  EXPECT_EQ(row_of(run.output, "mlp 1 core"),
            "| mlp 1 core | dp(x) | 1 ms | 1 ms | 1, 1, 1 | - | 1 | 1 | - | - | within 25% |");
  EXPECT_NE(run.output.find("**Busy host**: load average (1 min) above the host's 2 CPUs at the "
                            "start of round 1 at 7.80."),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("check-estimates: warning: busy host (round 1 at 7.80 on 2 CPUs)"),
            std::string::npos)
      << run.output;
  // An older directory without host_cpus.txt has no footer.
  std::filesystem::remove(dir / "host_cpus.txt");
  run = run_script("--from " + dir.string());
  EXPECT_EQ(run.output.find("Busy host"), std::string::npos) << run.output;
}

// A TPU profile is refused up front, and so is an --out that holds an earlier run's files
// (which the judging would read back). Both before vtpu runs.
TEST(CheckEstimatesScriptTest, TpuProfilesAndReusedOutDirectoriesAreUsageErrors) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  ScriptRun run = run_script("--hardware v5e --vtpu /bin/true");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(vtpu::testing::names_all(run.output, {"--hardware v5e", "TPU"}));
  const auto dir = write_runs("reused", 1, [](int, int, nlohmann::json&) {});
  run = run_script("--hardware this_machine --vtpu /bin/true --out " + dir.string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(vtpu::testing::names_all(run.output, {"--out", dir.string()}));
}

TEST(CheckEstimatesScriptTest, BadArgumentsAndMissingRunsAreErrorsNamingThem) {
  if (!have_jq()) GTEST_SKIP() << "jq is not installed (scripts/install-deps.sh installs it)";
  ScriptRun run = run_script("--rounds 0");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(vtpu::testing::names_all(run.output, {"--rounds '0'", "1..100"}));
  run = run_script("--frobnicate");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(vtpu::testing::names_all(run.output, {"'--frobnicate'"}));
  const std::filesystem::path empty = vtpu::test_temp_dir() / "empty";
  std::filesystem::create_directories(empty);
  run = run_script("--from " + empty.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("holds no run0-1.json"), std::string::npos) << run.output;
  // Round 2 of example 3 is missing: the script names the file instead of judging fewer rounds.
  const auto dir = write_runs("missing", 2, [](int, int, nlohmann::json&) {});
  std::filesystem::remove(dir / "run3-2.json");
  run = run_script("--from " + dir.string());
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("run3-2.json (fsdp 2 cores, round 2) is missing"), std::string::npos)
      << run.output;
}

}  // namespace
