// Links between the processes of an MPI job (distributed/).
//
// A link between two cores of this process is a RingBufferLink, with direct access. A link whose
// ends live in different processes is an MpiLink: this process holds one end of it (the sender's
// or the receiver's) and the other process holds the other, and the slot protocol is carried by
// MPI point-to-point messages on the transport's own communicator (an MPI_Comm_dup of
// MPI_COMM_WORLD per process group) with a tag per (communicator, source rank, destination
// rank): a message is the slot's payload followed by its fingerprint and payload length, so the
// receiver checks the fingerprint as in process. The sender keeps num_slots messages in flight
// (MPI_Isend; acquire_send_slot waits for the oldest to complete, which is the back-pressure); the
// receiver keeps num_slots MPI_Irecv posted. Waits poll MPI_Test with bounded spinning, then
// yield and sleep with growing pauses (never an unbounded spin), up to the caller's deadline;
// abort() wakes them at once. Buffer transfers (Link::start_buffer_send) go on a communicator of
// their own with the link's tag, straight from and into the callers' memory. Fingerprints
// published for the desync check travel as small control messages through the process's control
// thread (mpi_context.h).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "vtpu/collectives/transport.h"

namespace vtpu::distributed {

class MpiContext;

/// Thread-safe.
class MpiTransport final : public Transport {
 public:
  /// `id` is the communicator's creation ordinal (the same in every process), `group` its cores
  /// (rank order), `cores_per_process` K (core c lives in process c / K).
  MpiTransport(std::shared_ptr<MpiContext> context, int id, std::vector<int> group,
               int cores_per_process);
  std::string_view name() const override { return "mpi"; }
  std::unique_ptr<Link> connect(int src_core, int dst_core, const LinkOptions& options) override;
  void publish_fingerprint(const PublishedFingerprint& published) override;
  void set_fingerprint_listener(FingerprintListener listener) override;
  bool carries_failures() const override { return true; }
  void publish_failure(const PublishedFailure& failure) override;
  void set_failure_listener(FailureListener listener) override;

 private:
  std::shared_ptr<MpiContext> context_;
  int id_;
  /// The other processes that host a core of group_.
  std::vector<int> other_processes() const;

  std::vector<int> group_;
  int cores_per_process_;
};

}  // namespace vtpu::distributed
