// Seeded allocation workloads for the fragmentation stress harness (`vtpu stress`), as vtpu trace
// events (memory/trace.h), one stream per core. Same options and seed, same events, on every
// platform: randomness is std::mt19937_64 transformed by integer arithmetic only (see
// stress/alloc_workload.h for why no std::*_distribution is used).
//
// Workloads (`StressWorkloadOptions::name`):
//   uniform, lognormal, bimodal
//       the steady-state workload of stress/alloc_workload.h (fill to `live_buffers`, then free a
//       random live buffer and allocate a fresh size) with that size distribution.
//   training_step
//       weights and optimizer state allocated once; then every step: forward allocates each
//       layer's activation (and a scratch buffer freed at once), layer by layer; backward walks
//       the layers in reverse, allocating the weight gradient and the activation gradient and
//       freeing the activation and the previous activation gradient; then the optimizer
//       allocates and frees one temporary per layer and frees the gradients. The shapes (and so
//       the sizes) are fixed for the run, as in a compiled model.
//   variable_batch
//       training_step whose activation sizes scale with a batch fraction drawn per step from
//       {1/8, 2/8, ..., 8/8} (at least min_batch_eighths/8): the pattern that grows PyTorch's
//       cached memory when the batch size or the sequence length changes step to step.
//   kv_cache
//       up to `max_requests` concurrent requests of an inference server. A request starts with a
//       prompt of 1..max_blocks/4 blocks and a target length of up to max_blocks blocks; each
//       tick picks one live request and grows its KV buffer by one block (allocate the larger
//       buffer, then free the old one, as a contiguous cache is reallocated); a request that
//       reaches its length frees its buffer and a new request takes its place.
// Every workload has exactly `events_per_core` events per core: a generator runs whole steps (or
// ticks, or free/alloc pairs) until it reaches that count and the stream is cut there, so the last
// step may be partial and buffers may be live at the end (a training_step stream shorter than its
// setup, 2 x layers events, holds only weights; `vtpu stress` refuses an events_per_core that
// is all setup, stress_setup_events). t_us is the event index (1 us apart). Core c draws
// from std::mt19937_64(stress_core_seed(seed, c)), so cores differ but each is repeatable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vtpu/common/units.h"
#include "vtpu/memory/trace.h"
#include "vtpu/stress/alloc_workload.h"

namespace vtpu {

/// Names accepted by StressWorkloadOptions::name, in the order the CLI lists them: uniform,
/// lognormal, bimodal, training_step, variable_batch, kv_cache.
const std::vector<std::string>& stress_workload_names();

/// Parameters of every stress workload; `name` picks which fields are used. Sizes in bytes. Plain
/// data, thread-compatible.
struct StressWorkloadOptions {
  std::string name = "training_step";
  uint64_t seed = 1;
  uint64_t events_per_core = 100000;  // events per core, exactly (1..kMaxWorkloadEvents)
  // uniform, lognormal, bimodal: the distribution's parameters (its `distribution` field is set
  // from `name`) and the live buffers of the steady state (>= 1).
  SizeOptions sizes;
  uint64_t live_buffers = 1000;
  // training_step, variable_batch.
  int layers = 12;                       // >= 1
  uint64_t activation_bytes = 8 * kMiB;  // mean per-layer activation at full batch, >= 1024
  uint64_t weight_bytes = 2 * kMiB;      // mean per-layer weight, >= 1024
  int min_batch_eighths = 1;             // variable_batch: smallest batch fraction, 1..8
  // kv_cache.
  int max_requests = 32;                // concurrent requests, >= 1
  uint64_t kv_block_bytes = 64 * kKiB;  // bytes per KV block, >= 1
  int max_blocks = 256;                 // longest request, in blocks, >= 4

  /// Throws InvalidArgumentError naming the first field out of range (or an unknown name, listing
  /// the known ones).
  void validate() const;
};

/// One line for reports: the workload, its main parameters and its events per core, with how
/// many of them are setup (stress_setup_events) and how many follow.
std::string describe_stress_workload(const StressWorkloadOptions& options);

/// Events at the start of every core's stream that only set the workload up, before its first
/// steady-state event: the fill of `live_buffers` allocations (uniform, lognormal, bimodal), the
/// weights and optimizer state, 2 x layers allocations (training_step, variable_batch), the
/// first `max_requests` prompts (kv_cache). They count in events_per_core. Pure function; the
/// options need not be valid.
uint64_t stress_setup_events(const StressWorkloadOptions& options);

/// The seed of core `core`'s engine: splitmix64(seed + core * golden ratio), so that adjacent
/// seeds and cores give unrelated streams. Pure function.
uint64_t stress_core_seed(uint64_t seed, int core);

/// The events of core `core` (>= 0; every event carries it). Ids count from 0 on each core and
/// are never reused. Throws InvalidArgumentError for invalid options or more than
/// kMaxWorkloadEvents events. Thread-safe (no shared state).
std::vector<TraceEvent> make_stress_workload(const StressWorkloadOptions& options, int core);

}  // namespace vtpu
