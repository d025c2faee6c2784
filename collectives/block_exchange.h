// Pairwise block exchange, the step under all-to-all and the slot form of reduce-scatter, after
// MPICH's pairwise-exchange all-to-all (Thakur, Rabenseifner & Gropp, "Optimization of collective
// communication operations in MPICH", IJHPCA 2005):
//
//   step k = 1..N-1   send block (r+k) to rank r+k   while receiving block r-k from rank r-k
//
// Each step is one sendrecv, so a step never waits on a rank that waits on it, and each link
// carries one block. A collective whose blocks are not contiguous in the caller's layout (a split
// or scatter axis that does not lead) first transposes [outer][parts][inner] into block-major
// [parts][outer][inner] and back afterwards.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// True when the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool bytes_overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes);

/// Copies `outer` runs of `inner_bytes` from block-major [parts][outer][inner] into
/// [outer][parts][inner] (or back when `to_block_major`). `src` and `dst` must not overlap.
void transpose_blocks(const std::byte* src, std::byte* dst, uint64_t parts, uint64_t outer,
                      uint64_t inner_bytes, bool to_block_major);

/// Pairwise exchange (N-1 steps, step k: send to rank+k, receive from rank-k): block q of
/// `out_blocks` goes to rank q, and rank q's block for us lands in block q of `in_blocks`; our
/// own block is copied. Every rank of the group must call with the same `block_bytes`. Throws as
/// AlgorithmContext::sendrecv.
void exchange_blocks(const AlgorithmContext& ac, const std::byte* out_blocks, std::byte* in_blocks,
                     uint64_t block_bytes);

}  // namespace vtpu
