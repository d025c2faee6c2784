// Shared helpers of the collectives tests: small runtimes and independent sequential references
// (naive index arithmetic over row-major arrays, no code shared with collectives/).
#pragma once

#include <chrono>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "vtpu/collectives/ring_buffer_link.h"
#include "vtpu/collectives/transport.h"
#include "vtpu/collectives/types.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/float16.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu::testing_util {

// Slots of 256 B x 2: 128 floats fill a link, so 1000 elements exercise back-pressure.
inline RuntimeOptions small_options(int cores, uint64_t slot_bytes = 256, int num_slots = 2) {
  RuntimeOptions o;
  o.num_cores = cores;
  o.hbm_bytes_per_core = 64ull << 20;
  o.link_slot_bytes = slot_bytes;
  o.link_num_slots = num_slots;
  o.collective_timeout = std::chrono::seconds(20);
  return o;
}

// An element of type T from a double (bf16 and f16 rounded to nearest-even through f32), and back
// (exact).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, Float16>) {
    return float_to_f16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return bf16_to_float(v);
  } else if constexpr (std::is_same_v<T, Float16>) {
    return f16_to_float(v);
  } else {
    return static_cast<double>(v);
  }
}

// Naive a op b, written independently of collectives/reduce_kernels.h (inputs hold no NaN;
// integer callers keep clear of overflow or wrap themselves).
template <typename T>
T naive_combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return a < b ? b : a;
    case ReduceOp::kMin:
      return b < a ? b : a;
  }
  return a;
}

// Left fold of the ranks' inputs in rank order, ((in[0] op in[1]) op in[2]) ..., elementwise.
template <typename T, typename Combine = T (*)(T, T, ReduceOp)>
std::vector<T> fold_reference(const std::vector<std::vector<T>>& in, ReduceOp op,
                              Combine combine = &naive_combine<T>) {
  std::vector<T> out = in[0];
  for (size_t r = 1; r < in.size(); ++r)
    for (size_t i = 0; i < out.size(); ++i) out[i] = combine(out[i], in[r][i], op);
  return out;
}

// splitmix64's finaliser: a well-mixed 64-bit value from a counter, for reproducible inputs.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline std::vector<int> iota_group(int n, int first = 0) {
  std::vector<int> g(static_cast<size_t>(n));
  std::iota(g.begin(), g.end(), first);
  return g;
}

inline uint64_t num_elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

inline std::vector<int64_t> unravel(uint64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = static_cast<int64_t>(flat % static_cast<uint64_t>(shape[k]));
    flat /= static_cast<uint64_t>(shape[k]);
  }
  return idx;
}

inline uint64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  uint64_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    flat = flat * static_cast<uint64_t>(shape[k]) + static_cast<uint64_t>(idx[k]);
  }
  return flat;
}

// A link that copies through slots only, as a link between processes would: an in-process
// RingBufferLink that reports no direct access, so algorithms must fall back to slot copies.
class SlotOnlyLink final : public Link {
 public:
  SlotOnlyLink(int src, int dst, const LinkOptions& o) : inner_(src, dst, o) {}
  int src_core() const override { return inner_.src_core(); }
  int dst_core() const override { return inner_.dst_core(); }
  uint64_t slot_bytes() const override { return inner_.slot_bytes(); }
  int num_slots() const override { return inner_.num_slots(); }
  std::byte* acquire_send_slot(Deadline d) override { return inner_.acquire_send_slot(d); }
  void commit_send(const Fingerprint& fp, uint64_t bytes) override {
    inner_.commit_send(fp, bytes);
  }
  ReceivedSlot acquire_recv_slot(Deadline d) override { return inner_.acquire_recv_slot(d); }
  void release_recv() override { inner_.release_recv(); }
  void abort(const std::string& reason) override { inner_.abort(reason); }
  void reset() override { inner_.reset(); }

 private:
  RingBufferLink inner_;
};

class SlotOnlyTransport final : public Transport {
 public:
  std::string_view name() const override { return "slot_only"; }
  std::unique_ptr<Link> connect(int src, int dst, const LinkOptions& o) override {
    return std::make_unique<SlotOnlyLink>(src, dst, o);
  }
};

}  // namespace vtpu::testing_util
