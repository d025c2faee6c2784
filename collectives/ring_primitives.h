// The primitives every algorithm is written in, after NCCL's prims (send, recvReduceSend,
// directRecvReduceCopySend, directRecvCopySend, directRecv). Each moves one piece of at most
// slot_bytes through one slot: it waits for the slot, checks the sender's fingerprint against
// ours, and hands the slot back. A Primitives object joins any receive link with any send link
// (a ring's prev/next, a chain's up/down links, a torus axis): algorithms other than the ring use
// the same steps.
//
// Slots: a step that receives and sends holds its received slot while it waits for a send slot,
// so links need kMinSlots = 2 slots (double buffering) or a ring of such steps deadlocks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>

#include "vtpu/collectives/link.h"
#include "vtpu/collectives/reduce_kernels.h"
#include "vtpu/collectives/types.h"
#include "vtpu/common/error.h"

namespace vtpu {

/// Slots a link needs for the primitives that hold a received slot while sending.
inline constexpr int kMinSlots = 2;

/// Called when a received fingerprint differs from ours (`from`: the link the message came on);
/// throws unless the difference is one its owner allows (a Communicator with desync_check off
/// allows all but the fields that decide the messages' sizes). An empty handler allows all.
using MismatchHandler = std::function<void(const Link& from, const Fingerprint& theirs)>;

/// One rank's view of one step pattern: the link it receives from and the link it sends to
/// (either may be null when the pattern only sends or only receives). Only the owning core may
/// call. Every wait gives up after `timeout` (DeadlineExceededError) or on abort (AbortedError).
template <typename T>
class Primitives {
 public:
  Primitives(Link* recv_from, Link* send_to, const Fingerprint& fingerprint,
             std::chrono::milliseconds timeout, MismatchHandler on_mismatch)
      : from_(recv_from),
        to_(send_to),
        fp_(fingerprint),
        timeout_(timeout),
        on_mismatch_(std::move(on_mismatch)) {}

  /// Elements that fit one slot of the send link (or the receive link when there is none).
  uint64_t slot_elements() const {
    return (to_ ? to_->slot_bytes() : from_->slot_bytes()) / sizeof(T);
  }

  /// send: push n local elements.
  void send(const T* src, uint64_t n) {
    std::byte* slot = to_->acquire_send_slot(deadline());
    if (n) std::memcpy(slot, src, n * sizeof(T));
    to_->commit_send(fp_, n * sizeof(T));
  }
  /// recv_reduce_send: receive a partial result, combine it (received op local), push it on.
  void recv_reduce_send(const T* local, uint64_t n) {
    const T* in = recv_checked(n);
    T* out = reinterpret_cast<T*>(to_->acquire_send_slot(deadline()));
    reduce_into(out, in, local, n, fp_.reduce_op);
    to_->commit_send(fp_, n * sizeof(T));
    from_->release_recv();
  }
  /// recv_reduce_copy_send: receive the last partial, combine with local data into the final
  /// result at `dst`, and push the result on. `dst` may equal `local` (in place).
  void recv_reduce_copy_send(const T* local, T* dst, uint64_t n) {
    const T* in = recv_checked(n);
    T* out = reinterpret_cast<T*>(to_->acquire_send_slot(deadline()));
    reduce_into(out, in, local, n, fp_.reduce_op);
    if (n) std::memcpy(dst, out, n * sizeof(T));
    to_->commit_send(fp_, n * sizeof(T));
    from_->release_recv();
  }
  /// recv_reduce_copy: receive the last partial and combine it with local data into `dst`.
  void recv_reduce_copy(const T* local, T* dst, uint64_t n) {
    const T* in = recv_checked(n);
    reduce_into(dst, in, local, n, fp_.reduce_op);
    from_->release_recv();
  }
  /// recv_copy_send: receive a final result, keep a copy at `dst`, push it on.
  void recv_copy_send(T* dst, uint64_t n) {
    const T* in = recv_checked(n);
    std::byte* out = to_->acquire_send_slot(deadline());
    if (n) {
      std::memcpy(dst, in, n * sizeof(T));
      std::memcpy(out, in, n * sizeof(T));
    }
    to_->commit_send(fp_, n * sizeof(T));
    from_->release_recv();
  }
  /// recv_apply_send, the step of algorithms whose local work is more than one combine (the
  /// hierarchical all-reduce folds several local inputs and writes several outputs): calls
  /// fn(received, slot) with the n received elements (null without a receive link) and the send
  /// slot to fill with n elements (null without a send link), then pushes the slot and hands
  /// the received one back.
  template <typename Fn>
  void recv_apply_send(uint64_t n, Fn&& fn) {
    const T* in = from_ ? recv_checked(n) : nullptr;
    T* out = to_ ? reinterpret_cast<T*>(to_->acquire_send_slot(deadline())) : nullptr;
    fn(in, out);
    if (to_) to_->commit_send(fp_, n * sizeof(T));
    if (from_) from_->release_recv();
  }
  /// recv: receive a final result into `dst`.
  void recv(T* dst, uint64_t n) {
    const T* in = recv_checked(n);
    if (n) std::memcpy(dst, in, n * sizeof(T));
    from_->release_recv();
  }

 private:
  Deadline deadline() const { return std::chrono::steady_clock::now() + timeout_; }
  const T* recv_checked(uint64_t n) {
    ReceivedSlot s = from_->acquire_recv_slot(deadline());
    if (on_mismatch_ && !(s.fingerprint == fp_)) on_mismatch_(*from_, s.fingerprint);
    if (s.payload_bytes != n * sizeof(T)) {
      throw InternalError("step expected " + std::to_string(n * sizeof(T)) +
                          " payload bytes from core " + std::to_string(from_->src_core()) +
                          ", got " + std::to_string(s.payload_bytes) + " (" + fp_.to_string() +
                          ")");
    }
    return reinterpret_cast<const T*>(s.data);
  }

  Link* from_;
  Link* to_;
  const Fingerprint fp_;
  const std::chrono::milliseconds timeout_;
  MismatchHandler on_mismatch_;
};

/// The ring's name for the same primitives (receive from the previous rank, send to the next).
template <typename T>
class RingPrimitives : public Primitives<T> {
 public:
  RingPrimitives(Link& recv_from_prev, Link& send_to_next, const Fingerprint& fingerprint,
                 std::chrono::milliseconds timeout, MismatchHandler on_mismatch)
      : Primitives<T>(&recv_from_prev, &send_to_next, fingerprint, timeout,
                      std::move(on_mismatch)) {}
};

}  // namespace vtpu
