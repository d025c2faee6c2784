#include "vtpu/distributed/mpi_context.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>

#include "vtpu/common/error.h"

namespace vtpu::distributed {

namespace {

constexpr int kControlTag = 1;
constexpr int kFingerprintTag = 2;
constexpr int kFailureTag = 3;
// Bytes of a failure notice (the runtime's epoch, the core id, the message): under every OpenMPI
// transport's eager limit (shared memory's is 4 KiB), so that a send never waits for the receiver.
constexpr int kMaxNotice = 2048;
constexpr std::chrono::milliseconds kControlPoll{1};

/// One fingerprint published to another process: the communicator's id and what it published.
struct FingerprintMessage {
  int32_t communicator_id = 0;
  PublishedFingerprint published;
};
static_assert(std::is_trivially_copyable_v<FingerprintMessage>);
constexpr int kFingerprintBytes = static_cast<int>(sizeof(FingerprintMessage));

/// One core failure published to another process (MpiContext::send_failure).
struct FailureMessage {
  int32_t communicator_id = 0;
  PublishedFailure failure;
};
static_assert(std::is_trivially_copyable_v<FailureMessage>);
constexpr int kFailureBytes = static_cast<int>(sizeof(FailureMessage));

// Messages for a communicator this process has not made yet are kept for it, a bounded number
// per communicator (one that is never made, e.g. of an earlier failed run, costs no more).
template <typename T>
void keep_early(std::map<int, std::vector<T>>& early, int id, const T& message) {
  constexpr size_t kMaxEarly = 64;
  std::vector<T>& kept = early[id];
  if (kept.size() < kMaxEarly) kept.push_back(message);
}

// Hands the messages kept for communicator `id` to its listener, now that it is made.
template <typename T, typename Listener>
void deliver_early(std::map<int, std::vector<T>>& early, int id, const Listener& listener) {
  const auto it = early.find(id);
  if (it == early.end()) return;
  for (const T& message : it->second) listener(message);
  early.erase(it);
}

MPI_Comm dup_world(const char* name) {
  MPI_Comm c = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_set_name(c, name);
  return c;
}

}  // namespace

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw InternalError(std::string(what) +
                      " failed: " + std::string(text, static_cast<size_t>(len)));
}

MpiContext::MpiContext() {
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  links_ = dup_world("vtpu links");
  buffers_ = dup_world("vtpu buffers");
  host_ = dup_world("vtpu host");
  control_ = dup_world("vtpu control");
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) tag_ub_ = *ub;
  control_thread_ = std::thread([this] { control_loop(); });
}

MpiContext::~MpiContext() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    stopping_.store(true);
    if (control_thread_.joinable()) control_thread_.join();
    return;
  }
  close();
}

void MpiContext::close() {
  stop();
  for (MPI_Comm* c : {&links_, &buffers_, &host_, &control_}) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

int MpiContext::link_tag(int id, int n, int src_rank, int dst_rank) const {
  const int64_t per_comm = int64_t{n} * n;
  if (per_comm > tag_ub_) {
    throw InvalidArgumentError(
        "a communicator of " + std::to_string(n) + " cores across processes needs " +
        std::to_string(per_comm) +
        " MPI tags (expected at most MPI_TAG_UB = " + std::to_string(tag_ub_) + ")");
  }
  const int64_t comms = (int64_t{tag_ub_} + 1) / per_comm;
  return static_cast<int>((id % comms) * per_comm + int64_t{src_rank} * n + dst_rank);
}

int MpiContext::next_communicator_id(const std::vector<int>& group) {
  // FNV-1a of the group and how many communicators of this group this process made before: the
  // same in every process however communicators of other groups interleave.
  std::lock_guard lock(mu_);
  const int k = made_[group]++;
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : group) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  }
  h ^= static_cast<uint64_t>(k) + 0x9e3779b97f4a7c15ull;
  h *= 1099511628211ull;
  return static_cast<int>(h & 0x3fffffff);
}

void MpiContext::notify_failure(int runtime_id, int core_id, const std::string& message) {
  std::string notice =
      std::to_string(runtime_id) + "\n" + std::to_string(core_id) + "\n" + message;
  if (notice.size() > kMaxNotice) notice.resize(kMaxNotice);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    // Small enough for MPI's eager protocol: the send completes without the receiver.
    MPI_Send(notice.data(), static_cast<int>(notice.size()), MPI_CHAR, p, kControlTag, control_);
  }
}

int MpiContext::add_failure_callback(ProcessGroup::FailureCallback callback) {
  std::lock_guard lock(callback_mu_);
  const int id = next_callback_id_++;
  callbacks_.emplace(id, std::move(callback));
  return id;
}

void MpiContext::remove_failure_callback(int id) {
  std::lock_guard lock(callback_mu_);
  callbacks_.erase(id);
}

void MpiContext::add_fingerprint_channel(int id, std::vector<int> processes,
                                         FingerprintListener listener) {
  std::lock_guard lock(channel_mu_);
  auto& channel = channels_[id] = FingerprintChannel{std::move(processes), std::move(listener)};
  // Fingerprints that came before this process made the communicator (processes make theirs at
  // different times): without them a desync between two other processes' cores goes unseen here.
  deliver_early(early_fingerprints_, id, channel.listener);
}

void MpiContext::remove_fingerprint_channel(int id) {
  {
    std::lock_guard lock(channel_mu_);
    channels_.erase(id);
    early_fingerprints_.erase(id);
  }
  std::lock_guard lock(outbox_mu_);
  outbox_.erase(id);
}

void MpiContext::publish_fingerprint(int id, const PublishedFingerprint& published) {
  std::lock_guard lock(outbox_mu_);
  outbox_[id] = published;
}

void MpiContext::send_fingerprints() {
  std::map<int, PublishedFingerprint> out;
  {
    std::lock_guard lock(outbox_mu_);
    if (outbox_.empty()) return;
    out.swap(outbox_);
  }
  std::lock_guard lock(channel_mu_);
  for (const auto& [id, published] : out) {
    const auto it = channels_.find(id);
    if (it == channels_.end()) continue;
    const FingerprintMessage m{id, published};
    for (int p : it->second.processes) {
      // Under every transport's eager limit, as a failure notice: the send does not wait for p.
      MPI_Send(&m, kFingerprintBytes, MPI_BYTE, p, kFingerprintTag, control_);
    }
  }
}

void MpiContext::send_failure(int id, const std::vector<int>& processes,
                              const PublishedFailure& failure) {
  FailureMessage m{id, failure};
  m.failure.reason[PublishedFailure::kMaxReason - 1] = '\0';
  for (int p : processes) {
    // Best effort, as a failure notice: the receiver may be gone already.
    MPI_Send(&m, kFailureBytes, MPI_BYTE, p, kFailureTag, control_);
  }
}

void MpiContext::set_failure_listener(int id, FailureListener listener) {
  std::lock_guard lock(failure_mu_);
  if (!listener) {
    failure_listeners_.erase(id);
    early_failures_.erase(id);
    return;
  }
  auto& l = failure_listeners_[id] = std::move(listener);
  // Failures sent before this process made the communicator, as for fingerprints.
  deliver_early(early_failures_, id, l);
}

void MpiContext::deliver_failure(const char* data, int len) {
  if (len != kFailureBytes) return;
  FailureMessage m;
  std::memcpy(&m, data, sizeof m);
  m.failure.reason[PublishedFailure::kMaxReason - 1] = '\0';
  // Under the lock, so that a removed listener (its communicator being destroyed) never runs late.
  std::lock_guard lock(failure_mu_);
  const auto it = failure_listeners_.find(m.communicator_id);
  if (it != failure_listeners_.end()) {
    it->second(m.failure);
  } else {
    keep_early(early_failures_, m.communicator_id, m.failure);
  }
}

void MpiContext::deliver_fingerprint(const char* data, int len) {
  if (len != kFingerprintBytes) return;
  FingerprintMessage m;
  std::memcpy(&m, data, sizeof m);
  // Under the lock, so that a removed channel (its communicator being destroyed) never runs late.
  std::lock_guard lock(channel_mu_);
  const auto it = channels_.find(m.communicator_id);
  if (it != channels_.end()) {
    it->second.listener(m.published);
  } else {
    keep_early(early_fingerprints_, m.communicator_id, m.published);
  }
}

void MpiContext::stop() {
  if (stopping_.exchange(true)) return;
  if (control_thread_.joinable()) control_thread_.join();
}

void MpiContext::control_loop() {
  // Three receives stay posted: failure notices, fingerprints and communicators' failures.
  std::vector<char> notice(kMaxNotice);
  std::vector<char> fingerprint(static_cast<size_t>(kFingerprintBytes));
  std::vector<char> failure(static_cast<size_t>(kFailureBytes));
  std::array<MPI_Request, 3> req{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  const auto post = [&](int i) {
    if (i == 0) {
      MPI_Irecv(notice.data(), kMaxNotice, MPI_CHAR, MPI_ANY_SOURCE, kControlTag, control_,
                &req[0]);
    } else if (i == 1) {
      MPI_Irecv(fingerprint.data(), kFingerprintBytes, MPI_BYTE, MPI_ANY_SOURCE, kFingerprintTag,
                control_, &req[1]);
    } else {
      MPI_Irecv(failure.data(), kFailureBytes, MPI_BYTE, MPI_ANY_SOURCE, kFailureTag, control_,
                &req[2]);
    }
  };
  for (int i = 0; i < 3; ++i) post(i);
  auto next_send = std::chrono::steady_clock::now();
  while (!stopping_.load(std::memory_order_acquire)) {
    // At most one fingerprint per communicator per poll, however fast collectives go.
    if (std::chrono::steady_clock::now() >= next_send) {
      send_fingerprints();
      next_send = std::chrono::steady_clock::now() + kControlPoll;
    }
    int index = MPI_UNDEFINED;
    int done = 0;
    MPI_Status status;
    MPI_Testany(static_cast<int>(req.size()), req.data(), &index, &done, &status);
    if (!done || index == MPI_UNDEFINED) {
      std::this_thread::sleep_for(kControlPoll);
      continue;
    }
    int len = 0;
    MPI_Get_count(&status, index == 0 ? MPI_CHAR : MPI_BYTE, &len);
    if (index == 1) {
      deliver_fingerprint(fingerprint.data(), len);
      post(1);
      continue;
    }
    if (index == 2) {
      deliver_failure(failure.data(), len);
      post(2);
      continue;
    }
    const std::string text(notice.data(), static_cast<size_t>(std::max(len, 0)));
    post(0);
    handle_notice(text);
  }
  for (MPI_Request& r : req) {
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

void MpiContext::handle_notice(const std::string& notice) {
  // "runtime id\ncore\nmessage". Called under the lock, so that a removed callback (its Runtime
  // being destroyed) never runs late.
  const size_t nl1 = notice.find('\n');
  const size_t nl2 = nl1 == std::string::npos ? nl1 : notice.find('\n', nl1 + 1);
  if (nl2 == std::string::npos) return;
  const int runtime_id = std::atoi(notice.c_str());
  const int core = std::atoi(notice.c_str() + nl1 + 1);
  std::lock_guard lock(callback_mu_);
  const auto it = callbacks_.find(runtime_id);
  if (it != callbacks_.end()) it->second(core, notice.substr(nl2 + 1));
}

}  // namespace vtpu::distributed
