// Broadcast: the root's buffer reaches every rank. A pipelined chain along the ring starting at the
// root (NCCL's ring broadcast, src/device/broadcast.h), the buffer cut into slot-sized pieces:
//
//   every position          agree               every rank's root and shape, gathered
//   position 0 (root)       send(t)             to root+1
//   positions 1..N-2        recv_copy_send(t)   keep piece t and pass it on
//   position N-1            recv(t)
//
// Each link carries S once and N pieces are in flight, so the time is about S plus N-1 pieces of
// latency. The agreement (AlgorithmContext::agree_on_parameters, ceil(log2 N) small rounds)
// comes first because over the chain alone a rank compares only its predecessor's fingerprint:
// with cores disagreeing on the root, some finished while others failed. Gathered, every rank
// sees every root and shape, so a disagreement fails on every rank.
#pragma once

#include <cstddef>
#include <span>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// Chain broadcast from `root` (see the model above): the root's `send` lands in every rank's
/// `recv` (the root's too; on the root they may be the same buffer). `send` is read on the root
/// only. Every rank must call with the same size and root (InvalidArgumentError on every rank
/// otherwise, through AlgorithmContext::on_disagreement). Throws as Primitives.
void chain_broadcast(const AlgorithmContext& ac, std::span<const std::byte> send,
                     std::span<std::byte> recv, int root);

}  // namespace vtpu
