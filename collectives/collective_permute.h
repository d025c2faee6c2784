// Collective permute (JAX's lax.ppermute): each listed (source, destination) pair moves the
// source's buffer to the destination; a rank that is no destination gets zeros. One step per
// rank over AlgorithmContext::sendrecv, as MPI_Sendrecv serves a shift:
//
//   check   (desync check on) one empty message round the ring: r -> r+1
//   move    send to dst_of[r] while receiving from src_of[r]   (either may be none)
//   zero    a rank that receives nothing fills its output with zeros
//
// Which links carry data depends on the pairs, so ranks that disagree on them may never meet
// (one rank's 0->1->2->0 against the others' 0->2->1->0 completed on rank 1 and timed out on 0
// and 2). The check round makes any two disagreeing ranks' fingerprints (pairs hash included)
// differ on some ring link, so the receiver fails at once; links are FIFO, so the check message
// is read before any data on the same link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// Moves `send` to rank `to` and receives rank `from`'s buffer into `recv` (-1: none; `to` ==
/// rank keeps the input), see the model above. `send` and `recv` are the same buffer or
/// disjoint, of the same size on every rank. `ring_check`: run the check round (the
/// communicator's desync_check). Throws as AlgorithmContext::sendrecv.
void permute(const AlgorithmContext& ac, std::span<const std::byte> send, std::span<std::byte> recv,
             int to, int from, bool ring_check);

}  // namespace vtpu
