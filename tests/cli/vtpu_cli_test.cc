// End-to-end checks of the `vtpu` program: what it computes (read from --json), its exit codes,
// and that bad input fails with the offending value named on stderr, never a crash or a hang.
// The checks read values, not sentences: a rewording of a message or of a table keeps them green.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/run_command.h"
#include "tests/temp_path.h"
#include "tests/test_data.h"
#include "vtpu/common/host.h"
#include "vtpu/runtime/hardware_profile.h"

using vtpu::test_temp_dir;
using vtpu::test_temp_path;

namespace {

using CliRun = vtpu::CommandRun;  // output: stdout and stderr together

CliRun run_cli(const std::string& args) {
  // `timeout` turns a hang into exit code 124 instead of a stuck test.
  return vtpu::run_command("timeout 60 " + std::string(VTPU_CLI_PATH) + " " + args + " 2>&1");
}

// A run whose stdout and stderr are kept apart: an error belongs on stderr, a --json on stdout.
struct SplitRun {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

SplitRun run_cli_split(const std::string& args) {
  static int count = 0;
  const std::string err_path = test_temp_path("stderr_" + std::to_string(count++) + ".txt");
  const CliRun r =
      vtpu::run_command("timeout 60 " + std::string(VTPU_CLI_PATH) + " " + args + " 2>" + err_path);
  std::ifstream in(err_path);
  std::string err(std::istreambuf_iterator<char>(in), {});
  std::filesystem::remove(err_path);
  return {r.exit_code, r.output, std::move(err)};
}

// The file is named after the running test too: ctest -j runs tests in parallel processes, and
// two tests that wrote, read and removed one shared path failed each other.
std::string temp_file(const std::string& name, const std::string& content) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string prefix = test != nullptr ? std::string(test->name()) + "_" : "";
  const std::string path = test_temp_path(prefix + name);
  std::ofstream(path) << content;
  return path;
}

// A hand-written plan file: the mlp model, FSDP over a 1-D mesh x of `cores` devices.
std::string fsdp_mlp_plan(const std::string& name, int cores) {
  return temp_file(name, R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["x"], "shape": [)j" +
                             std::to_string(cores) + R"j(]},
      "strategy": {"name": "fsdp(x)", "fsdp": "x"}})j");
}

// `vtpu ARGS` fails with `exit_code` (2: a command-line usage error; 1: an error found while
// running) and names every one of `values` (the offending value, the flag, the expected value) on
// stderr. Nothing of the wording around them is checked.
void expect_failure(const std::string& args, int exit_code,
                    const std::vector<std::string>& values) {
  const SplitRun r = run_cli_split(args);
  EXPECT_EQ(r.exit_code, exit_code) << args << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_FALSE(r.err.empty()) << args;
  for (const std::string& value : values) {
    EXPECT_NE(r.err.find(value), std::string::npos)
        << "'" << value << "' not named by: " << args << "\nstderr: " << r.err;
  }
}

// `text` names every one of `values`.
void expect_names(const std::string& text, const std::vector<std::string>& values) {
  for (const std::string& value : values) {
    EXPECT_NE(text.find(value), std::string::npos) << "'" << value << "' not in:\n" << text;
  }
}

// One bad input of a table: the arguments, the expected exit code and the values the error names.
struct BadInput {
  std::string args;
  int exit_code;
  std::vector<std::string> values;
};

// Runs every row of `table` through expect_failure, each under its own SCOPED_TRACE.
void expect_failures(const std::vector<BadInput>& table) {
  for (const BadInput& row : table) {
    SCOPED_TRACE(row.args);
    expect_failure(row.args, row.exit_code, row.values);
  }
}

// A JSON document parsed from a run's stdout; a failed run or non-JSON output fails the test.
nlohmann::json json_of(const std::string& args) {
  const SplitRun r = run_cli_split(args);
  EXPECT_EQ(r.exit_code, 0) << args << "\nstderr: " << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << args << "\nstdout: " << r.out;
  return j;
}

TEST(VtpuCliTest, TrainMlpWritesMemoryProfileSnapshotAndEventLog) {
  VTPU_REQUIRE_DIGITS();
  const std::filesystem::path& dir = test_temp_dir();
  const std::string prof = (dir / "vtpu_cli_mlp.prof").string();
  const std::string snap = (dir / "vtpu_cli_mlp_snapshot.json").string();
  const std::string events = (dir / "vtpu_cli_mlp_events.jsonl").string();
  const CliRun r = run_cli("train mlp --cores 2 --steps 5 --batch 32 --allocator first_fit --json" +
                           std::string(" --memory-profile ") + prof + " --memory-snapshot " + snap +
                           " --memory-events " + events);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["config"]["runtime"]["allocator"], "first_fit");
  EXPECT_EQ(j["config"]["runtime"]["record_memory_events"], true);
  // One gradient all-reduce per step: the profile hook's barriers are not counted in them.
  for (const auto& a : j["all_reduce"]) EXPECT_EQ(a["num_collectives"], 5) << a;
  // The snapshot is taken after the last step, while the training buffers are live: each core
  // holds its copy of the dataset, the parameters, the gradient bucket and the step buffers.
  const nlohmann::json s = nlohmann::json::parse(std::ifstream(snap));
  ASSERT_EQ(s["segments"].size(), 2u);
  std::set<std::string> labels;
  for (const auto& b : s["segments"][1]["blocks"]) {
    if (b.contains("label")) labels.insert(b["label"].get<std::string>());
  }
  for (const char* l : {"mlp/train_pixels", "mlp/params", "mlp/grads+loss", "mlp/x", "mlp/z1"}) {
    EXPECT_TRUE(labels.contains(l)) << l;
  }
  std::ifstream p(prof, std::ios::binary);
  EXPECT_EQ(p.get(), 0x1f);  // gzip
  EXPECT_EQ(p.get(), 0x8b);
  // The event log: a header and, for each core, as many frees as allocs (everything is freed).
  std::ifstream e(events);
  std::string line;
  std::getline(e, line);
  EXPECT_EQ(nlohmann::json::parse(line)["format"], "vtpu-trace");
  int allocs[2] = {0, 0}, frees[2] = {0, 0};
  while (std::getline(e, line)) {
    const nlohmann::json ev = nlohmann::json::parse(line);
    const int core = ev.value("core", 0);
    (ev["op"] == "alloc" ? allocs : frees)[core] += 1;
  }
  EXPECT_GT(allocs[0], 5);
  EXPECT_EQ(allocs[0], frees[0]);
  EXPECT_EQ(allocs[1], frees[1]);
}

TEST(VtpuCliTest, TrainMlpJsonReportsEverything) {
  VTPU_REQUIRE_DIGITS();
  const CliRun r = run_cli("train mlp --cores 4 --steps 30 --batch 32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["num_cores"], 4);
  EXPECT_EQ(j["losses"].size(), 30u);
  EXPECT_EQ(j["hbm"].size(), 4u);
  for (const char* key : {"bytes_in_use", "peak_bytes_in_use", "bytes_limit", "largest_alloc_size",
                          "largest_free_block_bytes", "num_allocs"}) {
    EXPECT_TRUE(j["hbm"][0].contains(key)) << key;
  }
  EXPECT_EQ(j["hbm"][0]["bytes_limit"], 16ull << 30);
  EXPECT_EQ(j["all_reduce"][0]["num_collectives"], 30);
  EXPECT_GT(j["median_step_seconds"].get<double>(), 0.0);
  EXPECT_FALSE(j.contains("median_step_ms"));  // seconds, as every trainer
  EXPECT_TRUE(j["replicas_identical"].get<bool>());
  EXPECT_TRUE(j["replica_mismatch"].is_null());
}

// --optimizer adam uses torch.optim.Adam's learning rate 1e-3 unless --lr is given, and
// --cores 1 --micro-batches 4 repeats the f32 sums of --cores 4 exactly (bit-identical losses),
// also at hidden 1024.
TEST(VtpuCliTest, TrainMlpAdamAndMicroBatches) {
  VTPU_REQUIRE_DIGITS();
  const std::string common = " --steps 15 --batch 32 --hidden 1024 --optimizer adam --json";
  const CliRun four = run_cli("train mlp --cores 4" + common);
  ASSERT_EQ(four.exit_code, 0) << four.output;
  const CliRun one = run_cli("train mlp --cores 1 --micro-batches 4" + common);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const nlohmann::json a = nlohmann::json::parse(four.output);
  const nlohmann::json b = nlohmann::json::parse(one.output);
  EXPECT_EQ(a["config"]["optimizer"], "adam");
  EXPECT_DOUBLE_EQ(a["config"]["learning_rate"].get<double>(), 0.001);
  EXPECT_EQ(b["config"]["micro_batches"], 4);
  EXPECT_EQ(a["losses"], b["losses"]);
  // --lr replaces Adam's default; the text report names the rate it ran with.
  const nlohmann::json lr =
      json_of("train mlp --cores 2 --steps 3 --optimizer adam --lr 0.01 --json");
  EXPECT_EQ(lr["config"]["optimizer"], "adam");
  EXPECT_DOUBLE_EQ(lr["config"]["learning_rate"].get<double>(), 0.01);
  const CliRun text = run_cli("train mlp --cores 2 --steps 3 --optimizer adam --lr 0.01");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("0.01"), std::string::npos) << text.output;
  expect_failure("train mlp --optimizer rmsprop", 2, {"--optimizer", "rmsprop"});
  // A --micro-batches that does not divide a core's rows (8 here) is a usage error naming it.
  expect_failure("train mlp --cores 4 --batch 32 --micro-batches 3", 2, {"--micro-batches 3", "8"});
  expect_failure("train mlp --micro-batches 0", 2, {"--micro-batches", "0"});
  for (const char* flag : {"train mlp", "train fsdp", "train transformer"}) {
    for (const char* value : {"2", "maybe", "''"}) {
      SCOPED_TRACE(std::string(flag) + " " + value);
      expect_failure(std::string(flag) + " --pad-arrays " + value, 2, {"--pad-arrays"});
    }
  }
}

// `printf`-style formatting of one value, as the text report prints it.
std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// The text report of a run carries the values of the --json report of the same (deterministic)
// run: the logged losses, the accuracy, the all-reduce bytes and the HBM peak.
TEST(VtpuCliTest, TrainMlpTextOutput) {
  VTPU_REQUIRE_DIGITS();
  const std::string args = "train mlp --cores 2 --steps 20 --log-every 5";
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = json_of(args + " --json");
  ASSERT_EQ(j["losses"].size(), 20u);
  for (int step : {0, 5, 10, 15, 19}) {  // every 5th step and the last
    EXPECT_NE(r.output.find(fixed(j["losses"][step].get<double>(), 6)), std::string::npos)
        << step << "\n"
        << r.output;
  }
  EXPECT_NE(r.output.find(fixed(j["test_accuracy"].get<double>(), 4)), std::string::npos);
  uint64_t reduced = 0;  // core 0's bytes over the whole run
  for (const auto& a : j["all_reduce"]) {
    if (a["core"] == 0) reduced = a["bytes"].get<uint64_t>();
  }
  EXPECT_NE(r.output.find("(" + std::to_string(reduced) + " bytes)"), std::string::npos)
      << reduced << "\n"
      << r.output;
  EXPECT_NE(r.output.find(std::to_string(j["hbm"][0]["peak_bytes_in_use"].get<uint64_t>())),
            std::string::npos)
      << r.output;
}

TEST(VtpuCliTest, RejectsBadInput) {
  VTPU_REQUIRE_DIGITS();
  expect_failures({
      {"train mlp --cores 0", 2, {"--cores", "0"}},
      {"train mlp --cores 4 --batch 10", 1, {"10", "4 cores"}},
      {"train mlp --hbm-bytes 16K", 1, {"HBM", "16384"}},
      {"train mlp --hbm-bytes lots", 2, {"--hbm-bytes", "'lots'"}},
      {"train mlp --data /nonexistent.csv.gz", 1, {"/nonexistent.csv.gz", "scripts/fetch-data.sh"}},
  });
  std::string rows;
  for (int i = 0; i < 20; ++i) rows += "1,2,3\n";
  expect_failures({
      {"train mlp --data " + temp_file("vtpu_cli_bad.csv", rows),
       1,
       {"vtpu_cli_bad.csv", "line 1"}},
      {"train mlp --config " + temp_file("vtpu_bad.json", "{\"num_cores\": 4,"),
       1,
       {"vtpu_bad.json", "JSON"}},
      {"train mlp --config " + temp_file("vtpu_bad2.json", "{\"num_corez\": 4}"), 1, {"num_corez"}},
      {"train mlp --config " + temp_file("vtpu_bad3.json", "{\"allocator\": \"best\"}"),
       1,
       {"allocator", "best", "bfc"}},
      {"train mlp --config /nonexistent.json", 1, {"/nonexistent.json"}},
      {"train mlp --lr -1", 2, {"-1", "--lr"}},
      {"train mlp --bogus", 2, {"--bogus"}},
      {"train nope", 2, {"nope"}},
  });
}

TEST(VtpuCliTest, ConfigFileSetsTheCores) {
  VTPU_REQUIRE_DIGITS();
  const std::string cfg = temp_file("vtpu_ok.json",
                                    R"({"num_cores": 2, "hbm_bytes_per_core": "64M",
                                        "link_slot_bytes": 4096, "link_num_slots": 2})");
  const CliRun r = run_cli("train mlp --steps 5 --batch 8 --json --config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["num_cores"], 2);
  EXPECT_EQ(j["hbm"][0]["bytes_limit"], 64ull << 20);
}

// Regression: --config was train mlp's only; train fsdp and train transformer take
// it with train mlp's rules: the file's keys under the flags, num_cores the default of --cores
// (transformer: --mesh 1xN), and a num_cores that disagrees with a mesh is a usage error.
TEST(VtpuCliTest, TrainFsdpAndTransformerTakeAConfigFile) {
  VTPU_REQUIRE_DIGITS();
  const std::string cfg = temp_file("vtpu_cfg2.json", R"({"num_cores": 2, "allocator": "first_fit",
      "collective_algorithm": "ring", "pin_threads": "off", "collective_timeout_ms": 120000})");
  const CliRun f = run_cli("train fsdp --steps 2 --batch 8 --json --config " + cfg);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  const nlohmann::json fj = nlohmann::json::parse(f.output);
  EXPECT_EQ(fj["config"]["cores"], 2);
  EXPECT_EQ(fj["config"]["runtime"]["allocator"], "first_fit");
  EXPECT_EQ(fj["config"]["runtime"]["collective_algorithm"], "ring");
  EXPECT_EQ(fj["config"]["runtime"]["pin_threads"], "off");
  EXPECT_EQ(fj["config"]["runtime"]["collective_timeout_ms"], 120000);  // set: never scaled
  // --cores replaces num_cores.
  const CliRun f4 = run_cli("train fsdp --steps 1 --batch 8 --cores 4 --json --config " + cfg);
  ASSERT_EQ(f4.exit_code, 0) << f4.output;
  EXPECT_EQ(nlohmann::json::parse(f4.output)["config"]["cores"], 4);

  // Without a timeout key the default is 30 s x max(1, cores / CPUs).
  const std::string text = temp_file("vtpu_cfg_text.txt", std::string(200, 'a') + "bcd\n");
  const std::string two =
      temp_file("vtpu_cfg_two.json", R"({"num_cores": 2, "allocator": "tlsf"})");
  const CliRun t = run_cli("train transformer --steps 1 --batch 2 --json --no-reference --data " +
                           text + " --config " + two);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const nlohmann::json tj = nlohmann::json::parse(t.output);
  EXPECT_EQ(tj["mesh"]["mesh"]["data"], 1);  // num_cores 2 alone: --mesh 1x2, as --cores 2
  EXPECT_EQ(tj["mesh"]["mesh"]["tensor"], 2);
  EXPECT_EQ(tj["config"]["runtime"]["allocator"], "tlsf");
  const int cpus = vtpu::usable_cpus();
  EXPECT_EQ(tj["config"]["runtime"]["collective_timeout_ms"], cpus >= 2 ? 30000 : 60000) << cpus;

  expect_failure(
      "train transformer --mesh 2x2 --steps 1 --batch 2 --data " + text + " --config " + two, 2,
      {"num_cores 2", two, "--mesh 2x2", "num_cores 4"});
  const std::string plan = fsdp_mlp_plan("vtpu_cfg_plan.json", 4);
  for (const char* trainer : {"fsdp", "mlp"}) {
    expect_failure(
        std::string("train ") + trainer + " --steps 1 --plan " + plan + " --config " + two, 2,
        {"num_cores 2", two, plan, "x=4"});
  }
  const std::string events = temp_file("vtpu_cfg_events.json", R"({"record_memory_events": true})");
  expect_failure("train fsdp --steps 1 --config " + events, 2,
                 {"record_memory_events", events, "train fsdp"});
  expect_failure("train fsdp --config /nonexistent.json", 1, {"/nonexistent.json"});
}

// `vtpu bench kernel matmul` runs 1, 2 and 3 buffers with edge blocks, checks each result against
// Eigen (exit 0 only when they agree), and reports the simulated time on the chosen profile.
TEST(VtpuCliTest, BenchKernelMatmulJson) {
  const CliRun r = run_cli(
      "bench kernel matmul --m 100 --n 130 --k 300 --bm 32 --bn 128 --bk 128 --repeats 1 "
      "--hardware v4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("hardware"), "v4");
  EXPECT_EQ(j.at("grid_steps"), 4 * 2 * 3);  // ceil(100/32) x ceil(130/128) x ceil(300/128)
  ASSERT_EQ(j.at("rows").size(), 3u);
  for (const auto& row : j.at("rows")) {
    EXPECT_LT(row.at("max_abs_error").get<double>(), 1e-3);
    // Every element of A is fetched once per column block of C, B once per row block, C written
    // once: 4 bytes x (100*300*2 + 300*130*4 + 100*130).
    EXPECT_EQ(row.at("bytes_copied"), 4 * (100 * 300 * 2 + 300 * 130 * 4 + 100 * 130));
    EXPECT_GT(row.at("simulated").at("total_seconds").get<double>(), 0.0);
  }
  expect_failure("bench kernel matmul --buffers 0", 2, {"--buffers", "0"});
  expect_failure("bench kernel matmul --bm 12 --m 64", 1, {"(12, 256)"});
  // A usage error, as in vtpu plan and vtpu reshard.
  expect_failure("bench kernel matmul --hardware v9", 2, {"--hardware", "'v9'"});
}

// Regressions of `vtpu bench kernel matmul`: every bad value gets
// a short message naming the flag and the value (CLI11's Range once printed a 300-digit bound;
// values beyond int64 were silently saturated; oversized blocks were clamped), an unknown kernel
// lists the known ones, and a run too large for the machine is refused with its estimate.
TEST(VtpuCliTest, BenchKernelMatmulRejectsBadValuesClearly) {
  // Short: the flag and the value, not a bound of hundreds of digits.
  const SplitRun zero = run_cli_split("bench kernel matmul --bm 0");
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  EXPECT_NE(zero.err.find("--bm 0"), std::string::npos) << zero.err;
  EXPECT_LT(zero.err.size(), 200u) << zero.err;
  expect_failures({
      {"bench kernel matmul --m 1.5", 2, {"--m 1.5", "65536"}},
      {"bench kernel matmul --buffers \"\"", 2, {"--buffers ''", "1..8"}},
      {"bench kernel matmul --buffers 1,,2", 2, {"--buffers ''"}},
      {"bench kernel matmul --bm 99999999999999999999999", 2, {"--bm 99999999999999999999999"}},
      {"bench kernel matmul --bm 9999999999 --repeats 1",
       1,
       {"input 'a'", "(2048, 2048)", "9999999999"}},
      {"bench kernel softmax", 2, {"'softmax'", "matmul"}},
      {"bench kernel", 2, {"matmul"}},
      {"bench kernel matmul --bogus", 2, {"'--bogus'"}},
  });
  // Regression: CLI11's NonNegativeNumber printed DBL_MAX in 309 digits.
  const SplitRun inf = run_cli_split("bench kernel matmul --dma-bytes-per-second inf");
  EXPECT_EQ(inf.exit_code, 2) << inf.err;
  EXPECT_NE(inf.err.find("--dma-bytes-per-second"), std::string::npos) << inf.err;
  EXPECT_NE(inf.err.find("inf"), std::string::npos) << inf.err;
  EXPECT_LT(inf.err.size(), 300u) << inf.err;
  // 2 * 65536 * 128 * 65536 FLOP x 4 runs x 11 rounds, and 32 GiB of A, B and C.
  expect_failure("bench kernel matmul --m 65536 --k 65536", 1, {"estimated", "--force"});
  expect_failure("bench kernel matmul --m 65536 --k 65536", 1, {"--force"});
}

// Regression: --copy-bytes 0/1/1T gave a misleading profile error, a
// nonsense bandwidth, or bad_alloc, and --out was checked only after the measurement.
TEST(VtpuCliTest, BenchHardwareChecksCopyBytesAndOutFirst) {
  expect_failure("bench hardware --gemm-n 64 --copy-bytes 0", 2, {"--copy-bytes 0", "1M..4G"});
  expect_failure("bench hardware --gemm-n 64 --copy-bytes 1T", 2, {"--copy-bytes 1T", "1M..4G"});
  expect_failure("bench hardware --gemm-n 64 --out /nonexistent/dir/x.json", 2,
                 {"--out", "'/nonexistent/dir/x.json'", "'/nonexistent/dir'"});
}

// Regression: a profile file without an f32 peak was reported by its JSON "name"; the
// message now names the file.
TEST(VtpuCliTest, BenchKernelProfileWithoutF32NamesTheFile) {
  std::ifstream in(std::string(VTPU_SOURCE_DIR) + "/profiles/tpu_v5e.json");
  ASSERT_TRUE(in.good());
  nlohmann::json j = nlohmann::json::parse(in);
  j["peak_flops_per_second"] = {{"bf16", 1e14}};
  j["sources"].erase("peak_flops_per_second.f32");
  const std::string path = temp_file("vtpu_cli_no_f32_profile.json", j.dump());
  expect_failure(
      "bench kernel matmul --m 64 --n 128 --k 128 --bm 64 --bn 128 --bk 128 "
      "--repeats 1 --hardware " +
          path,
      1, {"'" + path + "'"});
}

// Regression: with the DMA engine throttled to 1000 B/s the run hung for minutes
// (an uninterruptible throttle sleep, then an unbounded drain). Without --force it is now
// refused with its estimate; with --force every wait gives up at --dma-timeout-ms, naming the
// copy, and the program exits at once (run_cli's 60 s `timeout` would give exit code 124).
TEST(VtpuCliTest, BenchKernelThrottledDmaTimesOutInsteadOfHanging) {
  const std::string repro =
      "bench kernel matmul --repeats 1 --buffers 1 --m 8 --n 128 --k 128 --bm 8 --bn 128 "
      "--bk 128 --dma-bytes-per-second 1000";
  expect_failure(repro, 1, {"estimated", "--force"});
  // The error names the copy (input 'a', block (0, 0), 4096 bytes) and the timeout.
  expect_failure(repro + " --force --dma-timeout-ms 500", 1,
                 {"'a'", "(0, 0)", "4096 bytes", "500 ms"});
}

// The whitespace-separated fields of each line of `text`.
std::vector<std::vector<std::string>> fields_of(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    rows.emplace_back(std::istream_iterator<std::string>(words),
                      std::istream_iterator<std::string>());
  }
  return rows;
}

// The run's settings come back in its JSON, and its table has one row per live count and path, in
// that order, each with its samples and no OOM.
TEST(VtpuCliTest, BenchMemoryTable) {
  const std::string args =
      "bench memory --allocators bfc --live 100,300 --pairs 2000 --workload uniform "
      "--capacity 64MiB --seed 3";
  const nlohmann::json j = json_of(args + " --json");
  EXPECT_EQ(j["config"]["workload"], "uniform");
  EXPECT_EQ(j["config"]["pairs"], 2000);
  EXPECT_EQ(j["config"]["capacity_bytes"], 64 << 20);
  EXPECT_EQ(j["config"]["seed"], 3);
  const std::vector<std::pair<std::string, int>> order = {
      {"policy", 100}, {"arena", 100}, {"policy", 300}, {"arena", 300}};
  ASSERT_EQ(j["results"].size(), order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(j["results"][i]["via"], order[i].first) << i;
    EXPECT_EQ(j["results"][i]["live_buffers"], order[i].second) << i;
    EXPECT_EQ(j["results"][i]["latency"]["samples"], 2000) << i;
  }
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::pair<std::string, int>> rows;  // (via, live) of the rows of bfc
  for (const auto& f : fields_of(r.output)) {
    if (f.size() >= 4 && f[0] == "bfc") {
      rows.emplace_back(f[1], std::stoi(f[2]));
      EXPECT_EQ(f[3], "2000");   // samples
      EXPECT_EQ(f.back(), "0");  // ooms
    }
  }
  EXPECT_EQ(rows, order) << r.output;
}

TEST(VtpuCliTest, BenchMemoryJsonCoversEveryKnownPolicy) {
  const CliRun r =
      run_cli("bench memory --live 50 --pairs 1000 --workload bimodal --via policy --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["config"]["workload"], "bimodal");
  EXPECT_EQ(j["config"]["latency_unit"], "free+alloc pair");
  EXPECT_EQ(j["config"]["capacity_bytes"], 16ull << 30);
  ASSERT_GE(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["policy"], "bfc");
  for (const auto& result : j["results"]) {
    EXPECT_EQ(result["via"], "policy");
    EXPECT_EQ(result["live_buffers"], 50);
    EXPECT_EQ(result["latency"]["samples"], 1000);
    EXPECT_EQ(result["timed_ops"], 2000);
    EXPECT_EQ(result["num_ooms"], 0);
    EXPECT_GT(result["ops_per_second"].get<double>(), 0.0);
  }
}

// A hand-written trace: three buffers live at once at the peak (1000 B, 300 B and 5000 B, which
// bfc rounds to 1024 + 512 + 5120 = 6656 B), then everything freed.
TEST(VtpuCliTest, BenchMemoryReplaysAHandWrittenTrace) {
  const std::string trace = test_temp_path("vtpu_cli_bench_trace.jsonl");
  {
    std::ofstream out(trace);
    out << R"({"format": "vtpu-trace", "version": 1})"
        << "\n"
        << R"({"t_us": 0, "op": "alloc", "id": 1, "bytes": 1000})"
        << "\n"
        << R"({"t_us": 1, "op": "alloc", "id": 2, "bytes": 300})"
        << "\n"
        << R"({"t_us": 2, "op": "alloc", "id": 3, "bytes": 5000})"
        << "\n"
        << R"({"t_us": 3, "op": "free", "id": 2})"
        << "\n"
        << R"({"t_us": 4, "op": "free", "id": 1})"
        << "\n"
        << R"({"t_us": 5, "op": "free", "id": 3})"
        << "\n";
  }
  const CliRun r = run_cli("bench memory --allocators bfc --trace " + trace + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["config"]["events"], 6);
  ASSERT_EQ(j["results"].size(), 2u);  // policy and arena
  for (const auto& result : j["results"]) {
    EXPECT_EQ(result["num_ooms"], 0);
    EXPECT_EQ(result["peak_bytes_in_use"], 6656) << result;
  }
  std::filesystem::remove(trace);
}

TEST(VtpuCliTest, BenchMemoryReplaysATrace) {
  const std::string trace = std::string(VTPU_TRACE_DIR) + "/pytorch_mlp_train.jsonl";
  if (!std::filesystem::exists(trace)) GTEST_SKIP() << trace << " is absent (a bare clone)";
  const CliRun r = run_cli("bench memory --allocators bfc --trace " + trace + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["config"]["latency_unit"], "op");
  EXPECT_EQ(j["config"]["trace_header"]["format"], "vtpu-trace");
  ASSERT_EQ(j["results"].size(), 2u);  // policy and arena
  // The peak of live bytes, summed from the trace itself: an allocator holds at least that.
  uint64_t live = 0, peak_live = 0;
  std::map<int64_t, uint64_t> bytes_of;
  std::ifstream in(trace);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    const nlohmann::json e = nlohmann::json::parse(line);
    if (e["op"] == "alloc") {
      bytes_of[e["id"].get<int64_t>()] = e["bytes"].get<uint64_t>();
      live += e["bytes"].get<uint64_t>();
      peak_live = std::max(peak_live, live);
    } else if (e["op"] == "free") {
      live -= bytes_of[e["id"].get<int64_t>()];
    }
  }
  ASSERT_GT(peak_live, 0u);
  for (const auto& result : j["results"]) {
    EXPECT_EQ(result["latency"]["samples"], j["config"]["events"]);
    EXPECT_EQ(result["num_ooms"], 0);
    EXPECT_GE(result["peak_bytes_in_use"].get<uint64_t>(), peak_live);
  }
  // The table: one row of bfc through the arena over the trace, every event a sample.
  const CliRun text = run_cli("bench memory --allocators bfc --via arena --trace " + trace);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  int rows = 0;
  for (const auto& f : fields_of(text.output)) {
    if (f.size() >= 4 && f[0] == "bfc") {
      ++rows;
      EXPECT_EQ(f[1], "arena");
      EXPECT_EQ(f[3], std::to_string(j["config"]["events"].get<int64_t>()));
    }
  }
  EXPECT_EQ(rows, 1) << text.output;
}

TEST(VtpuCliTest, BenchMemoryRejectsBadInput) {
  expect_failures({
      {"bench memory --allocators bfc,nope", 2, {"--allocators", "'nope'"}},
      {"bench memory --live 0", 2, {"--live", "0"}},
      {"bench memory --live 10,abc", 2, {"--live", "abc"}},
      {"bench memory --pairs 0", 2, {"--pairs", "0"}},
      {"bench memory --workload gaussian", 2, {"--workload", "gaussian"}},
      {"bench memory --capacity lots", 2, {"--capacity", "'lots'"}},
      {"bench memory --capacity 100", 2, {"--capacity", "100", "256"}},
      {"bench memory --via gpu", 2, {"--via", "gpu"}},
      {"bench memory --trace x.jsonl --live 5", 2, {"--trace", "--live"}},
      {"bench memory --live 100000000 --pairs 60000000", 2, {"--live", "--pairs"}},
      {"bench nope", 2, {"nope"}},
      // A trace that cannot be read is an error found while running, like a bad --data file.
      {"bench memory --trace /nonexistent.jsonl", 1, {"/nonexistent.jsonl"}},
  });
  const std::string bad = temp_file("vtpu_bad_trace.jsonl",
                                    "{\"format\": \"vtpu-trace\", \"version\": 1}\n"
                                    "{\"t_us\": 0, \"op\": \"free\", \"id\": 4}\n");
  expect_failure("bench memory --trace " + bad, 1, {"vtpu_bad_trace.jsonl:2", "id 4"});
}

// Regression: `--allocators bfc,bfc` ran bfc twice (four rows) where vtpu stress refuses
// a policy given twice; every list of bench memory now names a thing once.
TEST(VtpuCliTest, BenchMemoryRejectsAnEntryGivenTwice) {
  expect_failures({
      {"bench memory --pairs 100 --live 10 --allocators bfc,bfc", 2, {"--allocators", "'bfc'"}},
      {"bench memory --pairs 100 --live 10 --allocators bfc,tlsf,bfc",
       2,
       {"--allocators", "'bfc'"}},
      {"bench memory --pairs 100 --live 10 --allocators bfc --via arena,arena",
       2,
       {"--via", "'arena'"}},
      {"bench memory --pairs 100 --live 10,20,10 --allocators bfc", 2, {"--live", "10"}},
  });
  const CliRun r = run_cli("bench memory --pairs 100 --live 10 --allocators bfc,tlsf --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["results"].size(), 4u);  // 2 policies x policy, arena
}

}  // namespace

namespace {

// Runs `vtpu bench collectives ARGS --json` and returns the parsed output (exit 0 expected).
nlohmann::json bench_collectives_json(const std::string& args) {
  const CliRun r = run_cli("bench collectives " + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

TEST(VtpuCliTest, ReshardExplainPrintsThePlanWithoutRunning) {
  const CliRun r = run_cli(
      "reshard --mesh 2x2x2 --axes x,y,z --shape 8,8 --from \"P('z',('x','y'))\" --to "
      "\"P(None,('x','y'))\" --explain --alpha 1e-5 --beta 1e-9");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // One all-gather over z on dimension 0 of the (4, 2) blocks: each core sends its 8 floats
  // (32 bytes) to its one peer; the estimate is 1e-5 + 1e-9 * (1/2) * 64 s = 10.0 us.
  EXPECT_NE(r.output.find("all_gather"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4x2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("32     10.0 us"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(4, 2) -> (8, 2)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("check against"), std::string::npos) << r.output;  // not run
}

// Regression: vtpu reshard had no --json. The plan's one all-gather over z, worked by hand
// as in the test above: z pairs devices (0,1), (2,3), (4,5), (6,7) (row-major ids, z minor-most);
// each core sends its (4, 2) block, 32 bytes; the estimate is 1e-5 + 1e-9 * (1/2) * 64 s.
TEST(VtpuCliTest, ReshardJsonExplainGivesEveryStepAndTheTotals) {
  const CliRun r = run_cli(
      "reshard --mesh 2x2x2 --axes x,y,z --shape 8,8 --from \"P('z',('x','y'))\" --to "
      "\"P(None,('x','y'))\" --explain --json --alpha 1e-5 --beta 1e-9");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);  // nothing but the JSON
  EXPECT_EQ(j["global_shape"], nlohmann::json({8, 8}));
  EXPECT_EQ(j["mesh"]["axes"], nlohmann::json({"x", "y", "z"}));
  EXPECT_EQ(j["mesh"]["shape"], nlohmann::json({2, 2, 2}));
  EXPECT_EQ(j["from"], "P('z', ('x', 'y'))");
  EXPECT_EQ(j["to"], "P(None, ('x', 'y'))");
  EXPECT_EQ(j["hardware"], "uniform");
  EXPECT_EQ(j["dtype"], "f32");
  // The cost model line's text without its "cost model: " label; the all-to-all
  // factor is --a2a-factor's default, 3.
  EXPECT_EQ(j["cost_model"], "alpha 1e-05 s, beta 1e-09 s/B (1 GB/s), all-to-all factor 3");
  ASSERT_EQ(j["steps"].size(), 1u) << r.output;
  const nlohmann::json& s = j["steps"][0];
  EXPECT_EQ(s["op"], "all_gather");
  EXPECT_TRUE(s["reduce_op"].is_null());
  EXPECT_EQ(s["collective"], true);
  EXPECT_EQ(s["axes"], nlohmann::json({"z"}));
  EXPECT_EQ(s["replica_groups"], nlohmann::json({{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(s["dim"], 0);
  EXPECT_TRUE(s["split_dim"].is_null());
  EXPECT_EQ(s["pairs"], nlohmann::json::array());
  EXPECT_EQ(s["buffer_shape"], nlohmann::json({4, 2}));
  EXPECT_EQ(s["buffer_bytes"], 32);
  EXPECT_EQ(s["spec_after"], "P(None, ('x', 'y'))");
  EXPECT_EQ(s["comm_bytes_per_core"], 32);
  EXPECT_NEAR(s["comm_seconds"].get<double>(), 1e-5 + 1e-9 * 0.5 * 64, 1e-15);
  EXPECT_EQ(j["comm_bytes_per_core"], 32);
  EXPECT_NEAR(j["comm_seconds"].get<double>(), 1e-5 + 1e-9 * 0.5 * 64, 1e-15);
  EXPECT_EQ(j["source_blocks"]["block"], nlohmann::json({4, 2}));
  EXPECT_EQ(j["target_blocks"]["block"], nlohmann::json({8, 2}));
  EXPECT_TRUE(j["source_blocks"]["uneven_blocks"].is_null());
  EXPECT_TRUE(j["run"].is_null());  // --explain: not run, not checked
  EXPECT_TRUE(j["check"].is_null());
}

// Regression: the run's check drew every addend from -8..8, also
// for prod, where a product of 16 of them reaches 2^48 and rounds in f32. A plan that folds in
// another order than the reference (partial index order) then "mismatched" (exit 1) though it
// was right: here one all-reduce over (y, z, w) and gather()'s fold over x, which is
// (a0 * ... * a7) * (a8 * ... * a15), against ((a0 * a1) * ...) * a15. Prod addends are now
// +-1, +-2, +-4, +-8, whose products are exact in any order.
TEST(VtpuCliTest, ReshardCheckOfAProductOfSixteenAddendsIsExact) {
  const std::string from =
      "--mesh 2x2x2x2 --shape 4096 --from \"P(unreduced={'x','y','z','w'}, "
      "reduce_op='prod')\" --warmup 0 --iters 1 --json ";
  for (const std::string seed : {"1", "2"}) {
    const CliRun r = run_cli("reshard " + from + "--to \"P(unreduced={'x'}, reduce_op='prod')\" " +
                             "--alpha 5e-5 --beta 5e-9 --seed " + seed);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    ASSERT_EQ(j["steps"].size(), 1u) << r.output;
    EXPECT_EQ(j["steps"][0]["op"], "all_reduce");
    EXPECT_EQ(j["steps"][0]["axes"], nlohmann::json({"y", "z", "w"}));
    EXPECT_EQ(j["check"]["result"], "ok") << r.output;
    // On the shipped profile: one all-reduce per axis.
    const CliRun p = run_cli("reshard " + from + "--to \"P()\" --seed " + seed);
    ASSERT_EQ(p.exit_code, 0) << p.output;
    EXPECT_EQ(nlohmann::json::parse(p.output)["check"]["result"], "ok") << p.output;
  }
}

// A run with --json: a partial sum over x reduce-scattered on dimension 0 (each of the 2 cores
// sends half of its (4, 4) addend, 32 bytes; under the uniform model the one step), run and
// checked.
TEST(VtpuCliTest, ReshardJsonRunGivesTheTimesAndTheCheck) {
  const CliRun r = run_cli(
      "reshard --mesh 2 --shape 4,4 --from \"P(unreduced={'x'})\" --to \"P('x')\" --json "
      "--warmup 1 --iters 3 --alpha 5e-5 --beta 5e-9");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["steps"].size(), 1u) << r.output;
  EXPECT_EQ(j["steps"][0]["op"], "reduce_scatter");
  EXPECT_EQ(j["steps"][0]["reduce_op"], "sum");
  EXPECT_EQ(j["steps"][0]["replica_groups"], nlohmann::json({{0, 1}}));
  EXPECT_EQ(j["steps"][0]["comm_bytes_per_core"], 32);
  EXPECT_EQ(j["hardware"], "uniform");
  EXPECT_EQ(j["run"]["num_cores"], 2);
  EXPECT_EQ(j["run"]["warmup"], 1);
  EXPECT_EQ(j["run"]["iters"], 3);
  ASSERT_EQ(j["run"]["steps"].size(), 1u);
  // Each run step names its op, as the plan's step does.
  EXPECT_EQ(j["run"]["steps"][0]["op"], "reduce_scatter");
  const double median = j["run"]["median_wall_seconds"];
  EXPECT_GT(median, 0.0);
  EXPECT_LE(j["run"]["min_wall_seconds"].get<double>(), median);
  EXPECT_GE(j["run"]["max_wall_seconds"].get<double>(), median);
  EXPECT_EQ(j["check"]["reference"], "gather-then-slice");
  EXPECT_EQ(j["check"]["result"], "ok");
  EXPECT_EQ(j["check"]["mismatched_elements"], 0);
  // A local step: no collective, no groups, nothing sent, no time.
  const CliRun l =
      run_cli("reshard --mesh 2 --shape 4 --from \"P()\" --to \"P('x')\" --explain --json");
  ASSERT_EQ(l.exit_code, 0) << l.output;
  const nlohmann::json slice = nlohmann::json::parse(l.output)["steps"][0];
  EXPECT_EQ(slice["op"], "dynamic_slice");
  EXPECT_EQ(slice["collective"], false);
  EXPECT_EQ(slice["replica_groups"], nlohmann::json::array());
  EXPECT_EQ(slice["comm_bytes_per_core"], 0);
  EXPECT_EQ(slice["comm_seconds"], 0.0);
}

// 5 rows over 4 cores are ceil(5/4) = 2 rows per shard, so cores 0..3 hold 2, 2, 1 and 0 rows;
// every core's block is listed, the even target not.
TEST(VtpuCliTest, ReshardListsUnevenBlocksPerCore) {
  const nlohmann::json j =
      json_of("reshard --mesh 4 --shape 5,10 --from \"P('x')\" --to \"P()\" --explain --json");
  EXPECT_EQ(j["source_blocks"]["uneven_blocks"],
            nlohmann::json({{2, 10}, {2, 10}, {1, 10}, {0, 10}}));
  EXPECT_TRUE(j["target_blocks"]["uneven_blocks"].is_null());
  // 20 rows over 17 cores of a 1-D mesh: 2 per shard for 10 cores, then 0.
  const std::string big = "reshard --mesh 17 --shape 20 --from \"P()\" --to \"P('x')\" --explain";
  nlohmann::json expected = nlohmann::json::array();
  for (int core = 0; core < 17; ++core) expected.push_back({core < 10 ? 2 : 0});
  EXPECT_EQ(json_of(big + " --json")["target_blocks"]["uneven_blocks"], expected);
  // The text lists the first 16 cores and counts the rest.
  const CliRun text = run_cli(big);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* block : {"d0 (2,)", "d9 (2,)", "d10 (0,)", "d15 (0,)", "(1 more)"}) {
    EXPECT_NE(text.output.find(block), std::string::npos) << block << "\n" << text.output;
  }
  EXPECT_EQ(text.output.find("d16"), std::string::npos) << text.output;
}

TEST(VtpuCliTest, ReshardRunsAndChecksAgainstGatherThenSlice) {
  for (const std::string args :
       {"--mesh 4 --shape 5,10 --from \"P('x')\" --to \"P()\"",
        "--mesh 2x4 --shape 6,9 --from \"P(unreduced={'x','y'})\" --to \"P('y','x')\"",
        "--mesh 2x2x2 --shape 16,8 --from \"P('z',('x','y'))\" --to \"P(('x','y'),'z')\""}) {
    SCOPED_TRACE(args);
    const nlohmann::json j = json_of("reshard " + args + " --json");
    EXPECT_EQ(j["check"]["reference"], "gather-then-slice");
    EXPECT_EQ(j["check"]["result"], "ok");
    EXPECT_EQ(j["check"]["mismatched_elements"], 0);
  }
}

// Regression: a run timed one call after one warm-up, in the first-touch slow part (4-8 ms
// against ~45 us steady at 1 MiB). It times --iters runs after --warmup runs and reports their
// median.
TEST(VtpuCliTest, ReshardTimesTheMedianOfRepeatedRuns) {
  const std::string args = "reshard --mesh 2 --shape 4 --from \"P('x')\" --to \"P()\"";
  const nlohmann::json d = json_of(args + " --json");
  EXPECT_EQ(d["run"]["warmup"], 3);
  EXPECT_EQ(d["run"]["iters"], 10);
  EXPECT_EQ(d["run"]["num_cores"], 2);
  const double median = d["run"]["median_wall_seconds"];
  EXPECT_LE(d["run"]["min_wall_seconds"].get<double>(), median);
  EXPECT_GE(d["run"]["max_wall_seconds"].get<double>(), median);
  const nlohmann::json one = json_of(args + " --warmup 0 --iters 1 --json");
  EXPECT_EQ(one["run"]["warmup"], 0);
  EXPECT_EQ(one["run"]["iters"], 1);
  // One timed run: its median, minimum and maximum are that run.
  EXPECT_EQ(one["run"]["min_wall_seconds"], one["run"]["median_wall_seconds"]);
  EXPECT_EQ(one["run"]["max_wall_seconds"], one["run"]["median_wall_seconds"]);
  EXPECT_EQ(one["check"]["result"], "ok");
  expect_failures({{args + " --iters 0", 2, {"--iters", "0"}},
                   {args + " --warmup -1", 2, {"--warmup", "-1"}},
                   {args + " --iters 1001", 2, {"--iters", "1001"}}});
}

// The profile of round numbers under tests/data: the tests' expectations are worked from its
// figures, never from the shipped profiles/this_machine.json, which a recalibration changes.
std::string fixed_profile() {
  return std::string(VTPU_SOURCE_DIR) + "/tests/data/fixed_profile.json";
}

// A copy of the fixed profile with `edit` applied, written to a temporary file named `name`.
template <typename Edit>
std::string fixed_profile_variant(const std::string& name, Edit edit) {
  std::ifstream in(fixed_profile());
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  return temp_file(name, j.dump());
}

// The fixed profile's linear fit of `op` on `group` cores: {alpha seconds, beta seconds per byte}.
std::pair<double, double> fixed_fit(const nlohmann::json& profile, const std::string& op,
                                    int group) {
  for (const auto& fit : profile["collectives"][op]) {
    if (fit["group_size"] == group) return {fit["alpha_seconds"], fit["beta_seconds_per_byte"]};
  }
  ADD_FAILURE() << "no " << op << " fit on " << group << " cores";
  return {0.0, 0.0};
}

// The run keeps all of the mesh's cores busy, so reshard prices with for_cores(mesh size) as
// `vtpu plan` does. On the fixed profile (2 host CPUs, all-gather on 2 cores: alpha 2 us, beta
// 0.1 ns/B) the all-gather of 2 MiB blocks over a 2-core axis costs 2 us + 2097152 x 0.1 ns =
// 211.7152 us on a 2-core mesh, and s(8) / s(2) = (8 / 2) / 1 = 4 times that on a 2x4 mesh.
TEST(VtpuCliTest, ReshardPricesTheMeshsCoresRunningAtOnce) {
  const std::string hw = " --hardware " + fixed_profile();
  const nlohmann::json two = json_of(
      "reshard --explain --json --mesh 2 --shape 1048576 --from \"P('x')\" --to \"P()\"" + hw);
  const nlohmann::json eight = json_of(
      "reshard --explain --json --mesh 2x4 --shape 1048576,4 --from \"P('x','y')\" --to "
      "\"P(None,'y')\"" +
      hw);
  for (const nlohmann::json* j : {&two, &eight}) {
    ASSERT_EQ((*j)["steps"].size(), 1u) << j->dump();
    EXPECT_EQ((*j)["steps"][0]["op"], "all_gather");
    EXPECT_EQ((*j)["steps"][0]["axes"], nlohmann::json({"x"}));
    EXPECT_EQ((*j)["comm_bytes_per_core"], 2097152);
  }
  const double on2 = 2e-6 + 1e-10 * 2097152;
  EXPECT_NEAR(two["comm_seconds"].get<double>(), on2, 1e-12);
  EXPECT_NEAR(eight["comm_seconds"].get<double>(), 4 * on2, 1e-12);
}

// Which plan reshard picks depends on the array's size where the collectives' fits cross: here a
// profile whose 4-core all-to-all starts fast (alpha 1 us) but moves bytes slowly (10 ns/B), and
// whose all-gather starts slow (10 us) and moves bytes fast (0.1 ns/B). Transposing the sharding
// of an (N, N) f32 array over 4 cores sends 3/4 of each (N/4, N) block by all-to-all (0.75 N^2
// bytes per core), or gathers 3/4 of the array (3 N^2 bytes per core) and slices for free.
TEST(VtpuCliTest, ReshardPlanDependsOnTheSizeWhereTheFitsCross) {
  const std::string profile = fixed_profile_variant("crossing.json", [](nlohmann::json& j) {
    for (auto& fit : j["collectives"]["all_to_all"]) {
      if (fit["group_size"] == 4) fit["alpha_seconds"] = 1e-6, fit["beta_seconds_per_byte"] = 1e-8;
    }
    for (auto& fit : j["collectives"]["all_gather"]) {
      if (fit["group_size"] == 4) fit["alpha_seconds"] = 1e-5, fit["beta_seconds_per_byte"] = 1e-10;
    }
  });
  std::ifstream in(profile);
  const nlohmann::json p = nlohmann::json::parse(in);
  const auto [a2a_alpha, a2a_beta] = fixed_fit(p, "all_to_all", 4);
  const auto [ag_alpha, ag_beta] = fixed_fit(p, "all_gather", 4);
  // The sizes around the crossing, N^2 = 9e-6 / 7.2e-9 = 1250 (N about 35.4), and far from it.
  for (const int n : {8, 32, 36, 1024}) {
    SCOPED_TRACE(n);
    const double by_a2a = a2a_alpha + a2a_beta * 0.75 * n * n;
    const double by_gather = ag_alpha + ag_beta * 3.0 * n * n;
    const nlohmann::json j = json_of(
        "reshard --explain --json --mesh 4 --from \"P('x',None)\" --to \"P(None,'x')\" --shape " +
        std::to_string(n) + "," + std::to_string(n) + " --hardware " + profile);
    std::vector<std::string> ops;
    for (const auto& step : j["steps"]) ops.push_back(step["op"]);
    if (by_a2a < by_gather) {
      EXPECT_EQ(ops, std::vector<std::string>({"all_to_all"}));
    } else {
      EXPECT_EQ(ops, std::vector<std::string>({"all_gather", "dynamic_slice"}));
    }
    EXPECT_NEAR(j["comm_seconds"].get<double>(), std::min(by_a2a, by_gather), 1e-12);
  }
  // A TPU profile plans the table's collective at a small size.
  const nlohmann::json v5e = json_of(
      "reshard --explain --json --hardware v5e --mesh 4 --shape 8,8 --from \"P('x',None)\" --to "
      "\"P(None,'x')\"");
  EXPECT_EQ(v5e["steps"][0]["op"], "all_to_all");
}

TEST(VtpuCliTest, ReshardRejectsBadInput) {
  expect_failures({
      {"reshard --mesh 2x2 --shape 8 --from \"P('x','x')\" --to \"P()\"", 2, {"'x'"}},
      {"reshard --mesh 2x2 --shape 8 --from \"P('q')\" --to \"P()\"", 2, {"'q'"}},
      {"reshard --mesh 2x2 --shape 8 --from \"P('x'\" --to \"P()\"", 2, {"P('x'"}},
      {"reshard --mesh 2x2 --shape 8 --from \"P()\" --to \"P(('x',)\"", 2, {"P(('x',)"}},
      {"reshard --mesh 2x2 --shape 8 --from \"P('x','y')\" --to \"P()\"", 2, {"rank 1"}},
      {"reshard --mesh 2xz --shape 8 --from \"P()\" --to \"P()\"", 2, {"--mesh", "'2xz'"}},
      {"reshard --mesh 2x2 --shape 8 --from \"P()\"", 2, {"--to"}},
  });
}

// Regressions: a bad --shape printed CLI11's range 0..1.8e308 in 300 digits, and a run of a huge
// array allocated it on the host and on every core before anything failed.
TEST(VtpuCliTest, ReshardRejectsBadShapesAndRunsTooLargeToHold) {
  for (const char* shape : {"8,-1", "8,abc", "''", "1e3", "4611686018427387905"}) {
    SCOPED_TRACE(shape);
    const SplitRun r = run_cli_split(std::string("reshard --shape ") + shape +
                                     " --from \"P()\" --to \"P()\" --explain");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--shape"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("2^62"), std::string::npos) << r.err;  // the bound, not its 300 digits
    EXPECT_EQ(r.err.find("17976931348623157"), std::string::npos) << r.err;
  }
  // Regression: an empty entry changed the rank silently ("8,,3" planned f32(8, 3)). The empty
  // one is named by its 0-based index, as --axes does; leading zeros are decimal.
  for (const auto& [shape, index] :
       std::vector<std::pair<std::string, int>>{{"8,,3", 1}, {"8,,", 1}, {",8", 0}, {"8,3,", 2}}) {
    SCOPED_TRACE(shape);
    expect_failure(
        "reshard --mesh 2x2x2 --shape " + shape + " --from \"P()\" --to \"P('x')\" --explain", 2,
        {"--shape", "'" + shape + "'", "dimension " + std::to_string(index)});
  }
  const CliRun leading =
      run_cli("reshard --mesh 2 --shape 08,004 --from \"P()\" --to \"P('x')\" --explain --json");
  ASSERT_EQ(leading.exit_code, 0) << leading.output;
  EXPECT_EQ(nlohmann::json::parse(leading.output)["global_shape"], nlohmann::json::array({8, 4}))
      << leading.output;
  expect_failure("reshard --mesh 2 --shape 08x --from \"P()\" --to \"P('x')\" --explain", 2,
                 {"--shape", "'08x'"});
  // 2^28 elements on 2 cores: the host value and addend (2 x 1 GiB) and the blocks exceed the
  // 1 GiB a run may hold. --explain of the same array plans it.
  const std::string big = "reshard --mesh 2 --shape 16384,16384 --from \"P('x')\" --to \"P()\"";
  expect_failure(big, 1, {"--explain", "16384"});
  EXPECT_EQ(json_of(big + " --explain --json")["steps"][0]["op"], "all_gather");
  // The mesh's device count is bounded (the product, not only each size); a usage error (exit 2)
  // like a malformed --mesh. The exact count is named, not the first product past the bound.
  expect_failures({
      {"reshard --mesh 4096x4096 --shape 4 --from \"P()\" --to \"P('x')\" --explain",
       2,
       {"--mesh 4096x4096", "16777216", "65536"}},
      {"reshard --mesh 4096x4096x4096x4096x4096x4096 --shape 4 --from \"P()\" --to "
       "\"P()\" --explain",
       2,
       {"--mesh", "2^62", "65536"}},
      {"reshard --mesh 2048 --shape 4 --from \"P()\" --to \"P()\"",
       2,
       {"--mesh 2048", "2048", "1024"}},
      {"reshard --mesh 4096x32 --shape 8 --from \"P()\" --to \"P()\"",
       2,
       {"--mesh 4096x32", "131072", "1024"}},
  });
  // The run's timing table names the reduction as the plan table does: both rows say
  // all_reduce(max).
  const std::string max =
      "reshard --mesh 2 --shape 4 --from \"P(unreduced={'x'}, reduce_op='max')\" --to \"P()\"";
  const nlohmann::json mj = json_of(max + " --json");
  EXPECT_EQ(mj["steps"][0]["op"], "all_reduce");
  EXPECT_EQ(mj["steps"][0]["reduce_op"], "max");
  EXPECT_EQ(mj["run"]["steps"][0]["op"], "all_reduce");
  const CliRun text = run_cli(max);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  const size_t first = text.output.find("all_reduce(max)");
  ASSERT_NE(first, std::string::npos) << text.output;
  EXPECT_NE(text.output.find("all_reduce(max)", first + 1), std::string::npos) << text.output;
  // Regression: a 0-element array was planned as an all_to_all estimated at 0 s (the alpha term
  // lost with the bytes); every block is empty, so nothing moves, planned or run.
  const std::string empty = "reshard --mesh 2x2 --shape 0,8 --from \"P('x')\" --to \"P(None,'x')\"";
  for (const std::string& args : {empty + " --explain --json", empty + " --json"}) {
    SCOPED_TRACE(args);
    const nlohmann::json e = json_of(args);
    EXPECT_EQ(e["steps"], nlohmann::json::array());
    EXPECT_EQ(e["comm_seconds"], 0.0);
  }
  EXPECT_EQ(json_of(empty + " --json")["check"]["result"], "ok");
  // 2^62 elements: the error names the array's own shape, not a shard's (a usage error, as every
  // shape the flags give that cannot be planned).
  expect_failure(
      "reshard --mesh 2 --shape 4611686018427387904 --from \"P('x')\" --to \"P()\" "
      "--explain",
      2, {"(4611686018427387904,)", "2^60"});
  // Regression: 2^60 elements over 7 cores pad to 2^60 + 6 in the reduce-scatter's buffer; the
  // error named only that padded shape.
  expect_failure(
      "reshard --mesh 7 --shape 1152921504606846976 --from \"P(unreduced={'x'})\" --to "
      "\"P('x')\" --explain",
      2, {"(1152921504606846976,)", "(1152921504606846982,)", "2^60"});
}

}  // namespace

TEST(VtpuCliTest, BenchCollectivesJsonRows) {
  // 3 cores (not a power of two) and 4 KiB slots, so the larger sizes take several ring loops.
  const nlohmann::json j = bench_collectives_json(
      "--cores 3 --op all_reduce --min-bytes 8 --max-bytes 64K --iters 3 --warmup 1 "
      "--link-slot-bytes 4K");
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["config"]["cores"], 3);
  EXPECT_EQ(j["config"]["time_statistic"], "median over timed calls of the slowest core's time");
  EXPECT_GT(j["memcpy"]["GBps"].get<double>(), 0.0);
  const nlohmann::json& rows = j["rows"];
  ASSERT_EQ(rows.size(), 14u);  // 8 B, 16 B, ..., 64 KiB
  uint64_t bytes = 8;
  for (const auto& row : rows) {
    for (const char* key :
         {"bytes", "count", "dtype", "op", "reduce", "algorithm", "time_us", "algbw_GBps",
          "busbw_GBps", "dram_bound_us", "time_over_dram_bound", "check"}) {
      EXPECT_TRUE(row.contains(key)) << key << " in " << row.dump();
    }
    EXPECT_EQ(row["bytes"], bytes);
    EXPECT_EQ(row["count"], bytes / 4);
    EXPECT_EQ(row["dtype"], "f32");
    EXPECT_EQ(row["op"], "all_reduce");
    EXPECT_EQ(row["reduce"], "sum");
    // auto, resolved per size: recursive doubling up to 8 KiB, the ring above.
    EXPECT_EQ(row["algorithm"], bytes <= 8192 ? "recursive_doubling" : "direct") << bytes;
    EXPECT_EQ(row["check"], "ok");
    EXPECT_EQ(row["wrong"], 0);
    const double algbw = row["algbw_GBps"], busbw = row["busbw_GBps"], t = row["time_us"];
    EXPECT_GT(t, 0.0);
    EXPECT_NEAR(algbw, static_cast<double>(bytes) / t * 1e-3, 1e-9 * algbw + 1e-12);
    EXPECT_NEAR(busbw, algbw * 2.0 * 2.0 / 3.0, 1e-9 * busbw + 1e-12);  // nccl-tests: 2(n-1)/n
    // Memory-traffic bound: every core reads its input and writes its output once (2*N*S bytes).
    EXPECT_EQ(row["traffic_bytes"].get<double>(), 2.0 * 3.0 * static_cast<double>(bytes));
    bytes *= 2;
  }
  // nccl-tests' "Avg bus bandwidth", the mean of the rows' busbw.
  double busbw_sum = 0;
  for (const auto& row : rows) busbw_sum += row["busbw_GBps"].get<double>();
  EXPECT_NEAR(j["avg_busbw_GBps"].get<double>(), busbw_sum / 14, 1e-12 * busbw_sum);
}

TEST(VtpuCliTest, BenchCollectivesOtherTypesAndReductions) {
  for (const char* args :
       {"--cores 4 --dtype s64 --reduce max", "--cores 4 --dtype f64 --reduce prod",
        "--cores 5 --dtype s32 --reduce min", "--cores 1"}) {
    const nlohmann::json j = bench_collectives_json(
        std::string(args) + " --min-bytes 8 --max-bytes 1K --iters 2 --warmup 0");
    EXPECT_EQ(j["ok"], true) << args;
    // The string, not the json: GCC 12 inlined json == "ok" (a json made from the literal, then
    // compared by type) into a false -Warray-bounds warning from <tuple>, reading the string as
    // the binary type's fields (byte_container_with_subtype::operator==).
    for (const auto& row : j["rows"]) {
      EXPECT_EQ(row["check"].get<std::string>(), "ok") << args << row.dump();
    }
  }
}

TEST(VtpuCliTest, BenchCollectivesEveryOp) {
  const struct {
    const char* op;
    const char* algorithm;
    double factor;
  } ops[] = {{"all_reduce", "ring", 1.5},        {"all_gather", "direct", 0.75},
             {"reduce_scatter", "direct", 0.75}, {"all_to_all", "pairwise", 0.75},
             {"broadcast", "chain", 1.0},        {"reduce", "direct", 1.0}};
  for (const auto& op : ops) {
    const nlohmann::json j = bench_collectives_json(
        std::string("--cores 4 --op ") + op.op + " --algorithm " + op.algorithm +
        " --min-bytes 8 --max-bytes 64K --iters 2 --warmup 0 --link-slot-bytes 4K");
    EXPECT_EQ(j["ok"], true) << op.op;
    EXPECT_EQ(j["config"]["algorithm"], op.algorithm);
    EXPECT_EQ(j["config"]["busbw_factor"], op.factor);
    ASSERT_FALSE(j["rows"].empty()) << op.op;
    for (const auto& row : j["rows"]) {
      EXPECT_EQ(row["op"], op.op);
      EXPECT_EQ(row["algorithm"], op.algorithm);
      EXPECT_EQ(row["check"], "ok") << row.dump();
    }
    EXPECT_EQ(j["rows"].back()["bytes"], 65536) << op.op;
  }
}

// bench collectives records the threads' pinning in its
// header and JSON (it changes a 2-core hand-off about 3.5x), and it and reshard take --config
// like the trainers: a bad key or value is refused naming it, a valid file applies.
TEST(VtpuCliTest, ReshardAndBenchCollectivesTakeAConfigFileAndBenchRecordsThePinning) {
  const std::string bad_key = temp_file("vtpu_cfg_badkey.json", R"({"pin_thread": "on"})");
  const std::string bad_value = temp_file("vtpu_cfg_badval.json", R"({"pin_threads": "often"})");
  const std::string reshard = "reshard --mesh 2 --shape 8 --from \"P('x')\" --to \"P()\"";
  for (const std::string& command :
       {std::string("bench collectives --cores 2 --max-bytes 8 --iters 1"), reshard}) {
    expect_failure(command + " --config " + bad_key, 1, {bad_key, "pin_thread"});
    expect_failure(command + " --config " + bad_value, 1, {bad_value, "pin_threads", "often"});
  }
  const std::string off =
      temp_file("vtpu_cfg_off.json", R"({"pin_threads": "off", "collective_timeout_ms": 60000})");
  const nlohmann::json j =
      bench_collectives_json("--cores 2 --min-bytes 8 --max-bytes 16 --iters 2 --config " + off);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["config"]["thread_pinning"],
            nlohmann::json::parse(R"({"mode": "off", "cores": 2, "pinned": false,
                                      "reason": "pin_threads off", "host_cpus": )" +
                                  std::to_string(vtpu::usable_cpus()) + "}"));
  EXPECT_EQ(j["config"]["thread_pinning_text"], "off (not pinned: pin_threads off)");
  EXPECT_EQ(j["config"]["runtime"]["collective_timeout_ms"], 60000);
  const CliRun table =
      run_cli("bench collectives --cores 2 --min-bytes 8 --max-bytes 8 --iters 1 --config " + off);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  // The table's header records the pinning as the JSON does.
  EXPECT_NE(table.output.find(j["config"]["thread_pinning_text"].get<std::string>()),
            std::string::npos)
      << table.output;
  const CliRun r = run_cli(reshard + " --json --config " + off);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json rj = nlohmann::json::parse(r.output);
  EXPECT_EQ(rj["check"]["result"], "ok");
  EXPECT_EQ(rj["run"]["thread_pinning"]["mode"], "off");
  // num_cores must match --mesh, as in the trainers.
  const std::string four = temp_file("vtpu_cfg_four.json", R"({"num_cores": 4})");
  expect_failure(reshard + " --config " + four, 2, {"num_cores 4", four, "--mesh 2"});
}

TEST(VtpuCliTest, BenchCollectivesTable) {
  const CliRun r =
      run_cli("bench collectives --cores 2 --min-bytes 1K --max-bytes 4K --iters 2 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // nccl-tests' closing lines: the average is the mean of the busbw column (the 9th field of the
  // rows of 1024, 2048 and 4096 bytes; printed to 3 decimals).
  double busbw_sum = 0;
  int rows = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
    if (f.size() == 12 && (f[0] == "1024" || f[0] == "2048" || f[0] == "4096")) {
      busbw_sum += std::stod(f[8]);
      ++rows;
    }
  }
  ASSERT_EQ(rows, 3) << r.output;
  // nccl-tests' closing lines, which its parsers read: no wrong value, and the average busbw.
  const auto f = fields_of(r.output);
  const auto line_with = [&f](const std::string& key) {
    for (const auto& words : f) {
      std::string joined;
      for (const auto& w : words) joined += w + " ";
      if (joined.starts_with(key)) return words;
    }
    return std::vector<std::string>{};
  };
  const std::vector<std::string> bounds = line_with("# Out of bounds values");
  ASSERT_FALSE(bounds.empty()) << r.output;
  EXPECT_EQ(bounds[bounds.size() - 2], "0") << r.output;
  const std::vector<std::string> avg = line_with("# Avg bus bandwidth");
  ASSERT_FALSE(avg.empty()) << r.output;
  EXPECT_NEAR(std::stod(avg.back()), busbw_sum / 3, 0.0006) << r.output;
  // Every row checked ok, with the algorithm auto chose for it.
  for (const auto& words : f) {
    if (words.size() == 12 && words[4] == "all_reduce") {
      EXPECT_EQ(words[5], "recursive_doubling") << words[0];
      EXPECT_EQ(words[11], "ok") << words[0];
    }
  }
}

// Sizes below one element are skipped, a --min-bytes of 1 included (nccl-tests
// takes any -b); f64 from 1 byte: 1, 2, 4 skipped (the header says so), rows 8 and 16.
TEST(VtpuCliTest, BenchCollectivesSkipsMinBytesBelowOneElement) {
  const nlohmann::json j = bench_collectives_json(
      "--cores 2 --dtype f64 --min-bytes 1 --max-bytes 16 --iters 1 --warmup 0");
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump();
  EXPECT_EQ(j["rows"][0]["bytes"], 8);
  EXPECT_EQ(j["rows"][1]["bytes"], 16);
}

TEST(VtpuCliTest, BenchCollectivesRejectsBadInput) {
  expect_failures({
      {"bench collectives --cores 0", 2, {"--cores", "0"}},
      {"bench collectives --op all_scatter", 2, {"--op", "all_scatter"}},
      {"bench collectives --min-bytes lots", 2, {"--min-bytes", "'lots'"}},
      {"bench collectives --max-bytes 2G", 2, {"--max-bytes", "2G", "1.00 GiB"}},
      {"bench collectives --dtype f16", 2, {"--dtype", "f16"}},
      {"bench collectives --reduce avg", 2, {"--reduce", "avg"}},
      {"bench collectives --iters 0", 2, {"--iters", "0"}},
      {"bench collectives --cores 1024 --max-bytes 1G",
       2,
       {"--max-bytes 1073741824", "1024 cores"}},
      // Regression: a --max-bytes below the default --min-bytes blamed a flag the user never typed.
      {"bench collectives --max-bytes 4", 2, {"--min-bytes 8", "--max-bytes 4"}},
      {"bench collectives --min-bytes 64K --max-bytes 8",
       2,
       {"--min-bytes 65536", "--max-bytes 8"}},
      {"bench collectives --max-bytes -8", 2, {"--max-bytes", "'-8'"}},
      {"bench collectives --op all_gather --algorithm torus_2d",
       2,
       {"--algorithm torus_2d", "all_gather"}},
      {"bench collectives --algorithm tree", 2, {"--algorithm tree", "all_reduce"}},
      {"bench collectives --min-bytes 1M --max-bytes 64K",
       2,
       {"--min-bytes 1048576", "--max-bytes 65536"}},
      {"bench collectives --op broadcast --algorithm ring",
       2,
       {"--algorithm ring", "broadcast", "chain"}},
      {"bench collectives --cores 4 --op all_to_all --max-bytes 8",
       2,
       {"--max-bytes 8", "all_to_all", "4 cores"}},
      {"bench collectives --link-slot-bytes 100", 2, {"--link-slot-bytes 100", "64"}},
      // an empty --calibrate path is a usage error, not an ordinary sweep.
      {"bench collectives --calibrate \"\" --cores 2", 2, {"--calibrate", "empty"}},
      // A list of core counts is for --calibrate (one fit per count); a sweep runs on one.
      {"bench collectives --cores 2,4", 2, {"--cores", "2,4"}},
  });
  const std::string out = temp_file("vtpu_cli_calibrate_cores.json", "");
  expect_failure("bench collectives --calibrate " + out + " --cores 2,4,2", 2,
                 {"--cores", "2 twice"});
  expect_failure("bench collectives --calibrate " + out + " --cores 1,8", 2, {"--cores", "got 1"});
  // Regression: the sweep's options were dropped without a word with --calibrate.
  // Refused before anything runs: the output file is not written.
  const std::string untouched = test_temp_path("vtpu_cli_calibrate_op.json");
  std::filesystem::remove(untouched);
  expect_failure("bench collectives --calibrate " + untouched + " --op all_gather --cores 2", 2,
                 {"--op", "--calibrate"});
  expect_failure("bench collectives --calibrate " + untouched + " --json --cores 2", 2,
                 {"--json", "--calibrate"});
  expect_failure("bench collectives --calibrate " + untouched + " --dtype f64 --cores 2", 2,
                 {"--dtype", "--calibrate"});
  EXPECT_FALSE(std::filesystem::exists(untouched));
}

// `bench collectives ARGS` fails with `exit_code`, naming `values` on stderr, before the sweep:
// nothing on stdout (no sweep header).
void expect_refused_before_the_sweep(const std::string& args, int exit_code,
                                     const std::vector<std::string>& values) {
  expect_failure("bench collectives " + args, exit_code, values);
  EXPECT_EQ(run_cli_split("bench collectives " + args).out, "") << args;
}

// Regression: --calibrate /dev/full passed the up-front check (opening it succeeds) and failed
// only after the whole sweep. The check writes zero bytes to it, and a path in a missing
// directory is refused before the sweep too: exit 1, as the other output-path errors.
TEST(VtpuCliTest, BenchCollectivesCalibrateChecksTheOutputBeforeTheSweep) {
  if (std::filesystem::exists("/dev/full")) {
    expect_refused_before_the_sweep("--calibrate /dev/full --cores 2", 1,
                                    {"--calibrate", "'/dev/full'"});
  }
  expect_refused_before_the_sweep(
      "--calibrate /nonexistent-dir/cal.json --cores 2", 2,
      {"--calibrate", "'/nonexistent-dir/cal.json'", "'/nonexistent-dir'"});
  // A writable file is still accepted by the check (a zero-byte write changes nothing): an
  // existing file keeps its content when a later usage error stops the command.
  const std::string kept = temp_file("vtpu_cli_calibrate_kept.json", "keep me");
  expect_failure("bench collectives --calibrate " + kept + " --cores 1,8", 2, {"--cores", "got 1"});
  std::ifstream in(kept);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep me");
}

// Regression: size-range errors of --calibrate surfaced after 9-23 s of measuring (exit 1). They
// are usage errors, before the sweep's header and before the file is written.
TEST(VtpuCliTest, BenchCollectivesCalibrateChecksTheSizeRangeBeforeMeasuring) {
  const std::string out = test_temp_path("vtpu_cli_calibrate_range.json");
  std::filesystem::remove(out);
  const std::string calibrate = "--calibrate " + out + " --cores 2 ";
  const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      // One size only: the fit needs two.
      {"--min-bytes 8 --max-bytes 8", {"--min-bytes 8", "--max-bytes 8", "all_gather", "1 size"}},
      {"--min-bytes 64M --max-bytes 8", {"--min-bytes 67108864", "--max-bytes 8"}},
      // No size gives a core one f32 element.
      {"--min-bytes 3 --max-bytes 3", {"--max-bytes 3", "all_gather", "f32"}}};
  for (const auto& [args, values] : table) {
    SCOPED_TRACE(args);
    expect_refused_before_the_sweep(calibrate + args, 2, values);
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

// ---- vtpu stress ---------------------------------------------------------------------------

// A trace on two cores: core 1 allocates and frees one buffer; core 0 leaves a 4 KiB hole
// between two buffers and asks for 8 KiB.
std::string stress_trace() {
  return temp_file("vtpu_cli_stress_trace.jsonl",
                   R"({"format": "vtpu-trace", "version": 1})"
                   "\n"
                   R"({"t_us": 0, "core": 1, "op": "alloc", "id": 1, "bytes": 1000})"
                   "\n"
                   R"({"t_us": 1, "core": 1, "op": "free", "id": 1})"
                   "\n"
                   R"({"t_us": 0, "core": 0, "op": "alloc", "id": 1, "bytes": 4096, "label": "a"})"
                   "\n"
                   R"({"t_us": 1, "core": 0, "op": "alloc", "id": 2, "bytes": 4096, "label": "b"})"
                   "\n"
                   R"({"t_us": 2, "core": 0, "op": "alloc", "id": 3, "bytes": 4096, "label": "c"})"
                   "\n"
                   R"({"t_us": 3, "core": 0, "op": "free", "id": 2})"
                   "\n"
                   R"({"t_us": 4, "core": 0, "op": "alloc", "id": 4, "bytes": 8192, "label": "d"})"
                   "\n");
}

TEST(VtpuCliTest, StressTableAndJson) {
  const std::string json = test_temp_path("vtpu_cli_stress.json");
  const CliRun r = run_cli(
      "stress --cores 2 --workload kv_cache --events 3000 --allocators bfc,tlsf --hbm-bytes 64M "
      "--seed 3 --collective-rounds 5 --json " +
      json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The table's columns, one row per allocator and defragment setting.
  for (const char* column :
       {"allocator", "resv/live", "frag_max", "f_oom", "t_oom", "min_capacity", "integrity"})
    EXPECT_NE(r.output.find(column), std::string::npos) << column << "\n" << r.output;
  int rows = 0;
  for (const auto& f : fields_of(r.output))
    rows += f.size() > 2 && (f[0] == "bfc" || f[0] == "tlsf") && (f[1] == "on" || f[1] == "off") &&
            f[2] != "";
  EXPECT_EQ(rows, 8) << r.output;  // 4 runs, in the table and in the latency table
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["format"], "vtpu-stress");
  EXPECT_EQ(j["workload"]["name"], "kv_cache");
  EXPECT_EQ(j["workload"]["seed"], 3);
  EXPECT_EQ(j["hbm_bytes"], 64 << 20);
  ASSERT_EQ(j["runs"].size(), 4u);  // bfc and tlsf, auto-defragment on and off
  EXPECT_NE(j["command"].get<std::string>().find("--workload kv_cache"), std::string::npos);
  std::set<uint64_t> events;
  for (const auto& run : j["runs"]) events.insert(run["summary"]["events"].get<uint64_t>());
  EXPECT_EQ(events.size(), 1u);  // the same event stream for every run
  // The load beside the workload: --collective-rounds 5 per core of 256 KiB buckets, none wrong.
  EXPECT_EQ(j["load"]["bucket_bytes"], 256 << 10);
  EXPECT_GT(j["load"]["all_reduces"].get<int>(), 0);
  EXPECT_EQ(j["load"]["all_reduce_failures"], 0);
  // The summary resv/live is the worst core's own ratio, not the quotient of the summary peaks.
  for (const auto& run : j["runs"]) {
    double worst = 0;
    for (const auto& core : run["per_core"])
      worst = std::max(
          worst, core["peak_reserved_bytes"].get<double>() / core["peak_live_bytes"].get<double>());
    EXPECT_NEAR(run["summary"]["reserved_over_live"].get<double>(), worst, 1e-12) << run;
  }
  std::filesystem::remove(json);
}

TEST(VtpuCliTest, StressReplaysATraceOnCoresModuloN) {
  const std::string trace = stress_trace();
  const std::string json = test_temp_path("vtpu_cli_stress_trace.json");
  // One core: both trace cores land on core 0, merged by t_us (the file holds trace core 1, then
  // trace core 0): x (1000 B -> 1 KiB) at [0, 1), a at [1, 5) KiB, x freed at t 1 before b, so b
  // and c go to [5, 9) and [9, 13) KiB. With b freed, 16 KiB holds 8 KiB free in three holes
  // (1 + 4 + 3 KiB), so auto-defragment off gives 1 false OOM for d (8 KiB).
  const CliRun r = run_cli("stress --cores 1 --trace " + trace +
                           " --allocators first_fit --hbm-bytes 16K --load off --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["workload"]["name"], "trace");
  EXPECT_EQ(j["workload"]["trace_path"], trace);
  EXPECT_TRUE(j["workload"]["seed"].is_null());
  ASSERT_EQ(j["runs"].size(), 2u);
  const auto& on = j["runs"][0];
  const auto& off = j["runs"][1];
  EXPECT_EQ(on["auto_defragment"], true);
  EXPECT_EQ(on["summary"]["events"], 7);
  EXPECT_EQ(on["summary"]["false_ooms"], 0);
  EXPECT_EQ(on["summary"]["defragmentations"], 1);
  EXPECT_EQ(off["summary"]["false_ooms"], 1);
  EXPECT_EQ(off["summary"]["true_ooms"], 0);
  // Smallest arena: 16 KiB with compaction (a, c, d = 16 KiB live), 24 KiB without (d needs
  // [13, 21) KiB; 20 KiB leaves 7 KiB above c).
  EXPECT_EQ(on["summary"]["min_capacity_bytes"], 16384);
  EXPECT_EQ(off["summary"]["min_capacity_bytes"], 24576);
  const auto& worst = off["per_core"][0]["worst"];
  // Largest free 4 KiB of 8 KiB free: the holes [0, 1), [5, 9) and [13, 16) KiB. The moment is
  // b's free (event 5), chosen by reserved fragmentation: 5 KiB of holes in the 13 KiB extent
  // x's free (event 2) left 1 of 5 KiB, and d's false OOM changes nothing.
  EXPECT_EQ(worst["event"], 5);
  EXPECT_DOUBLE_EQ(worst["fragmentation"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(worst["reserved_fragmentation"].get<double>(), 5.0 / 13);
  EXPECT_DOUBLE_EQ(off["summary"]["reserved_fragmentation_max"].get<double>(), 5.0 / 13);
  // Per event: 0, 0, 1/5, 1/9, 1/13, 5/13, then 5/13 (off) or 0 (on: d lands after compaction).
  const double holes = 0.2 + 1.0 / 9 + 1.0 / 13 + 5.0 / 13;
  EXPECT_NEAR(off["summary"]["reserved_fragmentation_mean"].get<double>(), (holes + 5.0 / 13) / 7,
              1e-12);
  EXPECT_NEAR(on["summary"]["reserved_fragmentation_mean"].get<double>(), holes / 7, 1e-12);
  EXPECT_NE(r.output.find("holes_max"), std::string::npos) << r.output;
  EXPECT_EQ(worst["blocks"][0]["state"], "free");  // x's KiB
  EXPECT_EQ(worst["blocks"][1]["label"], "a");
  std::filesystem::remove(json);
  std::filesystem::remove(trace);
}

TEST(VtpuCliTest, StressStopOnOomPrintsTheReport) {
  const std::string trace = stress_trace();
  const CliRun r = run_cli("stress --cores 2 --trace " + trace +
                           " --allocators first_fit --auto-defragment off --hbm-bytes 16K "
                           "--stop-on-oom");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--stop-on-oom"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("8192"), std::string::npos) << r.output;  // the failed request
  // Regression: the live buffers of the report had no labels. Core 0 holds a at offset 0 and c
  // at 8192 (b's hole at 4096 is too small for d): each label ends the line of its offset.
  std::map<std::string, std::string> offset_of;  // label -> the field before it
  for (const auto& f : fields_of(r.output)) {
    if (f.size() >= 2 && (f.back() == "a" || f.back() == "c"))
      offset_of[f.back()] = f[f.size() - 2];
  }
  EXPECT_EQ(offset_of["a"], "0") << r.output;
  EXPECT_EQ(offset_of["c"], "8192") << r.output;
  EXPECT_EQ(r.output.find("(unlabelled)"), std::string::npos) << r.output;
  std::filesystem::remove(trace);
}

// Regression: the generator options were silently ignored with --trace (only
// --workload was refused, by CLI11). Each is now a usage error that names it.
TEST(VtpuCliTest, StressRejectsGeneratorOptionsWithATrace) {
  const std::string trace = stress_trace();
  for (const char* flag : {"--workload lognormal", "--events 100", "--seed 7", "--layers 3",
                           "--activation-bytes 1M", "--weight-bytes 1M", "--live 10",
                           "--max-requests 4", "--kv-block-bytes 4K", "--max-blocks 16"}) {
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    expect_failure("stress --cores 1 --trace " + trace + " " + flag, 2, {name, "--trace"});
  }
  expect_failure("stress --cores 1 --events 100 --capacity-search off --capacity-search-max 1G", 2,
                 {"--capacity-search-max", "--capacity-search off"});
  std::filesystem::remove(trace);
}

// Regression: options for another workload, load options with --load off and cross-core
// frees on one core ran and were silently ignored; each is a usage error naming the option, the
// workloads (or mode) it applies to and the option that rules it out, as with --trace.
TEST(VtpuCliTest, StressRejectsOptionsTheRunDoesNotUse) {
  const std::string run = "stress --cores 2 --events 2000 --capacity-search off ";
  // Each error names the unused option and the setting that rules it out.
  expect_failures({
      {run + "--workload lognormal --layers 3", 2, {"--layers", "--workload lognormal"}},
      {run + "--workload kv_cache --activation-bytes 1M",
       2,
       {"--activation-bytes", "--workload kv_cache"}},
      {run + "--workload kv_cache --weight-bytes 1M", 2, {"--weight-bytes", "--workload kv_cache"}},
      {run + "--workload training_step --live 10", 2, {"--live", "--workload training_step"}},
      {run + "--live 10", 2, {"--live", "--workload training_step"}},  // the default workload
      {run + "--workload bimodal --max-requests 4", 2, {"--max-requests", "--workload bimodal"}},
      {run + "--workload uniform --kv-block-bytes 4K",
       2,
       {"--kv-block-bytes", "--workload uniform"}},
      {run + "--workload variable_batch --max-blocks 16",
       2,
       {"--max-blocks", "--workload variable_batch"}},
      {run + "--load off --collective-rounds 5", 2, {"--collective-rounds", "--load off"}},
      {run + "--load off --bucket-bytes 4K", 2, {"--bucket-bytes", "--load off"}},
      {run + "--load off --cross-core-frees 100", 2, {"--cross-core-frees", "--load off"}},
      {run + "--load off --cross-core-free-lag 5", 2, {"--cross-core-free-lag", "--load off"}},
  });
  expect_failure("stress --cores 1 --events 200 --cross-core-frees 100", 2,
                 {"--cross-core-frees", "--cores 1"});
  // The options a run does use are still accepted.
  for (const char* args : {"--workload lognormal --live 10", "--workload kv_cache --max-blocks 16",
                           "--layers 2 --activation-bytes 64K", "--collective-rounds 2"}) {
    const CliRun r = run_cli(
        "stress --cores 2 --events 300 --capacity-search off --allocators bfc "
        "--auto-defragment on " +
        std::string(args));
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  }
}

// Regression: two of train mlp's memory outputs on one path overwrote each
// other silently (exit 0); a usage error naming both options and the path, before the run.
TEST(VtpuCliTest, TrainMlpRejectsOneFileForTwoMemoryOutputs) {
  const std::filesystem::path& dir = test_temp_dir();
  const std::string same = (dir / "vtpu_cli_train_same.out").string();
  std::filesystem::remove(same);
  expect_failure("train mlp --steps 1 --memory-profile " + same + " --memory-snapshot " + same, 2,
                 {"--memory-profile", "--memory-snapshot", "'" + same + "'"});
  expect_failure("train mlp --steps 1 --memory-profile " + same + " --memory-events " + same, 2,
                 {"--memory-profile", "--memory-events", "'" + same + "'"});
  // The same file by another spelling.
  const std::string other = (dir / "." / "vtpu_cli_train_same.out").string();
  expect_failure("train mlp --steps 1 --memory-snapshot " + same + " --memory-events " + other, 2,
                 {"--memory-snapshot", "--memory-events", "'" + same + "'", "'" + other + "'"});
  EXPECT_FALSE(std::filesystem::exists(same));  // refused before the run
}

// Regression: --json F --html F wrote the JSON and then overwrote it with the page.
TEST(VtpuCliTest, StressRejectsOneFileForJsonAndHtml) {
  const std::filesystem::path& dir = test_temp_dir();
  const std::string same = (dir / "vtpu_cli_stress_same.out").string();
  std::filesystem::remove(same);
  expect_failure("stress --cores 1 --events 100 --json " + same + " --html " + same, 2,
                 {"--json", "--html", "'" + same + "'"});
  // The same file by another spelling.
  const std::string other = (dir / "." / "vtpu_cli_stress_same.out").string();
  expect_failure("stress --cores 1 --events 100 --json " + same + " --html " + other, 2,
                 {"--json", "--html"});
  EXPECT_FALSE(std::filesystem::exists(same));  // refused before the run
}

// Regression: --events did not bound training_step, which ran whole steps (with the
// default 12 layers, a step is 122 events after 24 of setup), so 1001 events became 1122.
TEST(VtpuCliTest, StressEventsIsExactForEveryWorkload) {
  const std::string json = test_temp_path("vtpu_cli_stress_events.json");
  for (const char* workload :
       {"uniform", "lognormal", "bimodal", "training_step", "variable_batch", "kv_cache"}) {
    const CliRun r = run_cli(std::string("stress --cores 2 --workload ") + workload +
                             " --events 1001 --load off --capacity-search off --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
    EXPECT_EQ(j["runs"][0]["summary"]["events"], 2002) << workload;
    for (const auto& core : j["runs"][0]["per_core"]) EXPECT_EQ(core["events"], 1001) << workload;
    EXPECT_NE(j["workload"]["description"].get<std::string>().find("1001"), std::string::npos)
        << j["workload"]["description"];
  }
  std::filesystem::remove(json);
}

// Regression: --events no larger than the workload's setup (the fill of --live buffers,
// the weights and optimizer state, the first prompts) ran no steady-state event at all while the
// header said "steady state"; it is a usage error naming the setup now, and one event more runs.
TEST(VtpuCliTest, StressRefusesEventsThatAreAllSetup) {
  const std::string run =
      "stress --cores 1 --load off --capacity-search off --allocators bfc "
      "--auto-defragment on ";
  expect_failures({
      {run + "--workload lognormal --events 1000",
       2,
       {"--events 1000", "--workload lognormal", "--live 1000"}},
      {run + "--workload uniform --live 50 --events 20", 2, {"--events 20", "--live 50"}},
      {run + "--workload training_step --layers 3 --events 6", 2, {"--events 6", "--layers 3"}},
      {run + "--workload kv_cache --max-requests 40 --events 40",
       2,
       {"--events 40", "--max-requests 40"}},
  });
  const std::string json = test_temp_path("vtpu_cli_stress_setup.json");
  const CliRun r = run_cli(run + "--workload lognormal --live 100 --events 301 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  // The header counts the events, the fill and the steady state: 301 = 100 + 201.
  for (const char* count : {"301", "100", "201"}) {
    EXPECT_NE(j["workload"]["description"].get<std::string>().find(count), std::string::npos)
        << count << " in " << j["workload"]["description"];
  }
  const auto& core = j["runs"][0]["per_core"][0];
  EXPECT_EQ(core["allocs"], 200);  // the fill, then 100 free/alloc pairs and one more free
  EXPECT_EQ(core["frees"], 101);
  std::filesystem::remove(json);
}

// Regression: a NUL byte ended a line for the JSON parser, and a line had no
// length cap; both are errors with the line number now.
TEST(VtpuCliTest, StressRejectsNulBytesAndOverlongTraceLines) {
  const std::string event = R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8})";
  const std::string nul = temp_file(
      "vtpu_cli_stress_nul.jsonl", std::string(R"({"format": "vtpu-trace", "version": 1})") + "\n" +
                                       event + std::string("\0garbage\n", 9));
  expect_failure("stress --cores 1 --trace " + nul, 1, {"jsonl:2", "NUL", "column 48"});
  const std::string long_line =
      temp_file("vtpu_cli_stress_long.jsonl", event + std::string(2 << 20, ' ') + "\n");
  expect_failure("stress --cores 1 --trace " + long_line, 1, {"jsonl:1", "1048576"});
  std::filesystem::remove(nul);
  std::filesystem::remove(long_line);
}

// Regression: a gzip'd trace failed with "NUL byte at column 9"; the error says what the
// file is, for bench memory as for stress (both read it with read_trace).
TEST(VtpuCliTest, AGzipTraceIsNamedAsSuch) {
  const std::string plain =
      temp_file("vtpu_cli_gz.jsonl",
                R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8})" + std::string("\n"));
  const std::string gz = plain + ".gz";
  ASSERT_EQ(std::system(("gzip -c " + plain + " > " + gz).c_str()), 0);
  expect_failure("stress --cores 1 --trace " + gz, 1, {"vtpu_cli_gz.jsonl.gz:1", "1f 8b"});
  expect_failure("bench memory --allocators bfc --trace " + gz, 1, {"gzip"});
  std::filesystem::remove(plain);
  std::filesystem::remove(gz);
}

// Regression: an empty trace, a header-only one and one holding only oom records exited 0 with a
// table of zeros (bench memory: rows of 0 samples); each is an error naming the file.
TEST(VtpuCliTest, StressAndBenchMemoryRejectATraceWithNothingToReplay) {
  const std::string header = R"({"format": "vtpu-trace", "version": 1})";
  for (const std::string command : {"stress --cores 1", "bench memory --allocators bfc"}) {
    for (const std::string& text :
         {std::string(), header + "\n",
          header + "\n" + R"({"t_us": 0, "op": "oom", "id": 1, "bytes": 8})" + "\n"}) {
      const std::string path = temp_file("vtpu_cli_empty.jsonl", text);
      expect_failure(command + " --trace " + path, 1, {"vtpu_cli_empty.jsonl'"});
      std::filesystem::remove(path);
    }
  }
}

// Regression: `bench memory --seed -3` ran seed 2^64 - 3 and a seed past 2^64 - 1 ran
// 2^64 - 1 (CLI11's uint64_t parsing); both are usage errors, as for `vtpu stress`.
TEST(VtpuCliTest, BenchSeedsAreCheckedLikeTheStressSeed) {
  for (const std::string cmd : {"bench memory --pairs 10 --live 10", "bench fragmentation"}) {
    expect_failures(
        {{cmd + " --seed -3", 2, {"--seed", "'-3'"}},
         {cmd + " --seed 99999999999999999999999", 2, {"--seed", "'99999999999999999999999'"}}});
  }
}

// Regression: `--seed -1` wrapped to 18446744073709551615 in the
// trainers and reshard; `train transformer --lr -1` printed a 309-digit DBL_MAX and `--lr nan`
// exited 1. All are usage errors (exit 2) that name the value, checked before anything runs.
TEST(VtpuCliTest, TrainerAndReshardSeedsAndTheTransformerLrAreChecked) {
  for (const std::string cmd : {"train mlp", "train fsdp", "train transformer",
                                "reshard --mesh 2 --shape 4 --from \"P('x')\" --to \"P()\""}) {
    expect_failures(
        {{cmd + " --seed -1", 2, {"--seed", "'-1'"}},
         {cmd + " --seed 99999999999999999999999", 2, {"--seed", "'99999999999999999999999'"}}});
  }
  for (const std::string lr : {"-1", "nan", "0", "inf"}) {
    const std::string args = "train transformer --cores 1 --steps 1 --lr " + lr;
    expect_failure(args, 2, {"--lr", lr});
    EXPECT_EQ(
        run_cli_split(args).err.find("1797693134862315708145274237317043567980705675258449965989"),
        std::string::npos)
        << lr;
  }
}

TEST(VtpuCliTest, StressWritesAnHtmlPageWithTheReportEmbedded) {
  const std::string html = test_temp_path("vtpu_cli_stress.html");
  std::filesystem::remove(html);
  const CliRun r = run_cli("stress --cores 2 --events 200 --allocators bfc,tlsf --html " + html);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u) << page.substr(0, 100);
  EXPECT_NE(page.find("id=\"vtpu-stress-data\""), std::string::npos);
  EXPECT_NE(page.find("\"allocator\":\"tlsf\""), std::string::npos);  // both runs embedded
  std::filesystem::remove(html);
}

TEST(VtpuCliTest, StressChecksOutputPathsBeforeTheRun) {
  expect_failure("stress --cores 1 --events 100 --html /nonexistent-dir/r.html", 2,
                 {"--html", "'/nonexistent-dir/r.html'", "'/nonexistent-dir'"});
  expect_failure("stress --cores 1 --events 100 --json /tmp", 2, {"--json", "'/tmp'"});
}

// Regression: the oom and defragment records a replay skips were counted only in the JSON
// (workload.skipped_events); the header line says so too.
TEST(VtpuCliTest, StressHeaderCountsSkippedTraceEvents) {
  const std::string header = R"({"format": "vtpu-trace", "version": 1})";
  const std::string path = temp_file(
      "vtpu_cli_stress_skipped.jsonl",
      header + "\n" + R"({"t_us": 0, "op": "alloc", "id": 1, "bytes": 8})" + "\n" +
          R"({"t_us": 1, "op": "oom", "id": 2, "bytes": 8})" + "\n" +
          R"({"t_us": 2, "op": "defragment", "bytes_moved": 0, "buffers_moved": 0, "duration_us": 1})" +
          "\n");
  const CliRun r = run_cli("stress --cores 1 --trace " + path +
                           " --load off --capacity-search off --auto-defragment on");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The header names the trace, its 3 events and the 2 it skips.
  for (const char* value : {"vtpu_cli_stress_skipped.jsonl", "3 events", "2 oom/defragment"}) {
    EXPECT_NE(r.output.find(value), std::string::npos) << value << "\n" << r.output;
  }
  std::filesystem::remove(path);
}

// Regression: a bad --auto-defragment or --seed named the option twice
// ("--auto-defragment: --auto-defragment 'on,on' ..."); it is named once.
TEST(VtpuCliTest, ValidatorErrorsNameTheOptionOnce) {
  const std::vector<BadInput> table = {
      {"stress --auto-defragment on,on", 2, {"--auto-defragment", "'on,on'", "'on' twice"}},
      {"stress --auto-defragment ON", 2, {"--auto-defragment", "'ON'", "on, growth, off, both"}},
      {"stress --seed -1", 2, {"--seed", "'-1'", "18446744073709551615"}},
      {"bench memory --pairs 10 --live 10 --seed x", 2, {"--seed", "'x'"}}};
  expect_failures(table);
  for (const BadInput& row : table) {
    const std::string err = run_cli_split(row.args).err;
    const std::string option = row.values[0];
    EXPECT_EQ(err.find(option), err.rfind(option)) << row.args << "\n" << err;  // named once
  }
}

TEST(VtpuCliTest, StressRejectsBadInput) {
  expect_failures({
      {"stress --allocators bfc,nope", 2, {"'nope'", "bfc, tlsf"}},
      {"stress --workload nope", 2, {"nope"}},
      {"stress --hbm-bytes 12Q", 2, {"12Q"}},
      // The option's name, not the field's (hbm_bytes).
      {"stress --cores 1 --events 100 --hbm-bytes 1K", 2, {"--hbm-bytes 1024", "4096"}},
      {"stress --cores 1 --events 100 --bucket-bytes 6", 2, {"--bucket-bytes 6", "4"}},
      {"stress --auto-defragment sometimes", 2, {"sometimes"}},
      {"stress --cores 0", 2, {"--cores", "0"}},
      {"stress --trace /nonexistent/t.jsonl", 2, {"/nonexistent/t.jsonl"}},
  });
  const std::string bad =
      temp_file("vtpu_cli_stress_bad.jsonl", "{\"t_us\": 0, \"op\": \"free\", \"id\": 5}\n");
  expect_failure("stress --trace " + bad, 1, {"jsonl:1", "id 5"});
  std::filesystem::remove(bad);
}

// Regression: a `planned` run whose heap plan exceeds --hbm-bytes could not start, yet
// vtpu stress exited 0; a CI job checking the exit code never learnt the comparison was missing.
// The table and the JSON are still written, and the other run's figures are there.
TEST(VtpuCliTest, StressExitsOneWhenARunCouldNotStart) {
  const std::string json = temp_file("vtpu_cli_stress_not_run.json", "");
  const CliRun r = run_cli(
      "stress --cores 1 --events 2000 --hbm-bytes 100M --allocators planned,bfc "
      "--auto-defragment on --load off --capacity-search off --json " +
      json);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(doc["runs"].size(), 2u);
  ASSERT_TRUE(doc["runs"][0].contains("error"));
  // The planned row of the table carries the run's error, with the plan's heap size.
  const std::string error = doc["runs"][0]["error"];
  EXPECT_NE(error.find("104857600"), std::string::npos) << error;  // the arena: --hbm-bytes 100M
  EXPECT_NE(r.output.find(error), std::string::npos) << r.output;
  EXPECT_FALSE(doc["runs"][1].contains("error"));
  EXPECT_EQ(doc["runs"][1]["summary"]["events"], 2000);
  std::filesystem::remove(json);
}

// Regression: an option given twice read "--cores: At Most 1 required but received 2"
// (CLI11's wording), and `bench collectives --json out.json` said only that out.json was not
// expected, to a user used to `vtpu stress --json FILE`.
TEST(VtpuCliTest, ParseErrorsArePlain) {
  expect_failure("stress --cores 2 --cores 3 --events 10", 2, {"--cores", "2 times"});
  expect_failure("bench collectives --cores 2 --iters 1 --iters 2 --iters 3", 2,
                 {"--iters", "3 times"});
  expect_failure("bench collectives --cores 2 --max-bytes 16 --json out.json", 2,
                 {"out.json", "--json"});
  // A stray word elsewhere is named, without the --json hint.
  expect_failure("bench collectives --cores 2 --max-bytes 16 stray", 2, {"stray"});
  EXPECT_EQ(run_cli_split("bench collectives --cores 2 --max-bytes 16 stray").err.find("--json"),
            std::string::npos);
}

TEST(VtpuCliTest, StressReplaysTheRealTraces) {
  const std::string trace = std::string(VTPU_TRACE_DIR) + "/pytorch_cnn_train.jsonl";
  if (!std::filesystem::exists(trace)) GTEST_SKIP() << trace << " is absent (a bare clone)";
  const CliRun r = run_cli("stress --cores 2 --trace " + trace +
                           " --allocators bfc --auto-defragment on --capacity-search off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pytorch_cnn_train.jsonl"), std::string::npos) << r.output;
}

// `vtpu train fsdp`: FSDP on N cores against train mlp on 1 core in the same process, and the DP
// vs FSDP HBM table. 3 cores with hidden 37 pad both FlatParameters: layer 0 has 65 * 37 = 2405
// elements (3 shards of 802, 1 padding element), layer 1 38 * 10 = 380 (3 shards of 127).
TEST(VtpuCliTest, TrainFsdpTextOutput) {
  VTPU_REQUIRE_DIGITS();
  const std::string args =
      "train fsdp --cores 3 --steps 20 --batch 24 --hidden 37 --log-every 5 --seed 2";
  const nlohmann::json j = json_of(args + " --json");
  EXPECT_EQ(j["fsdp"]["flat_params"],
            nlohmann::json::parse(R"([{"name": "layer0", "numel": 2405, "padded_numel": 2406,
                                       "shard_numel": 802},
                                      {"name": "layer1", "numel": 380, "padded_numel": 381,
                                       "shard_numel": 127}])"));
  EXPECT_TRUE(j["losses_match"].get<bool>());
  EXPECT_LE(j["max_relative_loss_difference"].get<double>(), 1e-4);
  EXPECT_TRUE(j["fsdp"]["padding_is_zero"].get<bool>());
  EXPECT_EQ(j["reference"]["micro_batches"], 3);
  EXPECT_EQ(j["one_batch_reference"]["micro_batches"], 1);
  EXPECT_EQ(j["fsdp"]["peak_hbm_core0"]["opt_state"], 0);  // SGD
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The text carries the JSON's figures: the logged losses, the FlatParameters, the collectives'
  // bytes per step and the HBM table's totals.
  std::vector<std::string> values = {"2405", "2406", "802", "380", "381", "127"};
  for (int step : {5, 10, 15, 19})
    values.push_back(fixed(j["fsdp"]["losses"][step].get<double>(), 6));
  const int steps = 20;
  values.push_back(std::to_string(j["fsdp"]["all_gather"][0]["bytes"].get<int64_t>() / steps));
  values.push_back(std::to_string(j["fsdp"]["reduce_scatter"][0]["bytes"].get<int64_t>() / steps));
  const nlohmann::json& peak = j["fsdp"]["peak_hbm_core0"];
  for (const char* key : {"params", "persistent_state", "gathered", "total"}) {
    values.push_back(std::to_string(peak[key].get<int64_t>()));
  }
  values.push_back(std::to_string(j["reference"]["peak_bytes_in_use_core0"].get<int64_t>()));
  for (const std::string& value : values) {
    EXPECT_NE(r.output.find(value), std::string::npos) << value << "\n" << r.output;
  }
  // A row with 0 bytes on one side (the 1-core run has no gathered temps) prints "-" for the
  // ratio, not "0.00x" or "inf": the gathered row is 0 (reference), 0 (DP), FSDP's bytes, "-".
  EXPECT_EQ(r.output.find("0.00x"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" inf\n"), std::string::npos) << r.output;
  const std::string gathered = std::to_string(peak["gathered"].get<int64_t>());
  bool found = false;
  for (const auto& f : fields_of(r.output)) {
    if (f.size() >= 4 && f[f.size() - 2] == gathered && f[f.size() - 3] == "0") {
      found = true;
      EXPECT_EQ(f.back(), "-");
    }
  }
  EXPECT_TRUE(found) << r.output;
}

// JSON: per-core persistent bytes worked by hand for hidden 64 on 4 cores. FSDP shards, each a
// 1-D f32 vector charged in whole tiles of 1024 floats (T(1024)): layer 0 4160 / 4 = 1040 floats
// (2048 floats, 8192 B), layer 1 650 -> 652 padded, 163 floats (4096 B): 12288 B of parameters.
// DP replica: each tensor its own array, W1 f32[64,64] and W2 f32[64,10] one (64, 128) block of
// (8,128) tiles each (32768 B), b1 f32[64] and b2 f32[10] one T(1024) tile each (4096 B):
// 73728 B. With the gradient bucket's 4-byte loss (a 256 B granule), the reference's persistent
// state is 73728 + 73984 + 2 x 73728 = 295168 B.
TEST(VtpuCliTest, TrainFsdpJson) {
  VTPU_REQUIRE_DIGITS();
  const CliRun r = run_cli("train fsdp --cores 4 --steps 20 --batch 32 --prefetch off --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["mode"], "fsdp");
  EXPECT_EQ(j["config"]["prefetch"], false);
  EXPECT_EQ(j["fsdp"]["losses"].size(), 20u);
  EXPECT_EQ(j["reference"]["losses"].size(), 20u);
  EXPECT_LE(j["max_relative_loss_difference"].get<double>(), 1e-4);
  EXPECT_EQ(j["fsdp"]["peak_hbm_core0"]["params"], 12288);
  EXPECT_EQ(j["fsdp"]["peak_hbm_core0"]["grads"], 12288);
  EXPECT_EQ(j["data_parallel"]["peak_hbm_core0"]["params"], 73728);
  EXPECT_EQ(j["fsdp"]["flat_params"][1]["padded_numel"], 652);
  EXPECT_EQ(j["fsdp"]["all_gather"][0]["num_collectives"], 80);
  EXPECT_EQ(j["reference"]["micro_batches"], 4);
  EXPECT_EQ(j["one_batch_reference"]["micro_batches"], 1);
  // FSDP's step time at the top level, the data-parallel comparison run's in its own object, the
  // reference's in its own; all in seconds.
  EXPECT_GT(j["median_step_seconds"].get<double>(), 0.0);
  EXPECT_FALSE(j["fsdp"].contains("median_step_seconds"));
  EXPECT_GT(j["data_parallel"]["median_step_seconds"].get<double>(), 0.0);
  EXPECT_GT(j["reference"]["median_step_seconds"].get<double>(), 0.0);
  EXPECT_EQ(j.dump().find("median_step_ms"), std::string::npos);
}

// --optimizer adam: m and v are sharded like the parameters, so the optimizer state per core is
// twice the parameter shards (2 x 12288 B on 4 cores at hidden 64), against 2 x 73728 B for the
// data-parallel replica and the 1-core run; the losses equal the 1-core run's exactly.
TEST(VtpuCliTest, TrainFsdpAdam) {
  VTPU_REQUIRE_DIGITS();
  const CliRun r = run_cli("train fsdp --cores 4 --steps 20 --batch 32 --optimizer adam --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["config"]["optimizer"], "adam");
  EXPECT_NEAR(j["config"]["learning_rate"].get<double>(), 0.001, 1e-9);
  EXPECT_EQ(j["fsdp"]["optimizer"], "adam");
  EXPECT_TRUE(j["fsdp"]["padding_is_zero"].get<bool>());
  EXPECT_EQ(j["fsdp"]["peak_hbm_core0"]["opt_state"], 2 * 12288);
  EXPECT_EQ(j["fsdp"]["peak_hbm_core0"]["persistent_state"], 4 * 12288);
  EXPECT_EQ(j["data_parallel"]["peak_hbm_core0"]["opt_state"], 2 * 73728);
  EXPECT_EQ(j["reference"]["peak_hbm_core0"]["persistent_state"], 295168);
  EXPECT_EQ(j["max_relative_loss_difference"].get<double>(), 0.0);
  EXPECT_TRUE(j["losses_match"].get<bool>());
  // The text report gives the learning rate and the optimizer state's bytes of the JSON.
  const std::string small = "train fsdp --cores 2 --steps 3 --batch 8 --optimizer adam";
  const nlohmann::json sj = json_of(small + " --json");
  EXPECT_TRUE(sj["fsdp"]["padding_is_zero"].get<bool>());
  const CliRun text = run_cli(small);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const std::string& value :
       {std::string("0.001"),
        std::to_string(sj["fsdp"]["peak_hbm_core0"]["opt_state"].get<int64_t>())}) {
    EXPECT_NE(text.output.find(value), std::string::npos) << value << "\n" << text.output;
  }
}

std::string plan_file(const std::string& name, const std::string& strategy) {
  return temp_file(name, R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
                              "mesh": {"axes": ["data", "model"], "shape": [2, 2]},
                              "strategy": )j" +
                             strategy + R"j(, "shardings": {}, "estimate": {}})j");
}

TEST(VtpuCliTest, TrainFsdpRunsAPlan) {
  VTPU_REQUIRE_DIGITS();
  const std::string fsdp = plan_file(
      "vtpu_plan_fsdp.json",
      R"j({"name": "fsdp(data,model)", "data": null, "tensor": null, "fsdp": ["data", "model"]})j");
  CliRun r = run_cli("train fsdp --steps 5 --batch 8 --json --plan " + fsdp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["mode"], "fsdp");
  EXPECT_EQ(j["config"]["cores"], 4);  // the plan's 2x2 mesh
  EXPECT_EQ(j["fsdp"]["num_cores"], 4);
  const std::string dp = plan_file(
      "vtpu_plan_dp.json",
      R"j({"name": "dp(data,model)", "data": ["data", "model"], "tensor": null, "fsdp": null})j");
  r = run_cli("train fsdp --steps 5 --batch 8 --json --plan " + dp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["mode"], "data_parallel");
  EXPECT_FALSE(j.contains("fsdp"));
  EXPECT_LE(j["max_relative_loss_difference"].get<double>(), 1e-4);
  // The data-parallel run is the judged run: its step time is the top-level one.
  EXPECT_GT(j["median_step_seconds"].get<double>(), 0.0);
  EXPECT_FALSE(j["data_parallel"].contains("median_step_seconds"));
  // Anything else is an error naming the strategy.
  const std::string tp = plan_file(
      "vtpu_plan_tp.json",
      R"j({"name": "dp(data)+tp(model)", "data": "data", "tensor": "model", "fsdp": null})j");
  expect_failures({
      {"train fsdp --plan " + tp, 1, {"'dp(data)+tp(model)'", "train mlp --plan"}},
      {"train fsdp --plan " + tp, 1, {"train mlp --plan"}},
      // A flag that contradicts the plan is a usage error naming the plan's mesh.
      {"train fsdp --cores 8 --plan " + fsdp,
       2,
       {"--cores 8", fsdp, "data=2 model=2", "--cores 4"}},
      {"train fsdp --plan /nonexistent/plan.json", 1, {"/nonexistent/plan.json"}},
  });
}

// Checks the estimate_vs_measured `e` of a `train mlp` run of `steps` steps on the 2-core plans
// the tests below write (estimate: step 1 ms, HBM 40000 + 2000 input bytes per core) against the
// run's own figures (`top`: the command's JSON, with the run's median_step_seconds at its top
// level; `run`: the JSON object with the run's per-core hbm).
void expect_mlp_estimate_report(const nlohmann::json& top, const nlohmann::json& run,
                                int64_t steps) {
  const nlohmann::json& e = top["estimate_vs_measured"];
  EXPECT_EQ(e["estimate"]["step_seconds"], 0.001);
  EXPECT_EQ(e["estimated_hbm_bytes_per_core"], 42000);
  EXPECT_EQ(e["measured"]["num_cores"], 2);
  EXPECT_EQ(e["measured"]["steps"], steps);
  EXPECT_GT(e["measured"]["cpu_seconds_per_step"].get<double>(), 0.0);
  // The measured peak is the run's largest peak_bytes_in_use; the replicated training set is the
  // part of it the model file does not describe.
  uint64_t peak = 0;
  for (const nlohmann::json& core : run["hbm"])
    peak = std::max(peak, core["peak_bytes_in_use"].get<uint64_t>());
  EXPECT_EQ(e["measured"]["peak_hbm_bytes_per_core"], peak);
  const uint64_t data = e["measured"]["unmodelled_hbm_bytes"];
  EXPECT_GT(data, 0u);
  EXPECT_EQ(e["comparable_hbm_bytes_per_core"].get<uint64_t>(), peak - data);
  // The report measures the step time the trainer's JSON reports, under the same name and unit.
  const double seconds = top["median_step_seconds"];
  EXPECT_EQ(e["measured"]["median_step_seconds"].get<double>(), seconds);
  // Estimate 1 ms: the ratio is the median in ms.
  EXPECT_NEAR(e["step_ratio"].get<double>(), 1e3 * seconds, 1e-9 * 1e3 * seconds);
}

TEST(VtpuCliTest, TrainMlpComparesAPlansEstimateWithTheRun) {
  VTPU_REQUIRE_DIGITS();
  const std::string mesh = R"j("model": "mlp", "mesh": {"axes": ["x"], "shape": [2]},)j";
  const std::string dp = temp_file("vtpu_cli_estimate_dp.json", R"j({"format": "vtpu-plan",
    "version": 1, )j" + mesh + R"j( "strategy": {"name": "dp(x)", "data": "x", "tensor": null,
    "fsdp": null}, "estimate": {"step_seconds": 0.001, "hbm_bytes_per_core": 40000,
    "input_bytes_per_core": 2000, "hardware": "this_machine", "batch": 8}})j");
  CliRun r = run_cli("train mlp --steps 5 --batch 8 --json --estimate-from " + dp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["num_cores"], 2);  // the plan's mesh
  expect_mlp_estimate_report(j, j, 5);
  // The table form names the plan and its strategy, and gives the HBM row's figures.
  r = run_cli("train mlp --steps 5 --batch 8 --estimate-from " + dp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json& e = j["estimate_vs_measured"];
  for (const std::string& value :
       {dp, std::string("dp(x)"), std::string("42000"),
        std::to_string(e["measured"]["unmodelled_hbm_bytes"].get<uint64_t>())}) {
    EXPECT_NE(r.output.find(value), std::string::npos) << value << "\n" << r.output;
  }
  // Regression: a pallas run was judged against the estimate of the Eigen kernels'
  // rates; its step row is printed but not judged, and no collective probe runs.
  r = run_cli(
      "train mlp --steps 3 --batch 8 --log-every 0 --json --kernels pallas "
      "--estimate-from " +
      dp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json pallas = nlohmann::json::parse(r.output)["estimate_vs_measured"];
  EXPECT_EQ(pallas["step_comparable"], false);
  const std::string why = pallas["step_not_judged"];
  EXPECT_NE(why.find("--kernels pallas"), std::string::npos) << why;
  EXPECT_TRUE(pallas["step_ratio"].is_null());
  EXPECT_TRUE(pallas["step_within_25_percent"].is_null());
  EXPECT_TRUE(pallas["probe"].is_null());
  EXPECT_EQ(pallas["estimated_hbm_bytes_per_core"], 42000);  // the HBM row is still judged
  r = run_cli("train mlp --steps 3 --batch 8 --log-every 0 --kernels pallas --estimate-from " + dp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The table's step row gives the reason it is not judged, and no verdict.
  EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("outside 25%)\n  process"), std::string::npos) << r.output;
  // A plan train mlp does not run, a plan without an estimate, another batch.
  const std::string fsdp = temp_file("vtpu_cli_estimate_fsdp.json", R"j({"format": "vtpu-plan",
    "version": 1, )j" + mesh + R"j( "strategy": {"name": "fsdp(x)", "data": null,
    "tensor": null, "fsdp": "x"}, "estimate": {"step_seconds": 0.001, "hbm_bytes_per_core": 1}})j");
  // A usage error like the other plan/flag mismatches.
  expect_failure("train mlp --estimate-from " + fsdp, 2, {"--estimate-from", fsdp});
  const std::string bare = temp_file("vtpu_cli_estimate_bare.json", R"j({"format": "vtpu-plan",
    "version": 1, )j" + mesh + R"j( "strategy": {"name": "dp(x)", "data": "x", "tensor": null,
    "fsdp": null}})j");
  expect_failure("train mlp --estimate-from " + bare, 1, {"estimate", bare});
  // A --batch that contradicts the plan is a usage error, as --cores is.
  expect_failure("train mlp --batch 16 --estimate-from " + dp, 2, {dp, "batch of 8", "16"});
  expect_failure("train mlp --cores 4 --batch 8 --estimate-from " + dp, 2,
                 {"--cores 4", dp, "x=2", "--cores 2"});
}

TEST(VtpuCliTest, TrainFsdpRejectsBadInput) {
  VTPU_REQUIRE_DIGITS();
  expect_failures({
      {"train fsdp --prefetch maybe", 2, {"--prefetch"}},
      {"train fsdp --cores 4 --batch 10", 1, {"10", "4 cores"}},
      {"train fsdp --hbm-bytes lots", 2, {"--hbm-bytes", "'lots'"}},
      {"train fsdp --hbm-bytes 64K", 1, {"HBM", "65536"}},
      {"train fsdp --lr 0", 2, {"--lr", "0"}},
      {"train fsdp --optimizer adamw", 2, {"--optimizer"}},
  });
}

// ---- vtpu train transformer ------------------------------------------------------------------

// A small English text, so that the transformer CLI tests need no fetched data.
std::string transformer_text_file() {
  std::string s;
  for (int i = 0; i < 30; ++i) {
    s += "The quick brown fox jumps over the lazy dog. To be or not to be, that is the question.\n";
  }
  return temp_file("vtpu_cli_transformer.txt", s);
}

TEST(VtpuCliTest, TrainTransformerJsonMatchesTheSingleCoreRun) {
  const CliRun r = run_cli("train transformer --mesh 2x2 --steps 3 --batch 4 --json --data " +
                           transformer_text_file());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["mesh"]["mesh"]["data"], 2);
  EXPECT_EQ(j["mesh"]["mesh"]["tensor"], 2);
  ASSERT_EQ(j["mesh"]["losses"].size(), 3u);
  ASSERT_EQ(j["reference"]["losses"].size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    const double a = j["mesh"]["losses"][s], b = j["reference"]["losses"][s];
    EXPECT_LE(std::abs(a - b), 1e-4 * b) << s;
  }
  EXPECT_LE(j["max_relative_loss_difference"].get<double>(), 1e-4);
  EXPECT_FALSE(j.contains("max_relative_difference"));  // the name every trainer uses
  // The text has 31 distinct bytes (a pangram's 26 letters, 'T', space, '.', ',', newline): the
  // uniform guess is ln 31.
  EXPECT_EQ(j["vocab_used"], 31);
  EXPECT_NEAR(j["uniform_loss"].get<double>(), std::log(31.0), 1e-9);
  ASSERT_EQ(j["mesh"]["cores"].size(), 4u);
  // 2 layers: 8 model-axis all-reduces per step, 1 data-axis one.
  EXPECT_EQ(j["mesh"]["cores"][3]["tensor_all_reduce"]["num_collectives"], 24);
  EXPECT_EQ(j["mesh"]["cores"][3]["data_all_reduce"]["num_collectives"], 3);
  // Tensor parallel over 2 holds fewer weight bytes per core than one core holding all.
  EXPECT_LT(j["mesh"]["hbm_bytes_per_core"]["weights"].get<uint64_t>(),
            j["reference"]["hbm_bytes_per_core"]["weights"].get<uint64_t>());
  // The run's facts sit at the top level, as in every trainer's --json.
  EXPECT_TRUE(j["replicas_identical"].get<bool>());
  EXPECT_TRUE(j["replica_mismatch"].is_null());
  EXPECT_GT(j["median_step_seconds"].get<double>(), 0.0);
  for (const char* key :
       {"replicas_identical", "replica_mismatch", "median_step_seconds", "median_step_ms"}) {
    EXPECT_FALSE(j["mesh"].contains(key)) << key;
  }
  EXPECT_FALSE(j["reference"].contains("replicas_identical"));
  EXPECT_GT(j["reference"]["median_step_seconds"].get<double>(), 0.0);
}

// The reference runs one micro-batch per data shard, so a pure
// data-parallel mesh gives its losses exactly (the whole-batch reference drifted past 1e-4 at
// --batch 64; tests/train/transformer_test.cc shows it); a tensor-parallel one needs none.
TEST(VtpuCliTest, TrainTransformerReferenceFollowsTheDataParallelSums) {
  for (const auto& [mesh, micro] :
       {std::pair<std::string, int>{"4x1", 4}, {"1x2", 1}, {"2x1", 2}}) {
    SCOPED_TRACE(mesh);
    const CliRun r =
        run_cli("train transformer --mesh " + mesh +
                " --steps 3 --batch 8 --lr 0.01 --json --data " + transformer_text_file());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["reference_micro_batches"], micro);
    if (micro > 1) {
      EXPECT_EQ(j["mesh"]["losses"], j["reference"]["losses"]);
      EXPECT_EQ(j["max_relative_loss_difference"].get<double>(), 0.0);
    } else {
      EXPECT_LE(j["max_relative_loss_difference"].get<double>(), 1e-4);
    }
  }
  // The text report gives the reference's micro-batches and its final loss.
  const std::string args =
      "train transformer --mesh 2x1 --steps 2 --batch 4 --log-every 1 --data " +
      transformer_text_file();
  const nlohmann::json j = json_of(args + " --json");
  const CliRun text = run_cli(args);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("2 micro-batches"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find(fixed(j["reference"]["final_loss"].get<double>(), 4)),
            std::string::npos)
      << text.output;
}

// The text report carries the figures of the --json report of the same run: the mesh, the
// strategy, the losses, the uniform guess over the text's 31 distinct bytes, the all-reduces and
// the HBM per core.
TEST(VtpuCliTest, TrainTransformerTextOutput) {
  const std::string args = "train transformer --cores 2 --steps 2 --batch 2 --log-every 1 --data " +
                           transformer_text_file();
  const nlohmann::json j = json_of(args + " --json");
  EXPECT_EQ(j["mesh"]["mesh"]["data"], 1);
  EXPECT_EQ(j["mesh"]["mesh"]["tensor"], 2);
  EXPECT_EQ(j["config"]["strategy"], "tp(model)");
  EXPECT_EQ(j["vocab_used"], 31);
  const nlohmann::json& core0 = j["mesh"]["cores"][0];
  // 2 blocks x (2 forward + 2 backward) tensor all-reduces per step; a data group of 1 runs none.
  EXPECT_EQ(core0["tensor_all_reduce"]["num_collectives"], 16);
  EXPECT_EQ(core0["data_all_reduce"]["num_collectives"], 0);
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> values = {"1x2", "tp(model)", "31",
                                     fixed(j["uniform_loss"].get<double>(), 4), "16 calls"};
  for (const auto& loss : j["mesh"]["losses"]) values.push_back(fixed(loss.get<double>(), 6));
  for (const auto& loss : j["reference"]["losses"]) values.push_back(fixed(loss.get<double>(), 6));
  for (const auto& [kind, bytes] : j["mesh"]["hbm_bytes_per_core"].items()) {
    values.push_back(std::to_string(bytes.get<uint64_t>()));
  }
  values.push_back(std::to_string(core0["peak_bytes_in_use"].get<uint64_t>()));
  for (const std::string& value : values) {
    EXPECT_NE(r.output.find(value), std::string::npos) << value << "\n" << r.output;
  }
}

// Regression: --log-every 0 printed the per-run headings over no per-step lines, and the closing
// table had step 0 besides the last, where the help says "0: only the last". Read by the losses:
// with --log-every 0 only the last step's appears, with --log-every 1 every step's.
TEST(VtpuCliTest, TrainTransformerLogEveryZeroPrintsOnlyTheLastStep) {
  const std::string args =
      "train transformer --cores 2 --steps 3 --batch 2 --data " + transformer_text_file();
  const nlohmann::json j = json_of(args + " --json");
  ASSERT_EQ(j["mesh"]["losses"].size(), 3u);
  std::vector<std::string> losses;
  for (const auto& loss : j["mesh"]["losses"]) losses.push_back(fixed(loss.get<double>(), 6));
  const CliRun last = run_cli(args + " --log-every 0");
  ASSERT_EQ(last.exit_code, 0) << last.output;
  EXPECT_EQ(last.output.find(losses[0]), std::string::npos) << last.output;
  EXPECT_EQ(last.output.find(losses[1]), std::string::npos) << last.output;
  EXPECT_NE(last.output.find(losses[2]), std::string::npos) << last.output;
  const CliRun every = run_cli(args + " --log-every 1");
  ASSERT_EQ(every.exit_code, 0) << every.output;
  for (const std::string& loss : losses) {
    EXPECT_NE(every.output.find(loss), std::string::npos) << loss << "\n" << every.output;
  }
}

TEST(VtpuCliTest, TrainTransformerRunsAPlan) {
  const std::string plan = temp_file("vtpu_cli_plan.json", R"json({
    "format": "vtpu-plan", "version": 1, "model": "transformer",
    "mesh": {"axes": ["data", "model"], "shape": [1, 2]},
    "strategy": {"name": "tp(model)", "data": "data", "tensor": "model", "fsdp": null},
    "estimate": {"step_seconds": 0.5, "hbm_bytes_per_core": 1000000}})json");
  const std::string args = "train transformer --plan " + plan +
                           " --steps 2 --batch 2 --no-reference --data " + transformer_text_file();
  const nlohmann::json j = json_of(args + " --json");
  EXPECT_EQ(j["mesh"]["mesh"]["data"], 1);  // the plan's mesh
  EXPECT_EQ(j["mesh"]["mesh"]["tensor"], 2);
  EXPECT_NE(j["config"]["strategy"].get<std::string>().find("tp(model)"), std::string::npos);
  EXPECT_FALSE(j.contains("reference"));  // --no-reference
  EXPECT_FALSE(j.contains("max_relative_loss_difference"));
  // The plan's estimate beside the measurement (bench/estimate_report.h).
  const nlohmann::json& e = j["estimate_vs_measured"];
  EXPECT_EQ(e["plan"], plan);
  EXPECT_EQ(e["strategy"], "tp(model)");
  EXPECT_EQ(e["estimate"]["step_seconds"], 0.5);
  EXPECT_EQ(e["estimated_hbm_bytes_per_core"], 1000000);
  // The text form gives the same: the plan, its step estimate in ms and its HBM bytes.
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& value : {plan, std::string("500.000 ms"), std::string("1000000")}) {
    EXPECT_NE(r.output.find(value), std::string::npos) << value << "\n" << r.output;
  }
}

// Regression: a --batch that differs from the plan's estimate.batch failed only after the header
// and the whole single-core reference run; it fails before either (nothing on stdout).
TEST(VtpuCliTest, TrainTransformerChecksThePlansBatchBeforeTraining) {
  const std::string plan = temp_file("vtpu_cli_plan_batch8.json", R"json({
    "format": "vtpu-plan", "version": 1, "model": "transformer",
    "mesh": {"axes": ["data", "model"], "shape": [2, 1]},
    "strategy": {"name": "dp(data)", "data": "data"},
    "estimate": {"step_seconds": 0.5, "batch": 8}})json");
  const std::string args =
      "train transformer --steps 1 --batch 4 --plan " + plan + " --data " + transformer_text_file();
  expect_failure(args, 2, {"'" + plan + "'", "batch of 8", "4", "--batch 4"});
  EXPECT_EQ(run_cli_split(args).out, "");
  // train fsdp --plan: the same check before its header.
  VTPU_REQUIRE_DIGITS();
  const std::string fsdp = temp_file("vtpu_cli_fsdp_plan_batch8.json", R"json({
    "format": "vtpu-plan", "version": 1, "model": "mlp",
    "mesh": {"axes": ["x"], "shape": [2]}, "strategy": {"name": "fsdp(x)", "fsdp": "x"},
    "estimate": {"step_seconds": 0.5, "batch": 8}})json");
  expect_failure("train fsdp --steps 1 --batch 4 --plan " + fsdp, 2,
                 {"'" + fsdp + "'", "batch of 8"});
  EXPECT_EQ(run_cli_split("train fsdp --steps 1 --batch 4 --plan " + fsdp).out, "");
}

// --hbm-bytes limits the mesh's cores, not the single-core reference (as in train mlp):
// under 6 MiB the 1x2 mesh fits (about 5.8 MB per core, padded) and the reference, which holds
// the whole model, needs more than 6 MiB in its own 16 GiB arena.
TEST(VtpuCliTest, TrainTransformerHbmLimitIsTheMeshsNotTheReferences) {
  const CliRun r = run_cli(
      "train transformer --mesh 1x2 --steps 1 --batch 2 --hbm-bytes 6M --json "
      "--data " +
      transformer_text_file());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const auto& core : j["mesh"]["cores"]) EXPECT_EQ(core["bytes_limit"], 6 << 20) << core;
  const nlohmann::json& ref = j["reference"]["cores"][0];
  EXPECT_EQ(ref["bytes_limit"], uint64_t{16} << 30);
  uint64_t held = 0;  // the reference's buffers by kind, before the allocator's rounding
  for (const auto& [kind, bytes] : j["reference"]["hbm_bytes_per_core"].items()) {
    held += bytes.get<uint64_t>();
  }
  EXPECT_GT(held, uint64_t{6} << 20);
  EXPECT_GE(ref["peak_bytes_in_use"].get<uint64_t>(), held);
}

TEST(VtpuCliTest, TrainTransformerRunsWithPallasKernels) {
  const std::string args =
      "train transformer --mesh 1x2 --steps 3 --batch 2 --kernels pallas --data " +
      transformer_text_file();
  // The pipelined kernels give the single-core reference's losses within 1e-4.
  EXPECT_LE(json_of(args + " --json")["max_relative_loss_difference"].get<double>(), 1e-4);
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pallas"), std::string::npos) << r.output;
}

// Regression: a directory was "has 0 bytes"; bytes >= 128 became '?' unsaid,
// and a gzip file (about half such bytes) trained.
TEST(VtpuCliTest, TrainTransformerSaysWhatItDoesWithItsText) {
  const std::string dir = test_temp_path("vtpu_cli_text_dir");
  std::filesystem::create_directories(dir);
  expect_failure("train transformer --mesh 1x1 --steps 1 --batch 1 --data " + dir, 1,
                 {"'" + dir + "'", "directory"});
  std::string text(1000, 'a');
  for (int i = 0; i < 5; ++i) text[static_cast<size_t>(100 * i + 7)] = '\xe9';
  const std::string latin1 = temp_file("vtpu_cli_latin1.txt", text);
  const std::string args =
      "train transformer --mesh 1x1 --steps 1 --batch 1 --no-reference --data " + latin1;
  // The text report says how many bytes were mapped to '?': 5 of the 1000.
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* value : {"1000", "5 of 1000", "'?'"}) {
    EXPECT_NE(r.output.find(value), std::string::npos) << value << "\n" << r.output;
  }
  const CliRun j = run_cli(args + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json jj = nlohmann::json::parse(j.output);
  EXPECT_EQ(jj["text_bytes"], 1000);
  EXPECT_EQ(jj["bytes_mapped_to_question_mark"], 5);
  std::string binary(1000, 'a');
  for (int i = 0; i < 200; ++i) binary[static_cast<size_t>(5 * i)] = '\x8b';
  const std::string bin = temp_file("vtpu_cli_binary.txt", binary);
  expect_failure("train transformer --mesh 1x1 --steps 1 --batch 1 --data " + bin, 1,
                 {"'" + bin + "'", "200 of 1000", "10%"});
}

TEST(VtpuCliTest, TrainTransformerRejectsBadInput) {
  const std::string data = " --steps 1 --batch 2 --data " + transformer_text_file();
  expect_failures({
      {"train transformer --mesh 1x3" + data, 1, {"heads 4", "3"}},
      {"train transformer --mesh 1x8 --batch 2 --steps 1 --data /dev/null", 1, {"heads 4", "8"}},
      {"train transformer --mesh 2x" + data, 2, {"'2x'"}},
      {"train transformer --mesh 3x1" + data, 1, {"batch 2", "3"}},
      {"train transformer --cores 3 --mesh 2x2" + data, 2, {"--cores 3", "2x2"}},
      {"train transformer --kernels cuda" + data, 2, {"--kernels", "cuda"}},
      {"train transformer --mesh 1x2 --plan x.json" + data, 2, {"--mesh", "--plan"}},
      {"train transformer --hbm-bytes lots" + data, 2, {"--hbm-bytes", "'lots'"}},
      {"train transformer --mesh 1x2 --steps 1 --data /nonexistent.txt",
       1,
       {"scripts/fetch-data.sh"}},
      {"train transformer --plan " + temp_file("vtpu_cli_bad_plan.json", "{\"format\""),
       1,
       {"JSON"}},
  });
  const std::string fsdp_plan =
      R"json({"format": "vtpu-plan", "version": 1, "model": "transformer",
      "mesh": {"axes": ["x"], "shape": [2]},
      "strategy": {"name": "fsdp(x)", "data": null, "tensor": null, "fsdp": "x"}})json";
  expect_failure(
      "train transformer --plan " + temp_file("vtpu_cli_fsdp_plan.json", fsdp_plan) + data, 1,
      {"'fsdp(x)'", "train transformer"});
  const std::string mlp_plan =
      R"json({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["x"], "shape": [2]}, "strategy": {"data": "x"}})json";
  expect_failure("train transformer --plan " + temp_file("vtpu_cli_mlp_plan.json", mlp_plan) + data,
                 1, {"'mlp'", "'transformer'"});
  // Regression: --cores against a 2x4 plan named "the mesh 8x1" (the
  // flattened data x tensor grid of dp(data,model)); now the plan's file and mesh, and a usage
  // error as in train mlp and train fsdp.
  const std::string plan24 = temp_file("vtpu_cli_plan24.json",
                                       R"json({"format": "vtpu-plan", "version": 1,
      "model": "transformer", "mesh": {"axes": ["data", "model"], "shape": [2, 4]},
      "strategy": {"name": "dp(data,model)", "data": ["data", "model"]}})json");
  expect_failure("train transformer --cores 4 --plan " + plan24 + data, 2,
                 {"--cores 4", plan24, "data=2 model=4", "--cores 8"});
  // Regression: a pallas run was judged against the plan's estimate,
  // priced from the Eigen kernels ("19.48x (outside 25%)"); a usage error as in train mlp --plan.
  expect_failure("train transformer --kernels pallas --plan " + plan24 + data, 2,
                 {"--kernels pallas", "--plan"});
}

// Regression: `train fsdp --plan P --prefetch on` judged a prefetching
// run against the estimate of the unprefetched schedule ("4.46x (outside 25%)").
TEST(VtpuCliTest, TrainFsdpPlanRefusesPrefetchOn) {
  VTPU_REQUIRE_DIGITS();
  const std::string plan = temp_file("vtpu_cli_fsdp_prefetch_plan.json",
                                     R"json({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["x"], "shape": [2]},
      "strategy": {"name": "fsdp(x)", "data": null, "tensor": null, "fsdp": "x"}})json");
  expect_failure("train fsdp --steps 1 --prefetch on --plan " + plan, 2,
                 {"--prefetch on", "--plan"});
  // --prefetch off is the schedule priced, and runs.
  const nlohmann::json j =
      json_of("train fsdp --steps 1 --batch 8 --log-every 0 --prefetch off --json --plan " + plan);
  EXPECT_EQ(j["config"]["prefetch"], false);
}
namespace {

std::string model_path(const char* name) {
  return std::string(VTPU_SOURCE_DIR) + "/examples/models/" + name;
}

// Regression: an output path in a missing directory or naming a directory was exit 1 in these
// commands (exit 2 in `stress`), although it is checked before the run as a usage error.
TEST(VtpuCliTest, AnUnwritableOutputPathIsAUsageErrorInEveryCommand) {
  const std::string dir = test_temp_dir().string();
  expect_failures({
      {"train mlp --steps 1 --memory-snapshot /nonexistent-dir/s.json", 2,
       {"--memory-snapshot", "'/nonexistent-dir'"}},
      {"train mlp --steps 1 --memory-profile /nonexistent-dir/p.pb.gz", 2,
       {"--memory-profile", "'/nonexistent-dir'"}},
      {"train mlp --steps 1 --memory-events " + dir, 2, {"--memory-events", "'" + dir + "'"}},
      {"plan " + model_path("mlp.json") + " --emit /nonexistent-dir/p.json", 2,
       {"--emit", "'/nonexistent-dir'"}},
  });
}

TEST(VtpuCliPlanTest, PlanPrintsEveryCandidateAndEmitsTheWinner) {
  const std::string out = test_temp_path("vtpu_cli_plan.json");
  std::filesystem::remove(out);
  const CliRun r = run_cli("plan " + model_path("transformer.json") +
                           " --mesh 2x4 --hardware v5e --emit " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"dp(data,model)", "fsdp(data,model)", "tp(data,model)",
                           "dp(data)+tp(model)", "fsdp(data)+tp(model)", "WINNER"}) {
    EXPECT_NE(r.output.find(name), std::string::npos) << name << "\n" << r.output;
  }
  std::ifstream in(out);
  ASSERT_TRUE(in.good()) << r.output;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["format"], "vtpu-plan");
  EXPECT_EQ(j["model"], "transformer");
  EXPECT_EQ(j["mesh"]["shape"], nlohmann::json({2, 4}));
}

// The plan is priced with the mesh's cores running at once: 8 cores on the fixed profile's 2 host
// CPUs are oversubscribed 8 / 2 = 4 times (the footer used to say "core count unset").
TEST(VtpuCliPlanTest, FooterStatesTheMeshOversubscription) {
  const std::string args =
      "plan " + model_path("mlp.json") + " --mesh 8 --hardware " + fixed_profile();
  EXPECT_EQ(json_of(args + " --json")["plan"]["estimate"]["oversubscription"], 4.0);
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("x 4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("core count unset"), std::string::npos) << r.output;
}

// The fixed profile without its calibrated collectives (as `vtpu bench hardware --out` writes
// one), in the temp file `name`; returns its path.
std::string bare_profile_file(const std::string& name) {
  return fixed_profile_variant(name, [](nlohmann::json& j) {
    EXPECT_TRUE(j.contains("collectives"));
    j.erase("collectives");
  });
}

// `vtpu plan ... --json --hardware PROFILE` of the mlp model on `mesh`.
nlohmann::json plan_json(const std::string& mesh, const std::string& profile) {
  return json_of("plan " + model_path("mlp.json") + " --mesh " + mesh + " --json --hardware " +
                 profile);
}

// A profile file read with --hardware is named in the plan (the file besides the profile's own
// name), and a host profile without calibrated collectives is flagged: its hand-offs cost the
// links' 0 s latency. A shipped profile is named alone.
TEST(VtpuCliPlanTest, AProfileFileIsNamedAndOneWithoutCollectivesIsFlagged) {
  const nlohmann::json calibrated = plan_json("2", fixed_profile());
  EXPECT_EQ(calibrated["plan"]["estimate"]["hardware"], "fixed_host");
  EXPECT_EQ(calibrated["plan"]["estimate"]["hardware_file"], fixed_profile());
  EXPECT_EQ(calibrated["warnings"], nlohmann::json::array());
  const std::string bare = bare_profile_file("vtpu_cli_bare_profile.json");
  const nlohmann::json flagged = plan_json("2", bare);
  ASSERT_EQ(flagged["warnings"].size(), 1u) << flagged["warnings"];
  const std::string warning = flagged["warnings"][0];
  for (const std::string& value : {bare, std::string("0.000 us")}) {
    EXPECT_NE(warning.find(value), std::string::npos) << value << " in " << warning;
  }
  // The table form prints the same warning and names the file.
  const CliRun r = run_cli("plan " + model_path("mlp.json") + " --mesh 2 --hardware " + bare);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(warning), std::string::npos) << r.output;
  // The shipped name: no file.
  const nlohmann::json shipped = plan_json("2", "this_machine");
  EXPECT_EQ(shipped["plan"]["estimate"]["hardware"], "this_machine");
  EXPECT_TRUE(shipped["plan"]["estimate"].value("hardware_file", nlohmann::json()).is_null());
}

// Regression: vtpu plan warned that a profile without calibrated collectives prices every
// hand-off at 0 us, but the trainer's report of the same plan (3.6x off for that reason) did not.
// And the probe measured every op on every core count up to the run's; a dp(x) plan on 8 cores
// runs only 8-core all-reduces, and only that fit is probed.
TEST(VtpuCliPlanTest, TheEstimateReportWarnsOfUncalibratedCollectivesAndProbesThePlansFits) {
  VTPU_REQUIRE_DIGITS();
  const std::string bare = bare_profile_file("vtpu_cli_report_bare_profile.json");
  const std::string p2 = test_temp_path("vtpu_cli_report_bare_plan.json");
  const CliRun p =
      run_cli("plan " + model_path("mlp.json") + " --mesh 2 --hardware " + bare + " --emit " + p2);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  nlohmann::json e = json_of("train mlp --steps 3 --json --plan " + p2)["estimate_vs_measured"];
  ASSERT_EQ(e["warnings"].size(), 1u) << e;
  const std::string warning = e["warnings"][0];
  for (const std::string& value : {bare, std::string("0.000 us")}) {
    EXPECT_NE(warning.find(value), std::string::npos) << value << " in " << warning;
  }
  EXPECT_TRUE(e["probe"].is_null()) << e;  // nothing calibrated to probe
  const CliRun r = run_cli("train mlp --steps 3 --log-every 0 --plan " + p2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(warning), std::string::npos) << r.output;
  // A calibrated profile: no warning, and the probe measures the plan's one fit.
  const std::string p8 = test_temp_path("vtpu_cli_report_dp8_plan.json");
  const CliRun q = run_cli("plan " + model_path("mlp.json") + " --mesh 8 --hardware " +
                           fixed_profile() + " --strategy 'dp(x)' --emit " + p8);
  ASSERT_EQ(q.exit_code, 0) << q.output;
  e = json_of("train mlp --steps 3 --json --plan " + p8)["estimate_vs_measured"];
  EXPECT_EQ(e["warnings"], nlohmann::json::array());
  ASSERT_TRUE(e["probe"].contains("rows")) << e["probe"];
  ASSERT_EQ(e["probe"]["rows"].size(), 1u) << e["probe"];
  EXPECT_EQ(e["probe"]["rows"][0]["op"], "all_reduce");
  EXPECT_EQ(e["probe"]["rows"][0]["group_size"], 8);
  EXPECT_EQ(e["probe"]["plan_fits_only"], true);
}

// Regression: with --json the no-collectives warning went nowhere; it is in the JSON's "warnings"
// and on stderr, and stdout stays pure JSON.
TEST(VtpuCliPlanTest, JsonPlanKeepsTheNoCollectivesWarning) {
  const std::string bare = bare_profile_file("vtpu_cli_json_bare_profile.json");
  const std::string plan = "plan " + model_path("mlp.json") + " --mesh 2 --json --hardware ";
  SplitRun r = run_cli_split(plan + bare);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // throws unless pure JSON
  ASSERT_EQ(j["warnings"].size(), 1u) << r.out;
  const std::string warning = j["warnings"][0];
  EXPECT_NE(warning.find(bare), std::string::npos) << warning;
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
  // A calibrated profile: no warnings, an empty array, nothing on stderr.
  r = run_cli_split(plan + fixed_profile());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["warnings"], nlohmann::json::array());
  EXPECT_EQ(r.err, "");
}

// Regression: a profile calibrated on 2 cores only priced 8-core groups from its 2-core fits
// without a word. The warning names both counts, the ops, and the calibration that adds the fit.
TEST(VtpuCliPlanTest, GroupsPricedFromAnotherCoreCountsFitAreWarned) {
  const std::string two = fixed_profile_variant("two_core_profile.json", [](nlohmann::json& j) {
    for (auto& [op, fits] : j["collectives"].items()) {
      nlohmann::json kept = nlohmann::json::array();
      for (const auto& f : fits) {
        if (f["group_size"] == 2) kept.push_back(f);
      }
      fits = kept;
    }
  });
  // stdout only: with --json the warnings go to stderr too.
  const nlohmann::json j = plan_json("8", two);
  ASSERT_EQ(j["warnings"].size(), 1u) << j["warnings"];
  const std::string w = j["warnings"][0];
  for (const char* value : {"8-core", "2-core", "all_gather", "all_reduce", "all_to_all",
                            "reduce_scatter", "s(8) / s(2)", "--calibrate", "--cores 2,8"}) {
    EXPECT_NE(w.find(value), std::string::npos) << value << " in " << w;
  }
  // The table says it too; a 2-core mesh is priced from its own fit: no warning.
  const CliRun r = run_cli("plan " + model_path("mlp.json") + " --mesh 8 --hardware " + two);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(w), std::string::npos) << r.output;
  EXPECT_EQ(plan_json("2", two)["warnings"], nlohmann::json::array());
  // The fixed profile has fits on 2, 4 and 8 cores: every group of a 2x4 mesh has its own.
  EXPECT_EQ(plan_json("2x4", fixed_profile())["warnings"], nlohmann::json::array());
}

// Regression: a 1-core plan's cost line said "1 virtual cores on 2 host CPUs"; counts of one are
// singular wherever the plan prints them.
TEST(VtpuCliPlanTest, OneCorePlanSaysOneVirtualCore) {
  const CliRun r =
      run_cli("plan " + model_path("mlp.json") + " --mesh 1x1 --hardware " + fixed_profile());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 virtual core"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("1 virtual cores"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" 1 cores"), std::string::npos) << r.output;
  // A 1-core plan file against --cores 2: "(1 core; expected --cores 1, ...)".
  const std::string one = temp_file("vtpu_cli_one_core_plan.json",
                                    R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["data"], "shape": [1]}, "strategy": {"name": "single core"}})j");
  expect_failure("train mlp --cores 2 --plan " + one, 2, {"data=1", "--cores 1"});
  expect_failure("train transformer --mesh 1x1 --cores 2", 2, {"--cores 2", "1x1"});
}

// Regression: the footer of an FSDP plan named `vtpu train mlp --plan`; each strategy's footer
// names the command built for it, and that command runs it.
TEST(VtpuCliPlanTest, FooterNamesTheCommandThatRunsTheChosenStrategy) {
  const std::string mlp = "plan " + model_path("mlp.json") + " --mesh 2x4 --hardware v5e";
  for (const auto& [strategy, command] : {std::pair{"fsdp(data,model)", "vtpu train fsdp"},
                                          {"dp(data,model)", "vtpu train mlp"},
                                          {"dp(data)+tp(model)", "vtpu train mlp"},
                                          {"tp(data,model)", "vtpu train mlp"}}) {
    SCOPED_TRACE(strategy);
    const CliRun r = run_cli(mlp + " --strategy \"" + strategy + "\"");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string(command) + " --plan"), std::string::npos) << r.output;
    for (const char* other : {"vtpu train mlp --plan", "vtpu train fsdp --plan"}) {
      if (other != std::string(command) + " --plan") {
        EXPECT_EQ(r.output.find(other), std::string::npos) << other << "\n" << r.output;
      }
    }
  }
  const CliRun t = run_cli("plan " + model_path("transformer.json") +
                           " --mesh 2x4 --strategy \"dp(data)+tp(model)\"");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("vtpu train transformer --plan"), std::string::npos) << t.output;
  // The command the FSDP footer names runs the emitted plan.
  VTPU_REQUIRE_DIGITS();
  const std::string out = test_temp_path("vtpu_cli_fsdp_footer_plan.json");
  const CliRun e = run_cli("plan " + model_path("mlp.json") +
                           " --mesh 2 --batch 16 --strategy \"fsdp(x)\" --emit " + out);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("vtpu train fsdp --plan " + out), std::string::npos) << e.output;
  const CliRun run = run_cli("train fsdp --steps 2 --log-every 0 --plan " + out);
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

// Regression: an unknown --hardware name and a mesh of more axes of size > 1 than the planner
// takes exited 1, where they are usage errors (exit 2).
TEST(VtpuCliPlanTest, UnknownHardwareAndTooManyMeshAxesAreUsageErrors) {
  // The error names the bad profile and the shipped ones to choose from.
  const std::vector<std::string> names = {"'v6e'", "this_machine", "v4", "v5e", "v5p", ".json"};
  expect_failures({
      {"plan " + model_path("mlp.json") + " --hardware v6e", 2, names},
      {"reshard --shape 4 --from \"P()\" --to \"P()\" --explain --hardware v6e", 2, names},
      {"bench kernel matmul --hardware v6e", 2, names},
      // A .json path is read when the command runs: a missing file is an error of the run, exit 1.
      {"plan " + model_path("mlp.json") + " --hardware /nonexistent-dir/p.json",
       1,
       {"/nonexistent-dir/p.json"}},
      {"plan " + model_path("mlp.json") + " --mesh 2x2x2x2x2x2x2x2x2",
       2,
       {"--mesh 2x2x2x2x2x2x2x2x2", "9 axes", "8"}},
  });
  // Axes of size 1 do not count: nine axes, one of size 2, plan.
  const CliRun ok = run_cli("plan " + model_path("mlp.json") + " --mesh 2x1x1x1x1x1x1x1x1");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// Regression: 65,536 layers on 8 axes of size 2 (each within its limit) ran
// over 10 minutes and 5 GB with no output. Strategies x layers above the planner's budget
// (kMaxPlanLayerEvaluations, 2,000,000) is a usage error, exit 2, as 9 such axes are; the model
// file is read first, so the message names its layer count.
TEST(VtpuCliPlanTest, StrategiesTimesLayersBeyondTheBudgetIsAUsageError) {
  std::string layers;
  for (int i = 0; i < 305; ++i) {
    layers += std::string(i ? "," : "") + R"({"name": "l)" + std::to_string(i) +
              R"(", "kind": "dense", "in": 8, "out": 8})";
  }
  const std::string model =
      temp_file("chain305.json", R"({"name": "chain", "batch": 256, "layers": [)" + layers + "]}");
  const CliRun r = run_cli("plan " + model + " --mesh 2x2x2x2x2x2x2x2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("vtpu: usage error: 6561 strategies x 305 layers = 2001105 layer "
                          "evaluations exceeds the planner's budget of 2000000 (expected at most "
                          "304 layers on a mesh with 8 axes of size > 1, or fewer such axes)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("strategy "), std::string::npos) << "no table: " << r.output;
  // The same model on 2x4 (9 strategies x 305 layers) plans.
  const CliRun ok = run_cli("plan " + model + " --mesh 2x4");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("WINNER"), std::string::npos) << ok.output;
  // --help states the budget.
  const CliRun help = run_cli("plan --help");
  EXPECT_NE(help.output.find("at most 2000000"), std::string::npos) << help.output;
}

// Regression: --hbm-bytes 0 silently meant the profile's HBM (train mlp
// refuses it), --emit "" wrote nothing and exited 0, a NUL in a profile's name cut the table's
// header, a model named transformer of other layers was told to expect "vocab 0", and
// `train mlp --plan P --batch 63` said "cannot be split evenly across 2 cores" (exit 1) where
// --batch 2 named the plan's batch (exit 2).
TEST(VtpuCliPlanTest, ZeroHbmEmptyEmitControlCharactersInProfileNamesAndBatchChecks) {
  const std::string mlp = model_path("mlp.json");
  expect_failure("plan " + mlp + " --hbm-bytes 0", 2, {"--hbm-bytes 0"});
  expect_failure("plan " + mlp + " --emit ''", 2, {"--emit", "empty"});
  nlohmann::json named = vtpu::HardwareProfile::get("v5e").to_json();
  named["name"] = std::string("a\0b", 3);
  const std::string profile = temp_file("nul_name.json", named.dump());
  const CliRun nul = run_cli("plan " + mlp + " --hardware " + profile);
  EXPECT_EQ(nul.exit_code, 1) << nul.output;
  EXPECT_NE(nul.output.find("hardware profile name \"a\\u0000b\" has a control character "
                            "(expected none)"),
            std::string::npos)
      << nul.output;
  const std::string fake = temp_file(
      "fake_transformer.json",
      R"({"name": "transformer", "batch": 16, "layers": [{"name": "fc1", "kind": "dense", "in": )"
      R"(64, "out": 64}]})");
  const CliRun f = run_cli("plan " + fake);
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("has layers[0] 'fc1' dense 64 -> 64 (expected 'embed' embedding vocab V, "
                          "d_model 64, positions 1), which vtpu train transformer does not run"),
            std::string::npos)
      << f.output;
  const std::string plan = test_temp_path("vtpu_cli_plan_batch_order.json");
  ASSERT_EQ(run_cli("plan " + mlp + " --mesh 2x4 --emit " + plan).exit_code, 0);
  for (const char* batch : {"63", "2"}) {
    SCOPED_TRACE(batch);
    expect_failure("train mlp --steps 1 --plan " + plan + " --batch " + batch, 2,
                   {plan, "batch of 64", batch});
  }
}

// --pad-arrays: dp of the digits MLP (64 -> 64 -> 10, 4810 parameters) on 8 cores, batch 8 rows a
// core. Logical: parameters and gradients 2 x 4810 x 4 + activations 8 x (64 + 64 + 10) x 4 =
// 42,896 bytes. Padded: W1 f32[64,64] and W2 f32[64,10] take 64 x 128 floats, b1 and b2 one
// T(1024) tile each, 73,728 bytes twice, and the three activations one (8,128) tile each: 159,744.
TEST(VtpuCliPlanTest, PadArraysChoosesPaddedOrLogicalHbmEstimates) {
  const std::string dp =
      "plan " + model_path("mlp.json") + " --mesh 1x8 --strategy 'dp(model)' --json";
  EXPECT_EQ(json_of(dp)["plan"]["estimate"]["hbm_bytes_per_core"], 159744);
  EXPECT_EQ(json_of(dp + " --pad-arrays true")["plan"]["estimate"]["hbm_bytes_per_core"], 159744);
  EXPECT_EQ(json_of(dp + " --pad-arrays false")["plan"]["estimate"]["hbm_bytes_per_core"], 42896);
  expect_failure(dp + " --pad-arrays 3", 2, {"--pad-arrays", "3"});
}

TEST(VtpuCliPlanTest, NoFitFailsWithTheSmallestHbmThatWouldFit) {
  expect_failure("plan " + model_path("mlp.json") + " --mesh 1x8 --hbm-bytes 1K", 1,
                 {"1024 bytes", "fsdp(model)"});
}

// Regression: vtpu plan bounded each --mesh size but not their product
// (--mesh 4096x4096 planned 16,777,216 cores; --emit wrote plans vtpu train cannot run), and
// --mesh " 2x 2" and +2x2 were accepted (std::stoll skips spaces, takes a sign), and --axes ",y"
// said "names 1 axes" (CLI11 dropped the empty name).
TEST(VtpuCliPlanTest, MeshProductIsBoundedAndMeshAndAxesAreParsedStrictly) {
  const std::string plan = "plan " + model_path("transformer.json");
  // Usage errors, exit 2, as in vtpu reshard.
  expect_failure(plan + " --mesh 4096x4096", 2, {"--mesh 4096x4096", "16777216", "65536"});
  expect_failure(plan + " --mesh 4096x4096x4096x4096x4096x4096", 2, {"--mesh", "2^62", "65536"});
  const std::string out = test_temp_path("vtpu_cli_plan_2048.json");
  std::filesystem::remove(out);
  expect_failure(plan + " --mesh 2048 --emit " + out, 2, {"--mesh 2048", "2048", "1024"});
  EXPECT_FALSE(std::filesystem::exists(out));
  for (const char* mesh : {"\" 2x 2\"", "+2x2", "2x-2", "\"2x2 \"", "0x2", "2x4097", "2x"}) {
    SCOPED_TRACE(mesh);
    std::string unquoted = mesh;  // as the shell passes it
    std::erase(unquoted, '"');
    expect_failure(plan + " --mesh " + mesh, 2, {"--mesh", "'" + unquoted + "'"});
    expect_failure(
        std::string("reshard --shape 4 --from \"P()\" --to \"P()\" --explain --mesh ") + mesh, 2,
        {"--mesh", "'" + unquoted + "'"});
  }
  expect_failures({
      {plan + " --mesh 2x2 --axes \",y\"", 2, {"--axes ',y'", "axis 0"}},
      {plan + " --mesh 2x2 --axes \"x,\"", 2, {"--axes 'x,'", "axis 1"}},
      {"reshard --mesh 2x2x2 --axes \"x,,z\" --shape 4 --from \"P()\" --to \"P()\" --explain",
       2,
       {"--axes 'x,,z'", "axis 1"}},
      {plan + " --mesh 2x2 --axes a,b,c", 2, {"--axes", "3 axes", "--mesh 2x2"}},
      // Regression: "a),b" gave the candidate "dp(a))+tp(b)", " a" kept its space;
      // axis names are identifiers ([A-Za-z_][A-Za-z0-9_]*), a usage error otherwise.
      {plan + " --mesh 2x2 --axes \"a),b\"", 2, {"--axes 'a),b'", "<a)>"}},
      {plan + " --mesh 2x2 --axes \"x, b\"", 2, {"--axes 'x, b'", "< b>"}},
      {plan + " --mesh 2x2 --axes \"a+b,c\"", 2, {"--axes 'a+b,c'", "<a+b>"}},
      {"reshard --mesh 2x2 --axes \"dp(x),y\" --shape 4 --from \"P()\" --to \"P()\" --explain",
       2,
       {"--axes 'dp(x),y'", "<dp(x)>"}},
      // Regression: these malformed flag values exited 1, not 2 (usage).
      {plan + " --mesh 2x2 --axes a,a", 2, {"--axes 'a,a'", "'a' twice"}},
      {"reshard --mesh 2x2 --axes a,a --shape 4 --from \"P()\" --to \"P()\" --explain",
       2,
       {"--axes 'a,a'", "'a' twice"}},
      {plan + " --mesh 2x4 --hbm-bytes lots", 2, {"'lots'"}},
  });
  const CliRun ok = run_cli(plan + " --mesh 2x2 --axes a,b --hardware v5e");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("Mesh(a=2, b=2)"), std::string::npos) << ok.output;
}

TEST(VtpuCliPlanTest, MalformedModelFileNamesTheField) {
  const std::string path = temp_file(
      "vtpu_cli_bad_model.json",
      R"({"name": "m", "batch": 8, "layers": [{"name": "fc", "kind": "dense", "in": 4}]})");
  expect_failure("plan " + path + " --mesh 1x2", 1, {"layers[0] 'fc'.out"});
  const std::string broken = temp_file("vtpu_cli_broken_model.json", "{\n\"name\": \"m\",\n}");
  expect_failure("plan " + broken + " --mesh 1x2", 1, {"line 3"});
}

// Regression: with --batch 63 on 2x4 every "cannot run: batch 63 does
// not split" row had runnable: true and step_seconds 0. Rows that cannot run are now
// runnable: false with null costs; the tp(data,model) winner (the batch is not split) is costed.
TEST(VtpuCliPlanTest, PlanJsonRowsThatCannotRunAreNotRunnableAndNotCosted) {
  const CliRun r = run_cli("plan " + model_path("mlp.json") + " --mesh 2x4 --batch 63 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  int cannot = 0, runnable = 0;
  for (const nlohmann::json& c : j["candidates"]) {
    SCOPED_TRACE(c.dump());
    const bool cannot_run = c["why_lost"].get<std::string>().starts_with("cannot run");
    EXPECT_EQ(c["runnable"].get<bool>(), !cannot_run);
    if (!c["feasible"].get<bool>()) {
      ++cannot;
      for (const char* key : {"step_seconds", "compute_seconds", "comm_seconds",
                              "hbm_bytes_per_core", "comm_bytes_per_core"}) {
        EXPECT_TRUE(c[key].is_null()) << key;
      }
    } else {
      ++runnable;
      EXPECT_GT(c["step_seconds"].get<double>(), 0.0);
      EXPECT_GT(c["hbm_bytes_per_core"].get<uint64_t>(), 0u);
    }
  }
  EXPECT_GT(cannot, 0);
  EXPECT_GT(runnable, 0);
  EXPECT_EQ(j["candidates"][0]["strategy"], "tp(data,model)");
  EXPECT_EQ(j["plan"]["strategy"]["name"], "tp(data,model)");
}

// Regression: --json had no rows after the last layer, which the table prints:
// "(final all-reduce)" of tp's partial logits, "(gradient bucket)" of data parallel, "(loss
// all-reduce)" of FSDP without data axes. Every candidate now has "layers" and "after_layers",
// and their comm adds up to the candidate's totals.
TEST(VtpuCliPlanTest, PlanJsonRowsAddUpToEachCandidatesComm) {
  // --any-strategy: every strategy costed, also those vtpu train does not run (FSDP with tp).
  for (const char* mesh : {"2x4 --any-strategy", "1x8 --any-strategy", "8"}) {
    SCOPED_TRACE(mesh);
    const CliRun r = run_cli("plan " + model_path("mlp.json") + " --mesh " + mesh + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    std::set<std::string> after_names;
    for (const nlohmann::json& c : j["candidates"]) {
      SCOPED_TRACE(c["strategy"].get<std::string>());
      if (!c["feasible"].get<bool>()) {
        EXPECT_TRUE(c["layers"].is_null());
        EXPECT_TRUE(c["after_layers"].is_null());
        continue;
      }
      ASSERT_EQ(c["layers"].size(), 3u);
      EXPECT_EQ(c["layers"][0]["name"], "fc1");
      EXPECT_EQ(c["layers"][2]["name"], "fc2");
      double bytes = 0, seconds = 0;
      for (const char* key : {"layers", "after_layers"}) {
        for (const nlohmann::json& row : c[key]) {
          bytes += row["comm_bytes_per_core"].get<double>();
          seconds += row["comm_seconds"].get<double>();
        }
      }
      for (const nlohmann::json& row : c["after_layers"]) {
        after_names.insert(row["name"].get<std::string>());
        EXPECT_TRUE(row["sharding"].is_null());
        EXPECT_EQ(row["compute_seconds"].get<double>(), 0.0);
      }
      EXPECT_NEAR(bytes, c["comm_bytes_per_core"].get<double>(), 1e-6);
      EXPECT_NEAR(seconds, c["comm_seconds"].get<double>(),
                  1e-12 + 1e-9 * c["comm_seconds"].get<double>());
    }
    if (std::string(mesh) == "8") {
      // 1-D: dp(x) has a gradient bucket, fsdp(x) a loss all-reduce, tp(x) (Megatron's fc2 row,
      // partial logits) a final all-reduce.
      EXPECT_EQ(after_names, (std::set<std::string>{"(final all-reduce)", "(gradient bucket)",
                                                    "(loss all-reduce)"}));
    }
  }
  // tp(x) on 8 cores: the all-reduce of fc2's partial (64, 10) f32 logits, 2560 bytes, sends
  // 2 x 7/8 x 2560 = 4480 bytes per core (ring).
  const CliRun r =
      run_cli("plan " + model_path("mlp.json") + " --mesh 8 --strategy 'tp(x)' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const nlohmann::json& c : j["candidates"]) {
    if (c["strategy"] != "tp(x)") continue;
    ASSERT_EQ(c["after_layers"].size(), 1u) << c.dump();
    const nlohmann::json& row = c["after_layers"][0];
    EXPECT_EQ(row["name"], "(final all-reduce)");
    EXPECT_EQ(row["in"], "P");
    EXPECT_EQ(row["out"], "R");
    EXPECT_EQ(row["reshard_before"], "all_reduce");
    EXPECT_NEAR(row["comm_bytes_per_core"].get<double>(), 4480, 1e-9);
  }
}

// The line of `output` that starts with `prefix` ("" when none).
std::string line_starting(const std::string& output, const std::string& prefix) {
  size_t pos = 0;
  while (pos < output.size()) {
    const size_t end = std::min(output.find('\n', pos), output.size());
    if (output.compare(pos, prefix.size(), prefix) == 0) return output.substr(pos, end - pos);
    pos = end + 1;
  }
  return {};
}

// `vtpu reshard ARGS --explain`'s output, its header line and the row of step `step`.
struct ExplainTable {
  std::string output, header, row;
};
ExplainTable explain_table(const std::string& args, int step) {
  const CliRun r = run_cli("reshard " + args + " --explain");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ExplainTable t{r.output, line_starting(r.output, "step  op"),
                 line_starting(r.output, "   " + std::to_string(step) + "  ")};
  EXPECT_FALSE(t.header.empty()) << r.output;
  EXPECT_FALSE(t.row.empty()) << r.output;
  return t;
}

// Regression: long axis names and group counts ran into the next column
// of `reshard --explain`, a 12-year estimate printed in ms, and counts of 1 were plural.
TEST(VtpuCliPlanTest, ReshardExplainColumnsFitAndTimesAreReadable) {
  // Step 3 permutes over both axes: "(data,model)" (12 characters) widens "axes".
  const ExplainTable t = explain_table(
      "--mesh 2x4 --axes data,model --shape 8,8 --from \"P(('data','model'))\" --to "
      "\"P(None,('data','model'))\"",
      3);
  // Each column starts where its header does.
  EXPECT_EQ(t.row.find("(data,model) "), t.header.find("axes")) << t.output;
  EXPECT_EQ(t.row.find("1x8 "), t.header.find("groups")) << t.output;
  EXPECT_EQ(t.row.find("6 pairs "), t.header.find("dims")) << t.output;

  const ExplainTable w =
      explain_table("--mesh 4096x16 --shape 4096,16 --from \"P('x','y')\" --to \"P(None,'y')\"", 1);
  const size_t groups = w.row.find("16x4096 ");
  EXPECT_EQ(groups, w.header.find("groups")) << w.output;
  EXPECT_EQ(w.row.find("0 ", groups + 8), w.header.find("dims")) << w.output;
  EXPECT_NE(w.output.find("total: 1 step, "), std::string::npos) << w.output;

  // All-gathering a 2^30 x 2^30 f32 array (4 EiB) over 4 cores: years, not 3.9e11 ms.
  const CliRun huge = run_cli(
      "reshard --explain --mesh 4 --shape 1073741824,1073741824 --from \"P('x')\" --to \"P()\"");
  ASSERT_EQ(huge.exit_code, 0) << huge.output;
  const std::string total = line_starting(huge.output, "total: ");
  EXPECT_TRUE(total.ends_with(" years")) << huge.output;
  EXPECT_EQ(total.find(" ms"), std::string::npos) << huge.output;
}

// Counts of one are singular wherever a report prints them.
TEST(VtpuCliTest, CountsOfOneAreSingular) {
  VTPU_REQUIRE_DIGITS();
  for (const std::string args : {"train fsdp --cores 1 --steps 1 --log-every 0",
                                 "train mlp --cores 1 --steps 1 --log-every 0"}) {
    SCOPED_TRACE(args);
    const CliRun r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_names(r.output, {"1 virtual core", "1 step"});
    for (const char* plural : {" 1 cores", " 1 steps", "1 virtual cores", "1 micro-batches"}) {
      EXPECT_EQ(r.output.find(plural), std::string::npos) << plural << "\n" << r.output;
    }
  }
}

// On v5e (a TPU profile: links of 4.5e10 B/s each way, 1 us a hop) the plan is priced on the torus.
TEST(VtpuCliPlanTest, ReshardExplainOnV5e) {
  // The all-gather over z of (4, 2) f32 blocks: B = 64 bytes over n = 2 on one torus ring:
  // 1 us (one hop) + 1/(2 x 4.5e10) x 1/2 x 64 s.
  const nlohmann::json j = json_of(
      "reshard --mesh 2x2x2 --axes x,y,z --shape 8,8 --from \"P('z',('x','y'))\" --to "
      "\"P(None,('x','y'))\" --explain --hardware v5e --json");
  EXPECT_EQ(j["hardware"], "v5e");
  EXPECT_EQ(j["comm_bytes_per_core"], 32);
  EXPECT_NEAR(j["comm_seconds"].get<double>(), 1e-6 + 1.0 / (2 * 4.5e10) * 0.5 * 64, 1e-12);
  // On 1x8 the size-1 axis x adds no torus dimension, so gathering over (x, y) is the one ring of
  // y: 7 us + (7/8) x 67108864 / 9e10 s (not 2x4's 333.2 us).
  for (const char* from : {"P('y')", "P(('x','y'))"}) {
    SCOPED_TRACE(from);
    const nlohmann::json g = json_of(
        std::string("reshard --explain --json --hardware v5e --mesh 1x8 --shape 16777216 --to "
                    "\"P()\" --from \"") +
        from + "\"");
    EXPECT_EQ(g["comm_bytes_per_core"], 58720256);
    EXPECT_NEAR(g["comm_seconds"].get<double>(), 7e-6 + 7.0 / 8 * 67108864 / 9e10, 1e-9);
  }
  expect_failures(
      {{"reshard --mesh 2 --shape 8 --from \"P('x')\" --to \"P()\" --explain --hardware v5e "
        "--alpha 1",
        2,
        {"--hardware", "--alpha"}},
       {"reshard --mesh 4 --shape 8,8 --from \"P('x')\" --to \"P()\" --alpha 1e-5 --beta 1e-9 "
        "--hardware v5e",
        2,
        {"--hardware", "--alpha"}}});
}

// Regression: the default reshard printed a 1,465-character "cost model:" line (every fit, every
// curve, and kernel rates a reshard does not use); --verbose keeps it. And the all-to-all's dims
// read "1->0" where x moves from dimension 0 to 1.
TEST(VtpuCliPlanTest, ReshardCostLineIsShortAndAllToAllDimsNameSplitAndConcat) {
  const std::string args =
      "reshard --explain --mesh 4 --shape 8,8 --from \"P('x',None)\" --to "
      "\"P(None,'x')\" --hardware " +
      fixed_profile();
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string cost = line_starting(r.output, "cost model: ");
  // The profile, and the oversubscription of 4 cores on its 2 host CPUs.
  expect_names(cost, {"fixed_host", "x 2"});
  EXPECT_LT(cost.size(), 200u) << cost;
  for (const char* detail : {"alpha", "measured curve", "compute", "working sets"}) {
    EXPECT_EQ(cost.find(detail), std::string::npos) << detail << "\n" << cost;
  }
  // Each core splits its (2, 8) block along dimension 1 into 4 pieces and concatenates the
  // pieces it receives along dimension 0: (8, 2) blocks, x now on dimension 1.
  const nlohmann::json step = json_of(args + " --json")["steps"][0];
  EXPECT_EQ(step["op"], "all_to_all");
  EXPECT_EQ(step["split_dim"], 1);
  EXPECT_EQ(step["dim"], 0);
  const std::string header = line_starting(r.output, "step  op");
  const std::string row = line_starting(r.output, "   1  all_to_all");
  EXPECT_EQ(row.find("split 1, concat 0 "), header.find("dims")) << r.output;
  EXPECT_EQ(row.find("->"), std::string::npos) << row;
  const CliRun v = run_cli(args + " --verbose");
  ASSERT_EQ(v.exit_code, 0) << v.output;
  const std::string full = line_starting(v.output, "cost model: ");
  expect_names(full, {"all_gather", "alpha", "x 2"});
  EXPECT_EQ(full.find("compute"), std::string::npos) << full;  // a reshard prices no kernels
  // --json: the same texts without their label.
  EXPECT_EQ(json_of(args + " --json")["cost_model"],
            cost.substr(std::string("cost model: ").size()));
  EXPECT_EQ(json_of(args + " --verbose --json")["cost_model"],
            full.substr(std::string("cost model: ").size()));
  // vtpu plan: the summary stays short; --verbose lists the kernel rates.
  const std::string plan =
      "plan " + model_path("mlp.json") + " --mesh 8 --hardware " + fixed_profile();
  const CliRun p = run_cli(plan);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::string plan_cost = line_starting(p.output, "cost model: ");
  expect_names(plan_cost, {"fixed_host", "x 4"});
  EXPECT_LT(plan_cost.size(), 250u) << plan_cost;
  const CliRun pv = run_cli(plan + " --verbose");
  ASSERT_EQ(pv.exit_code, 0) << pv.output;
  EXPECT_NE(line_starting(pv.output, "cost model: ").find("GEMM"), std::string::npos) << pv.output;
}

// Regression: --strategy 'tp(model)+dp(data)' was "not a candidate" because the planner names it
// 'dp(data)+tp(model)'; the roles may come in any order.
TEST(VtpuCliPlanTest, StrategyRolesMayComeInAnyOrder) {
  const std::string out = test_temp_path("vtpu_cli_plan_role_order.json");
  std::filesystem::remove(out);
  const std::string args =
      "plan " + model_path("mlp.json") + " --mesh 2x4 --strategy 'tp(model)+dp(data)'";
  const nlohmann::json j = json_of(args + " --json");
  EXPECT_EQ(j["chosen"], "dp(data)+tp(model)");
  EXPECT_EQ(j["chosen_by"], "--strategy");
  const CliRun r = run_cli(args + " --emit " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  ASSERT_TRUE(in) << out;
  EXPECT_EQ(nlohmann::json::parse(in)["strategy"]["name"], "dp(data)+tp(model)");
  // Inside a role the order is the mesh's: tp(model,data) is no candidate of Mesh(data, model).
  expect_failure("plan " + model_path("mlp.json") + " --mesh 2x4 --strategy 'tp(model,data)'", 2,
                 {"--strategy", "'tp(model,data)'"});
}

// Regression: with no runnable strategy the table ended "no strategy fits" and a run hint, and the
// error gave the first row's reason of 6,561 (the batch) and listed 1,697 names in 51,000
// characters. The error now counts the reasons, as the table's rows do, in under 1000 characters.
TEST(VtpuCliPlanTest, NothingRunnableSaysWhyWithCountsAndNoRunHint) {
  const SplitRun r = run_cli_split("plan " + model_path("transformer.json") +
                                   " --mesh 2x2x2x2x2x2x2x2 --axes a,b,c,d,e,f,g,h");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out.find("no strategy fits"), std::string::npos);
  EXPECT_EQ(r.out.find("--emit PLAN.json"), std::string::npos);  // no run hint
  EXPECT_NE(r.out.find("cannot run"), std::string::npos);
  const std::string error = line_starting(r.err, "vtpu: error: ");
  // 6561 = 3^8 candidates: 1792 + 1792 + 1120 + 1857; 1693 feasible with --any-strategy.
  expect_names(error, {"'transformer'", "6561", "1792", "batch 16", "64 data x fsdp",
                       "32 data x fsdp", "1120", "'blocks.0.attn'", "'heads'", "16 tensor cores",
                       "1857", "1693", "--any-strategy"});
  EXPECT_LT(error.size(), 1000u) << error;
  // The longest names (29 characters) keep the columns: each row's HBM column ends where the
  // header's does.
  const std::string header = line_starting(r.out, "strategy ");
  const std::string row = line_starting(r.out, "dp(f,g,h)+fsdp(a)+tp(b,c,d,e) ");
  ASSERT_FALSE(row.empty());
  EXPECT_EQ(row.find(" - ") + 1, header.find("HBM/core") + 7) << header << "\n" << row;
  // Runnable strategies that do not fit: the HBM limit is named, and still no run hint.
  const CliRun tight =
      run_cli("plan " + model_path("mlp.json") + " --mesh 1x8 --hardware v5e --hbm-bytes 1K");
  EXPECT_EQ(tight.exit_code, 1) << tight.output;
  EXPECT_NE(tight.output.find("1.00 KiB"), std::string::npos) << tight.output;
  EXPECT_EQ(tight.output.find("--emit PLAN.json"), std::string::npos) << tight.output;
}

// Regression: the transformer on 2x4 under 3 MiB fits only with FSDP, which `vtpu train
// transformer` cannot run; the error said "fits on no strategy" and hid them.
TEST(VtpuCliPlanTest, NoFitNamesTheStrategiesThatWouldFitButCannotRun) {
  expect_failure(
      "plan " + model_path("transformer.json") + " --mesh 2x4 --hardware v5e --hbm-bytes 3M", 1,
      {"3.00 MiB", "2 strategies", "fsdp(data,model)", "2.73 MiB", "--any-strategy"});
}

// ---- vtpu plan --emit, then vtpu train ... --plan: every emitted plan runs -------------------

// Runs `vtpu plan MODEL --emit` and returns the plan file's JSON (empty on failure).
nlohmann::json emit_plan(const std::string& model, const std::string& mesh,
                         const std::string& extra, const std::string& out) {
  std::filesystem::remove(out);
  const CliRun r = run_cli("plan " + model_path(model.c_str()) + " --mesh " + mesh + " --emit " +
                           out + " " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  if (!in) return {};
  return nlohmann::json::parse(in);
}

int64_t plan_cores(const nlohmann::json& plan) {
  int64_t cores = 1;
  for (const auto& d : plan["mesh"]["shape"]) cores *= d.get<int64_t>();
  return cores;
}

// Checks a `vtpu train ... --plan --json` run: exit 0, and every step's loss within 1e-4
// relative of the single-core run of the same process (recomputed here from the two loss lists,
// not read from the command's verdict). Returns the JSON (null on failure).
nlohmann::json expect_runs_like_one_core(const std::string& args, const char* losses_key,
                                         const char* reference_key) {
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  if (r.exit_code != 0) return {};
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const nlohmann::json& losses = j.at(nlohmann::json::json_pointer(losses_key));
  const nlohmann::json& ref = j.at(nlohmann::json::json_pointer(reference_key));
  EXPECT_EQ(losses.size(), ref.size()) << args;
  EXPECT_GT(losses.size(), 0u);
  for (size_t s = 0; s < std::min(ref.size(), losses.size()); ++s) {
    const double a = losses[s], b = ref[s];
    EXPECT_LE(std::abs(a - b), 1e-4 * std::abs(b)) << args << " step " << s;
  }
  return j;
}

// The mlp model on 1x8, 2x4, 8x1 and 1x2 (v5e; 1x8 and 2x4 also on the fixed host profile):
// whatever wins runs with `vtpu train mlp --plan` and matches one core. On v5e, 1x8 is Megatron
// tensor parallel.
TEST(VtpuCliPlanTest, EveryEmittedMlpPlanRunsAndMatchesOneCore) {
  VTPU_REQUIRE_DIGITS();
  const std::string out = test_temp_path("vtpu_cli_mlp_emitted.json");
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"1x8", "v5e"}, {"2x4", "v5e"},   {"8x1", "v5e"},
      {"1x2", "v5e"}, {"1x8", "fixed"}, {"2x4", "fixed"}};
  for (const auto& [mesh, hw] : cases) {
    const std::string hardware = std::string(hw) == "fixed" ? fixed_profile() : std::string(hw);
    const nlohmann::json plan =
        emit_plan("mlp.json", mesh, "--batch 32 --hardware " + hardware, out);
    ASSERT_FALSE(plan.is_null()) << mesh;
    EXPECT_EQ(plan["estimate"]["batch"], 32);
    if (std::string(mesh) == "1x8" && std::string(hw) == "v5e") {
      EXPECT_EQ(plan["strategy"]["name"], "tp(model)");
    }
    SCOPED_TRACE(std::string(mesh) + " " + hw + " " + plan["strategy"]["name"].dump());
    const nlohmann::json j = expect_runs_like_one_core("train mlp --steps 4 --json --plan " + out,
                                                       "/run/losses", "/reference/losses");
    if (!j.is_null()) {
      EXPECT_EQ(j["config"]["cores"], plan_cores(plan));
    }
  }
}

// Every strategy the planner can give the mlp model on a 2-D mesh, written by hand so that each
// runs whatever the cost model prefers today: data parallel over both axes, Megatron over both,
// data x tensor either way round, and FSDP over the whole mesh.
TEST(VtpuCliPlanTest, EveryRunnableMlpStrategyRuns) {
  VTPU_REQUIRE_DIGITS();
  const std::vector<std::pair<std::string, std::string>> strategies = {
      {"dp(data,model)", R"j({"data": ["data", "model"]})j"},
      {"tp(data,model)", R"j({"tensor": ["data", "model"]})j"},
      {"dp(data)+tp(model)", R"j({"data": "data", "tensor": "model"})j"},
      {"dp(model)+tp(data)", R"j({"data": "model", "tensor": "data"})j"},
      {"fsdp(data,model)", R"j({"fsdp": ["data", "model"]})j"}};
  for (const auto& [name, roles] : strategies) {
    const std::string path = temp_file("vtpu_cli_mlp_strategy.json",
                                       R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
        "mesh": {"axes": ["data", "model"], "shape": [2, 4]}, "strategy": )j" +
                                           roles + R"j(, "estimate": {"batch": 16}})j");
    SCOPED_TRACE(name);
    const nlohmann::json plan = nlohmann::json::parse(std::ifstream(path));
    const nlohmann::json j = expect_runs_like_one_core("train mlp --steps 4 --json --plan " + path,
                                                       "/run/losses", "/reference/losses");
    if (!j.is_null()) {
      EXPECT_EQ(j["config"]["cores"], plan_cores(plan));
      EXPECT_EQ(j["config"]["global_batch"], 16);  // the plan's
      // Every mode with data replicas reports them (FSDP holds none).
      if (name.starts_with("fsdp")) {
        EXPECT_FALSE(j.contains("replicas_identical")) << j;
      } else {
        EXPECT_EQ(j["replicas_identical"], true) << j;
        EXPECT_TRUE(j["replica_mismatch"].is_null()) << j;
      }
    }
  }
  // What the digits MLP cannot run is refused with the reason, before any training.
  const std::string hsdp = temp_file("vtpu_cli_mlp_hsdp.json",
                                     R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["data", "model"], "shape": [2, 4]},
      "strategy": {"name": "dp(data)+fsdp(model)", "data": "data", "fsdp": "model"}})j");
  expect_failure("train mlp --plan " + hsdp, 1, {"'dp(data)+fsdp(model)'"});
  const std::string dp = temp_file("vtpu_cli_mlp_dp.json",
                                   R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["data", "model"], "shape": [2, 4]}, "strategy": {"data": ["data", "model"]}})j");
  expect_failure("train mlp --cores 4 --plan " + dp, 2,
                 {"--cores 4", dp, "data=2 model=4", "--cores 8"});
  // A flag --plan would ignore is a usage error (exit 2). Regression: --estimate-from B with
  // --plan A ran A against A's estimate, ignoring B without a word.
  expect_failure("train mlp --plan " + dp + " --memory-profile " + test_temp_path("x.prof"), 2,
                 {"--memory-profile", "--plan"});
  expect_failure("train mlp --plan " + dp + " --estimate-from " + hsdp, 2,
                 {"--estimate-from", "--plan"});
}

// The last word of the text report's line on the replicas ("yes" when identical), "" without one.
std::string replica_verdict(const std::string& text) {
  std::string verdict;
  for (const auto& f : fields_of(text)) {
    if (std::find(f.begin(), f.end(), "replicas") != f.end()) verdict = f.back();
  }
  return verdict;
}

// Regression: the data-parallel plan path printed no replica verdict, in text or JSON, though it
// keeps a replica of the model on every core.
TEST(VtpuCliPlanTest, TrainMlpDataParallelPlanReportsTheReplicas) {
  VTPU_REQUIRE_DIGITS();
  const std::string out = test_temp_path("vtpu_cli_mlp_dp8.json");
  const CliRun p =
      run_cli("plan " + model_path("mlp.json") + " --mesh 8 --strategy 'dp(x)' --emit " + out);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const CliRun r = run_cli("train mlp --steps 2 --plan " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(replica_verdict(r.output), "yes") << r.output;
  const CliRun rj = run_cli("train mlp --steps 2 --json --plan " + out);
  ASSERT_EQ(rj.exit_code, 0) << rj.output;
  const nlohmann::json j = nlohmann::json::parse(rj.output);
  EXPECT_EQ(j["mode"], "data_parallel");
  EXPECT_EQ(j["replicas_identical"], true);
  EXPECT_TRUE(j["replica_mismatch"].is_null());
  EXPECT_EQ(j["config"]["cores"], 8);
  EXPECT_FALSE(j["run"].contains("replicas_identical"));  // only at the top
  // train fsdp checks the replicas of its data-parallel comparison run too.
  const CliRun f = run_cli("train fsdp --cores 2 --steps 2 --batch 8");
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_EQ(replica_verdict(f.output), "yes") << f.output;
  const CliRun fj = run_cli("train fsdp --cores 2 --steps 2 --batch 8 --json");
  ASSERT_EQ(fj.exit_code, 0) << fj.output;
  const nlohmann::json jf = nlohmann::json::parse(fj.output);
  EXPECT_EQ(jf["replicas_identical"], true);  // at the top, as in every trainer
  EXPECT_TRUE(jf["replica_mismatch"].is_null());
  EXPECT_FALSE(jf["data_parallel"].contains("replicas_identical"));
}

// Regression: hand-edited plans whose layers omitted or reordered
// the model's, named Megatron shardings under FSDP, or whose parameter_shapes were not the
// model's, ran. Each is refused before training (exit 1, as the other plan-file errors); the
// emitted plans run (EveryEmittedMlpPlanRunsAndMatchesOneCore).
TEST(VtpuCliPlanTest, TrainRefusesPlanLayoutsThatAreNotTheModels) {
  const std::string head = R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["data", "model"], "shape": [2, 4]}, )j";
  const std::string dropped =
      temp_file("drop.json", head + R"j("strategy": {"data": ["data", "model"]},
      "layers": [{"name": "fc1", "sharding": "replicated"}, {"name": "relu", "sharding": "replicated"}]})j");
  expect_failure("train mlp --steps 1 --plan " + dropped, 1,
                 {"'" + dropped + "'", "layers[2] 'fc2'"});
  const std::string fsdp = temp_file(
      "fsdp.json", head + R"j("strategy": {"name": "fsdp(data,model)", "fsdp": ["data", "model"]},
      "layers": [{"name": "fc1", "sharding": "column"}, {"name": "relu", "sharding": "sharded"},
                 {"name": "fc2", "sharding": "row"}]})j");
  for (const char* trainer : {"mlp", "fsdp"}) {
    expect_failure(std::string("train ") + trainer + " --steps 1 --plan " + fsdp, 1,
                   {"layers[0] 'fc1'", "'column'", "'replicated'", "'fsdp(data,model)'"});
  }
  const std::string shapes =
      temp_file("shapes.json", head + R"j("strategy": {"data": ["data", "model"]},
      "parameter_shapes": {"fc1.w": [64, 64], "fc1.b": [64], "fc2.w": [64, 10], "fc2.b": [10]}})j");
  expect_failure("train mlp --steps 1 --hidden 128 --plan " + shapes, 1,
                 {"parameter_shapes['fc1.b']", "[64]", "[128]"});
  const std::string swapped =
      temp_file("swap.json", R"j({"format": "vtpu-plan", "version": 1, "model": "transformer",
      "mesh": {"axes": ["data", "model"], "shape": [2, 1]}, "strategy": {"data": "data"},
      "layers": [{"name": "head", "sharding": "replicated"}]})j");
  expect_failure("train transformer --steps 1 --no-reference --plan " + swapped, 1,
                 {"layers[0]", "'head'", "'embed'"});
}

// Regression: `train mlp --plan P --hbm-bytes X` ran the 1-core
// reference under X too, so a limit the tp(x) cores fit failed with "out of HBM ... 'mlp/z1'",
// reported as the run's. The reference has its own arena, max(X, 16 GiB).
TEST(VtpuCliPlanTest, TrainMlpPlanHbmLimitIsTheRunsNotTheReferences) {
  VTPU_REQUIRE_DIGITS();
  const std::string path = temp_file("vtpu_cli_mlp_tp8_hbm.json",
                                     R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["x"], "shape": [8]}, "strategy": {"name": "tp(x)", "tensor": ["x"]}})j");
  // 1700K holds a tp(x) core: the training set (1474560 B below), its shard of 8 hidden units
  // (W1 64 x 8, b1, W2 8 x 10, b2: 64 + 8 + 8 + 8 rows of 128 floats, 45056 B, and the bucket
  // 45312 B) and five 64-row activations of at most 128 columns (5 x 32768 B): 1728768 B.
  const CliRun r =
      run_cli("train mlp --steps 2 --batch 64 --json --hbm-bytes 1700K --plan " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const auto& core : j["run"]["hbm"]) EXPECT_EQ(core["bytes_limit"], 1700 * 1024) << core;
  EXPECT_EQ(j["reference"]["hbm_bytes_limit"], uint64_t{16} << 30);
  // The reference's peak, above the run's limit: as MlpTrainerTest computes it, every buffer
  // padded under T(8,128) and rounded to 256 B: the training set (1437 rows of 64 pixels and of
  // 10 labels: 1440 x 128 floats each, 737280 B), params (W1 64 x 64, b1, W2 64 x 10, b2: 73728
  // B) and grads+loss (73732 B, a 73984 B chunk), then the batch of 64 rows (x and y), z1, a1 and
  // the logits (64 x 128 floats each, 32768 B).
  const uint64_t live = 2 * 737280 + 73728 + 73984;
  EXPECT_EQ(j["reference"]["peak_bytes_in_use_core0"], live + 5 * 32768);
  EXPECT_GT(j["reference"]["peak_bytes_in_use_core0"].get<uint64_t>(), uint64_t{1700 * 1024});
  EXPECT_TRUE(j["losses_match"].get<bool>());
}

// Text output of a tensor-parallel run names the layout and the all-reduces.
TEST(VtpuCliPlanTest, TrainMlpPlanTextReport) {
  VTPU_REQUIRE_DIGITS();
  const std::string path = temp_file("vtpu_cli_mlp_tp_text.json",
                                     R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["data", "model"], "shape": [2, 2]},
      "strategy": {"name": "dp(data)+tp(model)", "data": "data", "tensor": "model"}})j");
  const CliRun r = run_cli("train mlp --steps 3 --batch 8 --log-every 1 --plan " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The groups as train transformer words them: sizes in the layout line; per group
  // the calls over the run and the bytes: 3 steps of the (4 x 10) f32 logits = 480 B, and of the
  // bucket of 75 * 32 + 10 parameters + the loss = 2411 floats = 28932 B = 28.25 KiB.
  for (const char* needle :
       {"strategy 'dp(data)+tp(model)'",
        "Megatron tensor parallel: data-parallel group 2 (mesh axis data) x tensor group 2 (mesh "
        "axis model); ",
        "32 hidden units per core", "(tolerance 0.0001): ok",
        "all-reduce on core 0: tensor group 3 calls (1 per step: the logits), 480 B; "
        "data-parallel group 3 calls (1 per step: the gradient bucket), 28.25 KiB; shard 2410 of "
        "4810 parameters per core",
        "replicas identical after training: yes", "peak_bytes_in_use"}) {
    EXPECT_NE(r.output.find(needle), std::string::npos) << needle << "\n" << r.output;
  }
  // Pure tensor parallelism: the data group is one core and runs no all-reduce (it counted one
  // per step), with the losses of the run that did (an all-reduce of one core leaves the bits).
  // With 2 micro-batches of 4 rows: 6 all-reduces of (4 x 10) f32 logits = 960 B.
  const std::string tp = temp_file("vtpu_cli_mlp_tp_only.json",
                                   R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["data", "model"], "shape": [1, 2]},
      "strategy": {"name": "tp(model)", "tensor": "model"}})j");
  const CliRun t = run_cli("train mlp --steps 3 --batch 8 --micro-batches 2 --plan " + tp);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("all-reduce on core 0: tensor group 6 calls (2 per step: the logits of "
                          "each micro-batch), 960 B; data-parallel group none (a group of 1 "
                          "core); shard 2410 of 4810 parameters per core"),
            std::string::npos)
      << t.output;
  const CliRun tj = run_cli("train mlp --steps 3 --batch 8 --json --plan " + tp);
  ASSERT_EQ(tj.exit_code, 0) << tj.output;
  const nlohmann::json j = nlohmann::json::parse(tj.output);
  for (const auto& core : j["run"]["all_reduce"]) EXPECT_EQ(core["num_collectives"], 0) << core;
  for (const auto& core : j["run"]["tensor_all_reduce"]) {
    EXPECT_EQ(core["num_collectives"], 3) << core;
  }
}

// `train mlp --plan` ends with the planner's estimate against the run (compare_estimate, as
// `train fsdp --plan` and `train transformer --plan` do), for a data-parallel and a
// tensor-parallel plan alike, and --json carries it as estimate_vs_measured. The batch defaults to
// the estimate's, and another --batch is refused before anything runs.
TEST(VtpuCliPlanTest, TrainMlpPlanComparesTheEstimateWithTheRun) {
  VTPU_REQUIRE_DIGITS();
  for (const std::string strategy :
       {R"j({"name": "dp(x)", "data": "x"})j", R"j({"name": "tp(x)", "tensor": "x"})j"}) {
    SCOPED_TRACE(strategy);
    const std::string path = temp_file("vtpu_cli_mlp_plan_estimate.json",
                                       R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
        "mesh": {"axes": ["x"], "shape": [2]}, "strategy": )j" +
                                           strategy +
                                           R"j(, "estimate": {"step_seconds": 0.001,
        "hbm_bytes_per_core": 40000, "input_bytes_per_core": 2000, "hardware": "this_machine",
        "batch": 8}})j");
    const nlohmann::json j = expect_runs_like_one_core("train mlp --steps 5 --json --plan " + path,
                                                       "/run/losses", "/reference/losses");
    if (j.is_null()) continue;
    EXPECT_EQ(j["config"]["global_batch"], 8);  // the estimate's
    ASSERT_TRUE(j.contains("estimate_vs_measured")) << j.dump();
    expect_mlp_estimate_report(j, j["run"], 5);
    EXPECT_FALSE(j["run"].contains("median_step_seconds")) << j["run"];  // only at the top
    const CliRun text = run_cli("train mlp --steps 5 --log-every 0 --plan " + path);
    ASSERT_EQ(text.exit_code, 0) << text.output;
    // The table names the plan, its strategy and the estimate's hardware.
    expect_names(
        text.output,
        {path, j["plan"]["strategy"].get<std::string>(), "this_machine",
         std::to_string(
             j["estimate_vs_measured"]["measured"]["unmodelled_hbm_bytes"].get<uint64_t>())});
    expect_failure("train mlp --batch 16 --plan " + path, 2, {"batch of 8", "16"});
  }
}

// Regression: `train mlp --plan` checked a data-parallel plan against
// the one-batch 1-core run, so at hidden 1024 a correct dp(x) plan failed the 1e-4 check (4.9e-4
// after 500 steps) while `train fsdp --plan` of the same plan passed. Both now check against 1
// core with one micro-batch per core of the data-parallel group: the same f32 additions in the
// same order, so data parallel and FSDP match it exactly; the one-batch run is printed unchecked.
// Under dp+tp the group is the data axis (2 micro-batches); pure tp has a group of 1.
TEST(VtpuCliPlanTest, TrainMlpPlanChecksAgainstTheMicroBatchedReference) {
  VTPU_REQUIRE_DIGITS();
  struct Case {
    const char* mesh;
    const char* strategy;
    int64_t micro_batches;
    bool exact;
  };
  for (const Case& c :
       {Case{R"j({"axes": ["x"], "shape": [4]})j", R"j({"data": "x"})j", 4, true},
        Case{R"j({"axes": ["x"], "shape": [4]})j", R"j({"fsdp": "x"})j", 4, true},
        Case{R"j({"axes": ["d", "t"], "shape": [2, 2]})j", R"j({"data": "d", "tensor": "t"})j", 2,
             false},
        Case{R"j({"axes": ["x"], "shape": [2]})j", R"j({"tensor": "x"})j", 1, false}}) {
    SCOPED_TRACE(c.strategy);
    const std::string path = temp_file("vtpu_cli_mlp_plan_reference.json",
                                       R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
        "mesh": )j" + std::string(c.mesh) + R"j(, "strategy": )j" +
                                           c.strategy + "}");
    const nlohmann::json j = expect_runs_like_one_core(
        "train mlp --steps 20 --batch 16 --hidden 256 --json --plan " + path, "/run/losses",
        "/reference/losses");
    if (j.is_null()) continue;
    EXPECT_EQ(j["reference"]["micro_batches"], c.micro_batches);
    EXPECT_EQ(j["one_batch_reference"]["micro_batches"], 1);
    EXPECT_EQ(j["one_batch_reference"]["losses"].size(), 20u);
    if (c.exact) {
      EXPECT_EQ(j["max_relative_loss_difference"].get<double>(), 0.0);
    }
  }
  const std::string dp = temp_file("vtpu_cli_mlp_plan_reference_text.json",
                                   R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["x"], "shape": [4]}, "strategy": {"data": "x"}})j");
  const CliRun r = run_cli("train mlp --steps 3 --batch 8 --log-every 0 --plan " + dp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* needle : {"vs train mlp on 1 core with 4 micro-batches",
                             "max relative difference 0 over 3 steps (tolerance 0.0001): ok",
                             "in one batch", "not checked"}) {
    EXPECT_NE(r.output.find(needle), std::string::npos) << needle << "\n" << r.output;
  }
}

// Regression: a plan made for hidden 128 ran the trainer's hidden 64 and
// judged the hidden-128 estimate against it (0.63x "outside 25%"), a transformer plan for
// d_model 32 ran d_model 64, and a model "mlp" without its relu was accepted. The plan's
// model_graph now sets the sizes, a contradicting flag is an error, and another architecture is
// refused naming the layer.
TEST(VtpuCliPlanTest, TrainRunsThePlansModelSizes) {
  VTPU_REQUIRE_DIGITS();
  const std::filesystem::path& dir = test_temp_dir();
  const std::string out = (dir / "vtpu_cli_mlp128_plan.json").string();
  const std::string mlp128 = temp_file("vtpu_cli_mlp128.json", R"j({"name": "mlp", "batch": 16,
      "optimizer": "sgd", "layers": [{"name": "fc1", "kind": "dense", "in": 64, "out": 128},
      {"name": "relu", "kind": "elementwise", "dim": 128},
      {"name": "fc2", "kind": "dense", "in": 128, "out": 10}]})j");
  std::filesystem::remove(out);
  CliRun r =
      run_cli("plan " + mlp128 + " --mesh 1x2 --hardware " + fixed_profile() + " --emit " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The footer names the file just written, not "PLAN.json".
  EXPECT_NE(r.output.find("vtpu train mlp --plan " + out), std::string::npos) << r.output;
  // ... and `--emit -` is a usage error, not a file named '-'.
  expect_failure("plan " + mlp128 + " --mesh 1x2 --emit -", 2, {"--emit -", "--json"});
  const nlohmann::json j = expect_runs_like_one_core("train mlp --steps 3 --json --plan " + out,
                                                     "/run/losses", "/reference/losses");
  if (!j.is_null()) {
    EXPECT_EQ(j["config"]["hidden"], 128);
    EXPECT_EQ(j["config"]["optimizer"], "sgd");
    EXPECT_EQ(j["config"]["global_batch"], 16);
  }
  // A flag that contradicts the plan is a usage error, exit 2, in both trainers
  // (train fsdp on an FSDP plan of the same model).
  const std::string fsdp_out = test_temp_path("vtpu_cli_mlp128_fsdp_plan.json");
  r = run_cli("plan " + mlp128 + " --mesh 2 --strategy 'fsdp(x)' --hardware " + fixed_profile() +
              " --emit " + fsdp_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& run :
       {"train mlp --steps 1 --plan " + out, "train fsdp --steps 1 --plan " + fsdp_out}) {
    const std::string path = run.substr(run.find("--plan ") + 7);
    expect_failure(run + " --hidden 64", 2, {"'" + path + "'", "hidden 128", "--hidden is 64"});
    expect_failure(run + " --optimizer adam", 2, {"optimizer sgd", "--optimizer is adam"});
  }
  expect_failure("train mlp --steps 1 --kernels pallas --plan " + out, 2,
                 {"--kernels pallas", "--plan"});
  // A flag that agrees with the plan is accepted.
  EXPECT_EQ(json_of("train mlp --steps 1 --hidden 128 --log-every 0 --json --plan " +
                    out)["config"]["hidden"],
            128);

  const std::string norelu = temp_file("vtpu_cli_mlp_norelu.json", R"j({"name": "mlp",
      "batch": 16, "optimizer": "sgd", "layers": [
      {"name": "fc1", "kind": "dense", "in": 64, "out": 64},
      {"name": "fc2", "kind": "dense", "in": 64, "out": 10}]})j");
  // Regression: `plan --emit` wrote this plan, which only vtpu train refused. It
  // refuses now with the trainers' message, naming the model file; no file is written.
  const std::string emitted = out + ".norelu";
  std::filesystem::remove(emitted);
  expect_failure(
      "plan " + norelu + " --mesh 2 --hardware " + fixed_profile() + " --emit " + emitted, 1,
      {"'" + norelu + "'", "layers[1] 'fc2'", "'relu'"});
  EXPECT_FALSE(std::filesystem::exists(emitted));
  // Without --emit it is planned as a foreign model, and the footer says why.
  r = run_cli("plan " + norelu + " --mesh 2 --hardware " + fixed_profile());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  expect_names(r.output, {"train mlp", "fc2 dense", "--emit"});
  EXPECT_EQ(r.output.find("--plan PLAN.json"), std::string::npos) << r.output;  // no run hint
  // A plan edited by hand is still refused by the trainers: the hidden-128 plan without relu.
  nlohmann::json edited;
  {
    std::ifstream in(out);
    edited = nlohmann::json::parse(in);
  }
  edited["model_graph"]["layers"].erase(1);
  const std::string edited_path = temp_file("vtpu_cli_mlp_norelu_plan.json", edited.dump(2));
  expect_failure("train mlp --steps 1 --plan " + edited_path, 1, {"layers[1] 'fc2'", "'relu'"});
  expect_failure("train fsdp --steps 1 --plan " + edited_path, 1, {"'relu'"});

  // A transformer of d_model 32, 2 heads, 1 block, MLP hidden 64, context 16.
  std::string t = R"j({"name": "transformer", "batch": 4, "seq_len": 16, "optimizer": "adam",
      "layers": [{"name": "embed", "kind": "embedding", "vocab": 128, "d_model": 32,
      "positions": 16}, {"name": "blocks.0.ln1", "kind": "layer_norm", "dim": 32},
      {"name": "blocks.0.attn", "kind": "attention", "d_model": 32, "heads": 2},
      {"name": "blocks.0.ln2", "kind": "layer_norm", "dim": 32},
      {"name": "blocks.0.mlp.fc1", "kind": "dense", "in": 32, "out": 64},
      {"name": "blocks.0.mlp.gelu", "kind": "elementwise", "dim": 64},
      {"name": "blocks.0.mlp.fc2", "kind": "dense", "in": 64, "out": 32},
      {"name": "ln_f", "kind": "layer_norm", "dim": 32},
      {"name": "head", "kind": "dense", "in": 32, "out": 128}]})j";
  const std::string small = temp_file("vtpu_cli_small_transformer.json", t);
  std::filesystem::remove(out);
  r = run_cli("plan " + small + " --mesh 1x2 --hardware " + fixed_profile() + " --emit " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json tj = expect_runs_like_one_core(
      "train transformer --steps 2 --json --data " + transformer_text_file() + " --plan " + out,
      "/mesh/losses", "/reference/losses");
  if (!tj.is_null()) {
    for (const auto& [key, value] : std::vector<std::pair<const char*, int>>{
             {"d_model", 32}, {"heads", 2}, {"layers", 1}, {"hidden", 64}, {"context", 16}}) {
      EXPECT_EQ(tj["config"][key], value) << key;
    }
  }
}

// Regression: `train mlp --estimate-from` of a plan made for hidden 128
// with Adam ran the default hidden-64 SGD model and judged it against the other model's estimate
// (HBM "0.30x"). It now takes the model from the plan's model_graph, as --plan does, and a flag
// that contradicts it is a usage error naming both values.
TEST(VtpuCliPlanTest, EstimateFromRunsThePlansModel) {
  VTPU_REQUIRE_DIGITS();
  const std::string mlp128 = temp_file("vtpu_cli_mlp128_adam.json", R"j({"name": "mlp",
      "batch": 16, "optimizer": "adam", "layers": [
      {"name": "fc1", "kind": "dense", "in": 64, "out": 128},
      {"name": "relu", "kind": "elementwise", "dim": 128},
      {"name": "fc2", "kind": "dense", "in": 128, "out": 10}]})j");
  const std::string plan = test_temp_path("vtpu_cli_mlp128_adam_dp.json");
  std::filesystem::remove(plan);
  CliRun r = run_cli("plan " + mlp128 + " --mesh 2 --strategy 'dp(x)' --hardware " +
                     fixed_profile() + " --emit " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_cli("train mlp --steps 2 --json --estimate-from " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["config"]["hidden"], 128);
  EXPECT_EQ(j["config"]["optimizer"], "adam");
  EXPECT_EQ(j["config"]["learning_rate"], 1e-3);  // Adam's default, as with --plan
  EXPECT_EQ(j["config"]["global_batch"], 16);
  r = run_cli("train mlp --steps 1 --log-every 0 --hidden 128 --estimate-from " + plan);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model 64->128->10, global batch 16 (8 per core), Adam"),
            std::string::npos)
      << r.output;
  expect_failure("train mlp --steps 1 --hidden 64 --estimate-from " + plan, 2,
                 {"'" + plan + "'", "hidden 128", "--hidden is 64"});
  expect_failure("train mlp --steps 1 --optimizer sgd --estimate-from " + plan, 2,
                 {"'" + plan + "'", "optimizer adam", "--optimizer is sgd"});
}

// --optimizer adam under every mode of `train mlp --plan`: the default learning rate is Adam's
// (1e-3) and the losses match one core running Adam (the reference of the same process).
TEST(VtpuCliPlanTest, TrainMlpPlanRunsAdam) {
  VTPU_REQUIRE_DIGITS();
  for (const std::string roles :
       {R"j({"tensor": "x"})j", R"j({"data": "x"})j", R"j({"fsdp": "x"})j"}) {
    SCOPED_TRACE(roles);
    const std::string path = temp_file("vtpu_cli_mlp_plan_adam.json",
                                       R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
        "mesh": {"axes": ["x"], "shape": [2]}, "strategy": )j" +
                                           roles + "}");
    const nlohmann::json j = expect_runs_like_one_core(
        "train mlp --steps 5 --batch 8 --optimizer adam --json --plan " + path, "/run/losses",
        "/reference/losses");
    if (j.is_null()) continue;
    EXPECT_EQ(j["config"]["optimizer"], "adam");
    EXPECT_NEAR(j["config"]["learning_rate"].get<double>(), 1e-3, 1e-9);
  }
}

// vtpu plan --strategy pins a candidate in place of the winner: the
// planner never picks fsdp for the digits MLP on this machine, so `train fsdp --plan` could not be
// compared with its estimate. The pinned plan runs and ends with the estimate-vs-measured report;
// the batch defaults to the plan's, as with train mlp --plan.
TEST(VtpuCliPlanTest, StrategyPinsACandidateThatTrainRunsAgainstItsEstimate) {
  VTPU_REQUIRE_DIGITS();
  const std::string out = test_temp_path("vtpu_cli_pinned_fsdp.json");
  std::filesystem::remove(out);
  const std::string mlp = "plan " + model_path("mlp.json");
  const CliRun r = run_cli(mlp + " --mesh 8 --hardware " + fixed_profile() +
                           " --batch 32 --strategy "
                           "'fsdp(x)' --emit " +
                           out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WINNER"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CHOSEN (--strategy)"), std::string::npos) << r.output;
  std::ifstream in(out);
  ASSERT_TRUE(in.good()) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(in);
  EXPECT_EQ(plan["strategy"]["name"], "fsdp(x)");
  EXPECT_EQ(plan["strategy"]["fsdp"], nlohmann::json::array({"x"}));  // always a list
  EXPECT_TRUE(plan["strategy"]["data"].is_null());
  EXPECT_EQ(plan["estimate"]["batch"], 32);
  if (plan.contains("pinned")) {
    EXPECT_NE(plan["pinned"]["winner"], "fsdp(x)");
  }
  // train fsdp runs the pinned plan: its mesh, its batch, and the estimate beside the run.
  const nlohmann::json run = json_of("train fsdp --steps 3 --log-every 0 --json --plan " + out);
  EXPECT_EQ(run["mode"], "fsdp");
  EXPECT_EQ(run["config"]["cores"], 8);
  EXPECT_EQ(run["config"]["global_batch"], 32);
  EXPECT_EQ(run["estimate_vs_measured"]["plan"], out);
  EXPECT_EQ(run["estimate_vs_measured"]["strategy"], "fsdp(x)");
  EXPECT_EQ(run["estimate_vs_measured"]["measured"]["num_cores"], 8);
  // --json names the winner and the chosen candidate.
  const CliRun js =
      run_cli(mlp + " --mesh 8 --hardware " + fixed_profile() + " --json --strategy 'tp(x)'");
  ASSERT_EQ(js.exit_code, 0) << js.output;
  const nlohmann::json j = nlohmann::json::parse(js.output);
  EXPECT_EQ(j["chosen"], "tp(x)");
  EXPECT_EQ(j["chosen_by"], "--strategy");
  EXPECT_EQ(j["plan"]["strategy"]["name"], "tp(x)");
  EXPECT_TRUE(j["winner"].is_string());

  // An unknown name is a usage error listing the candidates; nothing is written.
  std::filesystem::remove(out);
  expect_failure(mlp + " --mesh 8 --strategy 'fsdp(y)' --emit " + out, 2,
                 {"--strategy", "'fsdp(y)'", "dp(x)", "tp(x)", "fsdp(x)"});
  EXPECT_FALSE(std::filesystem::exists(out));
  expect_failure(mlp + " --mesh 8 --strategy ''", 2, {"--strategy", "''"});
  // A candidate vtpu train cannot run: why, and that --any-strategy lifts it.
  const std::string hybrid = mlp + " --mesh 2x4 --hardware v5e --strategy 'fsdp(data)+tp(model)'";
  expect_failure(hybrid, 1, {"'fsdp(data)+tp(model)'", "'mlp'", "train mlp"});
  expect_failure(hybrid, 1, {"--any-strategy"});
  const CliRun any = run_cli(hybrid + " --any-strategy");
  EXPECT_EQ(any.exit_code, 0) << any.output;
  EXPECT_NE(any.output.find("chosen fsdp(data)+tp(model) (--strategy; the winner is "),
            std::string::npos)
      << any.output;
  // Over the HBM limit, each array charged its TPU tiles: dp holds parameters and gradients, each
  // W1 f32[64,64] and W2 f32[64,10] (32,768 B: 64 x 128 floats) and b1 f32[64], b2 f32[10]
  // (4,096 B: one T(1024) tile), 2 x 73,728; three activations of 8 rows (4,096 B each); the
  // input f32[8,64] and labels s32[8] (4,096 B each): 167,936 bytes per core.
  expect_failure(mlp + " --mesh 1x8 --hbm-bytes 20K --strategy 'dp(model)'", 1,
                 {"'dp(model)'", "167936", "20480"});
  const CliRun over =
      run_cli(mlp + " --mesh 1x8 --hbm-bytes 20K --strategy 'dp(model)' --any-strategy");
  EXPECT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("CHOSEN (--strategy); exceeds HBM by"), std::string::npos)
      << over.output;
  // A batch that does not split cannot run with or without --any-strategy.
  const CliRun odd = run_cli(mlp + " --mesh 1x8 --batch 12 --strategy 'dp(model)' --any-strategy");
  EXPECT_EQ(odd.exit_code, 1) << odd.output;
  expect_names(odd.output, {"cannot run", "batch 12", "8 data x fsdp cores"});
  EXPECT_EQ(odd.output.find("--any-strategy lets"), std::string::npos) << odd.output;
}

// Regression: a tensor group of 3 does not divide the 64 hidden units; the run
// printed "... 21 hidden units per core ..." before failing. Now it fails before any output.
TEST(VtpuCliPlanTest, TrainMlpPlanChecksTheTensorSplitBeforePrinting) {
  VTPU_REQUIRE_DIGITS();
  const std::string path = temp_file("vtpu_cli_mlp_tp3.json",
                                     R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["data", "model"], "shape": [1, 3]},
      "strategy": {"name": "tp(model)", "tensor": "model"}})j");
  const std::string args = "train mlp --batch 6 --steps 2 --plan " + path;
  expect_failure(args, 1, {"hidden 64", "3 cores"});
  EXPECT_EQ(run_cli_split(args).out, "");  // nothing printed before the failure
}

// Regression: a hand-edited estimate.batch of 2^62 became train mlp's global
// batch (the command line stops at 2^30) and the run crashed with SIGSEGV. The reader bounds it
// at vtpu plan's 2^40, and the trainer's config check at 2^30.
TEST(VtpuCliPlanTest, TrainMlpPlanBoundsThePlansBatch) {
  VTPU_REQUIRE_DIGITS();
  for (const char* batch : {"4611686018427387904", "1099511627776"}) {
    SCOPED_TRACE(batch);
    const std::string path = temp_file("vtpu_cli_mlp_huge_batch.json",
                                       R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
        "mesh": {"axes": ["x"], "shape": [2]}, "strategy": {"name": "dp(x)", "data": "x"},
        "estimate": {"step_seconds": 0.001, "batch": )j" +
                                           std::string(batch) + "}}");
    for (const char* command : {"train mlp", "train fsdp"}) {
      const CliRun r = run_cli(std::string(command) + " --steps 2 --plan " + path);
      EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.output;
      EXPECT_NE(r.output.find(std::string(batch) == "1099511627776"
                                  ? "global batch is 1099511627776 (expected 1..1073741824)"
                                  : "estimate.batch is 4611686018427387904"),
                std::string::npos)
          << command << "\n"
          << r.output;
    }
  }
}

// Regression: a candidate that only vtpu train's layer layouts make infeasible
// (fc1 must be split 'column', 64 does not divide by 3; attention must be split 'heads', 4 do not
// divide by 8) gave no hint that --any-strategy plans it (a layer may then stay replicated).
TEST(VtpuCliPlanTest, ConstraintMadeInfeasibilityPointsToAnyStrategy) {
  // Fails naming `values` without --any-strategy; with it, exits 0 and chooses `strategy`.
  const auto hinted_then_lifted = [](const std::string& args,
                                     const std::vector<std::string>& values,
                                     const std::string& strategy) {
    expect_failure(args, 1, values);
    const nlohmann::json j = json_of(args + " --any-strategy --json");
    EXPECT_EQ(j["chosen"], strategy) << args << "\n" << j.dump();
  };
  hinted_then_lifted("plan " + model_path("mlp.json") + " --mesh 3 --hardware v5e",
                     {"batch 64", "'fc1'", "3 tensor cores", "tp(x)", "--any-strategy"}, "tp(x)");
  hinted_then_lifted("plan " + model_path("transformer.json") +
                         " --mesh 1x8 --hardware v5e --strategy 'tp(model)'",
                     {"8 tensor cores", "--any-strategy"}, "tp(model)");
  // The batch 64 alone makes dp(x) infeasible on 3 cores: --any-strategy does not lift that.
  const SplitRun batch = run_cli_split("plan " + model_path("mlp.json") +
                                       " --mesh 3 --hardware v5e --strategy 'dp(x)'");
  EXPECT_EQ(batch.exit_code, 1) << batch.err;
  for (const char* value : {"'dp(x)'", "'mlp'", "batch 64", "3 data x fsdp cores"}) {
    EXPECT_NE(batch.err.find(value), std::string::npos) << value << "\n" << batch.err;
  }
  EXPECT_EQ(batch.err.find("--any-strategy"), std::string::npos) << batch.err;
}

// Regressions: --emit to a full device printed "wrote /dev/full" and exited 0; a model file
// without end (/dev/zero) was read into memory without bound; a plan file that is a directory
// was "internal error: basic_filebuf::underflow"; a plan file with a key given twice took the
// last value silently (model files and profiles already rejected that).
TEST(VtpuCliPlanTest, UnwritableEmitAndEndlessDirectoryOrRepeatedKeyInputsFailClearly) {
  const std::string mlp = model_path("mlp.json");
  if (std::filesystem::exists("/dev/full")) {
    const std::string args = "plan " + mlp + " --mesh 2x4 --emit /dev/full";
    expect_failure(args, 1, {"--emit", "'/dev/full'"});
    // The path is checked before planning, so nothing is printed (no table, no run hint).
    EXPECT_EQ(run_cli_split(args).out, "");
  }
  expect_failure("plan /dev/zero --mesh 2x4", 1, {"'/dev/zero'"});
  const std::string dir = test_temp_dir().string();
  expect_failure("train mlp --steps 1 --plan " + dir, 1, {"'" + dir + "'", "directory"});
  EXPECT_EQ(run_cli_split("train mlp --steps 1 --plan " + dir).err.find("internal error"),
            std::string::npos);
  const std::string twice = temp_file("vtpu_cli_plan_key_twice.json",
                                      R"j({"format": "vtpu-plan", "version": 1, "model": "mlp",
      "mesh": {"axes": ["x"], "shape": [2]}, "strategy": {"name": "dp(x)", "data": "x"},
      "strategy": {"name": "tp(x)", "tensor": "x"}})j");
  expect_failure("train mlp --steps 1 --plan " + twice, 1, {"'strategy'"});
}

// The transformer on 1x8, 2x4, 8x1 and 1x2: the emitted plan runs with
// `vtpu train transformer --plan` and matches one core. On v5e, 2x4 is dp(data,model): data
// parallel over both axes, flattened into one group of 8.
TEST(VtpuCliPlanTest, EveryEmittedTransformerPlanRunsAndMatchesOneCore) {
  const std::string out = test_temp_path("vtpu_cli_transformer_emitted.json");
  const std::string text = transformer_text_file();
  for (const char* mesh : {"1x8", "2x4", "8x1", "1x2"}) {
    const nlohmann::json plan =
        emit_plan("transformer.json", mesh, "--batch 8 --hardware v5e", out);
    ASSERT_FALSE(plan.is_null()) << mesh;
    if (std::string(mesh) == "2x4") {
      EXPECT_EQ(plan["strategy"]["name"], "dp(data,model)");
    }
    EXPECT_TRUE(plan["strategy"]["fsdp"].is_null()) << plan["strategy"];
    SCOPED_TRACE(std::string(mesh) + " " + plan["strategy"]["name"].dump());
    const nlohmann::json j = expect_runs_like_one_core(
        "train transformer --steps 2 --json --data " + text + " --plan " + out, "/mesh/losses",
        "/reference/losses");
    if (!j.is_null()) {
      EXPECT_EQ(static_cast<int64_t>(j["mesh"]["cores"].size()), plan_cores(plan));
      EXPECT_EQ(j["config"]["batch"], 8);  // the plan's
    }
  }
}

// Regression: with a dp(data)+tp(model) plan on 2x4 (its batch 64: 32 rows per data
// shard, each shared by 4 tensor cores) --micro-batches 3 said "micro_batches is 3 (... 32 rows
// per core: global batch 64 over 2 cores)", exit 1. FSDP accumulates no micro-batches.
TEST(VtpuCliTest, TrainMlpPlanMicroBatchesMustDivideADataShard) {
  const std::string p24 = test_temp_path("vtpu_cli_p24.json");
  const CliRun e = run_cli("plan " + model_path("mlp.json") +
                           " --mesh 2x4 --strategy \"dp(data)+tp(model)\" --emit " + p24);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  expect_failure("train mlp --steps 2 --micro-batches 3 --plan " + p24, 2,
                 {"--micro-batches 3", "32", "64"});
  const std::string fsdp = fsdp_mlp_plan("vtpu_cli_mb_fsdp.json", 2);
  expect_failure("train mlp --steps 2 --batch 8 --micro-batches 2 --plan " + fsdp, 2,
                 {"--micro-batches 2", "fsdp"});
}

// Regression: an output on an input's path replaced the input, exit 0: `vtpu
// plan m.json --emit m.json` the model, --emit on the --hardware file the profile, train mlp's
// --memory-snapshot on --data the data set, --memory-profile on --config the config. A usage
// error (exit 2) naming both options and the path, before anything is written.
TEST(VtpuCliPlanTest, OutputsThatWouldReplaceAnInputAreRefused) {
  const auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto copy = [&](const std::string& from, const std::string& name) {
    const std::string to = test_temp_path(name);
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
    return to;
  };
  const std::string model = copy(model_path("mlp.json"), "same_path_model.json");
  const std::string model_text = read(model);
  expect_failure("plan " + model + " --mesh 2 --emit " + model, 2, {"--emit", "'" + model + "'"});
  // Another spelling of the same file, and a symbolic link to it.
  const std::string dotted = (test_temp_dir() / "." / "same_path_model.json").string();
  expect_failure("plan " + model + " --mesh 2 --emit " + dotted, 2, {"--emit", "'" + dotted + "'"});
  const std::string link = test_temp_path("same_path_model_link.json");
  std::filesystem::remove(link);
  std::filesystem::create_symlink(model, link);
  expect_failure("plan " + model + " --mesh 2 --emit " + link, 2,
                 {"--emit", "'" + link + "'", "'" + model + "'"});
  EXPECT_EQ(read(model), model_text);
  const std::string profile = copy(fixed_profile(), "same_path_profile.json");
  const std::string profile_text = read(profile);
  expect_failure(
      "plan " + model_path("mlp.json") + " --mesh 2 --hardware " + profile + " --emit " + profile,
      2, {"--emit", "--hardware", "'" + profile + "'"});
  EXPECT_EQ(read(profile), profile_text);
  // A shipped profile's name is no file: --emit v5e writes a file named v5e.
  const CliRun named = run_cli("plan " + model_path("mlp.json") + " --mesh 2 --hardware v5e " +
                               "--emit " + test_temp_path("v5e"));
  EXPECT_EQ(named.exit_code, 0) << named.output;

  const std::string config = temp_file("same_path_config.json", R"({"num_cores": 2})");
  expect_failure("bench collectives --cores 2 --config " + config + " --calibrate " + config, 2,
                 {"--calibrate", "--config", "'" + config + "'"});
  EXPECT_EQ(read(config), R"({"num_cores": 2})");
}

TEST(VtpuCliTest, TrainMlpRefusesAMemoryOutputOverAnInput) {
  VTPU_REQUIRE_DIGITS();
  const std::string data = test_temp_path("same_path_digits.csv.gz");
  std::filesystem::copy_file(vtpu::testing::digits_path(), data,
                             std::filesystem::copy_options::overwrite_existing);
  const auto size = std::filesystem::file_size(data);
  expect_failure(
      "train mlp --cores 2 --steps 2 --log-every 0 --data " + data + " --memory-snapshot " + data,
      2, {"--memory-snapshot", "--data", "'" + data + "'"});
  EXPECT_EQ(std::filesystem::file_size(data), size);
  const std::string config = temp_file("same_path_train_config.json", R"({"num_cores": 2})");
  expect_failure(
      "train mlp --steps 2 --log-every 0 --config " + config + " --memory-profile " + config, 2,
      {"--memory-profile", "--config", "'" + config + "'"});
  expect_failure(
      "train mlp --steps 2 --log-every 0 --config " + config + " --memory-events " + config, 2,
      {"--memory-events", "--config", "'" + config + "'"});
  std::ifstream in(config);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), R"({"num_cores": 2})");
  // The default --data counts too.
  expect_failure("train mlp --steps 2 --memory-snapshot " + vtpu::testing::digits_path(), 2,
                 {"--memory-snapshot", "--data", vtpu::testing::digits_path()});
}

// Regression: `train fsdp --plan fsdp3.json --hbm-bytes 464K` ran out of HBM in its
// data-parallel comparison run, and the error ("cannot allocate ... for 'mlp/a1'") did not say
// that it was not the plan's FSDP run. The limits come from the two runs' peaks (padded bytes, so
// they follow the layouts): at hidden 512, FSDP's shards need less than data parallel's replicas.
TEST(VtpuCliTest, TrainFsdpSaysWhichRunRanOutOfHbm) {
  VTPU_REQUIRE_DIGITS();
  const std::string plan = fsdp_mlp_plan("fsdp3.json", 3);
  const std::string args =
      "train fsdp --plan " + plan + " --batch 48 --hidden 512 --steps 2 --log-every 0 ";
  const CliRun sizes = run_cli(args + "--json");
  ASSERT_EQ(sizes.exit_code, 0) << sizes.output;
  const nlohmann::json j = nlohmann::json::parse(sizes.output);
  uint64_t fsdp_peak = 0;
  for (const auto& h : j["fsdp"]["hbm"]) {
    fsdp_peak = std::max(fsdp_peak, h["peak_bytes_in_use"].get<uint64_t>());
  }
  const uint64_t dp_peak = j["data_parallel"]["peak_bytes_in_use_core0"].get<uint64_t>();
  ASSERT_LT(fsdp_peak + 2048, dp_peak);
  // Between the peaks (a whole KiB): FSDP fits, data parallel does not.
  const uint64_t between = (fsdp_peak + dp_peak) / 2 / 1024 * 1024;
  const CliRun dp = run_cli(args + "--hbm-bytes " + std::to_string(between));
  EXPECT_EQ(dp.exit_code, 1) << dp.output;
  // The error names the data-parallel comparison run, the flag to raise and the limit.
  expect_names(dp.output, {"data-parallel", "--hbm-bytes", std::to_string(between)});
  // 16 KiB over the data-parallel peak fits both (the peak of an unlimited arena: under a tight
  // limit the allocator may place chunks differently).
  const CliRun fits =
      run_cli(args + "--hbm-bytes " + std::to_string(dp_peak / 1024 * 1024 + 16384));
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
  // 400K: not even the training set fits; the FSDP run fails first.
  const CliRun fsdp = run_cli("train fsdp --plan " + plan + " --batch 48 --steps 2 --log-every 0 " +
                              "--hbm-bytes 400K");
  EXPECT_EQ(fsdp.exit_code, 1) << fsdp.output;
  expect_names(fsdp.output, {"FSDP", "409600"});
  EXPECT_EQ(fsdp.output.find("data-parallel"), std::string::npos) << fsdp.output;
}

// Regression: `.one_batch_reference` had no median_step_seconds in train mlp --plan and train
// fsdp, where every other run of the report has one.
TEST(VtpuCliTest, OneBatchReferenceHasItsStepTime) {
  VTPU_REQUIRE_DIGITS();
  const std::string plan = fsdp_mlp_plan("fsdp2.json", 2);
  for (const std::string& args : {std::string("train fsdp --cores 2 --steps 3 --json"),
                                  "train mlp --steps 3 --json --plan " + plan}) {
    const CliRun r = vtpu::run_command("timeout 60 " + std::string(VTPU_CLI_PATH) + " " + args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    ASSERT_TRUE(j["one_batch_reference"].contains("median_step_seconds")) << args;
    const double s = j["one_batch_reference"]["median_step_seconds"].get<double>();
    EXPECT_GT(s, 0.0) << args;
    EXPECT_LT(s, 10.0) << args;  // a step of a 64->128->10 MLP on one core, not a unit mix-up
  }
}

// Regression: CLI11 listed the unexpected words last first ("2x4 --mesh"), and
// `train mlp --mesh 2x4` (as train transformer and vtpu plan take it) gave no hint.
TEST(VtpuCliTest, UnexpectedWordsAreListedInOrderWithAHint) {
  expect_failure("train mlp --mesh 2x4", 2, {"--mesh 2x4", "train mlp", "--cores"});
  expect_failure("train fsdp --mesh=4", 2, {"--mesh=4", "train fsdp"});
  expect_failure("plan " + model_path("mlp.json") + " --cores 8", 2,
                 {"--cores 8", "plan", "--mesh"});
  // Three words, in command-line order, and no hint where none applies.
  expect_failure("bench collectives --cores 2 --max-bytes 16 one --two three", 2,
                 {"one --two three"});
}

}  // namespace
