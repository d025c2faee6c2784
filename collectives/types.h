// Element types, reduction operators, algorithms, shapes and collective fingerprints shared by the
// collectives layer.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "vtpu/common/bfloat16.h"
#include "vtpu/common/element_type.h"
#include "vtpu/common/float16.h"

namespace vtpu {

/// The collectives use the code base's one element-type enum (XLA names). They support f32, f64,
/// bf16, f16, s32 and s64; other ElementType values are rejected with InvalidArgumentError.
using DataType = ElementType;

enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProd };

enum class CollectiveKind : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kBroadcast,
  kReduce,
  kBarrier,
};

/// How a collective moves data (docs/COLLECTIVES.md; each algorithm's model opens its header).
/// kAuto lets the Communicator choose by message size and group size. Only all_reduce offers a
/// choice; the other operations each have one algorithm and record it in their fingerprint.
enum class Algorithm : uint8_t {
  kAuto,               // choose (Communicator::select_algorithm)
  kRing,               // deterministic pipelined chain round a unidirectional ring
  kBidirectionalRing,  // deterministic: reduce along the clockwise chain, result back the other way
  kRecursiveDoubling,  // Bruck all-gather of the inputs in ceil(log2 N) steps, then a local fold
  kTorus2d,            // per-axis exchanges of raw pieces on an R x C mesh, fold, per-axis gathers
  kRingReduceScatter,  // NOT deterministic across algorithms: classic ring reduce-scatter+gather
  kDirect,             // two-shot by direct access: fold a chunk from every input, write to all
  kHierarchical,       // fold inside each process, chain across processes, write back inside
  kPairwise,           // direct exchange with every peer (all_to_all, reduce_scatter)
  kChain,              // a pipelined chain through the ranks (broadcast, reduce)
  kDissemination,      // barrier: Hensgen/Finkel/Manber dissemination in ceil(log2 N) rounds
  kLocal,              // one-core group: a local copy
};

std::string_view data_type_name(DataType t);         // "f32", "bf16", ...
uint64_t data_type_bytes(DataType t);                // bytes per element
std::string_view reduce_op_name(ReduceOp op);        // "sum", "max", "min", "prod"
std::string_view collective_name(CollectiveKind k);  // "all_reduce", "all_gather", ...
std::string_view algorithm_name(Algorithm a);        // "auto", "ring", "bidirectional_ring", ...
/// Parses algorithm_name()'s output; throws InvalidArgumentError listing the valid names.
Algorithm parse_algorithm(std::string_view name);
/// True for f32, f64, bf16, f16, s32 and s64.
bool is_collective_data_type(DataType t);

template <typename T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<float>() {
  return ElementType::kF32;
}
template <>
constexpr DataType data_type_of<double>() {
  return ElementType::kF64;
}
template <>
constexpr DataType data_type_of<int32_t>() {
  return ElementType::kS32;
}
template <>
constexpr DataType data_type_of<int64_t>() {
  return ElementType::kS64;
}
template <>
constexpr DataType data_type_of<BFloat16>() {
  return ElementType::kBf16;
}
template <>
constexpr DataType data_type_of<Float16>() {
  return ElementType::kF16;
}

template <typename T>
struct TypeTag {
  using type = T;
};
/// Calls fn(TypeTag<T>{}) with the C++ type of `t` (float, double, BFloat16, Float16, int32_t,
/// int64_t),
/// so that typed code is written once. Throws InvalidArgumentError for another element type.
template <typename Fn>
decltype(auto) visit_data_type(DataType t, Fn&& fn);

/// An array shape held inline (no allocation), so that it can travel in every message.
/// Row-major; at most kMaxDims dimensions. Plain data.
struct Shape {
  static constexpr int kMaxDims = 8;
  /// At most 2^48 elements (so that bytes x group size fits in 64 bits).
  static constexpr uint64_t kMaxElements = uint64_t{1} << 48;
  int32_t num_dims = 0;
  std::array<int64_t, kMaxDims> dims{};

  /// Throws InvalidArgumentError for more than kMaxDims dims, a negative dim, or more than
  /// kMaxElements elements.
  static Shape of(std::span<const int64_t> dims);
  std::span<const int64_t> span() const { return {dims.data(), static_cast<size_t>(num_dims)}; }
  uint64_t num_elements() const;
  bool operator==(const Shape&) const = default;
  /// "[8,4]"; "[]" for a scalar.
  std::string to_string() const;
};

/// What a core believes the current collective is. Every message of a collective carries the
/// sender's fingerprint, and the receiver compares it with its own, so that cores calling
/// different collectives (a desync) or the same one with different shapes or parameters fail at
/// once instead of producing partial results. Plain data (fixed size, no allocation).
struct Fingerprint {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = ElementType::kF32;
  ReduceOp reduce_op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  bool tiled = false;         // all_gather, reduce_scatter
  int32_t num_dims = 1;       // of the input shape; dims[0] == num_elements when 1
  uint64_t num_elements = 0;  // of the input
  std::array<int64_t, Shape::kMaxDims> dims{};
  int32_t axis = 0;         // all_gather axis, reduce_scatter scatter dimension, all_to_all split
  int32_t concat_axis = 0;  // all_to_all
  int32_t root = 0;         // broadcast, reduce: rank of the root
  uint64_t pairs_hash = 0;  // collective_permute: hash of the (source, destination) pairs
  uint64_t sequence = 0;    // per-communicator collective counter, from 0

  bool operator==(const Fingerprint&) const = default;
  void set_shape(const Shape& s);
  Shape shape() const;
  /// e.g. "all_reduce(sum) f32[25] at sequence 0 via ring".
  std::string to_string() const;
};

/// Throws InvalidArgumentError naming `t` and the supported types.
[[noreturn]] void throw_unsupported_data_type(DataType t);

template <typename Fn>
decltype(auto) visit_data_type(DataType t, Fn&& fn) {
  switch (t) {
    case ElementType::kF32:
      return fn(TypeTag<float>{});
    case ElementType::kF64:
      return fn(TypeTag<double>{});
    case ElementType::kS32:
      return fn(TypeTag<int32_t>{});
    case ElementType::kS64:
      return fn(TypeTag<int64_t>{});
    case ElementType::kBf16:
      return fn(TypeTag<BFloat16>{});
    case ElementType::kF16:
      return fn(TypeTag<Float16>{});
    default:
      break;
  }
  throw_unsupported_data_type(t);
}

}  // namespace vtpu
