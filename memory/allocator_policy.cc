#include "memory/allocator_policy.h"

#include <string>

#include "common/error.h"
#include "common/strings.h"
#include "memory/bfc_policy.h"
#include "memory/planned_policy.h"

namespace vtpu {

const std::vector<std::string>& known_allocator_policies() {
  static const std::vector<std::string> kNames = {"bfc"};
  return kNames;
}

std::unique_ptr<AllocatorPolicy> make_allocator_policy(std::string_view name,
                                                       uint64_t capacity_bytes,
                                                       const PolicyOptions& options) {
  if (name == "bfc") return std::make_unique<BfcPolicy>(capacity_bytes, options);
  // Not in known_allocator_policies(): it needs options.heap_plan (see memory/planned_policy.h).
  if (name == PlannedPolicy::kName) return std::make_unique<PlannedPolicy>(capacity_bytes, options);
  throw InvalidArgumentError("unknown allocator policy '" + std::string(name) +
                             "' (expected one of: " + join(known_allocator_policies()) + ")");
}

}  // namespace vtpu
