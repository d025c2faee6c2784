#include "vtpu/memory/memory_stats.h"

#include <nlohmann/json.hpp>

namespace vtpu {

double fragmentation_ratio(uint64_t largest_free_block_bytes, uint64_t total_free_bytes) {
  if (total_free_bytes == 0) return 0.0;
  return 1.0 -
         static_cast<double>(largest_free_block_bytes) / static_cast<double>(total_free_bytes);
}

double MemoryStats::fragmentation() const {
  return fragmentation_ratio(largest_free_block_bytes, total_free_bytes);
}

void to_json(nlohmann::json& j, const MemoryStats& s) {
  j = nlohmann::json{{"bytes_in_use", s.bytes_in_use},
                     {"peak_bytes_in_use", s.peak_bytes_in_use},
                     {"bytes_limit", s.bytes_limit},
                     {"largest_alloc_size", s.largest_alloc_size},
                     {"largest_free_block_bytes", s.largest_free_block_bytes},
                     {"num_allocs", s.num_allocs},
                     {"bytes_reserved", s.bytes_reserved},
                     {"peak_bytes_reserved", s.peak_bytes_reserved},
                     {"bytes_reservable_limit", s.bytes_reservable_limit},
                     {"pool_bytes", s.pool_bytes},
                     {"peak_pool_bytes", s.peak_pool_bytes},
                     {"num_frees", s.num_frees},
                     {"num_live_buffers", s.num_live_buffers},
                     {"padded_bytes_in_use", s.padded_bytes_in_use},
                     {"total_free_bytes", s.total_free_bytes},
                     {"num_ooms", s.num_ooms},
                     {"num_fragmentation_ooms", s.num_fragmentation_ooms},
                     {"logical_bytes_in_use", s.logical_bytes_in_use},
                     {"num_defragmentations", s.num_defragmentations},
                     {"defrag_buffers_moved", s.defrag_buffers_moved},
                     {"defrag_bytes_moved", s.defrag_bytes_moved},
                     {"defrag_time_ns", s.defrag_time_ns},
                     {"pending_free_buffers", s.pending_free_buffers},
                     {"pending_free_bytes", s.pending_free_bytes},
                     {"fragmentation", s.fragmentation()}};
}

}  // namespace vtpu
