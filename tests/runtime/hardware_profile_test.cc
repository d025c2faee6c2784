// Tests for runtime/hardware_profile.h: the shipped profiles carry the public figures (the
// v5e numbers), every figure names its source, and bad profiles are rejected with clear errors.
#include "vtpu/runtime/hardware_profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/temp_path.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

/// Expects from_json(j) to throw InvalidArgumentError whose message contains `needle`.
// Expects from_json(j) to throw InvalidArgumentError whose message holds every needle (the path
// and the offending value).
void expect_rejected(const nlohmann::json& j, std::initializer_list<std::string> needles) {
  try {
    HardwareProfile::from_json(j);
    ADD_FAILURE() << j.dump() << " was accepted";
  } catch (const InvalidArgumentError& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}
void expect_rejected(const nlohmann::json& j, const char* needle) { expect_rejected(j, {needle}); }

TEST(HardwareProfileTest, ShipsV4V5eV5pAndAMeasuredThisMachine) {
  const std::vector<std::string> names = HardwareProfile::builtin_names();
  EXPECT_EQ(names, (std::vector<std::string>{"this_machine", "v4", "v5e", "v5p"}));
  // The measured profile says how it was measured.
  const HardwareProfile p = HardwareProfile::get("this_machine");
  EXPECT_NE(p.sources.at("hbm_bytes_per_second").find("memcpy"), std::string::npos);
  EXPECT_NE(p.sources.at("peak_flops_per_second.f32").find("Eigen"), std::string::npos);
}

TEST(HardwareProfileTest, V5eHasThePublicFiguresIssue6Quotes) {
  const HardwareProfile p = HardwareProfile::get("v5e");
  EXPECT_EQ(p.hbm_bytes, uint64_t{16} << 30);
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_second, 8.1e11);
  EXPECT_DOUBLE_EQ(p.peak_flops("bf16"), 1.97e14);
  EXPECT_DOUBLE_EQ(p.link_bytes_per_second, 4.5e10);
  EXPECT_EQ(p.topology, "torus_2d");
  EXPECT_EQ(p.scoped_vmem_limit_bytes, uint64_t{16} << 20);  // Pallas's default scoped VMEM
}

TEST(HardwareProfileTest, EveryFigureOfEveryShippedProfileNamesItsSource) {
  for (const std::string& name : HardwareProfile::builtin_names()) {
    const HardwareProfile p = HardwareProfile::get(name);
    for (const char* field : {"hbm_bytes", "hbm_bytes_per_second", "vmem_bytes",
                              "scoped_vmem_limit_bytes", "smem_bytes", "accumulator_bytes",
                              "link_bytes_per_second", "link_latency_seconds", "topology"}) {
      EXPECT_TRUE(p.sources.contains(field)) << name << " lacks a source for " << field;
    }
    for (const auto& [dtype, flops] : p.peak_flops_per_second) {
      EXPECT_TRUE(p.sources.contains("peak_flops_per_second." + dtype)) << name << " " << dtype;
    }
    if (p.host_cpus != 0) {
      EXPECT_TRUE(p.sources.contains("host_cpus")) << name;
    }
    if (p.cache_bytes != 0) {
      EXPECT_TRUE(p.sources.contains("cache_bytes")) << name;
      EXPECT_TRUE(p.sources.contains("cache_bytes_per_second")) << name;
    }
    if (!p.kernels.empty()) {
      for (const char* field :
           {"kernels.gemm_flops_per_second", "kernels.elementwise_per_second.pass",
            "kernels.elementwise_per_second.transcendental", "kernels.row_kernels"}) {
        EXPECT_TRUE(p.sources.contains(field)) << name << " " << field;
      }
      if (!p.kernels.gemm_warm_flops_per_second.empty()) {  // optional
        EXPECT_TRUE(p.sources.contains("kernels.gemm_warm_flops_per_second")) << name;
      }
    }
  }
  // The TPU profiles price compute at the peak: no kernel rates.
  for (const char* tpu : {"v4", "v5e", "v5p"})
    EXPECT_TRUE(HardwareProfile::get(tpu).kernels.empty());
}

TEST(HardwareProfileTest, JsonRoundTrips) {
  const HardwareProfile p = HardwareProfile::get("v4");
  const HardwareProfile q = HardwareProfile::from_json(p.to_json());
  EXPECT_EQ(q.to_json(), p.to_json());
}

TEST(HardwareProfileTest, AMeasuredCurveRoundTripsAndIsChecked) {
  nlohmann::json j = HardwareProfile::get("v5e").to_json();
  j["collectives"] = {{"all_reduce",
                       {{"alpha_seconds", 1e-5},
                        {"beta_seconds_per_byte", 1e-9},
                        {"group_size", 8},
                        {"measured", {{8, 2e-5}, {1024, 3e-5}, {4096, 5e-5}}}}}};
  const HardwareProfile p = HardwareProfile::from_json(j);
  ASSERT_EQ(p.collectives.at("all_reduce").size(), 1u);
  const std::vector<std::pair<double, double>> want = {{8, 2e-5}, {1024, 3e-5}, {4096, 5e-5}};
  EXPECT_EQ(p.collectives.at("all_reduce")[0].measured, want);
  EXPECT_EQ(HardwareProfile::from_json(p.to_json()).to_json(), p.to_json());
  EXPECT_EQ(p.to_json()["collectives"]["all_reduce"]["measured"],
            j["collectives"]["all_reduce"]["measured"]);

  nlohmann::json bad = j;
  bad["collectives"]["all_reduce"]["measured"] = {{8, 2e-5}, {8, 3e-5}};
  expect_rejected(bad,
                  "collectives.all_reduce.measured[1] has bytes 8 (expected a finite size > 0, "
                  "larger than the point before)");
  bad["collectives"]["all_reduce"]["measured"] = {{0, 2e-5}};
  expect_rejected(bad, "measured[0] has bytes 0");
  bad["collectives"]["all_reduce"]["measured"] = {{8, 0.0}};
  expect_rejected(bad, "measured[0] has seconds 0 (expected a time in (0, 60] seconds)");
  bad["collectives"]["all_reduce"]["measured"] = {{8, 2e-5, 1}};
  expect_rejected(bad, {"collectives.all_reduce.measured[0]:", "[8,2e-05,1]"});
  bad["collectives"]["all_reduce"]["measured"] = "fast";
  expect_rejected(bad, {"collectives.all_reduce.measured:", "\"fast\""});
  // A misspelt "measured" was ignored (the curve silently dropped).
  bad = j;
  bad["collectives"]["all_reduce"]["measure"] = bad["collectives"]["all_reduce"]["measured"];
  bad["collectives"]["all_reduce"].erase("measured");
  expect_rejected(bad, {"collectives.all_reduce.measure: unknown key", "measured"});
}

TEST(HardwareProfileTest, HostFieldsRoundTripAndTheCacheNeedsBothFigures) {
  HardwareProfile p = HardwareProfile::get("v5e");
  EXPECT_EQ(p.host_cpus, 0);  // a TPU core is its own hardware
  EXPECT_EQ(p.cache_bytes, 0u);
  EXPECT_FALSE(p.to_json().contains("host_cpus"));  // a TPU profile's JSON is as before
  EXPECT_FALSE(p.to_json().contains("cache_bytes"));
  p.host_cpus = 2;
  p.cache_bytes = 1048576;
  p.cache_bytes_per_second = 5e10;
  const HardwareProfile q = HardwareProfile::from_json(p.to_json());
  EXPECT_EQ(q.host_cpus, 2);
  EXPECT_EQ(q.cache_bytes, 1048576u);
  EXPECT_DOUBLE_EQ(q.cache_bytes_per_second, 5e10);
  nlohmann::json j = p.to_json();
  j.erase("cache_bytes_per_second");
  try {
    HardwareProfile::from_json(j);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(e.message().find("expected both set, or neither"), std::string::npos) << e.message();
  }
  j = p.to_json();
  j["host_cpus"] = 2.5;
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
  j = p.to_json();
  j["host_cpus"] = -1;
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
  j = p.to_json();
  j["cache_bytes_per_second"] = 0.5;
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
}

TEST(HardwareProfileTest, TheLastLevelCacheIsOptionalNeedsBothFiguresAndExceedsTheL2) {
  HardwareProfile p = HardwareProfile::get("v5e");
  EXPECT_EQ(p.llc_bytes, 0u);
  EXPECT_FALSE(p.to_json().contains("llc_bytes"));  // absent when unset, as before
  p.host_cpus = 2;
  p.cache_bytes = 1048576;
  p.cache_bytes_per_second = 1e11;
  p.llc_bytes = 16777216;
  p.llc_bytes_per_second = 4.5e10;
  const HardwareProfile q = HardwareProfile::from_json(p.to_json());
  EXPECT_EQ(q.llc_bytes, 16777216u);
  EXPECT_DOUBLE_EQ(q.llc_bytes_per_second, 4.5e10);
  const auto rejected = [](const nlohmann::json& j, const std::string& what) {
    try {
      HardwareProfile::from_json(j);
      ADD_FAILURE() << "expected InvalidArgumentError: " << what;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    }
  };
  nlohmann::json j = p.to_json();
  j.erase("llc_bytes_per_second");
  rejected(j,
           "llc_bytes is 16777216 and llc_bytes_per_second is 0 (expected both set, or neither)");
  j = p.to_json();
  j["llc_bytes"] = 1048576;
  rejected(j, "llc_bytes is 1048576 (expected more than cache_bytes, 1048576");
  j = p.to_json();
  j["llc_bytes_per_second"] = -1;
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
}

// A calibrated profile records how its cores' threads were pinned
// (pinning changes a 2-core hand-off about 3.5x). The field is optional: a profile without it
// (one calibrated before it existed, as this_machine once was) loads and writes no
// such key.
TEST(HardwareProfileTest, ThreadPinningIsOptionalAndRoundTrips) {
  nlohmann::json without = HardwareProfile::get("this_machine").to_json();
  without.erase("thread_pinning");
  const HardwareProfile old = HardwareProfile::from_json(without);
  EXPECT_TRUE(old.thread_pinning.empty());
  EXPECT_FALSE(old.to_json().contains("thread_pinning"));
  EXPECT_EQ(HardwareProfile::from_json(old.to_json()).to_json(), old.to_json());

  nlohmann::json j = old.to_json();
  // Written out of order: the profile keeps them sorted by cores.
  j["thread_pinning"] = nlohmann::json::parse(R"([
      {"mode": "auto", "cores": 8, "host_cpus": 2, "pinned": false, "reason": "8 cores > 2 CPUs"},
      {"mode": "auto", "cores": 2, "host_cpus": 2, "pinned": true, "cpus": [0, 1]}])");
  const HardwareProfile p = HardwareProfile::from_json(j);
  ASSERT_EQ(p.thread_pinning.size(), 2u);
  EXPECT_EQ(p.thread_pinning[0].cores, 2);
  EXPECT_EQ(p.thread_pinning[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.thread_pinning[0].describe(), "auto (pinned: cores 0,1 -> CPUs 0,1)");
  EXPECT_EQ(p.thread_pinning[1].describe(), "auto (not pinned: 8 cores > 2 CPUs)");
  const nlohmann::json written = p.to_json();
  EXPECT_EQ(written["thread_pinning"][0], j["thread_pinning"][1]);
  EXPECT_EQ(written["thread_pinning"][1], j["thread_pinning"][0]);
  EXPECT_EQ(HardwareProfile::from_json(written).to_json(), written);

  nlohmann::json bad = j;
  bad["thread_pinning"][1]["mode"] = "sometimes";
  expect_rejected(bad, {"thread_pinning[1].mode:", "\"sometimes\""});
  bad = j;
  bad["thread_pinning"][1]["cpus"] = {0};
  expect_rejected(bad, {"thread_pinning[1].cpus:", "got [0]"});
  bad = j;
  bad["thread_pinning"][0].erase("reason");
  expect_rejected(bad, {"thread_pinning[0].reason: missing"});
  bad = j;
  bad["thread_pinning"][1]["cores"] = 8;
  bad["thread_pinning"][1]["cpus"] = {0, 1, 0, 1, 0, 1, 0, 1};
  expect_rejected(bad, "thread_pinning has two records for 8 cores");
  bad = j;
  bad["thread_pinning"] = "pinned";
  expect_rejected(bad, {"thread_pinning:", "\"pinned\""});
}

TEST(HardwareProfileTest, UnknownNameListsTheShippedOnes) {
  try {
    HardwareProfile::get("v9000");
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("v9000"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("v5e"), std::string::npos);
  }
}

TEST(HardwareProfileTest, RejectsBadProfiles) {
  nlohmann::json j = HardwareProfile::get("v5e").to_json();
  j["hbm_bandwidth"] = 1;  // misspelt key
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
  j = HardwareProfile::get("v5e").to_json();
  j["hbm_bytes_per_second"] = -1.0;
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
  // A tiny negative value is shown as written (%g), not as std::to_string's "-0.000000".
  j = HardwareProfile::get("this_machine").to_json();
  j["collectives"]["all_gather"][0]["beta_seconds_per_byte"] = -1e-9;
  try {
    HardwareProfile::from_json(j);
    ADD_FAILURE() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "beta_seconds_per_byte' is -1e-09 (expected a finite number > 0)"),
              std::string::npos)
        << e.what();
  }
  j = HardwareProfile::get("v5e").to_json();
  j["scoped_vmem_limit_bytes"] = j["vmem_bytes"].get<uint64_t>() + 1;
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
  j = HardwareProfile::get("v5e").to_json();
  j.erase("peak_flops_per_second");
  EXPECT_THROW(HardwareProfile::from_json(j), InvalidArgumentError);
  EXPECT_THROW(HardwareProfile::get("v5e").peak_flops("f8"), InvalidArgumentError);
}

// A NUL in a profile's name cut `vtpu plan`'s "hardware" header at
// the NUL while plan files kept the whole name; control characters are refused, as the model
// reader refuses them in names.
TEST(HardwareProfileTest, RejectsControlCharactersInTheName) {
  for (const std::string& name :
       {std::string("a\0b", 3), std::string("a\nb"), std::string("\x1f"), std::string("a\x7f")}) {
    nlohmann::json j = HardwareProfile::get("v5e").to_json();
    j["name"] = name;
    try {
      HardwareProfile::from_json(j);
      ADD_FAILURE() << "expected InvalidArgumentError for " << nlohmann::json(name).dump();
    } catch (const InvalidArgumentError& e) {
      EXPECT_EQ(std::string(e.message()), "hardware profile name " + nlohmann::json(name).dump() +
                                              " has a control character (expected none)");
    }
  }
  EXPECT_EQ(std::string(nlohmann::json(std::string("a\0b", 3)).dump()), "\"a\\u0000b\"");
  nlohmann::json j = HardwareProfile::get("v5e").to_json();
  j["name"] = "my host \xc3\xa9";  // spaces and UTF-8 are fine
  EXPECT_EQ(HardwareProfile::from_json(j).name, "my host \xc3\xa9");
}

// Integers were truncated (2.7 -> 2) or cast with UB
// (1e20), rates of 1e-300 gave inf simulated times, any topology string passed, on-core sizes of
// 1 byte failed later in the BFC layer naming neither key nor memory, and a directory named
// *.json was an internal error. Each is now an InvalidArgumentError naming the key or path.
TEST(HardwareProfileTest, RejectsNonIntegersTinyRatesUnknownTopologyAndBadSizes) {
  auto expect_rejected = [](const char* key, const nlohmann::json& value, const char* needle) {
    nlohmann::json j = HardwareProfile::get("v5e").to_json();
    j[key] = value;
    try {
      HardwareProfile::from_json(j);
      ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_rejected("cores_per_chip", 2.7,
                  "cores_per_chip: expected an integer in 1..1048576, got 2.7");
  expect_rejected("cores_per_chip", 1e20,
                  "cores_per_chip: expected an integer in 1..1048576, got 1e+20");
  expect_rejected("links_per_chip", -1,
                  "links_per_chip: expected an integer in 0..1048576, got -1");
  expect_rejected("hbm_bytes_per_second", 1e-300, "hbm_bytes_per_second' is 1e-300");
  expect_rejected("peak_flops_per_second", {{"f32", 1e-300}}, "peak_flops_per_second.f32");
  expect_rejected("topology", "banana", "topology is 'banana'");
  expect_rejected("vmem_bytes", 1, "vmem_bytes is 1 (expected 1 KiB..4 GiB)");
  expect_rejected("smem_bytes", 1, "smem_bytes is 1 (expected 1 KiB..4 GiB)");
  expect_rejected("accumulator_bytes", "1T", "accumulator_bytes is 1099511627776");
  const std::string dir = test_temp_path("vtpu_hw_dir.json");
  std::filesystem::create_directories(dir);
  try {
    HardwareProfile::get(dir);
    ADD_FAILURE() << "a directory was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

// A latency or alpha of 1e308 loaded and made every
// reshard estimate inf; a key written twice in a file silently took its last value.
TEST(HardwareProfileTest, RejectsAbsurdLatenciesAndRepeatedKeys) {
  const nlohmann::json v5e = HardwareProfile::get("v5e").to_json();
  nlohmann::json j = v5e;
  j["link_latency_seconds"] = 1e308;
  expect_rejected(j, "link_latency_seconds 1e+308");
  j["link_latency_seconds"] = 60.0;  // the bound itself is accepted
  EXPECT_DOUBLE_EQ(HardwareProfile::from_json(j).link_latency_seconds, 60.0);
  j = v5e;
  j["link_bytes_per_second"] = 1e-300;  // 0 means "no links"; between 0 and 1 B/s overflows
  expect_rejected(j, "link_bytes_per_second 1e-300");
  const nlohmann::json fit = {
      {"alpha_seconds", 1e-5}, {"beta_seconds_per_byte", 1e-9}, {"group_size", 8}};
  j = v5e;
  j["collectives"] = {{"all_gather", fit}};
  j["collectives"]["all_gather"]["alpha_seconds"] = 1e308;
  expect_rejected(j, "collectives.all_gather.alpha_seconds is 1e+308 (expected 0..60 seconds)");
  j["collectives"]["all_gather"] = fit;
  j["collectives"]["all_gather"]["beta_seconds_per_byte"] = 2.0;
  expect_rejected(j, "collectives.all_gather.beta_seconds_per_byte is 2 (expected at most 1");

  // Several fits of one collective: an array, each fit naming its group size.
  const auto fit_on = [&](int n, double alpha) {
    nlohmann::json f = fit;
    f["group_size"] = n;
    f["alpha_seconds"] = alpha;
    return f;
  };
  j = v5e;
  j["collectives"] = {{"all_reduce", {fit_on(8, 3e-5), fit_on(2, 2e-6)}}, {"all_gather", fit}};
  const HardwareProfile several = HardwareProfile::from_json(j);
  ASSERT_EQ(several.collectives.at("all_reduce").size(), 2u);
  EXPECT_EQ(several.collectives.at("all_gather").size(), 1u);  // the object form, beside it
  // Written back sorted by group size; one fit stays an object.
  const nlohmann::json back = several.to_json()["collectives"];
  EXPECT_EQ(back["all_reduce"], nlohmann::json({fit_on(2, 2e-6), fit_on(8, 3e-5)}));
  EXPECT_EQ(back["all_gather"], fit);
  j["collectives"]["all_reduce"] = {fit_on(2, 2e-6), fit_on(8, 3e-5), fit_on(2, 1e-6)};
  expect_rejected(j, "collectives.all_reduce has two fits with group_size 2");
  j["collectives"]["all_reduce"] = {fit_on(8, 3e-5), fit_on(1, 2e-6)};
  expect_rejected(j, "collectives.all_reduce.group_size is 1 (expected >= 2)");
  j["collectives"]["all_reduce"] = {fit_on(8, 3e-5), fit_on(2, 1e308)};
  expect_rejected(j, "collectives.all_reduce[group_size 2].alpha_seconds is 1e+308");
  j["collectives"]["all_reduce"] = {fit_on(8, 3e-5), 5};  // a fit and something else
  expect_rejected(j, {"collectives.all_reduce[1]:", "got 5"});
  j["collectives"]["all_reduce"] = {fit_on(8, 3e-5), nlohmann::json::array({fit_on(2, 2e-6)})};
  expect_rejected(j, {"collectives.all_reduce[1]:", "got [{"});
  j["collectives"]["all_reduce"] = nlohmann::json::array();
  expect_rejected(j, {"collectives.all_reduce:", "got []"});
  j["collectives"]["all_reduce"] = {fit_on(8, 3e-5)};
  j["collectives"]["all_reduce"][0]["group_size"] = 2.5;
  expect_rejected(j, {"collectives.all_reduce[0].group_size:", "got 2.5"});

  // A repeated key in a file, at the top level and inside an object.
  const std::string text = v5e.dump();
  const std::string path = test_temp_path("vtpu_hw_dup.json");
  for (const std::string& dup :
       {text.substr(0, text.size() - 1) + R"(, "name": "other"})",
        R"({"peak_flops_per_second": {"f32": 1e12, "f32": 2e12}, )" + text.substr(1)}) {
    std::ofstream(path) << dup;
    try {
      HardwareProfile::load_json_file(path);
      ADD_FAILURE() << dup << " was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("repeats the key"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  std::ofstream(path) << text;  // the same file without repeats loads
  EXPECT_EQ(HardwareProfile::load_json_file(path).name, "v5e");

  // A file above 1 MiB is refused before it is parsed (here valid JSON: padding spaces).
  std::ofstream(path) << text << std::string((1 << 20) - text.size() + 1, ' ');
  try {
    HardwareProfile::load_json_file(path);
    ADD_FAILURE() << "a 1 MiB + 1 B profile was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("is 1048577 bytes (expected at most 1048576"),
              std::string::npos)
        << e.what();
  }
}

// A torus profile with no links, or fewer than one each way per torus dimension,
// passed validation and then failed in the cost model without naming the field or the file.
TEST(HardwareProfileTest, TorusNeedsLinksAndALinkRate) {
  const std::string path = test_temp_path("vtpu_hw_links.json");
  const auto expect_rejected = [&](const char* key, const nlohmann::json& value,
                                   const std::string& topology, const char* needle) {
    nlohmann::json j = HardwareProfile::get("v5e").to_json();
    j[key] = value;
    j["topology"] = topology;
    std::ofstream(path) << j.dump();
    try {
      HardwareProfile::load_json_file(path);
      ADD_FAILURE() << key << " = " << value.dump() << " on " << topology << " was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_rejected("links_per_chip", 0, "torus_2d",
                  "links_per_chip is 0 on topology torus_2d (expected >= 4");
  expect_rejected("links_per_chip", 5, "torus_3d",
                  "links_per_chip is 5 on topology torus_3d (expected >= 6");
  expect_rejected("links_per_chip", 1, "ring",
                  "links_per_chip is 1 on topology ring (expected >= 2");
  expect_rejected(
      "link_bytes_per_second", 0, "torus_2d",
      "link_bytes_per_second is 0 or missing on topology torus_2d (expected a rate >= 1 B/s");
  // Shared memory needs neither (this machine's uncalibrated collectives use the memcpy rate).
  nlohmann::json j = HardwareProfile::get("v5e").to_json();
  j["topology"] = "shared_memory";
  j["links_per_chip"] = 0;
  EXPECT_EQ(HardwareProfile::from_json(j).links_per_chip, 0);
  // The shipped profiles keep loading.
  for (const std::string& name : HardwareProfile::builtin_names()) {
    EXPECT_NO_THROW(HardwareProfile::get(name)) << name;
  }
}

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

std::string peak_error(const HardwareProfile& p, const std::string& dtype) {
  try {
    p.peak_flops(dtype);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "no error";
}

// A bf16 model on the shipped this_machine (f32 only) was told to edit the shipped
// profile; the message now names the way to a file of one's own, and a file's own path.
TEST(HardwareProfileTest, AMissingDtypePeakSaysHowToAddIt) {
  const HardwareProfile shipped = HardwareProfile::get("this_machine");
  const std::string e = peak_error(shipped, "bf16");
  EXPECT_NE(e.find("hardware profile 'this_machine' has no peak_flops_per_second.bf16 (it lists: "
                   "f32; write the profile to a file (vtpu bench hardware --out FILE"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("pass --hardware FILE, or plan with a TPU profile)"), std::string::npos) << e;

  const std::string path = test_temp_path("vtpu_hw_f32_only.json");
  std::ofstream(path) << shipped.to_json().dump();
  const std::string f = peak_error(HardwareProfile::load_json_file(path), "bf16");
  EXPECT_NE(f.find("hardware profile file '" + path +
                   "' (name 'this_machine') has no "
                   "peak_flops_per_second.bf16 (it lists: f32; add \"bf16\" to its "
                   "peak_flops_per_second)"),
            std::string::npos)
      << f;
  EXPECT_EQ(peak_error(shipped, "f32"), "no error");
}

}  // namespace
}  // namespace vtpu
