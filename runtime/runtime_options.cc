#include "vtpu/runtime/runtime_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"
#include "vtpu/common/host.h"
#include "vtpu/common/json_fields.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/hbm_device.h"

namespace vtpu {

std::optional<std::chrono::milliseconds> RuntimeOptions::collective_timeout_from_env() {
  const char* v = std::getenv("VTPU_COLLECTIVE_TIMEOUT_MS");
  if (v == nullptr || *v == '\0') return std::nullopt;
  const std::string text(v);
  int64_t ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || end != text.data() + text.size() || ms < 1 ||
      ms > kMaxCollectiveTimeout.count()) {
    throw InvalidArgumentError("VTPU_COLLECTIVE_TIMEOUT_MS is '" + text +
                               "' (expected a whole number of milliseconds, 1.." +
                               std::to_string(kMaxCollectiveTimeout.count()) + ", at most 7 days)");
  }
  return std::chrono::milliseconds(ms);
}

std::chrono::milliseconds RuntimeOptions::default_collective_timeout(int num_cores, int host_cpus) {
  if (num_cores < 1 || host_cpus < 1) {
    throw InvalidArgumentError("default_collective_timeout of " + std::to_string(num_cores) +
                               " cores on " + std::to_string(host_cpus) +
                               " CPUs (expected both >= 1)");
  }
  const double scale = std::max(1.0, static_cast<double>(num_cores) / host_cpus);
  const double ms = std::round(static_cast<double>(kDefaultCollectiveTimeout.count()) * scale);
  return std::chrono::milliseconds(
      std::min(static_cast<int64_t>(ms), static_cast<int64_t>(kMaxCollectiveTimeout.count())));
}

std::chrono::milliseconds RuntimeOptions::effective_collective_timeout() const {
  if (collective_timeout) return *collective_timeout;
  return default_collective_timeout(std::max(num_cores, 1), usable_cpus());
}

std::string RuntimeOptions::default_pin_threads() {
  const char* v = std::getenv("VTPU_PIN_THREADS");
  if (v == nullptr || *v == '\0') return "auto";
  const std::string text(v);
  if (text != "auto" && text != "on" && text != "off") {
    throw InvalidArgumentError("VTPU_PIN_THREADS is '" + text +
                               "' (expected \"auto\", \"on\" or \"off\")");
  }
  return text;
}

void RuntimeOptions::validate() const {
  if (num_cores < 1 || num_cores > 1024) {
    throw InvalidArgumentError("num_cores is " + std::to_string(num_cores) + " (expected 1..1024)");
  }
  if (hbm_bytes_per_core < 256) {
    throw InvalidArgumentError("hbm_bytes_per_core is " + std::to_string(hbm_bytes_per_core) +
                               " (expected at least 256 bytes)");
  }
  if (link_slot_bytes < 64 || link_slot_bytes % 64 != 0 || link_slot_bytes > (uint64_t{1} << 30)) {
    throw InvalidArgumentError("link_slot_bytes is " + std::to_string(link_slot_bytes) +
                               " (expected a multiple of 64 bytes in [64, 1 GiB])");
  }
  if (link_num_slots < 2 || link_num_slots > 1024) {
    throw InvalidArgumentError("link_num_slots is " + std::to_string(link_num_slots) +
                               " (expected 2..1024: ring steps hold a received slot while they "
                               "wait for a send slot, so a link needs double buffering)");
  }
  if (!(hbm_memory_fraction > 0.0 && hbm_memory_fraction <= 1.0)) {
    char text[32];  // %g: std::to_string's %f printed 1.5 as 1.500000 and 1e-9 as 0.000000
    std::snprintf(text, sizeof(text), "%g", hbm_memory_fraction);
    throw InvalidArgumentError("hbm_memory_fraction is " + std::string(text) +
                               " (expected 0 < fraction <= 1 of each core's total HBM)");
  }
  // 1e-9 of 16 GiB (17 bytes) passed here and failed when the
  // first core's arena was built, "BFC capacity 17 bytes is below the 256-byte minimum chunk",
  // naming neither the key nor the file. Every allocator's granule is 256 bytes; the arena's
  // capacity is resolved as the runtime resolves it (round(fraction x total), ArenaLimit).
  if (const uint64_t arena = ArenaLimit::fraction(hbm_memory_fraction).resolve(hbm_bytes_per_core);
      arena < kMinArenaBytes) {
    // The least fraction that suffices, kMinArenaBytes / total rounded up to 3 digits.
    const double least =
        static_cast<double>(kMinArenaBytes) / static_cast<double>(hbm_bytes_per_core);
    const double unit = std::pow(10.0, std::floor(std::log10(least)) - 2);
    char text[320];
    std::snprintf(text, sizeof(text),
                  "hbm_memory_fraction is %g, which of hbm_bytes_per_core %llu (%s) leaves %llu "
                  "bytes per core (expected at least %llu bytes, the allocators' minimum chunk: "
                  "a fraction of at least %.3g)",
                  hbm_memory_fraction, static_cast<unsigned long long>(hbm_bytes_per_core),
                  format_bytes(hbm_bytes_per_core).c_str(), static_cast<unsigned long long>(arena),
                  static_cast<unsigned long long>(kMinArenaBytes), std::ceil(least / unit) * unit);
    throw InvalidArgumentError(text);
  }
  const auto& policies = known_allocator_policies();
  if (std::find(policies.begin(), policies.end(), allocator) == policies.end()) {
    throw InvalidArgumentError("allocator is '" + allocator +
                               "' (expected one of: " + join(policies) + ")");
  }
  if (collective_timeout &&
      (collective_timeout->count() <= 0 || *collective_timeout > kMaxCollectiveTimeout)) {
    throw InvalidArgumentError("collective_timeout_ms is " +
                               std::to_string(collective_timeout->count()) + " (expected 1.." +
                               std::to_string(kMaxCollectiveTimeout.count()) + ", at most 7 days)");
  }
  constexpr uint64_t kMaxScratch = uint64_t{4} << 30;
  for (const auto& [name, v] :
       {std::pair<const char*, uint64_t>{"vmem_limit_bytes", vmem_limit_bytes},
        {"smem_bytes", smem_bytes},
        {"accumulator_bytes", accumulator_bytes}}) {
    if (v > kMaxScratch || (v != 0 && v < 1024)) {
      throw InvalidArgumentError(std::string(name) + " is " + std::to_string(v) +
                                 " (expected 0 for the hardware profile's size, or 1 KiB..4 GiB)");
    }
  }
  // 0 = unthrottled; below 1 B/s one copy's sleep overflows the nanosecond clock (1e-300 B/s was
  // accepted and ran unthrottled), and NaN/inf are not rates.
  const bool rate_ok = dma_bytes_per_second == 0.0 ||
                       (dma_bytes_per_second >= 1.0 && std::isfinite(dma_bytes_per_second));
  // The latency is bounded like the timeout: 9e18 us overflowed the clock and ran unthrottled.
  if (!rate_ok || dma_latency.count() < 0 || dma_latency > kMaxCollectiveTimeout ||
      dma_timeout.count() <= 0 || dma_timeout > kMaxCollectiveTimeout) {
    char rate_text[32];
    std::snprintf(rate_text, sizeof(rate_text), "%g", dma_bytes_per_second);
    throw InvalidArgumentError(
        "dma_bytes_per_second is " + std::string(rate_text) + ", dma_latency_us " +
        std::to_string(dma_latency.count()) + ", dma_timeout_ms " +
        std::to_string(dma_timeout.count()) +
        " (expected 0 or a finite rate >= 1 B/s, 0..7 days, and 1 ms..7 days)");
  }
  if (hardware_profile.empty()) {
    throw InvalidArgumentError("hardware_profile is empty (expected a name such as \"v5e\")");
  }
  if (pin_threads != "auto" && pin_threads != "on" && pin_threads != "off") {
    throw InvalidArgumentError("pin_threads is '" + pin_threads +
                               "' (expected \"auto\", \"on\" or \"off\")");
  }
  const auto& algorithms = collective_algorithm_names();
  if (std::find(algorithms.begin(), algorithms.end(), collective_algorithm) == algorithms.end()) {
    throw InvalidArgumentError("collective_algorithm is '" + collective_algorithm +
                               "' (expected one of: " + join(algorithms) + ")");
  }
}

const std::vector<std::string>& RuntimeOptions::collective_algorithm_names() {
  static const std::vector<std::string> kNames = {"auto",
                                                  "ring",
                                                  "bidirectional_ring",
                                                  "recursive_doubling",
                                                  "torus_2d",
                                                  "ring_reduce_scatter",
                                                  "direct",
                                                  "hierarchical"};
  return kNames;
}

RuntimeOptions RuntimeOptions::from_json(const nlohmann::json& j, const std::string& where) {
  const JsonObject r(j, where);
  r.allow_only(
      {"num_cores",         "hbm_bytes_per_core",    "hbm_memory_fraction",  "allocator",
       "auto_defragment",   "hbm_backing",           "pad_arrays",           "link_slot_bytes",
       "link_num_slots",    "collective_timeout_ms", "record_memory_events", "collective_algorithm",
       "pin_threads",       "hardware_profile",      "vmem_limit_bytes",     "smem_bytes",
       "accumulator_bytes", "dma_bytes_per_second",  "dma_latency_us",       "dma_timeout_ms"});
  RuntimeOptions o;
  constexpr int64_t kMaxMs = kMaxCollectiveTimeout.count();
  if (r.has("num_cores")) o.num_cores = static_cast<int>(r["num_cores"].integer(1, 1024));
  if (r.has("hbm_bytes_per_core")) o.hbm_bytes_per_core = r["hbm_bytes_per_core"].bytes();
  if (r.has("hbm_memory_fraction")) {
    o.hbm_memory_fraction = r["hbm_memory_fraction"].number(0.0, 1.0, "a number in (0, 1]");
  }
  if (r.has("allocator")) o.allocator = r["allocator"].string();
  if (r.has("hbm_backing")) o.hbm_backing = r["hbm_backing"].boolean();
  if (r.has("pad_arrays")) o.pad_arrays = r["pad_arrays"].boolean();
  if (r.has("auto_defragment")) o.auto_defragment = r["auto_defragment"].boolean();
  if (r.has("record_memory_events")) o.record_memory_events = r["record_memory_events"].boolean();
  if (r.has("link_slot_bytes")) o.link_slot_bytes = r["link_slot_bytes"].bytes();
  if (r.has("link_num_slots")) {
    o.link_num_slots = static_cast<int>(r["link_num_slots"].integer(2, 1024));
  }
  if (r.has("collective_timeout_ms")) {
    o.collective_timeout = std::chrono::milliseconds(r["collective_timeout_ms"].integer(1, kMaxMs));
  }
  if (r.has("collective_algorithm")) o.collective_algorithm = r["collective_algorithm"].string();
  if (r.has("pin_threads")) o.pin_threads = r["pin_threads"].string();
  if (r.has("hardware_profile")) o.hardware_profile = r["hardware_profile"].string();
  if (r.has("vmem_limit_bytes")) o.vmem_limit_bytes = r["vmem_limit_bytes"].bytes();
  if (r.has("smem_bytes")) o.smem_bytes = r["smem_bytes"].bytes();
  if (r.has("accumulator_bytes")) o.accumulator_bytes = r["accumulator_bytes"].bytes();
  if (r.has("dma_bytes_per_second")) {
    // Any finite number: validate() names the accepted rates.
    o.dma_bytes_per_second = r["dma_bytes_per_second"].number();
  }
  if (r.has("dma_latency_us")) {
    o.dma_latency = std::chrono::microseconds(r["dma_latency_us"].integer(0, kMaxMs * 1000));
  }
  if (r.has("dma_timeout_ms")) {
    o.dma_timeout = std::chrono::milliseconds(r["dma_timeout_ms"].integer(1, kMaxMs));
  }
  // Values that are the right type but break a rule between fields, or a name list.
  try {
    o.validate();
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(where + ": " + e.message());
  }
  return o;
}

RuntimeOptions RuntimeOptions::load_json_file(const std::string& path,
                                              std::vector<std::string>* keys) {
  // Options are a few hundred bytes; the bound keeps a data file passed by mistake out.
  constexpr uintmax_t kMaxOptionsFileBytes = uintmax_t{1} << 20;
  const nlohmann::json j =
      read_json_file(path, kMaxOptionsFileBytes, "runtime options file", "1 MiB");
  RuntimeOptions options = from_json(j, "runtime options file '" + path + "'");
  if (keys != nullptr) {
    keys->clear();
    for (const auto& [key, value] : j.items()) keys->push_back(key);
  }
  return options;
}

nlohmann::json RuntimeOptions::to_json() const {
  return nlohmann::json{{"num_cores", num_cores},
                        {"hbm_bytes_per_core", hbm_bytes_per_core},
                        {"hbm_memory_fraction", hbm_memory_fraction},
                        {"allocator", allocator},
                        {"auto_defragment", auto_defragment},
                        {"record_memory_events", record_memory_events},
                        {"hbm_backing", hbm_backing},
                        {"pad_arrays", pad_arrays},
                        {"link_slot_bytes", link_slot_bytes},
                        {"link_num_slots", link_num_slots},
                        {"collective_timeout_ms", effective_collective_timeout().count()},
                        {"collective_algorithm", collective_algorithm},
                        {"pin_threads", pin_threads},
                        {"hardware_profile", hardware_profile},
                        {"vmem_limit_bytes", vmem_limit_bytes},
                        {"smem_bytes", smem_bytes},
                        {"accumulator_bytes", accumulator_bytes},
                        {"dma_bytes_per_second", dma_bytes_per_second},
                        {"dma_latency_us", dma_latency.count()},
                        {"dma_timeout_ms", dma_timeout.count()}};
}

}  // namespace vtpu
