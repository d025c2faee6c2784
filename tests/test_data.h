// Where the example tests find the real digits data (fetched by scripts/fetch-data.sh).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace vtpu::testing {

inline std::string digits_path() { return std::string(VTPU_SOURCE_DIR) + "/data/digits.csv.gz"; }

// The tests need the real file; a missing file is a failure with the fix in the message, not a
// silent skip.
#define VTPU_REQUIRE_DIGITS()                                                    \
  ASSERT_TRUE(std::filesystem::exists(::vtpu::testing::digits_path())) \
      << "missing " << ::vtpu::testing::digits_path()                  \
      << ": run scripts/fetch-data.sh (scripts/test.sh does it for you)"

}  // namespace vtpu::testing
