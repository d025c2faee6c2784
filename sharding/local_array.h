// LocalArray: one core's block of an array inside shard_map, the value jax.shard_map's function
// sees. It has a dtype, a row-major shape and a buffer in that core's HBM, charged its padded
// bytes under the TPU tiled layout (memory/tiled_layout.h) unless the runtime turns padding off.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vtpu/collectives/types.h"
#include "vtpu/common/element_type.h"
#include "vtpu/runtime/core_context.h"
#include "vtpu/runtime/device_buffer.h"

namespace vtpu {

/// Owns its buffer, or views one it does not own (the read-only blocks shard_map passes in).
/// Move-only. Thread-compatible. Element types: f32, bf16, f16, s32, s64.
class LocalArray {
 public:
  LocalArray() = default;
  /// Uninitialised array on the core of `ctx`. Throws InvalidArgumentError for a negative dim or
  /// an unsupported dtype, OutOfMemoryError when it does not fit.
  static LocalArray empty(CoreContext& ctx, ElementType dtype, std::vector<int64_t> shape,
                          std::string label = "shard_map/array");
  static LocalArray zeros(CoreContext& ctx, ElementType dtype, std::vector<int64_t> shape,
                          std::string label = "shard_map/array");
  /// A copy of `values` (row-major, product(shape) elements; InvalidArgumentError otherwise).
  template <typename T>
  static LocalArray from_host(CoreContext& ctx, std::span<const T> values,
                              std::vector<int64_t> shape, std::string label = "shard_map/array") {
    LocalArray a = empty(ctx, data_type_of<T>(), std::move(shape), std::move(label));
    a.check_count(values.size());
    std::copy(values.begin(), values.end(), a.data<T>().begin());
    return a;
  }
  /// Takes ownership of `buffer`, which must hold exactly product(shape) elements of `dtype`.
  static LocalArray adopt(ElementType dtype, std::vector<int64_t> shape, DeviceBuffer buffer);
  /// A read-only view of `buffer` (not owned; it must outlive the view).
  static LocalArray view(ElementType dtype, std::vector<int64_t> shape, const DeviceBuffer& buffer);

  LocalArray(LocalArray&&) noexcept = default;
  LocalArray& operator=(LocalArray&&) noexcept = default;
  LocalArray(const LocalArray&) = delete;
  LocalArray& operator=(const LocalArray&) = delete;

  ElementType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  /// Number of elements.
  int64_t size() const;
  uint64_t nbytes() const;
  bool owns_buffer() const { return owned_.valid() || view_ == nullptr; }
  const DeviceBuffer& buffer() const { return view_ != nullptr ? *view_ : owned_; }
  /// The owned buffer, leaving this array empty. Throws FailedPreconditionError for a view.
  DeviceBuffer release() &&;

  /// The elements as T. Throws InvalidArgumentError naming both dtypes when T is not dtype();
  /// the mutable form throws FailedPreconditionError for a view.
  template <typename T>
  std::span<const T> data() const {
    check_dtype(data_type_of<T>());
    return buffer().template as<T>().first(static_cast<size_t>(size()));
  }
  template <typename T>
  std::span<T> data() {
    check_dtype(data_type_of<T>());
    check_writable();
    return owned_.template as<T>().first(static_cast<size_t>(size()));
  }
  std::span<const std::byte> bytes() const;
  std::span<std::byte> mutable_bytes();
  /// A host copy of the elements.
  template <typename T>
  std::vector<T> to_host() const {
    std::span<const T> d = data<T>();
    return {d.begin(), d.end()};
  }

 private:
  void check_dtype(ElementType want) const;
  void check_writable() const;
  void check_count(size_t count) const;

  ElementType dtype_ = ElementType::kF32;
  std::vector<int64_t> shape_;
  DeviceBuffer owned_;
  const DeviceBuffer* view_ = nullptr;
};

}  // namespace vtpu
