// Memory statistics with the keys of JAX's Device.memory_stats() (which come from XLA's
// tsl::AllocatorStats through PJRT_Device_MemoryStats), plus a few extras vtpu reports.
//
// A live buffer has three sizes: its logical bytes (the data; for an array, product(dims) times
// the element size), its padded bytes (what the caller asked the arena for: an array's bytes
// under its tiled layout, a plain buffer's size) and its chunk bytes (the padded bytes rounded up
// by the allocator policy). logical <= padded <= chunk, and the stats sum each over live buffers.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>

namespace vtpu {

/// 1 - largest_free_block / total_free (0 when nothing is free): the share of free bytes that the
/// largest single request cannot use.
double fragmentation_ratio(uint64_t largest_free_block_bytes, uint64_t total_free_bytes);

/// A snapshot of one arena. All sizes are bytes. Plain data, thread-compatible.
struct MemoryStats {
  uint64_t bytes_in_use = 0;              // chunk bytes of live buffers (incl. rounding waste)
  uint64_t peak_bytes_in_use = 0;         // high-water mark of bytes_in_use
  uint64_t bytes_limit = 0;               // arena capacity
  uint64_t largest_alloc_size = 0;        // largest chunk ever handed out
  uint64_t largest_free_block_bytes = 0;  // largest chunk an allocation could get right now
  uint64_t num_allocs = 0;                // allocations since creation (cumulative)
  // Memory set aside outside live buffers (XLA's TPU runtime reserves HBM for programs this way).
  // vtpu reserves none, and has no way to: all three are always 0.
  uint64_t bytes_reserved = 0;          // bytes reserved now
  uint64_t peak_bytes_reserved = 0;     // high-water mark of bytes_reserved
  uint64_t bytes_reservable_limit = 0;  // the most that could be reserved
  // Bytes the allocator holds, live or free (BFC's regions). An arena takes its whole capacity
  // from the device at creation and never grows or shrinks, so both equal bytes_limit.
  uint64_t pool_bytes = 0;       // bytes held now
  uint64_t peak_pool_bytes = 0;  // high-water mark of pool_bytes
  // vtpu extras (not in JAX):
  uint64_t num_frees = 0;               // frees since creation (cumulative)
  uint64_t num_live_buffers = 0;        // buffers allocated and not yet freed
  uint64_t padded_bytes_in_use = 0;     // live buffers' padded bytes: the sizes callers asked
                                        // for, arrays' tile padding included
  uint64_t total_free_bytes = 0;        // sum of all free chunks
  uint64_t num_ooms = 0;                // allocations that failed with out-of-memory
  uint64_t num_fragmentation_ooms = 0;  // ... of which total free >= the rounded request
  uint64_t logical_bytes_in_use = 0;    // live buffers' logical bytes (arrays: before tile
                                        // padding; equals padded_bytes_in_use without arrays)
  uint64_t num_defragmentations = 0;    // compactions run (explicit and automatic)
  uint64_t defrag_buffers_moved = 0;    // buffers relocated by all compactions
  uint64_t defrag_bytes_moved = 0;      // bytes copied by all compactions
  uint64_t defrag_time_ns = 0;          // wall time spent compacting, nanoseconds
  // Buffers freed while pinned (an in-flight DMA still reads them): their chunks stay in use, and
  // in bytes_in_use, until the last unpin releases them (PyTorch's record_stream deferral; its
  // "active" minus "allocated"). Not counted in num_live_buffers.
  uint64_t pending_free_buffers = 0;
  uint64_t pending_free_bytes = 0;  // chunk bytes of those buffers

  /// 1 - largest_free_block / total_free; 0 when nothing is free.
  double fragmentation() const;
};

/// JSON object with the keys above (and "fragmentation").
void to_json(nlohmann::json& j, const MemoryStats& s);

}  // namespace vtpu
