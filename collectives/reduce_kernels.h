// Elementwise reduction kernels for the collectives. Every kernel combines in one fixed operand
// order, (accumulated) op (local), so that a left fold over ranks 0..N-1 gives the same bits
// wherever it runs. bf16 is widened to f32, combined, and rounded back to nearest-even after
// every step (a bf16 fold, as XLA computes a bf16 reduction without a wider accumulator). Integer
// sum and product wrap modulo 2^bits (no undefined behaviour on overflow). Float max and min
// propagate NaN from either operand (XLA's semantics).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/types.h"

namespace vtpu {

/// max and min that propagate NaN from either operand, as XLA's max/min (and so lax.pmax/pmin)
/// do; std::max/std::min would keep the first operand when the second is NaN, so the result would
/// depend on which rank holds the NaN. Written as selects so that the loops still vectorise.
template <typename T>
inline T nan_max(T a, T b) {
  return b != b ? b : (a < b ? b : a);
}
template <typename T>
inline T nan_min(T a, T b) {
  return b != b ? b : (b < a ? b : a);
}

template <typename T>
inline T combine(T acc, T local, ReduceOp op) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bf16(combine(bf16_to_float(acc), bf16_to_float(local), op));
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum:
        return static_cast<T>(static_cast<U>(acc) + static_cast<U>(local));
      case ReduceOp::kProd:
        return static_cast<T>(static_cast<U>(acc) * static_cast<U>(local));
      case ReduceOp::kMax:
        return std::max(acc, local);
      case ReduceOp::kMin:
        return std::min(acc, local);
    }
    return acc;
  } else {
    switch (op) {
      case ReduceOp::kSum:
        return acc + local;
      case ReduceOp::kProd:
        return acc * local;
      case ReduceOp::kMax:
        return nan_max(acc, local);
      case ReduceOp::kMin:
        return nan_min(acc, local);
    }
    return acc;
  }
}

/// out[i] = acc[i] op local[i] for n elements. `out` may alias `acc` or `local` exactly.
template <typename T>
inline void reduce_into(T* out, const T* acc, const T* local, uint64_t n, ReduceOp op) {
  if constexpr (std::is_floating_point_v<T>) {
    // Separate loops per op so that the compiler vectorises each.
    switch (op) {
      case ReduceOp::kSum:
        for (uint64_t i = 0; i < n; ++i) out[i] = acc[i] + local[i];
        return;
      case ReduceOp::kProd:
        for (uint64_t i = 0; i < n; ++i) out[i] = acc[i] * local[i];
        return;
      case ReduceOp::kMax:
        for (uint64_t i = 0; i < n; ++i) out[i] = nan_max(acc[i], local[i]);
        return;
      case ReduceOp::kMin:
        for (uint64_t i = 0; i < n; ++i) out[i] = nan_min(acc[i], local[i]);
        return;
    }
  } else {
    for (uint64_t i = 0; i < n; ++i) out[i] = combine(acc[i], local[i], op);
  }
}

/// out = ((c[0] op c[1]) op c[2]) op ... c[nranks-1], elementwise over n elements: the left fold
/// in rank order that makes every algorithm give the same bits. Works in tiles so the partial
/// result stays in cache. `out` may alias c[0] exactly (not the others).
template <typename T>
inline void fold_in_rank_order(T* out, const T* const* c, int nranks, uint64_t n, ReduceOp op) {
  constexpr uint64_t kTile = 2048;
  for (uint64_t base = 0; base < n; base += kTile) {
    const uint64_t len = std::min(kTile, n - base);
    if (out + base != c[0] + base) std::memcpy(out + base, c[0] + base, len * sizeof(T));
    for (int r = 1; r < nranks; ++r) reduce_into(out + base, out + base, c[r] + base, len, op);
  }
}

}  // namespace vtpu
