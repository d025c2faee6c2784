// Collective permute (JAX's lax.ppermute): each listed (source, destination) pair moves the
// source's buffer to the destination; a rank that is no destination gets zeros. One step per
// rank over AlgorithmContext::sendrecv, as MPI_Sendrecv serves a shift:
//
//   agree   every rank's pairs and shape, gathered (AlgorithmContext::agree_on_parameters)
//   move    send to dst_of[r] while receiving from src_of[r]   (either may be none)
//   zero    a rank that receives nothing fills its output with zeros
//
// Which links carry data depends on the pairs, so ranks that disagree on them may never meet
// (one rank's 0->1->2->0 against the others' 0->2->1->0 completed on rank 1 and timed out on 0
// and 2), and a rank that only sends finishes without hearing from its destination (a size
// mismatch failed on the destination alone). The agreement, whatever desync_check says, shows
// every rank every other's pairs and shape first, so a disagreement fails on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// Moves `send` to rank `to` and receives rank `from`'s buffer into `recv` (-1: none; `to` ==
/// rank keeps the input), see the model above. `send` and `recv` are the same buffer or
/// disjoint, of the same size on every rank. Throws as AlgorithmContext::sendrecv and
/// agree_on_parameters.
void permute(const AlgorithmContext& ac, std::span<const std::byte> send, std::span<std::byte> recv,
             int to, int from);

}  // namespace vtpu
