#include "memory/allocator_policy.h"

#include <string>

#include "common/error.h"
#include "memory/bfc_policy.h"

namespace vtpu {

std::unique_ptr<AllocatorPolicy> make_allocator_policy(std::string_view name,
                                                       uint64_t capacity_bytes,
                                                       const PolicyOptions& options) {
  if (name == "bfc") return std::make_unique<BfcPolicy>(capacity_bytes, options);
  throw InvalidArgumentError("unknown allocator policy '" + std::string(name) +
                             "' (expected one of: bfc)");
}

}  // namespace vtpu
