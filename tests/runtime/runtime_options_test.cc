// Tests for runtime/runtime_options.h: defaults, JSON loading of every key, and the errors that
// name the bad key or value.
#include "vtpu/runtime/runtime_options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/temp_path.h"
#include "vtpu/common/error.h"
#include "vtpu/common/host.h"
#include "vtpu/common/units.h"

namespace vtpu {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr uint64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10;

TEST(RuntimeOptionsTest, Defaults) {
  const RuntimeOptions o;
  EXPECT_EQ(o.num_cores, 8);
  EXPECT_EQ(o.hbm_bytes_per_core, 16 * kGiB);
  EXPECT_EQ(o.allocator, "bfc");
  EXPECT_TRUE(o.hbm_backing);
  EXPECT_TRUE(o.pad_arrays);
  EXPECT_EQ(o.link_slot_bytes, kMiB);
  EXPECT_EQ(o.link_num_slots, 4);
  EXPECT_EQ(o.collective_timeout, std::nullopt);  // the scaled default (below)
  EXPECT_NO_THROW(o.validate());
}

// Pinning and the collective timeout can be set for every command
// through the environment (train fsdp, train transformer and the benches have no --config); a
// --config key still wins; a bad value names the variable.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(RuntimeOptionsTest, EnvironmentGivesTheDefaultsOfPinningAndTheCollectiveTimeout) {
  {
    ScopedEnv pin("VTPU_PIN_THREADS", "off");
    ScopedEnv timeout("VTPU_COLLECTIVE_TIMEOUT_MS", "600000");
    const RuntimeOptions o;
    EXPECT_EQ(o.pin_threads, "off");
    EXPECT_EQ(o.collective_timeout, 600000ms);
    const RuntimeOptions from_file =
        RuntimeOptions::from_json(json{{"pin_threads", "on"}, {"collective_timeout_ms", 5}});
    EXPECT_EQ(from_file.pin_threads, "on");
    EXPECT_EQ(from_file.collective_timeout, 5ms);
    EXPECT_EQ(RuntimeOptions::from_json(json::object()).pin_threads, "off");
  }
  {
    ScopedEnv empty("VTPU_PIN_THREADS", "");  // empty means unset
    EXPECT_EQ(RuntimeOptions{}.pin_threads, "auto");
    EXPECT_EQ(RuntimeOptions{}.collective_timeout, std::nullopt);
  }
  for (const char* bad : {"1e3", "0", "-5", "30s", "604800001", "99999999999999999999"}) {
    ScopedEnv timeout("VTPU_COLLECTIVE_TIMEOUT_MS", bad);
    try {
      RuntimeOptions o;
      ADD_FAILURE() << bad << " was accepted: " << o.effective_collective_timeout().count();
    } catch (const InvalidArgumentError& e) {
      EXPECT_EQ(e.message(), std::string("VTPU_COLLECTIVE_TIMEOUT_MS is '") + bad +
                                 "' (expected a whole number of milliseconds, 1..604800000, at "
                                 "most 7 days)");
    }
  }
  ScopedEnv pin("VTPU_PIN_THREADS", "yes");
  try {
    RuntimeOptions o;
    ADD_FAILURE() << "yes was accepted: " << o.pin_threads;
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.message(), "VTPU_PIN_THREADS is 'yes' (expected \"auto\", \"on\" or \"off\")");
  }
}

// The unset collective timeout is 30 s x max(1, cores / CPUs), worked by hand; a
// timeout that is set (a --config key or VTPU_COLLECTIVE_TIMEOUT_MS) is never scaled.
TEST(RuntimeOptionsTest, DefaultCollectiveTimeoutScalesWithCoresPerCpu) {
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(1, 1), 30000ms);
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(2, 2), 30000ms);
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(4, 8), 30000ms);  // never below 30 s
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(3, 2), 45000ms);  // 1.5 x 30 s
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(7, 3), 70000ms);  // 7/3 x 30 s
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(8, 2), 120000ms);
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(1024, 2), 15360000ms);  // 4 h 16 min
  EXPECT_EQ(RuntimeOptions::default_collective_timeout(1024, 1), 30720000ms);
  EXPECT_THROW(RuntimeOptions::default_collective_timeout(0, 2), InvalidArgumentError);
  EXPECT_THROW(RuntimeOptions::default_collective_timeout(2, 0), InvalidArgumentError);

  RuntimeOptions o;
  o.num_cores = 2 * usable_cpus();
  EXPECT_EQ(o.effective_collective_timeout(), 60000ms);
  EXPECT_EQ(o.to_json().at("collective_timeout_ms").get<int64_t>(), 60000);
  o.collective_timeout = 5000ms;
  EXPECT_EQ(o.effective_collective_timeout(), 5000ms);
  const RuntimeOptions set_in_file =
      RuntimeOptions::from_json(json{{"num_cores", 1024}, {"collective_timeout_ms", 30000}});
  EXPECT_EQ(set_in_file.effective_collective_timeout(), 30000ms);
  ScopedEnv timeout("VTPU_COLLECTIVE_TIMEOUT_MS", "30000");
  RuntimeOptions from_env;
  from_env.num_cores = 1024;
  EXPECT_EQ(from_env.effective_collective_timeout(), 30000ms);
}

TEST(RuntimeOptionsTest, EmptyObjectGivesDefaults) {
  const RuntimeOptions o = RuntimeOptions::from_json(json::object());
  EXPECT_EQ(o.num_cores, 8);
  EXPECT_EQ(o.hbm_bytes_per_core, 16 * kGiB);
  EXPECT_EQ(o.allocator, "bfc");
  EXPECT_TRUE(o.hbm_backing);
  EXPECT_EQ(o.link_slot_bytes, kMiB);
  EXPECT_EQ(o.link_num_slots, 4);
  EXPECT_EQ(o.collective_timeout, std::nullopt);
}

TEST(RuntimeOptionsTest, EveryKeyWithIntegerBytes) {
  const RuntimeOptions o = RuntimeOptions::from_json(json::parse(R"({
    "num_cores": 4, "hbm_bytes_per_core": 1073741824, "allocator": "bfc",
    "hbm_backing": false, "pad_arrays": false, "link_slot_bytes": 65536, "link_num_slots": 8,
    "collective_timeout_ms": 1500})"));
  EXPECT_FALSE(o.pad_arrays);
  EXPECT_EQ(o.num_cores, 4);
  EXPECT_EQ(o.hbm_bytes_per_core, kGiB);
  EXPECT_EQ(o.allocator, "bfc");
  EXPECT_FALSE(o.hbm_backing);
  EXPECT_EQ(o.link_slot_bytes, 64 * kKiB);
  EXPECT_EQ(o.link_num_slots, 8);
  EXPECT_EQ(o.collective_timeout, 1500ms);
}

TEST(RuntimeOptionsTest, EveryKeyWithStringBytes) {
  const RuntimeOptions o = RuntimeOptions::from_json(json::parse(R"({
    "num_cores": 1024, "hbm_bytes_per_core": "16G", "allocator": "bfc",
    "hbm_backing": true, "link_slot_bytes": "64K", "link_num_slots": 1024,
    "collective_timeout_ms": 1})"));
  EXPECT_EQ(o.num_cores, 1024);
  EXPECT_EQ(o.hbm_bytes_per_core, 17179869184u);
  EXPECT_TRUE(o.hbm_backing);
  EXPECT_EQ(o.link_slot_bytes, 65536u);
  EXPECT_EQ(o.link_num_slots, 1024);
  EXPECT_EQ(o.collective_timeout, 1ms);
  EXPECT_EQ(RuntimeOptions::from_json(json{{"hbm_bytes_per_core", "32GiB"}}).hbm_bytes_per_core,
            32 * kGiB);
  EXPECT_EQ(RuntimeOptions::from_json(json{{"link_slot_bytes", "1G"}}).link_slot_bytes, kGiB);
  EXPECT_EQ(RuntimeOptions::from_json(json{{"hbm_bytes_per_core", "256"}}).hbm_bytes_per_core,
            256u);
}

TEST(RuntimeOptionsTest, IntegersBuiltInCppAreAccepted) {
  // Regression: a positive integer built in C++ is stored by nlohmann as a signed number and was
  // rejected as "expected a non-negative integer of bytes".
  const RuntimeOptions o =
      RuntimeOptions::from_json(json{{"hbm_bytes_per_core", 4096}, {"link_slot_bytes", 128}});
  EXPECT_EQ(o.hbm_bytes_per_core, 4096u);
  EXPECT_EQ(o.link_slot_bytes, 128u);
}

TEST(RuntimeOptionsTest, ToJsonRoundTrips) {
  RuntimeOptions o;
  o.num_cores = 3;
  o.hbm_bytes_per_core = 5 * kMiB + 256;
  o.hbm_backing = false;
  o.link_slot_bytes = 4096;
  o.link_num_slots = 2;
  o.collective_timeout = 250ms;
  o.hbm_memory_fraction = 0.5;
  o.auto_defragment = false;
  o.collective_algorithm = "torus_2d";
  o.pad_arrays = false;
  const json j = o.to_json();
  EXPECT_FALSE(j.at("pad_arrays").get<bool>());
  EXPECT_EQ(j.at("num_cores").get<int>(), 3);
  EXPECT_EQ(j.at("hbm_bytes_per_core").get<uint64_t>(), 5 * kMiB + 256);
  EXPECT_EQ(j.at("allocator").get<std::string>(), "bfc");
  EXPECT_FALSE(j.at("hbm_backing").get<bool>());
  EXPECT_EQ(j.at("link_slot_bytes").get<uint64_t>(), 4096u);
  EXPECT_EQ(j.at("link_num_slots").get<int>(), 2);
  EXPECT_EQ(j.at("collective_timeout_ms").get<int64_t>(), 250);
  EXPECT_EQ(j.at("hbm_memory_fraction").get<double>(), 0.5);
  EXPECT_FALSE(j.at("auto_defragment").get<bool>());
  EXPECT_EQ(j.at("collective_algorithm").get<std::string>(), "torus_2d");
  EXPECT_EQ(j.size(), 20u);  // 13 (with pin_threads and pad_arrays) + the memory hierarchy's 7
  const RuntimeOptions back = RuntimeOptions::from_json(j);
  EXPECT_EQ(back.num_cores, 3);
  EXPECT_EQ(back.hbm_bytes_per_core, 5 * kMiB + 256);
  EXPECT_FALSE(back.hbm_backing);
  EXPECT_FALSE(back.pad_arrays);
  EXPECT_EQ(back.link_slot_bytes, 4096u);
  EXPECT_EQ(back.link_num_slots, 2);
  EXPECT_EQ(back.collective_timeout, 250ms);
  EXPECT_EQ(back.hbm_memory_fraction, 0.5);
  EXPECT_FALSE(back.auto_defragment);
  EXPECT_EQ(back.collective_algorithm, "torus_2d");
  // Also through text, where positive integers parse as unsigned.
  const RuntimeOptions text = RuntimeOptions::from_json(json::parse(j.dump()));
  EXPECT_EQ(text.hbm_bytes_per_core, 5 * kMiB + 256);
  EXPECT_EQ(text.collective_timeout, 250ms);
}

// Expects from_json(j) to throw InvalidArgumentError whose message contains every needle.
void expect_rejected(const json& j, std::initializer_list<std::string> needles) {
  SCOPED_TRACE(j.dump());
  try {
    RuntimeOptions::from_json(j);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgumentError& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "missing '" << needle << "' in: " << e.what();
    }
  }
}

TEST(RuntimeOptionsTest, CollectiveAlgorithmKey) {
  EXPECT_EQ(RuntimeOptions().collective_algorithm, "auto");
  for (const std::string& name : RuntimeOptions::collective_algorithm_names()) {
    EXPECT_EQ(RuntimeOptions::from_json(json{{"collective_algorithm", name}}).collective_algorithm,
              name);
  }
  expect_rejected(json{{"collective_algorithm", "fastest"}},
                  {"collective_algorithm", "fastest", "bidirectional_ring"});
  expect_rejected(json{{"collective_algorithm", 3}}, {"collective_algorithm", "3"});
  RuntimeOptions o;
  o.collective_algorithm = "";
  EXPECT_THROW(o.validate(), InvalidArgumentError);
}

// Issue 7: the memory hierarchy's keys load, round-trip, and are range-checked.
TEST(RuntimeOptionsTest, MemoryHierarchyKeys) {
  const RuntimeOptions o = RuntimeOptions::from_json(json{{"hardware_profile", "v4"},
                                                          {"vmem_limit_bytes", "8M"},
                                                          {"smem_bytes", 65536},
                                                          {"accumulator_bytes", "2M"},
                                                          {"dma_bytes_per_second", 1e9},
                                                          {"dma_latency_us", 5},
                                                          {"dma_timeout_ms", 1000}});
  EXPECT_EQ(o.hardware_profile, "v4");
  EXPECT_EQ(o.vmem_limit_bytes, 8 * kMiB);
  EXPECT_EQ(o.smem_bytes, 65536u);
  EXPECT_EQ(o.accumulator_bytes, 2 * kMiB);
  EXPECT_EQ(o.dma_bytes_per_second, 1e9);
  EXPECT_EQ(o.dma_latency, std::chrono::microseconds(5));
  EXPECT_EQ(o.dma_timeout, 1000ms);
  const RuntimeOptions back = RuntimeOptions::from_json(o.to_json());
  EXPECT_EQ(back.vmem_limit_bytes, 8 * kMiB);
  EXPECT_EQ(back.hardware_profile, "v4");
  expect_rejected(json{{"vmem_limit_bytes", "8G"}}, {"vmem_limit_bytes", "8589934592"});
  expect_rejected(json{{"dma_bytes_per_second", -1}}, {"dma_bytes_per_second"});
  // Regression: 1e-300 B/s was accepted and, its sleep overflowing, ran unthrottled.
  expect_rejected(json{{"dma_bytes_per_second", 1e-300}}, {"dma_bytes_per_second", ">= 1 B/s"});
  expect_rejected(json{{"hardware_profile", 5}}, {"hardware_profile", "5"});
}

TEST(RuntimeOptionsTest, UnknownKeyIsNamedWithTheKnownOnes) {
  expect_rejected(json{{"num_core", 4}},
                  {"num_core:", "num_cores", "hbm_bytes_per_core", "collective_timeout_ms"});
  expect_rejected(json{{"num_cores", 4}, {"HBM", "1G"}}, {"HBM:"});
}

TEST(RuntimeOptionsTest, NotAnObject) {
  expect_rejected(json::array({1, 2}), {"JSON object", "[1,2]"});
  expect_rejected(json(8), {"JSON object", "got 8"});
  expect_rejected(json(nullptr), {"JSON object", "null"});
}

TEST(RuntimeOptionsTest, WrongTypesNameTheKeyAndValue) {
  expect_rejected(json{{"num_cores", "8"}}, {"num_cores:", "\"8\"", "integer"});
  expect_rejected(json{{"num_cores", 2.5}}, {"num_cores:", "2.5"});
  expect_rejected(json{{"num_cores", true}}, {"num_cores:", "true"});
  expect_rejected(json{{"hbm_bytes_per_core", true}}, {"hbm_bytes_per_core:", "true"});
  expect_rejected(json{{"hbm_bytes_per_core", 1.5e9}}, {"hbm_bytes_per_core:"});
  expect_rejected(json{{"hbm_bytes_per_core", -1}}, {"hbm_bytes_per_core:", "-1"});
  expect_rejected(json::parse(R"({"hbm_bytes_per_core": -4096})"),
                  {"hbm_bytes_per_core:", "-4096"});
  expect_rejected(json{{"hbm_bytes_per_core", "12Q"}}, {"hbm_bytes_per_core:", "\"12Q\""});
  expect_rejected(json{{"link_slot_bytes", json::array()}}, {"link_slot_bytes:", "[]"});
  expect_rejected(json{{"allocator", 3}}, {"allocator:", "3"});
  expect_rejected(json{{"hbm_backing", "yes"}}, {"hbm_backing:", "\"yes\""});
  expect_rejected(json{{"hbm_backing", 1}}, {"hbm_backing:", "1"});
  expect_rejected(json{{"pad_arrays", "off"}}, {"pad_arrays:", "\"off\""});
  expect_rejected(json{{"link_num_slots", nullptr}}, {"link_num_slots:", "null"});
  expect_rejected(json{{"collective_timeout_ms", "30s"}}, {"collective_timeout_ms:", "\"30s\""});
  expect_rejected(json{{"hbm_memory_fraction", "0.5"}}, {"hbm_memory_fraction:", "\"0.5\""});
  expect_rejected(json{{"auto_defragment", 0}}, {"auto_defragment:", "0"});
}

TEST(RuntimeOptionsTest, OutOfRangeValuesNameTheFieldAndRange) {
  expect_rejected(json{{"num_cores", 0}}, {"num_cores:", "got 0", "1..1024"});
  expect_rejected(json{{"num_cores", 1025}}, {"num_cores:", "got 1025", "1..1024"});
  expect_rejected(json{{"num_cores", -3}}, {"num_cores:", "got -3"});
  expect_rejected(json{{"num_cores", 4294967297LL}}, {"num_cores:", "got 4294967297"});
  // Regression: a value above INT64_MAX was read as a negative number and misreported.
  expect_rejected(json::parse(R"({"num_cores": 18446744073709551615})"),
                  {"num_cores:", "18446744073709551615"});
  expect_rejected(json{{"hbm_bytes_per_core", 255}}, {"hbm_bytes_per_core is 255", "256"});
  expect_rejected(json{{"hbm_bytes_per_core", "0"}}, {"hbm_bytes_per_core is 0"});
  expect_rejected(json{{"link_slot_bytes", 100}}, {"link_slot_bytes is 100", "multiple of 64"});
  expect_rejected(json{{"link_slot_bytes", 0}}, {"link_slot_bytes is 0"});
  expect_rejected(json{{"link_slot_bytes", "2G"}}, {"link_slot_bytes is 2147483648", "1 GiB"});
  expect_rejected(json{{"link_num_slots", 0}}, {"link_num_slots:", "got 0", "2..1024"});
  // One slot deadlocks the ring (each step holds a received slot while it waits to send).
  expect_rejected(json{{"link_num_slots", 1}}, {"link_num_slots:", "got 1", "2..1024"});
  expect_rejected(json{{"link_num_slots", 1025}}, {"link_num_slots:", "got 1025"});
  expect_rejected(json{{"collective_timeout_ms", 0}},
                  {"collective_timeout_ms:", "got 0", "1..604800000"});
  // Regression: a huge timeout overflowed the deadline arithmetic (now() + timeout).
  expect_rejected(json{{"collective_timeout_ms", INT64_MAX}},
                  {"collective_timeout_ms:", "got 9223372036854775807", "604800000"});
  expect_rejected(json{{"collective_timeout_ms", -5}}, {"collective_timeout_ms:", "got -5"});
  expect_rejected(json{{"hbm_memory_fraction", 0}}, {"hbm_memory_fraction is 0", "0 < fraction"});
  expect_rejected(json{{"hbm_memory_fraction", 1.25}}, {"hbm_memory_fraction:", "got 1.25"});
  expect_rejected(json{{"hbm_memory_fraction", -0.5}}, {"hbm_memory_fraction:", "got -0.5"});
}

TEST(RuntimeOptionsTest, ValidateChecksEachField) {
  auto expect_invalid = [](RuntimeOptions o, const std::string& needle) {
    try {
      o.validate();
      ADD_FAILURE() << "validate accepted (" << needle << ")";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  RuntimeOptions o;
  o.num_cores = 0;
  expect_invalid(o, "num_cores is 0");
  o = {};
  o.hbm_bytes_per_core = 100;
  expect_invalid(o, "hbm_bytes_per_core is 100");
  o = {};
  o.link_slot_bytes = 65;
  expect_invalid(o, "link_slot_bytes is 65");
  o = {};
  o.link_slot_bytes = (uint64_t{1} << 30) + 64;
  expect_invalid(o, "link_slot_bytes is 1073741888");
  o = {};
  o.link_num_slots = -1;
  expect_invalid(o, "link_num_slots is -1");
  o = {};
  o.collective_timeout = -1ms;
  expect_invalid(o, "collective_timeout_ms is -1");
  // Edges that are valid.
  o = {};
  o.num_cores = 1;
  o.hbm_bytes_per_core = 256;
  o.link_slot_bytes = 64;
  o.link_num_slots = 2;
  o.collective_timeout = 1ms;
  EXPECT_NO_THROW(o.validate());
  o.collective_timeout = RuntimeOptions::kMaxCollectiveTimeout;
  EXPECT_NO_THROW(o.validate());
}

// A file in the test's temporary directory, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = test_temp_dir() / ("vtpu_options_" + std::string(info->name()) + ".json");
    std::ofstream(path_) << contents;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(RuntimeOptionsTest, LoadJsonFile) {
  TempFile file(R"({"num_cores": 2, "hbm_bytes_per_core": "64M", "hbm_backing": false})");
  const RuntimeOptions o = RuntimeOptions::load_json_file(file.path());
  EXPECT_EQ(o.num_cores, 2);
  EXPECT_EQ(o.hbm_bytes_per_core, 64 * kMiB);
  EXPECT_FALSE(o.hbm_backing);
  EXPECT_EQ(o.link_num_slots, 4);
}

TEST(RuntimeOptionsTest, MalformedJsonFileNamesThePath) {
  TempFile file(R"({"num_cores": 2,})");
  try {
    RuntimeOptions::load_json_file(file.path());
    FAIL() << "malformed JSON accepted";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.path()), std::string::npos) << what;
    EXPECT_NE(what.find("not valid JSON"), std::string::npos) << what;
  }
}

TEST(RuntimeOptionsTest, EmptyFileIsMalformed) {
  TempFile file("");
  EXPECT_THROW(RuntimeOptions::load_json_file(file.path()), InvalidArgumentError);
}

TEST(RuntimeOptionsTest, BadValueInFileNamesThePathAndKey) {
  TempFile file(R"({"num_cores": 2, "link_num_slots": 0})");
  try {
    RuntimeOptions::load_json_file(file.path());
    FAIL() << "link_num_slots 0 accepted";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.path()), std::string::npos) << what;
    EXPECT_NE(what.find("link_num_slots: expected an integer in 2..1024, got 0"), std::string::npos)
        << what;
    EXPECT_EQ(what.rfind("InvalidArgument: ", 0), 0u) << what;  // one prefix, not two
    EXPECT_EQ(what.find("InvalidArgument: ", 1), std::string::npos) << what;
  }
}

// {"hbm_memory_fraction": 1e-9} passed validation and failed
// when the first arena was built, "BFC capacity 17 bytes is below the 256-byte minimum chunk",
// naming neither the key nor the file. round(1e-9 x 2^34) = 17 bytes; the least fraction is
// 256 / 2^34 = 1.4901e-8, rounded up to 3 digits 1.5e-08.
TEST(RuntimeOptionsTest, AFractionLeavingLessThanAChunkNamesTheKeyAndTheFile) {
  TempFile file(R"({"hbm_memory_fraction": 1e-9})");
  try {
    RuntimeOptions::load_json_file(file.path());
    FAIL() << "hbm_memory_fraction 1e-9 accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.message(), "runtime options file '" + file.path() +
                               "': hbm_memory_fraction is 1e-09, which of hbm_bytes_per_core "
                               "17179869184 (" +
                               format_bytes(uint64_t{1} << 34) +
                               ") leaves 17 bytes per core (expected at least 256 bytes, the "
                               "allocators' minimum chunk: a fraction of at least 1.5e-08)");
  }
  // The boundary, on 64 KiB: round(0.0039 x 65536) = 256 passes, round(0.0038 x 65536) = 249 not.
  expect_rejected(json{{"hbm_bytes_per_core", "64K"}, {"hbm_memory_fraction", 0.0038}},
                  {"hbm_memory_fraction is 0.0038", "leaves 249 bytes per core",
                   "a fraction of at least 0.00391"});
  EXPECT_NO_THROW(RuntimeOptions::from_json(
      json{{"hbm_bytes_per_core", "64K"}, {"hbm_memory_fraction", 0.0039}}));
  RuntimeOptions o;
  o.hbm_memory_fraction = 1e-9;
  EXPECT_THROW(o.validate(), InvalidArgumentError);
}

// A key given twice took its last value silently.
TEST(RuntimeOptionsTest, RepeatedKeyInFileIsRefused) {
  TempFile file(R"({"num_cores": 2, "num_cores": 4})");
  try {
    RuntimeOptions::load_json_file(file.path());
    FAIL() << "a repeated key was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find(file.path()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("'num_cores'"), std::string::npos) << e.message();
  }
}

TEST(RuntimeOptionsTest, DirectoryAndOversizedFileAreRefused) {
  EXPECT_THROW(RuntimeOptions::load_json_file(std::filesystem::temp_directory_path().string()),
               InvalidArgumentError);
  TempFile big("{}" + std::string((1 << 20), ' '));
  EXPECT_THROW(RuntimeOptions::load_json_file(big.path()), InvalidArgumentError);
}

TEST(RuntimeOptionsTest, MissingFileIsNotFound) {
  const std::string path = "/nonexistent/vtpu/options.json";
  try {
    RuntimeOptions::load_json_file(path);
    FAIL() << "missing file loaded";
  } catch (const NotFoundError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// A value nested 200,000 deep or a number too large for a double is an InvalidArgumentError.
// Regression: the deep value crashed `vtpu train mlp --config` with a stack overflow while the
// message quoted it.
TEST(RuntimeOptionsTest, DeeplyNestedOrHugeValuesInAFileAreInvalidArguments) {
  const std::string path = test_temp_path("deep_options.json");
  {
    std::ofstream out(path);
    out << "{\"hbm_memory_fraction\": " << std::string(200000, '[') << std::string(200000, ']')
        << "}";
  }
  EXPECT_THROW(RuntimeOptions::load_json_file(path), InvalidArgumentError);
  {
    std::ofstream out(path);
    out << "{\"hbm_memory_fraction\": 1e400}";
  }
  EXPECT_THROW(RuntimeOptions::load_json_file(path), InvalidArgumentError);
  {
    std::ofstream out(path);
    out << "{\"hbm_memory_fraction\": 0.5, \"auto_defragment\": false, \"allocator\": \"tlsf\"}";
  }
  const RuntimeOptions o = RuntimeOptions::load_json_file(path);
  EXPECT_EQ(o.hbm_memory_fraction, 0.5);
  EXPECT_FALSE(o.auto_defragment);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace vtpu
