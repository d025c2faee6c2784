// A Link whose two ends live in different processes (internal to distributed/; see
// mpi_transport.h for the protocol). Each process holds one end: the sender's when the source core
// is local, the receiver's when the destination is.
#pragma once

#include <mpi.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vtpu/collectives/link.h"

namespace vtpu::distributed {

class MpiContext;

/// Thread-safe as Link: one thread uses this process's end; abort() from any thread.
class MpiLink final : public Link {
 public:
  enum class End { kSender, kReceiver };
  /// `peer_process` holds the other end; `tag` is the link's MPI tag (MpiContext::link_tag).
  MpiLink(std::shared_ptr<MpiContext> context, End end, int src_core, int dst_core,
          int peer_process, int tag, const LinkOptions& options);
  ~MpiLink() override;

  int src_core() const override { return src_; }
  int dst_core() const override { return dst_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  int num_slots() const override { return num_slots_; }
  std::byte* acquire_send_slot(Deadline deadline) override;
  void commit_send(const Fingerprint& fingerprint, uint64_t payload_bytes) override;
  ReceivedSlot acquire_recv_slot(Deadline deadline) override;
  void release_recv() override;
  /// Buffer transfers go on the context's buffers() communicator with this link's tag, so they
  /// match in order among themselves and never meet the slot receives posted ahead.
  bool supports_buffer_transfer() const override { return true; }
  void start_buffer_send(const std::byte* data, uint64_t bytes) override;
  void wait_buffer_send(Deadline deadline) override;
  void start_buffer_recv(std::byte* data, uint64_t bytes) override;
  void wait_buffer_recv(Deadline deadline) override;
  /// Cancels the receives, waits for the sends (OpenMPI cannot cancel a send), both up to
  /// `deadline`; frees what is left, which MPI may still complete later.
  void cancel_buffer_transfers(Deadline deadline) noexcept override;
  void abort(const std::string& reason) override;
  /// Clears a link with nothing in flight. FailedPreconditionError after an abort: messages of the
  /// abandoned collective may still be on their way, so a communicator across processes is not
  /// reused after a failure (make a new one).
  void reset() override;

 private:
  // After the payload of every message: what the receiver checks.
  struct Trailer {
    Fingerprint fingerprint;
    uint64_t payload_bytes = 0;
  };
  std::byte* slot(int i);
  void check_end(End expected, const char* call) const;
  // One buffer transfer started and not yet waited for.
  struct BufferTransfer {
    MPI_Request request = MPI_REQUEST_NULL;
    uint64_t bytes = 0;
  };
  int wait_rc(MPI_Request& request, MPI_Status* status, Deadline deadline, const char* what);
  void wait(MPI_Request& request, MPI_Status* status, Deadline deadline, const char* what);
  BufferTransfer& start_buffer(End end, const char* call, uint64_t bytes);
  BufferTransfer& oldest_buffer(End end, const char* call);
  void post_receive(int i);
  [[noreturn]] void throw_aborted();

  std::shared_ptr<MpiContext> context_;
  const End end_;
  const int src_, dst_, peer_, tag_;
  const uint64_t slot_bytes_;
  const int num_slots_;
  std::vector<std::unique_ptr<std::byte[]>> slots_;  // each slot_bytes + sizeof(Trailer)
  std::vector<MPI_Request> requests_;                // per slot: its Isend or Irecv
  uint64_t count_ = 0;        // messages committed (sender) or released (receiver)
  bool receives_posted_ = false;
  std::deque<BufferTransfer> buffers_;  // unfinished buffer transfers, oldest first
  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::string abort_reason_;  // GUARDED_BY(mu_)
};

/// A link between two cores of other processes: this process never uses it (the Communicator's
/// table has a cell for every pair). Every transfer call throws InternalError.
class AbsentLink final : public Link {
 public:
  AbsentLink(int src_core, int dst_core, const LinkOptions& options)
      : src_(src_core), dst_(dst_core), options_(options) {}
  int src_core() const override { return src_; }
  int dst_core() const override { return dst_; }
  uint64_t slot_bytes() const override { return options_.slot_bytes; }
  int num_slots() const override { return options_.num_slots; }
  std::byte* acquire_send_slot(Deadline) override { fail(); }
  void commit_send(const Fingerprint&, uint64_t) override { fail(); }
  ReceivedSlot acquire_recv_slot(Deadline) override { fail(); }
  void release_recv() override { fail(); }
  void abort(const std::string&) override {}
  void reset() override {}

 private:
  [[noreturn]] void fail() const;
  int src_, dst_;
  LinkOptions options_;
};

}  // namespace vtpu::distributed
