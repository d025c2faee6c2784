// Hierarchical all-reduce for a group whose ranks live in several processes: reduce inside each
// process, all-reduce across processes, broadcast inside, with the rank-order fold of
// collectives/all_reduce_algorithms.h, so it gives the bits of every other deterministic
// algorithm. After NCCL's several rings (one per channel) over NVLink-then-network and the
// two-level all-reduces of Horovod and MPICH (Thakur, Rabenseifner & Gropp, IJHPCA 2005).
//
// The group is P processes, each holding one contiguous run of L ranks (process k of the chain
// holds ranks kL .. kL+L-1, in rank order). The buffer is cut into L parts (cache-line aligned, as
// the direct algorithm's chunks), and local rank q owns part q: lane q is the chain of ranks
// q, L+q, 2L+q, ... across the processes, one link per process pair and direction. On lane q:
//
//   process 0        fold part q of its L inputs (read in place)  -> send up
//   process 1..P-2   recv partial, fold its L inputs onto it       -> send up
//   process P-1      recv partial, fold its L inputs: the final    -> write to its L outputs, send
//   down process P-2..1   recv final                                    -> write to its L outputs,
//   send down process 0        recv final                                    -> write to its L
//   outputs
//
// so every element is ((((x0 op x1) op ...) op x(L-1)) op xL) ..., the fold in rank order. The
// chain is the bidirectional ring's (all_reduce_algorithms.h) over P ranks, pipelined by
// slot-sized pieces with process k lagging its down stream 2(P-1-k) pieces, so it cannot
// deadlock with slots >= 2; the L lanes use disjoint links and run at once. Inside a process the
// lane owners read their peers' inputs and write their outputs by direct access (addresses
// exchanged through the in-process links, as the direct algorithm does; a final barrier keeps
// every buffer alive until no peer touches it); links between processes carry only slot copies,
// S/L bytes each way per lane. With L = 1 there is no local exchange; with P = 1 it is a local
// fold written to every output. In place is safe: part q of every buffer is touched by lane q
// alone, and each piece is read from every input before it is written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vtpu/collectives/algorithm_context.h"
#include "vtpu/collectives/all_reduce_algorithms.h"

namespace vtpu {

/// How a group's ranks sit in processes, for the hierarchical all-reduce: num_processes runs of
/// ranks_per_process ranks. Plain data.
struct ProcessRuns {
  int num_processes = 1;
  int ranks_per_process = 1;
  std::string error;  // why the placement does not fit (empty when it does)
  bool fits() const { return error.empty(); }
  /// From each rank's process (empty: all `nranks` in one process). It fits when every
  /// process's ranks are one contiguous run and every run has the same length; otherwise
  /// `error` names the placement and what was expected.
  static ProcessRuns of(std::span<const int> rank_process, int nranks);
};

namespace detail {

/// Folds c[0..k) in order into `slot` (when there is one) and copies the result to each of
/// `num_out` outputs (streaming stores when `streaming`). Any output may alias any input exactly.
template <typename T>
void fold_to_slot_and_outputs(T* slot, T* const* out, int num_out, const T* const* c, int k,
                              uint64_t n, ReduceOp op, bool streaming) {
  if (!slot) {
    fold_in_rank_order_to_all(out, num_out, c, k, n, op, streaming);
    return;
  }
  fold_in_rank_order(slot, c, k, n, op);
  for (int i = 0; i < num_out && n; ++i) {
    if (streaming) {
      stream_copy(out[i], slot, n * sizeof(T));
    } else {
      std::memcpy(out[i], slot, n * sizeof(T));
    }
  }
}

/// Lane q's chain for one lane owner (see the model above): `peers` are the local ranks' buffers
/// and `part` this lane's elements of them.
template <typename T>
void hierarchical_lane(const AlgorithmContext& ac, const ProcessRuns& runs,
                       const std::vector<DirectBuffers>& peers, BlockRange part, bool streaming) {
  const int nl = runs.ranks_per_process, last = runs.num_processes - 1;
  const int p = ac.rank / nl, q = ac.rank % nl;
  auto lane = [&](int process) { return process * nl + q; };
  Primitives<T> up = ac.prims<T>(p > 0 ? lane(p - 1) : -1,
                                 p < last ? lane(p + 1) : (last > 0 ? lane(last - 1) : -1));
  Primitives<T> down =
      ac.prims<T>(p < last ? lane(p + 1) : -1, p > 0 && p < last ? lane(p - 1) : -1);
  const Pieces pieces{last > 0 ? up.slot_elements() : std::max<uint64_t>(1, part.length),
                      part.length};
  // in[0] is the received partial or final (set per step), in[1..L] the local inputs.
  std::vector<const T*> in(static_cast<size_t>(nl) + 1);
  std::vector<T*> out(static_cast<size_t>(nl));
  auto point_at = [&](uint64_t t) {
    const BlockRange piece = pieces[t];
    for (size_t i = 0; i < out.size(); ++i) {
      in[i + 1] = reinterpret_cast<const T*>(peers[i].send) + part.offset + piece.offset;
      out[i] = reinterpret_cast<T*>(peers[i].recv) + part.offset + piece.offset;
    }
    return piece.length;
  };
  const ReduceOp op = ac.fp.reduce_op;
  const uint64_t lag = 2 * static_cast<uint64_t>(last - p);
  for (uint64_t t = 0; t < pieces.size() + (p < last ? lag : 0); ++t) {
    if (t < pieces.size()) {
      const uint64_t n = point_at(t);
      up.recv_apply_send(n, [&](const T* partial, T* slot) {
        in[0] = partial;
        const T* const* c = partial ? in.data() : in.data() + 1;
        fold_to_slot_and_outputs(slot, out.data(), p == last ? nl : 0, c, partial ? nl + 1 : nl, n,
                                 op, streaming);
      });
    }
    if (p < last && t >= lag) {
      const uint64_t n = point_at(t - lag);
      down.recv_apply_send(n, [&](const T* result, T* slot) {
        in[0] = result;
        fold_to_slot_and_outputs(slot, out.data(), nl, in.data(), 1, n, op, streaming);
      });
    }
  }
}

/// Two processes of one rank each: halves exchanged both ways at once, rank r folding half r as
/// x0 op x1 (rank 0's operand first, so the bits are the chain's) straight out of the received
/// slots, then the folded halves exchanged back. Each side moves half the bytes the chain would,
/// both fold at once, and slot-sized pieces pipeline both phases.
template <typename T>
void two_rank_halves(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count) {
  const int peer = 1 - ac.rank;
  const BlockRange mine = block_range(count, 2, static_cast<uint64_t>(ac.rank));
  const BlockRange theirs = block_range(count, 2, static_cast<uint64_t>(peer));
  Primitives<T> out = ac.prims<T>(-1, peer);
  Primitives<T> in = ac.prims<T>(peer, -1);
  const Pieces sent{out.slot_elements(), theirs.length}, got{out.slot_elements(), mine.length};
  const ReduceOp op = ac.fp.reduce_op;
  for (uint64_t t = 0; t < std::max(sent.size(), got.size()); ++t) {
    if (t < sent.size()) out.send(send + theirs.offset + sent[t].offset, sent[t].length);
    if (t >= got.size()) continue;
    const BlockRange g = got[t];
    const T* own = send + mine.offset + g.offset;
    T* dst = recv + mine.offset + g.offset;
    in.recv_apply_send(g.length, [&](const T* received, T*) {
      reduce_into(dst, ac.rank == 0 ? own : received, ac.rank == 0 ? received : own, g.length, op);
    });
  }
  const Pieces back{out.slot_elements(), mine.length}, fill{out.slot_elements(), theirs.length};
  for (uint64_t t = 0; t < std::max(back.size(), fill.size()); ++t) {
    if (t < back.size()) out.send(recv + mine.offset + back[t].offset, back[t].length);
    if (t < fill.size()) in.recv(recv + theirs.offset + fill[t].offset, fill[t].length);
  }
}

/// Below this many bytes per call two_rank_halves' slot copies cost less than the buffer path's
/// handshake; above it two_rank_buffers moves the bytes (when both links have buffer transfers).
inline constexpr uint64_t kBufferTransferMinBytes = uint64_t{128} << 10;
/// Buffer messages of two_rank_buffers: small enough that a received piece is folded while it is
/// still in the cache it was copied through, large enough that MPI's cost per message is small.
inline constexpr uint64_t kBufferPieceBytes = uint64_t{256} << 10;

/// Ends a failing collective's buffer transfers on both links before its buffers go back to
/// the caller (Link::cancel_buffer_transfers); a grace of at most kCancelGrace lets the peer
/// take data it already asked for.
class BufferTransferGuard {
 public:
  BufferTransferGuard(Link& to, Link& from, std::chrono::milliseconds timeout)
      : to_(to), from_(from), grace_(std::min(timeout, kCancelGrace)) {}
  ~BufferTransferGuard() {
    if (done_) return;
    const Deadline deadline = std::chrono::steady_clock::now() + grace_;
    from_.cancel_buffer_transfers(deadline);
    to_.cancel_buffer_transfers(deadline);
  }
  BufferTransferGuard(const BufferTransferGuard&) = delete;
  BufferTransferGuard& operator=(const BufferTransferGuard&) = delete;
  void done() { done_ = true; }

 private:
  static constexpr std::chrono::milliseconds kCancelGrace{100};
  Link& to_;
  Link& from_;
  std::chrono::milliseconds grace_;
  bool done_ = false;
};

/// The slot message each way that opens two_rank_buffers: the fingerprints meet (a desync fails
/// as on the slots), and each side announces the bytes it will send, which must be the bytes the
/// other expects (InternalError naming both otherwise).
inline void buffer_handshake(const AlgorithmContext& ac, int peer, uint64_t send_bytes,
                             uint64_t recv_bytes) {
  constexpr uint64_t kMagic = 0x7674707562756631;  // "vtpubuf1": a handshake, not slot data
  Primitives<uint64_t> handshake = ac.prims<uint64_t>(peer, peer);
  const uint64_t plan[2] = {kMagic, send_bytes};
  uint64_t got[2] = {};
  handshake.send(plan, 2);
  handshake.recv(got, 2);
  if (got[0] != kMagic || got[1] != recv_bytes) {
    throw InternalError("all_reduce buffer handshake from core " +
                        std::to_string(ac.link(peer, ac.rank).src_core()) + " announced " +
                        std::to_string(got[1]) + " bytes (expected " + std::to_string(recv_bytes) +
                        ", " + ac.fp.to_string() + ")");
  }
}

/// two_rank_halves over buffer transfers (Link::start_buffer_send), as MPI_Allreduce moves its
/// halves: each piece goes straight from the caller's buffer into the peer's (out of place: the
/// output; in place: a staging buffer the fold reads), with no slot copies. One slot message
/// each way first carries the fingerprints (and the bytes each side sends, checked against what
/// the other expects), so a desync fails as on the slots before any buffer moves. Then half
/// `theirs` leaves in pieces, and each received piece of half `mine` is folded, rank 0's operand
/// first, and sent back from the output at once.
template <typename T>
void two_rank_buffers(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count) {
  const int peer = 1 - ac.rank;
  const BlockRange mine = block_range(count, 2, static_cast<uint64_t>(ac.rank));
  const BlockRange theirs = block_range(count, 2, static_cast<uint64_t>(peer));
  buffer_handshake(ac, peer, theirs.length * sizeof(T), mine.length * sizeof(T));
  Link& to = ac.link(ac.rank, peer);
  Link& from = ac.link(peer, ac.rank);
  auto deadline = [&] { return std::chrono::steady_clock::now() + ac.timeout; };
  auto bytes = [](const T* p) { return reinterpret_cast<const std::byte*>(p); };
  const bool in_place = send == recv;
  // In place the output's half `mine` still holds this rank's operand while the peer's arrives;
  // the staging is kept per thread (grown to the largest half), so no call pays its page faults.
  static thread_local std::vector<T> staging;
  if (in_place && staging.size() < mine.length) staging.resize(mine.length);
  T* landing = in_place ? staging.data() : recv + mine.offset;
  const uint64_t piece = std::max<uint64_t>(1, kBufferPieceBytes / sizeof(T));
  const Pieces sent{piece, theirs.length}, got{piece, mine.length};
  auto start_results_recv = [&] {
    for (uint64_t t = 0; t < sent.size(); ++t) {
      from.start_buffer_recv(reinterpret_cast<std::byte*>(recv + theirs.offset + sent[t].offset),
                             sent[t].length * sizeof(T));
    }
  };
  BufferTransferGuard guard(to, from, ac.timeout);
  for (uint64_t t = 0; t < got.size(); ++t) {
    from.start_buffer_recv(reinterpret_cast<std::byte*>(landing + got[t].offset),
                           got[t].length * sizeof(T));
  }
  // Out of place the peer's results land in the output's half `theirs`, which nothing reads.
  if (!in_place) start_results_recv();
  for (uint64_t t = 0; t < sent.size(); ++t) {
    to.start_buffer_send(bytes(send + theirs.offset + sent[t].offset), sent[t].length * sizeof(T));
  }
  const ReduceOp op = ac.fp.reduce_op;
  for (uint64_t t = 0; t < got.size(); ++t) {
    from.wait_buffer_recv(deadline());
    const BlockRange g = got[t];
    const T* own = send + mine.offset + g.offset;
    const T* received = landing + g.offset;
    T* dst = recv + mine.offset + g.offset;
    reduce_into(dst, ac.rank == 0 ? own : received, ac.rank == 0 ? received : own, g.length, op);
    to.start_buffer_send(bytes(dst), g.length * sizeof(T));
  }
  for (uint64_t t = 0; t < sent.size(); ++t) to.wait_buffer_send(deadline());
  // In place the results overwrite what was sent: only after every send of it is done.
  if (in_place) start_results_recv();
  for (uint64_t t = 0; t < sent.size(); ++t) from.wait_buffer_recv(deadline());
  for (uint64_t t = 0; t < got.size(); ++t) to.wait_buffer_send(deadline());
  guard.done();
}

}  // namespace detail

/// Hierarchical all-reduce (see the model above) over the placement ac.rank_process, which must
/// fit (ProcessRuns::fits; InvalidArgumentError naming it otherwise). Needs direct access
/// between the ranks of a process when they are more than one. `send` and `recv` may alias
/// exactly. Throws as Primitives and AlgorithmContext::exchange_direct_buffers.
template <typename T>
void hierarchical_all_reduce(const AlgorithmContext& ac, const T* send, T* recv, uint64_t count) {
  const ProcessRuns runs = ProcessRuns::of(ac.rank_process, ac.nranks);
  if (!runs.fits()) throw InvalidArgumentError(runs.error);
  const int nl = runs.ranks_per_process;
  if (runs.num_processes == 2 && nl == 1) {
    const int peer = 1 - ac.rank;
    if (count * sizeof(T) >= detail::kBufferTransferMinBytes &&
        ac.link(ac.rank, peer).supports_buffer_transfer() &&
        ac.link(peer, ac.rank).supports_buffer_transfer()) {
      detail::two_rank_buffers(ac, send, recv, count);
    } else {
      detail::two_rank_halves(ac, send, recv, count);
    }
    return;
  }
  const AlgorithmContext local = ac.subgroup(ac.rank / nl * nl, nl);
  const bool streaming = count * sizeof(T) * static_cast<uint64_t>(nl) >= kStreamingStoreBytes;
  {
    DirectAccessScope scope(local);
    const std::vector<DirectBuffers> peers =
        nl > 1 ? local.exchange_direct_buffers(send, count * sizeof(T), recv, count * sizeof(T))
               : std::vector<DirectBuffers>{{reinterpret_cast<const std::byte*>(send),
                                             reinterpret_cast<std::byte*>(recv)}};
    const BlockRange part = Pieces{direct_chunk_elements<T>(count, nl), count}[local.rank];
    detail::hierarchical_lane<T>(ac, runs, peers, part, streaming);
    if (streaming) stream_fence();
  }
  if (nl > 1) local.barrier();  // no local peer touches our buffers after this
}

}  // namespace vtpu
