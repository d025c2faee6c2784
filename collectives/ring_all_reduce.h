// Classic ring all-reduce (reduce-scatter, then all-gather) over circular-buffer links: the
// Algorithm::kRingReduceScatter opt-in, NOT the deterministic default (see
// collectives/all_reduce_algorithms.h for those), after NCCL's src/device/all_reduce.h
// (runRing) and Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
// workstations" (JPDC 2009).
//
// The buffer is processed in loops of n * piece elements, where a piece fills one slot. In each
// loop the rank r chunk (piece-sized, or an even share of the tail) is fully reduced at rank r
// after a reduce-scatter phase, then handed round in an all-gather phase:
//
//   step 0        send                    chunk r-1      push local data to the next rank
//   steps 1..n-2  recv_reduce_send        chunk r-1-j    add local data to the partial, push on
//   step n-1      recv_reduce_copy_send   chunk r        final sum: keep it and push it on
//   steps n..2n-3 recv_copy_send          chunk r-j      keep a final chunk and push it on
//   step 2n-2     recv                    chunk r+1      keep the last final chunk
//
// Each link carries 2(n-1)/n of the buffer, the bandwidth optimum. Every chunk is reduced by
// exactly one chain of ranks and then copied, so every rank ends with bit-identical results, and
// the order of additions is fixed for a given n (chunk c is summed r = c+1, c+2, ..., c), so runs
// repeat bit for bit. But that order depends on the chunk, so the result differs in the last bits
// from the rank-order fold the deterministic algorithms compute (the example
// v = [1e8, 1, -1e8, 1] on 4 cores gives 0 or 2 here, 1 there). In place (send == recv) is allowed,
// as in NCCL: each chunk of `send` is read before that chunk of `recv` is written.
#pragma once

#include <cstdint>

#include "vtpu/collectives/ring_primitives.h"

namespace vtpu {

/// Runs on one rank. `count` elements at `send` (read) and `recv` (written); may alias exactly.
/// Every rank of the ring must call with the same count. Only the owning core may call.
template <typename T>
void ring_all_reduce(RingPrimitives<T>& prims, int rank, int nranks, const T* send, T* recv,
                     uint64_t count) {
  const uint64_t n = static_cast<uint64_t>(nranks);
  const uint64_t piece = prims.slot_elements();
  const uint64_t loop_elements = n * piece;
  auto mod = [n](int64_t x) {
    return static_cast<uint64_t>(((x % static_cast<int64_t>(n)) + static_cast<int64_t>(n)) %
                                 static_cast<int64_t>(n));
  };
  const int64_t r = rank;
  for (uint64_t base = 0; base < count; base += loop_elements) {
    // Split this loop's elements into n chunks; the tail loop shares its rest evenly (ceil).
    const uint64_t remaining = count - base;
    const uint64_t chunk = remaining >= loop_elements ? piece : (remaining + n - 1) / n;
    auto span_of = [&](uint64_t c, uint64_t* offset) {
      *offset = base + c * chunk;
      if (*offset >= count) {
        *offset = count;
        return uint64_t{0};
      }
      return std::min(chunk, count - *offset);
    };
    uint64_t off = 0, len = 0;
    // Reduce-scatter.
    len = span_of(mod(r - 1), &off);
    prims.send(send + off, len);
    for (int64_t j = 1; j < nranks - 1; ++j) {
      len = span_of(mod(r - 1 - j), &off);
      prims.recv_reduce_send(send + off, len);
    }
    len = span_of(mod(r), &off);
    prims.recv_reduce_copy_send(send + off, recv + off, len);
    // All-gather.
    for (int64_t j = 1; j < nranks - 1; ++j) {
      len = span_of(mod(r - j), &off);
      prims.recv_copy_send(recv + off, len);
    }
    len = span_of(mod(r + 1), &off);
    prims.recv(recv + off, len);
  }
}

}  // namespace vtpu
