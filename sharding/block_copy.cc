#include "vtpu/sharding/block_copy.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "vtpu/common/error.h"
#include "vtpu/sharding/named_sharding.h"  // shape_text

namespace vtpu {

namespace {

// 2^60 elements: the byte size of an f32 or f64 array (<= 2^63) then never wraps.
constexpr int64_t kMaxElements = int64_t{1} << 60;

}  // namespace

int64_t num_elements_of(const std::vector<int64_t>& shape) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      throw InvalidArgumentError("dimension " + std::to_string(d) + " of shape " +
                                 shape_text(shape) + " is negative (expected >= 0)");
    }
  }
  // Regression: (2^62, 0) has no elements, but the product
  // overflowed the limit before it reached the 0 ((0, 2^62) passed).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] > kMaxElements / n) {
      throw InvalidArgumentError("shape " + shape_text(shape) +
                                 " has more than 2^60 elements (expected at most 2^60)");
    }
    n *= shape[d];
  }
  return n;
}

void copy_block_bytes(BlockCopyDirection direction, const std::byte* src, uint64_t src_bytes,
                      std::byte* dst, uint64_t dst_bytes, const std::vector<int64_t>& full_shape,
                      const std::vector<IndexRange>& box, size_t element_bytes) {
  const size_t rank = full_shape.size();
  if (box.size() != rank) {
    throw InvalidArgumentError("block copy box has " + std::to_string(box.size()) +
                               " ranges but the array of shape " + shape_text(full_shape) +
                               " has rank " + std::to_string(rank) +
                               " (expected one range per dimension)");
  }
  if (element_bytes == 0) throw InvalidArgumentError("block copy with 0-byte elements");
  const int64_t full_elements = num_elements_of(full_shape);
  std::vector<int64_t> block_shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (box[d].start < 0 || box[d].start > box[d].stop || box[d].stop > full_shape[d]) {
      throw InvalidArgumentError("block copy range [" + std::to_string(box[d].start) + ", " +
                                 std::to_string(box[d].stop) + ") on dimension " +
                                 std::to_string(d) + " of shape " + shape_text(full_shape) +
                                 " is not inside [0, " + std::to_string(full_shape[d]) + ")");
    }
    block_shape[d] = box[d].size();
  }
  const int64_t block_elements = num_elements_of(block_shape);
  const uint64_t full_bytes = static_cast<uint64_t>(full_elements) * element_bytes;
  const uint64_t block_bytes = static_cast<uint64_t>(block_elements) * element_bytes;
  const bool extract = direction == BlockCopyDirection::kExtract;
  const uint64_t want_src = extract ? full_bytes : block_bytes;
  const uint64_t want_dst = extract ? block_bytes : full_bytes;
  if (src_bytes != want_src || dst_bytes != want_dst) {
    throw InvalidArgumentError(std::string("block copy (") + (extract ? "extract" : "insert") +
                               ") of box " + shape_text(block_shape) + " from shape " +
                               shape_text(full_shape) + " got a " + std::to_string(src_bytes) +
                               "-byte source and a " + std::to_string(dst_bytes) +
                               "-byte destination (expected " + std::to_string(want_src) + " and " +
                               std::to_string(want_dst) + " bytes)");
  }
  if (block_elements == 0) return;

  // Full-array strides in elements, and the box's first element.
  std::vector<int64_t> stride(rank);
  int64_t s = 1;
  for (size_t d = rank; d-- > 0;) {
    stride[d] = s;
    s *= full_shape[d];
  }
  int64_t full_offset = 0;
  for (size_t d = 0; d < rank; ++d) full_offset += box[d].start * stride[d];

  // The run: dimensions k..rank-1, where every dimension after k is covered whole.
  size_t k = rank == 0 ? 0 : rank - 1;
  int64_t run = rank == 0 ? 1 : block_shape[k];
  while (k > 0 && box[k].start == 0 && box[k].stop == full_shape[k]) {
    --k;
    run *= block_shape[k];
  }
  const size_t run_bytes = static_cast<size_t>(run) * element_bytes;
  const int64_t num_runs = block_elements / run;

  std::vector<int64_t> index(k, 0);  // odometer over the outer dimensions 0..k-1
  for (int64_t r = 0; r < num_runs; ++r) {
    const size_t block_byte = static_cast<size_t>(r) * run_bytes;
    const size_t full_byte = static_cast<size_t>(full_offset) * element_bytes;
    if (extract) {
      std::memcpy(dst + block_byte, src + full_byte, run_bytes);
    } else {
      std::memcpy(dst + full_byte, src + block_byte, run_bytes);
    }
    for (size_t d = k; d-- > 0;) {
      ++index[d];
      full_offset += stride[d];
      if (index[d] < block_shape[d]) break;
      full_offset -= index[d] * stride[d];
      index[d] = 0;
    }
  }
}

}  // namespace vtpu
