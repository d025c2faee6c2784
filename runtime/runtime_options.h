// Options that shape a Runtime: how many virtual cores, how much HBM each has, which allocator
// policy, and the circular-buffer links that collectives use. Loadable from JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace vtpu {

/// JSON keys (all optional; unknown keys are an error):
///   {"num_cores": 8, "hbm_bytes_per_core": "16G" | 17179869184, "allocator": "bfc",
///    "hbm_memory_fraction": 1.0, "auto_defragment": true, "record_memory_events": false,
///    "hbm_backing": true, "pad_arrays": true,
///    "link_slot_bytes": "1M" | 1048576, "link_num_slots": 4, "collective_timeout_ms": 30000,
///    "collective_algorithm": "auto", "pin_threads": "auto",
///    "hardware_profile": "v5e", "vmem_limit_bytes": "16M", "smem_bytes": 0,
///    "accumulator_bytes": 0, "dma_bytes_per_second": 0, "dma_latency_us": 0,
///    "dma_timeout_ms": 30000}
/// Plain data, thread-compatible.
struct RuntimeOptions {
  int num_cores = 8;                                 // virtual TPU cores (threads), 1..1024
  uint64_t hbm_bytes_per_core = uint64_t{16} << 30;  // each core's total HBM, bytes; 16 GiB
  /// Share of each core's total HBM that its default arena gets, in (0, 1]; the rest is left for
  /// arenas made with HbmDevice::create_arena. Always a fraction of the total (jaxlib >= 0.4.1's
  /// rule for XLA_PYTHON_CLIENT_MEM_FRACTION; JAX's GPU default is 0.75, TPUs use all, so 1.0).
  double hbm_memory_fraction = 1.0;
  /// The least default arena, bytes: every allocator policy's granule (memory/bfc_policy.h and
  /// the others). validate() refuses a fraction that leaves less of hbm_bytes_per_core.
  static constexpr uint64_t kMinArenaBytes = 256;
  std::string allocator = "bfc";      // allocator policy of every arena
  bool auto_defragment = true;        // compact an arena when a request fails for fragmentation
  bool record_memory_events = false;  // arenas keep an event log (Runtime::save_memory_event_log)
  bool hbm_backing = true;            // false: metadata-only arenas (no bytes)
  bool pad_arrays = true;  // arrays charge their TPU tiled-layout bytes (false: logical bytes)
  uint64_t link_slot_bytes = uint64_t{1} << 20;  // bytes per circular-buffer slot; default 1 MiB
  int link_num_slots = 4;                        // slots per directed link, 2..1024; default 4
  /// Every collective wait, at most kMaxCollectiveTimeout: collective_timeout_ms of a --config
  /// file, else $VTPU_COLLECTIVE_TIMEOUT_MS (below), else (nullopt) the default that
  /// effective_collective_timeout() scales with the oversubscription. An explicit setting is
  /// never scaled.
  std::optional<std::chrono::milliseconds> collective_timeout = collective_timeout_from_env();
  static constexpr std::chrono::milliseconds kMaxCollectiveTimeout{7LL * 24 * 3600 * 1000};
  static constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{30000};
  /// collective_timeout when set, else default_collective_timeout(num_cores, usable_cpus()) (the
  /// CPUs of the process's affinity mask, common/host.h). Thread-safe.
  std::chrono::milliseconds effective_collective_timeout() const;
  /// The unset timeout: kDefaultCollectiveTimeout x max(1, num_cores / host_cpus), rounded to the
  /// millisecond and capped at kMaxCollectiveTimeout. A wait counts from a core's arrival, so
  /// it includes the time its peers still compute, which grows with the cores that share each
  /// CPU: `train transformer --mesh 1024x1` on 2 CPUs spread one step's compute over more than
  /// 30 s and timed out. E.g. 8 cores on 2 CPUs: 120 s; 3 on 2:
  /// 45 s; 4 on 8: 30 s. Throws InvalidArgumentError for num_cores or host_cpus < 1. Thread-safe.
  static std::chrono::milliseconds default_collective_timeout(int num_cores, int host_cpus);
  /// The defaults of collective_timeout and pin_threads, from the environment as NCCL's NCCL_*
  /// variables give its defaults, so that every command (also those without --config: reshard,
  /// bench) can be told: $VTPU_COLLECTIVE_TIMEOUT_MS (a whole number of milliseconds,
  /// 1..kMaxCollectiveTimeout; unset or empty: nullopt, the scaled default) and
  /// $VTPU_PIN_THREADS ("auto", "on" or "off"; unset or empty: "auto"). A --config file's key
  /// still overrides them. Throw InvalidArgumentError naming the variable and its value when it
  /// is set to anything else. Thread-safe as getenv (no concurrent setenv).
  static std::optional<std::chrono::milliseconds> collective_timeout_from_env();
  static std::string default_pin_threads();
  /// all_reduce algorithm of communicators built from these options: "auto" (default: chosen by
  /// message size and group size) or one of collective_algorithm_names().
  std::string collective_algorithm = "auto";
  /// "auto", "ring", "bidirectional_ring", "recursive_doubling", "torus_2d",
  /// "ring_reduce_scatter" (not deterministic across algorithms; see the README), "direct" (needs
  /// links with direct access, as in process), "hierarchical" (for groups across processes).
  static const std::vector<std::string>& collective_algorithm_names();
  /// CPU affinity of the cores' threads: "auto" (default) pins core i's thread to the i-th CPU
  /// the process may run on when there are at least 2 cores and no more cores than those CPUs,
  /// and leaves the threads to the scheduler otherwise; "on" always pins round-robin (core i to
  /// CPU i mod the CPU count); "off" never pins. Pinning is what MPI launchers do by default
  /// (OpenMPI binds each rank to a core when there are at most two ranks). Without it, Linux's
  /// wake-affine placement tends to keep two threads that wake each other on one CPU, where a
  /// spin cannot see the peer's progress: a 2-core 8-byte all_reduce took 7-8 us unpinned against
  /// 0.8-1.0 us pinned (this machine, `vtpu bench collectives --cores 2 --max-bytes 8 --iters
  /// 2000`). Several vtpu processes at once all pin their core i to the same CPU, and a pinned
  /// thread cannot move away from another program's busy thread on its CPU (a 2-core run next to
  /// CPU-bound work measured 5-300x slower pinned than unpinned); use "off" there,
  /// e.g. VTPU_PIN_THREADS=off for any command.
  std::string pin_threads = default_pin_threads();

  // The TPU memory hierarchy (runtime/memory_space.h, runtime/dma_engine.h, runtime/pallas_call.h).
  /// Hardware profile (runtime/hardware_profile.h): a shipped name ("v4", "v5e", "v5p") or a path
  /// ending in .json. It gives the on-core memory sizes below when they are 0, and the figures of
  /// the kernels' simulated time. Default "v5e".
  std::string hardware_profile = "v5e";
  /// Scoped VMEM per core, bytes (Pallas's vmem_limit_bytes); 0 = the profile's
  /// scoped_vmem_limit_bytes (16 MiB for the shipped profiles). At most 4 GiB.
  uint64_t vmem_limit_bytes = 0;
  uint64_t smem_bytes = 0;         // SMEM per core, bytes; 0 = the profile's
  uint64_t accumulator_bytes = 0;  // accumulator memory per core, bytes; 0 = the profile's
  /// Slows every core's DMA engine (tests, what-if runs): bytes per second, 0 = unthrottled.
  double dma_bytes_per_second = 0.0;
  std::chrono::microseconds dma_latency{0};      // added to every copy; default 0
  std::chrono::milliseconds dma_timeout{30000};  // every DMA semaphore wait; default 30 s

  /// Throws InvalidArgumentError naming the first field out of range and the accepted range.
  void validate() const;

  /// Parses and validates. Throws InvalidArgumentError "<where>: <key>: ..." naming the bad key
  /// or value (common/json_fields.h); `where` names the document in messages.
  static RuntimeOptions from_json(const nlohmann::json& j,
                                  const std::string& where = "runtime options");
  /// Reads a JSON file of at most 1 MiB. Throws NotFoundError or PermissionDeniedError if it
  /// cannot be opened, and InvalidArgumentError if it is not a JSON file (a directory, a FIFO),
  /// not valid JSON (with the parser's position), repeats a key, or fails validation. When `keys`
  /// is given, it receives the keys the file sets (to tell them from defaults).
  static RuntimeOptions load_json_file(const std::string& path,
                                       std::vector<std::string>* keys = nullptr);
  /// Every key; "collective_timeout_ms" is effective_collective_timeout().
  nlohmann::json to_json() const;
};

}  // namespace vtpu
