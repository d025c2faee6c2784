#include "vtpu/collectives/all_to_all.h"

#include <vector>

#include "vtpu/collectives/block_exchange.h"

namespace vtpu {

void pairwise_all_to_all(const AlgorithmContext& ac, std::span<const std::byte> send,
                         std::span<std::byte> recv, uint64_t outer_split, uint64_t outer_concat) {
  const uint64_t nr = static_cast<uint64_t>(ac.nranks);
  const uint64_t block_bytes = send.size() / nr;
  std::vector<std::byte> out_blocks(send.size()), in_blocks(send.size());
  transpose_blocks(send.data(), out_blocks.data(), nr, outer_split,
                   outer_split ? block_bytes / outer_split : 0, /*to_block_major=*/true);
  exchange_blocks(ac, out_blocks.data(), in_blocks.data(), block_bytes);
  transpose_blocks(in_blocks.data(), recv.data(), nr, outer_concat,
                   outer_concat ? block_bytes / outer_concat : 0, /*to_block_major=*/false);
}

}  // namespace vtpu
