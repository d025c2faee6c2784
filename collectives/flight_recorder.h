// The flight recorder, after PyTorch's for NCCL (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT,
// tools/flight_recorder): every core keeps its last N collectives in a bounded ring -- which
// collective and communicator, its sequence number, bytes, dtype, shape, algorithm, start and end
// times, and its state -- so that a hang can be diagnosed after the fact: per core, the dump shows
// the collective it is stuck in and the ones it finished before. It is dumped as JSON on request
// (dump_json) and, once per recorder, at the first timeout or abort of a communicator that uses it
// when a dump directory is set (the file is written before the abort wakes any waiter).
//
// States: scheduled (the core called the collective and has its sequence number), started (it
// passed the group's fingerprint compare and moves data or waits for its peers), then completed,
// failed (this core's error: a timeout, a desync, a bad size) or aborted (another core's failure
// ended it).
//
// Cost per collective: three short critical sections on a mutex of the core's own ring, which
// only that core's threads and a dump take.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "vtpu/collectives/types.h"

namespace vtpu {

enum class CollectiveState : uint8_t { kScheduled, kStarted, kCompleted, kFailed, kAborted };
/// "scheduled", "started", "completed", "failed", "aborted".
std::string_view collective_state_name(CollectiveState s);

/// Plain data.
struct FlightRecorderOptions {
  static constexpr size_t kDefaultEntries = 64;
  static constexpr size_t kMaxEntries = size_t{1} << 20;
  /// Entries each core keeps (its last N collectives), 0..kMaxEntries; 0 turns recording off.
  /// Default 64.
  size_t entries_per_core = kDefaultEntries;
  /// Directory where the first timeout or abort writes vtpu_flight_recorder_<process index>.json;
  /// empty (default): no file.
  std::string dump_dir;
  /// $VTPU_FLIGHT_RECORDER_SIZE (a whole number 0..kMaxEntries; unset or empty: 64) and
  /// $VTPU_FLIGHT_RECORDER_DIR (unset or empty: no file), as TORCH_FR_BUFFER_SIZE and
  /// TORCH_FR_DUMP_TEMP_FILE give PyTorch's. Throws InvalidArgumentError naming the variable and
  /// its value. Thread-safe as getenv.
  static FlightRecorderOptions from_env();
};

class FlightRecorder;

/// One core's last collectives. Thread-safe (the core's program thread and its communication
/// worker both record; a dump reads).
class CoreFlightRing {
 public:
  CoreFlightRing(int core, size_t capacity) : core_(core), capacity_(capacity) {}

 private:
  friend class FlightRecorder;
  friend class FlightRecord;
  struct Entry {
    uint64_t record_id = 0;
    int communicator_id = 0;
    Fingerprint fingerprint;
    uint64_t bytes = 0;
    std::chrono::milliseconds timeout{0};
    CollectiveState state = CollectiveState::kScheduled;
    std::chrono::steady_clock::time_point created, started, ended;  // zero: not yet
    std::string error;
  };
  const int core_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // GUARDED_BY(mu_); record_id r at r % capacity_
  uint64_t next_record_ = 0;    // GUARDED_BY(mu_)
};

/// A handle to one collective's entry, held by the core that runs it; a default one (recording
/// off) does nothing. Thread-compatible.
class FlightRecord {
 public:
  FlightRecord() = default;
  /// Begins an entry on `ring` (null: none) in state scheduled, created at `now`.
  FlightRecord(CoreFlightRing* ring, int communicator_id, const Fingerprint& fingerprint,
               uint64_t bytes, std::chrono::milliseconds timeout,
               std::chrono::steady_clock::time_point now);
  void started();
  /// Ends the entry at `now`: completed, failed or aborted (with `error`).
  void finished(CollectiveState state, std::chrono::steady_clock::time_point now,
                std::string_view error = {});
  /// Ends the entry for the exception being handled: aborted for an AbortedError, else failed,
  /// with its message.
  void failed(const std::exception_ptr& error);

 private:
  void set(CollectiveState state, std::chrono::steady_clock::time_point now,
           std::string_view error);
  CoreFlightRing* ring_ = nullptr;
  uint64_t record_id_ = 0;
};

/// Thread-safe. Rings live as long as the recorder.
class FlightRecorder {
 public:
  explicit FlightRecorder(FlightRecorderOptions options = {});
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  /// The process's recorder, made from FlightRecorderOptions::from_env() on first use; every
  /// communicator records to it unless its options name another (as PyTorch's one per process).
  /// Throws as from_env (and tries again at the next call).
  static std::shared_ptr<FlightRecorder> global();

  const FlightRecorderOptions& options() const { return options_; }
  bool enabled() const { return options_.entries_per_core > 0; }

  /// Adds a communicator to the dump's "communicators" table (its group of core ids and this
  /// process's index); returns its id there: 0, 1, ... in order of creation, so the same in every
  /// process of a run (which all make the same communicators in the same order).
  int add_communicator(const std::vector<int>& group, int process_index);
  /// Core `core`'s ring, made on first use; null when recording is off.
  CoreFlightRing* ring(int core);

  /// The dump: {"version", "reason", "time_dumped_ns", "entries_per_core", "communicators":
  /// [{"id", "group", "process_index"}], "entries": [...]}, entries by core then record_id (see
  /// docs/COLLECTIVES.md for their fields). Times are wall-clock nanoseconds since the epoch.
  nlohmann::json dump_json(std::string_view reason = "on request") const;
  /// Writes dump_json(reason) to `path` (replacing it atomically). Throws InvalidArgumentError
  /// when it cannot be written.
  void write(const std::string& path, std::string_view reason) const;
  /// At a failure: the first call writes the dump to
  /// <dump_dir>/vtpu_flight_recorder_<process_index>.json and returns that path; later calls, or
  /// no dump_dir, return "". Never throws: a failed write is reported on stderr.
  std::string dump_on_failure(std::string_view reason, int process_index);

 private:
  const FlightRecorderOptions options_;
  // steady_clock -> system_clock, fixed at construction so that a dump's times are wall times.
  const std::chrono::nanoseconds steady_to_system_;
  mutable std::mutex mu_;
  std::map<int, std::unique_ptr<CoreFlightRing>> rings_;         // GUARDED_BY(mu_)
  std::vector<std::pair<std::vector<int>, int>> communicators_;  // GUARDED_BY(mu_)
  bool dumped_ = false;                                          // GUARDED_BY(mu_)
};

}  // namespace vtpu
