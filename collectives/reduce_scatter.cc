#include "vtpu/collectives/reduce_scatter.h"

#include <cstring>
#include <vector>

#include "vtpu/collectives/block_exchange.h"
#include "vtpu/collectives/reduce_kernels.h"

namespace vtpu {

void pairwise_reduce_scatter(const AlgorithmContext& ac, DataType dtype, ReduceOp op,
                             std::span<const std::byte> send, std::span<std::byte> recv,
                             uint64_t outer) {
  const uint64_t block_bytes = recv.size();
  const uint64_t block = block_bytes / data_type_bytes(dtype);
  // Blocks in rank order, contiguous: the input itself when the scatter dimension leads.
  std::vector<std::byte> packed;
  const std::byte* blocks = send.data();
  if (outer > 1) {
    packed.resize(send.size());
    transpose_blocks(send.data(), packed.data(), static_cast<uint64_t>(ac.nranks), outer,
                     block_bytes / outer, /*to_block_major=*/true);
    blocks = packed.data();
  }
  std::vector<std::byte> raw(block_bytes * static_cast<uint64_t>(ac.nranks));
  exchange_blocks(ac, blocks, raw.data(), block_bytes);
  visit_data_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<const T*> by_rank(static_cast<size_t>(ac.nranks));
    for (int q = 0; q < ac.nranks; ++q) {
      by_rank[static_cast<size_t>(q)] =
          reinterpret_cast<const T*>(raw.data() + static_cast<uint64_t>(q) * block_bytes);
    }
    fold_in_rank_order(reinterpret_cast<T*>(recv.data()), by_rank.data(), ac.nranks, block, op);
  });
}

void direct_reduce_scatter(const AlgorithmContext& ac, DataType dtype, ReduceOp op,
                           std::span<const std::byte> send, std::span<std::byte> recv,
                           uint64_t outer) {
  const uint64_t block_bytes = recv.size();
  const uint64_t block = block_bytes / data_type_bytes(dtype);
  const bool in_place =
      outer == 1 && recv.data() == send.data() + static_cast<uint64_t>(ac.rank) * block_bytes;
  const bool staged =
      !in_place && bytes_overlap(send.data(), send.size(), recv.data(), recv.size());
  std::vector<std::byte> stage(staged ? recv.size() : 0);
  std::byte* out = staged ? stage.data() : recv.data();
  {
    DirectAccessScope scope(ac);
    const std::vector<DirectBuffers> peers =
        ac.exchange_direct_buffers(send.data(), send.size(), recv.data(), recv.size());
    visit_data_type(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const uint64_t seg = outer ? block / outer : 0;  // elements of one piece of a block
      std::vector<const T*> in(static_cast<size_t>(ac.nranks));
      for (uint64_t o = 0; o < outer; ++o) {
        for (int q = 0; q < ac.nranks; ++q) {
          in[static_cast<size_t>(q)] =
              reinterpret_cast<const T*>(peers[static_cast<size_t>(q)].send) +
              (o * static_cast<uint64_t>(ac.nranks) + static_cast<uint64_t>(ac.rank)) * seg;
        }
        fold_in_rank_order(reinterpret_cast<T*>(out) + o * seg, in.data(), ac.nranks, seg, op);
      }
    });
  }
  ac.barrier();  // no peer reads our send after this
  if (staged && !recv.empty()) std::memcpy(recv.data(), stage.data(), recv.size());
}

}  // namespace vtpu
