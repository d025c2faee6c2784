// Plausible `vtpu stress --json` documents for tests of the HTML report, made without the harness:
// timelines are seeded random walks (in use, reserved above it by a policy-dependent factor,
// fragmentation drifting toward a policy-dependent level) and each core's worst-moment map is a
// run of labelled blocks (rounded to 256 B, with internal waste) and holes, then a free tail.
// The summaries are computed from the per-core figures as the contract says (sums of counts,
// maxima of peaks and ratios), so the documents are self-consistent.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace vtpu::testing {

struct StressFixtureOptions {
  int cores = 4;
  // (allocator, auto_defragment) per run.
  std::vector<std::pair<std::string, bool>> runs = {{"bfc", false},       {"bfc", true},
                                                    {"tlsf", false},      {"tlsf", true},
                                                    {"first_fit", false}, {"first_fit", true}};
  int samples = 1000;      // timeline samples per core
  int blocks = 400;        // used blocks in each worst-moment map (holes come on top)
  int big_map_blocks = 0;  // if > 0, run 0 core 0 and run 1 core 1 get this many instead
  uint64_t hbm_bytes = uint64_t{1} << 30;
  uint64_t events_per_core = 200000;
  uint64_t seed = 1;
};

inline nlohmann::json make_worst_map(std::mt19937_64& rng, int used_blocks, uint64_t capacity,
                                     double hole_probability) {
  static const char* kKinds[] = {"act", "grad", "weight", "adam_m", "adam_v", "tmp"};
  // Median chosen so that the used blocks fill about 60% of the capacity.
  const double sigma = 1.4;
  const double median =
      0.6 * static_cast<double>(capacity) / used_blocks / std::exp(sigma * sigma / 2);
  std::lognormal_distribution<double> size_dist(std::log(std::max(median, 300.0)), sigma);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  nlohmann::json blocks = nlohmann::json::array();
  uint64_t offset = 0;
  uint64_t id = 1;
  for (int i = 0; i < used_blocks; ++i) {
    if (u(rng) < hole_probability) {
      const uint64_t hole =
          std::max<uint64_t>(256, static_cast<uint64_t>(size_dist(rng)) / 256 * 256);
      if (offset + hole >= capacity - capacity / 8) break;
      blocks.push_back({{"offset", offset}, {"bytes", hole}, {"state", "free"}});
      offset += hole;
    }
    // Most chunks round the request up to 256 B; a fifth are padded more (tiling, size classes).
    uint64_t requested = std::max<uint64_t>(1, static_cast<uint64_t>(size_dist(rng)));
    const uint64_t bytes = (requested + 255) / 256 * 256;
    if (u(rng) < 0.2)
      requested = std::max<uint64_t>(1, static_cast<uint64_t>(bytes * (0.55 + 0.4 * u(rng))));
    if (offset + bytes >= capacity - capacity / 8) break;
    const int layer = static_cast<int>(u(rng) * 12);
    const std::string label = "layer" + std::to_string(layer) + "/" +
                              kKinds[layer % 6 == 0 ? 2 : static_cast<int>(u(rng) * 6)];
    blocks.push_back({{"offset", offset},
                      {"bytes", bytes},
                      {"state", "used"},
                      {"label", label},
                      {"id", id++},
                      {"requested_bytes", requested}});
    offset += bytes;
  }
  blocks.push_back({{"offset", offset}, {"bytes", capacity - offset}, {"state", "free"}});
  return blocks;
}

// 1 - largest free / total free over a block list (0 when nothing is free).
inline double map_fragmentation(const nlohmann::json& blocks) {
  uint64_t total = 0, largest = 0;
  for (const auto& b : blocks)
    if (b["state"] == "free") {
      total += b["bytes"].get<uint64_t>();
      largest = std::max(largest, b["bytes"].get<uint64_t>());
    }
  return total == 0 ? 0.0 : 1.0 - static_cast<double>(largest) / static_cast<double>(total);
}

inline nlohmann::json make_stress_report(const StressFixtureOptions& o) {
  using nlohmann::json;
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> n01(0.0, 1.0);
  json runs = json::array();
  for (size_t r = 0; r < o.runs.size(); ++r) {
    const auto& [allocator, defrag] = o.runs[r];
    const double slack = allocator == "bfc" ? 1.06 : allocator == "tlsf" ? 1.12 : 1.30;
    const double frag_level = (allocator == "bfc"    ? 0.25
                               : allocator == "tlsf" ? 0.35
                                                     : 0.55) *
                              (defrag ? 0.45 : 1.0);
    json per_core = json::array();
    json sum = {{"events", 0},
                {"peak_reserved_bytes", 0},
                {"peak_live_bytes", 0},
                {"false_ooms", 0},
                {"true_ooms", 0},
                {"defragmentations", 0},
                {"defrag_bytes_moved", 0},
                {"integrity_checks", 0},
                {"integrity_failures", 0}};
    double ratio_max = 0, frag_mean_max = 0, frag_max = 0, defrag_time = 0;
    for (int c = 0; c < o.cores; ++c) {
      // The same workload stream for every run: seed the walk by core only.
      std::mt19937_64 walk(o.seed * 1000003 + static_cast<uint64_t>(c));
      int blocks = o.blocks;
      if (o.big_map_blocks > 0 && ((r == 0 && c == 0) || (r == 1 && c == 1 % o.cores)))
        blocks = o.big_map_blocks;
      json map = make_worst_map(rng, blocks, o.hbm_bytes, 0.1 + 0.5 * frag_level);
      const double map_frag = map_fragmentation(map);
      uint64_t map_used = 0, map_extent = 0;
      for (const auto& b : map)
        if (b["state"] == "used") {
          map_used += b["bytes"].get<uint64_t>();
          map_extent = b["offset"].get<uint64_t>() + b["bytes"].get<uint64_t>();
        }
      json timeline = json::array();
      double live = 0, reserved = 0, frag = 0, frag_sum = 0, t_us = 0, trend = 0;
      uint64_t peak_reserved = 0, peak_live = 0;
      size_t worst_index = 0;
      double worst_frag = -1;
      const double cap = static_cast<double>(map_used) * 1.25;
      for (int k = 0; k < o.samples; ++k) {
        // Training steps: activations build up and are freed, on a slowly drifting base.
        const double step = std::fmod(k / (o.samples / 8.0), 1.0);
        trend = std::clamp(trend + 0.01 * n01(walk), -0.15, 0.15);
        live = std::clamp(
            cap * (0.25 + trend + 0.5 * std::sin(3.14159 * step)) * (1 + 0.03 * n01(walk)), 0.0,
            cap);
        const double target_reserved = live * slack + cap * 0.02;
        reserved = defrag ? target_reserved : std::max(reserved * 0.999, target_reserved);
        frag = std::clamp(frag + 0.05 * (frag_level * (0.6 + step) - frag) + 0.02 * n01(rng), 0.0,
                          1.0);
        t_us += 50 + 20 * u(rng);
        const uint64_t in_use = static_cast<uint64_t>(live) / 256 * 256;
        const uint64_t res = std::max(in_use, static_cast<uint64_t>(reserved) / 256 * 256);
        const uint64_t event =
            o.events_per_core * static_cast<uint64_t>(k) / static_cast<uint64_t>(o.samples);
        timeline.push_back({{"event", event},
                            {"t_us", std::round(t_us * 10) / 10},
                            {"bytes_in_use", in_use},
                            {"bytes_reserved", res},
                            {"fragmentation", frag}});
        worst_frag = std::max(worst_frag, frag);
        frag_sum += frag;
      }
      // The worst moment: the most fragmented sample among those near the peak in use.
      double max_in_use = 0, best = -1;
      for (const auto& s : timeline)
        max_in_use = std::max(max_in_use, s["bytes_in_use"].get<double>());
      for (size_t k = 0; k < timeline.size(); ++k)
        if (timeline[k]["bytes_in_use"].get<double>() >= 0.7 * max_in_use &&
            timeline[k]["fragmentation"].get<double>() > best)
          best = timeline[k]["fragmentation"].get<double>(), worst_index = k;
      // Rescale the walk so that its worst sample is the map: fragmentation there is the map's
      // (and the maximum), bytes in use the map's used bytes, bytes reserved at least its extent.
      const double fscale = worst_frag > 0 ? map_frag / worst_frag : 0.0;
      const double in_use_at_worst = timeline[worst_index]["bytes_in_use"].get<double>();
      const double bscale =
          in_use_at_worst > 0 ? static_cast<double>(map_used) / in_use_at_worst : 1.0;
      peak_reserved = peak_live = 0;
      worst_frag = frag_sum = 0;
      for (size_t k = 0; k < timeline.size(); ++k) {
        json& s = timeline[k];
        const bool worst = k == worst_index;
        const double f = worst ? map_frag : s["fragmentation"].get<double>() * fscale;
        const uint64_t in_use =
            worst ? map_used
                  : static_cast<uint64_t>(s["bytes_in_use"].get<double>() * bscale) / 256 * 256;
        uint64_t res = std::max(
            in_use, static_cast<uint64_t>(s["bytes_reserved"].get<double>() * bscale) / 256 * 256);
        if (worst) res = std::max(res, map_extent);
        res = std::min<uint64_t>(res, o.hbm_bytes);  // reserved never exceeds the arena
        s["fragmentation"] = f;
        s["bytes_in_use"] = in_use;
        s["bytes_reserved"] = res;
        peak_reserved = std::max(peak_reserved, res);
        peak_live = std::max(peak_live, in_use - in_use / 50);
        worst_frag = std::max(worst_frag, f);
        frag_sum += f;
      }
      const json& ws = timeline[worst_index];
      json core = {
          {"core", c},
          {"events", o.events_per_core},
          {"peak_reserved_bytes", peak_reserved},
          {"peak_live_bytes", peak_live},
          {"reserved_over_live", peak_live ? static_cast<double>(peak_reserved) / peak_live : 1.0},
          {"fragmentation_mean", frag_sum / o.samples},
          {"fragmentation_max", worst_frag},
          {"false_ooms", allocator == "first_fit" && !defrag ? 3 + c : 0},
          {"true_ooms", 0},
          {"alloc_latency_ns",
           {{"median", 40 + 20 * r}, {"p99", 200 + 40 * r}, {"p99_99", 2500 + 300 * r}}},
          {"free_latency_ns",
           {{"median", 30 + 10 * r}, {"p99", 150 + 20 * r}, {"p99_99", 2000 + 100 * r}}},
          {"events_per_second", 1.5e7 / (1.0 + 0.3 * r)},
          {"defragmentations", defrag ? 12 + c : 0},
          {"defrag_bytes_moved", defrag ? (uint64_t{300} << 20) + (uint64_t(c) << 20) : 0},
          {"defrag_time_ns", defrag ? 4.5e6 + 1e5 * c : 0.0},
          // Without out-of-memory errors the main run's capacity was enough.
          {"min_capacity_bytes",
           allocator == "first_fit" && !defrag
               ? static_cast<uint64_t>(peak_reserved * 1.01)
               : std::min(o.hbm_bytes, static_cast<uint64_t>(peak_reserved * 1.01))},
          {"integrity_checks", 40 + c},
          {"integrity_failures", 0},
          {"timeline", std::move(timeline)},
          {"worst",
           {{"event", ws["event"]},
            {"t_us", ws["t_us"]},
            {"fragmentation", map_frag},
            {"capacity_bytes", o.hbm_bytes},
            {"blocks", std::move(map)}}}};
      for (const char* k : {"events", "false_ooms", "true_ooms", "defragmentations",
                            "defrag_bytes_moved", "integrity_checks", "integrity_failures"})
        sum[k] = sum[k].get<uint64_t>() + core[k].get<uint64_t>();
      for (const char* k : {"peak_reserved_bytes", "peak_live_bytes"})
        sum[k] = std::max(sum[k].get<uint64_t>(), core[k].get<uint64_t>());
      ratio_max = std::max(ratio_max, core["reserved_over_live"].get<double>());
      frag_mean_max = std::max(frag_mean_max, core["fragmentation_mean"].get<double>());
      frag_max = std::max(frag_max, core["fragmentation_max"].get<double>());
      defrag_time += core["defrag_time_ns"].get<double>();
      per_core.push_back(std::move(core));
    }
    json summary = sum;
    summary["reserved_over_live"] = ratio_max;
    summary["fragmentation_mean"] = frag_mean_max;
    summary["fragmentation_max"] = frag_max;
    summary["alloc_latency_ns"] = per_core[0]["alloc_latency_ns"];
    summary["free_latency_ns"] = per_core[0]["free_latency_ns"];
    summary["events_per_second"] = per_core[0]["events_per_second"].get<double>() * o.cores;
    summary["defrag_time_ns"] = defrag_time;
    summary["min_capacity_bytes"] = per_core[0]["min_capacity_bytes"];
    runs.push_back({{"allocator", allocator},
                    {"auto_defragment", defrag},
                    {"summary", std::move(summary)},
                    {"per_core", std::move(per_core)}});
  }
  std::string allocators;
  for (const auto& [a, d] : o.runs)
    if (allocators.find(a) == std::string::npos) allocators += (allocators.empty() ? "" : ",") + a;
  return {{"format", "vtpu-stress"},
          {"version", 1},
          {"command", "vtpu stress --cores " + std::to_string(o.cores) +
                          " --workload training_step --allocators " + allocators +
                          " --auto-defrag both --hbm-bytes 16G --seed " + std::to_string(o.seed)},
          {"workload",
           {{"name", "training_step"},
            {"description", "12 layers, activations log-normal around 256 KiB, 50 steps"},
            {"seed", o.seed},
            {"trace_path", nullptr}}},
          {"cores", o.cores},
          {"hbm_bytes", o.hbm_bytes},
          {"under_load", true},
          {"runs", std::move(runs)}};
}

}  // namespace vtpu::testing
