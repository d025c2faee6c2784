// All-gather: rank r contributes one block of S bytes and every rank ends with all N blocks in
// rank order. The output interleaves the blocks when the gather axis does not lead: with `outer`
// runs of S/outer bytes per block, segment o of block q lands at (o * N + q) * S/outer.
//
// ring (slot links, after NCCL's ring all-gather, src/device/all_gather.h, and the ring of Thakur,
// Rabenseifner & Gropp, IJHPCA 2005). Blocks are gathered rank-major, in `recv` itself when
// outer == 1 and in scratch otherwise (then transposed into the output layout):
//
//   step 0        copy own block r into place
//   step k=0..N-2 send block r-k to rank r+1   while receiving block r-k-1 from rank r-1
//
// Each link carries (N-1)/N of the output, the bandwidth optimum; N-1 steps of latency.
//
// direct (in process, Link::supports_direct_access). Ranks exchange buffer addresses, then every
// rank copies each peer's block straight from the peer's send buffer into its own recv, in the
// output layout; a final barrier keeps every send buffer alive until no peer reads it. N S bytes
// read and written per rank, no slot copies. After NCCL's P2P direct read.
//
// In place: send == recv + rank * S with outer == 1 (NCCL's form) leaves the own block where it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// Ring all-gather of `send` (one block) into `recv` (N blocks, see the model above). Every rank
/// must call with the same block size and `outer`. Throws as AlgorithmContext::sendrecv.
void ring_all_gather(const AlgorithmContext& ac, std::span<const std::byte> send,
                     std::span<std::byte> recv, uint64_t outer);

/// Direct all-gather (see the model above). Needs ac.direct_access_supported(); throws as
/// AlgorithmContext::exchange_direct_buffers.
void direct_all_gather(const AlgorithmContext& ac, std::span<const std::byte> send,
                       std::span<std::byte> recv, uint64_t outer);

}  // namespace vtpu
