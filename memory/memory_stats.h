// Memory statistics with the keys of JAX's Device.memory_stats() (which come from XLA's
// tsl::AllocatorStats), plus a few extras vtpu reports.
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
  // vtpu extras (not in JAX):
  uint64_t num_frees = 0;               // frees since creation (cumulative)
  uint64_t num_live_buffers = 0;        // buffers allocated and not yet freed
  uint64_t bytes_requested = 0;         // sum of the sizes callers asked for, live buffers
  uint64_t total_free_bytes = 0;        // sum of all free chunks
  uint64_t num_ooms = 0;                // allocations that failed with out-of-memory
  uint64_t num_fragmentation_ooms = 0;  // ... of which total free >= the rounded request
  uint64_t logical_bytes_in_use = 0;    // live buffers' logical bytes (arrays: before tile
                                        // padding; equals bytes_requested without arrays)
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
