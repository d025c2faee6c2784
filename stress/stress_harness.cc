#include "vtpu/stress/stress_harness.h"

#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/trace.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/stress/core_replay_loop.h"
#include "vtpu/stress/cross_core_frees.h"
#include "vtpu/stress/stress_replay.h"

namespace vtpu {
namespace {

// Host memory estimate (estimate_stress_host_memory), per entry, bytes. A label longer than the
// small-string buffer (15 characters, e.g. "layer12/act_grad") takes a 32-byte heap block.
constexpr uint64_t kLabelHeapBytes = 32;
// A compiled stream's own table of labels and vector headers, per core.
constexpr uint64_t kStreamFixedBytes = 64 * 1024;
// The replayer's per-slot arrays: state 1, arena id 8, requested bytes 8, label index 4,
// slot-by-sequence 4; with --backing also checksum 8 and live index 4.
constexpr uint64_t kReplaySlotBytes = 25;
constexpr uint64_t kBackedSlotBytes = 12;
// The arena per live buffer: its slot (the Live record with its label string, 96 B) and the
// policy's chunk records (32 B for the chunk and a free neighbour's, 64 B).
constexpr uint64_t kArenaLiveBytes = 160;
// The arena's fixed tables (bfc's 4096 size classes, ~260 KiB) and the replayer's own.
constexpr uint64_t kArenaFixedBytes = 320 * 1024;
// A heap plan per buffer: its BufferInterval (with a heap label) and offset, kept, and about as
// much again while planning (order arrays, the interval index, the busy lists).
constexpr uint64_t kPlanBufferBytes = 2 * (sizeof(BufferInterval) + kLabelHeapBytes + 8);
// nlohmann::json of one timeline sample (an object of 5 numbers) and of one worst-moment block
// (6 fields with a label), both with their std::map nodes and malloc headers, and one run's
// summary or per-core figures without them.
constexpr uint64_t kJsonTimelineSampleBytes = 640;
constexpr uint64_t kJsonBlockBytes = 800;
constexpr uint64_t kJsonFiguresBytes = 8 * 1024;

bool is_known_policy(const std::string& name) {
  if (name == "planned") return true;
  const auto& known = known_allocator_policies();
  return std::find(known.begin(), known.end(), name) != known.end();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string num_or_dash(const nlohmann::json& v, const char* f = "%.0f") {
  return v.is_null() ? "-" : fmt(f, v.get<double>());
}

// The search's upper bound of a summary, 0 when no search ran.
uint64_t search_bound(const nlohmann::json& summary) {
  const auto it = summary.find("capacity_search_max_bytes");
  return it == summary.end() || it->is_null() ? 0 : it->get<uint64_t>();
}

// "-" (no search), the capacity found, or ">BOUND" (not found below the bound).
std::string min_capacity_text(const nlohmann::json& summary) {
  if (!summary["min_capacity_bytes"].is_null())
    return format_bytes(summary["min_capacity_bytes"].get<uint64_t>());
  const uint64_t bound = search_bound(summary);
  return bound == 0 ? "-" : ">" + format_bytes(bound);
}

struct StreamPeaks {
  uint64_t live_buffers = 0;  // most buffers live at once
  uint64_t live_bytes = 0;    // most requested bytes live at once
};
StreamPeaks stream_peaks(const CoreStream& s) {
  StreamPeaks p;
  std::vector<uint64_t> bytes(s.num_slots());
  uint64_t buffers = 0, live = 0;
  for (const CoreStream::Op& op : s.ops) {
    if (op.is_alloc) {
      bytes[op.slot] = op.bytes;
      live += op.bytes;
      ++buffers;
    } else {
      live -= bytes[op.slot];
      --buffers;
    }
    p.live_buffers = std::max(p.live_buffers, buffers);
    p.live_bytes = std::max(p.live_bytes, live);
  }
  return p;
}

// The table's defrag column: "off", "on" (on failure) or "growth" (before growth).
std::string defrag_text(const nlohmann::json& run) {
  const std::string mode = run.value(
      "defragment_mode", std::string(run["auto_defragment"].get<bool>() ? "on_failure" : "off"));
  return mode == "before_growth" ? "growth" : mode == "on_failure" ? "on" : "off";
}

uint64_t host_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// Throws InvalidArgumentError when `need` exceeds this machine's RAM, naming the consumers.
void check_host_memory(const StressOptions& o, const StressHostMemory& need) {
  const uint64_t ram = host_ram_bytes();
  if (ram == 0 || need.peak_bytes() <= ram) return;
  const std::string events =
      o.trace_path.empty() ? std::to_string(o.workload.events_per_core) + " events" : "the trace";
  throw InvalidArgumentError("stress: " + count_text(o.cores, "core") + " x " + events +
                             " need about " + format_bytes(need.peak_bytes()) +
                             " of host memory (" + need.breakdown() +
                             "), more than this machine's " + format_bytes(ram) +
                             " (expected fewer --cores or --events, fewer --allocators, or no "
                             "--backing)");
}

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

uint64_t StressHostMemory::peak_bytes() const {
  const uint64_t during_runs =
      sat_add(sat_add(sat_add(streams, plans), sat_add(replay, reports)), backing);
  return std::max(stream_build, during_runs);
}

std::string StressHostMemory::breakdown() const {
  std::string out;
  auto add = [&](const char* name, uint64_t v) {
    if (v == 0) return;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + format_bytes(v);
  };
  add("building the streams", stream_build);
  add("streams", streams);
  add("heap plans", plans);
  add("replay", replay);
  add("reports", reports);
  add("backing", backing);
  return out;
}

StressHostMemory estimate_stress_host_memory(const StressOptions& o, uint64_t events_per_core,
                                             uint64_t live_buffers_per_core,
                                             uint64_t peak_live_bytes_all_cores) {
  const auto cores = static_cast<uint64_t>(std::max(o.cores, 1));
  const uint64_t events = sat_mul(cores, events_per_core);
  // Every allocation is freed at most once, so at least half the events are allocations.
  const uint64_t slots = sat_mul(cores, (events_per_core + 1) / 2);
  const uint64_t runs = sat_mul(o.allocators.size(), o.defrag_modes.size());
  StressHostMemory m;
  m.streams = sat_add(sat_add(sat_mul(events, sizeof(CoreStream::Op)), sat_mul(slots, 8)),
                      sat_mul(cores, kStreamFixedBytes));
  if (o.trace_path.empty()) {
    // make_stress_workload's events of all cores (labels on their allocations), then compiled.
    m.stream_build = sat_add(
        sat_add(sat_mul(events, sizeof(TraceEvent)), sat_mul(slots, kLabelHeapBytes)), m.streams);
  }
  if (std::find(o.allocators.begin(), o.allocators.end(), "planned") != o.allocators.end())
    m.plans = sat_mul(slots, kPlanBufferBytes);
  const uint64_t slot_bytes = kReplaySlotBytes + (o.backing ? kBackedSlotBytes : 0);
  // One float per latency_sample_every events, and the summary's pooled copy.
  const uint64_t latency =
      o.latency_sample_every == 0 ? 0 : sat_mul(events, 2 * sizeof(float)) / o.latency_sample_every;
  const uint64_t samples =
      std::min<uint64_t>(events_per_core, static_cast<uint64_t>(std::max(o.timeline_samples, 0)));
  // Per core: the timeline and the worst-moment map (a block per live chunk and hole).
  const uint64_t details =
      sat_add(sat_mul(samples + 1, sizeof(StressTimelineSample)),
              sat_mul(2 * live_buffers_per_core + 1, sizeof(StressBlock) + kLabelHeapBytes));
  m.replay = sat_add(sat_add(sat_mul(slots, slot_bytes), latency),
                     sat_mul(cores, sat_add(sat_mul(live_buffers_per_core, kArenaLiveBytes),
                                            sat_add(details, kArenaFixedBytes))));
  const uint64_t per_core_run =
      sat_add(sat_add(sat_mul(samples + 1, kJsonTimelineSampleBytes), kJsonFiguresBytes),
              sat_mul(2 * live_buffers_per_core + 1, kJsonBlockBytes));
  m.reports = sat_mul(runs, sat_add(sat_mul(cores, per_core_run), kJsonFiguresBytes));
  if (o.backing) m.backing = peak_live_bytes_all_cores;
  return m;
}

namespace {
// Each mode's JSON name and command-line word.
struct DefragModeNames {
  DefragMode mode;
  const char* name;
  const char* flag;
};
constexpr DefragModeNames kDefragModeNames[] = {
    {DefragMode::kOff, "off", "off"},
    {DefragMode::kOnFailure, "on_failure", "on"},
    {DefragMode::kBeforeGrowth, "before_growth", "growth"},
};
const DefragModeNames& names_of(DefragMode mode) {
  for (const DefragModeNames& n : kDefragModeNames)
    if (n.mode == mode) return n;
  throw InternalError("unknown DefragMode " + std::to_string(static_cast<int>(mode)));
}
}  // namespace

const char* defrag_mode_name(DefragMode mode) { return names_of(mode).name; }

const char* defrag_mode_flag(DefragMode mode) { return names_of(mode).flag; }

int stress_exit_code(const nlohmann::json& report) {
  uint64_t failures = report["load"]["all_reduce_failures"].get<uint64_t>();
  for (const auto& run : report["runs"]) {
    failures += run["summary"]["integrity_failures"].get<uint64_t>();
    // A run that failed, or one that could not start (a `planned` heap above --hbm-bytes), fails
    // the exit code too: a CI job asking for that comparison must learn it had none.
    if (run.contains("error")) ++failures;
  }
  return failures > 0 ? 1 : 0;
}

void StressOptions::validate() const {
  auto fail = [](const std::string& m) { throw InvalidArgumentError("stress: " + m); };
  if (cores < 1 || cores > 1024) fail("cores " + std::to_string(cores) + " (expected 1..1024)");
  if (trace_path.empty()) {
    workload.validate();
    // A stream that is all setup never reaches the steady state its description names
    // (--events 1000 with --live 1000 would be 1000 allocations and no free).
    const uint64_t setup = stress_setup_events(workload);
    if (workload.events_per_core <= setup) {
      const std::string& w = workload.name;
      const std::string what =
          w == "kv_cache"
              ? "the prompts of the first --max-requests " + std::to_string(setup) + " requests"
          : w == "training_step" || w == "variable_batch"
              ? "the weights and optimizer state of --layers " + std::to_string(workload.layers) +
                    " (" + std::to_string(setup) + " allocations)"
              : "the fill of --live " + std::to_string(setup) + " buffers";
      fail("--events " + std::to_string(workload.events_per_core) + " holds only the setup of " +
           "--workload " + w + ", " + what + ", and no steady-state event (--events counts the " +
           "setup: expected more than " + std::to_string(setup) + ")");
    }
  }
  if (allocators.empty()) fail("no allocator policy given");
  for (const std::string& a : allocators)
    if (!is_known_policy(a))
      fail("unknown allocator policy '" + a +
           "' (expected one of: " + join(known_allocator_policies(), ", ") + ", planned)");
  for (size_t i = 0; i < allocators.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (allocators[i] == allocators[j])
        fail("allocator policy '" + allocators[i] + "' given twice (each policy runs once)");
    }
  }
  if (defrag_modes.empty()) fail("no auto-defragment mode given");
  for (size_t i = 0; i < defrag_modes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (defrag_modes[i] == defrag_modes[j])
        fail(std::string("auto-defragment mode '") + defrag_mode_flag(defrag_modes[i]) +
             "' given twice (each mode runs once)");
    }
  }
  if (trace_path.empty()) {
    // Refuse a run that cannot fit in RAM rather than die of std::bad_alloc (or of the OOM
    // killer) after minutes. run_stress checks again once the streams exist (live counts).
    check_host_memory(*this, estimate_stress_host_memory(*this, workload.events_per_core));
  }
  // Messages name the options as `vtpu stress` takes them, not the fields.
  if (hbm_bytes < 4 * kKiB)
    fail("--hbm-bytes " + std::to_string(hbm_bytes) + " (expected >= 4 KiB = 4096)");
  if (collective_rounds < 0 || collective_rounds > 10000000)
    fail("collective_rounds " + std::to_string(collective_rounds) + " (expected 0..10000000)");
  if (bucket_bytes < 4 || bucket_bytes % 4 != 0 || bucket_bytes > 1 * kGiB)
    fail("--bucket-bytes " + std::to_string(bucket_bytes) +
         " (expected a multiple of 4 in [4, 1 GiB])");
  if (matmul_dim < 1 || matmul_dim > 4096)
    fail("matmul_dim " + std::to_string(matmul_dim) + " (expected 1..4096)");
  if (cross_core_free_per_mille > 1000)
    fail("cross_core_free_per_mille " + std::to_string(cross_core_free_per_mille) +
         " (expected 0..1000)");
  if (cross_core_free_max_lag > 1000000)
    fail("cross_core_free_max_lag " + std::to_string(cross_core_free_max_lag) +
         " (expected 0..1000000 events)");
  if (timeline_samples < 0) fail("timeline_samples must be >= 0");
  if (capacity_search_max_bytes != 0 && capacity_search_max_bytes < 4 * kKiB)
    fail("--capacity-search-max " + std::to_string(capacity_search_max_bytes) +
         " (expected >= 4 KiB = 4096, or 0 for max(4 x --hbm-bytes, 64 GiB))");
}

uint64_t StressOptions::capacity_search_limit() const {
  if (capacity_search_max_bytes != 0) return capacity_search_max_bytes;
  const uint64_t four_hbm = hbm_bytes > UINT64_MAX / 4 ? UINT64_MAX : 4 * hbm_bytes;
  return std::max<uint64_t>(four_hbm, 64 * kGiB);
}

std::string format_stress_progress(const StressOptions::Progress& p) {
  using Phase = StressOptions::Progress::Phase;
  const Phase phase = p.phase.load();
  const uint64_t total = p.total.load();
  const uint64_t done = std::min(p.done.load(), total);
  const std::string run =
      "run " + std::to_string(p.run.load()) + "/" + std::to_string(p.runs.load()) + " ";
  std::string what, counts;
  switch (phase) {
    case Phase::kBuildingStreams:
      return "building the event streams";
    case Phase::kPlanning:
      what = "planning heaps (planned)";
      counts = std::to_string(done) + "/" + count_text(total, "core");
      break;
    case Phase::kReplay:
      what = run + "replay";
      counts = std::to_string(done) + "/" + std::to_string(total) + " events";
      break;
    case Phase::kCapacitySearch:
      what = run + "capacity search";
      counts = std::to_string(done) + "/" + count_text(total, "core") + ", " +
               std::to_string(p.search_replays.load()) + " capacities tried";
      break;
    case Phase::kDone:
      return "done";
  }
  constexpr int kWidth = 20;
  const double fraction = total == 0 ? 0.0 : static_cast<double>(done) / total;
  std::string bar(static_cast<size_t>(fraction * kWidth), '#');
  bar.resize(kWidth, '.');
  // Floor, so that 100% shows only when every unit of the phase is done.
  const auto percent = static_cast<int>(total == 0 ? 0 : done * 100 / total);
  return what + " [" + bar + "] " + std::to_string(percent) + "% " + counts;
}

namespace {

using Phase = StressOptions::Progress::Phase;

// Starts a phase of `total` units on `progress` (may be null; the run number is set before).
void enter_phase(StressOptions::Progress* progress, Phase phase, uint64_t total) {
  if (progress == nullptr) return;
  progress->done.store(0);
  progress->total.store(total);
  progress->search_replays.store(0);
  progress->phase.store(phase);
}

// The streams every run replays, and the report's `workload` object.
struct StressStreams {
  std::vector<CoreStream> streams;
  nlohmann::json workload;
};

// Workload setup from a trace: its alloc and free events, core c -> c % cores.
StressStreams trace_streams(const StressOptions& options) {
  StressStreams out;
  uint64_t skipped_events = 0;
  const Trace trace = read_trace(options.trace_path);
  out.streams =
      compile_core_streams(trace.events, options.cores, options.trace_path, &skipped_events);
  // A trace with nothing to replay (empty, header only, or only oom and defragment records) is
  // an error rather than a table of zeros that looks like a result.
  if (trace.events.size() == skipped_events) {
    throw InvalidArgumentError("trace '" + options.trace_path + "' has no alloc or free events (" +
                               std::to_string(trace.events.size()) +
                               " events in all; expected at least one to replay)");
  }
  // The skipped oom and defragment records are counted where the user reads.
  const uint64_t total = trace.events.size();
  std::string counts = std::to_string(total) + (total == 1 ? " event" : " events");
  if (skipped_events > 0) {
    counts += ", " + std::to_string(skipped_events) + " oom/defragment " +
              (skipped_events == 1 ? "event" : "events") + " skipped";
  }
  out.workload = {{"name", "trace"},
                  {"description", "trace " + options.trace_path + " (" + counts + ")"},
                  {"seed", nullptr},
                  {"trace_path", options.trace_path},
                  {"skipped_events", skipped_events}};
  return out;
}

// Workload setup from the seeded generators: events_per_core events per core.
StressStreams generated_streams(const StressOptions& options) {
  const int n = options.cores;
  StressStreams out;
  std::vector<TraceEvent> all;
  // Exactly events_per_core per core: reserved once, so growing never holds two copies.
  all.reserve(static_cast<size_t>(n) * options.workload.events_per_core);
  for (int c = 0; c < n; ++c) {
    std::vector<TraceEvent> e = make_stress_workload(options.workload, c);
    all.insert(all.end(), std::make_move_iterator(e.begin()), std::make_move_iterator(e.end()));
  }
  out.streams = compile_core_streams(all, n, options.workload.name);
  out.workload = {{"name", options.workload.name},
                  {"description", describe_stress_workload(options.workload)},
                  {"seed", options.workload.seed},
                  {"trace_path", nullptr}};
  return out;
}

// Checks the host memory again with the streams' live counts known (so the estimate covers the
// arenas, the block maps and the backing too; a trace is first checked here) and returns the
// events of one run over all cores.
uint64_t check_streams_fit(const StressOptions& options, const std::vector<CoreStream>& streams) {
  uint64_t events_per_run = 0;
  uint64_t max_events = 0, max_live_buffers = 0, live_bytes_all_cores = 0;
  for (const CoreStream& s : streams) {
    events_per_run += s.ops.size();
    max_events = std::max<uint64_t>(max_events, s.ops.size());
    const StreamPeaks p = stream_peaks(s);
    max_live_buffers = std::max(max_live_buffers, p.live_buffers);
    live_bytes_all_cores += p.live_bytes;
  }
  check_host_memory(options, estimate_stress_host_memory(options, max_events, max_live_buffers,
                                                         live_bytes_all_cores));
  return events_per_run;
}

// What every run of one run_stress call shares. Only run_stress's thread uses it between runs;
// inside a run each core touches its own entries.
struct StressSession {
  StressSession(const StressOptions& o, const std::vector<CoreStream>& s, Runtime& r)
      : options(o), streams(s), runtime(r) {}
  const StressOptions& options;
  const std::vector<CoreStream>& streams;
  Runtime& runtime;
  uint64_t events_per_run = 0;
  uint64_t search_limit = 0;
  std::vector<std::shared_ptr<const HeapPlan>> plans;  // per core; null unless `planned` runs
  std::unique_ptr<Communicator> comm;                  // the load's; null without load
  LoadCounters load;
  // The capacity search's per-core results by (policy, defrag mode as the arena uses it).
  std::map<std::pair<std::string, DefragMode>, std::vector<std::optional<uint64_t>>> searched;
};

// Each core plans its own stream, in parallel (plan_heap is thread-safe).
void plan_heaps(StressSession& s) {
  const int n = s.options.cores;
  s.plans.assign(static_cast<size_t>(n), nullptr);
  const auto& a = s.options.allocators;
  if (std::find(a.begin(), a.end(), "planned") == a.end()) return;
  StressOptions::Progress* progress = s.options.progress;
  enter_phase(progress, Phase::kPlanning, static_cast<uint64_t>(n));
  s.runtime.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    s.plans[c] = plan_for_stream(s.streams[c]);
    if (progress != nullptr) progress->done.fetch_add(1);
  });
}

StressReplayOptions replay_options(const StressOptions& options, const std::string& policy,
                                   DefragMode mode) {
  StressReplayOptions ro;
  ro.policy = policy;
  ro.auto_defragment = mode != DefragMode::kOff;
  ro.defragment_before_growth = mode == DefragMode::kBeforeGrowth;
  ro.capacity_bytes = options.hbm_bytes;
  ro.backing = options.backing;
  ro.timeline_samples = options.timeline_samples;
  ro.latency_sample_every = options.latency_sample_every;
  ro.stop_on_oom = options.stop_on_oom;
  ro.concurrent = options.under_load && options.cores > 1;
  return ro;
}

// Replays one run on every core at once (core_replay_loop.h) into `metrics`. Returns what failed,
// empty when nothing did; rethrows an OutOfMemoryError with stop_on_oom.
std::string replay_run(StressSession& s, const std::string& policy,
                       std::vector<std::unique_ptr<CoreReplayer>>& replayers,
                       std::vector<StressCoreMetrics>& metrics) {
  const StressOptions& options = s.options;
  const int n = options.cores;
  enter_phase(options.progress, Phase::kReplay, s.events_per_run);
  const bool cross = options.under_load && n > 1 && options.cross_core_free_per_mille > 0;
  CrossCoreFrees frees(n, options.cross_core_free_max_lag,
                       s.runtime.options().effective_collective_timeout(), replayers);
  const int abort_handler =
      s.runtime.add_abort_handler([&frees](int, const std::exception_ptr&) { frees.abort(); });
  std::string failure;
  try {
    s.runtime.run_spmd([&](CoreContext& ctx) {
      const int c = ctx.core_id();
      metrics[c] = replay_core(ctx, options, policy, s.streams[c], *replayers[c], s.comm.get(),
                               cross ? &frees : nullptr, s.load);
    });
  } catch (const std::exception& e) {
    s.runtime.remove_abort_handler(abort_handler);
    if (options.stop_on_oom && dynamic_cast<const OutOfMemoryError*>(&e) != nullptr) throw;
    failure = std::string("replay failed: ") + e.what();
  } catch (...) {
    s.runtime.remove_abort_handler(abort_handler);
    throw;
  }
  if (failure.empty()) s.runtime.remove_abort_handler(abort_handler);
  replayers.clear();
  if (!failure.empty()) {
    // The partial figures of the cores are not a run's figures: zeros, as for a run that could
    // not start. The aborted group may have left data in its links: a fresh one.
    for (int c = 0; c < n; ++c) {
      metrics[c] = StressCoreMetrics{};
      metrics[c].core = c;
    }
    if (s.comm) s.comm = make_load_communicator(s.runtime);
  }
  return failure;
}

// Fills the metrics' capacity fields from the run's capacity search, run on every core at once
// or shared with an earlier run that searched the same replays. Returns what failed, or empty.
std::string search_capacity(StressSession& s, const std::string& policy, DefragMode mode,
                            const StressReplayOptions& ro_base,
                            std::vector<StressCoreMetrics>& metrics) {
  const int n = s.options.cores;
  StressOptions::Progress* progress = s.options.progress;
  std::string failure;
  // `planned` cannot relocate, so the arena ignores the defrag mode for it: its runs would search
  // exactly the same replays, and share one search.
  const std::pair<std::string, DefragMode> key(policy,
                                               policy == "planned" ? DefragMode::kOff : mode);
  auto found = s.searched.find(key);
  if (found == s.searched.end()) {
    enter_phase(progress, Phase::kCapacitySearch, static_cast<uint64_t>(n));
    std::vector<std::optional<uint64_t>> per_core(static_cast<size_t>(n));
    try {
      s.runtime.run_spmd([&](CoreContext& ctx) {
        const int c = ctx.core_id();
        StressReplayOptions o = ro_base;
        o.heap_plan = s.plans[c];
        per_core[c] = find_min_capacity(s.streams[c], o, s.search_limit,
                                        progress != nullptr ? &progress->search_replays : nullptr);
        if (progress != nullptr) progress->done.fetch_add(1);
      });
      found = s.searched.emplace(key, std::move(per_core)).first;
    } catch (const std::exception& e) {
      failure = std::string("capacity search failed: ") + e.what();
    }
  }
  if (found != s.searched.end()) {
    for (int c = 0; c < n; ++c) {
      metrics[c].min_capacity_bytes = found->second[c];
      metrics[c].capacity_search_max_bytes = s.search_limit;
    }
  }
  return failure;
}

// One (policy, defrag mode) run: set up, replay, capacity search, and its entry of `runs`. A
// failure is recorded in the entry, and the other runs go on.
nlohmann::json run_one(StressSession& s, const std::string& policy, DefragMode mode) {
  const int n = s.options.cores;
  const StressReplayOptions ro_base = replay_options(s.options, policy, mode);
  nlohmann::json run = {{"allocator", policy},
                        {"auto_defragment", ro_base.auto_defragment},
                        {"defragment_mode", defrag_mode_name(mode)}};
  std::vector<std::unique_ptr<CoreReplayer>> replayers(static_cast<size_t>(n));
  std::vector<StressCoreMetrics> metrics(static_cast<size_t>(n));
  for (int c = 0; c < n; ++c) metrics[c].core = c;
  std::string failure;
  try {
    for (int c = 0; c < n; ++c) {
      StressReplayOptions o = ro_base;
      o.heap_plan = s.plans[c];
      replayers[c] = std::make_unique<CoreReplayer>(s.streams[c], o);
    }
  } catch (const InvalidArgumentError& e) {
    // e.g. a planned heap larger than the arena: the run cannot start; say why. Its figures are
    // zeros, one entry per core (as the schema and the HTML renderer expect of every run), and
    // its capacity search runs as every other run's does.
    run["error"] = e.message();
    replayers.clear();
  } catch (const std::exception& e) {
    failure = std::string("setting up the replay failed: ") + e.what();
    replayers.clear();
  }
  if (!run.contains("error") && failure.empty())
    failure = replay_run(s, policy, replayers, metrics);
  if (s.options.search_capacity) {
    const std::string search_failure = search_capacity(s, policy, mode, ro_base, metrics);
    if (failure.empty()) failure = search_failure;
  }
  if (!failure.empty()) {
    run["error"] = failure;
    run["failed"] = true;
  }
  run["summary"] = stress_metrics_json(merge_core_metrics(metrics), false);
  nlohmann::json per_core = nlohmann::json::array();
  for (const StressCoreMetrics& m : metrics) per_core.push_back(stress_metrics_json(m, true));
  run["per_core"] = std::move(per_core);
  return run;
}

// The report document around the runs.
nlohmann::json stress_document(const StressSession& s, nlohmann::json workload,
                               nlohmann::json runs) {
  const StressOptions& options = s.options;
  nlohmann::json doc = {{"format", "vtpu-stress"},          {"version", 1},
                        {"command", options.command},       {"workload", std::move(workload)},
                        {"cores", options.cores},           {"hbm_bytes", options.hbm_bytes},
                        {"under_load", options.under_load}, {"backing", options.backing}};
  doc["load"] = {{"all_reduces", s.load.all_reduces.load()},
                 {"all_reduce_failures", s.load.all_reduce_failures.load()},
                 {"matmuls", s.load.matmuls.load()},
                 {"bucket_bytes", options.under_load ? options.bucket_bytes : 0},
                 {"matmul_dim", options.under_load ? options.matmul_dim : 0},
                 {"cross_core_free_per_mille",
                  options.under_load && options.cores > 1 ? options.cross_core_free_per_mille : 0},
                 {"cross_core_free_max_lag", options.cross_core_free_max_lag}};
  if (options.search_capacity) {
    doc["capacity_search_max_bytes"] = s.search_limit;
  } else {
    doc["capacity_search_max_bytes"] = nullptr;
  }
  doc["runs"] = std::move(runs);
  return doc;
}

}  // namespace

nlohmann::json run_stress(const StressOptions& options) {
  options.validate();
  // The streams, built once: every run replays exactly these.
  StressStreams built =
      options.trace_path.empty() ? generated_streams(options) : trace_streams(options);
  const uint64_t events_per_run = check_streams_fit(options, built.streams);
  if (options.progress != nullptr)
    options.progress->runs.store(options.allocators.size() * options.defrag_modes.size());

  RuntimeOptions ro;
  ro.num_cores = options.cores;
  ro.hbm_bytes_per_core = 1 * kMiB;  // the cores' own arenas are unused: each run makes its own
  ro.hbm_backing = false;
  Runtime runtime(ro);
  StressSession session(options, built.streams, runtime);
  session.events_per_run = events_per_run;
  plan_heaps(session);
  session.search_limit = options.capacity_search_limit();
  if (options.under_load) session.comm = make_load_communicator(runtime);

  nlohmann::json runs = nlohmann::json::array();
  uint64_t run_number = 0;
  for (const std::string& policy : options.allocators) {
    for (const DefragMode mode : options.defrag_modes) {
      if (options.progress != nullptr) options.progress->run.store(++run_number);
      runs.push_back(run_one(session, policy, mode));
    }
  }
  if (options.progress != nullptr) options.progress->phase.store(Phase::kDone);
  return stress_document(session, std::move(built.workload), std::move(runs));
}

std::string format_stress_table(const nlohmann::json& report) {
  std::string out;
  char line[512];
  out += "workload: " + report["workload"]["description"].get<std::string>() + "\n";
  std::snprintf(line, sizeof line, "cores: %d   HBM per core: %s   under load: %s\n",
                report["cores"].get<int>(),
                format_bytes(report["hbm_bytes"].get<uint64_t>()).c_str(),
                report["under_load"].get<bool>() ? "yes" : "no");
  out += line;
  std::snprintf(
      line, sizeof line,
      "%-9s %-6s %10s %12s %12s %8s %9s %8s %10s %9s %6s %6s %9s %9s %7s %10s %12s %10s\n",
      "allocator", "defrag", "events", "peak_resv", "peak_live", "resv/live", "frag_mean",
      "frag_max", "holes_mean", "holes_max", "f_oom", "t_oom", "Mevents/s", "Mev/cpu_s", "defrags",
      "moved", "min_capacity", "integrity");
  out += line;
  for (const nlohmann::json& run : report["runs"]) {
    const nlohmann::json& s = run["summary"];
    if (run.contains("error")) {
      std::snprintf(line, sizeof line, "%-9s %-6s  %s: %s",
                    run["allocator"].get<std::string>().c_str(), defrag_text(run).c_str(),
                    run.value("failed", false) ? "FAILED" : "not run",
                    run["error"].get<std::string>().c_str());
      out += line;
      if (search_bound(s) > 0) out += " (min_capacity " + min_capacity_text(s) + ")";
      out += "\n";
      continue;
    }
    const std::string integrity = std::to_string(s["integrity_failures"].get<uint64_t>()) + "/" +
                                  std::to_string(s["integrity_checks"].get<uint64_t>());
    std::snprintf(
        line, sizeof line,
        "%-9s %-6s %10llu %12s %12s %9s %9.4f %8.4f %10.4f %9.4f %6llu %6llu %9.2f %9.2f %7llu "
        "%10s "
        "%12s %10s\n",
        run["allocator"].get<std::string>().c_str(), defrag_text(run).c_str(),
        static_cast<unsigned long long>(s["events"].get<uint64_t>()),
        format_bytes(s["peak_reserved_bytes"].get<uint64_t>()).c_str(),
        format_bytes(s["peak_live_bytes"].get<uint64_t>()).c_str(),
        num_or_dash(s["reserved_over_live"], "%.3f").c_str(), s["fragmentation_mean"].get<double>(),
        s["fragmentation_max"].get<double>(), s["reserved_fragmentation_mean"].get<double>(),
        s["reserved_fragmentation_max"].get<double>(),
        static_cast<unsigned long long>(s["false_ooms"].get<uint64_t>()),
        static_cast<unsigned long long>(s["true_ooms"].get<uint64_t>()),
        s["events_per_second"].get<double>() / 1e6, s["events_per_cpu_second"].get<double>() / 1e6,
        static_cast<unsigned long long>(s["defragmentations"].get<uint64_t>()),
        format_bytes(s["defrag_bytes_moved"].get<uint64_t>()).c_str(), min_capacity_text(s).c_str(),
        integrity.c_str());
    out += line;
  }
  // With several cores, resv/live is not the quotient of the two peaks beside
  // it (each peak is the largest over cores); say so under the table, as for min_capacity.
  if (report["cores"].get<int>() > 1) {
    out +=
        "resv/live: the worst core's own peak_resv / peak_live; peak_resv and peak_live are each "
        "the largest over cores, possibly from different cores, so their quotient can differ\n";
  }
  uint64_t bound = 0;
  for (const nlohmann::json& run : report["runs"])
    bound = std::max(bound, search_bound(run["summary"]));
  if (bound > 0) {
    out +=
        "min_capacity: the smallest arena per core with no OOM (the largest core's), searched "
        "from peak live up to " +
        format_bytes(bound) + " for every policy; >" + format_bytes(bound) + ": not found below " +
        format_bytes(bound) + " (--capacity-search-max)\n";
  }
  out += "\nlatency, ns (sampled; median / p99 / p99.99):\n";
  std::snprintf(line, sizeof line, "%-9s %-6s %28s %28s %12s\n", "allocator", "defrag", "alloc",
                "free", "defrag_ms");
  out += line;
  for (const nlohmann::json& run : report["runs"]) {
    if (run.contains("error")) continue;
    const nlohmann::json& s = run["summary"];
    auto lat = [](const nlohmann::json& l) {
      return num_or_dash(l["median"]) + " / " + num_or_dash(l["p99"]) + " / " +
             num_or_dash(l["p99_99"]);
    };
    std::snprintf(line, sizeof line, "%-9s %-6s %28s %28s %12.3f\n",
                  run["allocator"].get<std::string>().c_str(), defrag_text(run).c_str(),
                  lat(s["alloc_latency_ns"]).c_str(), lat(s["free_latency_ns"]).c_str(),
                  static_cast<double>(s["defrag_time_ns"].get<uint64_t>()) / 1e6);
    out += line;
  }
  const nlohmann::json& load = report["load"];
  if (report["under_load"].get<bool>()) {
    std::snprintf(line, sizeof line,
                  "\nload: %llu all-reduces of %s (%llu wrong), %llu matmuls %dx%d, cross-core "
                  "frees: %u per mille of frees\n",
                  static_cast<unsigned long long>(load["all_reduces"].get<uint64_t>()),
                  format_bytes(load["bucket_bytes"].get<uint64_t>()).c_str(),
                  static_cast<unsigned long long>(load["all_reduce_failures"].get<uint64_t>()),
                  static_cast<unsigned long long>(load["matmuls"].get<uint64_t>()),
                  load["matmul_dim"].get<int>(), load["matmul_dim"].get<int>(),
                  load["cross_core_free_per_mille"].get<unsigned>());
    out += line;
  }
  return out;
}

}  // namespace vtpu
