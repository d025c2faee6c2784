// Elementwise reduction kernels for the collectives. Every kernel combines in one fixed operand
// order, (accumulated) op (local), so that a left fold over ranks 0..N-1 gives the same bits
// wherever it runs. bf16 and f16 are widened to f32, combined, and rounded back to nearest-even
// after every step (a bf16 or f16 fold, as XLA computes such a reduction without a wider
// accumulator). f32's 24 bits are at least twice the narrow type's precision plus 2, so the f32
// step and the rounding back give the correctly rounded bf16 or f16 result (Figueroa's bound on
// double rounding). Integer sum and product wrap modulo 2^bits, two's complement, as XLA's
// integer add and multiply do (no undefined behaviour on overflow). Float max and min propagate
// NaN from either operand (XLA's semantics).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "vtpu/collectives/types.h"

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
  } else if constexpr (std::is_same_v<T, Float16>) {
    return float_to_f16(combine(f16_to_float(acc), f16_to_float(local), op));
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

/// Elements per tile of the folds below: the partial result of a tile stays in L1.
inline constexpr uint64_t kFoldTileBytes = 8192;

/// out = ((c[0] op c[1]) op c[2]) op ... c[nranks-1], elementwise over n elements: the left fold
/// in rank order that makes every algorithm give the same bits. Works in tiles with the partial
/// result in a local buffer, so `out` may alias any c[r] exactly (each tile is read from every
/// input before it is written).
template <typename T>
inline void fold_in_rank_order(T* out, const T* const* c, int nranks, uint64_t n, ReduceOp op) {
  if (nranks == 1) {
    if (n && out != c[0]) std::memcpy(out, c[0], n * sizeof(T));
    return;
  }
  if (nranks == 2) {
    reduce_into(out, c[0], c[1], n, op);
    return;
  }
  constexpr uint64_t kTile = kFoldTileBytes / sizeof(T);
  alignas(64) T acc[kTile];
  for (uint64_t base = 0; base < n; base += kTile) {
    const uint64_t len = std::min(kTile, n - base);
    reduce_into(acc, c[0] + base, c[1] + base, len, op);
    for (int r = 2; r < nranks - 1; ++r) reduce_into(acc, acc, c[r] + base, len, op);
    reduce_into(out + base, acc, c[nranks - 1] + base, len, op);
  }
}

/// Copies `bytes` with non-temporal (streaming) stores where the CPU has them (x86-64 SSE2), so
/// that a destination not in cache is written without first being read into it (no
/// read-for-ownership: 2 bytes of DRAM traffic per byte copied instead of 3), as glibc's memcpy
/// does above its non-temporal threshold. Call stream_fence() before publishing the data.
inline void stream_copy(void* dst, const void* src, uint64_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const uint64_t head =
      std::min<uint64_t>(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  if (head) std::memcpy(d, s, head);
  uint64_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  if (i < bytes) std::memcpy(d + i, s + i, bytes - i);
#else
  if (bytes) std::memcpy(dst, src, bytes);
#endif
}

/// Orders earlier stream_copy stores before later stores (an sfence on x86-64).
inline void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

/// The same fold, written to each of out[0..num_out-1] (the two-shot all-reduce's "reduce a
/// chunk, then write it to every rank"), with streaming stores when `streaming` (then the caller
/// calls stream_fence() before publishing). Any out[q] may alias any c[r] exactly.
template <typename T>
inline void fold_in_rank_order_to_all(T* const* out, int num_out, const T* const* c, int nranks,
                                      uint64_t n, ReduceOp op, bool streaming) {
  constexpr uint64_t kTile = kFoldTileBytes / sizeof(T);
  alignas(64) T acc[kTile];
  for (uint64_t base = 0; base < n; base += kTile) {
    const uint64_t len = std::min(kTile, n - base);
    if (nranks == 1) {
      std::memcpy(acc, c[0] + base, len * sizeof(T));
    } else {
      reduce_into(acc, c[0] + base, c[1] + base, len, op);
      for (int r = 2; r < nranks; ++r) reduce_into(acc, acc, c[r] + base, len, op);
    }
    for (int q = 0; q < num_out; ++q) {
      if (streaming) {
        stream_copy(out[q] + base, acc, len * sizeof(T));
      } else {
        std::memcpy(out[q] + base, acc, len * sizeof(T));
      }
    }
  }
}

}  // namespace vtpu
