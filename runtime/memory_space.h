// The memory spaces of one virtual TPU core, after Pallas TPU's pltpu.ANY/HBM, VMEM and SMEM, plus
// an accumulator memory for the matrix unit's partial sums.
//
//   HBM          large, slow; the core's arena (VirtualCore::hbm()); arrays live here
//   VMEM         vector memory: the blocks a kernel computes on (scoped limit, 16 MiB by default)
//   SMEM         scalar memory: indices, loop bounds, small tables
//   accumulator  where a matmul kernel keeps its f32 partial sums across the reduction axis (on a
//                real TPU, an f32 VMEM scratch buffer fed by the MXU result buffers; vtpu gives it
//                its own arena so its capacity and use are reported on their own)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "vtpu/common/error.h"

namespace vtpu {

enum class MemorySpace { kHbm, kVmem, kSmem, kAccumulator };

/// "hbm", "vmem", "smem", "accumulator": the keys of VirtualCore::memory_stats_by_space().
constexpr std::string_view memory_space_name(MemorySpace space) {
  switch (space) {
    case MemorySpace::kHbm:
      return "hbm";
    case MemorySpace::kVmem:
      return "vmem";
    case MemorySpace::kSmem:
      return "smem";
    case MemorySpace::kAccumulator:
      return "accumulator";
  }
  return "?";
}

/// Thrown when a kernel's on-core memory (VMEM, SMEM or accumulator) does not fit, as Mosaic
/// reports an exceeded scoped-VMEM limit. Sizes in bytes.
class ScratchExhaustedError : public ResourceExhaustedError {
 public:
  ScratchExhaustedError(MemorySpace space, uint64_t requested_bytes, uint64_t available_bytes,
                        const std::string& message)
      : ResourceExhaustedError(message),
        space_(space),
        requested_bytes_(requested_bytes),
        available_bytes_(available_bytes) {}
  MemorySpace space() const noexcept { return space_; }
  uint64_t requested_bytes() const noexcept { return requested_bytes_; }
  uint64_t available_bytes() const noexcept { return available_bytes_; }

 private:
  MemorySpace space_;
  uint64_t requested_bytes_;
  uint64_t available_bytes_;
};

}  // namespace vtpu
