#include "vtpu/collectives/block_exchange.h"

#include <cstring>

namespace vtpu {

bool bytes_overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

void transpose_blocks(const std::byte* src, std::byte* dst, uint64_t parts, uint64_t outer,
                      uint64_t inner_bytes, bool to_block_major) {
  for (uint64_t q = 0; q < parts; ++q) {
    for (uint64_t o = 0; o < outer; ++o) {
      const uint64_t block_major = (q * outer + o) * inner_bytes;
      const uint64_t interleaved = (o * parts + q) * inner_bytes;
      if (inner_bytes == 0) continue;
      if (to_block_major) {
        std::memcpy(dst + block_major, src + interleaved, inner_bytes);
      } else {
        std::memcpy(dst + interleaved, src + block_major, inner_bytes);
      }
    }
  }
}

void exchange_blocks(const AlgorithmContext& ac, const std::byte* out_blocks, std::byte* in_blocks,
                     uint64_t block_bytes) {
  const uint64_t me = static_cast<uint64_t>(ac.rank);
  if (block_bytes)
    std::memcpy(in_blocks + me * block_bytes, out_blocks + me * block_bytes, block_bytes);
  for (int k = 1; k < ac.nranks; ++k) {
    const int to = ac.mod(ac.rank + k), from = ac.mod(ac.rank - k);
    ac.sendrecv(to, out_blocks + static_cast<uint64_t>(to) * block_bytes, block_bytes, from,
                in_blocks + static_cast<uint64_t>(from) * block_bytes, block_bytes);
  }
}

}  // namespace vtpu
