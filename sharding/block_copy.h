// Copying an n-d box between a dense row-major array and a dense row-major block.
//
// Model. The box is one [start, stop) range per dimension of the full array; the block is the
// box's elements packed row-major, with shape (stop - start) per dimension. The trailing
// dimensions that the box covers whole, plus the last dimension it cuts, are contiguous in both
// the array and the block, so each is copied as one memcpy "run":
//
//     full (4, 6), box rows [1, 3) x cols [2, 5): runs of 3 elements, 2 of them
//     full (4, 6), box rows [1, 3) x cols [0, 6): one run of 12 elements
//
// An odometer walks the remaining outer dimensions row-major; the block offset advances by one
// run each step. device_put extracts each device's block and gather inserts it back, through the
// same copy_block_bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "vtpu/sharding/index_range.h"

namespace vtpu {

enum class BlockCopyDirection {
  kExtract,  // full array -> block
  kInsert,   // block -> full array
};

/// Number of elements of a shape: the product of its dimensions (1 for rank 0). Throws
/// InvalidArgumentError naming `shape` for a negative dimension or a product above 2^60 (so that
/// the byte size of an f32/f64 array never wraps); any 0 dimension makes it 0, whatever the others.
int64_t num_elements_of(const std::vector<int64_t>& shape);

/// Copies the box `box` between a dense row-major array of shape `full_shape` and the dense
/// row-major block of the box's shape, elements of `element_bytes` bytes. kExtract: `src` is the
/// array and `dst` the block; kInsert: `src` is the block and `dst` the array. `src_bytes` and
/// `dst_bytes` are the buffers' sizes and must equal the byte counts of what they hold. Throws
/// InvalidArgumentError when the box's rank differs from the shape's, a range is not inside its
/// dimension (0 <= start <= stop <= dim), or a buffer size does not match. An empty box copies
/// nothing (null pointers are then allowed). The buffers must not overlap. Thread-safe for
/// disjoint destinations.
void copy_block_bytes(BlockCopyDirection direction, const std::byte* src, uint64_t src_bytes,
                      std::byte* dst, uint64_t dst_bytes, const std::vector<int64_t>& full_shape,
                      const std::vector<IndexRange>& box, size_t element_bytes);

/// Typed forms of copy_block_bytes. extract_block: block = full[box]; insert_block:
/// full[box] = block. Spans are in elements of T; they throw like copy_block_bytes.
template <typename T>
void extract_block(std::span<const T> full, const std::vector<int64_t>& full_shape,
                   const std::vector<IndexRange>& box, std::span<T> block) {
  copy_block_bytes(BlockCopyDirection::kExtract, reinterpret_cast<const std::byte*>(full.data()),
                   full.size_bytes(), reinterpret_cast<std::byte*>(block.data()),
                   block.size_bytes(), full_shape, box, sizeof(T));
}

template <typename T>
void insert_block(std::span<const T> block, const std::vector<int64_t>& full_shape,
                  const std::vector<IndexRange>& box, std::span<T> full) {
  copy_block_bytes(BlockCopyDirection::kInsert, reinterpret_cast<const std::byte*>(block.data()),
                   block.size_bytes(), reinterpret_cast<std::byte*>(full.data()), full.size_bytes(),
                   full_shape, box, sizeof(T));
}

}  // namespace vtpu
