// Pipelined kernels after Pallas's pallas_call: a grid, a BlockSpec per operand (block shape plus
// an index map from grid indices to block indices), N VMEM buffers per operand, and a body that
// runs once per grid point on the blocks in VMEM while the DMA engine brings in the next ones.
//
// Schedule (the same for the executor and the simulated time; after Pallas TPU's pipeline emitter,
// docs.jax.dev/en/latest/pallas/tpu/pipelining.html). Grid points run in row-major order (the last
// grid axis fastest). For each input, consecutive grid points that map to the same block index
// share one fetch (no re-copy), so fetch f of an input lands in buffer slot f % N:
//
//   step s (input i uses fetch f, output j is in visit v):
//     issue fetches f+1 .. f+N-1 of input i that are not issued yet        (prefetch)
//     at the first step of visit v: wait for the writeback of visit v-N    (its slot is reused)
//     wait for fetch f                                                      (never read early)
//     body(s)
//     at the last step of visit v: start the writeback of visit v           (async)
//   end: wait for every writeback; every semaphore must be back at 0.
//
// N = 1 gives no overlap (fetch, wait, compute); N = 2 is double buffering (fetch f+1 runs during
// body(f)); N >= 3 a circular buffer that absorbs uneven copy times. An output block stays in VMEM
// while consecutive grid points map to it (a reduction axis), so accumulators work as in Pallas.
//
// Block shapes: rank-1, rank-2 or rank-3 operands (rank 3: a leading batch dim blocked by 1);
// each of the last two block dims must be a multiple of (8, 128) respectively or equal the array
// dim (rank 1: a multiple of 128 or the whole dim), as Mosaic checks. A block dim larger than the
// array dim is legal only as such a multiple (one block, padded), as in Pallas. VMEM is charged
// per buffer at its tile-padded size (vmem_tile_padded_bytes). Edge blocks (array dim not a
// multiple of the block dim): the block keeps its full shape in VMEM; the part outside the array is
// zero-filled on input (Pallas leaves it unspecified) and dropped on output (as Pallas masks
// out-of-bounds writes). The body sees each block's valid extent (BlockRef::valid_shape) and should
// compute on it only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "vtpu/common/element_type.h"
#include "vtpu/runtime/dma_engine.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/memory_space.h"

namespace vtpu {

class DeviceBuffer;
class VirtualCore;

/// Grid indices -> block indices (one per array dim). Called on the core thread; must be pure.
using IndexMap = std::function<std::vector<int64_t>(std::span<const int64_t> grid_indices)>;

/// How an operand is split into blocks (Pallas's pl.BlockSpec). Plain data.
struct BlockSpec {
  /// Elements per dim (same rank as the array); empty: the whole array is one block.
  std::vector<int64_t> block_shape;
  /// Empty: block index 0 in every dim for every grid point.
  IndexMap index_map;
  /// kVmem: pipelined through VMEM. kHbm: left in HBM and not pipelined (Pallas's
  /// memory_space=pltpu.ANY); the body sees the whole array and may start its own copies.
  MemorySpace memory_space = MemorySpace::kVmem;
};

/// A rank-1, 2 or 3 row-major array in HBM and its BlockSpec. Rank 3 is (batch, rows, cols) with
/// blocks (1, br, bc): the leading dim is a batch grid dimension (Pallas's None/1 block dim) and
/// the body sees the squeezed (br, bc) block.
struct PallasOperand {
  std::string name;                      // for messages ("a", "x", ...)
  const DeviceBuffer* buffer = nullptr;  // in the calling core's HBM; not owned
  uint64_t offset_bytes = 0;             // where the array starts in the buffer
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;  // elements per dim
  BlockSpec spec;
};

/// Scratch memory a kernel asks for (Pallas's scratch_shapes, e.g. pltpu.VMEM((bm, bn), f32)).
struct ScratchSpec {
  std::string name;
  MemorySpace memory_space = MemorySpace::kVmem;  // kVmem, kSmem or kAccumulator
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;  // rank 1 or 2 (VMEM scratch is charged tile-padded)
};

/// A block (or scratch buffer, or HBM array) as the body sees it: row-major with a row stride.
/// Valid during the body call only.
struct BlockRef {
  std::byte* data = nullptr;
  ElementType dtype = ElementType::kF32;
  /// The block shape (elements): rank 1 or 2 in VMEM (a rank-3 operand's (1, br, bc) block is
  /// squeezed to (br, bc)); an HBM operand's whole array shape.
  std::vector<int64_t> shape;
  std::vector<int64_t> valid_shape;  // the part inside the array (smaller for edge blocks)
  int64_t row_stride = 0;            // elements between rows (== shape.back() in VMEM)
  MemorySpace memory_space = MemorySpace::kVmem;
  /// Rows: the product of every dim but the last (a rank-3 HBM array is batch x rows rows).
  int64_t rows() const { return leading(shape); }
  int64_t cols() const { return shape.back(); }
  int64_t valid_rows() const { return leading(valid_shape); }
  int64_t valid_cols() const { return valid_shape.back(); }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data);
  }
  /// The valid part as a DMA region (rows x valid_cols elements).
  DmaRegion region() const;

 private:
  static int64_t leading(const std::vector<int64_t>& dims) {
    int64_t r = 1;
    for (size_t d = 0; d + 1 < dims.size(); ++d) r *= dims[d];
    return r;
  }
};

/// What the body gets on each grid point. Only the owning core's thread may use it.
class KernelContext {
 public:
  /// Grid index along `axis` (pl.program_id) and the grid's extent (pl.num_programs). Throw
  /// InvalidArgumentError for an axis outside the grid.
  int64_t program_id(int axis) const;
  int64_t num_programs(int axis) const;
  /// Input i / output j: its VMEM block for this grid point (or the whole HBM array for a kHbm
  /// operand). Throws InvalidArgumentError for an index out of range.
  const BlockRef& input(int i) const;
  const BlockRef& output(int j) const;
  const BlockRef& scratch(int k) const;
  /// DMA semaphore k of PallasCallOptions::num_dma_semaphores.
  DmaSemaphore& semaphore(int k) const;
  /// Starts a copy on this core's DMA engine (pltpu.make_async_copy(...).start()). Regions must
  /// stay valid until waited; the kernel must wait for it before it ends. `sem` must be one of
  /// the kernel's semaphores (semaphore(k)), else InvalidArgumentError.
  DmaCopy async_copy(const DmaRegion& src, const DmaRegion& dst, DmaSemaphore& sem) const;
  /// Starts a copy of rows [row0, row0 + dst.rows) of a rank-2 f32 array `src` in ANOTHER core's
  /// HBM (or this core's) into `dst` on this core, pinning the source until it completes: the
  /// remote copy of Pallas TPU collectives (pltpu.make_async_remote_copy), pull direction. The
  /// pin only stops defragmentation from moving the source: its owner must not free it before the
  /// copy is waited for. `sem` must be one of the kernel's semaphores.
  DmaCopy async_remote_copy(const DeviceBuffer& src, int64_t src_cols, int64_t row0,
                            const BlockRef& dst, DmaSemaphore& sem) const;
  int core_id() const;

 private:
  friend class PallasPipeline;
  void check_own_semaphore(const DmaSemaphore& sem) const;
  VirtualCore* core_ = nullptr;
  std::vector<int64_t> grid_;
  std::vector<int64_t> grid_index_;
  std::vector<BlockRef> inputs_, outputs_, scratch_;
  std::vector<DmaSemaphore>* semaphores_ = nullptr;
};

using KernelBody = std::function<void(KernelContext&)>;

struct PallasCallOptions {
  std::string name = "kernel";  // for messages and stats
  std::vector<int64_t> grid;    // extent per grid axis (>= 1 each); empty: one grid point
  int num_buffers = 2;          // VMEM buffers per pipelined operand, 1..8 (1: none, 2: double)
  std::vector<ScratchSpec> scratch;
  int num_dma_semaphores = 0;  // user DMA semaphores (pltpu.SemaphoreType.DMA), 0..64
  /// FLOPs of one grid point, for the simulated time (Pallas's CostEstimate); empty: 0.
  std::function<double(std::span<const int64_t> grid_indices)> step_flops;
  std::string flops_dtype = "f32";  // which peak of the hardware profile the compute runs at
};

/// Simulated time of one run on a hardware profile: DMA at hbm_bytes_per_second on one FIFO queue,
/// each grid point's compute at the peak FLOP/s, following the schedule above. Seconds.
struct SimulatedTime {
  int num_buffers = 0;
  double total_seconds = 0.0;
  double compute_seconds = 0.0;      // sum of the grid points' compute
  double dma_seconds = 0.0;          // sum of all copies' durations
  double exposed_dma_seconds = 0.0;  // total - compute: time the core waited for copies
  bool dma_bound() const { return dma_seconds > compute_seconds; }
};
void to_json(nlohmann::json& j, const SimulatedTime& t);

/// What one pallas_call did. Bytes and seconds.
struct PallasCallStats {
  std::string name;
  int64_t grid_steps = 0;
  int num_buffers = 0;
  uint64_t vmem_bytes = 0;          // VMEM charged: blocks and scratch tile-padded (see below)
  uint64_t vmem_logical_bytes = 0;  // the same without padding (block elements x element bytes)
  uint64_t bytes_in = 0;            // HBM -> VMEM
  uint64_t bytes_out = 0;           // VMEM -> HBM
  int64_t copies_in = 0;
  int64_t copies_out = 0;
  double total_flops = 0.0;       // sum of step_flops
  double wall_seconds = 0.0;      // measured, whole call
  double body_seconds = 0.0;      // measured, inside the body
  double dma_wait_seconds = 0.0;  // measured, core blocked on copies
};
void to_json(nlohmann::json& j, const PallasCallStats& s);

/// Bytes one VMEM buffer of `block_shape` (elements) takes on a TPU: the last two dims padded to
/// whole tiles of (8, 128) for 32-bit types, (16, 128) for 16-bit and (32, 128) for 8-bit types
/// (Mosaic's VMEM layouts); leading dims as is; a rank-1 block to whole tiles of 1024 32-bit
/// elements (8 x 128). E.g. f32 (5, 7) -> (8, 128) = 4096 bytes; bf16 (5, 7) -> (16, 128) = 4096.
/// pallas_call charges every pipelined buffer and VMEM scratch this size (before the arena's
/// 256-byte rounding). Throws InvalidArgumentError past 2^62 bytes.
uint64_t vmem_tile_padded_bytes(ElementType dtype, std::span<const int64_t> block_shape);

/// Runs a pipelined kernel on `core` (call it from that core's thread, e.g. inside run_spmd).
/// Validates everything before the first copy: InvalidArgumentError for an illegal block shape
/// (naming the operand, its shape and the block shape), a rank other than 1, 2 or 3 (or a rank-3
/// block whose leading dim is not 1), a buffer too small for its shape, a bad grid or num_buffers,
/// or an index map giving a block outside the array; ScratchExhaustedError (ResourceExhausted) when
/// the pipeline's buffers plus scratch exceed the core's VMEM (or SMEM/accumulator), giving the
/// requested and available bytes. After the last grid point: FailedPreconditionError when a copy
/// the body started is still in flight or a semaphore is not back at 0 (the engine is drained
/// first, so no copy outlives the kernel's VMEM). DeadlineExceededError when a copy does not
/// complete within the DMA wait timeout.
PallasCallStats pallas_call(VirtualCore& core, const std::vector<PallasOperand>& inputs,
                            const std::vector<PallasOperand>& outputs,
                            const PallasCallOptions& options, const KernelBody& body);

/// The simulated time of the same call for `num_buffers` without running it (validates the
/// specs the same way, but needs no core, buffers or VMEM).
SimulatedTime simulate_pallas_call(const std::vector<PallasOperand>& inputs,
                                   const std::vector<PallasOperand>& outputs,
                                   const PallasCallOptions& options, int num_buffers,
                                   const HardwareProfile& profile);

}  // namespace vtpu
