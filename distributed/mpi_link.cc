#include "vtpu/distributed/mpi_link.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "vtpu/common/error.h"
#include "vtpu/distributed/mpi_context.h"

namespace vtpu::distributed {

namespace {

// How long a destroyed link waits for its last sends to be received before cancelling them.
constexpr std::chrono::seconds kDrainTimeout{30};

std::string link_name(int src, int dst) {
  return "link " + std::to_string(src) + "->" + std::to_string(dst);
}

}  // namespace

static_assert(std::is_trivially_copyable_v<Fingerprint>);

MpiLink::MpiLink(std::shared_ptr<MpiContext> context, End end, int src_core, int dst_core,
                 int peer_process, int tag, const LinkOptions& options)
    : context_(std::move(context)),
      end_(end),
      src_(src_core),
      dst_(dst_core),
      peer_(peer_process),
      tag_(tag),
      slot_bytes_(options.slot_bytes),
      num_slots_(options.num_slots) {
  if (slot_bytes_ == 0 || slot_bytes_ % 64 != 0 || slot_bytes_ > (uint64_t{1} << 30)) {
    throw InvalidArgumentError(link_name(src_, dst_) + " slot_bytes is " +
                               std::to_string(slot_bytes_) +
                               " (expected a positive multiple of 64, at most 1 GiB across "
                               "processes: an MPI message count is an int)");
  }
  if (num_slots_ < 1) {
    throw InvalidArgumentError(link_name(src_, dst_) + " num_slots is " +
                               std::to_string(num_slots_) + " (expected >= 1)");
  }
  slots_.resize(static_cast<size_t>(num_slots_));
  requests_.assign(static_cast<size_t>(num_slots_), MPI_REQUEST_NULL);
}

MpiLink::~MpiLink() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI freed every request at MPI_Finalize
  const Deadline drain = std::chrono::steady_clock::now() + kDrainTimeout;
  cancel_buffer_transfers(drain);
  for (MPI_Request& r : requests_) {
    if (r == MPI_REQUEST_NULL) continue;
    int done = 0;
    if (end_ == End::kSender) {
      // A send the peer has not received yet: give it time, then give up on it.
      poll_until([&] { return MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done; },
                 [] {}, drain);
    }
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }
}

std::byte* MpiLink::slot(int i) {
  auto& s = slots_[static_cast<size_t>(i)];
  // Allocated on first use and left uninitialised: most links of a large group stay unused.
  if (!s) s.reset(new std::byte[slot_bytes_ + sizeof(Trailer)]);
  return s.get();
}

void MpiLink::check_end(End expected, const char* call) const {
  if (end_ != expected) {
    throw InternalError(std::string(call) + " on the " +
                        (end_ == End::kSender ? "sending" : "receiving") + " end of " +
                        link_name(src_, dst_) + " (the other end is in process " +
                        std::to_string(peer_) + ")");
  }
}

void MpiLink::throw_aborted() {
  std::lock_guard lock(mu_);
  throw AbortedError(link_name(src_, dst_) + " aborted: " + abort_reason_);
}

int MpiLink::wait_rc(MPI_Request& request, MPI_Status* status, Deadline deadline,
                    const char* what) {
  int rc = MPI_SUCCESS;
  const bool done = poll_until(
      [&] {
        int flag = 0;
        rc = MPI_Test(&request, &flag, status);
        return rc != MPI_SUCCESS || flag != 0;
      },
      [this] {
        if (aborted_.load(std::memory_order_acquire)) throw_aborted();
      },
      deadline);
  if (!done) {
    throw DeadlineExceededError(std::string(what) + " on " + link_name(src_, dst_) +
                                " (to or from process " + std::to_string(peer_) + ") timed out");
  }
  return rc;
}

void MpiLink::wait(MPI_Request& request, MPI_Status* status, Deadline deadline,
                   const char* what) {
  check_mpi(wait_rc(request, status, deadline, what), what);
}

std::byte* MpiLink::acquire_send_slot(Deadline deadline) {
  check_end(End::kSender, "acquire_send_slot");
  if (aborted_.load(std::memory_order_acquire)) throw_aborted();
  const int i = static_cast<int>(count_ % static_cast<uint64_t>(num_slots_));
  MPI_Request& r = requests_[static_cast<size_t>(i)];
  if (r != MPI_REQUEST_NULL) wait(r, MPI_STATUS_IGNORE, deadline, "waiting for a free slot");
  return slot(i);
}

void MpiLink::commit_send(const Fingerprint& fingerprint, uint64_t payload_bytes) {
  check_end(End::kSender, "commit_send");
  if (payload_bytes > slot_bytes_) {
    throw InternalError(link_name(src_, dst_) + " commit of " + std::to_string(payload_bytes) +
                        " bytes (expected at most the slot's " + std::to_string(slot_bytes_) +
                        ")");
  }
  const int i = static_cast<int>(count_ % static_cast<uint64_t>(num_slots_));
  std::byte* s = slot(i);
  const Trailer t{fingerprint, payload_bytes};
  std::memcpy(s + payload_bytes, &t, sizeof t);
  check_mpi(MPI_Isend(s, static_cast<int>(payload_bytes + sizeof t), MPI_BYTE, peer_, tag_,
                      context_->links(), &requests_[static_cast<size_t>(i)]),
            "MPI_Isend");
  ++count_;
}

void MpiLink::post_receive(int i) {
  check_mpi(MPI_Irecv(slot(i), static_cast<int>(slot_bytes_ + sizeof(Trailer)), MPI_BYTE, peer_,
                      tag_, context_->links(), &requests_[static_cast<size_t>(i)]),
            "MPI_Irecv");
}

ReceivedSlot MpiLink::acquire_recv_slot(Deadline deadline) {
  check_end(End::kReceiver, "acquire_recv_slot");
  // No abort check here: wait() tests for the message before the abort (Link::abort, data first).
  if (!receives_posted_) {
    // Receives match in the order they were posted, and each released slot is posted again
    // behind the others, so slot i always holds message count_ with count_ % num_slots == i.
    for (int i = 0; i < num_slots_; ++i) post_receive(i);
    receives_posted_ = true;
  }
  const int i = static_cast<int>(count_ % static_cast<uint64_t>(num_slots_));
  MPI_Status status;
  wait(requests_[static_cast<size_t>(i)], &status, deadline, "waiting for data");
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  Trailer t;
  if (bytes < static_cast<int>(sizeof t)) {
    throw InternalError(link_name(src_, dst_) + " received a message of " +
                        std::to_string(bytes) + " bytes (expected at least " +
                        std::to_string(sizeof t) + ")");
  }
  const std::byte* s = slot(i);
  std::memcpy(&t, s + bytes - sizeof t, sizeof t);
  if (t.payload_bytes != static_cast<uint64_t>(bytes) - sizeof t) {
    throw InternalError(link_name(src_, dst_) + " message says " +
                        std::to_string(t.payload_bytes) + " payload bytes but carries " +
                        std::to_string(bytes - sizeof t));
  }
  return ReceivedSlot{s, t.payload_bytes, t.fingerprint};
}

void MpiLink::release_recv() {
  check_end(End::kReceiver, "release_recv");
  post_receive(static_cast<int>(count_ % static_cast<uint64_t>(num_slots_)));
  ++count_;
}

MpiLink::BufferTransfer& MpiLink::start_buffer(End end, const char* call, uint64_t bytes) {
  check_end(end, call);
  if (aborted_.load(std::memory_order_acquire)) throw_aborted();
  if (bytes > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    throw InvalidArgumentError(link_name(src_, dst_) + " buffer transfer of " +
                               std::to_string(bytes) +
                               " bytes (expected at most 2^31 - 1: an MPI message count is an int)");
  }
  BufferTransfer& b = buffers_.emplace_back();
  b.bytes = bytes;
  return b;
}

MpiLink::BufferTransfer& MpiLink::oldest_buffer(End end, const char* call) {
  check_end(end, call);
  if (buffers_.empty()) {
    throw InternalError(std::string(call) + " on " + link_name(src_, dst_) +
                        " with no buffer transfer started");
  }
  return buffers_.front();
}

void MpiLink::start_buffer_send(const std::byte* data, uint64_t bytes) {
  BufferTransfer& b = start_buffer(End::kSender, "start_buffer_send", bytes);
  const int rc = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer_, tag_,
                           context_->buffers(), &b.request);
  if (rc != MPI_SUCCESS) buffers_.pop_back();
  check_mpi(rc, "MPI_Isend");
}

void MpiLink::wait_buffer_send(Deadline deadline) {
  BufferTransfer& b = oldest_buffer(End::kSender, "wait_buffer_send");
  const int rc = wait_rc(b.request, MPI_STATUS_IGNORE, deadline, "waiting for a buffer send");
  buffers_.pop_front();
  check_mpi(rc, "waiting for a buffer send");
}

void MpiLink::start_buffer_recv(std::byte* data, uint64_t bytes) {
  BufferTransfer& b = start_buffer(End::kReceiver, "start_buffer_recv", bytes);
  const int rc = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer_, tag_,
                           context_->buffers(), &b.request);
  if (rc != MPI_SUCCESS) buffers_.pop_back();
  check_mpi(rc, "MPI_Irecv");
}

void MpiLink::wait_buffer_recv(Deadline deadline) {
  BufferTransfer& b = oldest_buffer(End::kReceiver, "wait_buffer_recv");
  MPI_Status status;
  const int rc = wait_rc(b.request, &status, deadline, "waiting for a buffer");
  const uint64_t expected = b.bytes;
  buffers_.pop_front();
  if (rc == MPI_ERR_TRUNCATE || (rc == MPI_SUCCESS && status.MPI_ERROR == MPI_ERR_TRUNCATE)) {
    throw InternalError(link_name(src_, dst_) + " received a buffer message longer than the " +
                        std::to_string(expected) + " bytes expected");
  }
  check_mpi(rc, "waiting for a buffer");
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  if (static_cast<uint64_t>(bytes) != expected) {
    throw InternalError(link_name(src_, dst_) + " received a buffer message of " +
                        std::to_string(bytes) + " bytes (expected " + std::to_string(expected) +
                        ")");
  }
}

void MpiLink::cancel_buffer_transfers(Deadline deadline) noexcept {
  if (buffers_.empty()) return;
  if (end_ == End::kReceiver) {
    for (BufferTransfer& b : buffers_) {
      if (b.request != MPI_REQUEST_NULL) MPI_Cancel(&b.request);
    }
  }
  // A cancelled receive completes at once unless it matched a message already; a send completes
  // when the peer has taken its data.
  poll_until(
      [&] {
        for (BufferTransfer& b : buffers_) {
          int done = 0;
          if (b.request != MPI_REQUEST_NULL) MPI_Test(&b.request, &done, MPI_STATUS_IGNORE);
        }
        return std::all_of(buffers_.begin(), buffers_.end(),
                           [](const BufferTransfer& b) { return b.request == MPI_REQUEST_NULL; });
      },
      [] {}, deadline);
  for (BufferTransfer& b : buffers_) {
    if (b.request != MPI_REQUEST_NULL) MPI_Request_free(&b.request);
  }
  buffers_.clear();
}

void MpiLink::abort(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (aborted_.load(std::memory_order_relaxed)) return;
  abort_reason_ = reason;
  aborted_.store(true, std::memory_order_release);
}

void MpiLink::reset() {
  if (aborted_.load(std::memory_order_acquire)) {
    throw FailedPreconditionError(
        link_name(src_, dst_) + " to process " + std::to_string(peer_) +
        " was aborted (expected a new communicator: one across processes cannot be reused after "
        "a failure, since messages of the abandoned collective may still arrive)");
  }
}

void AbsentLink::fail() const {
  throw InternalError(link_name(src_, dst_) +
                      " joins two cores of other processes; this process cannot use it");
}

}  // namespace vtpu::distributed
