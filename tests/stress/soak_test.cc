// Tests for stress/soak.h and `vtpu stress soak`: a short soak compacts, checks every buffer and
// finds nothing wrong; a buffer corrupted behind the arena's back is found; bad options are usage
// errors.
#include "vtpu/stress/soak.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/expect_error.h"
#include "tests/run_command.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

// A small soak that compacts often: 4 MiB arenas, buffers up to 256 KiB.
SoakOptions short_soak() {
  SoakOptions o;
  o.cores = 4;
  o.seconds = 1.0;
  o.hbm_bytes = 4 * kMiB;
  o.bucket_bytes = 16 * kKiB;
  o.sizes.lognormal.median_bytes = 4 * kKiB;
  o.sizes.lognormal.max_bytes = 256 * kKiB;
  o.cross_core_per_mille = 100;
  return o;
}

TEST(SoakTest, ShortSoakCompactsAndKeepsEveryBuffer) {
  const SoakOptions o = short_soak();
  const SoakResult r = run_soak(o);
  const SoakCounters& k = r.total;
  EXPECT_GE(r.seconds, o.seconds);
  ASSERT_GE(r.rounds, 1u);
  EXPECT_GT(k.compactions, 0u);
  EXPECT_GT(k.bytes_moved, 0u);
  EXPECT_GT(k.cross_core_frees, 0u);
  // Every buffer is checked at least once: when it is freed (by its core or the next) or at the
  // end, and all live ones after each compaction.
  EXPECT_GE(k.checksum_checks, k.allocations);
  EXPECT_EQ(k.checksum_mismatches, 0u);
  EXPECT_EQ(k.lost_buffers, 0u);
  EXPECT_EQ(k.all_reduces, r.rounds * static_cast<uint64_t>(o.cores));
  EXPECT_EQ(k.all_reduce_failures, 0u);
  EXPECT_EQ(soak_exit_code(r), 0);
  ASSERT_EQ(r.cores.size(), 4u);
  SoakCounters sum;
  for (const SoakCounters& c : r.cores) sum += c;
  EXPECT_EQ(sum.compactions, k.compactions);
  EXPECT_EQ(sum.checksum_checks, k.checksum_checks);
}

// A byte flipped in a live buffer after core 0's first compaction, as a compaction that copied
// wrongly would leave it: the check that follows counts it once and the exit code is 1.
TEST(SoakTest, CorruptedBufferIsDetected) {
  SoakOptions o = short_soak();
  o.corrupt_at_compaction_for_testing = 1;
  const SoakResult r = run_soak(o);
  ASSERT_GE(r.cores[0].compactions, 1u);
  EXPECT_EQ(r.total.checksum_mismatches, 1u);
  EXPECT_EQ(r.cores[0].checksum_mismatches, 1u);
  EXPECT_EQ(r.total.lost_buffers, 0u);
  EXPECT_EQ(soak_exit_code(r), 1);
}

TEST(SoakTest, BadOptions) {
  SoakOptions o = short_soak();
  o.policy = "planned";
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { run_soak(o); }, {"planned"});
  o = short_soak();
  o.bucket_bytes = 6;
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { run_soak(o); }, {"6"});
  o = short_soak();
  o.occupancy = 0.0;
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { run_soak(o); }, {"occupancy 0"});
  o = short_soak();
  o.hbm_bytes = 32 * kKiB;
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { run_soak(o); }, {"32768"});
}

std::string cli(const std::string& args) {
  return "timeout 120 " + std::string(VTPU_CLI_PATH) + " stress soak " + args;
}

// The short soak as the CLI runs it (scripts/soak.sh), its counters read from --json.
TEST(SoakCliTest, JsonCountersOfAShortSoak) {
  const CommandRun run = run_command(cli("--seconds 1 --cores 8 --hbm-bytes 4M --json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["cores"], 8);
  EXPECT_EQ(j["hbm_bytes"], 4 * kMiB);
  EXPECT_GE(j["seconds"].get<double>(), 1.0);
  const auto rounds = j["rounds"].get<uint64_t>();
  ASSERT_GE(rounds, 1u);
  EXPECT_EQ(j["all_reduces"].get<uint64_t>(), 8 * rounds);
  EXPECT_GT(j["compactions"].get<uint64_t>(), 0u);
  EXPECT_GT(j["bytes_moved"].get<uint64_t>(), 0u);
  EXPECT_GE(j["checksum_checks"].get<uint64_t>(), j["allocations"].get<uint64_t>());
  EXPECT_EQ(j["checksum_mismatches"], 0);
  EXPECT_EQ(j["lost_buffers"], 0);
  EXPECT_EQ(j["all_reduce_failures"], 0);
  ASSERT_EQ(j["per_core"].size(), 8u);
  uint64_t moved = 0;
  for (const nlohmann::json& c : j["per_core"]) moved += c["bytes_moved"].get<uint64_t>();
  EXPECT_EQ(moved, j["bytes_moved"].get<uint64_t>());
}

TEST(SoakCliTest, BadUsageExitsTwo) {
  EXPECT_EQ(run_command(cli("--seconds 0 2>&1")).exit_code, 2);
  EXPECT_EQ(run_command(cli("--allocator planned 2>&1")).exit_code, 2);
  EXPECT_EQ(run_command(cli("--hbm-bytes 100K 2>&1")).exit_code, 2);
  // A replay option before `soak` does not apply to it.
  const std::string replay_option =
      "timeout 60 " + std::string(VTPU_CLI_PATH) + " stress --cores 4 soak --seconds 1 2>&1";
  const CommandRun run = run_command(replay_option);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("--cores"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace vtpu
