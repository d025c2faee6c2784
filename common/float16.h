// float16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits, bias 15), XLA's F16. As with
// bf16, vtpu keeps f16 elements as their uint16 bit patterns and computes in f32: widen exactly
// (every f16 is an f32), operate, round back to nearest-even (IEEE's default rounding, as
// F16C's vcvtps2ph and XLA's F32 -> F16 convert do). Magnitudes below 2^-14 become subnormals
// (multiples of 2^-24), rounded like the rest; from 65520 up they round to +-infinity. NaN stays
// NaN (quiet) with its sign.
#pragma once

#include <bit>
#include <cstdint>

namespace vtpu {

/// One f16 element: its bit pattern. Plain data (trivially copyable, 2 bytes). Thread-compatible.
struct Float16 {
  uint16_t bits = 0;
  bool operator==(const Float16&) const = default;
};
static_assert(sizeof(Float16) == 2);

/// Exact widening to f32. NaN keeps its sign and payload and comes out quiet, as F16C's
/// vcvtph2ps gives it.
inline float f16_to_float(Float16 x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  const uint32_t exponent = (x.bits >> 10) & 0x1fu;
  const uint32_t mantissa = x.bits & 0x3ffu;
  if (exponent == 0x1f) {  // infinity, or NaN (then the f32 quiet bit is set)
    const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in f32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// Rounds an f32 to the nearest f16, ties to even, subnormals included. NaN maps to a quiet NaN
/// with the same sign; magnitudes from 65520 (halfway past the largest finite f16, 65504) round to
/// +-infinity as IEEE rounding does.
inline Float16 float_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep sign and the top payload bits, force the quiet bit
    return Float16{static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};
  }
  if (abs >= 0x47800000u) {  // >= 65536 or infinity: beyond every rounding to a finite f16
    return Float16{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs >= 0x38800000u) {  // f16 normal range (>= 2^-14): rebias, round off 13 bits
    const uint32_t rebiased = abs - 0x38000000u;
    const uint32_t lsb = (rebiased >> 13) & 1u;
    // A carry out of the mantissa bumps the exponent, up to 0x7c00 (infinity) from 65520.
    return Float16{static_cast<uint16_t>(sign | ((rebiased + 0xfffu + lsb) >> 13))};
  }
  // Subnormal result: value = m x 2^(E-150) with m the 24-bit significand; in units of 2^-24
  // that is m >> (126 - E). Below 2^-25 (shift > 24) everything rounds to zero.
  const uint32_t biased_exponent = abs >> 23;
  const uint32_t shift = 126u - biased_exponent;  // 14 (E = 112) .. 126 (f32 subnormal)
  if (shift > 24) return Float16{sign};
  const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into 0x0400, 2^-14: correct
  return Float16{static_cast<uint16_t>(sign | q)};
}

}  // namespace vtpu
