#include "vtpu/runtime/hardware_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/json_fields.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"

namespace vtpu {

namespace {

// Generated at build time from profiles/*.json (runtime/CMakeLists.txt): kBuiltinProfiles, an
// array of {file stem, JSON text}.
#include "runtime/builtin_profiles.inc"

void require_positive(double value, const std::string& field) {
  if (!(value > 0.0) || !std::isfinite(value)) {
    // %g, not std::to_string's %f: -1e-9 printed as -0.000000.
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.6g", value);
    throw InvalidArgumentError("hardware profile field '" + field + "' is " + shown +
                               " (expected a finite number > 0)");
  }
}

/// One collective's entry of "collectives": a fit object or a non-empty array of them. The
/// range and distinctness of group_size are checked by validate().
std::vector<CollectiveFit> collective_fits_from_json(const JsonField& value) {
  const auto one = [](const JsonField& field) {
    const JsonObject fit(field,
                         "{\"alpha_seconds\": s, \"beta_seconds_per_byte\": s, \"group_size\": n}");
    // A typo such as "measure" for "measured" would price the collective by alpha-beta alone.
    fit.allow_only({"alpha_seconds", "beta_seconds_per_byte", "group_size", "measured"});
    CollectiveFit f;
    f.alpha_seconds = fit["alpha_seconds"].number();
    f.beta_seconds_per_byte = fit["beta_seconds_per_byte"].number();
    f.group_size = static_cast<int>(fit["group_size"].integer(-(1 << 20), 1 << 20));
    if (fit.has("measured")) {
      for (const JsonField& point : fit["measured"].elements()) {
        const std::vector<JsonField> pair = point.elements(2);
        if (pair.size() != 2) point.fail_expected("a [bytes, seconds] pair");
        f.measured.emplace_back(pair[0].number(), pair[1].number());
      }
    }
    return f;
  };
  std::vector<CollectiveFit> fits;
  if (!value.json("a fit or an array of fits").is_array()) {
    fits.push_back(one(value));
    return fits;
  }
  for (const JsonField& fit : value.elements(1)) fits.push_back(one(fit));
  return fits;
}

/// Latencies above this are typos (1e308 made every estimate inf).
constexpr double kMaxLatencySeconds = 60.0;

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

/// Rates divide byte and FLOP counts: below 1 per second a simulated time can overflow to inf
/// (as a DMA rate of 1e-300 did).
void require_rate(double value, const std::string& field) {
  if (!(value >= 1.0) || !std::isfinite(value)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    throw InvalidArgumentError("hardware profile field '" + field + "' is " + text +
                               " (expected a finite rate >= 1 per second)");
  }
}

/// "kernels": {"gemm_sizes": [..], "gemm_flops_per_second": [..], optional
/// "gemm_warm_flops_per_second": [..], "elementwise_per_second": {..}, "row_kernels": {..}}; values
/// are checked by KernelRates::validate.
KernelRates kernel_rates_from_json(const JsonObject& k) {
  k.allow_only({"elementwise_per_second", "gemm_flops_per_second", "gemm_sizes",
                "gemm_warm_flops_per_second", "row_kernels"});
  KernelRates r;
  if (k.has("gemm_sizes")) {
    for (const JsonField& x : k["gemm_sizes"].elements())
      r.gemm_sizes.push_back(x.integer(1, int64_t{1} << 20));
  }
  for (const char* key : {"gemm_flops_per_second", "gemm_warm_flops_per_second"}) {
    if (!k.has(key)) continue;
    std::vector<double>& table = std::string_view(key) == "gemm_flops_per_second"
                                     ? r.gemm_flops_per_second
                                     : r.gemm_warm_flops_per_second;
    for (const JsonField& x : k[key].elements()) table.push_back(x.number());
  }
  if (k.has("elementwise_per_second")) {
    const JsonObject rates = k.object("elementwise_per_second", "an object of kernel name to rate");
    for (const auto& [op, x] : rates.json().items()) {
      r.elementwise_per_second[op] = rates[op].number();
    }
  }
  if (k.has("row_kernels")) {
    const JsonObject fits = k.object("row_kernels", "an object of kernel name to fit");
    for (const auto& [op, f] : fits.json().items()) {
      const JsonObject fit =
          fits.object(op, "{\"seconds_per_row\": s, \"seconds_per_element\": s}");
      fit.allow_only({"seconds_per_row", "seconds_per_element"});
      r.row_kernels[op] = {fit["seconds_per_row"].number(), fit["seconds_per_element"].number()};
    }
  }
  return r;
}

}  // namespace

const std::vector<std::string>& elementwise_kernel_names() {
  // What each measures: bench/kernel_bench.cc (measure_kernel_rates) and docs/PLANNER.md.
  static const std::vector<std::string> kNames = {"pass", "transcendental"};
  return kNames;
}

const std::vector<std::string>& row_kernel_names() {
  static const std::vector<std::string> kNames = {"layer_norm", "softmax", "cross_entropy"};
  return kNames;
}

void KernelRates::validate(const std::string& profile_name) const {
  const std::string where = "hardware profile '" + profile_name + "': kernels.";
  if (gemm_sizes.empty() != gemm_flops_per_second.empty()) {
    throw InvalidArgumentError(where + "gemm_sizes has " + std::to_string(gemm_sizes.size()) +
                               " entries and gemm_flops_per_second " +
                               std::to_string(gemm_flops_per_second.size()) +
                               " (expected both set, or neither)");
  }
  for (size_t i = 0; i < gemm_sizes.size(); ++i) {
    if (gemm_sizes[i] < 1 || gemm_sizes[i] > (int64_t{1} << 20) ||
        (i > 0 && gemm_sizes[i] <= gemm_sizes[i - 1])) {
      throw InvalidArgumentError(where + "gemm_sizes[" + std::to_string(i) + "] is " +
                                 std::to_string(gemm_sizes[i]) +
                                 " (expected strictly increasing sizes in 1..2^20)");
    }
  }
  const size_t s = gemm_sizes.size();
  // The warm table is optional (profiles measured before it existed), the cold one is not.
  for (const auto& [name, table] : {std::pair<const char*, const std::vector<double>*>{
                                        "gemm_flops_per_second", &gemm_flops_per_second},
                                    {"gemm_warm_flops_per_second", &gemm_warm_flops_per_second}}) {
    if (table == &gemm_warm_flops_per_second && table->empty()) continue;
    if (table->size() != s * s * s) {
      throw InvalidArgumentError(where + name + " has " + std::to_string(table->size()) +
                                 " entries (expected " + std::to_string(s * s * s) +
                                 ", one per (m, k, n) in gemm_sizes^3)");
    }
    for (size_t i = 0; i < table->size(); ++i) {
      require_rate((*table)[i], std::string("kernels.") + name + "[" + std::to_string(i) + "]");
    }
  }
  const std::vector<std::string>& names = elementwise_kernel_names();
  for (const auto& [op, rate] : elementwise_per_second) {
    if (std::find(names.begin(), names.end(), op) == names.end()) {
      throw InvalidArgumentError(where + "elementwise_per_second." + op +
                                 ": unknown kernel (expected one of: " + join(names) + ")");
    }
    require_rate(rate, "kernels.elementwise_per_second." + op);
  }
  for (const auto& [op, fit] : row_kernels) {
    const std::vector<std::string>& rows = row_kernel_names();
    if (std::find(rows.begin(), rows.end(), op) == rows.end()) {
      throw InvalidArgumentError(where + "row_kernels." + op +
                                 ": unknown kernel (expected one of: " + join(rows) + ")");
    }
    if (!(fit.seconds_per_row >= 0) || fit.seconds_per_row > 1.0 ||
        !(fit.seconds_per_element > 0) || fit.seconds_per_element > 1.0) {
      throw InvalidArgumentError(where + "row_kernels." + op + " is seconds_per_row " +
                                 number_text(fit.seconds_per_row) + ", seconds_per_element " +
                                 number_text(fit.seconds_per_element) +
                                 " (expected 0..1 s per row and > 0, at most 1 s per element)");
    }
  }
  // Partial measurements would price some kernels at the peak and others as measured: a profile
  // with any kernel rates must have all of them.
  if (!empty()) {
    std::vector<std::string> missing;
    if (gemm_sizes.empty()) missing.push_back("gemm_sizes");
    for (const std::string& op : names)
      if (!elementwise_per_second.contains(op)) missing.push_back("elementwise_per_second." + op);
    for (const std::string& op : row_kernel_names())
      if (!row_kernels.contains(op)) missing.push_back("row_kernels." + op);
    if (!missing.empty()) {
      throw InvalidArgumentError("hardware profile '" + profile_name + "': kernels lacks " +
                                 join(missing) +
                                 " (expected every kernel rate `vtpu bench hardware` measures, "
                                 "or no kernels object)");
    }
  }
}

double HardwareProfile::peak_flops(const std::string& dtype) const {
  const auto it = peak_flops_per_second.find(dtype);
  if (it == peak_flops_per_second.end()) {
    std::vector<std::string> names;
    for (const auto& [k, v] : peak_flops_per_second) names.push_back(k);
    const std::string where =
        source_path.empty() ? "hardware profile '" + name + "'"
                            : "hardware profile file '" + source_path + "' (name '" + name + "')";
    // The shipped this_machine measures f32 only (Eigen's GEMM); the advice names a
    // copy to edit rather than the shipped file.
    const std::string fix =
        source_path.empty()
            ? "; write the profile to a file (vtpu bench hardware --out FILE, or a copy of the "
              "shipped JSON), add \"" +
                  dtype +
                  "\" to its peak_flops_per_second and pass --hardware FILE, or plan with a TPU "
                  "profile"
            : "; add \"" + dtype + "\" to its peak_flops_per_second";
    throw InvalidArgumentError(where + " has no peak_flops_per_second." + dtype +
                               " (it lists: " + join(names) + fix + ")");
  }
  return it->second;
}

namespace {

// The alpha-beta fits of each collective: one fit per group size, each with sane figures and
// measured points in increasing size.
void validate_collective_fits(
    const std::string& name, const std::map<std::string, std::vector<CollectiveFit>>& collectives) {
  for (const auto& [op, fits] : collectives) {
    if (fits.empty()) {
      throw InvalidArgumentError("hardware profile '" + name + "': collectives." + op +
                                 " has no fit (expected at least one, or no entry)");
    }
    std::set<int> sizes;
    for (const CollectiveFit& fit : fits) {
      // The fit's group size names it when there are several.
      const std::string field =
          "collectives." + op +
          (fits.size() > 1 ? "[group_size " + std::to_string(fit.group_size) + "]" : "");
      if (!(fit.alpha_seconds >= 0) || fit.alpha_seconds > kMaxLatencySeconds) {
        throw InvalidArgumentError("hardware profile '" + name + "': " + field +
                                   ".alpha_seconds is " + number_text(fit.alpha_seconds) +
                                   " (expected 0..60 seconds)");
      }
      require_positive(fit.beta_seconds_per_byte, field + ".beta_seconds_per_byte");
      if (fit.beta_seconds_per_byte > 1.0) {  // below 1 B/s, as require_rate
        throw InvalidArgumentError(
            "hardware profile '" + name + "': " + field + ".beta_seconds_per_byte is " +
            number_text(fit.beta_seconds_per_byte) + " (expected at most 1 second per byte)");
      }
      for (size_t i = 0; i < fit.measured.size(); ++i) {
        const auto [bytes, seconds] = fit.measured[i];
        const std::string point = field + ".measured[" + std::to_string(i) + "]";
        if (!(bytes > 0) || !std::isfinite(bytes) ||
            (i > 0 && !(bytes > fit.measured[i - 1].first))) {
          throw InvalidArgumentError("hardware profile '" + name + "': " + point + " has bytes " +
                                     number_text(bytes) +
                                     " (expected a finite size > 0, larger than the point before)");
        }
        if (!(seconds > 0) || seconds > kMaxLatencySeconds) {
          throw InvalidArgumentError("hardware profile '" + name + "': " + point + " has seconds " +
                                     number_text(seconds) +
                                     " (expected a time in (0, 60] seconds)");
        }
      }
      if (fit.group_size < 2) {
        throw InvalidArgumentError("hardware profile '" + name + "': collectives." + op +
                                   ".group_size is " + std::to_string(fit.group_size) +
                                   " (expected >= 2)");
      }
      if (!sizes.insert(fit.group_size).second) {
        throw InvalidArgumentError("hardware profile '" + name + "': collectives." + op +
                                   " has two fits with group_size " +
                                   std::to_string(fit.group_size) +
                                   " (expected one fit per group size)");
      }
    }
  }
}

}  // namespace

void HardwareProfile::validate() const {
  if (name.empty()) throw InvalidArgumentError("hardware profile has an empty 'name'");
  // A NUL in the name cut the table's "hardware" header short while
  // plan files kept it whole; refused as the model reader refuses control characters in names.
  if (std::ranges::any_of(
          name, [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; })) {
    throw InvalidArgumentError(
        "hardware profile name " +
        nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
        " has a control character (expected none)");
  }
  if (peak_flops_per_second.empty()) {
    throw InvalidArgumentError("hardware profile '" + name +
                               "' lists no peak_flops_per_second (expected e.g. {\"f32\": 1e12})");
  }
  for (const auto& [dtype, flops] : peak_flops_per_second) {
    require_rate(flops, "peak_flops_per_second." + dtype);
  }
  require_positive(static_cast<double>(hbm_bytes), "hbm_bytes");
  require_rate(hbm_bytes_per_second, "hbm_bytes_per_second");
  // On-core memories become arenas: the same 1 KiB..4 GiB bounds as RuntimeOptions' overrides,
  // named by key.
  for (const auto& [key, bytes] : {std::pair<const char*, uint64_t>{"vmem_bytes", vmem_bytes},
                                   {"smem_bytes", smem_bytes},
                                   {"accumulator_bytes", accumulator_bytes}}) {
    if (bytes < 1024 || bytes > (uint64_t{4} << 30)) {
      throw InvalidArgumentError("hardware profile '" + name + "': " + key + " is " +
                                 std::to_string(bytes) + " (expected 1 KiB..4 GiB)");
    }
  }
  static const std::set<std::string> kTopologies = {"", "torus_2d", "torus_3d", "ring",
                                                    "shared_memory"};
  if (!kTopologies.contains(topology)) {
    throw InvalidArgumentError("hardware profile '" + name + "': topology is '" + topology +
                               "' (expected torus_2d, torus_3d, ring or shared_memory)");
  }
  if (scoped_vmem_limit_bytes == 0 || scoped_vmem_limit_bytes > vmem_bytes) {
    throw InvalidArgumentError("hardware profile '" + name + "': scoped_vmem_limit_bytes is " +
                               std::to_string(scoped_vmem_limit_bytes) + " (expected 1.." +
                               std::to_string(vmem_bytes) + ", at most vmem_bytes)");
  }
  if (cores_per_chip < 1) {
    throw InvalidArgumentError("hardware profile '" + name + "': cores_per_chip is " +
                               std::to_string(cores_per_chip) + " (expected >= 1)");
  }
  validate_collective_fits(name, collectives);
  kernels.validate(name);
  std::set<int> pinned_sizes;
  for (const ThreadPinning& t : thread_pinning) {
    if (!pinned_sizes.insert(t.cores).second) {
      throw InvalidArgumentError(
          "hardware profile '" + name + "': thread_pinning has two records for " +
          std::to_string(t.cores) + " cores (expected one per calibrated group size)");
    }
  }
  if (host_cpus < 0) {
    throw InvalidArgumentError("hardware profile '" + name + "': host_cpus is " +
                               std::to_string(host_cpus) +
                               " (expected >= 1, or 0/absent for dedicated hardware)");
  }
  if ((cache_bytes == 0) != (cache_bytes_per_second == 0.0)) {
    throw InvalidArgumentError("hardware profile '" + name + "': cache_bytes is " +
                               std::to_string(cache_bytes) + " and cache_bytes_per_second is " +
                               number_text(cache_bytes_per_second) +
                               " (expected both set, or neither)");
  }
  if (cache_bytes != 0) require_rate(cache_bytes_per_second, "cache_bytes_per_second");
  if ((llc_bytes == 0) != (llc_bytes_per_second == 0.0)) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.6g", llc_bytes_per_second);
    throw InvalidArgumentError("hardware profile '" + name + "': llc_bytes is " +
                               std::to_string(llc_bytes) + " and llc_bytes_per_second is " + rate +
                               " (expected both set, or neither)");
  }
  if (llc_bytes != 0) {
    require_rate(llc_bytes_per_second, "llc_bytes_per_second");
    if (llc_bytes <= cache_bytes) {
      throw InvalidArgumentError("hardware profile '" + name + "': llc_bytes is " +
                                 std::to_string(llc_bytes) + " (expected more than cache_bytes, " +
                                 std::to_string(cache_bytes) +
                                 ": the last-level cache is the larger level behind it)");
    }
  }
  if (!(link_bytes_per_second == 0 || link_bytes_per_second >= 1) ||
      !std::isfinite(link_bytes_per_second) || !(link_latency_seconds >= 0) ||
      link_latency_seconds > kMaxLatencySeconds || links_per_chip < 0) {
    throw InvalidArgumentError(
        "hardware profile '" + name + "': link figures are link_bytes_per_second " +
        number_text(link_bytes_per_second) + ", link_latency_seconds " +
        number_text(link_latency_seconds) + ", links_per_chip " + std::to_string(links_per_chip) +
        " (expected a finite rate of 0 or >= 1 B/s, a latency of 0..60 s and >= 0 links)");
  }
  // A torus or ring prices collectives over its links (planner/cost_model.h: a
  // bidirectional ring per torus dimension, 2 links per chip each), so both figures must be set.
  const int torus_dims = topology == "torus_3d"   ? 3
                         : topology == "torus_2d" ? 2
                         : topology == "ring"     ? 1
                                                  : 0;
  if (torus_dims > 0 && link_bytes_per_second == 0) {
    throw InvalidArgumentError(
        "hardware profile '" + name + "': link_bytes_per_second is 0 or missing on topology " +
        topology + " (expected a rate >= 1 B/s: collectives are priced over the links)");
  }
  if (torus_dims > 0 && links_per_chip < 2 * torus_dims) {
    throw InvalidArgumentError("hardware profile '" + name + "': links_per_chip is " +
                               std::to_string(links_per_chip) + " on topology " + topology +
                               " (expected >= " + std::to_string(2 * torus_dims) +
                               ": one link each way per torus dimension)");
  }
}

namespace {

// The fields that hold one number, size or name.
void scalars_from_json(const JsonObject& r, HardwareProfile& p) {
  p.name = r["name"].string();
  if (r.has("description")) p.description = r["description"].string();
  if (r.has("cores_per_chip")) {
    p.cores_per_chip = static_cast<int>(r["cores_per_chip"].integer(1, 1 << 20));
  }
  p.hbm_bytes = r["hbm_bytes"].bytes();
  p.hbm_bytes_per_second = r["hbm_bytes_per_second"].number();
  p.vmem_bytes = r["vmem_bytes"].bytes();
  p.scoped_vmem_limit_bytes = r.has("scoped_vmem_limit_bytes")
                                  ? r["scoped_vmem_limit_bytes"].bytes()
                                  : std::min<uint64_t>(p.vmem_bytes, 16 * kMiB);
  p.smem_bytes = r["smem_bytes"].bytes();
  p.accumulator_bytes = r["accumulator_bytes"].bytes();
  if (r.has("link_bytes_per_second")) {
    p.link_bytes_per_second = r["link_bytes_per_second"].number();
  }
  if (r.has("link_latency_seconds")) p.link_latency_seconds = r["link_latency_seconds"].number();
  if (r.has("links_per_chip")) {
    p.links_per_chip = static_cast<int>(r["links_per_chip"].integer(0, 1 << 20));
  }
  if (r.has("topology")) p.topology = r["topology"].string();
  if (r.has("host_cpus")) p.host_cpus = static_cast<int>(r["host_cpus"].integer(0, 1 << 20));
  if (r.has("cache_bytes")) p.cache_bytes = r["cache_bytes"].bytes();
  if (r.has("cache_bytes_per_second")) {
    p.cache_bytes_per_second = r["cache_bytes_per_second"].number();
  }
  if (r.has("llc_bytes")) p.llc_bytes = r["llc_bytes"].bytes();
  if (r.has("llc_bytes_per_second")) p.llc_bytes_per_second = r["llc_bytes_per_second"].number();
}

}  // namespace

HardwareProfile HardwareProfile::from_json(const nlohmann::json& j, const std::string& where) {
  const JsonObject r(j, where);
  r.allow_only({"name",
                "description",
                "cores_per_chip",
                "peak_flops_per_second",
                "hbm_bytes",
                "hbm_bytes_per_second",
                "vmem_bytes",
                "scoped_vmem_limit_bytes",
                "smem_bytes",
                "accumulator_bytes",
                "link_bytes_per_second",
                "link_latency_seconds",
                "links_per_chip",
                "topology",
                "host_cpus",
                "cache_bytes",
                "cache_bytes_per_second",
                "llc_bytes",
                "llc_bytes_per_second",
                "collectives",
                "thread_pinning",
                "kernels",
                "sources"});
  HardwareProfile p;
  scalars_from_json(r, p);
  const JsonObject flops =
      r.object("peak_flops_per_second", "an object such as {\"bf16\": 1.97e14}");
  for (const auto& [dtype, value] : flops.json().items()) {
    p.peak_flops_per_second[dtype] = flops[dtype].number();
  }
  if (r.has("collectives")) {
    const JsonObject c = r.object("collectives", "an object of collective name to fit");
    c.allow_only({"all_gather", "reduce_scatter", "all_reduce", "all_to_all"});
    for (const auto& [op, fit] : c.json().items())
      p.collectives[op] = collective_fits_from_json(c[op]);
  }
  if (r.has("thread_pinning")) {
    for (const JsonField& record : r["thread_pinning"].elements()) {
      p.thread_pinning.push_back(
          ThreadPinning::from_json(record.json("a pinning record"), where, record.path()));
    }
    std::ranges::sort(p.thread_pinning, {}, &ThreadPinning::cores);
  }
  if (r.has("kernels")) {
    p.kernels =
        kernel_rates_from_json(r.object("kernels",
                                        "an object with gemm_sizes, gemm_flops_per_second and "
                                        "elementwise_per_second"));
  }
  if (r.has("sources")) {
    const JsonObject s = r.object("sources", "an object of field name to source text");
    for (const auto& [k, v] : s.json().items())
      p.sources[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  // Rules between fields and ranges the readers above do not know.
  try {
    p.validate();
  } catch (const InvalidArgumentError& e) {
    if (where == "hardware profile") throw;  // validate() names the profile already
    throw InvalidArgumentError(where + ": " + e.message());
  }
  return p;
}

nlohmann::json HardwareProfile::to_json() const {
  nlohmann::json j{{"name", name},
                   {"description", description},
                   {"cores_per_chip", cores_per_chip},
                   {"peak_flops_per_second", peak_flops_per_second},
                   {"hbm_bytes", hbm_bytes},
                   {"hbm_bytes_per_second", hbm_bytes_per_second},
                   {"vmem_bytes", vmem_bytes},
                   {"scoped_vmem_limit_bytes", scoped_vmem_limit_bytes},
                   {"smem_bytes", smem_bytes},
                   {"accumulator_bytes", accumulator_bytes},
                   {"link_bytes_per_second", link_bytes_per_second},
                   {"link_latency_seconds", link_latency_seconds},
                   {"links_per_chip", links_per_chip},
                   {"topology", topology},
                   {"sources", sources}};
  // Written only when set, so that a TPU profile's JSON is what it was before these fields.
  if (host_cpus != 0) j["host_cpus"] = host_cpus;
  if (cache_bytes != 0) {
    j["cache_bytes"] = cache_bytes;
    j["cache_bytes_per_second"] = cache_bytes_per_second;
  }
  if (llc_bytes != 0) {
    j["llc_bytes"] = llc_bytes;
    j["llc_bytes_per_second"] = llc_bytes_per_second;
  }
  if (!kernels.empty()) {
    j["kernels"] = {{"gemm_sizes", kernels.gemm_sizes},
                    {"gemm_flops_per_second", kernels.gemm_flops_per_second},
                    {"elementwise_per_second", kernels.elementwise_per_second},
                    {"row_kernels", nlohmann::json::object()}};
    if (!kernels.gemm_warm_flops_per_second.empty()) {  // written only when measured
      j["kernels"]["gemm_warm_flops_per_second"] = kernels.gemm_warm_flops_per_second;
    }
    for (const auto& [op, fit] : kernels.row_kernels) {
      j["kernels"]["row_kernels"][op] = {{"seconds_per_row", fit.seconds_per_row},
                                         {"seconds_per_element", fit.seconds_per_element}};
    }
  }
  if (!collectives.empty()) {
    nlohmann::json c = nlohmann::json::object();
    for (const auto& [op, fits] : collectives) {
      std::vector<CollectiveFit> sorted = fits;
      std::ranges::sort(sorted, {}, &CollectiveFit::group_size);
      nlohmann::json a = nlohmann::json::array();
      for (const CollectiveFit& fit : sorted) {
        nlohmann::json f = {{"alpha_seconds", fit.alpha_seconds},
                            {"beta_seconds_per_byte", fit.beta_seconds_per_byte},
                            {"group_size", fit.group_size}};
        if (!fit.measured.empty()) {
          nlohmann::json m = nlohmann::json::array();
          for (const auto& [bytes, seconds] : fit.measured) m.push_back({bytes, seconds});
          f["measured"] = std::move(m);
        }
        a.push_back(std::move(f));
      }
      // One fit keeps the single-object form of the profiles written before several existed.
      c[op] = a.size() == 1 ? a[0] : a;
    }
    j["collectives"] = c;
  }
  if (!thread_pinning.empty()) {  // written only when recorded, as the optional fields above
    std::vector<ThreadPinning> sorted = thread_pinning;
    std::ranges::sort(sorted, {}, &ThreadPinning::cores);
    nlohmann::json t = nlohmann::json::array();
    for (const ThreadPinning& record : sorted) t.push_back(record.to_json());
    j["thread_pinning"] = std::move(t);
  }
  return j;
}

HardwareProfile HardwareProfile::load_json_file(const std::string& path) {
  // A profile is a few KB; the bound keeps a data file passed by mistake out.
  constexpr uintmax_t kMaxProfileBytes = uintmax_t{1} << 20;
  HardwareProfile p =
      from_json(read_json_file(path, kMaxProfileBytes, "hardware profile file", "1 MiB"),
                "hardware profile file '" + path + "'");
  p.source_path = path;
  return p;
}

std::vector<std::string> HardwareProfile::builtin_names() {
  std::vector<std::string> names;
  for (const auto& [stem, text] : kBuiltinProfiles) {
    names.push_back(nlohmann::json::parse(text).at("name").get<std::string>());
  }
  std::sort(names.begin(), names.end());
  return names;
}

HardwareProfile HardwareProfile::get(const std::string& name_or_path) {
  if (name_or_path.size() > 5 && name_or_path.ends_with(".json")) {
    return load_json_file(name_or_path);
  }
  for (const auto& [stem, text] : kBuiltinProfiles) {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("name").get<std::string>() == name_or_path || stem == name_or_path) {
      return from_json(j);
    }
  }
  throw NotFoundError("unknown hardware profile '" + name_or_path + "' (expected one of: " +
                      join(builtin_names()) + ", or a path ending in .json)");
}

}  // namespace vtpu
