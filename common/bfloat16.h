// bfloat16: the upper 16 bits of an IEEE f32 (1 sign, 8 exponent, 7 mantissa bits), as TPUs and
// XLA's BF16 store it. vtpu keeps bf16 elements as their uint16 bit patterns and computes in f32:
// widen exactly, operate, round back to nearest-even (the rounding of Eigen's bfloat16 and of
// XLA's F32 -> BF16 convert). NaN stays NaN (quiet) through the round trip.
#pragma once

#include <bit>
#include <cstdint>

namespace vtpu {

/// One bf16 element: its bit pattern. Plain data (trivially copyable, 2 bytes). Thread-compatible.
struct BFloat16 {
  uint16_t bits = 0;
  bool operator==(const BFloat16&) const = default;
};
static_assert(sizeof(BFloat16) == 2);

/// Exact widening: the bf16 bits become the top half of an f32.
inline float bf16_to_float(BFloat16 x) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16);
}

/// Rounds an f32 to the nearest bf16, ties to even. NaN maps to a quiet NaN with the same sign;
/// values beyond bf16's range round to +-infinity as IEEE rounding does.
inline BFloat16 float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force a quiet mantissa bit
    return BFloat16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  const uint32_t lsb = (u >> 16) & 1u;
  const uint32_t rounded = u + 0x7fffu + lsb;
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

}  // namespace vtpu
