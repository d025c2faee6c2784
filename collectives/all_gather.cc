#include "vtpu/collectives/all_gather.h"

#include <cstring>
#include <vector>

#include "vtpu/collectives/block_exchange.h"

namespace vtpu {

void ring_all_gather(const AlgorithmContext& ac, std::span<const std::byte> send,
                     std::span<std::byte> recv, uint64_t outer) {
  const uint64_t block_bytes = send.size();
  // Gather rank-major blocks: straight into recv when the layout allows, else into scratch.
  std::vector<std::byte> scratch;
  std::byte* buf = recv.data();
  if (outer > 1) {
    scratch.resize(recv.size());
    buf = scratch.data();
  }
  std::byte* mine = buf + static_cast<uint64_t>(ac.rank) * block_bytes;
  if (mine != send.data() && block_bytes) std::memcpy(mine, send.data(), block_bytes);
  // At step k rank r forwards block r-k and receives block r-k-1.
  for (int k = 0; k < ac.nranks - 1; ++k) {
    const int out_block = ac.mod(ac.rank - k), in_block = ac.mod(ac.rank - k - 1);
    ac.sendrecv(ac.mod(ac.rank + 1), buf + static_cast<uint64_t>(out_block) * block_bytes,
                block_bytes, ac.mod(ac.rank - 1),
                buf + static_cast<uint64_t>(in_block) * block_bytes, block_bytes);
  }
  if (outer > 1) {
    transpose_blocks(buf, recv.data(), static_cast<uint64_t>(ac.nranks), outer, block_bytes / outer,
                     /*to_block_major=*/false);
  }
}

void direct_all_gather(const AlgorithmContext& ac, std::span<const std::byte> send,
                       std::span<std::byte> recv, uint64_t outer) {
  const uint64_t block_bytes = send.size();
  {
    DirectAccessScope scope(ac);
    const std::vector<DirectBuffers> peers =
        ac.exchange_direct_buffers(send.data(), send.size(), recv.data(), recv.size());
    const uint64_t seg = outer ? block_bytes / outer : 0;  // outer 0: an empty array
    for (int q = 0; q < ac.nranks; ++q) {
      for (uint64_t o = 0; o < outer; ++o) {
        const std::byte* src = peers[static_cast<size_t>(q)].send + o * seg;
        std::byte* dst = recv.data() + (o * static_cast<uint64_t>(ac.nranks) + q) * seg;
        if (dst != src && seg) std::memcpy(dst, src, seg);  // in place: own block stays
      }
    }
  }
  ac.barrier();  // no peer reads our send after this
}

}  // namespace vtpu
