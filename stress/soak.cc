#include "vtpu/stress/soak.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <utility>

#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/common/strings.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/stress/buffer_contents.h"
#include "vtpu/stress/core_replay_loop.h"

namespace vtpu {

void SoakOptions::validate() const {
  auto bad = [](const std::string& what) { throw InvalidArgumentError("soak " + what); };
  if (cores < 1 || cores > 1024) bad(format_text("cores %d (expected 1..1024)", cores));
  if (!(seconds > 0.0 && seconds <= 1e7))
    bad(format_text("seconds %g (expected > 0 and <= 1e7)", seconds));
  const auto& known = known_allocator_policies();
  if (std::find(known.begin(), known.end(), policy) == known.end())
    bad("policy '" + policy + "' (expected one that can relocate: " + join(known, ", ") + ")");
  if (bucket_bytes < 4 || bucket_bytes % 4 != 0)
    bad(format_text("bucket bytes %llu (expected a multiple of 4, >= 4)",
                    static_cast<unsigned long long>(bucket_bytes)));
  if (hbm_bytes < 4 * bucket_bytes || hbm_bytes < 64 * kKiB)
    bad(format_text("hbm bytes %llu (expected >= 64 KiB and >= 4 x the bucket, %llu)",
                    static_cast<unsigned long long>(hbm_bytes),
                    static_cast<unsigned long long>(4 * bucket_bytes)));
  if (!(occupancy > 0.0 && occupancy <= 1.0))
    bad(format_text("occupancy %g (expected (0, 1])", occupancy));
  if (ops_per_round < 1) bad(format_text("ops per round %d (expected >= 1)", ops_per_round));
  if (cross_core_per_mille > 1000)
    bad(format_text("cross-core frees %u per mille (expected 0..1000)", cross_core_per_mille));
  sizes.validate();
}

SoakCounters& SoakCounters::operator+=(const SoakCounters& o) {
  allocations += o.allocations;
  frees += o.frees;
  cross_core_frees += o.cross_core_frees;
  ooms += o.ooms;
  fragmentation_ooms += o.fragmentation_ooms;
  compactions += o.compactions;
  buffers_moved += o.buffers_moved;
  bytes_moved += o.bytes_moved;
  checksum_checks += o.checksum_checks;
  checksum_mismatches += o.checksum_mismatches;
  lost_buffers += o.lost_buffers;
  all_reduces += o.all_reduces;
  all_reduce_failures += o.all_reduce_failures;
  peak_live_buffers = std::max(peak_live_buffers, o.peak_live_buffers);
  return *this;
}

namespace {

// A live churn buffer as its core tracks it.
struct Tracked {
  BufferId id = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // of the contents written (or, after a mismatch, of what it then held)
  bool lost = false;      // the arena no longer knows it (counted once)
};

// Buffers the previous core handed over for this core to free. Thread-safe.
class Inbox {
 public:
  void push(const Tracked& t) {
    std::lock_guard lock(mu_);
    items_.push_back(t);
  }
  std::vector<Tracked> take() {
    std::lock_guard lock(mu_);
    return std::exchange(items_, {});
  }

 private:
  std::mutex mu_;
  std::vector<Tracked> items_;  // GUARDED_BY(mu_)
};

// What every core's loop shares: arenas[c] and inboxes[c] belong to core c.
struct SoakShared {
  const SoakOptions& options;
  SizeSampler sampler;
  std::vector<std::shared_ptr<HbmArena>> arenas;
  std::vector<Inbox> inboxes;
  std::unique_ptr<Communicator> comm;
  std::chrono::steady_clock::time_point deadline;
};

// One core's soak loop (the model in soak.h). Only core `core` calls it.
class CoreSoak {
 public:
  CoreSoak(SoakShared& s, int core)
      : s_(s),
        o_(s.options),
        core_(core),
        next_((core + 1) % s.options.cores),
        arena_(*s.arenas[core]),
        rng_(mix64(s.options.seed + static_cast<uint64_t>(core))),
        limit_(static_cast<uint64_t>(
            o_.occupancy * static_cast<double>(arena_.capacity_bytes() - o_.bucket_bytes))) {}

  // Runs rounds until the stop vote; returns the counters and sets *rounds.
  SoakCounters run(CoreContext& ctx, uint64_t* rounds) {
    for (;;) {
      for (int k = 0; k < o_.ops_per_round; ++k) churn_step();
      bucket_round(ctx);
      ++*rounds;
      if (vote(ctx, std::chrono::steady_clock::now() >= s_.deadline)) break;
    }
    // After the last vote no core hands a buffer over, so this inbox is complete; the next vote
    // is passed only when every core has freed what it held of another's.
    drain_inbox();
    vote(ctx, false);
    finish();
    return k_;
  }

 private:
  void churn_step() {
    drain_inbox();
    const uint64_t size = std::max<uint64_t>(1, std::min(s_.sampler.sample(rng_), limit_));
    while (!live_.empty() && live_bytes_ + size > limit_) free_one();
    ArenaFreeSpace after;
    const std::optional<ArenaPlacement> p = arena_.try_allocate(size, {}, &after);
    after_allocation(after);
    if (!p) {
      ++k_.ooms;
      return;
    }
    Tracked t{p->id, size, 0, false};
    std::byte* data = arena_.data(t.id);
    fill_seeded(data, size, mix64(rng_()));
    t.checksum = checksum_bytes(data, size);
    live_.push_back(t);
    live_bytes_ += size;
    ++k_.allocations;
    k_.peak_live_buffers = std::max<uint64_t>(k_.peak_live_buffers, live_.size());
  }

  // Frees a uniformly chosen live buffer, or (when `may_hand_off`) hands it to the next core.
  void free_one(bool may_hand_off = true) {
    const size_t i = uniform_uint64(rng_, 0, live_.size() - 1);
    Tracked t = live_[i];
    live_[i] = live_.back();
    live_.pop_back();
    live_bytes_ -= t.bytes;
    if (t.lost) return;
    if (may_hand_off && next_ != core_ && uniform_uint64(rng_, 0, 999) < o_.cross_core_per_mille) {
      s_.inboxes[next_].push(t);
      return;
    }
    check(arena_, t);
    if (!t.lost) arena_.free(t.id);
    ++k_.frees;
  }

  // Frees what the previous core handed over: pinned (its owner may be compacting around it),
  // checked, unpinned, freed.
  void drain_inbox() {
    const int owner = (core_ + o_.cores - 1) % o_.cores;
    for (Tracked& t : s_.inboxes[core_].take()) {
      const std::shared_ptr<HbmArena>& arena = s_.arenas[owner];
      BufferPin pin;
      try {
        pin = BufferPin(arena, t.id);
      } catch (const InvalidArgumentError&) {
        ++k_.checksum_checks;
        ++k_.lost_buffers;
        continue;
      }
      check(*arena, t);
      pin.reset();
      if (!t.lost) arena->free(t.id);
      ++k_.frees;
      ++k_.cross_core_frees;
    }
  }

  // The bucket all-reduce, in this core's arena: every element core + 1, summed over all cores.
  void bucket_round(CoreContext& ctx) {
    ArenaFreeSpace after;
    std::optional<ArenaPlacement> p = arena_.try_allocate(o_.bucket_bytes, "bucket", &after);
    after_allocation(after);
    while (!p && !live_.empty()) {  // the churn filled the arena: make room here and now
      free_one(false);
      p = arena_.try_allocate(o_.bucket_bytes, "bucket", &after);
      after_allocation(after);
    }
    if (!p) {
      throw InternalError(format_text("soak: core %d cannot place its %llu-byte bucket", core_,
                                      static_cast<unsigned long long>(o_.bucket_bytes)));
    }
    BufferPin pin(s_.arenas[core_], p->id);  // its address is the collective's for the call
    std::span<float> bucket(reinterpret_cast<float*>(arena_.data(p->id)), o_.bucket_bytes / 4);
    std::fill(bucket.begin(), bucket.end(), static_cast<float>(core_ + 1));
    s_.comm->all_reduce(ctx, bucket);
    const double n = o_.cores;
    const auto expect = static_cast<float>(n * (n + 1) / 2);
    if (std::any_of(bucket.begin(), bucket.end(), [&](float v) { return v != expect; }))
      ++k_.all_reduce_failures;
    ++k_.all_reduces;
    pin.reset();
    arena_.free(p->id);
  }

  // A one-element max all-reduce: true when any core voted true.
  bool vote(CoreContext& ctx, bool mine) {
    float flag = mine ? 1.0f : 0.0f;
    s_.comm->all_reduce(ctx, std::span<float>(&flag, 1), ReduceOp::kMax);
    return flag > 0.0f;
  }

  void after_allocation(const ArenaFreeSpace& after) {
    if (after.num_defragmentations == seen_compactions_) return;
    seen_compactions_ = after.num_defragmentations;
    maybe_corrupt();
    for (Tracked& t : live_) check(arena_, t);
  }

  void maybe_corrupt() {
    const uint64_t at = o_.corrupt_at_compaction_for_testing;
    if (core_ != 0 || at == 0 || corrupted_ || seen_compactions_ < at || live_.empty()) return;
    arena_.data(live_.front().id)[0] ^= std::byte{0xFF};
    corrupted_ = true;
  }

  // Looks `t` up in `arena` again and compares its checksum.
  void check(HbmArena& arena, Tracked& t) {
    if (t.lost) return;
    ++k_.checksum_checks;
    const std::byte* data = nullptr;
    uint64_t bytes = 0;
    try {
      data = arena.data(t.id);
      bytes = arena.size_bytes(t.id);
    } catch (const InvalidArgumentError&) {
      bytes = 0;
    }
    if (bytes != t.bytes) {
      t.lost = true;
      ++k_.lost_buffers;
      return;
    }
    const uint64_t sum = checksum_bytes(data, t.bytes);
    if (sum != t.checksum) {
      ++k_.checksum_mismatches;
      t.checksum = sum;  // counted once: later checks compare with what it holds now
    }
  }

  // Every live buffer checked once more; the arena must hold exactly the tracked ones.
  void finish() {
    for (Tracked& t : live_) check(arena_, t);
    const auto tracked = static_cast<uint64_t>(
        std::count_if(live_.begin(), live_.end(), [](const Tracked& t) { return !t.lost; }));
    const MemoryStats st = arena_.memory_stats();
    const uint64_t held = st.num_live_buffers + st.pending_free_buffers;
    k_.lost_buffers += held > tracked ? held - tracked : tracked - held;
    k_.compactions = st.num_defragmentations;
    k_.buffers_moved = st.defrag_buffers_moved;
    k_.bytes_moved = st.defrag_bytes_moved;
    k_.fragmentation_ooms = st.num_fragmentation_ooms;
  }

  SoakShared& s_;
  const SoakOptions& o_;
  const int core_;
  const int next_;
  HbmArena& arena_;
  std::mt19937_64 rng_;
  const uint64_t limit_;  // live churn bytes stay at or below it
  std::vector<Tracked> live_;
  uint64_t live_bytes_ = 0;
  uint64_t seen_compactions_ = 0;
  bool corrupted_ = false;
  SoakCounters k_;
};

}  // namespace

SoakResult run_soak(const SoakOptions& options) {
  options.validate();
  RuntimeOptions ro;
  ro.num_cores = options.cores;
  ro.hbm_bytes_per_core = 1 * kMiB;  // the cores' own arenas are unused: the soak makes its own
  ro.hbm_backing = false;
  Runtime runtime(ro);
  SoakShared shared{options, SizeSampler(options.sizes),
                    {},      std::vector<Inbox>(static_cast<size_t>(options.cores)),
                    nullptr, {}};
  for (int c = 0; c < options.cores; ++c) {
    ArenaOptions a;
    a.capacity_bytes = options.hbm_bytes;
    a.policy = options.policy;
    a.backing = true;
    a.auto_defragment = true;
    a.defragment_before_growth = options.defragment_before_growth;
    a.core_id = c;
    a.name = "soak";
    shared.arenas.push_back(std::make_shared<HbmArena>(a));
  }
  shared.comm = make_load_communicator(runtime);
  SoakResult result;
  result.cores.resize(static_cast<size_t>(options.cores));
  std::vector<uint64_t> rounds(static_cast<size_t>(options.cores), 0);
  const auto start = std::chrono::steady_clock::now();
  shared.deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(options.seconds));
  runtime.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    CoreSoak soak(shared, c);
    result.cores[c] = soak.run(ctx, &rounds[c]);
  });
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.rounds = rounds.front();
  for (const SoakCounters& k : result.cores) result.total += k;
  return result;
}

namespace {

nlohmann::json counters_json(const SoakCounters& k) {
  return {{"allocations", k.allocations},
          {"frees", k.frees},
          {"cross_core_frees", k.cross_core_frees},
          {"ooms", k.ooms},
          {"fragmentation_ooms", k.fragmentation_ooms},
          {"compactions", k.compactions},
          {"buffers_moved", k.buffers_moved},
          {"bytes_moved", k.bytes_moved},
          {"checksum_checks", k.checksum_checks},
          {"checksum_mismatches", k.checksum_mismatches},
          {"lost_buffers", k.lost_buffers},
          {"all_reduces", k.all_reduces},
          {"all_reduce_failures", k.all_reduce_failures},
          {"peak_live_buffers", k.peak_live_buffers}};
}

}  // namespace

nlohmann::json soak_json(const SoakOptions& o, const SoakResult& r) {
  nlohmann::json per_core = nlohmann::json::array();
  for (const SoakCounters& k : r.cores) per_core.push_back(counters_json(k));
  nlohmann::json j = counters_json(r.total);
  j.update({{"cores", o.cores},
            {"policy", o.policy},
            {"hbm_bytes", o.hbm_bytes},
            {"occupancy", o.occupancy},
            {"defragment", o.defragment_before_growth ? "growth" : "on"},
            {"seed", o.seed},
            {"seconds_requested", o.seconds},
            {"seconds", r.seconds},
            {"rounds", r.rounds},
            {"per_core", std::move(per_core)}});
  return j;
}

int soak_exit_code(const SoakResult& r) {
  const SoakCounters& k = r.total;
  return k.checksum_mismatches > 0 || k.lost_buffers > 0 || k.all_reduce_failures > 0 ? 1 : 0;
}

std::string format_soak_summary(const SoakOptions& o, const SoakResult& r) {
  const SoakCounters& k = r.total;
  std::string out = format_text("soak: %d cores, %s, %s per core, %.1f s, %llu rounds\n", o.cores,
                                o.policy.c_str(), format_bytes(o.hbm_bytes).c_str(), r.seconds,
                                static_cast<unsigned long long>(r.rounds));
  out += format_text(
      "compactions %llu, bytes moved %s (%llu buffers), allocations %llu, frees %llu "
      "(%llu cross-core), all-reduces %llu\n",
      static_cast<unsigned long long>(k.compactions), format_bytes(k.bytes_moved).c_str(),
      static_cast<unsigned long long>(k.buffers_moved),
      static_cast<unsigned long long>(k.allocations), static_cast<unsigned long long>(k.frees),
      static_cast<unsigned long long>(k.cross_core_frees),
      static_cast<unsigned long long>(k.all_reduces));
  out += format_text(
      "checksum checks %llu, mismatches %llu, lost buffers %llu, wrong all-reduces %llu\n",
      static_cast<unsigned long long>(k.checksum_checks),
      static_cast<unsigned long long>(k.checksum_mismatches),
      static_cast<unsigned long long>(k.lost_buffers),
      static_cast<unsigned long long>(k.all_reduce_failures));
  return out;
}

}  // namespace vtpu
