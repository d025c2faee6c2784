// Broadcast: the root's buffer reaches every rank. A pipelined chain along the ring starting at the
// root (NCCL's ring broadcast, src/device/broadcast.h), the buffer cut into slot-sized pieces:
//
//   position 0 (root)       send(t)             to root+1
//   positions 1..N-2        recv_copy_send(t)   keep piece t and pass it on
//   position N-1            recv(t)             then one empty message back to the root
//
// Each link carries S once and N pieces are in flight, so the time is about S plus N-1 pieces of
// latency. The last rank's acknowledgement lets the root, which otherwise receives nothing, check
// a fingerprint too (a root mismatch fails on every rank), and return only once the data has
// arrived everywhere; it costs one message of latency.
#pragma once

#include <cstddef>
#include <span>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// Chain broadcast from `root` (see the model above): the root's `send` lands in every rank's
/// `recv` (the root's too; on the root they may be the same buffer). `send` is read on the root
/// only. Every rank must call with the same size and root. Throws as Primitives.
void chain_broadcast(const AlgorithmContext& ac, std::span<const std::byte> send,
                     std::span<std::byte> recv, int root);

}  // namespace vtpu
