#include "vtpu/runtime/thread_pinning.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"

namespace vtpu {

namespace {

std::string int_list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

ThreadPinning plan_thread_pinning(const std::string& mode, int cores,
                                  const std::vector<int>& cpu_ids) {
  if (mode != "auto" && mode != "on" && mode != "off") {
    throw InvalidArgumentError("pin_threads is '" + mode +
                               "' (expected \"auto\", \"on\" or \"off\")");
  }
  if (cpu_ids.empty()) throw InvalidArgumentError("thread pinning: no usable CPUs");
  ThreadPinning p;
  p.mode = mode;
  p.cores = cores;
  p.host_cpus = static_cast<int>(cpu_ids.size());
  if (mode == "off") {
    p.reason = "pin_threads off";
  } else if (mode == "auto" && cores < 2) {
    // A lone core has no peer to hand off to, so it is left free (several one-core runtimes,
    // e.g. parallel tests, would otherwise all land on the first CPU).
    p.reason = "1 core, no peer to hand off to";
  } else if (mode == "auto" && static_cast<size_t>(cores) > cpu_ids.size()) {
    p.reason = count_text(cores, "core") + " > " + count_text(p.host_cpus, "CPU");
  } else {
    for (int i = 0; i < cores; ++i)
      p.cpus.push_back(cpu_ids[static_cast<size_t>(i) % cpu_ids.size()]);
  }
  return p;
}

std::string ThreadPinning::describe() const {
  if (!pinned()) return mode + " (not pinned: " + reason + ")";
  std::string what;
  if (cpus.size() <= 4 && std::set<int>(cpus.begin(), cpus.end()).size() == cpus.size()) {
    std::vector<int> ids(cpus.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    what = "cores " + int_list(ids) + " -> CPUs " + int_list(cpus);
  } else {
    // Round-robin over the distinct CPUs, in the order the cores take them.
    std::vector<int> distinct;
    for (int c : cpus)
      if (std::find(distinct.begin(), distinct.end(), c) == distinct.end()) distinct.push_back(c);
    what = "cores 0.." + std::to_string(cpus.size() - 1) + " -> CPUs " + int_list(distinct) +
           (distinct.size() < cpus.size() ? " round-robin" : "");
  }
  return mode + " (pinned: " + what + ")";
}

nlohmann::json ThreadPinning::to_json() const {
  nlohmann::json j = {
      {"mode", mode}, {"cores", cores}, {"host_cpus", host_cpus}, {"pinned", pinned()}};
  if (pinned()) {
    j["cpus"] = cpus;
  } else {
    j["reason"] = reason;
  }
  return j;
}

ThreadPinning ThreadPinning::from_json(const nlohmann::json& j) {
  const std::string what = "thread_pinning ";
  if (!j.is_object()) {
    throw InvalidArgumentError(what + "is " + j.dump() +
                               " (expected an object with mode, cores, host_cpus, pinned)");
  }
  static const std::set<std::string> kKnown = {"mode",   "cores", "host_cpus",
                                               "pinned", "cpus",  "reason"};
  for (const auto& [key, value] : j.items()) {
    if (!kKnown.contains(key)) {
      throw InvalidArgumentError(what + "has the unknown key '" + key +
                                 "' (known: " + join(kKnown) + ")");
    }
  }
  for (const char* key : {"mode", "cores", "host_cpus", "pinned"}) {
    if (!j.contains(key)) {
      throw InvalidArgumentError(what + "lacks the key '" + std::string(key) + "' in " + j.dump());
    }
  }
  ThreadPinning p;
  const nlohmann::json& mode = j.at("mode");
  if (!mode.is_string() || (mode != "auto" && mode != "on" && mode != "off")) {
    throw InvalidArgumentError(what + "mode is " + mode.dump() +
                               " (expected \"auto\", \"on\" or \"off\")");
  }
  p.mode = mode.get<std::string>();
  for (const auto& [key, field] : {std::pair{"cores", &p.cores}, {"host_cpus", &p.host_cpus}}) {
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)) {
      throw InvalidArgumentError(what + key + " is " + v.dump() + " (expected an integer >= 1)");
    }
    *field = v.get<int>();
  }
  const nlohmann::json& pinned = j.at("pinned");
  if (!pinned.is_boolean()) {
    throw InvalidArgumentError(what + "pinned is " + pinned.dump() + " (expected true or false)");
  }
  if (pinned.get<bool>()) {
    const nlohmann::json* cpus = j.contains("cpus") ? &j.at("cpus") : nullptr;
    if (cpus == nullptr || !cpus->is_array() || cpus->size() != static_cast<size_t>(p.cores)) {
      throw InvalidArgumentError(what + "cpus is " + (cpus ? cpus->dump() : "missing") +
                                 " (expected one CPU id per core, " + count_text(p.cores, "core") +
                                 ", when pinned is true)");
    }
    for (const nlohmann::json& c : *cpus) {
      if (!c.is_number_integer() || c.get<int64_t>() < 0) {
        throw InvalidArgumentError(what + "cpus holds " + c.dump() +
                                   " (expected CPU ids, integers >= 0)");
      }
      p.cpus.push_back(c.get<int>());
    }
  } else {
    if (!j.contains("reason") || !j.at("reason").is_string()) {
      throw InvalidArgumentError(what + "reason is " +
                                 (j.contains("reason") ? j.at("reason").dump() : "missing") +
                                 " (expected a text when pinned is false)");
    }
    p.reason = j.at("reason").get<std::string>();
  }
  return p;
}

}  // namespace vtpu
