#include "vtpu/memory/allocator_policy.h"

#include <string>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/memory/bfc_policy.h"
#include "vtpu/memory/buddy_policy.h"
#include "vtpu/memory/first_fit_policy.h"
#include "vtpu/memory/planned_policy.h"
#include "vtpu/memory/tlsf_policy.h"

namespace vtpu {

void internal::throw_zero_byte_allocation() {
  throw InvalidArgumentError("allocation of 0 bytes (expected >= 1)");
}

uint64_t capacity_in_granules(std::string_view policy, uint64_t capacity_bytes,
                              uint64_t granule_bytes) {
  const uint64_t rounded = capacity_bytes / granule_bytes * granule_bytes;
  if (rounded == 0) {
    throw InvalidArgumentError(std::string(policy) + " capacity " + std::to_string(capacity_bytes) +
                               " bytes is below the " + std::to_string(granule_bytes) +
                               "-byte minimum chunk");
  }
  return rounded;
}

void check_rebuild_input(const AllocatorPolicy& policy, std::string_view policy_label,
                         std::span<const ChunkInfo> in_use, std::string_view size_rule,
                         const std::function<bool(uint64_t)>& is_valid_size) {
  const uint64_t capacity = policy.capacity_bytes();
  uint64_t end = 0;  // where the previous chunk ends
  for (size_t i = 0; i < in_use.size(); ++i) {
    const ChunkInfo& c = in_use[i];
    auto fail = [&](const std::string& rule) {
      throw InvalidArgumentError(std::string(policy_label) + " rebuild: chunk " +
                                 std::to_string(i) + " at offset " + std::to_string(c.offset) +
                                 " of " + std::to_string(c.size_bytes) + " bytes " + rule);
    };
    if (!is_valid_size(c.size_bytes)) {
      fail("has a size the policy cannot hand out (expected " + std::string(size_rule) + ")");
    }
    if (c.size_bytes > capacity || c.offset > capacity - c.size_bytes) {
      fail("lies outside the range (expected within [0, " + std::to_string(capacity) + "))");
    }
    if (c.offset < end) {
      fail("is out of address order or overlaps the previous chunk, which ends at " +
           std::to_string(end));
    }
    const uint64_t alignment = policy.placement_alignment(c.size_bytes);
    if (c.offset % alignment != 0) {
      fail("is not placed at a multiple of " + std::to_string(alignment) + " bytes");
    }
    end = c.offset + c.size_bytes;
  }
}

void for_each_tile(uint64_t capacity_bytes, std::span<const ChunkInfo> in_use,
                   const std::function<void(uint64_t, uint64_t, bool)>& fn) {
  uint64_t cursor = 0;
  for (const ChunkInfo& c : in_use) {
    if (c.offset > cursor) fn(cursor, c.offset - cursor, false);
    fn(c.offset, c.size_bytes, true);
    cursor = c.offset + c.size_bytes;
  }
  if (cursor < capacity_bytes) fn(cursor, capacity_bytes - cursor, false);
}

const std::vector<std::string>& known_allocator_policies() {
  static const std::vector<std::string> kNames = {"bfc", "tlsf", "first_fit", "buddy"};
  return kNames;
}

std::unique_ptr<AllocatorPolicy> make_allocator_policy(std::string_view name,
                                                       uint64_t capacity_bytes,
                                                       const PolicyOptions& options) {
  if (name == "bfc") return std::make_unique<BfcPolicy>(capacity_bytes, options);
  if (name == "tlsf") return std::make_unique<TlsfPolicy>(capacity_bytes);
  if (name == "first_fit") return std::make_unique<FirstFitPolicy>(capacity_bytes);
  if (name == "buddy") return std::make_unique<BuddyPolicy>(capacity_bytes);
  // Not in known_allocator_policies(): it needs options.heap_plan (see memory/planned_policy.h).
  if (name == PlannedPolicy::kName) return std::make_unique<PlannedPolicy>(capacity_bytes, options);
  throw InvalidArgumentError("unknown allocator policy '" + std::string(name) +
                             "' (expected one of: " + join(known_allocator_policies()) + ")");
}

}  // namespace vtpu
