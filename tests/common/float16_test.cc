// IEEE 754 binary16: published bit patterns (IEEE 754-2008 table 3.5 ranges; Wikipedia's
// "Half-precision floating-point format" examples), round-to-nearest-even at ties in the normal
// and subnormal ranges, overflow, NaN, and exhaustive checks over all 65536 patterns.
#include "vtpu/common/float16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vtpu {
namespace {

uint16_t to_bits(double v) { return float_to_f16(static_cast<float>(v)).bits; }
float from_bits(uint16_t b) { return f16_to_float(Float16{b}); }

// The value of an f16 pattern from its fields, in double: (-1)^s x 2^(e-15) x 1.m, or
// (-1)^s x 2^-14 x 0.m for e == 0. Independent of float16.h's bit manipulation.
double reference_value(uint16_t b) {
  const int s = b >> 15;
  const int e = (b >> 10) & 0x1f;
  const int m = b & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -mag : mag;
}

bool is_nan_bits(uint16_t b) { return (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0; }

TEST(Float16Test, PublishedValuesWiden) {
  EXPECT_EQ(from_bits(0x3c00), 1.0f);
  EXPECT_EQ(from_bits(0x3c01), 1.0009765625f);    // next after 1: 1 + 2^-10
  EXPECT_EQ(from_bits(0x3bff), 0.99951171875f);   // previous before 1: 1 - 2^-11
  EXPECT_EQ(from_bits(0x3555), 0.333251953125f);  // nearest to 1/3
  EXPECT_EQ(from_bits(0xc000), -2.0f);
  EXPECT_EQ(from_bits(0x7bff), 65504.0f);                      // largest finite
  EXPECT_EQ(from_bits(0x0400), std::ldexp(1.0f, -14));         // smallest normal
  EXPECT_EQ(from_bits(0x03ff), 1023 * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(from_bits(0x0001), std::ldexp(1.0f, -24));         // smallest subnormal
  EXPECT_EQ(from_bits(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(from_bits(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(from_bits(0x0000), 0.0f);
  EXPECT_FALSE(std::signbit(from_bits(0x0000)));
  EXPECT_EQ(from_bits(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(from_bits(0x8000)));
  EXPECT_TRUE(std::isnan(from_bits(0x7e00)));
  EXPECT_TRUE(std::isnan(from_bits(0x7c01)));
}

TEST(Float16Test, PublishedValuesNarrow) {
  EXPECT_EQ(to_bits(1.0), 0x3c00);
  EXPECT_EQ(to_bits(-2.0), 0xc000);
  EXPECT_EQ(to_bits(65504.0), 0x7bff);
  EXPECT_EQ(to_bits(std::ldexp(1.0, -14)), 0x0400);
  EXPECT_EQ(to_bits(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(to_bits(-std::ldexp(1.0, -24)), 0x8001);
  EXPECT_EQ(to_bits(1.0 / 3.0), 0x3555);
  EXPECT_EQ(to_bits(0.0), 0x0000);
  EXPECT_EQ(to_bits(-0.0), 0x8000);
}

TEST(Float16Test, OverflowRoundsToInfinity) {
  // 65520 is halfway between 65504 (0x7bff, odd) and 65536 (where 0x7c00 would be): ties to even
  // goes up, to infinity.
  EXPECT_EQ(to_bits(65520.0), 0x7c00);
  EXPECT_EQ(to_bits(-65520.0), 0xfc00);
  EXPECT_EQ(to_bits(65519.99609375), 0x7bff);  // the f32 just below 65520
  EXPECT_EQ(to_bits(65536.0), 0x7c00);
  EXPECT_EQ(to_bits(1e10), 0x7c00);
  EXPECT_EQ(to_bits(-1e10), 0xfc00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::max()).bits, 0x7c00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(float_to_f16(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
}

TEST(Float16Test, TiesRoundToEvenInTheNormalRange) {
  const double ulp = std::ldexp(1.0, -10);                               // at 1.0
  EXPECT_EQ(to_bits(1.0 + ulp / 2), 0x3c00);                             // tie: 0x3c00 is even
  EXPECT_EQ(to_bits(1.0 + 3 * ulp / 2), 0x3c02);                         // tie: 0x3c02 is even
  EXPECT_EQ(to_bits(1.0 + ulp / 2 + std::ldexp(1.0, -20)), 0x3c01);      // just above the tie
  EXPECT_EQ(to_bits(1.0 + 3 * ulp / 2 - std::ldexp(1.0, -20)), 0x3c01);  // just below
  EXPECT_EQ(to_bits(-(1.0 + ulp / 2)), 0xbc00);
  // The ulp is 1 below 2048 and 2 from 2048 up: 2047.5 ties between 2047 (0x67ff, odd) and 2048
  // (0x6800, even).
  EXPECT_EQ(to_bits(2047.5), 0x6800);
  EXPECT_EQ(to_bits(2049.0), 0x6800);  // tie between 2048 (even) and 2050
  EXPECT_EQ(to_bits(2051.0), 0x6802);  // tie between 2050 (odd) and 2052 (even)
}

TEST(Float16Test, SubnormalsRoundToNearestEven) {
  const double tiny = std::ldexp(1.0, -24);  // the subnormal step
  EXPECT_EQ(to_bits(tiny / 2), 0x0000);      // tie between 0 and 1: 0 is even
  EXPECT_EQ(to_bits(-tiny / 2), 0x8000);
  EXPECT_EQ(to_bits(tiny / 2 + std::ldexp(1.0, -40)), 0x0001);
  EXPECT_EQ(to_bits(tiny / 4), 0x0000);
  EXPECT_EQ(to_bits(1.5 * tiny), 0x0002);  // tie between 1 and 2
  EXPECT_EQ(to_bits(2.5 * tiny), 0x0002);  // tie between 2 and 3
  EXPECT_EQ(to_bits(2.25 * tiny), 0x0002);
  EXPECT_EQ(to_bits(2.75 * tiny), 0x0003);
  EXPECT_EQ(to_bits(1023.5 * tiny), 0x0400);  // tie between 0x03ff and 0x0400 (2^-14, even)
  EXPECT_EQ(to_bits(1022.5 * tiny), 0x03fe);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::min()).bits, 0x0000);
  EXPECT_EQ(float_to_f16(-std::numeric_limits<float>::min()).bits, 0x8000);
}

TEST(Float16Test, NanStaysQuietWithItsSign) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const uint16_t p = float_to_f16(qnan).bits;
  const uint16_t n = float_to_f16(-qnan).bits;
  EXPECT_TRUE(is_nan_bits(p));
  EXPECT_TRUE(is_nan_bits(n));
  EXPECT_EQ(p & 0x8000, 0);
  EXPECT_EQ(n & 0x8000, 0x8000);
  EXPECT_EQ(p & 0x0200, 0x0200);  // quiet bit
  // A signalling f32 NaN whose payload sits below f16's 10 mantissa bits must not become
  // infinity: the quiet bit keeps it a NaN.
  const uint16_t s = float_to_f16(std::bit_cast<float>(0xff800001u)).bits;
  EXPECT_EQ(s, 0xfe00);
  // Widening keeps the sign and payload and sets f32's quiet bit.
  EXPECT_EQ(std::bit_cast<uint32_t>(from_bits(0x7c01)), 0x7fc02000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(from_bits(0xfe00)), 0xffc00000u);
}

// An independent implementation: the CPU's own conversions (F16C), on every 997th f32 pattern
// (all exponents, signs and NaNs) and on every f16 pattern. Skipped where the CPU lacks F16C.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) uint16_t hardware_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardware_from_f16(uint16_t b) { return _cvtsh_ss(b); }

TEST(Float16Test, AgreesWithTheCpuConversions) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_EQ(float_to_f16(f).bits, hardware_to_f16(f)) << std::hex << u;
  }
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(from_bits(bits)),
              std::bit_cast<uint32_t>(hardware_from_f16(bits)))
        << std::hex << b;
  }
}
#endif

TEST(Float16Test, EveryPatternWidensToItsValue) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = from_bits(bits);
    if ((bits & 0x7c00) == 0x7c00) {
      EXPECT_EQ(std::isnan(f), is_nan_bits(bits)) << std::hex << b;
      EXPECT_EQ(std::signbit(f), (bits & 0x8000) != 0) << std::hex << b;
      if (!is_nan_bits(bits)) {
        EXPECT_TRUE(std::isinf(f)) << std::hex << b;
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), reference_value(bits)) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (bits & 0x8000) != 0) << std::hex << b;
  }
}

TEST(Float16Test, EveryPatternRoundTripsAndNanStaysNan) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const uint16_t back = float_to_f16(from_bits(bits)).bits;
    if (is_nan_bits(bits)) {
      EXPECT_TRUE(is_nan_bits(back)) << std::hex << b;
      EXPECT_EQ(back & 0x8200, (bits & 0x8000) | 0x0200) << std::hex << b;  // sign kept, quiet
    } else {
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

// Every midpoint between neighbouring finite non-negative f16 values (exact in f32: 12
// significant bits) rounds to the even neighbour, and the f32 values either side of it round to
// the nearer one.
TEST(Float16Test, EveryMidpointTiesToEven) {
  for (uint16_t lo = 0; lo < 0x7bff; ++lo) {
    const auto hi = static_cast<uint16_t>(lo + 1);
    const double mid_d = (reference_value(lo) + reference_value(hi)) / 2;
    const auto mid = static_cast<float>(mid_d);
    ASSERT_EQ(static_cast<double>(mid), mid_d) << std::hex << lo;
    const uint16_t even = (lo & 1) ? hi : lo;
    ASSERT_EQ(float_to_f16(mid).bits, even) << std::hex << lo;
    ASSERT_EQ(float_to_f16(-mid).bits, even | 0x8000) << std::hex << lo;
    ASSERT_EQ(float_to_f16(std::nextafter(mid, 0.0f)).bits, lo) << std::hex << lo;
    ASSERT_EQ(float_to_f16(std::nextafter(mid, 1e9f)).bits, hi) << std::hex << lo;
  }
}

}  // namespace
}  // namespace vtpu
