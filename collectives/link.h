// A Link is a directed channel from one core to another: a circular buffer of fixed-size slots
// with a ready/consumed handshake. A full link blocks the sender (back-pressure) and an empty one
// blocks the receiver; both block (never spin without bound) and both give up at a deadline.
//
// Algorithms see only this interface, so they run unchanged over any Transport (in-process ring
// buffers today, MPI across hosts later), after Gloo's transport/pair.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "vtpu/collectives/types.h"
#include "vtpu/common/error.h"

namespace vtpu {

/// Link shape. Invariant: slot_bytes is a multiple of 64 so that every element type divides it.
struct LinkOptions {
  uint64_t slot_bytes = uint64_t{1} << 20;  // payload bytes per slot; default 1 MiB
  int num_slots = 4;                        // slots in the circular buffer; default 4
  /// The virtual cores of the process (0: unknown), which decide how a waiter waits
  /// (ring_buffer_link.h, "Waiting"): with more cores than CPUs, or unknown, at most CPUs - 1
  /// threads spin and a waiter yields before it sleeps; with no more cores than CPUs every
  /// thread has a CPU, so every waiter may spin and none yields. A Communicator sets it to its
  /// runtime's num_cores().
  int process_cores = 0;
};

using Deadline = std::chrono::steady_clock::time_point;

/// One message as the receiver sees it: a view into the slot, valid until release_recv().
struct ReceivedSlot {
  const std::byte* data = nullptr;
  uint64_t payload_bytes = 0;
  Fingerprint fingerprint;
};

/// Directed link src -> dst. Thread-safe for one sending thread and one receiving thread at a
/// time; abort() and reset() may be called from any thread (reset only when no one is waiting).
class Link {
 public:
  virtual ~Link() = default;
  virtual int src_core() const = 0;
  virtual int dst_core() const = 0;
  virtual uint64_t slot_bytes() const = 0;
  virtual int num_slots() const = 0;

  /// Direct access (NCCL's P2P direct read/write, PyTorch's SymmetricMemory): true when the
  /// receiver may read and write the sender's memory in place at the sender's addresses, because
  /// both run in one address space. Algorithms that use it send only addresses and completions
  /// through the slots (see AlgorithmContext::exchange_direct_buffers) and fall back to slot
  /// copies on a link that returns false (the default: e.g. a link between processes or hosts).
  virtual bool supports_direct_access() const { return false; }

  /// Sender: waits for a free slot and returns its payload area (slot_bytes() bytes). Throws
  /// DeadlineExceededError at `deadline`, AbortedError if the link is aborted.
  virtual std::byte* acquire_send_slot(Deadline deadline) = 0;
  /// Sender: publishes the slot returned by acquire_send_slot with `payload_bytes` of data.
  virtual void commit_send(const Fingerprint& fingerprint, uint64_t payload_bytes) = 0;

  /// Receiver: waits for the oldest unread message. Throws like acquire_send_slot.
  virtual ReceivedSlot acquire_recv_slot(Deadline deadline) = 0;
  /// Receiver: hands the slot back to the sender.
  virtual void release_recv() = 0;

  /// Buffer transfers (MPI_Allreduce's path between processes: the sender's buffer read once,
  /// by the kernel's single copy, straight into the receiver's): whole messages beside the slots,
  /// matched in the order started, with no fingerprint (the caller checks fingerprints through
  /// the slots first) but a length check on every message. True only where they beat slot
  /// copies; the default is false and the calls below throw UnimplementedError.
  virtual bool supports_buffer_transfer() const { return false; }
  /// Sender: starts sending the `bytes` at `data`, which must stay alive and unchanged until
  /// wait_buffer_send() or cancel_buffer_transfers() returned for it.
  virtual void start_buffer_send(const std::byte* /*data*/, uint64_t /*bytes*/) {
    unsupported_buffer_transfer();
  }
  /// Sender: waits until the oldest unfinished buffer send is done with its data. Throws as
  /// acquire_send_slot.
  virtual void wait_buffer_send(Deadline /*deadline*/) { unsupported_buffer_transfer(); }
  /// Receiver: starts receiving the next buffer message into `data`, which must stay alive
  /// until wait_buffer_recv() or cancel_buffer_transfers() returned for it.
  virtual void start_buffer_recv(std::byte* /*data*/, uint64_t /*bytes*/) {
    unsupported_buffer_transfer();
  }
  /// Receiver: waits for the oldest unfinished buffer receive. Throws as acquire_recv_slot, and
  /// InternalError naming both lengths when the message was not exactly the `bytes` started.
  virtual void wait_buffer_recv(Deadline /*deadline*/) { unsupported_buffer_transfer(); }
  /// Either end, when a collective fails: ends its unfinished buffer transfers, so that none
  /// touches their memory after the collective returns (waiting up to `deadline`). Never throws.
  virtual void cancel_buffer_transfers(Deadline /*deadline*/) noexcept {}

  /// Wakes every waiter, which then throws AbortedError carrying `reason`. Later waits also throw
  /// until reset(), except that acquire_recv_slot still returns a message already delivered
  /// (data first): what a sender committed before the abort is never lost to it, and only a wait
  /// that would have to wait fails.
  virtual void abort(const std::string& reason) = 0;
  /// Empties the buffer and clears the abort. Only when no thread is using the link.
  virtual void reset() = 0;

 private:
  [[noreturn]] void unsupported_buffer_transfer() const {
    throw UnimplementedError("link " + std::to_string(src_core()) + "->" +
                             std::to_string(dst_core()) +
                             " has no buffer transfers (expected supports_buffer_transfer())");
  }
};

}  // namespace vtpu
