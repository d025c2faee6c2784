// The Communicator's failure handling: aborts, timeouts and desyncs turned into the group's
// errors, the group's fingerprint compare and the flight recorder's dumps (the collectives
// themselves are in communicator.cc).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "vtpu/collectives/communicator.h"
#include "vtpu/collectives/desync_error.h"

namespace vtpu {

using detail::DesyncError;
using detail::kDesyncMarker;

void Communicator::init_checks() {
  recorder_ = options_.flight_recorder ? options_.flight_recorder : FlightRecorder::global();
  recorder_id_ = recorder_->add_communicator(group_, runtime_.process_index());
  rings_.assign(group_.size(), nullptr);
  for (size_t i = 0; i < group_.size(); ++i) {
    if (runtime_.is_local(group_[i])) rings_[i] = recorder_->ring(group_[i]);
  }
  if (spans_processes_ && options_.transport->carries_failures()) {
    options_.transport->set_failure_listener(
        [this](const PublishedFailure& f) { on_remote_failure(f); });
  }
  if (!options_.desync_check || size() == 1) return;
  fingerprints_ = std::make_unique<FingerprintTable>();
  if (spans_processes_) {
    options_.transport->set_fingerprint_listener(
        [this](const PublishedFingerprint& p) { on_remote_fingerprint(p); });
  }
}

void Communicator::check_group_fingerprint(int core_id, const Fingerprint& fp) {
  if (!fingerprints_) return;
  const FingerprintTable::Result r = fingerprints_->publish(core_id, fp);
  // One message per process and collective: the first of its cores sends it, a process whose
  // cores all agree with it stays silent, and one whose cores differ finds the mismatch in its
  // own table. A core that differs from another process's reference sends too: it throws before
  // it moves any data, so that process would otherwise wait for it until the timeout.
  const bool tell_others =
      r.outcome == FingerprintTable::Outcome::kFirst ||
      (r.outcome == FingerprintTable::Outcome::kDifferent && !runtime_.is_local(r.reference_core));
  if (tell_others && spans_processes_) {
    options_.transport->publish_fingerprint(
        {reset_epoch_.load(std::memory_order_relaxed), core_id, fp});
  }
  if (r.outcome == FingerprintTable::Outcome::kDifferent) {
    throw DesyncError(
        detail::desync_message(group_string(), core_id, fp, r.reference_core, r.reference));
  }
}

void Communicator::on_remote_fingerprint(const PublishedFingerprint& p) {
  if (p.epoch != reset_epoch_.load(std::memory_order_relaxed)) return;  // sent before a reset
  const FingerprintTable::Result r = fingerprints_->publish(p.core, p.fingerprint);
  if (r.outcome != FingerprintTable::Outcome::kDifferent) return;
  // The cores of this process in that collective fail with InvalidArgument naming both sides
  // (throw_if_desynced); the other process finds the same mismatch from this one's message.
  abort(
      detail::desync_message(group_string(), r.reference_core, r.reference, p.core, p.fingerprint),
      p.fingerprint.sequence, p.fingerprint.sequence);
}

std::optional<uint64_t> Communicator::remote_desync_sequence(int core,
                                                             const std::string& what) const {
  // A desync found in another process arrives as its error's text (a failure notice). The cores
  // of this process in that collective then fail as the cores that compared the fingerprints do,
  // with InvalidArgument, as in one process: the text names this group and the receiver's
  // fingerprint, whose sequence is the collective's.
  if (runtime_.is_local(core)) return std::nullopt;
  const std::string marker = std::string(kDesyncMarker) + group_string() + ": ";
  const size_t at = what.find(marker);
  if (at == std::string::npos) return std::nullopt;
  const std::string_view sequence_text = " at sequence ";
  const size_t seq = what.find(sequence_text, at + marker.size());
  if (seq == std::string::npos) return std::nullopt;
  return std::strtoull(what.c_str() + seq + sequence_text.size(), nullptr, 10);
}

void Communicator::abort(const std::string& reason) { abort(reason, 0); }

void Communicator::abort_after_finished(int core_id, const std::string& reason) {
  // The core's program has stopped (or abandoned its started collective): what it finished, every
  // core may still finish (its messages are in the links); what it has not, no core can.
  const size_t rank = static_cast<size_t>(rank_of(core_id));
  fail_from(core_id, reason, finished_[rank].load(std::memory_order_acquire), false);
}

void Communicator::fail_from(int core_id, const std::string& reason, uint64_t from_sequence,
                             bool desync) {
  const bool widened =
      abort(reason, from_sequence, desync ? std::optional(from_sequence) : std::nullopt);
  if (!widened || !spans_processes_ || !options_.transport->carries_failures()) return;
  // The other processes learn how far this core got, so they fail only what cannot complete.
  PublishedFailure f;
  f.epoch = reset_epoch_.load(std::memory_order_relaxed);
  f.core = core_id;
  f.from_sequence = from_sequence;
  f.desync = desync;
  reason.copy(f.reason, std::min(reason.size(), PublishedFailure::kMaxReason - 1));
  options_.transport->publish_failure(f);
}

void Communicator::on_remote_failure(const PublishedFailure& f) {
  if (f.epoch != reset_epoch_.load(std::memory_order_relaxed)) return;  // sent before a reset
  abort("process " + std::to_string(runtime_.process_of(f.core)) + ": " + f.reason,
        f.from_sequence, f.desync ? std::optional(f.from_sequence) : std::nullopt);
}

bool Communicator::abort(const std::string& reason, uint64_t from_sequence,
                         std::optional<uint64_t> desync_sequence) {
  std::string link_reason;
  {
    std::lock_guard lock(abort_mu_);
    if (desync_sequence && !desync_sequence_) {
      desync_sequence_ = desync_sequence;
      desync_reason_ = reason;
    }
    if (from_sequence >= abort_from_.load(std::memory_order_relaxed)) return false;
    if (abort_reason_.empty()) abort_reason_ = reason;
    link_reason = abort_reason_;
    abort_from_.store(from_sequence, std::memory_order_seq_cst);
    // Dumped under the lock, before any waiter wakes and before a core that failed itself
    // (it calls abort first) records its error, so every core's entry shows where it stood.
    recorder_->dump_on_failure("communicator " + group_string() + " aborted: " + reason,
                               runtime_.process_index());
  }
  // Wake the ranks inside (or past) an aborted collective by aborting their links. A rank still
  // in an earlier collective keeps its links unless a peer's are aborted, and then it needs none
  // of them: that peer has finished the earlier collective, so its messages are delivered (a
  // receiver takes them before it sees the abort) and it expects nothing more from this rank.
  std::lock_guard lock(links_mu_);
  for (int r = 0; r < size(); ++r) {
    if (from_sequence == 0 ||
        entered_[static_cast<size_t>(r)].load(std::memory_order_seq_cst) > from_sequence) {
      abort_links_of_locked(r, link_reason);
    }
  }
  return true;
}

void Communicator::abort_links_of_locked(int rank, const std::string& reason) {
  if (links_aborted_[static_cast<size_t>(rank)]) return;
  links_aborted_[static_cast<size_t>(rank)] = 1;
  const size_t n = group_.size(), r = static_cast<size_t>(rank);
  for (size_t k = 0; k < n; ++k) {
    for (size_t i : {r * n + k, k * n + r}) {
      if (Link* l = links_[i].load(std::memory_order_acquire)) l->abort(reason);
    }
  }
}

std::string Communicator::missing_cores(uint64_t sequence) const {
  // entered_ counts the cores of this process only: another process's cores enter in that
  // process, which reports its own timeout. They are named apart, as not known here, rather than
  // guessed (asking that process could wait on the very process that is stuck).
  std::string local, remote;
  const auto append = [](std::string& list, int core) {
    list += (list.empty() ? "" : ",") + std::to_string(core);
  };
  for (size_t i = 0; i < group_.size(); ++i) {
    if (!runtime_.is_local(group_[i])) {
      append(remote, group_[i]);
    } else if (entered_[i].load(std::memory_order_acquire) <= sequence) {
      append(local, group_[i]);
    }
  }
  std::string s = !local.empty()   ? "{" + local + "}"
                  : remote.empty() ? "none (all cores entered; a core is slow or stuck inside)"
                                   : "none of this process's";
  if (!remote.empty()) s += "; cores of other processes, not known here: {" + remote + "}";
  return s;
}

void Communicator::rethrow_with_context(int rank, const Fingerprint& fp) {
  const int core = group_[static_cast<size_t>(rank)];
  const auto failed_in = [&](const char* what) {
    return "core " + std::to_string(core) + " failed in " + fp.to_string() + ": " + what;
  };
  try {
    throw;
  } catch (const DeadlineExceededError& e) {
    const std::string msg =
        fp.to_string() + " in group " + group_string() + " on core " + std::to_string(core) +
        " timed out after " + std::to_string(options_.timeout.count()) + " ms (" + e.message() +
        "); cores that have not reached sequence " + std::to_string(fp.sequence) + ": " +
        missing_cores(fp.sequence) +
        " (the timeout is VTPU_COLLECTIVE_TIMEOUT_MS in every command, or "
        "collective_timeout_ms of --config in vtpu train, reshard and bench collectives, which "
        "wins; else 30 s x max(1, cores / CPUs); many more cores than CPUs need longer)";
    abort(msg, fp.sequence);
    throw DeadlineExceededError(msg);
  } catch (const AbortedError& e) {
    // Woken by an abort from this collective or an earlier one; a lower sequence cannot fail
    // here, but if it ever did, the collective is failed on every core all the same.
    abort(e.message(), fp.sequence);
    throw_if_desynced(core, fp);
    throw;
  } catch (const DesyncError& e) {
    fail_from(core, failed_in(e.what()), fp.sequence, true);
    throw;
  } catch (const std::exception& e) {
    fail_from(core, failed_in(e.what()), fp.sequence, false);
    throw;
  }
}

void Communicator::throw_if_desynced(int core_id, const Fingerprint& fp) const {
  std::lock_guard lock(abort_mu_);
  if (desync_sequence_ != fp.sequence) return;
  throw InvalidArgumentError(fp.to_string() + " on core " + std::to_string(core_id) +
                             " failed: " + desync_reason_);
}

void Communicator::wait_for_direct_users() const {
  // A DirectAccessScope waits only in link waits, which the abort ends at once; otherwise it ends
  // within a fold's time. The deadline only guards against a bug.
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (direct_users_.load(std::memory_order_acquire) != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace vtpu
