// Deterministic all-reduce algorithms. Every one computes, for every element, the left fold over
// the ranks of the group in rank order,
//
//     result = ((x0 op x1) op x2) op ... op x(N-1),
//
// so the result is bit-identical on every core, from run to run, and across algorithms (the
// issue's example: 4 cores, f32, v = [1e8, 1, -1e8, 1] gives exactly 1.0 everywhere; the classic
// ring, which starts chunk c at rank c+1, gives 0). Each is written as named steps over the
// primitives of collectives/ring_primitives.h, as NCCL's ring code reads. Sources: NCCL
// src/device/all_reduce.h; Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
// of workstations" (JPDC 2009); Thakur, Rabenseifner & Gropp, "Optimization of collective
// communication operations in MPICH" (IJHPCA 2005); Bruck et al., "Efficient algorithms for
// all-to-all communications in multiport message-passing systems" (IEEE TPDS 1997).
//
// S = buffer bytes, N = ranks, a "piece" = one slot of elements.
//
// ring (unidirectional, pipelined chain). Piece t is reduced along 0 -> 1 -> ... -> N-1, and the
// final piece continues round the ring N-1 -> 0 -> 1 -> ... -> N-2. Rank r at step t:
//
//   rank 0        send(t)                  recv_copy_send(t-L)   (recv(t-L) when N == 2)
//   rank 1..N-3   recv_reduce_send(t)      recv_copy_send(t-L)
//   rank N-2      recv_reduce_send(t)      recv(t-L)
//   rank N-1      recv_reduce_copy_send(t)
//
// with lag L = N-1, so that N pieces are in flight and every link is busy. Links 0->1 .. N-3->N-2
// carry partials and finals interleaved in that fixed order (2S bytes each); N-2->N-1 and
// N-1->0 carry S. Deadlock-free with any slot count >= 2 (checked exhaustively by a schedule
// simulator for N <= 16, pieces <= 64, slots 2..5: the ring's wait graph is acyclic for L <=
// N+S-1).
//
// bidirectional_ring. Reduce along the chain 0 -> ... -> N-1 on the clockwise links and bring the
// result back on the counter-clockwise links N-1 -> N-2 -> ... -> 0:
//
//   rank 0        send(t) up               recv(t-L0) down
//   rank 1..N-2   recv_reduce_send(t) up   recv_copy_send(t-Lr) down
//   rank N-1      recv_reduce_copy_send(t) (turns the piece round, down)
//
// Rank r lags its down stream by Lr = 2(N-1-r) pieces, the round trip to N-1 and back, so both
// streams flow without stalls. Each direction carries half of the traffic: every used link
// carries exactly S bytes (in deterministic mode "half goes each way" means the partials go one
// way and the results the other; splitting each chunk into halves that both reduce in rank order
// would need two chains each starting at rank 0, which is the same traffic).
//
// recursive_doubling (small messages). All-gather of the raw inputs by Bruck's dissemination in
// ceil(log2 N) steps (any N: at step k rank r sends what it holds to r - 2^k and receives from
// r + 2^k), then every rank folds the N inputs locally in rank order. Latency log N messages;
// each rank receives (N-1)S bytes and keeps N*S of host scratch, so it is for small S.
//
// torus_2d. The group is an R x C mesh of row-major ranks (r = i*C + j). Reduce-scatter without
// reducing: along the row, rank (i,j) sends block b of its input to (i,b) (C-1 raw blocks of S/C);
// along the column, it sends sub-block a of the C raw contributions it now holds to (a,j). Rank
// (i,j) then holds all N raw contributions to sub-block (j,i), folds them in rank order, and
// all-gathers along the column and then along the row. Bytes sent per rank: (C-1)/C S + (R-1)/R S
// to reduce, then (R-1)/(RC) S + (C-1)/C S to gather. A non-deterministic torus reduces along the
// row first and sends only (R-1)/(RC) S in the second phase: the deterministic one sends C times
// more there ((R-1)/R S instead of (R-1)/(RC) S), since partial sums would fold out of rank order.
//
// direct (two-shot, over direct access: Link::supports_direct_access). Ranks first exchange the
// addresses of their send and recv buffers (bruck_all_gather of 16-byte records; on return every
// rank has entered). Rank r owns chunk r (S/N, rounded to whole cache lines); for each L1-sized
// tile of it, it reads the tile of all N inputs in place, folds them in rank order, and writes
// the result into all N outputs. A final barrier keeps every rank's buffers alive until no peer
// accesses them. Memory traffic: N S reads and N S writes in all, exactly the 2 N S of the
// memory-traffic bound (the slot algorithms copy through a slot on top), two synchronisations of
// ceil(log2 N) message rounds, and all N ranks work at once. In place is safe: chunk r of every
// buffer is touched by rank r alone, and each tile is read from every input before it is written.
// After PyTorch's SymmetricMemory two_shot_all_reduce and NCCL's P2P direct read/write; the
// rank-order fold makes it give the ring's bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "vtpu/collectives/algorithm_context.h"

namespace vtpu {

/// Unidirectional pipelined chain (see the model above). `send` and `recv` may alias exactly.
template <typename T>
void chain_ring_all_reduce(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count) {
  const int n = ac.nranks, r = ac.rank;
  // Receive from the previous rank, send to the next (rank 0 receives finals from N-1).
  Primitives<T> prims = ac.prims<T>(ac.mod(r - 1), ac.mod(r + 1));
  const Pieces range{prims.slot_elements(), count};
  const uint64_t num_pieces = range.size();
  const uint64_t lag = static_cast<uint64_t>(n - 1);
  for (uint64_t t = 0; t < num_pieces + lag; ++t) {
    if (t < num_pieces) {
      const BlockRange p = range[t];
      if (r == 0) {
        prims.send(send + p.offset, p.length);  // step: send
      } else if (r < n - 1) {
        prims.recv_reduce_send(send + p.offset, p.length);  // reduce on
      } else {
        prims.recv_reduce_copy_send(send + p.offset, recv + p.offset, p.length);  // final
      }
    }
    if (t >= lag) {
      const BlockRange p = range[t - lag];
      if (r == n - 2) {
        prims.recv(recv + p.offset, p.length);  // last to receive the final piece
      } else if (r < n - 2) {
        prims.recv_copy_send(recv + p.offset, p.length);  // forward the final piece
      }
    }
  }
}

/// Bidirectional chain (see the model above). `send` and `recv` may alias exactly.
template <typename T>
void bidirectional_ring_all_reduce(const AlgorithmContext& ac, const T* send, T* recv,
                                   uint64_t count) {
  const int n = ac.nranks, r = ac.rank;
  // up: partials toward N-1 (N-1 turns round and sends the result down); down: results toward 0.
  Primitives<T> up = ac.prims<T>(r == 0 ? -1 : r - 1, r == n - 1 ? n - 2 : r + 1);
  Primitives<T> down = ac.prims<T>(r == n - 1 ? -1 : r + 1, r == 0 || r == n - 1 ? -1 : r - 1);
  const Pieces range{up.slot_elements(), count};
  const uint64_t num_pieces = range.size();
  const uint64_t lag = 2 * static_cast<uint64_t>(n - 1 - r);
  for (uint64_t t = 0; t < num_pieces + lag; ++t) {
    if (t < num_pieces) {
      const BlockRange p = range[t];
      if (r == 0) {
        up.send(send + p.offset, p.length);
      } else if (r < n - 1) {
        up.recv_reduce_send(send + p.offset, p.length);
      } else {
        up.recv_reduce_copy_send(send + p.offset, recv + p.offset, p.length);
      }
    }
    if (r < n - 1 && t >= lag) {
      const BlockRange p = range[t - lag];
      if (r == 0) {
        down.recv(recv + p.offset, p.length);
      } else {
        down.recv_copy_send(recv + p.offset, p.length);
      }
    }
  }
}

/// Bruck all-gather of the inputs, then a local rank-order fold (see the model above).
template <typename T>
void recursive_doubling_all_reduce(const AlgorithmContext& ac, const T* send, T* recv,
                                   uint64_t count) {
  const int n = ac.nranks, r = ac.rank;
  // held[i] is the input of rank (r + i) mod n.
  std::vector<T> held(static_cast<size_t>(count) * static_cast<size_t>(n));
  if (count) std::memcpy(held.data(), send, count * sizeof(T));
  ac.bruck_all_gather(reinterpret_cast<std::byte*>(held.data()), count * sizeof(T));
  std::vector<const T*> by_rank(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    by_rank[static_cast<size_t>(q)] = held.data() + static_cast<uint64_t>(ac.mod(q - r)) * count;
  }
  fold_in_rank_order(recv, by_rank.data(), n, count, ac.fp.reduce_op);
}

/// Rows R of the most square factorisation R x C of n with R <= C (R = 1 for a prime n).
inline int torus_rows_for(int n) {
  int rows = 1;
  for (int a = 1; a * a <= n; ++a)
    if (n % a == 0) rows = a;
  return rows;
}

/// Per-axis exchanges of raw pieces on a rows x (n / rows) mesh (see the model above). `rows`
/// must divide n. `send` and `recv` may alias exactly.
template <typename T>
void torus_2d_all_reduce(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count,
                         int rows) {
  const int n = ac.nranks, r = ac.rank;
  const int cols = n / rows;
  const int i = r / cols, j = r % cols;
  auto at = [&](int row, int col) { return row * cols + col; };
  // Phase 1, along the row: raw[b] = contribution of rank (i, b) to column block j.
  const BlockRange bj = block_range(count, static_cast<uint64_t>(cols), static_cast<uint64_t>(j));
  std::vector<T> raw(static_cast<size_t>(bj.length) * static_cast<size_t>(cols));
  if (bj.length)
    std::memcpy(raw.data() + static_cast<uint64_t>(j) * bj.length, send + bj.offset,
                bj.length * sizeof(T));
  for (int k = 1; k < cols; ++k) {
    const int to = (j + k) % cols, from = (j - k + cols) % cols;
    const BlockRange bt =
        block_range(count, static_cast<uint64_t>(cols), static_cast<uint64_t>(to));
    ac.sendrecv(at(i, to), send + bt.offset, bt.length * sizeof(T), at(i, from),
                raw.data() + static_cast<uint64_t>(from) * bj.length, bj.length * sizeof(T));
  }
  // Phase 2, along the column: all[a][b] = contribution of rank (a, b) to sub-block (j, i).
  const BlockRange si =
      block_range(bj.length, static_cast<uint64_t>(rows), static_cast<uint64_t>(i));
  std::vector<T> all(static_cast<size_t>(si.length) * static_cast<size_t>(n));
  std::vector<T> packed;
  auto pack = [&](int a) {  // the C raw contributions to sub-block (j, a), contiguous
    const BlockRange sa =
        block_range(bj.length, static_cast<uint64_t>(rows), static_cast<uint64_t>(a));
    packed.resize(static_cast<size_t>(sa.length) * static_cast<size_t>(cols));
    for (int b = 0; b < cols; ++b) {
      if (sa.length)
        std::memcpy(packed.data() + static_cast<uint64_t>(b) * sa.length,
                    raw.data() + static_cast<uint64_t>(b) * bj.length + sa.offset,
                    sa.length * sizeof(T));
    }
    return sa.length * static_cast<uint64_t>(cols);
  };
  pack(i);
  if (!packed.empty())
    std::memcpy(all.data() + static_cast<uint64_t>(i) * cols * si.length, packed.data(),
                packed.size() * sizeof(T));
  for (int k = 1; k < rows; ++k) {
    const int to = (i + k) % rows, from = (i - k + rows) % rows;
    const uint64_t len = pack(to);
    ac.sendrecv(at(to, j), packed.data(), len * sizeof(T), at(from, j),
                all.data() + static_cast<uint64_t>(from) * cols * si.length,
                si.length * static_cast<uint64_t>(cols) * sizeof(T));
  }
  // Fold the N raw contributions in rank order (rank = a * C + b indexes `all`).
  std::vector<const T*> by_rank(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q)
    by_rank[static_cast<size_t>(q)] = all.data() + static_cast<uint64_t>(q) * si.length;
  T* mine = recv + bj.offset + si.offset;
  fold_in_rank_order(mine, by_rank.data(), n, si.length, ac.fp.reduce_op);
  // Phase 3, along the column: gather the sub-blocks of column block j.
  for (int k = 1; k < rows; ++k) {
    const int to = (i + k) % rows, from = (i - k + rows) % rows;
    const BlockRange sf =
        block_range(bj.length, static_cast<uint64_t>(rows), static_cast<uint64_t>(from));
    ac.sendrecv(at(to, j), mine, si.length * sizeof(T), at(from, j), recv + bj.offset + sf.offset,
                sf.length * sizeof(T));
  }
  // Phase 4, along the row: gather the column blocks.
  for (int k = 1; k < cols; ++k) {
    const int to = (j + k) % cols, from = (j - k + cols) % cols;
    const BlockRange bf =
        block_range(count, static_cast<uint64_t>(cols), static_cast<uint64_t>(from));
    ac.sendrecv(at(i, to), recv + bj.offset, bj.length * sizeof(T), at(i, from), recv + bf.offset,
                bf.length * sizeof(T));
  }
}

/// Output bytes of the whole group (N S) from which direct_all_reduce writes with streaming
/// stores: about half the 32 MiB L3 of the development machine, where the outputs no longer stay
/// in cache and a read-for-ownership of every written line would cost a third more DRAM traffic.
inline constexpr uint64_t kStreamingStoreBytes = uint64_t{16} << 20;

/// Elements per rank-owned chunk of the direct algorithms: ceil(count / n), rounded up to whole
/// 64-byte cache lines so that two ranks never write one line.
template <typename T>
uint64_t direct_chunk_elements(uint64_t count, int n) {
  constexpr uint64_t kLine = sizeof(T) >= 64 ? 1 : 64 / sizeof(T);
  const uint64_t chunk = (count + static_cast<uint64_t>(n) - 1) / static_cast<uint64_t>(n);
  return (chunk + kLine - 1) / kLine * kLine;
}

/// Two-shot all-reduce by direct access (see the model above). Needs
/// ac.direct_access_supported(). `send` and `recv` may alias exactly.
template <typename T>
void direct_all_reduce(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count) {
  const int n = ac.nranks;
  {
    DirectAccessScope scope(ac);
    const std::vector<DirectBuffers> peers =
        ac.exchange_direct_buffers(send, count * sizeof(T), recv, count * sizeof(T));
    const BlockRange mine = Pieces{direct_chunk_elements<T>(count, n), count}[ac.rank];
    std::vector<const T*> in(static_cast<size_t>(n));
    std::vector<T*> out(static_cast<size_t>(n));
    for (size_t q = 0; q < peers.size(); ++q) {
      in[q] = reinterpret_cast<const T*>(peers[q].send) + mine.offset;
      out[q] = reinterpret_cast<T*>(peers[q].recv) + mine.offset;
    }
    const bool streaming = count * sizeof(T) * static_cast<uint64_t>(n) >= kStreamingStoreBytes;
    fold_in_rank_order_to_all(out.data(), n, in.data(), n, mine.length, ac.fp.reduce_op, streaming);
    if (streaming) stream_fence();
  }
  ac.barrier();  // no peer touches our buffers after this
}

}  // namespace vtpu
