// Reduce-scatter: every rank contributes N blocks of S/N bytes, and rank r ends with block r
// reduced over the group, folded in rank order (x0 op x1) op ... op x(N-1) as the deterministic
// all-reduce algorithms do, so it agrees bit for bit with all_reduce's block r. When the scatter
// axis does not lead, the input interleaves the blocks in `outer` runs (see block_exchange.h).
//
// pairwise (slot links). Blocks are made contiguous (transposed when outer > 1), then:
//
//   steps k=1..N-1   send raw block r+k to rank r+k   while receiving rank r-k's raw block r
//   fold             the N raw copies of block r, in rank order, into recv
//
// Raw blocks travel instead of partial sums because a partial forwarded round a ring would fold
// out of rank order. Each rank sends and receives (N-1)/N of S (the pairwise exchange of MPICH,
// Thakur, Rabenseifner & Gropp, IJHPCA 2005) and keeps N S/N bytes of scratch.
//
// direct (in process; the first shot of the two-shot direct all-reduce, after PyTorch's
// SymmetricMemory). Ranks exchange buffer addresses, rank r reads block r of every peer's input
// in place and folds them in rank order into its recv, and a final barrier keeps every input
// alive until no peer reads it. NCCL's in-place form (recv == send + rank * S/N, scatter on a
// leading axis) is safe: each element is read before it is written, and peers read only their
// own blocks. Any other overlap is folded into a staging buffer and copied after the barrier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vtpu/collectives/algorithm_context.h"
#include "vtpu/collectives/types.h"

namespace vtpu {

/// Pairwise reduce-scatter of `send` (N blocks) into `recv` (one block) of `dtype` under `op`
/// (see the model above). Every rank must call with the same sizes and `outer`. Throws as
/// AlgorithmContext::sendrecv.
void pairwise_reduce_scatter(const AlgorithmContext& ac, DataType dtype, ReduceOp op,
                             std::span<const std::byte> send, std::span<std::byte> recv,
                             uint64_t outer);

/// Direct reduce-scatter (see the model above). Needs ac.direct_access_supported(); throws as
/// AlgorithmContext::exchange_direct_buffers.
void direct_reduce_scatter(const AlgorithmContext& ac, DataType dtype, ReduceOp op,
                           std::span<const std::byte> send, std::span<std::byte> recv,
                           uint64_t outer);

}  // namespace vtpu
