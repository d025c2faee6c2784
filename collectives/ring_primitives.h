// The primitives every ring algorithm is written in, after NCCL's prims (send, recvReduceSend,
// directRecvReduceCopySend, directRecvCopySend, directRecv). Each moves one piece of at most
// slot_bytes through one slot: it waits for the slot, checks the sender's fingerprint against
// ours, and hands the slot back.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <span>
#include <string>

#include "collectives/link.h"
#include "collectives/types.h"
#include "common/error.h"

namespace vtpu {

/// Elementwise combine for ReduceOp, in a fixed operand order (accumulated, then local), so that
/// results are reproducible.
template <typename T>
inline void reduce_into(T* out, const T* acc, const T* local, uint64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      for (uint64_t i = 0; i < n; ++i) out[i] = acc[i] + local[i];
      break;
    case ReduceOp::kProd:
      for (uint64_t i = 0; i < n; ++i) out[i] = acc[i] * local[i];
      break;
    case ReduceOp::kMax:
      for (uint64_t i = 0; i < n; ++i) out[i] = std::max(acc[i], local[i]);
      break;
    case ReduceOp::kMin:
      for (uint64_t i = 0; i < n; ++i) out[i] = std::min(acc[i], local[i]);
      break;
  }
}

/// One rank's view of a ring: the link from its previous rank and the link to its next rank.
/// Only the owning core may call. Every wait gives up after `timeout`. `on_mismatch` is called
/// (and must throw) when a received fingerprint differs from ours.
template <typename T>
class RingPrimitives {
 public:
  RingPrimitives(Link& recv_from_prev, Link& send_to_next, const Fingerprint& fingerprint,
                 std::chrono::milliseconds timeout,
                 std::function<void(const Fingerprint& theirs)> on_mismatch)
      : prev_(recv_from_prev),
        next_(send_to_next),
        fp_(fingerprint),
        timeout_(timeout),
        on_mismatch_(std::move(on_mismatch)) {}

  /// Elements that fit one slot.
  uint64_t slot_elements() const { return next_.slot_bytes() / sizeof(T); }

  /// send: push n local elements to the next rank.
  void send(const T* src, uint64_t n) {
    std::byte* slot = next_.acquire_send_slot(deadline());
    if (n) std::memcpy(slot, src, n * sizeof(T));
    next_.commit_send(fp_, n * sizeof(T));
  }
  /// recv_reduce_send: receive a partial result, combine it with local data, push it on.
  void recv_reduce_send(const T* local, uint64_t n) {
    const T* in = recv_checked(n);
    T* out = reinterpret_cast<T*>(next_.acquire_send_slot(deadline()));
    reduce_into(out, in, local, n, fp_.reduce_op);
    next_.commit_send(fp_, n * sizeof(T));
    prev_.release_recv();
  }
  /// recv_reduce_copy_send: receive the last partial, combine with local data into the final
  /// result at `dst`, and push the result on.
  void recv_reduce_copy_send(const T* local, T* dst, uint64_t n) {
    const T* in = recv_checked(n);
    T* out = reinterpret_cast<T*>(next_.acquire_send_slot(deadline()));
    reduce_into(out, in, local, n, fp_.reduce_op);
    if (n) std::memcpy(dst, out, n * sizeof(T));
    next_.commit_send(fp_, n * sizeof(T));
    prev_.release_recv();
  }
  /// recv_copy_send: receive a final result, keep a copy at `dst`, push it on.
  void recv_copy_send(T* dst, uint64_t n) {
    const T* in = recv_checked(n);
    std::byte* out = next_.acquire_send_slot(deadline());
    if (n) {
      std::memcpy(dst, in, n * sizeof(T));
      std::memcpy(out, in, n * sizeof(T));
    }
    next_.commit_send(fp_, n * sizeof(T));
    prev_.release_recv();
  }
  /// recv: receive a final result into `dst`.
  void recv(T* dst, uint64_t n) {
    const T* in = recv_checked(n);
    if (n) std::memcpy(dst, in, n * sizeof(T));
    prev_.release_recv();
  }

 private:
  Deadline deadline() const { return std::chrono::steady_clock::now() + timeout_; }
  const T* recv_checked(uint64_t n) {
    ReceivedSlot s = prev_.acquire_recv_slot(deadline());
    if (!(s.fingerprint == fp_)) on_mismatch_(s.fingerprint);
    if (s.payload_bytes != n * sizeof(T)) {
      throw InternalError("ring step expected " + std::to_string(n * sizeof(T)) +
                          " payload bytes from core " + std::to_string(prev_.src_core()) +
                          ", got " + std::to_string(s.payload_bytes) + " (" + fp_.to_string() +
                          ")");
    }
    return reinterpret_cast<const T*>(s.data);
  }

  Link& prev_;
  Link& next_;
  const Fingerprint fp_;
  const std::chrono::milliseconds timeout_;
  std::function<void(const Fingerprint&)> on_mismatch_;
};

}  // namespace vtpu
