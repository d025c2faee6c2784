// What an SPMD program sees on one core.
#pragma once

#include <cstdint>
#include <string>

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

 private:
  Runtime& runtime_;
  VirtualCore& core_;
};

}  // namespace vtpu
