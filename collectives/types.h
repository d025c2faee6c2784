// Element types, reduction operators and collective fingerprints shared by the collectives layer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vtpu {

/// Element types a collective can move. Names follow XLA's primitive types.
enum class DataType : uint8_t { kF32, kF64, kS32, kS64 };
enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProd };
enum class CollectiveKind : uint8_t { kAllReduce };

std::string_view data_type_name(DataType t);         // "f32", "f64", "s32", "s64"
uint64_t data_type_bytes(DataType t);                // bytes per element
std::string_view reduce_op_name(ReduceOp op);        // "sum", "max", "min", "prod"
std::string_view collective_name(CollectiveKind k);  // "all_reduce"

template <typename T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<float>() {
  return DataType::kF32;
}
template <>
constexpr DataType data_type_of<double>() {
  return DataType::kF64;
}
template <>
constexpr DataType data_type_of<int32_t>() {
  return DataType::kS32;
}
template <>
constexpr DataType data_type_of<int64_t>() {
  return DataType::kS64;
}

template <typename T>
struct TypeTag {
  using type = T;
};
/// Calls fn(TypeTag<T>{}) with the C++ type of `t`, so that typed code is written once.
template <typename Fn>
decltype(auto) visit_data_type(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::kF32:
      return fn(TypeTag<float>{});
    case DataType::kF64:
      return fn(TypeTag<double>{});
    case DataType::kS32:
      return fn(TypeTag<int32_t>{});
    case DataType::kS64:
      return fn(TypeTag<int64_t>{});
  }
  return fn(TypeTag<float>{});  // unreachable: every enumerator is handled above
}

/// What a core believes the current collective is. Every message of a collective carries the
/// sender's fingerprint, and the receiver compares it with its own, so that cores calling
/// different collectives (a desync) or the same one with different shapes fail at once instead of
/// producing partial sums. Plain data.
struct Fingerprint {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = DataType::kF32;
  ReduceOp reduce_op = ReduceOp::kSum;
  uint64_t num_elements = 0;
  uint64_t sequence = 0;  // per-communicator collective counter, from 0

  bool operator==(const Fingerprint&) const = default;
  /// e.g. "all_reduce(sum) f32[25] at sequence 0".
  std::string to_string() const;
};

}  // namespace vtpu
