// All-to-all: rank r cuts its input into N blocks along the split axis, sends block q to rank q,
// and concatenates the N blocks it receives, in rank order, along the concat axis (JAX's
// lax.all_to_all). Written as three steps over block_exchange.h, after MPICH's pairwise exchange
// (Thakur, Rabenseifner & Gropp, IJHPCA 2005):
//
//   pack      transpose the input's `outer_split` runs into N contiguous blocks (block-major)
//   exchange  N-1 pairwise steps: block r+k to rank r+k, rank r-k's block into slot r-k
//   unpack    transpose the N received blocks into `outer_concat` runs of the output layout
//
// Each rank sends and receives (N-1)/N of its input; the two transposes cost one local copy each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// Pairwise all-to-all (see the model above). `send` and `recv` hold the same number of bytes and
/// may overlap (both go through scratch). Every rank must call with the same sizes and axes.
/// Throws as AlgorithmContext::sendrecv.
void pairwise_all_to_all(const AlgorithmContext& ac, std::span<const std::byte> send,
                         std::span<std::byte> recv, uint64_t outer_split, uint64_t outer_concat);

}  // namespace vtpu
