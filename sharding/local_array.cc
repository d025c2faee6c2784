#include "vtpu/sharding/local_array.h"

#include <cstring>
#include <utility>

#include "vtpu/common/error.h"
#include "vtpu/memory/tiled_layout.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {

LocalArray LocalArray::empty(CoreContext& ctx, ElementType dtype, std::vector<int64_t> shape,
                             std::string label) {
  check_sharded_array_dtype(dtype, "LocalArray");
  logical_bytes(dtype, shape);  // a negative dim or a size past 2^64 bytes throws
  LocalArray a;
  a.dtype_ = dtype;
  a.owned_ = ctx.allocate_array(dtype, shape, std::move(label));
  a.shape_ = std::move(shape);
  return a;
}

LocalArray LocalArray::zeros(CoreContext& ctx, ElementType dtype, std::vector<int64_t> shape,
                             std::string label) {
  LocalArray a = empty(ctx, dtype, std::move(shape), std::move(label));
  std::span<std::byte> b = a.mutable_bytes();
  if (!b.empty()) std::memset(b.data(), 0, b.size());
  return a;
}

namespace {

// adopt and view take a buffer that must hold exactly the array's logical bytes.
void check_buffer_holds(ElementType dtype, const std::vector<int64_t>& shape,
                        const DeviceBuffer& buffer, const char* what) {
  check_sharded_array_dtype(dtype, "LocalArray");
  const uint64_t want = logical_bytes(dtype, shape);
  if (buffer.size_bytes() != want) {
    throw InvalidArgumentError(std::string(what) + " of a buffer of " +
                               std::to_string(buffer.size_bytes()) + " bytes (expected " +
                               std::to_string(want) + ")");
  }
}

}  // namespace

LocalArray LocalArray::adopt(ElementType dtype, std::vector<int64_t> shape, DeviceBuffer buffer) {
  check_buffer_holds(dtype, shape, buffer, "LocalArray::adopt");
  LocalArray a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.owned_ = std::move(buffer);
  return a;
}

LocalArray LocalArray::view(ElementType dtype, std::vector<int64_t> shape,
                            const DeviceBuffer& buffer) {
  check_buffer_holds(dtype, shape, buffer, "LocalArray::view");
  LocalArray a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.view_ = &buffer;
  return a;
}

int64_t LocalArray::size() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

uint64_t LocalArray::nbytes() const {
  return static_cast<uint64_t>(size()) * element_size_bytes(dtype_);
}

DeviceBuffer LocalArray::release() && {
  check_writable();
  shape_.clear();
  return std::move(owned_);
}

std::span<const std::byte> LocalArray::bytes() const {
  const DeviceBuffer& b = buffer();
  if (nbytes() == 0) return {};
  return {b.data(), static_cast<size_t>(nbytes())};
}

std::span<std::byte> LocalArray::mutable_bytes() {
  check_writable();
  if (nbytes() == 0) return {};
  return {owned_.data(), static_cast<size_t>(nbytes())};
}

void LocalArray::check_dtype(ElementType want) const {
  if (want != dtype_) {
    throw InvalidArgumentError("LocalArray of dtype " + std::string(element_type_name(dtype_)) +
                               " read as " + std::string(element_type_name(want)));
  }
}

void LocalArray::check_writable() const {
  if (view_ != nullptr) {
    throw FailedPreconditionError(
        "LocalArray is a read-only view (shard_map inputs are never changed; copy it first)");
  }
}

void LocalArray::check_count(size_t count) const {
  if (count != static_cast<size_t>(size())) {
    throw InvalidArgumentError("LocalArray::from_host got " + std::to_string(count) +
                               " values (expected " + std::to_string(size()) + ")");
  }
}

}  // namespace vtpu
