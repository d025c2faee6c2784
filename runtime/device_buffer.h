// An RAII handle to bytes in one core's HBM arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "vtpu/common/error.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {

/// Owns one allocation in one core's arena and frees it on destruction. The buffer keeps its
/// arena alive (shared ownership), so it may outlive the Runtime safely. A buffer of 0 bytes is
/// valid and holds no allocation (an empty shard). Move-only. Thread-compatible: one thread uses a
/// given DeviceBuffer at a time; different buffers may be used concurrently.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `size_bytes` in `arena`. Throws OutOfMemoryError (ResourceExhausted) with the
  /// arena's report when it does not fit.
  DeviceBuffer(std::shared_ptr<HbmArena> arena, uint64_t size_bytes, std::string label = {});
  ~DeviceBuffer() { reset(); }
  /// A buffer of `size_bytes` whose chunk in `arena` takes `charged_bytes` (>= size_bytes): an
  /// array stored row-major and unpadded but charged its padded footprint (HbmArena::
  /// allocate_padded). size_bytes() and as() see the logical bytes only. Both 0: an empty buffer.
  /// Throws InvalidArgumentError when size_bytes > charged_bytes, and as allocate_padded.
  DeviceBuffer(std::shared_ptr<HbmArena> arena, uint64_t size_bytes, uint64_t charged_bytes,
               std::string label);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Frees the allocation now (no-op when empty).
  void reset() noexcept;

  bool valid() const { return arena_ != nullptr; }
  int core_id() const { return arena_ ? arena_->core_id() : -1; }
  uint64_t size_bytes() const { return size_bytes_; }
  /// Current address of the bytes; nullptr for 0 bytes. Throws FailedPreconditionError on a
  /// metadata-only arena (no backing bytes) or an empty handle.
  std::byte* data() const;

  /// The bytes viewed as `T` elements: size_bytes / sizeof(T) elements. Throws
  /// InvalidArgumentError if size_bytes is not a multiple of sizeof(T).
  template <typename T>
  std::span<T> as() const {
    if (size_bytes_ % sizeof(T) != 0) {
      throw InvalidArgumentError("buffer of " + std::to_string(size_bytes_) +
                                 " bytes is not a whole number of " + std::to_string(sizeof(T)) +
                                 "-byte elements");
    }
    return {reinterpret_cast<T*>(data()), size_bytes_ / sizeof(T)};
  }

  /// Pins the buffer so that defragmentation never moves it while the returned pin lives; hold
  /// one for as long as an operation keeps a pointer from data(). An empty pin for 0 bytes.
  /// Throws FailedPreconditionError on an empty handle.
  BufferPin pin() const;

  /// The arena's id for this buffer (0 for a 0-byte buffer).
  BufferId id() const { return id_; }
  HbmArena* arena() const { return arena_.get(); }

 private:
  std::shared_ptr<HbmArena> arena_;
  BufferId id_ = 0;
  uint64_t size_bytes_ = 0;
};

}  // namespace vtpu
