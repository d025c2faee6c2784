// The allocator-policy interface: offset bookkeeping for one address range [0, capacity).
//
// A policy hands out offsets and keeps no bytes itself, so it can model a 32 GiB HBM without
// touching memory. Backing storage, stats and buffer handles live in HbmArena. Every policy offers
// the same walk over its chunks and the same consistency check, so that tests can verify any
// policy after every operation (after TLSF's `tlsf_check` and `tlsf_walk_pool`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vtpu {

/// One chunk of the address range as a policy sees it.
struct ChunkInfo {
  uint64_t offset = 0;      // bytes from the start of the range
  uint64_t size_bytes = 0;  // chunk size in bytes (rounded; includes internal waste)
  bool in_use = false;
};

/// A successful allocation: where it is, and how many bytes the policy set aside for it
/// (>= the request: rounding and unsplit remainders are internal fragmentation).
struct PolicyAllocation {
  uint64_t offset = 0;
  uint64_t chunk_bytes = 0;
};

/// Free-space totals of one size class of a policy that keeps segregated free lists (BFC's bins,
/// TLSF's first-level classes, buddy orders). All sizes in bytes.
struct BinStats {
  uint64_t min_chunk_bytes = 0;  // smallest chunk size the bin holds
  uint64_t max_chunk_bytes = 0;  // largest chunk size the bin holds (UINT64_MAX: unbounded)
  uint64_t num_free_chunks = 0;
  uint64_t free_bytes = 0;
  uint64_t largest_free_chunk_bytes = 0;
};

/// Offset bookkeeping for one address range. Thread-compatible: HbmArena serialises calls.
class AllocatorPolicy {
 public:
  virtual ~AllocatorPolicy() = default;

  /// Short name used on the command line and in reports ("bfc", ...).
  virtual std::string_view name() const = 0;
  /// Size of the managed range in bytes.
  virtual uint64_t capacity_bytes() const = 0;
  /// The bytes the policy would set aside for a request of `size_bytes` before any split rule
  /// (e.g. BFC rounds to 256 B). Throws InvalidArgumentError for 0.
  virtual uint64_t rounded_bytes(uint64_t size_bytes) const = 0;

  /// Finds room for `size_bytes` (> 0). Returns std::nullopt when no free chunk fits; never
  /// throws for lack of space.
  virtual std::optional<PolicyAllocation> allocate(uint64_t size_bytes) = 0;
  /// Frees the chunk that allocate() returned at `offset`; returns its chunk bytes. Throws
  /// InvalidArgumentError if `offset` is not the start of a chunk in use (double free, stray).
  virtual uint64_t free(uint64_t offset) = 0;

  /// Size in bytes of the largest chunk allocate() could hand out whole right now.
  virtual uint64_t largest_free_block_bytes() const = 0;
  /// Sum of the sizes of all free chunks, in bytes.
  virtual uint64_t total_free_bytes() const = 0;
  /// Calls `fn` for every chunk in address order, free and in use.
  virtual void walk(const std::function<void(const ChunkInfo&)>& fn) const = 0;
  /// Verifies every internal invariant (chunks tile the range, bins hold exactly the free
  /// chunks, neighbours coalesced, counters agree). Throws InternalError describing the first
  /// violation.
  virtual void check_consistency() const = 0;

  /// Per-size-class free-space totals, smallest class first, for out-of-memory reports. Empty for
  /// a policy without size classes (first_fit, planned).
  virtual std::vector<BinStats> bin_stats() const { return {}; }

  /// Whether rebuild() can place chunks at new offsets (false for `planned`, whose offsets are
  /// fixed by a heap plan). Defragmentation is skipped for a policy that returns false.
  virtual bool can_relocate() const { return true; }
  /// The alignment in bytes that rebuild() requires of the offset of a chunk of `chunk_bytes`
  /// (a value allocate() or rounded_bytes() produced): the granularity for bfc, tlsf and
  /// first_fit, the block size itself for buddy.
  virtual uint64_t placement_alignment(uint64_t chunk_bytes) const = 0;
  /// Resets the policy to hold exactly the chunks in `in_use` (address order, non-overlapping,
  /// inside the range, each offset a multiple of placement_alignment(size), each size one the
  /// policy can hand out) and everything else free, fully coalesced. Defragmentation computes a
  /// compacted layout and installs it with this. Cost O(n log n) or better for n chunks. Throws
  /// InvalidArgumentError naming the first chunk that breaks those rules (the policy is then
  /// unchanged), FailedPreconditionError if !can_relocate().
  virtual void rebuild(std::span<const ChunkInfo> in_use) = 0;
};

namespace internal {
/// Throws the InvalidArgumentError of round_up_to_granule for 0 bytes (out of line: a cold path).
[[noreturn]] void throw_zero_byte_allocation();
}  // namespace internal

/// For rounded_bytes(): `size_bytes` rounded up to a multiple of `granule_bytes` (a power of two).
/// Sizes above the largest multiple of the granule below 2^64 saturate to it: such a request can
/// never fit, and the rounding never overflows. Throws InvalidArgumentError for 0. Inline, so that
/// for a constant granule the divisions fold into masks on the allocate fast path.
inline uint64_t round_up_to_granule(uint64_t size_bytes, uint64_t granule_bytes) {
  if (size_bytes == 0) internal::throw_zero_byte_allocation();
  const uint64_t max_rounded = ~uint64_t{0} / granule_bytes * granule_bytes;
  if (size_bytes > max_rounded) return max_rounded;  // saturate: can never fit, never overflows
  return (size_bytes + granule_bytes - 1) / granule_bytes * granule_bytes;
}

/// For constructors: `capacity_bytes` rounded down to a multiple of `granule_bytes`. Throws
/// InvalidArgumentError naming `policy` ("BFC") and the value when that is less than one granule.
uint64_t capacity_in_granules(std::string_view policy, uint64_t capacity_bytes,
                              uint64_t granule_bytes);

/// For rebuild(): checks `in_use` against the rules in AllocatorPolicy::rebuild (address order,
/// non-overlapping, inside [0, policy.capacity_bytes()), offsets multiples of
/// policy.placement_alignment(size)) and `is_valid_size(size)`, which says whether the policy can
/// hand out a chunk of that size (`size_rule` describes it: "a positive multiple of 256"). Throws
/// InvalidArgumentError naming `policy_label`, the first bad chunk and the rule it breaks.
void check_rebuild_input(const AllocatorPolicy& policy, std::string_view policy_label,
                         std::span<const ChunkInfo> in_use, std::string_view size_rule,
                         const std::function<bool(uint64_t)>& is_valid_size);

/// For rebuild(): calls `fn(offset, size_bytes, in_use)` for every tile of [0, capacity_bytes) in
/// address order: each chunk of `in_use` (checked by check_rebuild_input) and each gap between
/// them as a free tile.
void for_each_tile(uint64_t capacity_bytes, std::span<const ChunkInfo> in_use,
                   const std::function<void(uint64_t, uint64_t, bool)>& fn);

class HeapPlan;  // memory/heap_planner.h

/// Options shared by all policies (each policy reads the fields it understands).
struct PolicyOptions {
  /// BFC: a free chunk is split on allocate only if it is at least 2x the request or the
  /// remainder is at least this many bytes. Unset: TensorFlow's 128 MiB scaled to the arena,
  /// min(128 MiB, capacity / 128), so a 16 GiB arena gets exactly TensorFlow's value and a
  /// 1200 MiB arena 9.375 MiB (an unsplit 50 MiB remainder there would be 4% of the arena).
  std::optional<uint64_t> max_internal_fragmentation_bytes;
  /// planned: the offsets to hand out, from the heap planner (required by that policy).
  std::shared_ptr<const HeapPlan> heap_plan;
  /// planned: when an allocation fails (its planned range is still in use), move the cursor past
  /// its planned buffer anyway, for a caller that gives the request up rather than retrying it (a
  /// replay that skips a failed allocation and its free), so later requests stay matched to their
  /// own planned buffers. Default false: the cursor stays, and the caller may free and retry.
  bool planned_skip_failed = false;
};

/// Names make_allocator_policy accepts: {"bfc", "tlsf", "first_fit", "buddy"}.
const std::vector<std::string>& known_allocator_policies();

/// Creates a policy by name: "bfc", "tlsf", "first_fit" or "buddy". Throws InvalidArgumentError
/// naming the unknown policy and listing the known ones.
std::unique_ptr<AllocatorPolicy> make_allocator_policy(std::string_view name,
                                                       uint64_t capacity_bytes,
                                                       const PolicyOptions& options = {});

}  // namespace vtpu
