// Reduce: the group's inputs, folded in rank order (x0 op x1) op ... op x(N-1) as the
// deterministic all-reduce algorithms do, land in the root's buffer. Two algorithms, written over
// the primitives of collectives/ring_primitives.h (NCCL's ring reduce, src/device/reduce.h, is the
// unidirectional form of the first).
//
// chain (slot links, bidirectional). Partials go up 0 -> 1 -> ... -> N-1 on the clockwise links,
// and when the root is not N-1 the result comes back down N-1 -> N-2 -> ... -> root:
//
//   rank 0             send(t) up
//   rank 1..N-2        recv_reduce_send(t) up        recv_copy_send(t-Lr) down (root < r only)
//   rank N-1           recv_reduce_copy(t) (root)    or recv_reduce_send(t): turn round, down
//   root (< N-1)       its up step as above          recv(t-Lr) down
//
// Ranks between the root and N-1 forward the result without keeping it. Rank r lags its down
// stream by Lr = 2(N-1-r) pieces, the round trip to N-1 and back, so both streams flow.
//
// direct (in process, Link::supports_direct_access). Ranks exchange buffer addresses; rank r folds
// its cache-line-aligned chunk r of every input, in place, into the root's recv, and a final
// barrier keeps every buffer alive until no peer touches it. After PyTorch's SymmetricMemory and
// NCCL's P2P direct read; the rank-order fold gives the chain's bits.
#pragma once

#include <cstdint>
#include <vector>

#include "vtpu/collectives/algorithm_context.h"
#include "vtpu/collectives/all_reduce_algorithms.h"

namespace vtpu {

/// Bidirectional chain reduce to `root` (see the model above). `recv` is written on the root
/// only; there `send` and `recv` may alias exactly. Every rank must call with the same count and
/// root. Throws as Primitives.
template <typename T>
void chain_reduce(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count, int root) {
  ac.agree_on_parameters();  // a rank below the root finishes without hearing from it
  const int nr = ac.nranks, r = ac.rank, last = nr - 1;
  Primitives<T> up =
      ac.prims<T>(r == 0 ? -1 : r - 1, r < last ? r + 1 : (root == last ? -1 : last - 1));
  const bool in_down = r >= root && r < last;
  Primitives<T> down = ac.prims<T>(in_down ? r + 1 : -1, in_down && r > root ? r - 1 : -1);
  const Pieces pieces{up.slot_elements(), count};
  const uint64_t num_pieces = pieces.size();
  const uint64_t lag = 2 * static_cast<uint64_t>(last - r);
  std::vector<T> through(in_down && r > root ? pieces.piece : 0);
  for (uint64_t t = 0; t < num_pieces + (in_down ? lag : 0); ++t) {
    if (t < num_pieces) {
      const uint64_t off = pieces[t].offset, len = pieces[t].length;
      if (r == 0) {
        up.send(send + off, len);
      } else if (r < last) {
        up.recv_reduce_send(send + off, len);
      } else if (root == last) {
        up.recv_reduce_copy(send + off, recv + off, len);
      } else {
        up.recv_reduce_send(send + off, len);  // turn round: the result goes down
      }
    }
    if (in_down && t >= lag) {
      const uint64_t off = pieces[t - lag].offset, len = pieces[t - lag].length;
      if (r == root) {
        down.recv(recv + off, len);
      } else {
        down.recv_copy_send(through.data(), len);
      }
    }
  }
}

/// Direct reduce to `root` (see the model above): rank r folds chunk r of every input into root's
/// `recv` (recv is read only on the root). Needs ac.direct_access_supported(). On the root, `send`
/// and `recv` may alias exactly.
template <typename T>
void direct_reduce(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count, int root) {
  const int n = ac.nranks;
  {
    DirectAccessScope scope(ac);
    // recv is only the root's (other ranks may pass none): the layout's root and shape vouch
    // for it.
    const std::vector<DirectBuffers> peers = ac.exchange_direct_buffers(
        send, count * sizeof(T), recv, ac.rank == root ? count * sizeof(T) : 0,
        /*compare_recv=*/false);
    const BlockRange mine = Pieces{direct_chunk_elements<T>(count, n), count}[ac.rank];
    std::vector<const T*> in(static_cast<size_t>(n));
    for (size_t q = 0; q < peers.size(); ++q) {
      in[q] = reinterpret_cast<const T*>(peers[q].send) + mine.offset;
    }
    T* out = reinterpret_cast<T*>(peers[static_cast<size_t>(root)].recv) + mine.offset;
    fold_in_rank_order(out, in.data(), n, mine.length, ac.fp.reduce_op);
  }
  ac.barrier();
}

}  // namespace vtpu
