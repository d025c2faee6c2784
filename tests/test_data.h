// Where the tests find their data: the real digits data (fetched by scripts/fetch-data.sh) and the
// fixed hardware profile under tests/data.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace vtpu::testing {

inline std::string digits_path() { return std::string(VTPU_SOURCE_DIR) + "/data/digits.csv.gz"; }

// A host profile of round numbers (2 host CPUs, collectives calibrated on 2, 4 and 8 cores with
// alpha 1 us per core of the group and beta 0.1 ns/B), named "fixed_host". Tests that need a
// calibrated host profile use it, never profiles/this_machine.json, whose figures a
// recalibration changes.
inline std::string fixed_profile_path() {
  return std::string(VTPU_SOURCE_DIR) + "/tests/data/fixed_profile.json";
}

// The tests need the real file; a missing file is a failure with the fix in the message, not a
// silent skip.
#define VTPU_REQUIRE_DIGITS()                                          \
  ASSERT_TRUE(std::filesystem::exists(::vtpu::testing::digits_path())) \
      << "missing " << ::vtpu::testing::digits_path()                  \
      << ": run scripts/fetch-data.sh (scripts/test.sh does it for you)"

// Whether `text` (an error message, a warning, a report) names every one of `values`: the
// offending value, the option, the expected value. Tests check those, not the sentence around
// them, so that a rewording keeps them green.
inline ::testing::AssertionResult names_all(const std::string& text,
                                            const std::vector<std::string>& values) {
  for (const std::string& value : values) {
    if (text.find(value) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << value << "' not named in: " << text;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace vtpu::testing
