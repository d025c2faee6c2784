// What an algorithm sees of its communicator on one rank: its rank, the group size, the
// fingerprint every message carries, the timeout, and links to any other rank of the group. The
// links come from the communicator's link table (created on first use through the Transport),
// so an algorithm names peers by rank and never by transport.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "vtpu/collectives/link.h"
#include "vtpu/collectives/ring_primitives.h"
#include "vtpu/collectives/types.h"

namespace vtpu {

/// One rank's buffers in the current collective, for direct access by its peers, with their
/// sizes and a hash of the fingerprint fields that decide them (kind, dtype, shape, algorithm,
/// root), so that a rank checks a peer's buffers before it touches them.
struct DirectBuffers {
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  uint64_t send_bytes = 0;
  uint64_t recv_bytes = 0;
  uint64_t layout = 0;
};

/// Only the owning core (or its communication worker) may use it, for one collective.
struct AlgorithmContext {
  int rank = 0;
  int nranks = 1;
  Fingerprint fp;
  std::chrono::milliseconds timeout{30000};
  std::function<Link&(int src_rank, int dst_rank)> link;  // directed link src -> dst
  MismatchHandler on_mismatch;
  /// Throws the communicator's desync error (InvalidArgumentError naming this core's fingerprint)
  /// completed by `what`, e.g. "core 3 called ..."; empty: InvalidArgumentError(what).
  std::function<void(const std::string& what)> on_disagreement;
  /// The group's count of ranks inside a DirectAccessScope (owned by the communicator, which
  /// waits for it to drop to zero before a failed collective returns). Null: not counted.
  std::atomic<int>* direct_users = nullptr;
  /// The process of each rank (what the hierarchical all-reduce groups by); empty: every rank in
  /// one process. Views the communicator's table, valid for the collective.
  std::span<const int> rank_process;

  /// Primitives receiving from `from_rank` and sending to `to_rank` (-1: none).
  template <typename T>
  Primitives<T> prims(int from_rank, int to_rank) const {
    return Primitives<T>(from_rank < 0 ? nullptr : &link(from_rank, rank),
                         to_rank < 0 ? nullptr : &link(rank, to_rank), fp, timeout, on_mismatch);
  }
  /// The context of ranks [first_rank, first_rank + num_ranks) as a group of their own (its rank
  /// 0 is first_rank): same fingerprint, links and direct-access count, one process. Only while
  /// this context lives.
  AlgorithmContext subgroup(int first_rank, int num_ranks) const;
  int mod(int64_t x) const {
    const int64_t n = nranks;
    return static_cast<int>(((x % n) + n) % n);
  }

  /// Sends `send_bytes` from `src` to `to_rank` while receiving `recv_bytes` from `from_rank` into
  /// `dst` (either rank may be -1: only receive / only send). Both are cut into slot-sized pieces
  /// that alternate, send first; at least one (possibly empty) message goes each way so that the
  /// peer checks our fingerprint. Lock-step send-before-receive cannot deadlock with any slot
  /// count >= 1, whatever the pattern of peers. `dst` may equal `src` when the piece sizes match
  /// (piece i is sent before piece i is overwritten). Throws as Link, plus InvalidArgumentError on
  /// a fingerprint mismatch (through on_mismatch) and InternalError on a payload size mismatch
  /// between matching fingerprints (a bug).
  void sendrecv(int to_rank, const void* src, uint64_t send_bytes, int from_rank, void* dst,
                uint64_t recv_bytes) const;

  /// Bruck's all-gather (dissemination, any N, ceil(log2 N) rounds): `held` has nranks blocks of
  /// `block_bytes`; block 0 holds this rank's data on entry, and on return block i holds rank
  /// (rank + i) mod nranks's. Throws as sendrecv.
  void bruck_all_gather(std::byte* held, uint64_t block_bytes) const;

  /// Dissemination barrier (Hensgen, Finkel & Manber 1988): ceil(log2 N) rounds of empty
  /// messages. On return every rank has called it, and what any rank wrote before its call
  /// happens-before what any rank accesses after its return. Throws as sendrecv.
  void barrier() const;

  /// True when the links the direct algorithms use (those of bruck_all_gather and barrier)
  /// support direct access (Link::supports_direct_access); the same answer on every rank when
  /// one Transport made the links.
  bool direct_access_supported() const;

  /// Publishes this rank's `send` and `recv` buffers to the group (bruck_all_gather of
  /// DirectBuffers records: only addresses and sizes go through the slots) and returns every
  /// rank's, indexed by rank. On return every rank has entered this collective, so none still
  /// accesses buffers of its previous one, and every rank's send size (and, with `compare_recv`,
  /// recv size) and layout equal this rank's: otherwise every rank fails (through on_disagreement,
  /// naming the sizes) before any touches a peer's buffer. Call it inside a DirectAccessScope that
  /// ends once this rank stops touching peers' buffers, and end with barrier() before returning, so
  /// that no peer accesses this rank's buffers after the call. Throws UnimplementedError naming the
  /// link when a link lacks direct access (check direct_access_supported() first), else as
  /// sendrecv.
  std::vector<DirectBuffers> exchange_direct_buffers(const void* send, uint64_t send_bytes,
                                                     void* recv, uint64_t recv_bytes,
                                                     bool compare_recv = true) const;

  /// Gathers every rank's root, shape and permute pairs (those of `fp`) before any data moves, in
  /// messages whose fingerprint leaves them out, so that every rank compares every other's and a
  /// disagreement fails on every rank (through on_disagreement, naming both). For the operations
  /// where a rank may finish without hearing from the rank it sends to (broadcast, reduce by
  /// chain, collective_permute). ceil(log2 N) rounds of N records of 88 bytes. Throws as
  /// sendrecv.
  void agree_on_parameters() const;

  /// Throws through on_disagreement.
  [[noreturn]] void fail_disagreement(const std::string& what) const;
  /// Core id of rank `r` of this group.
  int core_of(int r) const;
};

/// Held by a rank from before it learns its peers' buffer addresses until it stops touching
/// their buffers. A rank whose collective fails waits, after aborting the group, until no rank
/// holds one, so that no peer still reads or writes its buffers once the error reaches its
/// caller (inside a scope a rank only folds or waits on links, which the abort ends). Only
/// the owning core may use it.
class DirectAccessScope {
 public:
  explicit DirectAccessScope(const AlgorithmContext& ac) : users_(ac.direct_users) {
    if (users_) users_->fetch_add(1, std::memory_order_seq_cst);
  }
  ~DirectAccessScope() {
    if (users_) users_->fetch_sub(1, std::memory_order_release);
  }
  DirectAccessScope(const DirectAccessScope&) = delete;
  DirectAccessScope& operator=(const DirectAccessScope&) = delete;

 private:
  std::atomic<int>* users_;
};

/// Offset and length of part `index` when `count` elements are cut into `parts` parts of
/// ceil(count / parts) elements (the last ones shorter or empty). Elements, not bytes. Plain data.
struct BlockRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};
inline BlockRange block_range(uint64_t count, uint64_t parts, uint64_t index) {
  const uint64_t chunk = (count + parts - 1) / parts;
  const uint64_t off = std::min(index * chunk, count);
  return {off, std::min(chunk, count - off)};
}

/// A buffer of `count` elements cut into pieces of `piece` elements (one slot each), for the
/// pipelined algorithms: at least one piece, possibly empty, so that fingerprints always meet.
/// Units are whatever the caller counts (elements of T, or bytes). Plain data.
struct Pieces {
  uint64_t piece = 1;
  uint64_t count = 0;
  uint64_t size() const { return std::max<uint64_t>(1, (count + piece - 1) / piece); }
  BlockRange operator[](uint64_t t) const {
    const uint64_t off = std::min(count, t * piece);
    return {off, std::min(piece, count - off)};
  }
};

}  // namespace vtpu
