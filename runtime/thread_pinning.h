// Where the virtual cores' threads run: the outcome of RuntimeOptions::pin_threads for one
// Runtime, recorded so that a measurement can say how it was taken. nccl-tests prints each rank's
// device and CPU affinity in its header for the same reason: on this kind of host pinning alone
// changes a 2-core hand-off about 3.5x (about 1.6 us pinned against 5.5 us unpinned for an 8-byte
// all-reduce), so a benchmark, a calibrated profile and a run are
// comparable only when their pinning is the same.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace vtpu {

/// How the threads of a Runtime's cores were placed. Plain data, thread-compatible.
/// JSON: {"mode": "auto", "cores": 2, "host_cpus": 2, "pinned": true, "cpus": [0, 1]} or
/// {"mode": "auto", "cores": 8, "host_cpus": 2, "pinned": false, "reason": "8 cores > 2 CPUs"}.
struct ThreadPinning {
  std::string mode = "auto";  // RuntimeOptions::pin_threads: "auto", "on" or "off"
  int cores = 0;              // virtual cores of the runtime
  int host_cpus = 0;          // CPUs the process may run on (common/host.h)
  std::vector<int> cpus;      // cpus[i]: the CPU core i's thread is pinned to; empty: not pinned
  std::string reason;         // why the threads are not pinned ("" when pinned)

  bool pinned() const { return !cpus.empty(); }
  /// "auto (pinned: cores 0,1 -> CPUs 0,1)", "on (pinned: cores 0..7 -> CPUs 0,1 round-robin)",
  /// "auto (not pinned: 8 cores > 2 CPUs)", "off (not pinned: pin_threads off)".
  std::string describe() const;
  nlohmann::json to_json() const;
  /// Parses to_json()'s form. Throws InvalidArgumentError naming the key and the value expected;
  /// `where` names the document and `path` the record in it, in messages.
  static ThreadPinning from_json(const nlohmann::json& j,
                                 const std::string& where = "thread pinning",
                                 const std::string& path = {});
  bool operator==(const ThreadPinning&) const = default;
};

/// What pin_threads `mode` does with `cores` cores on the CPUs `cpu_ids` (ascending, as
/// usable_cpu_ids() gives them): the decision Runtime applies (runtime_options.h, pin_threads).
/// "off": not pinned; "auto": not pinned for 1 core (no peer) or more cores than CPUs, else core
/// i on cpu_ids[i]; "on": core i on cpu_ids[i mod size]. Throws InvalidArgumentError for another
/// mode or an empty `cpu_ids`. Pure.
ThreadPinning plan_thread_pinning(const std::string& mode, int cores,
                                  const std::vector<int>& cpu_ids);

}  // namespace vtpu
