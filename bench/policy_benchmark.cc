#include "vtpu/bench/policy_benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "vtpu/common/error.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {

namespace {

constexpr uint64_t kNoHandle = ~uint64_t{0};   // slot whose alloc failed (or has not run)
constexpr size_t kMaxThroughputPasses = 1000;  // bound on the repeats of the throughput pass

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One bare policy per core. Tracks chunk bytes in use per core for the peak.
class PolicyBackend {
 public:
  PolicyBackend(std::string_view name, size_t num_cores, const ReplayOptions& o)
      : in_use_(num_cores), peak_(num_cores) {
    for (size_t c = 0; c < num_cores; ++c)
      policies_.push_back(make_allocator_policy(name, o.capacity_bytes, o.policy_options));
  }
  bool alloc(uint32_t core, uint64_t bytes, uint64_t& handle) {
    const std::optional<PolicyAllocation> a = policies_[core]->allocate(bytes);
    if (!a) return false;
    handle = a->offset;
    in_use_[core] += a->chunk_bytes;
    peak_[core] = std::max(peak_[core], in_use_[core]);
    return true;
  }
  void free(uint32_t core, uint64_t handle) { in_use_[core] -= policies_[core]->free(handle); }
  uint64_t peak_bytes_in_use() const {
    uint64_t sum = 0;
    for (uint64_t p : peak_) sum += p;
    return sum;
  }

 private:
  std::vector<std::unique_ptr<AllocatorPolicy>> policies_;
  std::vector<uint64_t> in_use_;
  std::vector<uint64_t> peak_;
};

// One metadata-only arena per core: the policy plus the arena's lock, live table and stats.
class ArenaBackend {
 public:
  ArenaBackend(std::string_view name, const std::vector<int>& cores, const ReplayOptions& o) {
    for (int core : cores) {
      ArenaOptions a;
      a.capacity_bytes = o.capacity_bytes;
      a.policy = std::string(name);
      a.policy_options = o.policy_options;
      a.backing = false;
      a.core_id = core;
      arenas_.push_back(std::make_unique<HbmArena>(a));
    }
  }
  bool alloc(uint32_t core, uint64_t bytes, uint64_t& handle) {
    try {
      handle = arenas_[core]->allocate(bytes);
      return true;
    } catch (const OutOfMemoryError&) {
      return false;
    }
  }
  void free(uint32_t core, uint64_t handle) { arenas_[core]->free(handle); }
  uint64_t peak_bytes_in_use() const {
    uint64_t sum = 0;
    for (const auto& a : arenas_) sum += a->memory_stats().peak_bytes_in_use;
    return sum;
  }

 private:
  std::vector<std::unique_ptr<HbmArena>> arenas_;
};

// Runs ops against one backend, keeping the handle of every slot.
template <typename Backend>
class Replayer {
 public:
  Replayer(Backend& backend, const ReplayProgram& program)
      : backend_(backend), ops_(program.ops()), handles_(program.num_slots(), kNoHandle) {}

  void run(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) step(ops_[i]);
  }

  // Runs [begin, end) in samples of `per` ops and stores a clock read at every boundary.
  void run_stamped(size_t begin, size_t end, size_t per, std::vector<int64_t>& stamps) {
    size_t s = 0;
    stamps[s++] = now_ns();
    size_t i = begin;
    while (i < end) {
      const size_t stop = std::min(end, i + per);
      for (; i < stop; ++i) step(ops_[i]);
      stamps[s++] = now_ns();
    }
  }

  uint64_t ooms() const { return ooms_; }
  uint64_t skipped_frees() const { return skipped_frees_; }

 private:
  void step(const ReplayProgram::Op& op) {
    if (op.is_alloc) {
      if (!backend_.alloc(op.core, op.bytes, handles_[op.slot])) ++ooms_;
    } else if (handles_[op.slot] == kNoHandle) {
      ++skipped_frees_;
    } else {
      backend_.free(op.core, handles_[op.slot]);
    }
  }

  Backend& backend_;
  const std::vector<ReplayProgram::Op>& ops_;
  std::vector<uint64_t> handles_;
  uint64_t ooms_ = 0;
  uint64_t skipped_frees_ = 0;
};

template <typename Backend, typename MakeBackend>
void replay_passes(const ReplayProgram& program, const ReplayOptions& o, MakeBackend make,
                   ReplayResult& r) {
  const size_t begin = program.op_index_of_event(o.timed_from_event);
  const size_t end = program.ops().size();
  const auto per = static_cast<size_t>(o.ops_per_sample);
  r.warmup_ops = begin;
  r.timed_ops = end - begin;
  if (o.measure_latency) {
    r.clock_overhead_ns = measure_clock_overhead_ns(o.clock_overhead_reads);
    Backend backend = make();
    Replayer<Backend> replayer(backend, program);
    replayer.run(0, begin);
    std::vector<int64_t> stamps((end - begin + per - 1) / per + 1);
    replayer.run_stamped(begin, end, per, stamps);
    std::vector<double> samples(stamps.size() - 1);
    for (size_t i = 0; i + 1 < stamps.size(); ++i) {
      samples[i] =
          std::max(0.0, static_cast<double>(stamps[i + 1] - stamps[i]) - r.clock_overhead_ns);
    }
    r.latency = summarize_latencies(std::move(samples));
    r.num_ooms = replayer.ooms();
    r.skipped_frees = replayer.skipped_frees();
    r.peak_bytes_in_use = backend.peak_bytes_in_use();
  }
  if (o.measure_throughput) {
    std::vector<double> seconds;
    double total = 0;
    do {
      Backend backend = make();
      Replayer<Backend> replayer(backend, program);
      replayer.run(0, begin);
      const int64_t t0 = now_ns();
      replayer.run(begin, end);
      const int64_t t1 = now_ns();
      seconds.push_back(static_cast<double>(t1 - t0) * 1e-9);
      total += seconds.back();
      r.num_ooms = replayer.ooms();
      r.skipped_frees = replayer.skipped_frees();
      r.peak_bytes_in_use = backend.peak_bytes_in_use();
    } while (total < o.min_throughput_seconds && end > begin &&
             seconds.size() < kMaxThroughputPasses);
    r.throughput_passes = static_cast<int>(seconds.size());
    r.timed_seconds = summarize_latencies(std::move(seconds)).median_ns;  // the median pass
    r.ops_per_second =
        r.timed_seconds > 0 ? static_cast<double>(r.timed_ops) / r.timed_seconds : 0.0;
  }
}

}  // namespace

ReplayProgram::ReplayProgram(std::span<const TraceEvent> events, const std::string& name) {
  validate_trace_events(events, name);
  num_events_ = events.size();
  std::unordered_map<int, uint32_t> core_index;
  // Live (dense core, id) -> slot. Keyed per core because ids are per core.
  std::vector<std::unordered_map<uint64_t, uint64_t>> live;
  ops_.reserve(events.size());
  event_of_op_.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.op != TraceOp::kAlloc && e.op != TraceOp::kFree) {
      ++skipped_events_;
      continue;
    }
    auto [it, added] = core_index.try_emplace(e.core, static_cast<uint32_t>(cores_.size()));
    if (added) {
      cores_.push_back(e.core);
      live.emplace_back();
    }
    const uint32_t core = it->second;
    if (e.op == TraceOp::kAlloc) {
      live[core].emplace(e.id, num_slots_);
      ops_.push_back(Op{num_slots_++, e.bytes, core, true});
    } else {
      auto slot = live[core].find(e.id);  // present: validate_trace_events checked it
      ops_.push_back(Op{slot->second, 0, core, false});
      live[core].erase(slot);
    }
    event_of_op_.push_back(i);
  }
}

size_t ReplayProgram::op_index_of_event(size_t event_index) const {
  return static_cast<size_t>(
      std::lower_bound(event_of_op_.begin(), event_of_op_.end(), event_index) -
      event_of_op_.begin());
}

ReplayResult replay_benchmark(std::string_view policy, const ReplayProgram& program,
                              const ReplayOptions& options) {
  if (options.ops_per_sample < 1)
    throw InvalidArgumentError("ops_per_sample is " + std::to_string(options.ops_per_sample) +
                               " (expected >= 1)");
  if (options.timed_from_event > program.num_events())
    throw InvalidArgumentError("timed_from_event " + std::to_string(options.timed_from_event) +
                               " is past the end of the " + std::to_string(program.num_events()) +
                               " events");
  // Creating one policy up front reports an unknown name or a bad capacity before any work.
  make_allocator_policy(policy, options.capacity_bytes, options.policy_options);
  ReplayResult r;
  r.policy = std::string(policy);
  r.through_arena = options.through_arena;
  r.ops_per_sample = options.ops_per_sample;
  r.skipped_events = program.skipped_events();
  const size_t num_cores = program.cores().size();
  if (options.through_arena) {
    replay_passes<ArenaBackend>(
        program, options, [&] { return ArenaBackend(policy, program.cores(), options); }, r);
  } else {
    replay_passes<PolicyBackend>(
        program, options, [&] { return PolicyBackend(policy, num_cores, options); }, r);
  }
  return r;
}

ReplayResult steady_state_benchmark(std::string_view policy, const SteadyStateOptions& workload,
                                    ReplayOptions options) {
  const std::vector<TraceEvent> events = make_steady_state_workload(workload);
  const ReplayProgram program(events, "steady-state workload");
  options.timed_from_event = workload.live_buffers;
  options.ops_per_sample = 2;
  return replay_benchmark(policy, program, options);
}

void to_json(nlohmann::json& j, const ReplayResult& r) {
  j = nlohmann::json{{"policy", r.policy},
                     {"via", r.through_arena ? "arena" : "policy"},
                     {"warmup_ops", r.warmup_ops},
                     {"timed_ops", r.timed_ops},
                     {"ops_per_sample", r.ops_per_sample},
                     {"latency", r.latency},
                     {"clock_overhead_ns", r.clock_overhead_ns},
                     {"throughput_passes", r.throughput_passes},
                     {"timed_seconds", r.timed_seconds},
                     {"ops_per_second", r.ops_per_second},
                     {"num_ooms", r.num_ooms},
                     {"skipped_frees", r.skipped_frees},
                     {"skipped_events", r.skipped_events},
                     {"peak_bytes_in_use", r.peak_bytes_in_use}};
}

}  // namespace vtpu
