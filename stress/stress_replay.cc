#include "vtpu/stress/stress_replay.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "vtpu/common/error.h"
#include "vtpu/memory/memory_stats.h"
#include "vtpu/common/latency_summary.h"
#include "vtpu/stress/buffer_contents.h"

namespace vtpu {
namespace {

// CPU time of the calling thread, seconds (POSIX CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::unique_lock<std::mutex> maybe_lock(std::mutex& mu, bool concurrent) {
  return concurrent ? std::unique_lock<std::mutex>(mu) : std::unique_lock<std::mutex>();
}

nlohmann::json latency_json(std::vector<float> samples) {
  nlohmann::json j = nlohmann::json::object();
  if (samples.empty()) {
    j["median"] = nullptr;
    j["p99"] = nullptr;
    j["p99_99"] = nullptr;
    j["samples"] = 0;
    return j;
  }
  const LatencySummary s = summarize_latencies(std::vector<double>(samples.begin(), samples.end()));
  j["median"] = s.median_ns;
  j["p99"] = s.p99_ns;
  j["p99_99"] = s.p9999_ns;
  j["samples"] = s.samples;
  return j;
}

// The order in which compile_core_streams takes the events: by t_us, ties in file order. Each
// trace core's own events are already in that order (validate_trace_events rejects a t_us earlier
// than its core's previous one), so this only interleaves trace cores by the trace's clock. When
// several of them fold onto one virtual core (core % num_cores), a trace written core by core (all
// of core 0, then all of core 2) would otherwise replay core 2's buffers after core 0's had been
// freed and understate the folded peak.
std::vector<size_t> replay_order(std::span<const TraceEvent> events) {
  std::vector<size_t> order(events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return events[a].t_us < events[b].t_us; });
  return order;
}

}  // namespace

std::vector<CoreStream> compile_core_streams(std::span<const TraceEvent> events, int num_cores,
                                             const std::string& name, uint64_t* skipped_events) {
  if (num_cores < 1)
    throw InvalidArgumentError("compile_core_streams: " + std::to_string(num_cores) +
                               " cores (expected >= 1)");
  validate_trace_events(events, name);
  std::vector<CoreStream> streams(static_cast<size_t>(num_cores));
  for (int c = 0; c < num_cores; ++c) streams[c].core = c;
  {
    // Exact sizes first, so that the ops and ids are allocated once, without the up to 2x of
    // vector growth (the host memory estimate, stress/stress_harness.h, counts them exactly).
    std::vector<uint64_t> ops(streams.size()), allocs(streams.size());
    for (const TraceEvent& e : events) {
      if (e.op == TraceOp::kOom || e.op == TraceOp::kDefragment) continue;
      const size_t c = static_cast<size_t>(e.core % num_cores);
      ++ops[c];
      if (e.op == TraceOp::kAlloc) ++allocs[c];
    }
    for (size_t c = 0; c < streams.size(); ++c) {
      streams[c].ops.reserve(ops[c]);
      streams[c].slot_ids.reserve(allocs[c]);
    }
  }
  std::vector<std::unordered_map<std::string, uint32_t>> label_index(streams.size());
  // (trace core, id) -> slot of the live buffer; trace cores are kept apart.
  std::unordered_map<int, std::unordered_map<uint64_t, uint32_t>> live;
  uint64_t skipped = 0;
  for (const size_t index : replay_order(events)) {
    const TraceEvent& e = events[index];
    if (e.op == TraceOp::kOom || e.op == TraceOp::kDefragment) {
      ++skipped;
      continue;
    }
    const size_t c = static_cast<size_t>(e.core % num_cores);
    CoreStream& s = streams[c];
    CoreStream::Op op;
    op.t_us = e.t_us;
    if (e.op == TraceOp::kAlloc) {
      if (s.slot_ids.size() >= UINT32_MAX)
        throw InvalidArgumentError(name + ": more than 2^32-1 allocations on one core");
      op.is_alloc = true;
      op.bytes = e.bytes;
      op.slot = s.num_slots();
      s.slot_ids.push_back(e.id);
      if (!e.label.empty()) {
        auto [it, inserted] =
            label_index[c].emplace(e.label, static_cast<uint32_t>(s.labels.size()));
        if (inserted) s.labels.push_back(e.label);
        op.label = it->second;
      }
      live[e.core][e.id] = op.slot;
    } else {
      auto& m = live[e.core];
      auto it = m.find(e.id);  // validated: the id is live
      op.slot = it->second;
      m.erase(it);
    }
    s.ops.push_back(op);
  }
  if (skipped_events != nullptr) *skipped_events = skipped;
  return streams;
}

std::shared_ptr<const HeapPlan> plan_for_stream(const CoreStream& stream) {
  std::vector<BufferInterval> intervals(stream.num_slots());
  const auto last = static_cast<int64_t>(stream.ops.empty() ? 0 : stream.ops.size() - 1);
  for (size_t i = 0; i < stream.ops.size(); ++i) {
    const CoreStream::Op& op = stream.ops[i];
    BufferInterval& b = intervals[op.slot];
    if (op.is_alloc) {
      b.bytes = op.bytes;
      b.start = static_cast<int64_t>(i);
      b.end = last;
      b.label = stream.labels[op.label];
    } else {
      b.end = std::max(b.start, static_cast<int64_t>(i) - 1);
    }
  }
  return std::make_shared<const HeapPlan>(plan_heap(std::move(intervals)));
}

double reserved_fragmentation_ratio(uint64_t bytes_in_use, uint64_t bytes_reserved) {
  if (bytes_reserved == 0) return 0.0;
  return 1.0 - static_cast<double>(bytes_in_use) / static_cast<double>(bytes_reserved);
}

double StressCoreMetrics::reserved_fragmentation_mean() const {
  return fragmentation_samples == 0
             ? 0.0
             : reserved_fragmentation_sum / static_cast<double>(fragmentation_samples);
}

double StressCoreMetrics::fragmentation_mean() const {
  return fragmentation_samples == 0
             ? 0.0
             : fragmentation_sum / static_cast<double>(fragmentation_samples);
}

double StressCoreMetrics::reserved_over_live() const {
  if (worst_core_reserved_over_live) return *worst_core_reserved_over_live;
  return peak_live_bytes == 0
             ? 0.0
             : static_cast<double>(peak_reserved_bytes) / static_cast<double>(peak_live_bytes);
}

double StressCoreMetrics::events_per_cpu_second() const {
  return cpu_seconds > 0 ? static_cast<double>(events) / cpu_seconds : 0.0;
}

double StressCoreMetrics::events_per_second() const {
  return wall_seconds > 0 ? static_cast<double>(events) / wall_seconds : 0.0;
}

StressCoreMetrics merge_core_metrics(std::span<const StressCoreMetrics> cores) {
  StressCoreMetrics s;
  s.core = -1;
  double rate = 0.0;
  double worst_ratio = 0.0;
  bool all_searched = !cores.empty();
  uint64_t min_capacity = 0;
  for (const StressCoreMetrics& c : cores) {
    s.events += c.events;
    s.allocs += c.allocs;
    s.frees += c.frees;
    s.skipped_frees += c.skipped_frees;
    s.cross_core_frees += c.cross_core_frees;
    s.peak_reserved_bytes = std::max(s.peak_reserved_bytes, c.peak_reserved_bytes);
    worst_ratio = std::max(worst_ratio, c.reserved_over_live());
    s.peak_live_bytes = std::max(s.peak_live_bytes, c.peak_live_bytes);
    s.fragmentation_sum += c.fragmentation_sum;
    s.fragmentation_samples += c.fragmentation_samples;
    s.fragmentation_max = std::max(s.fragmentation_max, c.fragmentation_max);
    s.reserved_fragmentation_sum += c.reserved_fragmentation_sum;
    s.reserved_fragmentation_max =
        std::max(s.reserved_fragmentation_max, c.reserved_fragmentation_max);
    s.false_ooms += c.false_ooms;
    s.true_ooms += c.true_ooms;
    s.alloc_latency_ns.insert(s.alloc_latency_ns.end(), c.alloc_latency_ns.begin(),
                              c.alloc_latency_ns.end());
    s.free_latency_ns.insert(s.free_latency_ns.end(), c.free_latency_ns.begin(),
                             c.free_latency_ns.end());
    s.wall_seconds = std::max(s.wall_seconds, c.wall_seconds);
    s.cpu_seconds += c.cpu_seconds;
    rate += c.events_per_second();
    s.defragmentations += c.defragmentations;
    s.defrag_bytes_moved += c.defrag_bytes_moved;
    s.defrag_time_ns += c.defrag_time_ns;
    if (c.min_capacity_bytes) {
      min_capacity = std::max(min_capacity, *c.min_capacity_bytes);
    } else {
      all_searched = false;
    }
    s.capacity_search_max_bytes =
        std::max(s.capacity_search_max_bytes, c.capacity_search_max_bytes);
    s.integrity_checks += c.integrity_checks;
    s.integrity_failures += c.integrity_failures;
    if (c.stopped_by_oom && !s.stopped_by_oom) s.stopped_by_oom = c.stopped_by_oom;
  }
  if (all_searched) s.min_capacity_bytes = min_capacity;
  s.worst_core_reserved_over_live = worst_ratio;
  // A summary keeps the cores' summed event rate in wall_seconds' place.
  s.wall_seconds = rate > 0 ? static_cast<double>(s.events) / rate : 0.0;
  return s;
}

nlohmann::json stress_metrics_json(const StressCoreMetrics& m, bool with_details) {
  nlohmann::json j = nlohmann::json::object();
  if (with_details) j["core"] = m.core;
  j["events"] = m.events;
  j["allocs"] = m.allocs;
  j["frees"] = m.frees;
  j["skipped_frees"] = m.skipped_frees;
  j["cross_core_frees"] = m.cross_core_frees;
  j["peak_reserved_bytes"] = m.peak_reserved_bytes;
  j["peak_live_bytes"] = m.peak_live_bytes;
  if (m.peak_live_bytes == 0) {
    j["reserved_over_live"] = nullptr;
  } else {
    j["reserved_over_live"] = m.reserved_over_live();
  }
  j["fragmentation_mean"] = m.fragmentation_mean();
  j["fragmentation_max"] = m.fragmentation_max;
  j["reserved_fragmentation_mean"] = m.reserved_fragmentation_mean();
  j["reserved_fragmentation_max"] = m.reserved_fragmentation_max;
  j["false_ooms"] = m.false_ooms;
  j["true_ooms"] = m.true_ooms;
  j["alloc_latency_ns"] = latency_json(m.alloc_latency_ns);
  j["free_latency_ns"] = latency_json(m.free_latency_ns);
  j["events_per_second"] = m.events_per_second();
  j["wall_seconds"] = m.wall_seconds;
  j["cpu_seconds"] = m.cpu_seconds;
  j["events_per_cpu_second"] = m.events_per_cpu_second();
  j["defragmentations"] = m.defragmentations;
  j["defrag_bytes_moved"] = m.defrag_bytes_moved;
  j["defrag_time_ns"] = m.defrag_time_ns;
  if (m.min_capacity_bytes) {
    j["min_capacity_bytes"] = *m.min_capacity_bytes;
  } else {
    j["min_capacity_bytes"] = nullptr;
  }
  // The search's upper bound (null: no search); min_capacity_bytes null with a bound means
  // "not found below capacity_search_max_bytes".
  if (m.capacity_search_max_bytes > 0) {
    j["capacity_search_max_bytes"] = m.capacity_search_max_bytes;
  } else {
    j["capacity_search_max_bytes"] = nullptr;
  }
  j["integrity_checks"] = m.integrity_checks;
  j["integrity_failures"] = m.integrity_failures;
  if (m.stopped_by_oom) j["stopped_by_oom"] = *m.stopped_by_oom;
  if (!with_details) return j;
  nlohmann::json timeline = nlohmann::json::array();
  for (const StressTimelineSample& t : m.timeline) {
    timeline.push_back({{"event", t.event},
                        {"t_us", t.t_us},
                        {"bytes_in_use", t.bytes_in_use},
                        {"bytes_reserved", t.bytes_reserved},
                        {"fragmentation", t.fragmentation}});
  }
  j["timeline"] = std::move(timeline);
  if (!m.worst.captured) {
    j["worst"] = nullptr;
    return j;
  }
  nlohmann::json blocks = nlohmann::json::array();
  for (const StressBlock& b : m.worst.blocks) {
    if (b.used) {
      blocks.push_back({{"offset", b.offset},
                        {"bytes", b.bytes},
                        {"state", "used"},
                        {"label", b.label},
                        {"id", b.id},
                        {"requested_bytes", b.requested_bytes}});
    } else {
      blocks.push_back({{"offset", b.offset}, {"bytes", b.bytes}, {"state", "free"}});
    }
  }
  j["worst"] = {{"event", m.worst.event},
                {"t_us", m.worst.t_us},
                {"fragmentation", m.worst.fragmentation},
                {"reserved_fragmentation", m.worst.reserved_fragmentation},
                {"capacity_bytes", m.worst.capacity_bytes},
                {"blocks", std::move(blocks)}};
  return j;
}

CoreReplayer::CoreReplayer(const CoreStream& stream, StressReplayOptions options)
    : stream_(stream), options_(std::move(options)) {
  ArenaOptions a;
  a.capacity_bytes = options_.capacity_bytes;
  a.policy = options_.policy;
  // A core with no allocations (a trace's events all on other cores) needs no plan: its arena
  // stays empty whatever the policy, and a planned policy cannot be built from an empty plan.
  if (a.policy == "planned" && stream.num_slots() == 0) a.policy = "first_fit";
  a.policy_options.heap_plan = options_.heap_plan;
  a.policy_options.planned_skip_failed = true;  // a failed allocation is skipped, never retried
  a.backing = options_.backing;
  a.core_id = stream.core;
  a.auto_defragment = options_.auto_defragment;
  a.defragment_before_growth = options_.defragment_before_growth;
  a.name = "stress";
  arena_ = std::make_unique<HbmArena>(a);
  const uint32_t n = stream.num_slots();
  state_.assign(n, SlotState::kPending);
  buffer_.assign(n, 0);
  requested_.assign(n, 0);
  slot_label_.assign(n, 0);
  if (options_.backing) {
    checksum_.assign(n, 0);
    live_index_.assign(n, 0);
  }
  slot_of_seq_.reserve(n);
  if (options_.timeline_samples > 0) {
    const uint64_t ops = stream.ops.size();
    const auto samples = static_cast<uint64_t>(options_.timeline_samples);
    timeline_stride_ = std::max<uint64_t>(1, (ops + samples - 1) / samples);
    until_sample_ = 1;  // sample after event 0, then every timeline_stride_ events
    m_.timeline.reserve(std::min<uint64_t>(ops, samples) + 1);
  }
  if (options_.latency_sample_every > 0) clock_overhead_ns_ = measure_clock_overhead_ns(2000);
  m_.core = stream.core;
  m_.worst.capacity_bytes = arena_->capacity_bytes();
}

CoreReplayer::~CoreReplayer() = default;

void CoreReplayer::begin() {
  start_ = std::chrono::steady_clock::now();
  start_cpu_seconds_ = thread_cpu_seconds();
}

bool CoreReplayer::is_live(uint32_t slot) const {
  auto lock = maybe_lock(mu_, options_.concurrent);
  return state_[slot] == SlotState::kLive;
}

void CoreReplayer::run_op(size_t i) {
  auto lock = maybe_lock(mu_, options_.concurrent);
  if (stopped_) return;
  const CoreStream::Op& op = stream_.ops[i];
  ++m_.events;
  last_op_ = i;
  if (op.is_alloc) {
    alloc_locked(op, i);
  } else {
    free_locked(op.slot, i, op.t_us, false);
  }
}

void CoreReplayer::free_slot(uint32_t slot) {
  auto lock = maybe_lock(mu_, options_.concurrent);
  ++m_.events;
  // A cross-core free has no index of its own: it is sampled under the owner's latest event.
  // It is stamped with the owner's latest op (its index and time), not a count of events.
  const size_t i = last_op_;
  free_locked(slot, i, i < stream_.ops.size() ? stream_.ops[i].t_us : 0.0, true);
}

void CoreReplayer::alloc_locked(const CoreStream::Op& op, size_t i) {
  const bool timed =
      options_.latency_sample_every > 0 && alloc_counter_++ % options_.latency_sample_every == 0;
  std::optional<ArenaPlacement> p;
  ArenaFreeSpace fs;
  // The arena keeps labels only for --stop-on-oom, whose report lists the largest live buffers
  // by label; otherwise the hot path copies no strings (the block map maps chunks to slots).
  auto label = [&] { return options_.stop_on_oom ? stream_.labels[op.label] : std::string(); };
  if (timed) {
    std::string l = label();
    const auto t0 = std::chrono::steady_clock::now();
    p = arena_->try_allocate(op.bytes, std::move(l), &fs);
    const auto t1 = std::chrono::steady_clock::now();
    const double ns =
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    m_.alloc_latency_ns.push_back(static_cast<float>(std::max(0.0, ns - clock_overhead_ns_)));
  } else {
    p = arena_->try_allocate(op.bytes, label(), &fs);
  }
  if (!p) {
    state_[op.slot] = SlotState::kFailed;
    const MemoryStats s = arena_->memory_stats();
    if (s.num_fragmentation_ooms > seen_fragmentation_ooms_) {
      ++m_.false_ooms;
      seen_fragmentation_ooms_ = s.num_fragmentation_ooms;
    } else {
      ++m_.true_ooms;
    }
    const std::string what = "allocation of " + std::to_string(op.bytes) + " bytes (trace id " +
                             std::to_string(stream_.slot_ids[op.slot]) + ", label '" +
                             stream_.labels[op.label] + "') at event " + std::to_string(i) +
                             " on core " + std::to_string(stream_.core);
    if (options_.stop_on_oom) {
      m_.stopped_by_oom = what;
      stopped_ = true;
      arena_->allocate(op.bytes, stream_.labels[op.label]);  // throws with the full report
      throw InternalError("out-of-memory of " + what + " did not repeat with a report");
    }
    if (options_.stop_at_first_oom) {
      m_.stopped_by_oom = what;
      stopped_ = true;
      return;
    }
    after_event_locked(i, op.t_us, fs, true);
    return;
  }
  state_[op.slot] = SlotState::kLive;
  buffer_[op.slot] = p->id;
  requested_[op.slot] = op.bytes;
  slot_label_[op.slot] = op.label;
  if (slot_of_seq_.size() < p->seq) slot_of_seq_.resize(p->seq);
  slot_of_seq_[p->seq - 1] = op.slot;
  ++m_.allocs;
  live_requested_bytes_ += op.bytes;
  m_.peak_live_bytes = std::max(m_.peak_live_bytes, live_requested_bytes_);
  m_.peak_reserved_bytes = std::max(m_.peak_reserved_bytes, p->offset + p->chunk_bytes);
  ends_.emplace_back(p->offset + p->chunk_bytes, op.slot);
  std::push_heap(ends_.begin(), ends_.end());
  extent_ = std::max(extent_, p->offset + p->chunk_bytes);
  if (options_.backing) {
    std::byte* data = arena_->data(p->id);
    const uint64_t seed = mix64((static_cast<uint64_t>(stream_.core) << 40) ^ op.slot);
    fill_seeded(data, op.bytes, seed);
    checksum_[op.slot] = checksum_bytes(data, op.bytes);
    live_index_[op.slot] = static_cast<uint32_t>(live_slots_.size());
    live_slots_.push_back(op.slot);
  }
  after_event_locked(i, op.t_us, fs, true);
}

void CoreReplayer::free_locked(uint32_t slot, size_t i, double t_us, bool cross) {
  if (state_[slot] != SlotState::kLive) {  // its allocation failed (or stopped before it)
    ++m_.skipped_frees;
    return;
  }
  if (options_.backing) {
    verify_locked(slot);
    const uint32_t pos = live_index_[slot];
    live_slots_[pos] = live_slots_.back();
    live_index_[live_slots_[pos]] = pos;
    live_slots_.pop_back();
  }
  const BufferId id = buffer_[slot];
  ArenaFreeSpace fs;
  const bool timed =
      options_.latency_sample_every > 0 && free_counter_++ % options_.latency_sample_every == 0;
  if (timed) {
    const auto t0 = std::chrono::steady_clock::now();
    arena_->free(id, &fs);
    const auto t1 = std::chrono::steady_clock::now();
    const double ns =
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    m_.free_latency_ns.push_back(static_cast<float>(std::max(0.0, ns - clock_overhead_ns_)));
  } else {
    arena_->free(id, &fs);
  }
  state_[slot] = SlotState::kFreed;
  update_extent_locked();
  ++m_.frees;
  if (cross) ++m_.cross_core_frees;
  live_requested_bytes_ -= requested_[slot];
  after_event_locked(i, t_us, fs, !cross);
}

void CoreReplayer::after_event_locked(size_t i, double t_us, const ArenaFreeSpace& fs,
                                      bool own_op) {
  if (fs.num_defragmentations != seen_defragmentations_) {
    seen_defragmentations_ = fs.num_defragmentations;
    rebuild_ends_locked();  // the compaction moved every chunk
    if (options_.backing) verify_all_locked();
  }
  const double frag = fragmentation_ratio(fs.largest_free_block_bytes, fs.total_free_bytes);
  const double reserved_frag = reserved_fragmentation_ratio(fs.bytes_in_use, extent_);
  m_.fragmentation_sum += frag;
  m_.reserved_fragmentation_sum += reserved_frag;
  ++m_.fragmentation_samples;
  m_.fragmentation_max = std::max(m_.fragmentation_max, frag);
  m_.reserved_fragmentation_max = std::max(m_.reserved_fragmentation_max, reserved_frag);
  if (options_.track_worst && reserved_frag > captured_fragmentation_ + 1e-3)
    capture_worst_locked(i, t_us, frag, reserved_frag);
  // Timeline samples come from the core's own ops only, so their event index strictly increases
  // (a cross-core free lands between two of them and is seen by the next sample).
  if (own_op && options_.timeline_samples > 0 &&
      (i % timeline_stride_ == 0 || i + 1 == stream_.ops.size())) {
    m_.timeline.push_back({i, t_us, fs.bytes_in_use, extent_, frag});
  }
}

bool CoreReplayer::verify_locked(uint32_t slot) {
  ++m_.integrity_checks;
  const std::byte* data = arena_->data(buffer_[slot]);
  if (checksum_bytes(data, requested_[slot]) == checksum_[slot]) return true;
  ++m_.integrity_failures;
  return false;
}

void CoreReplayer::verify_all_locked() {
  for (uint32_t slot : live_slots_) verify_locked(slot);
}

void CoreReplayer::rebuild_ends_locked() {
  ends_.clear();
  // HbmArena numbers its allocations from 1 in the order it makes them (ArenaPlacement::seq), and
  // a chunk record's alloc_seq is that number, which maps back to a slot.
  for (const MemoryChunkRecord& r : arena_->chunk_records()) {
    if (r.in_use && r.alloc_seq >= 1 && r.alloc_seq <= slot_of_seq_.size())
      ends_.emplace_back(r.offset + r.chunk_bytes, slot_of_seq_[r.alloc_seq - 1]);
  }
  std::make_heap(ends_.begin(), ends_.end());
  update_extent_locked();
}

void CoreReplayer::update_extent_locked() {
  auto freed = [this](const std::pair<uint64_t, uint32_t>& e) {
    return state_[e.second] != SlotState::kLive;
  };
  const uint64_t live = m_.allocs - m_.frees;
  if (ends_.size() > 2 * live + 1024) {  // mostly freed entries: keep the live ones
    ends_.erase(std::remove_if(ends_.begin(), ends_.end(), freed), ends_.end());
    std::make_heap(ends_.begin(), ends_.end());
  }
  while (!ends_.empty() && freed(ends_.front())) {
    std::pop_heap(ends_.begin(), ends_.end());
    ends_.pop_back();
  }
  extent_ = ends_.empty() ? 0 : ends_.front().first;
}

void CoreReplayer::capture_worst_locked(size_t i, double t_us, double frag, double reserved_frag) {
  captured_fragmentation_ = reserved_frag;
  StressWorstMoment& w = m_.worst;
  w.captured = true;
  w.event = i;
  w.t_us = t_us;
  w.fragmentation = frag;
  w.reserved_fragmentation = reserved_frag;
  w.blocks.clear();
  // HbmArena numbers its allocations from 1 in the order it makes them (ArenaPlacement::seq), and
  // a chunk record's alloc_seq is that number, which maps back to a slot.
  for (const MemoryChunkRecord& r : arena_->chunk_records()) {
    StressBlock b;
    b.offset = r.offset;
    b.bytes = r.chunk_bytes;
    b.used = r.in_use;
    if (r.in_use && r.alloc_seq >= 1 && r.alloc_seq <= slot_of_seq_.size()) {
      const uint32_t slot = slot_of_seq_[r.alloc_seq - 1];
      b.id = stream_.slot_ids[slot];
      b.requested_bytes = requested_[slot];
      b.label = stream_.labels[slot_label_[slot]];
    }
    w.blocks.push_back(std::move(b));
  }
}

bool CoreReplayer::run_all() {
  begin();
  const size_t n = stream_.ops.size();
  for (size_t i = 0; i < n && !stopped_; ++i) run_op(i);
  return !stopped_;
}

StressCoreMetrics CoreReplayer::finish() {
  auto lock = maybe_lock(mu_, options_.concurrent);
  m_.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  m_.cpu_seconds = thread_cpu_seconds() - start_cpu_seconds_;
  if (options_.backing) verify_all_locked();
  const MemoryStats s = arena_->memory_stats();
  m_.defragmentations = s.num_defragmentations;
  m_.defrag_bytes_moved = s.defrag_bytes_moved;
  m_.defrag_time_ns = s.defrag_time_ns;
  return m_;
}

std::optional<uint64_t> find_min_capacity(const CoreStream& stream, const StressReplayOptions& base,
                                          uint64_t max_capacity_bytes,
                                          std::atomic<uint64_t>* replays) {
  StressReplayOptions o = base;
  o.backing = false;
  o.timeline_samples = 0;
  o.latency_sample_every = 0;
  o.track_worst = false;
  o.stop_on_oom = false;
  o.stop_at_first_oom = true;
  o.concurrent = false;
  uint64_t peak_live = 0;
  uint64_t live = 0;
  std::vector<uint64_t> bytes(stream.num_slots());
  for (const CoreStream::Op& op : stream.ops) {
    if (op.is_alloc) {
      bytes[op.slot] = op.bytes;
      live += op.bytes;
      peak_live = std::max(peak_live, live);
    } else {
      live -= bytes[op.slot];
    }
  }
  if (peak_live == 0) return 0;
  // Above the bound even the peak live bytes do not fit: a first try there would return a
  // capacity past max_capacity_bytes.
  if (peak_live > max_capacity_bytes) return std::nullopt;
  auto completes = [&](uint64_t capacity) {
    o.capacity_bytes = capacity;
    if (replays != nullptr) replays->fetch_add(1, std::memory_order_relaxed);
    try {
      CoreReplayer r(stream, o);
      return r.run_all();
    } catch (const InvalidArgumentError&) {
      return false;  // below the policy's minimum, or below a planned heap
    }
  };
  // `planned` places every buffer where its plan says, whatever the capacity,
  // so the plan's heap is the exact answer (the bisection reported up to its tolerance above it).
  if (o.policy == "planned" && o.heap_plan != nullptr) {
    const uint64_t heap = o.heap_plan->heap_bytes();
    if (heap > max_capacity_bytes) return std::nullopt;
    if (completes(heap)) return heap;
  }
  // Every capacity tried is a multiple of kCapacitySearchGranuleBytes (but
  // the bound itself, when it is not), so the answer is a size one would give an arena, not an
  // odd byte count such as 72294241.
  constexpr uint64_t kGranule = kCapacitySearchGranuleBytes;
  const auto round_up = [&](uint64_t bytes) {  // to a multiple, or to the bound if above it
    if (bytes >= max_capacity_bytes) return max_capacity_bytes;
    const uint64_t short_by = (kGranule - bytes % kGranule) % kGranule;
    return max_capacity_bytes - bytes < short_by ? max_capacity_bytes : bytes + short_by;
  };
  uint64_t lo = (peak_live - 1) / kGranule * kGranule;  // fails: the live bytes alone do not fit
  uint64_t hi = std::min(max_capacity_bytes, round_up(peak_live));
  while (!completes(hi)) {
    lo = hi;
    if (hi >= max_capacity_bytes) return std::nullopt;
    hi = hi > max_capacity_bytes / 2 ? max_capacity_bytes : hi * 2;
  }
  while (hi - lo > std::max<uint64_t>(kGranule, hi / 1000)) {
    const uint64_t mid = round_up(lo + (hi - lo) / 2);  // lo < mid < hi: lo is a multiple
    if (mid >= hi) break;
    if (completes(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

}  // namespace vtpu
