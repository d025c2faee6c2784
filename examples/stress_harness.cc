#include "examples/stress_harness.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "collectives/communicator.h"
#include "common/error.h"
#include "common/strings.h"
#include "memory/allocator_policy.h"
#include "memory/stress_replay.h"
#include "memory/trace.h"
#include "runtime/runtime.h"

namespace vtpu::examples {
namespace {

constexpr uint64_t kProgressEvery = 4096;  // events between updates of the shared counter

bool is_known_policy(const std::string& name) {
  if (name == "planned") return true;
  const auto& known = known_allocator_policies();
  return std::find(known.begin(), known.end(), name) != known.end();
}

// Whether the free of `slot` on core `core` is handed to the next core (a fixed hash, so every
// policy sees the same cross-core frees).
bool is_cross_core(int core, uint32_t slot, uint32_t per_mille) {
  uint64_t z = (static_cast<uint64_t>(core) << 32 | slot) * 0x9E3779B97F4A7C15ULL;
  z ^= z >> 29;
  return z % 1000 < per_mille;
}

// A core's inbox of cross-core frees: (owner core, slot) pairs pushed by the previous core.
class FreeInbox {
 public:
  void push(int owner, uint32_t slot) {
    std::lock_guard lock(mu_);
    items_.emplace_back(owner, slot);
    nonempty_.store(true, std::memory_order_release);
  }
  // Frees everything queued so far through the owners' replayers.
  void drain(std::vector<std::unique_ptr<CoreReplayer>>& replayers) {
    if (!nonempty_.load(std::memory_order_acquire)) return;
    std::vector<std::pair<int, uint32_t>> items;
    {
      std::lock_guard lock(mu_);
      items.swap(items_);
      nonempty_.store(false, std::memory_order_release);
    }
    for (const auto& [owner, slot] : items) replayers[owner]->free_slot(slot);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<int, uint32_t>> items_;  // GUARDED_BY(mu_)
  std::atomic<bool> nonempty_{false};
};

struct LoadCounters {
  std::atomic<uint64_t> all_reduces{0};
  std::atomic<uint64_t> all_reduce_failures{0};
  std::atomic<uint64_t> matmuls{0};
};

// One all-reduce round on core `c`: a matmul, then the bucket (every element c + 1) summed over
// the group and checked against n (n + 1) / 2.
void load_round(CoreContext& ctx, Communicator& comm, std::vector<float>& bucket,
                Eigen::MatrixXf& a, Eigen::MatrixXf& b, Eigen::MatrixXf& c, LoadCounters& k) {
  c.noalias() = a * b;
  k.matmuls.fetch_add(1, std::memory_order_relaxed);
  const auto me = static_cast<float>(ctx.core_id() + 1);
  std::fill(bucket.begin(), bucket.end(), me + 0.0f * c(0, 0));
  comm.all_reduce(ctx, std::span<float>(bucket));
  const double n = ctx.num_cores();
  const auto expect = static_cast<float>(n * (n + 1) / 2);
  if (bucket.front() != expect || bucket.back() != expect)
    k.all_reduce_failures.fetch_add(1, std::memory_order_relaxed);
  k.all_reduces.fetch_add(1, std::memory_order_relaxed);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string num_or_dash(const nlohmann::json& v, const char* f = "%.0f") {
  return v.is_null() ? "-" : fmt(f, v.get<double>());
}

}  // namespace

void StressOptions::validate() const {
  auto fail = [](const std::string& m) { throw InvalidArgumentError("stress: " + m); };
  if (cores < 1 || cores > 1024) fail("cores " + std::to_string(cores) + " (expected 1..1024)");
  if (trace_path.empty()) workload.validate();
  if (allocators.empty()) fail("no allocator policy given");
  for (const std::string& a : allocators)
    if (!is_known_policy(a))
      fail("unknown allocator policy '" + a +
           "' (expected one of: " + join(known_allocator_policies(), ", ") + ", planned)");
  if (auto_defragment.empty()) fail("no auto-defragment setting given");
  if (hbm_bytes < 4 * kKiB) fail("hbm_bytes " + std::to_string(hbm_bytes) + " (expected >= 4 KiB)");
  if (collective_rounds < 0 || collective_rounds > 10000000)
    fail("collective_rounds " + std::to_string(collective_rounds) + " (expected 0..10000000)");
  if (bucket_bytes < 4 || bucket_bytes % 4 != 0 || bucket_bytes > 1 * kGiB)
    fail("bucket_bytes " + std::to_string(bucket_bytes) +
         " (expected a multiple of 4 in [4, 1 GiB])");
  if (matmul_dim < 1 || matmul_dim > 4096)
    fail("matmul_dim " + std::to_string(matmul_dim) + " (expected 1..4096)");
  if (cross_core_free_per_mille > 1000)
    fail("cross_core_free_per_mille " + std::to_string(cross_core_free_per_mille) +
         " (expected 0..1000)");
  if (timeline_samples < 0) fail("timeline_samples must be >= 0");
}

nlohmann::json run_stress(const StressOptions& options) {
  options.validate();
  const int n = options.cores;
  // The streams, built once: every run replays exactly these.
  std::vector<CoreStream> streams;
  nlohmann::json workload;
  uint64_t skipped_events = 0;
  if (!options.trace_path.empty()) {
    const Trace trace = read_trace(options.trace_path);
    streams = compile_core_streams(trace.events, n, options.trace_path, &skipped_events);
    workload = {{"name", "trace"},
                {"description", "trace " + options.trace_path + " (" +
                                    std::to_string(trace.events.size()) + " events)"},
                {"seed", nullptr},
                {"trace_path", options.trace_path},
                {"skipped_events", skipped_events}};
  } else {
    std::vector<TraceEvent> all;
    for (int c = 0; c < n; ++c) {
      std::vector<TraceEvent> e = make_stress_workload(options.workload, c);
      all.insert(all.end(), std::make_move_iterator(e.begin()), std::make_move_iterator(e.end()));
    }
    streams = compile_core_streams(all, n, options.workload.name);
    workload = {{"name", options.workload.name},
                {"description", describe_stress_workload(options.workload)},
                {"seed", options.workload.seed},
                {"trace_path", nullptr}};
  }
  uint64_t events_per_run = 0;
  for (const CoreStream& s : streams) events_per_run += s.ops.size();
  const size_t num_runs = options.allocators.size() * options.auto_defragment.size();
  if (options.progress != nullptr) options.progress->total.store(events_per_run * num_runs);

  std::vector<std::shared_ptr<const HeapPlan>> plans(static_cast<size_t>(n));
  if (std::find(options.allocators.begin(), options.allocators.end(), "planned") !=
      options.allocators.end()) {
    for (int c = 0; c < n; ++c) plans[c] = plan_for_stream(streams[c]);
  }

  RuntimeOptions ro;
  ro.num_cores = n;
  ro.hbm_bytes_per_core = 1 * kMiB;  // the cores' own arenas are unused: each run makes its own
  ro.hbm_backing = false;
  Runtime runtime(ro);
  std::unique_ptr<Communicator> comm;
  if (options.under_load) {
    std::vector<int> group(static_cast<size_t>(n));
    for (int c = 0; c < n; ++c) group[c] = c;
    comm = std::make_unique<Communicator>(runtime, group);
  }

  nlohmann::json runs = nlohmann::json::array();
  LoadCounters load;
  for (const std::string& policy : options.allocators) {
    for (const bool defrag : options.auto_defragment) {
      StressReplayOptions ro_base;
      ro_base.policy = policy;
      ro_base.auto_defragment = defrag;
      ro_base.capacity_bytes = options.hbm_bytes;
      ro_base.backing = options.backing;
      ro_base.timeline_samples = options.timeline_samples;
      ro_base.latency_sample_every = options.latency_sample_every;
      ro_base.stop_on_oom = options.stop_on_oom;
      ro_base.concurrent = options.under_load && n > 1;
      nlohmann::json run = {{"allocator", policy}, {"auto_defragment", defrag}};
      std::vector<std::unique_ptr<CoreReplayer>> replayers(static_cast<size_t>(n));
      try {
        for (int c = 0; c < n; ++c) {
          StressReplayOptions o = ro_base;
          o.heap_plan = plans[c];
          replayers[c] = std::make_unique<CoreReplayer>(streams[c], o);
        }
      } catch (const InvalidArgumentError& e) {
        // e.g. a planned heap larger than the arena: the run cannot start; say why.
        run["error"] = e.message();
        run["summary"] = stress_metrics_json(StressCoreMetrics{}, false);
        run["per_core"] = nlohmann::json::array();
        runs.push_back(std::move(run));
        continue;
      }
      std::vector<FreeInbox> inboxes(static_cast<size_t>(n));
      std::vector<StressCoreMetrics> metrics(static_cast<size_t>(n));
      runtime.run_spmd([&](CoreContext& ctx) {
        const int c = ctx.core_id();
        CoreReplayer& r = *replayers[c];
        const auto& ops = streams[c].ops;
        const size_t total = ops.size();
        const bool load_on = options.under_load;
        const bool cross = load_on && n > 1 && options.cross_core_free_per_mille > 0;
        const auto rounds = load_on ? static_cast<size_t>(options.collective_rounds) : 0;
        std::vector<float> bucket(load_on ? options.bucket_bytes / 4 : 0);
        const int d = options.matmul_dim;
        Eigen::MatrixXf a, b, m;
        if (load_on) {
          a = Eigen::MatrixXf::Constant(d, d, 0.5f);
          b = Eigen::MatrixXf::Constant(d, d, 0.25f);
          m.resize(d, d);
        }
        size_t next_round = 0;
        uint64_t unreported = 0;
        r.begin();
        for (size_t i = 0; i < total && !r.stopped(); ++i) {
          // Round k sits before event floor(k * total / rounds), so every core runs `rounds`.
          while (next_round < rounds && i >= next_round * total / rounds) {
            if (cross) inboxes[c].drain(replayers);
            load_round(ctx, *comm, bucket, a, b, m, load);
            ++next_round;
          }
          if (cross) inboxes[c].drain(replayers);
          const CoreStream::Op& op = ops[i];
          if (cross && !op.is_alloc &&
              is_cross_core(c, op.slot, options.cross_core_free_per_mille) && r.is_live(op.slot)) {
            inboxes[(c + 1) % n].push(c, op.slot);
          } else {
            r.run_op(i);
          }
          if (options.progress != nullptr && ++unreported == kProgressEvery) {
            options.progress->done.fetch_add(unreported, std::memory_order_relaxed);
            unreported = 0;
          }
        }
        while (next_round < rounds) {
          if (cross) inboxes[c].drain(replayers);
          load_round(ctx, *comm, bucket, a, b, m, load);
          ++next_round;
        }
        if (cross) {
          comm->barrier(ctx);  // every push happened before it: drain once more
          inboxes[c].drain(replayers);
          comm->barrier(ctx);  // no core finishes while another may still free into it
        }
        if (options.progress != nullptr)
          options.progress->done.fetch_add(unreported, std::memory_order_relaxed);
        metrics[c] = r.finish();
      });
      replayers.clear();
      if (options.search_capacity) {
        runtime.run_spmd([&](CoreContext& ctx) {
          const int c = ctx.core_id();
          StressReplayOptions o = ro_base;
          o.heap_plan = plans[c];
          const uint64_t limit = std::max<uint64_t>(4 * options.hbm_bytes, 64 * kGiB);
          metrics[c].min_capacity_bytes = find_min_capacity(streams[c], o, limit);
        });
      }
      run["summary"] = stress_metrics_json(merge_core_metrics(metrics), false);
      nlohmann::json per_core = nlohmann::json::array();
      for (const StressCoreMetrics& m : metrics) per_core.push_back(stress_metrics_json(m, true));
      run["per_core"] = std::move(per_core);
      runs.push_back(std::move(run));
    }
  }
  nlohmann::json doc = {{"format", "vtpu-stress"},
                        {"version", 1},
                        {"command", options.command},
                        {"workload", workload},
                        {"cores", n},
                        {"hbm_bytes", options.hbm_bytes},
                        {"under_load", options.under_load},
                        {"backing", options.backing}};
  doc["load"] = {{"all_reduces", load.all_reduces.load()},
                 {"all_reduce_failures", load.all_reduce_failures.load()},
                 {"matmuls", load.matmuls.load()},
                 {"bucket_bytes", options.under_load ? options.bucket_bytes : 0},
                 {"matmul_dim", options.under_load ? options.matmul_dim : 0},
                 {"cross_core_free_per_mille",
                  options.under_load && n > 1 ? options.cross_core_free_per_mille : 0}};
  doc["runs"] = std::move(runs);
  return doc;
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
  std::snprintf(line, sizeof line,
                "%-9s %-6s %10s %12s %12s %8s %9s %8s %6s %6s %9s %9s %7s %10s %12s %10s\n",
                "allocator", "defrag", "events", "peak_resv", "peak_live", "resv/live", "frag_mean",
                "frag_max", "f_oom", "t_oom", "Mevents/s", "Mev/cpu_s", "defrags", "moved",
                "min_capacity", "integrity");
  out += line;
  for (const nlohmann::json& run : report["runs"]) {
    const nlohmann::json& s = run["summary"];
    if (run.contains("error")) {
      std::snprintf(line, sizeof line, "%-9s %-6s  not run: %s\n",
                    run["allocator"].get<std::string>().c_str(),
                    run["auto_defragment"].get<bool>() ? "on" : "off",
                    run["error"].get<std::string>().c_str());
      out += line;
      continue;
    }
    const std::string integrity = std::to_string(s["integrity_failures"].get<uint64_t>()) + "/" +
                                  std::to_string(s["integrity_checks"].get<uint64_t>());
    std::snprintf(
        line, sizeof line,
        "%-9s %-6s %10llu %12s %12s %9s %9.4f %8.4f %6llu %6llu %9.2f %9.2f %7llu %10s %12s %10s\n",
        run["allocator"].get<std::string>().c_str(),
        run["auto_defragment"].get<bool>() ? "on" : "off",
        static_cast<unsigned long long>(s["events"].get<uint64_t>()),
        format_bytes(s["peak_reserved_bytes"].get<uint64_t>()).c_str(),
        format_bytes(s["peak_live_bytes"].get<uint64_t>()).c_str(),
        num_or_dash(s["reserved_over_live"], "%.3f").c_str(), s["fragmentation_mean"].get<double>(),
        s["fragmentation_max"].get<double>(),
        static_cast<unsigned long long>(s["false_ooms"].get<uint64_t>()),
        static_cast<unsigned long long>(s["true_ooms"].get<uint64_t>()),
        s["events_per_second"].get<double>() / 1e6, s["events_per_cpu_second"].get<double>() / 1e6,
        static_cast<unsigned long long>(s["defragmentations"].get<uint64_t>()),
        format_bytes(s["defrag_bytes_moved"].get<uint64_t>()).c_str(),
        s["min_capacity_bytes"].is_null()
            ? "-"
            : format_bytes(s["min_capacity_bytes"].get<uint64_t>()).c_str(),
        integrity.c_str());
    out += line;
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
                  run["allocator"].get<std::string>().c_str(),
                  run["auto_defragment"].get<bool>() ? "on" : "off",
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

}  // namespace vtpu::examples
