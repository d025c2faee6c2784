// One core's physical HBM, divided into arenas (memory pools) by limits.
//
// A limit is absolute bytes or a fraction of the device's TOTAL HBM, never of what happens to be
// free when the arena is created: the rule jaxlib adopted in 0.4.1 for
// XLA_PYTHON_CLIENT_MEM_FRACTION (before that, the fraction applied to free memory, so the same
// setting gave different pools depending on what else was running). Arenas may not overcommit:
// the limits of the live arenas of one device sum to at most its total.
//
// Example: on a 10000 MiB device, six arenas with fraction 0.15 each get 1500 MiB; a seventh
// fails at creation (9000 + 1500 > 10000 MiB); inside one of them a 1600 MiB allocation fails
// against its 1500 MiB limit with an out-of-memory report.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "vtpu/memory/hbm_arena.h"

namespace vtpu {

/// The size limit of one arena: absolute bytes, or a fraction in (0, 1] of the device total.
class ArenaLimit {
 public:
  /// Throws InvalidArgumentError for 0 bytes.
  static ArenaLimit bytes(uint64_t limit_bytes);
  /// Throws InvalidArgumentError unless 0 < fraction <= 1 (NaN included).
  static ArenaLimit fraction(double fraction);

  /// The limit in bytes on a device of `total_bytes`: the bytes, or round(fraction * total).
  uint64_t resolve(uint64_t total_bytes) const;
  bool is_fraction() const { return fraction_.has_value(); }
  /// "1500 MiB" or "fraction 0.15".
  std::string to_string() const;

 private:
  ArenaLimit() = default;
  std::optional<uint64_t> bytes_;
  std::optional<double> fraction_;
};

/// One core's HBM. Thread-safe: create_arena may be called from any thread; arenas release their
/// share when the last reference to them goes away (they may outlive the device object).
class HbmDevice {
 public:
  /// A device with `total_bytes` of HBM (> 0, else InvalidArgumentError) for core `core_id`.
  HbmDevice(uint64_t total_bytes, int core_id);

  /// Creates an arena whose capacity is `limit` resolved against the device total.
  /// `options.capacity_bytes` and `options.core_id` are overwritten. Throws
  /// ResourceExhaustedError naming the request, the device total and what the live arenas already
  /// hold when the limit does not fit; InvalidArgumentError for a limit that resolves to 0 bytes or
  /// more than the total, and whatever HbmArena's constructor throws.
  std::shared_ptr<HbmArena> create_arena(const ArenaLimit& limit, ArenaOptions options = {});

  uint64_t total_bytes() const { return state_->total_bytes; }
  int core_id() const { return core_id_; }
  /// Sum of the limits of the live arenas, in bytes.
  uint64_t reserved_bytes() const;
  /// Number of live arenas.
  int num_arenas() const;

 private:
  struct State {
    explicit State(uint64_t total) : total_bytes(total) {}
    const uint64_t total_bytes;
    mutable std::mutex mu;
    uint64_t reserved_bytes = 0;  // GUARDED_BY(mu)
    int num_arenas = 0;           // GUARDED_BY(mu)
  };
  std::shared_ptr<State> state_;
  int core_id_;
};

}  // namespace vtpu
