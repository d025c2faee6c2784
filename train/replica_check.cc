#include "vtpu/train/replica_check.h"

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));  // round-trips an f32
  return buf;
}

}  // namespace

std::string ReplicaMismatch::describe() const {
  const std::string k = "core " + std::to_string(core),
                    r = "core " + std::to_string(reference_core);
  std::string s = k + "'s parameters differ from " + r + "'s: ";
  if (shard_elements != reference_elements) {
    return s + k + " has " + std::to_string(shard_elements) + " elements, " + r + " has " +
           std::to_string(reference_elements);
  }
  return s + (parameter.empty() ? std::string("shard") : parameter) + " element " +
         std::to_string(element) + " is " + float_text(value) + " on " + k + ", " +
         float_text(reference_value) + " on " + r;
}

std::optional<ReplicaMismatch> compare_replicas(const std::vector<std::span<const float>>& shards,
                                                const std::vector<std::vector<int>>& groups,
                                                const std::vector<ParamSegment>& segments) {
  for (const std::vector<int>& group : groups) {
    for (int c : group) {
      if (c < 0 || static_cast<size_t>(c) >= shards.size()) {
        throw InvalidArgumentError("replica group names core " + std::to_string(c) +
                                   " (expected 0.." + std::to_string(shards.size()) + " - 1)");
      }
    }
    if (group.empty()) continue;
    const std::span<const float> ref = shards[static_cast<size_t>(group[0])];
    for (size_t r = 1; r < group.size(); ++r) {
      const std::span<const float> s = shards[static_cast<size_t>(group[r])];
      ReplicaMismatch m;
      m.core = group[r];
      m.reference_core = group[0];
      m.shard_elements = static_cast<int64_t>(s.size());
      m.reference_elements = static_cast<int64_t>(ref.size());
      if (s.size() != ref.size()) return m;
      if (std::memcmp(s.data(), ref.data(), s.size_bytes()) == 0) continue;
      size_t i = 0;
      while (std::memcmp(&s[i], &ref[i], sizeof(float)) == 0) ++i;  // memcmp found a difference
      m.element = static_cast<int64_t>(i);
      m.value = s[i];
      m.reference_value = ref[i];
      for (const ParamSegment& seg : segments) {
        if (m.element >= seg.offset && m.element < seg.offset + seg.num_elements) {
          m.parameter = seg.name;
          m.element -= seg.offset;
          break;
        }
      }
      return m;
    }
  }
  return std::nullopt;
}

nlohmann::json replica_mismatch_json(const std::optional<ReplicaMismatch>& mismatch) {
  if (!mismatch) return nullptr;
  return {{"core", mismatch->core},
          {"reference_core", mismatch->reference_core},
          {"parameter", mismatch->parameter},
          {"element", mismatch->element},
          {"message", mismatch->describe()}};
}

bool report_replicas(const std::optional<ReplicaMismatch>& mismatch, const std::string& what) {
  if (!mismatch) return true;
  std::fprintf(stderr, "vtpu: error: %s differ after training: %s\n", what.c_str(),
               mismatch->describe().c_str());
  return false;
}

void hoist_run_facts(nlohmann::json& j, const std::string& run_key) {
  nlohmann::json* run = j.contains(run_key) ? &j[run_key] : nullptr;
  if (run == nullptr || !run->is_object()) {
    throw InvalidArgumentError("hoist_run_facts: '" + run_key + "' is not an object in the JSON");
  }
  for (const char* key : kRunFactKeys) {
    if (!run->contains(key)) continue;
    j[key] = std::move((*run)[key]);
    run->erase(key);
  }
}

}  // namespace vtpu
