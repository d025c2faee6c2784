// What every MPI object of a process shares (internal to distributed/): the MPI communicators,
// the tag range of links, and the control thread that receives other processes' failure notices
// and exchanges the communicators' fingerprints (the desync check of cores no link joins).
#pragma once

#include <mpi.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vtpu/collectives/link.h"
#include "vtpu/collectives/transport.h"
#include "vtpu/runtime/process_group.h"

namespace vtpu::distributed {

/// Throws InternalError naming `what` and MPI's error string unless rc == MPI_SUCCESS.
void check_mpi(int rc, const char* what);

/// Polls `done` until it returns true (then returns true) or `deadline` passes (false): a few
/// immediate retries, then yields, then sleeps growing to kMaxPause (MPI progresses only inside
/// MPI calls, so a waiter must keep calling; sleeping bounds the CPU it takes from the cores it
/// waits for). The pauses stay short because a receiver's MPI_Test is what copies a large
/// message over (OpenMPI's shared-memory single copy is the receiver's read), so every microsecond
/// asleep after the sender is ready delays the transfer itself; the thread's timer slack is set
/// to 1 us once, or Linux's default 50 us slack would stretch each short sleep by as much.
/// Calls `check_abort` (which may throw) between polls.
template <typename Done, typename CheckAbort>
bool poll_until(Done done, CheckAbort check_abort, Deadline deadline);

/// Created once per process after MPI_Init_thread; destroyed before MPI_Finalize. Thread-safe.
class MpiContext {
 public:
  MpiContext();
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Carries link messages (tags from link_tag); errors return codes (MPI_ERRORS_RETURN).
  MPI_Comm links() const { return links_; }
  /// Carries links' buffer transfers (Link::start_buffer_send), with the links' tags: apart from
  /// the slot messages, whose receives are posted ahead.
  MPI_Comm buffers() const { return buffers_; }
  /// Carries ProcessGroup's host collectives (all_gather, barrier).
  MPI_Comm host() const { return host_; }
  /// The MPI tag of the link src_rank -> dst_rank of communicator `id` in a group of n ranks.
  /// Throws InvalidArgumentError when n * n tags do not fit under MPI_TAG_UB.
  int link_tag(int id, int n, int src_rank, int dst_rank) const;
  /// A communicator id agreed by every process: the same group made for the k-th time gets the
  /// same id in every process, whatever else each process made in between.
  int next_communicator_id(const std::vector<int>& group);

  /// Sends `message` about failed core `core_id` of the runtime whose callback is `runtime_id`
  /// to every other process (best effort).
  void notify_failure(int runtime_id, int core_id, const std::string& message);
  /// Ids count from 1 in every process, so the k-th Runtime of every process (they are made in
  /// the same order everywhere) has id k, and a notice reaches only the runtime it is about: not
  /// a later one when it arrives late, nor another one alive beside it.
  int add_failure_callback(ProcessGroup::FailureCallback callback);
  void remove_failure_callback(int id);

  /// Registers communicator `id` (next_communicator_id) for the fingerprint exchange: what it
  /// publishes goes to `processes`, and `listener` receives what those publish (on the control
  /// thread). remove_fingerprint_channel: once it returns, the listener no longer runs.
  void add_fingerprint_channel(int id, std::vector<int> processes, FingerprintListener listener);
  void remove_fingerprint_channel(int id);
  /// Queues `published` for communicator `id` without waiting for MPI: the control thread sends
  /// the latest queued fingerprint of each communicator at its next poll (within ~1 ms), and an
  /// earlier one still queued is dropped, since its collective went on. A desync that stops the
  /// cores is therefore always sent; one whose cores went on may be left to the links' compare.
  void publish_fingerprint(int id, const PublishedFingerprint& published);
  /// Sends `failure` of communicator `id` to `processes` at once, from the calling thread (small
  /// enough for MPI's eager protocol: the sends do not wait for the receivers).
  void send_failure(int id, const std::vector<int>& processes, const PublishedFailure& failure);
  /// Sets (or, null, removes) the function that receives communicator `id`'s failures from other
  /// processes (on the control thread); once a removal returns, the old one no longer runs.
  void set_failure_listener(int id, FailureListener listener);
  /// Stops the control thread (before MPI_Finalize or MPI_Abort). Idempotent.
  void stop();
  /// stop(), then frees the MPI communicators: before MPI_Finalize. Idempotent.
  void close();

 private:
  void control_loop();
  /// Sends the queued fingerprints (control thread).
  void send_fingerprints();
  /// Runs the failure callback a notice names (control thread).
  void handle_notice(const std::string& notice);
  /// Runs the listener of a received fingerprint message (control thread).
  void deliver_fingerprint(const char* data, int len);
  /// Runs the listener of a received failure message (control thread).
  void deliver_failure(const char* data, int len);

  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  MPI_Comm links_ = MPI_COMM_NULL;
  MPI_Comm buffers_ = MPI_COMM_NULL;
  MPI_Comm host_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  std::mutex mu_;
  std::map<std::vector<int>, int> made_;  // GUARDED_BY(mu_): communicators made per group
  std::mutex callback_mu_;
  std::map<int, ProcessGroup::FailureCallback> callbacks_;  // GUARDED_BY(callback_mu_)
  int next_callback_id_ = 1;                                // GUARDED_BY(callback_mu_)
  struct FingerprintChannel {
    std::vector<int> processes;
    FingerprintListener listener;
  };
  std::mutex channel_mu_;
  std::map<int, FingerprintChannel> channels_;  // GUARDED_BY(channel_mu_)
  // Received before the communicator was made here (add_fingerprint_channel delivers them).
  std::map<int, std::vector<PublishedFingerprint>> early_fingerprints_;  // GUARDED_BY(channel_mu_)
  std::mutex failure_mu_;
  std::map<int, FailureListener> failure_listeners_;  // GUARDED_BY(failure_mu_)
  std::map<int, std::vector<PublishedFailure>> early_failures_;  // GUARDED_BY(failure_mu_)
  std::mutex outbox_mu_;
  std::map<int, PublishedFingerprint> outbox_;  // GUARDED_BY(outbox_mu_)
  std::atomic<bool> stopping_{false};
  std::thread control_thread_;
};

template <typename Done, typename CheckAbort>
bool poll_until(Done done, CheckAbort check_abort, Deadline deadline) {
  constexpr int kSpins = 32;
  constexpr int kYields = 64;
  constexpr std::chrono::microseconds kMaxPause{50};
  static thread_local const bool precise_sleeps = prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
  (void)precise_sleeps;
  std::chrono::microseconds pause{1};
  for (int i = 0;; ++i) {
    if (done()) return true;
    check_abort();
    if (i < kSpins) continue;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (i < kSpins + kYields) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, kMaxPause);
    }
  }
}

}  // namespace vtpu::distributed
