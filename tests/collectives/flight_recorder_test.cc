// The flight recorder: each core's last N collectives with their fields and states, dumped on
// request and, at a hang, to a file that shows where every core stood.
#include "vtpu/collectives/flight_recorder.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/collectives/test_util.h"
#include "tests/temp_path.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing_util::iota_group;
using testing_util::small_options;

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The dump's entries of one core, in record order.
std::vector<json> entries_of(const json& dump, int core) {
  std::vector<json> out;
  for (const json& e : dump.at("entries")) {
    if (e.at("core") == core) out.push_back(e);
  }
  return out;
}

CommunicatorOptions with_recorder(const Runtime& rt, std::shared_ptr<FlightRecorder> r) {
  CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
  o.flight_recorder = std::move(r);
  return o;
}

// Four known collectives on two cores: every field of every entry, as the calls define them.
TEST(FlightRecorderTest, OnRequestDumpShowsKnownCollectives) {
  auto recorder = std::make_shared<FlightRecorder>(FlightRecorderOptions{16, ""});
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1}, with_recorder(rt, recorder));
  const int64_t before = wall_ns();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> f(8, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(f));
    std::vector<int32_t> s(3, 1), g(6);
    const std::array<int64_t, 1> three = {3};
    comm.all_gather<int32_t>(ctx, s, g, three);
    std::vector<double> d(2, 1.0);
    comm.broadcast<double>(ctx, std::span<double>(d), 1);
    comm.barrier(ctx);
  });
  const int64_t after = wall_ns();
  const json dump = recorder->dump_json();
  EXPECT_EQ(dump.at("reason"), "on request");
  EXPECT_EQ(dump.at("entries_per_core"), 16);
  const json& comms = dump.at("communicators");
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].at("id"), comm.flight_recorder_id());
  EXPECT_EQ(comms[0].at("group"), json::array({0, 1}));

  struct Expected {
    const char* name;
    json sizes;
    const char* dtype;
    uint64_t bytes;
    const char* algorithm;
  };
  // 32 B on 2 cores is a small message (recursive doubling); in process, all_gather is direct.
  const std::vector<Expected> expected = {
      {"vtpu:all_reduce", json::array({json::array({8})}), "f32", 32, "recursive_doubling"},
      {"vtpu:all_gather", json::array({json::array({3})}), "s32", 12, "direct"},
      {"vtpu:broadcast", json::array({json::array({2})}), "f64", 16, "chain"},
      {"vtpu:barrier", json::array(), nullptr, 0, "dissemination"},
  };
  for (int core = 0; core < 2; ++core) {
    const std::vector<json> e = entries_of(dump, core);
    ASSERT_EQ(e.size(), expected.size());
    for (size_t i = 0; i < e.size(); ++i) {
      SCOPED_TRACE(e[i].dump());
      EXPECT_EQ(e[i].at("record_id"), i);
      EXPECT_EQ(e[i].at("collective_seq_id"), i);
      EXPECT_EQ(e[i].at("communicator_id"), comm.flight_recorder_id());
      EXPECT_EQ(e[i].at("profiling_name"), expected[i].name);
      EXPECT_EQ(e[i].at("input_sizes"), expected[i].sizes);
      EXPECT_EQ(e[i].at("input_dtypes"),
                expected[i].dtype ? json::array({expected[i].dtype}) : json::array());
      EXPECT_EQ(e[i].at("bytes"), expected[i].bytes);
      EXPECT_EQ(e[i].at("algorithm"), expected[i].algorithm);
      EXPECT_EQ(e[i].at("state"), "completed");
      EXPECT_TRUE(e[i].at("error").is_null());
      const int64_t created = e[i].at("time_created_ns");
      const int64_t started = e[i].at("time_discovered_started_ns");
      const int64_t completed = e[i].at("time_discovered_completed_ns");
      // Wall times are converted from the steady clock, so allow the clocks' drift (1 ms).
      EXPECT_GE(created, before - 1'000'000);
      EXPECT_LE(created, started);
      EXPECT_LE(started, completed);
      EXPECT_LE(completed, after + 1'000'000);
      EXPECT_NEAR(e[i].at("duration_ms").get<double>(), (completed - created) * 1e-6, 1e-3);
    }
    EXPECT_EQ(e[0].at("reduce_op"), "sum");
    EXPECT_EQ(e[2].at("root"), 1);
    EXPECT_FALSE(e[1].contains("root"));
  }
}

// A ring of 4 entries per core keeps the last 4 of 10 collectives.
TEST(FlightRecorderTest, KeepsTheLastNCollectivesPerCore) {
  auto recorder = std::make_shared<FlightRecorder>(FlightRecorderOptions{4, ""});
  Runtime rt(small_options(3));
  Communicator comm(rt, iota_group(3), with_recorder(rt, recorder));
  rt.run_spmd([&](CoreContext& ctx) {
    for (int i = 0; i < 10; ++i) {
      std::vector<float> v(static_cast<size_t>(i + 1), 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
    }
  });
  const json dump = recorder->dump_json();
  ASSERT_EQ(dump.at("entries").size(), 12u);
  for (int core = 0; core < 3; ++core) {
    const std::vector<json> e = entries_of(dump, core);
    ASSERT_EQ(e.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(e[static_cast<size_t>(i)].at("record_id"), 6 + i);
      EXPECT_EQ(e[static_cast<size_t>(i)].at("collective_seq_id"), 6 + i);
      EXPECT_EQ(e[static_cast<size_t>(i)].at("input_sizes"), json::array({json::array({7 + i})}));
    }
  }
}

// Core 2 never arrives at the third all_reduce: the file written at the timeout shows cores 0 and
// 1 inside sequence 2 (started) and core 2's last entry at sequence 1, completed. After the run,
// the entries of cores 0 and 1 for sequence 2 have ended with the timeout's error.
TEST(FlightRecorderTest, HangDumpShowsWhereEachCoreStands) {
  const std::string dir = test_temp_path("flight_recorder_hang");
  std::filesystem::create_directories(dir);
  auto recorder = std::make_shared<FlightRecorder>(FlightRecorderOptions{8, dir});
  RuntimeOptions ro = small_options(3);
  ro.collective_timeout = 300ms;
  Runtime rt(ro);
  Communicator comm(rt, iota_group(3), with_recorder(rt, recorder));
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    for (int i = 0; i < 3; ++i) {
      if (ctx.core_id() == 2 && i == 2) return;
      std::vector<float> v(4, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
    }
  }),
               Error);
  std::ifstream in(std::filesystem::path(dir) / "vtpu_flight_recorder_0.json");
  ASSERT_TRUE(in) << "no dump in " << dir;
  const json dump = json::parse(in);
  EXPECT_NE(dump.at("reason").get<std::string>().find("timed out"), std::string::npos)
      << dump.at("reason");
  for (int core : {0, 1}) {
    const std::vector<json> e = entries_of(dump, core);
    ASSERT_EQ(e.size(), 3u) << "core " << core;
    EXPECT_EQ(e[1].at("state"), "completed");
    EXPECT_EQ(e[2].at("collective_seq_id"), 2);
    EXPECT_EQ(e[2].at("state"), "started") << "core " << core;
    EXPECT_TRUE(e[2].at("time_discovered_completed_ns").is_null());
  }
  const std::vector<json> e2 = entries_of(dump, 2);
  ASSERT_EQ(e2.size(), 2u);
  EXPECT_EQ(e2[1].at("collective_seq_id"), 1);
  EXPECT_EQ(e2[1].at("state"), "completed");

  // Written once: the later aborts of the same failure leave the file alone, and the entries
  // have ended since (one core failed with the timeout, the other too or aborted by it).
  const json now = recorder->dump_json();
  int timed_out = 0;
  for (int core : {0, 1}) {
    const json last = entries_of(now, core).back();
    EXPECT_TRUE(last.at("state") == "failed" || last.at("state") == "aborted") << last;
    EXPECT_FALSE(last.at("time_discovered_completed_ns").is_null());
    timed_out += last.at("error").get<std::string>().find("DeadlineExceeded") != std::string::npos;
  }
  EXPECT_GE(timed_out, 1);
}

// A recorder of 0 entries records nothing, and its communicators still work.
TEST(FlightRecorderTest, ZeroEntriesTurnsRecordingOff) {
  auto recorder = std::make_shared<FlightRecorder>(FlightRecorderOptions{0, ""});
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1}, with_recorder(rt, recorder));
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(4, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
    EXPECT_EQ(v[0], 2.0f);
  });
  EXPECT_TRUE(recorder->dump_json().at("entries").empty());
}

// The environment: a size and a directory, an empty size is the default, and a bad size is
// InvalidArgument naming the variable and its value.
TEST(FlightRecorderTest, OptionsFromTheEnvironment) {
  ::setenv("VTPU_FLIGHT_RECORDER_SIZE", "5", 1);
  ::setenv("VTPU_FLIGHT_RECORDER_DIR", "/some/dir", 1);
  FlightRecorderOptions o = FlightRecorderOptions::from_env();
  EXPECT_EQ(o.entries_per_core, 5u);
  EXPECT_EQ(o.dump_dir, "/some/dir");
  ::setenv("VTPU_FLIGHT_RECORDER_SIZE", "", 1);
  EXPECT_EQ(FlightRecorderOptions::from_env().entries_per_core,
            FlightRecorderOptions::kDefaultEntries);
  for (const char* bad : {"-1", "12x", "2000000"}) {
    ::setenv("VTPU_FLIGHT_RECORDER_SIZE", bad, 1);
    try {
      FlightRecorderOptions::from_env();
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(e.message().find("VTPU_FLIGHT_RECORDER_SIZE"), std::string::npos) << e.what();
      EXPECT_NE(e.message().find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("VTPU_FLIGHT_RECORDER_SIZE");
  ::unsetenv("VTPU_FLIGHT_RECORDER_DIR");
}

}  // namespace
}  // namespace vtpu
