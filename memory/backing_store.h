// Backing storage for an HBM arena: an anonymous mmap reservation that Linux commits lazily, page
// by page on first touch, so 8 cores x 16 GiB costs nothing until it is written.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vtpu {

/// Owns a reserved virtual address range. Thread-safe for concurrent access to disjoint bytes;
/// construction and destruction are not concurrent with use.
class BackingStore {
 public:
  /// Reserves `size_bytes` (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE). Throws
  /// ResourceExhaustedError with the size and errno text if the kernel refuses.
  explicit BackingStore(uint64_t size_bytes);
  ~BackingStore();
  BackingStore(const BackingStore&) = delete;
  BackingStore& operator=(const BackingStore&) = delete;

  std::byte* data() const { return base_; }
  uint64_t size_bytes() const { return size_bytes_; }
  /// Returns the whole pages inside [offset, offset + size_bytes) to the kernel
  /// (MADV_DONTNEED); they read as zero when touched again.
  void release(uint64_t offset, uint64_t size_bytes);
  /// Bytes of the range currently resident in RAM (mincore), for tests and reports.
  uint64_t resident_bytes() const;

 private:
  std::byte* base_ = nullptr;
  uint64_t size_bytes_ = 0;
};

}  // namespace vtpu
