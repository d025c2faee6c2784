#include "vtpu/runtime/hardware_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/common/json_fields.h"

namespace vtpu {

namespace {

// Generated at build time from profiles/*.json (runtime/CMakeLists.txt): kBuiltinProfiles, an
// array of {file stem, JSON text}.
#include "runtime/builtin_profiles.inc"

uint64_t size_field(const nlohmann::json& j, const char* key) {
  return json_bytes_field(j, key, "hardware profile key");
}

double number_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) {
    throw InvalidArgumentError(std::string("hardware profile key '") + key + "' is " + v.dump() +
                               " (expected a number)");
  }
  return v.get<double>();
}

/// An integer in [lo, hi]: 2.7 or 1e20 are errors, not truncated or cast with UB (adv7 F10).
int small_int_field(const nlohmann::json& j, const char* key, int lo, int hi) {
  const nlohmann::json& v = j.at(key);
  const double d = v.is_number() ? v.get<double>() : 0.0;
  if (!v.is_number() || !std::isfinite(d) || d != std::floor(d) || d < lo || d > hi) {
    throw InvalidArgumentError(std::string("hardware profile key '") + key + "' is " + v.dump() +
                               " (expected an integer in " + std::to_string(lo) + ".." +
                               std::to_string(hi) + ")");
  }
  return static_cast<int>(d);
}

std::string string_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_string()) {
    throw InvalidArgumentError(std::string("hardware profile key '") + key + "' is " + v.dump() +
                               " (expected a string)");
  }
  return v.get<std::string>();
}

void require_positive(double value, const std::string& field) {
  if (!(value > 0.0) || !std::isfinite(value)) {
    // %g, not std::to_string's %f: -1e-9 printed as -0.000000 (new-user pass nu11, NU39).
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.6g", value);
    throw InvalidArgumentError("hardware profile field '" + field + "' is " + shown +
                               " (expected a finite number > 0)");
  }
}

/// One collective's entry of "collectives": a fit object or a non-empty array of them (the array
/// must not mix in anything else: a number, a nested array). group_size must be an integer; its
/// range and distinctness are checked by validate().
std::vector<CollectiveFit> collective_fits_from_json(const std::string& op,
                                                     const nlohmann::json& value) {
  static const std::string kForm =
      "{\"alpha_seconds\": s, \"beta_seconds_per_byte\": s, \"group_size\": n}";
  const auto one = [&](const nlohmann::json& fit, const std::string& where) {
    if (!fit.is_object() || !fit.contains("alpha_seconds") ||
        !fit.contains("beta_seconds_per_byte") || !fit.contains("group_size")) {
      throw InvalidArgumentError("hardware profile " + where + " is " + fit.dump() + " (expected " +
                                 kForm + (value.is_array() ? "" : " or an array of them") + ")");
    }
    // Regression (adversarial pass adv10, A6): an unknown key in a fit was ignored, so a typo
    // such as "measure" for "measured" silently priced the collective by alpha-beta alone.
    for (const auto& [key, v] : fit.items()) {
      if (key != "alpha_seconds" && key != "beta_seconds_per_byte" && key != "group_size" &&
          key != "measured") {
        throw InvalidArgumentError("unknown hardware profile key '" + where + "." + key +
                                   "' (known: alpha_seconds, beta_seconds_per_byte, group_size, "
                                   "measured)");
      }
    }
    CollectiveFit f;
    f.alpha_seconds = number_field(fit, "alpha_seconds");
    f.beta_seconds_per_byte = number_field(fit, "beta_seconds_per_byte");
    const double g = number_field(fit, "group_size");
    if (!std::isfinite(g) || g != std::floor(g) || std::abs(g) > (1 << 20)) {
      throw InvalidArgumentError("hardware profile " + where + ".group_size is " +
                                 fit.at("group_size").dump() +
                                 " (expected an integer number of cores >= 2)");
    }
    f.group_size = static_cast<int>(g);
    if (fit.contains("measured")) {
      const nlohmann::json& m = fit.at("measured");
      const auto bad = [&](const std::string& what) {
        return InvalidArgumentError("hardware profile " + where + ".measured " + what +
                                    " (expected an array of [bytes, seconds] pairs)");
      };
      if (!m.is_array()) throw bad("is " + m.dump());
      for (size_t i = 0; i < m.size(); ++i) {
        const nlohmann::json& point = m[i];
        if (!point.is_array() || point.size() != 2 || !point[0].is_number() ||
            !point[1].is_number()) {
          throw bad("[" + std::to_string(i) + "] is " + point.dump());
        }
        f.measured.emplace_back(point[0].get<double>(), point[1].get<double>());
      }
    }
    return f;
  };
  std::vector<CollectiveFit> fits;
  if (!value.is_array()) {
    fits.push_back(one(value, "collectives." + op));
    return fits;
  }
  if (value.empty()) {
    throw InvalidArgumentError("hardware profile collectives." + op + " is [] (expected a fit " +
                               kForm + " or a non-empty array of them)");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    fits.push_back(one(value[i], "collectives." + op + "[" + std::to_string(i) + "]"));
  }
  return fits;
}

/// Latencies above this are typos (1e308 made every estimate inf: issue 6 adversarial pass, F5).
constexpr double kMaxLatencySeconds = 60.0;

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

/// Rates divide byte and FLOP counts: below 1 per second a simulated time can overflow to inf
/// (adv7 F10, as the DMA rate 1e-300 bug).
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
KernelRates kernel_rates_from_json(const nlohmann::json& k) {
  if (!k.is_object()) {
    throw InvalidArgumentError("hardware profile key 'kernels' is " + k.dump() +
                               " (expected an object with gemm_sizes, gemm_flops_per_second and "
                               "elementwise_per_second)");
  }
  KernelRates r;
  for (const auto& [key, v] : k.items()) {
    if (key == "gemm_sizes") {
      if (!v.is_array()) {
        throw InvalidArgumentError("hardware profile kernels.gemm_sizes is " + v.dump() +
                                   " (expected an array of integers)");
      }
      for (const nlohmann::json& x : v) {
        const double d = x.is_number() ? x.get<double>() : 0.0;
        if (!x.is_number() || d != std::floor(d) || d < 1 || d > double(int64_t{1} << 20)) {
          throw InvalidArgumentError("hardware profile kernels.gemm_sizes holds " + x.dump() +
                                     " (expected integers in 1..2^20)");
        }
        r.gemm_sizes.push_back(static_cast<int64_t>(d));
      }
    } else if (key == "gemm_flops_per_second" || key == "gemm_warm_flops_per_second") {
      if (!v.is_array()) {
        throw InvalidArgumentError("hardware profile kernels." + key + " is " +
                                   v.dump().substr(0, 80) + " (expected an array of numbers)");
      }
      std::vector<double>& table =
          key == "gemm_flops_per_second" ? r.gemm_flops_per_second : r.gemm_warm_flops_per_second;
      for (const nlohmann::json& x : v) {
        if (!x.is_number()) {
          throw InvalidArgumentError("hardware profile kernels." + key + " holds " + x.dump() +
                                     " (expected numbers)");
        }
        table.push_back(x.get<double>());
      }
    } else if (key == "elementwise_per_second") {
      if (!v.is_object()) {
        throw InvalidArgumentError("hardware profile kernels.elementwise_per_second is " +
                                   v.dump() + " (expected an object of kernel name to rate)");
      }
      for (const auto& [op, x] : v.items()) {
        if (!x.is_number()) {
          throw InvalidArgumentError("hardware profile kernels.elementwise_per_second." + op +
                                     " is " + x.dump() + " (expected a number)");
        }
        r.elementwise_per_second[op] = x.get<double>();
      }
    } else if (key == "row_kernels") {
      if (!v.is_object()) {
        throw InvalidArgumentError("hardware profile kernels.row_kernels is " + v.dump() +
                                   " (expected an object of kernel name to fit)");
      }
      for (const auto& [op, f] : v.items()) {
        if (!f.is_object() || f.size() != 2 || !f.contains("seconds_per_row") ||
            !f.contains("seconds_per_element") || !f.at("seconds_per_row").is_number() ||
            !f.at("seconds_per_element").is_number()) {
          throw InvalidArgumentError("hardware profile kernels.row_kernels." + op + " is " +
                                     f.dump() +
                                     " (expected {\"seconds_per_row\": s, "
                                     "\"seconds_per_element\": s})");
        }
        r.row_kernels[op] = {f.at("seconds_per_row").get<double>(),
                             f.at("seconds_per_element").get<double>()};
      }
    } else {
      throw InvalidArgumentError("unknown hardware profile key 'kernels." + key +
                                 "' (known: elementwise_per_second, gemm_flops_per_second, "
                                 "gemm_sizes, gemm_warm_flops_per_second, row_kernels)");
    }
  }
  return r;
}

}  // namespace

const std::vector<std::string>& elementwise_kernel_names() {
  // What each measures: bench/kernel_bench.cc (measure_kernel_rates) and docs/SHARDING.md.
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
    // nu12 NU51: the shipped this_machine measures f32 only (Eigen's GEMM); the advice names a
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

void HardwareProfile::validate() const {
  if (name.empty()) throw InvalidArgumentError("hardware profile has an empty 'name'");
  // Adversarial pass adv12, ADV9: a NUL in the name cut the table's "hardware" header short while
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
  // named by key (adv7 F17).
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
  // F7 (issue 6): a torus or ring prices collectives over its links (planner/cost_model.h: a
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

HardwareProfile HardwareProfile::from_json(const nlohmann::json& j) {
  if (!j.is_object()) {
    throw InvalidArgumentError("hardware profile must be a JSON object, got " +
                               std::string(j.type_name()));
  }
  static const std::set<std::string> kKnown = {"name",
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
                                               "sources"};
  for (const auto& [key, value] : j.items()) {
    if (!kKnown.contains(key)) {
      throw InvalidArgumentError("unknown hardware profile key '" + key +
                                 "' (known: " + join(kKnown) + ")");
    }
  }
  for (const char* key : {"name", "peak_flops_per_second", "hbm_bytes", "hbm_bytes_per_second",
                          "vmem_bytes", "smem_bytes", "accumulator_bytes"}) {
    if (!j.contains(key)) {
      throw InvalidArgumentError(std::string("hardware profile lacks the required key '") + key +
                                 "'");
    }
  }
  HardwareProfile p;
  p.name = string_field(j, "name");
  if (j.contains("description")) p.description = string_field(j, "description");
  if (j.contains("cores_per_chip"))
    p.cores_per_chip = small_int_field(j, "cores_per_chip", 1, 1 << 20);
  const nlohmann::json& flops = j.at("peak_flops_per_second");
  if (!flops.is_object()) {
    throw InvalidArgumentError("hardware profile key 'peak_flops_per_second' is " + flops.dump() +
                               " (expected an object such as {\"bf16\": 1.97e14})");
  }
  for (const auto& [dtype, value] : flops.items()) {
    if (!value.is_number()) {
      throw InvalidArgumentError("hardware profile peak_flops_per_second." + dtype + " is " +
                                 value.dump() + " (expected a number)");
    }
    p.peak_flops_per_second[dtype] = value.get<double>();
  }
  p.hbm_bytes = size_field(j, "hbm_bytes");
  p.hbm_bytes_per_second = number_field(j, "hbm_bytes_per_second");
  p.vmem_bytes = size_field(j, "vmem_bytes");
  p.scoped_vmem_limit_bytes = j.contains("scoped_vmem_limit_bytes")
                                  ? size_field(j, "scoped_vmem_limit_bytes")
                                  : std::min<uint64_t>(p.vmem_bytes, 16 * kMiB);
  p.smem_bytes = size_field(j, "smem_bytes");
  p.accumulator_bytes = size_field(j, "accumulator_bytes");
  if (j.contains("link_bytes_per_second"))
    p.link_bytes_per_second = number_field(j, "link_bytes_per_second");
  if (j.contains("link_latency_seconds"))
    p.link_latency_seconds = number_field(j, "link_latency_seconds");
  if (j.contains("links_per_chip"))
    p.links_per_chip = small_int_field(j, "links_per_chip", 0, 1 << 20);
  if (j.contains("topology")) p.topology = string_field(j, "topology");
  if (j.contains("host_cpus")) p.host_cpus = small_int_field(j, "host_cpus", 0, 1 << 20);
  if (j.contains("cache_bytes")) p.cache_bytes = size_field(j, "cache_bytes");
  if (j.contains("cache_bytes_per_second"))
    p.cache_bytes_per_second = number_field(j, "cache_bytes_per_second");
  if (j.contains("llc_bytes")) p.llc_bytes = size_field(j, "llc_bytes");
  if (j.contains("llc_bytes_per_second"))
    p.llc_bytes_per_second = number_field(j, "llc_bytes_per_second");
  if (j.contains("collectives")) {
    const nlohmann::json& c = j.at("collectives");
    if (!c.is_object()) {
      throw InvalidArgumentError("hardware profile key 'collectives' is " + c.dump() +
                                 " (expected an object of collective name to fit)");
    }
    static const std::set<std::string> kOps = {"all_gather", "reduce_scatter", "all_reduce",
                                               "all_to_all"};
    for (const auto& [op, fit] : c.items()) {
      if (!kOps.contains(op)) {
        throw InvalidArgumentError("hardware profile collectives." + op +
                                   ": unknown collective (expected one of: " + join(kOps) + ")");
      }
      p.collectives[op] = collective_fits_from_json(op, fit);
    }
  }
  if (j.contains("thread_pinning")) {
    const nlohmann::json& t = j.at("thread_pinning");
    if (!t.is_array()) {
      throw InvalidArgumentError("hardware profile key 'thread_pinning' is " + t.dump() +
                                 " (expected an array of pinning records, one per group size)");
    }
    for (const nlohmann::json& record : t)
      p.thread_pinning.push_back(ThreadPinning::from_json(record));
    std::ranges::sort(p.thread_pinning, {}, &ThreadPinning::cores);
  }
  if (j.contains("kernels")) p.kernels = kernel_rates_from_json(j.at("kernels"));
  if (j.contains("sources")) {
    const nlohmann::json& s = j.at("sources");
    if (!s.is_object()) {
      throw InvalidArgumentError("hardware profile key 'sources' is " + s.dump() +
                                 " (expected an object of field name to source text)");
    }
    for (const auto& [k, v] : s.items())
      p.sources[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  p.validate();
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
  // F24 (issue 6 adversarial pass): nothing bounded what was read (a dataset passed by mistake
  // as --hardware data.json would be parsed whole); a profile is a few KB.
  constexpr uintmax_t kMaxProfileBytes = uintmax_t{1} << 20;
  const std::string text =
      read_bounded_text_file(path, kMaxProfileBytes, "hardware profile file", "1 MiB");
  nlohmann::json j;
  // Regression (issue 6 adversarial pass, F6): a key given twice in one object silently took the
  // last value; like an unknown key, it is now an error naming the key.
  try {
    j = parse_json_unique_keys(text, "hardware profile file '" + path + "'");
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError("hardware profile file '" + path +
                               "' is not valid JSON: " + e.what());
  }
  try {
    HardwareProfile p = from_json(j);
    p.source_path = path;
    return p;
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError("hardware profile file '" + path + "': " + e.message());
  }
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
