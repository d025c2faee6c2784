// The `vtpu` program under `mpirun` (cli/run_processes.h): one mesh over several processes gives
// the one-process run's losses bit for bit (read from --json), only process 0 prints (stdout is
// one JSON document), the JSON names the processes and every core's process, and core counts that
// do not split over the processes are usage errors. Skipped, saying why, when mpirun is missing
// or vtpu was built without MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/run_command.h"
#include "tests/test_data.h"
#include "vtpu/distributed/distributed.h"

namespace {

using vtpu::testing::names_all;

// Why the mpirun tests cannot run here, or "" when they can.
std::string skip_reason() {
  if (!vtpu::distributed::built_with_mpi()) {
    return "vtpu was built without MPI (install libopenmpi-dev: scripts/install-deps.sh)";
  }
  if (vtpu::run_command("command -v mpirun >/dev/null 2>&1").exit_code != 0) {
    return "mpirun is not on PATH (install openmpi-bin: scripts/install-deps.sh)";
  }
  return "";
}

#define SKIP_WITHOUT_MPIRUN()                                \
  if (const std::string why = skip_reason(); !why.empty()) { \
    GTEST_SKIP() << why;                                     \
  }

// OpenMPI refuses root without --allow-run-as-root; --oversubscribe lets more processes start
// than the machine has CPUs and --bind-to none keeps each process's cores off one CPU.
std::string mpirun(int processes) {
  return std::string("mpirun ") + (geteuid() == 0 ? "--allow-run-as-root " : "") +
         "--oversubscribe --bind-to none -np " + std::to_string(processes) + " ";
}

// `vtpu ARGS` in one process, or under mpirun with `processes` processes (0: no mpirun); stdout
// only. `timeout` turns a hang into exit code 124.
vtpu::CommandRun run_vtpu(int processes, const std::string& args) {
  return vtpu::run_command("timeout 300 " + (processes > 0 ? mpirun(processes) : std::string()) +
                           VTPU_CLI_PATH + " " + args + " 2>/dev/null");
}

// The same with stderr only (stdout dropped).
vtpu::CommandRun run_vtpu_stderr(int processes, const std::string& args) {
  return vtpu::run_command("timeout 300 " + mpirun(processes) + VTPU_CLI_PATH + " " + args +
                           " 2>&1 >/dev/null");
}

nlohmann::json parse_json(const vtpu::CommandRun& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // One document: a second process printing too would make this throw.
  return nlohmann::json::parse(r.output);
}

// Per-core entries: one per core, in core order, each naming the process that hosts it.
void expect_cores_named_by_process(const nlohmann::json& cores, int num_cores, int processes) {
  ASSERT_EQ(cores.size(), static_cast<size_t>(num_cores));
  for (int c = 0; c < num_cores; ++c) {
    EXPECT_EQ(cores[c]["core"], c);
    EXPECT_EQ(cores[c]["process"], c / (num_cores / processes)) << "core " << c;
  }
}

TEST(MpirunCliTest, TrainMlpOnTwoProcessesRepeatsOneProcessBitForBit) {
  SKIP_WITHOUT_MPIRUN();
  VTPU_REQUIRE_DIGITS();
  const std::string args = "train mlp --cores 8 --steps 40 --json";
  const nlohmann::json one = parse_json(run_vtpu(0, args));
  const nlohmann::json two = parse_json(run_vtpu(2, args));
  EXPECT_EQ(two["losses"].get<std::vector<double>>(), one["losses"].get<std::vector<double>>());
  EXPECT_EQ(two["test_accuracy"], one["test_accuracy"]);
  EXPECT_EQ(two["replicas_identical"], true);
  EXPECT_EQ(one["num_processes"], 1);
  EXPECT_EQ(two["num_processes"], 2);
  expect_cores_named_by_process(two["hbm"], 8, 2);
  expect_cores_named_by_process(two["all_reduce"], 8, 2);
  // Every core's figures, not process 0's four: each core reduced the same bucket.
  for (const nlohmann::json& c : two["all_reduce"])
    EXPECT_EQ(c["bytes"], one["all_reduce"][0]["bytes"]);
}

TEST(MpirunCliTest, CoresPerProcessOnFourProcessesIsTheSameRun) {
  SKIP_WITHOUT_MPIRUN();
  VTPU_REQUIRE_DIGITS();
  const nlohmann::json one = parse_json(run_vtpu(0, "train mlp --cores 8 --steps 20 --json"));
  const nlohmann::json four =
      parse_json(run_vtpu(4, "train mlp --cores-per-process 2 --steps 20 --json"));
  EXPECT_EQ(four["losses"].get<std::vector<double>>(), one["losses"].get<std::vector<double>>());
  EXPECT_EQ(four["num_processes"], 4);
  expect_cores_named_by_process(four["hbm"], 8, 4);
}

TEST(MpirunCliTest, TrainTransformerWithTheDataAxisAcrossProcesses) {
  SKIP_WITHOUT_MPIRUN();
  const std::string args = "train transformer --mesh 2x4 --steps 3 --batch 8 --no-reference --json";
  const nlohmann::json one = parse_json(run_vtpu(0, args));
  const nlohmann::json two = parse_json(run_vtpu(2, args));
  EXPECT_EQ(two["mesh"]["losses"].get<std::vector<double>>(),
            one["mesh"]["losses"].get<std::vector<double>>());
  EXPECT_EQ(two["num_processes"], 2);
  EXPECT_EQ(two["mesh"]["num_processes"], 2);
  EXPECT_EQ(two["replicas_identical"], true);
  expect_cores_named_by_process(two["mesh"]["cores"], 8, 2);
}

TEST(MpirunCliTest, TrainFsdpOnTwoProcessesRepeatsOneProcessBitForBit) {
  SKIP_WITHOUT_MPIRUN();
  VTPU_REQUIRE_DIGITS();
  const std::string args = "train fsdp --cores 8 --steps 20 --json";
  const nlohmann::json one = parse_json(run_vtpu(0, args));
  const nlohmann::json two = parse_json(run_vtpu(2, args));
  EXPECT_EQ(two["fsdp"]["losses"].get<std::vector<double>>(),
            one["fsdp"]["losses"].get<std::vector<double>>());
  EXPECT_EQ(two["data_parallel"]["losses"].get<std::vector<double>>(),
            one["data_parallel"]["losses"].get<std::vector<double>>());
  EXPECT_EQ(two["num_processes"], 2);
  EXPECT_EQ(two["fsdp"]["num_processes"], 2);
  EXPECT_EQ(two["fsdp"]["padding_is_zero"], true);
  expect_cores_named_by_process(two["fsdp"]["all_gather"], 8, 2);
}

TEST(MpirunCliTest, BenchCollectivesChecksEveryRowAcrossProcesses) {
  SKIP_WITHOUT_MPIRUN();
  const nlohmann::json j = parse_json(
      run_vtpu(2, "bench collectives --cores 8 --max-bytes 64K --iters 3 --warmup 1 --json"));
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["config"]["num_processes"], 2);
  EXPECT_EQ(j["config"]["cores_per_process"], 4);
  ASSERT_FALSE(j["rows"].empty());
  for (const nlohmann::json& row : j["rows"]) {
    EXPECT_EQ(row["wrong"], 0);
    EXPECT_EQ(row["process_time_us"].size(), 2u);
  }
}

TEST(MpirunCliTest, ReshardAcrossProcessesChecksAgainstTheHostReference) {
  SKIP_WITHOUT_MPIRUN();
  for (const char* specs : {"--from \"P('x')\" --to \"P(None, 'y')\"",
                            "--from \"P('x', unreduced={'y'})\" --to \"P(None, 'z')\""}) {
    const nlohmann::json j = parse_json(run_vtpu(
        2, std::string("reshard --mesh 2x2x2 --shape 16,16 ") + specs + " --iters 2 --json"));
    EXPECT_EQ(j["check"]["mismatched_elements"], 0) << specs;
    EXPECT_EQ(j["run"]["num_processes"], 2);
  }
}

TEST(MpirunCliTest, CoresThatDoNotSplitOverTheProcessesAreUsageErrors) {
  SKIP_WITHOUT_MPIRUN();
  const vtpu::CommandRun uneven = run_vtpu_stderr(4, "train mlp --cores 6 --steps 1");
  EXPECT_EQ(uneven.exit_code, 2) << uneven.output;
  EXPECT_TRUE(names_all(uneven.output, {"--cores 6", "4 processes"}));
  const vtpu::CommandRun both =
      run_vtpu_stderr(2, "train mlp --cores 8 --cores-per-process 3 --steps 1");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_TRUE(names_all(both.output, {"--cores 8", "--cores-per-process 3", "--cores 6"}));
}

TEST(MpirunCliTest, OneProcessCommandsRefuseSeveralProcesses) {
  SKIP_WITHOUT_MPIRUN();
  const vtpu::CommandRun r = run_vtpu_stderr(2, "bench memory");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(names_all(r.output, {"bench memory", "2"}));
}

}  // namespace
