#include "vtpu/runtime/thread_pinning.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"
#include "vtpu/common/json_fields.h"
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

ThreadPinning ThreadPinning::from_json(const nlohmann::json& j, const std::string& where,
                                       const std::string& path) {
  const JsonObject r(j, where, path, "an object with mode, cores, host_cpus, pinned");
  r.allow_only({"mode", "cores", "host_cpus", "pinned", "cpus", "reason"});
  ThreadPinning p;
  p.mode = r["mode"].name({"auto", "on", "off"});
  p.cores = static_cast<int>(r["cores"].integer(1, 1 << 20));
  p.host_cpus = static_cast<int>(r["host_cpus"].integer(1, 1 << 20));
  if (r["pinned"].boolean()) {
    const JsonField cpus = r["cpus"];
    const std::vector<JsonField> ids = cpus.elements();
    if (ids.size() != static_cast<size_t>(p.cores)) {
      cpus.fail_expected("one CPU id per core (" + count_text(p.cores, "core") +
                         ") when pinned is true");
    }
    for (const JsonField& id : ids) p.cpus.push_back(static_cast<int>(id.integer(0, 1 << 20)));
  } else {
    p.reason = r["reason"].string();
  }
  return p;
}

}  // namespace vtpu
