// Tests for common/units.h: parse_bytes, format_bytes and format_seconds, against hand-computed
// values.
#include "vtpu/common/units.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

constexpr uint64_t kTiB = uint64_t{1} << 40;
constexpr uint64_t kPiB = uint64_t{1} << 50;

TEST(UnitsTest, ConstantsArePowersOf1024) {
  EXPECT_EQ(kKiB, 1024u);
  EXPECT_EQ(kMiB, 1048576u);
  EXPECT_EQ(kGiB, 1073741824u);
}

TEST(ParseBytesTest, PlainIntegers) {
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("1"), 1u);
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("17179869184"), 17179869184u);
}

TEST(ParseBytesTest, SuffixesArePowersOf1024) {
  EXPECT_EQ(parse_bytes("64K"), 65536u);
  EXPECT_EQ(parse_bytes("16M"), 16777216u);
  EXPECT_EQ(parse_bytes("16G"), 17179869184u);
  EXPECT_EQ(parse_bytes("1T"), 1099511627776u);
  EXPECT_EQ(parse_bytes("3T"), 3298534883328u);
}

TEST(ParseBytesTest, OptionalByteSuffixAndCase) {
  EXPECT_EQ(parse_bytes("16GiB"), 17179869184u);
  EXPECT_EQ(parse_bytes("16GB"), 17179869184u);
  EXPECT_EQ(parse_bytes("16gib"), 17179869184u);
  EXPECT_EQ(parse_bytes("16g"), 17179869184u);
  EXPECT_EQ(parse_bytes("64KiB"), 65536u);
  EXPECT_EQ(parse_bytes("64kb"), 65536u);
  EXPECT_EQ(parse_bytes("300MiB"), 314572800u);
  EXPECT_EQ(parse_bytes("1TiB"), 1099511627776u);
  EXPECT_EQ(parse_bytes("512B"), 512u);
  EXPECT_EQ(parse_bytes("512b"), 512u);
}

TEST(ParseBytesTest, SurroundingWhitespaceIsIgnored) {
  EXPECT_EQ(parse_bytes("  8K "), 8192u);
  EXPECT_EQ(parse_bytes("\t2M\n"), 2097152u);
}

TEST(ParseBytesTest, LargestValues) {
  EXPECT_EQ(parse_bytes("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  // (2^24 - 1) * 2^40 is the largest whole number of TiB that fits in 64 bits.
  EXPECT_EQ(parse_bytes("16777215T"), 18446742974197923840u);
  // 2^54 - 1 KiB = 2^64 - 1024.
  EXPECT_EQ(parse_bytes("18014398509481983K"), 18446744073709550592u);
}

// Expects InvalidArgumentError whose message quotes `text`.
void expect_invalid(const std::string& text, const std::string& why) {
  SCOPED_TRACE("text '" + text + "'");
  try {
    parse_bytes(text);
    ADD_FAILURE() << "parse_bytes accepted '" << text << "'";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("InvalidArgument: ", 0), 0u) << what;
    EXPECT_NE(what.find("'" + text + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(why), std::string::npos) << what;
  }
}

TEST(ParseBytesTest, Errors) {
  expect_invalid("", "empty");
  expect_invalid("   ", "empty");
  expect_invalid("-1", "no leading number");
  expect_invalid("G", "no leading number");
  expect_invalid("+5", "no leading number");
  expect_invalid("12Q", "unknown suffix");
  expect_invalid("1.5G", "unknown suffix");
  expect_invalid("16 G", "unknown suffix");
  expect_invalid("16iB", "unknown suffix");
  expect_invalid("16BB", "unknown suffix");
  expect_invalid("16KK", "unknown suffix");
  expect_invalid("0x10", "unknown suffix");
  expect_invalid("16P", "unknown suffix");
}

TEST(ParseBytesTest, Overflow) {
  expect_invalid("18446744073709551616", "too large");     // 2^64
  expect_invalid("99999999999999999999999", "too large");  // far past 2^64
  expect_invalid("16777216T", "too large");                // 2^24 * 2^40 = 2^64
  expect_invalid("18014398509481984K", "too large");       // 2^54 * 2^10 = 2^64
  expect_invalid("17179869184G", "too large");             // 2^34 * 2^30 = 2^64
}

TEST(FormatBytesTest, BelowOneKiBIsExact) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1), "1 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

TEST(FormatBytesTest, BinaryUnitsWithTwoDecimals) {
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(65536), "64.00 KiB");
  EXPECT_EQ(format_bytes(kMiB), "1.00 MiB");
  EXPECT_EQ(format_bytes(300 * kMiB), "300.00 MiB");
  EXPECT_EQ(format_bytes(1000 * kMiB), "1000.00 MiB");
  EXPECT_EQ(format_bytes(kGiB + kGiB / 4), "1.25 GiB");
  EXPECT_EQ(format_bytes(16 * kGiB), "16.00 GiB");
  EXPECT_EQ(format_bytes(kTiB), "1.00 TiB");
  EXPECT_EQ(format_bytes(kPiB), "1.00 PiB");
}

TEST(FormatSecondsTest, ThreeDecimalsInTheLargestUnitBelowTheValue) {
  EXPECT_EQ(format_seconds(2.5), "2.500 s");
  EXPECT_EQ(format_seconds(1.0), "1.000 s");
  EXPECT_EQ(format_seconds(0.5), "500.000 ms");
  EXPECT_EQ(format_seconds(1e-3), "1.000 ms");
  EXPECT_EQ(format_seconds(5.67e-5), "56.700 us");
  EXPECT_EQ(format_seconds(0.0), "0.000 us");
  // A reshard estimated at 12 years printed
  // "386173677021.164 ms". Minutes, hours, days and years, worked by hand.
  EXPECT_EQ(format_seconds(59.9), "59.900 s");
  EXPECT_EQ(format_seconds(150.0), "2.500 min");
  EXPECT_EQ(format_seconds(5400.0), "1.500 h");
  EXPECT_EQ(format_seconds(2 * 86400.0), "2.000 days");
  EXPECT_EQ(format_seconds(386173677.021164), "12.237 years");  // / (365.25 x 86400)
  EXPECT_EQ(format_seconds(1e5 * 365.25 * 86400), "1.000e+05 years");
}

TEST(FormatBytesTest, PiBIsTheLargestUnit) {
  EXPECT_EQ(format_bytes(2048 * kPiB), "2048.00 PiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<uint64_t>::max()), "16384.00 PiB");
}

TEST(FormatBytesTest, RoundTripsThroughParseForWholeUnits) {
  for (uint64_t v : {uint64_t{7}, 3 * kKiB, 5 * kMiB, 16 * kGiB, 2 * kTiB}) {
    std::string text;  // "16.00 GiB" -> "16GiB", "7 B" -> "7B"
    const std::string formatted = format_bytes(v);
    for (size_t i = 0; i < formatted.size(); ++i) {
      if (formatted.compare(i, 3, ".00") == 0)
        i += 2;
      else if (formatted[i] != ' ')
        text += formatted[i];
    }
    EXPECT_EQ(parse_bytes(text), v) << text;
  }
}

}  // namespace
}  // namespace vtpu
