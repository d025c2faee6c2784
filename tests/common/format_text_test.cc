// common/format_text.h: the printf text, whole, however long.
#include "vtpu/common/format_text.h"

#include <gtest/gtest.h>

#include <string>

namespace vtpu {
namespace {

TEST(FormatTextTest, GivesThePrintfText) {
  EXPECT_EQ(format_text("%-6s|%5.1f|%d", "ab", 2.5, -7), "ab    |  2.5|-7");
  EXPECT_EQ(format_text("%s", ""), "");
  EXPECT_EQ(format_text("%.3g s", 1.5e-5), "1.5e-05 s");
}

// A fixed 640-byte row buffer cut a long "why it lost" reason (planner/auto_planner.cc).
TEST(FormatTextTest, LongTextIsNotCut) {
  const std::string reason(5000, 'r');
  const std::string row = format_text("%-26s  %s!", "dp(x)", reason.c_str());
  ASSERT_EQ(row.size(), 26u + 2 + 5000 + 1);
  EXPECT_EQ(row.substr(0, 5), "dp(x)");
  EXPECT_EQ(row.substr(28, 5000), reason);
  EXPECT_EQ(row.back(), '!');
}

}  // namespace
}  // namespace vtpu
