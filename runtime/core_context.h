// What an SPMD program sees on one core.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vtpu/common/element_type.h"
#include "vtpu/runtime/device_buffer.h"

namespace vtpu {

class Runtime;
class VirtualCore;

/// Handed to fn(CoreContext&) by Runtime::run_spmd on each core's thread. Only the owning core
/// may call it; it is valid for the duration of that call.
class CoreContext {
 public:
  CoreContext(Runtime& runtime, VirtualCore& core) : runtime_(runtime), core_(core) {}

  int core_id() const;
  int num_cores() const;
  Runtime& runtime() const { return runtime_; }
  VirtualCore& core() const { return core_; }
  HbmArena& hbm() const;
  /// Allocates a buffer in this core's HBM. Throws OutOfMemoryError with the arena's report.
  DeviceBuffer allocate(uint64_t size_bytes, std::string label = {}) const;
  /// Allocates an array of `dtype` and logical shape `dims`, stored row-major and unpadded:
  /// size_bytes() is the logical size, and the arena is charged the padded bytes of the TPU
  /// default layout (tpu_default_layout) unless RuntimeOptions::pad_arrays is false. A
  /// zero-element array gives an empty (0-byte) buffer. Throws InvalidArgumentError for a
  /// negative dim, OutOfMemoryError when it does not fit.
  DeviceBuffer allocate_array(ElementType dtype, std::span<const int64_t> dims,
                              std::string label = {}) const;
  /// One buffer holding several arrays of `dtype` back to back (row-major, unpadded), charged
  /// the sum of their padded bytes (or their logical bytes without padding): a packed parameter
  /// or gradient buffer costs what its tensors would cost one by one.
  DeviceBuffer allocate_arrays(ElementType dtype, std::span<const std::vector<int64_t>> shapes,
                               std::string label = {}) const;

 private:
  Runtime& runtime_;
  VirtualCore& core_;
};

}  // namespace vtpu
