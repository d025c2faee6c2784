// The `vtpu` program against bad environments, bad values and bad files: every failure is one
// line and exit code 1 or 2 (never std::terminate's 134), every file it writes is replaced whole
// or not at all, and every file it reads is bounded. Checked by exit code, the error code's name
// and the offending value, never by the sentence around them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/run_command.h"
#include "tests/temp_path.h"
#include "tests/test_data.h"

namespace {

namespace fs = std::filesystem;
using vtpu::test_temp_path;
using vtpu::testing::names_all;

struct VtpuRun {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `vtpu ARGS` with `env` ("NAME=value ...", may be empty) before it, stdout and stderr apart.
VtpuRun run_vtpu(const std::string& args, const std::string& env = {}) {
  static int count = 0;
  const std::string err_path = test_temp_path("hardening_stderr_" + std::to_string(count++));
  const vtpu::CommandRun r = vtpu::run_command(env + (env.empty() ? "" : " ") + "timeout 120 " +
                                               VTPU_CLI_PATH + " " + args + " 2>" + err_path);
  std::ifstream in(err_path);
  std::string err(std::istreambuf_iterator<char>(in), {});
  fs::remove(err_path);
  return {r.exit_code, r.output, std::move(err)};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = test_temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// One failing run: its exit code, and the values its stderr must name.
struct Bad {
  std::string env;
  std::string args;
  int exit_code;
  std::vector<std::string> values;
};

void expect_all_fail(const std::vector<Bad>& table) {
  for (const Bad& b : table) {
    SCOPED_TRACE(b.env + " vtpu " + b.args);
    const VtpuRun r = run_vtpu(b.args, b.env);
    EXPECT_EQ(r.exit_code, b.exit_code) << r.err;
    EXPECT_TRUE(names_all(r.err, b.values));
    // One line of error, then at most the pointer to --help.
    EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  }
}

// Regression: these ended in "terminate called after throwing an instance of
// 'vtpu::InvalidArgumentError'", exit 134, because the runtime options read the variables while
// the commands were being set up.
TEST(CliHardeningTest, ABadEnvironmentVariableIsAUsageError) {
  const std::string model = std::string(VTPU_SOURCE_DIR) + "/examples/models/mlp.json";
  expect_all_fail({
      {"VTPU_PIN_THREADS=bogus", "--help", 2, {"VTPU_PIN_THREADS", "bogus"}},
      {"VTPU_PIN_THREADS=bogus", "train mlp --steps 1", 2, {"VTPU_PIN_THREADS", "bogus"}},
      {"VTPU_COLLECTIVE_TIMEOUT_MS=0", "plan " + model, 2, {"VTPU_COLLECTIVE_TIMEOUT_MS", "'0'"}},
      {"VTPU_COLLECTIVE_TIMEOUT_MS=12abc", "bench collectives --cores 2", 2, {"12abc"}},
      {"VTPU_COLLECTIVE_TIMEOUT_MS=99999999999999999999",
       "reshard --help",
       2,
       {"99999999999999999999"}},
      {"VTPU_DATA_DIR=/nonexistent/vtpu-data",
       "train mlp --steps 1",
       2,
       {"VTPU_DATA_DIR", "/nonexistent/vtpu-data"}},
  });
  // Empty means unset, as for NCCL's variables.
  EXPECT_EQ(run_vtpu("--version", "VTPU_PIN_THREADS= VTPU_COLLECTIVE_TIMEOUT_MS=").exit_code, 0);
}

// Regression: --hbm-bytes 0, --lr 1e-320 and an out-of-range --vmem-limit exited 1 after the
// run had started; an empty --memory-profile '' was taken as the option left out.
TEST(CliHardeningTest, MalformedValuesAreUsageErrors) {
  std::vector<Bad> table;
  for (const std::string cmd : {"train mlp", "train fsdp", "train transformer"}) {
    table.push_back({"", cmd + " --hbm-bytes 0", 2, {"--hbm-bytes", "0"}});
    table.push_back({"", cmd + " --hbm-bytes 255", 2, {"--hbm-bytes", "255"}});
    table.push_back({"", cmd + " --lr 1e-320", 2, {"--lr", "1e-320"}});  // a double subnormal
    table.push_back({"", cmd + " --lr 1e-40", 2, {"--lr", "1e-40"}});    // a float subnormal
    table.push_back({"", cmd + " --lr 1e39", 2, {"--lr", "1e39"}});      // beyond a float
    table.push_back({"", cmd + " --lr 0.1x", 2, {"--lr", "0.1x"}});
    table.push_back({"", cmd + " --config ''", 2, {"--config"}});
    table.push_back({"", cmd + " --data ''", 2, {"--data"}});
  }
  for (const std::string flag :
       {"--memory-profile", "--memory-snapshot", "--memory-events", "--plan", "--estimate-from"}) {
    table.push_back({"", "train mlp " + flag + " ''", 2, {flag}});
  }
  for (const std::string v : {"16E", "16T", "100", "99999999999999999999"}) {
    table.push_back({"", "bench kernel matmul --vmem-limit " + v, 2, {"--vmem-limit", v}});
  }
  table.push_back({"", "stress --json ''", 2, {"--json"}});
  table.push_back({"", "stress --html ''", 2, {"--html"}});
  table.push_back({"", "plan ''", 2, {"model"}});
  table.push_back({"", "bench hardware --out ''", 2, {"--out"}});
  expect_all_fail(table);
}

// --config DIR printed "internal error: basic_filebuf::underflow"; a key given twice was taken
// last-wins; a file of any size was read whole. Each is now exit 1 naming the file and the
// problem, by the error's code name.
TEST(CliHardeningTest, ConfigFilesAreCheckedAndBounded) {
  const std::string dir = test_temp_path("config_dir");
  fs::create_directories(dir);
  const std::string twice =
      write_file("config_twice.json", R"({"num_cores": 2, "allocator": "bfc", "num_cores": 4})");
  const std::string big = write_file("config_big.json", "{" + std::string(2 << 20, ' ') + "}");
  expect_all_fail({
      {"", "train mlp --steps 1 --config " + dir, 1, {"InvalidArgument", dir, "directory"}},
      {"", "train mlp --steps 1 --config " + twice, 1, {"InvalidArgument", twice, "num_cores"}},
      {"", "train mlp --steps 1 --config " + big, 1, {"InvalidArgument", big, "1048576"}},
      // An endless device stops at the limit (here at its first byte, a NUL).
      {"", "train mlp --steps 1 --config /dev/zero", 1, {"InvalidArgument", "/dev/zero"}},
  });
}

// Every JSON input refuses a repeated key, naming the file and the key.
TEST(CliHardeningTest, ModelAndPlanFilesRefuseRepeatedKeys) {
  const std::string model_text =
      read_file(std::string(VTPU_SOURCE_DIR) + "/examples/models/mlp.json");
  ASSERT_EQ(model_text.front(), '{');
  const std::string model =
      write_file("model_twice.json", "{\"batch\": 1, " + model_text.substr(1));
  const std::string plan =
      write_file("plan_twice.json",
                 R"j({"format": "vtpu-plan", "version": 1, "model": "mlp", "model": "transformer",
          "mesh": {"axes": ["x"], "shape": [2]}, "strategy": {"name": "dp(x)", "data": ["x"]}})j");
  expect_all_fail({
      {"", "plan " + model, 1, {"InvalidArgument", model, "'batch'"}},
      {"", "train mlp --steps 1 --plan " + plan, 1, {"InvalidArgument", plan, "'model'"}},
      {"", "train mlp --steps 1 --estimate-from " + plan, 1, {"InvalidArgument", plan, "'model'"}},
  });
}

// `train transformer --data /dev/zero` read 1 GiB before refusing it, and a file of NUL bytes
// was taken as text. Both stop at the first NUL byte (offset 0), so not a gigabyte.
TEST(CliHardeningTest, TextDataRefusesNulBytesAndIsBounded) {
  const std::string nul = write_file("text_nul.txt", std::string(4096, '\0'));
  const std::string late_nul =
      write_file("text_late_nul.txt", std::string(5000, 'a') + std::string(1, '\0') + "b");
  const std::string big = test_temp_path("text_big.txt");
  fs::resize_file(write_file("text_big.txt", "x"), (uintmax_t{64} << 20) + 1);  // sparse
  expect_all_fail({
      {"", "train transformer --steps 1 --data /dev/zero", 1, {"/dev/zero", "offset 0"}},
      {"", "train transformer --steps 1 --data " + nul, 1, {nul, "offset 0"}},
      {"", "train transformer --steps 1 --data " + late_nul, 1, {late_nul, "offset 5000"}},
      {"", "train transformer --steps 1 --data " + big, 1, {big, "67108865"}},
  });
}

// A file that exists but may not be read is PermissionDenied, never NotFound ("run
// fetch-data.sh"). Root reads every file, so the runs drop to user nobody (setpriv).
TEST(CliHardeningTest, AnUnreadableInputIsPermissionDenied) {
  if (vtpu::run_command("command -v setpriv >/dev/null").exit_code != 0) {
    GTEST_SKIP() << "no setpriv to run as another user";
  }
  ::chmod(vtpu::test_temp_dir().c_str(), 0755);
  const std::string text = write_file("unreadable.txt", std::string(1000, 'a'));
  const std::string json = write_file("unreadable.json", "{}");
  const std::string gz = write_file("unreadable.csv.gz", "1,2\n");
  for (const std::string& p : {text, json, gz}) ASSERT_EQ(::chmod(p.c_str(), 0), 0);
  const std::string as_nobody = ::geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 "
                                                   "--clear-groups"
                                                 : "";
  expect_all_fail({
      {as_nobody, "train transformer --steps 1 --data " + text, 1, {"PermissionDenied", text}},
      {as_nobody, "train mlp --steps 1 --data " + gz, 1, {"PermissionDenied", gz}},
      {as_nobody, "train mlp --steps 1 --config " + json, 1, {"PermissionDenied", json}},
      {as_nobody, "plan " + json, 1, {"PermissionDenied", json}},
  });
}

// Regression: `train mlp --estimate-from` accepted a plan whose layers or parameter shapes
// `--plan` refused (a renamed layer, a changed weight shape, a deleted bias). One function
// checks both: the same exit code and the same offending entry.
TEST(CliHardeningTest, EstimateFromChecksThePlanAsPlanDoes) {
  VTPU_REQUIRE_DIGITS();
  const std::string model = std::string(VTPU_SOURCE_DIR) + "/examples/models/mlp.json";
  const std::string emitted = test_temp_path("dp_plan.json");
  ASSERT_EQ(
      run_vtpu("plan " + model + " --mesh 2x1 --strategy 'dp(data)' --emit " + emitted).exit_code,
      0);
  const nlohmann::json plan = nlohmann::json::parse(read_file(emitted));
  ASSERT_EQ(plan["layers"][0]["name"], "fc1");
  nlohmann::json renamed = plan, reshaped = plan, no_bias = plan;
  renamed["layers"][0]["name"] = "dense1";
  reshaped["parameter_shapes"]["fc1.w"] = {64, 32};
  no_bias["parameter_shapes"].erase("fc2.b");
  const std::vector<std::pair<nlohmann::json, std::string>> edits = {
      {renamed, "dense1"}, {reshaped, "fc1.w"}, {no_bias, "fc2.b"}};
  for (size_t i = 0; i < edits.size(); ++i) {
    const std::string path =
        write_file("edited_" + std::to_string(i) + ".json", edits[i].first.dump());
    for (const std::string flag : {"--plan", "--estimate-from"}) {
      SCOPED_TRACE(flag + " " + edits[i].second);
      const VtpuRun r = run_vtpu("train mlp --steps 1 " + flag + " " + path);
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_TRUE(names_all(r.err, {"InvalidArgument", path, edits[i].second}));
    }
  }
  // The plan as emitted still runs with both.
  for (const std::string flag : {"--plan", "--estimate-from"}) {
    EXPECT_EQ(run_vtpu("train mlp --steps 1 --json " + flag + " " + emitted).exit_code, 0) << flag;
  }
}

// The names in `dir`.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// The memory outputs are replaced whole: a write that fails midway (the file size limit, as a
// full disk) or a process killed midway (SIGXFSZ's default action) leaves each old file as it
// was and no temporary beside it. They used to be truncated in place.
TEST(CliHardeningTest, AFailedOrKilledWriteKeepsTheOldOutputs) {
  VTPU_REQUIRE_DIGITS();
  for (const bool killed : {false, true}) {
    SCOPED_TRACE(killed ? "killed by SIGXFSZ" : "EFBIG");
    const std::string dir = test_temp_path(killed ? "outputs_killed" : "outputs_failed");
    fs::remove_all(dir);
    fs::create_directories(dir);
    // Not --memory-profile: gzipped, it fits under the limit below (the same AtomicFile writes
    // it; tests/common/atomic_file_test.cc covers a failure of any file).
    const std::vector<std::string> flags = {"--memory-snapshot", "--memory-events"};
    std::string args = "train mlp --steps 2 --cores 2";
    for (const std::string& flag : flags) {
      const std::string path = dir + "/" + flag.substr(2) + ".out";
      std::ofstream(path) << "old " << flag << "\n";
      args += " " + flag + " " + path;
    }
    // ulimit -f counts 1024-byte blocks: 2 KiB is below every output's size. `trap '' XFSZ`
    // turns the signal into write(2)'s EFBIG.
    const VtpuRun r =
        run_vtpu(args, std::string("ulimit -f 2; ") + (killed ? "" : "trap '' XFSZ;"));
    if (killed) {
      EXPECT_EQ(r.exit_code, 128 + SIGXFSZ) << r.err;
    } else {
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_TRUE(names_all(r.err, {"ResourceExhausted", dir}));
    }
    std::vector<std::string> expected;
    for (const std::string& flag : flags) {
      EXPECT_EQ(read_file(dir + "/" + flag.substr(2) + ".out"), "old " + flag + "\n");
      expected.push_back(flag.substr(2) + ".out");
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(names_in(dir), expected);
  }
}

}  // namespace
