#include "vtpu/collectives/flight_recorder.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"
#include "vtpu/common/output_path.h"

namespace vtpu {

namespace {

using Clock = std::chrono::steady_clock;

bool has_reduce_op(CollectiveKind k) {
  return k == CollectiveKind::kAllReduce || k == CollectiveKind::kReduceScatter ||
         k == CollectiveKind::kReduce;
}

bool has_root(CollectiveKind k) {
  return k == CollectiveKind::kBroadcast || k == CollectiveKind::kReduce;
}

}  // namespace

std::string_view collective_state_name(CollectiveState s) {
  switch (s) {
    case CollectiveState::kScheduled:
      return "scheduled";
    case CollectiveState::kStarted:
      return "started";
    case CollectiveState::kCompleted:
      return "completed";
    case CollectiveState::kFailed:
      return "failed";
    case CollectiveState::kAborted:
      return "aborted";
  }
  return "?";
}

FlightRecorderOptions FlightRecorderOptions::from_env() {
  FlightRecorderOptions o;
  if (const char* v = std::getenv("VTPU_FLIGHT_RECORDER_SIZE"); v != nullptr && *v != '\0') {
    const std::string text(v);
    size_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n > kMaxEntries) {
      throw InvalidArgumentError("VTPU_FLIGHT_RECORDER_SIZE is '" + text +
                                 "' (expected a whole number of entries per core, 0.." +
                                 std::to_string(kMaxEntries) + "; 0 turns the recorder off)");
    }
    o.entries_per_core = n;
  }
  if (const char* v = std::getenv("VTPU_FLIGHT_RECORDER_DIR"); v != nullptr) o.dump_dir = v;
  return o;
}

// ---- FlightRecord ----------------------------------------------------------------------------

FlightRecord::FlightRecord(CoreFlightRing* ring, int communicator_id,
                           const Fingerprint& fingerprint, uint64_t bytes,
                           std::chrono::milliseconds timeout, Clock::time_point now)
    : ring_(ring) {
  if (!ring_) return;
  std::lock_guard lock(ring_->mu_);
  record_id_ = ring_->next_record_++;
  if (ring_->entries_.size() < ring_->capacity_) ring_->entries_.emplace_back();
  CoreFlightRing::Entry& e = ring_->entries_[record_id_ % ring_->capacity_];
  e.record_id = record_id_;
  e.communicator_id = communicator_id;
  e.fingerprint = fingerprint;
  e.bytes = bytes;
  e.timeout = timeout;
  e.state = CollectiveState::kScheduled;
  e.created = now;
  e.started = e.ended = Clock::time_point{};
  e.error.clear();
}

void FlightRecord::started() {
  if (ring_) set(CollectiveState::kStarted, Clock::now(), {});
}

void FlightRecord::finished(CollectiveState state, Clock::time_point now, std::string_view error) {
  set(state, now, error);
}

void FlightRecord::failed(const std::exception_ptr& error) {
  if (!ring_) return;
  try {
    std::rethrow_exception(error);
  } catch (const AbortedError& e) {
    set(CollectiveState::kAborted, Clock::now(), e.what());
  } catch (const std::exception& e) {
    set(CollectiveState::kFailed, Clock::now(), e.what());
  } catch (...) {
    set(CollectiveState::kFailed, Clock::now(), "unknown error");
  }
}

void FlightRecord::set(CollectiveState state, Clock::time_point now, std::string_view error) {
  if (!ring_) return;
  std::lock_guard lock(ring_->mu_);
  CoreFlightRing::Entry& e = ring_->entries_[record_id_ % ring_->capacity_];
  if (e.record_id != record_id_) return;  // overwritten by later collectives of this core
  e.state = state;
  if (state == CollectiveState::kStarted) {
    e.started = now;
  } else {
    e.ended = now;
    e.error = error;
  }
}

// ---- FlightRecorder --------------------------------------------------------------------------

FlightRecorder::FlightRecorder(FlightRecorderOptions options)
    : options_(std::move(options)),
      steady_to_system_(std::chrono::system_clock::now().time_since_epoch() -
                        Clock::now().time_since_epoch()) {
  if (options_.entries_per_core > FlightRecorderOptions::kMaxEntries) {
    throw InvalidArgumentError("flight recorder entries_per_core is " +
                               std::to_string(options_.entries_per_core) + " (expected 0.." +
                               std::to_string(FlightRecorderOptions::kMaxEntries) + ")");
  }
}

std::shared_ptr<FlightRecorder> FlightRecorder::global() {
  static const std::shared_ptr<FlightRecorder> recorder =
      std::make_shared<FlightRecorder>(FlightRecorderOptions::from_env());
  return recorder;
}

int FlightRecorder::add_communicator(const std::vector<int>& group, int process_index) {
  std::lock_guard lock(mu_);
  communicators_.emplace_back(group, process_index);
  return static_cast<int>(communicators_.size() - 1);
}

CoreFlightRing* FlightRecorder::ring(int core) {
  if (!enabled()) return nullptr;
  std::lock_guard lock(mu_);
  auto& r = rings_[core];
  if (!r) r = std::make_unique<CoreFlightRing>(core, options_.entries_per_core);
  return r.get();
}

nlohmann::json FlightRecorder::dump_json(std::string_view reason) const {
  const auto wall_ns = [this](Clock::time_point t) -> nlohmann::json {
    if (t == Clock::time_point{}) return nullptr;
    return (t.time_since_epoch() + steady_to_system_).count();
  };
  nlohmann::json communicators = nlohmann::json::array();
  std::vector<const CoreFlightRing*> rings;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < communicators_.size(); ++i) {
      communicators.push_back({{"id", i},
                               {"group", communicators_[i].first},
                               {"process_index", communicators_[i].second}});
    }
    for (const auto& [core, ring] : rings_) rings.push_back(ring.get());
  }
  nlohmann::json entries = nlohmann::json::array();
  for (const CoreFlightRing* ring : rings) {
    std::lock_guard lock(ring->mu_);
    const uint64_t n = ring->entries_.size();
    for (uint64_t r = ring->next_record_ - n; r < ring->next_record_; ++r) {
      const CoreFlightRing::Entry& e = ring->entries_[r % ring->capacity_];
      const Fingerprint& fp = e.fingerprint;
      const Shape shape = fp.shape();
      const std::span<const int64_t> dims = shape.span();
      nlohmann::json j = {
          {"record_id", e.record_id},
          {"core", ring->core_},
          {"communicator_id", e.communicator_id},
          {"collective_seq_id", fp.sequence},
          {"profiling_name", "vtpu:" + std::string(collective_name(fp.kind))},
          {"fingerprint", fp.to_string()},
          {"input_sizes", nlohmann::json::array({std::vector<int64_t>(dims.begin(), dims.end())})},
          {"input_dtypes", {data_type_name(fp.dtype)}},
          {"bytes", e.bytes},
          {"algorithm", algorithm_name(fp.algorithm)},
          {"state", collective_state_name(e.state)},
          {"time_created_ns", wall_ns(e.created)},
          {"time_discovered_started_ns", wall_ns(e.started)},
          {"time_discovered_completed_ns", wall_ns(e.ended)},
          {"duration_ms", nullptr},
          {"timeout_ms", e.timeout.count()},
          {"error", nullptr},
      };
      if (fp.kind == CollectiveKind::kBarrier) {  // no input
        j["input_sizes"] = j["input_dtypes"] = nlohmann::json::array();
      }
      if (has_reduce_op(fp.kind)) j["reduce_op"] = reduce_op_name(fp.reduce_op);
      if (has_root(fp.kind)) j["root"] = fp.root;
      if (e.ended != Clock::time_point{}) {
        j["duration_ms"] = std::chrono::duration<double, std::milli>(e.ended - e.created).count();
      }
      if (!e.error.empty()) j["error"] = e.error;
      entries.push_back(std::move(j));
    }
  }
  return {{"version", "1"},
          {"reason", reason},
          {"time_dumped_ns", (Clock::now().time_since_epoch() + steady_to_system_).count()},
          {"entries_per_core", options_.entries_per_core},
          {"communicators", std::move(communicators)},
          {"entries", std::move(entries)}};
}

void FlightRecorder::write(const std::string& path, std::string_view reason) const {
  write_output_file("flight recorder dump", path, dump_json(reason).dump(2) + "\n");
}

std::string FlightRecorder::dump_on_failure(std::string_view reason, int process_index) {
  if (options_.dump_dir.empty() || !enabled()) return {};
  {
    std::lock_guard lock(mu_);
    if (dumped_) return {};
    dumped_ = true;
  }
  const std::string path = (std::filesystem::path(options_.dump_dir) /
                            ("vtpu_flight_recorder_" + std::to_string(process_index) + ".json"))
                               .string();
  try {
    write(path, reason);
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vtpu: the flight recorder dump was not written: %s\n", e.what());
    return {};
  }
}

}  // namespace vtpu
