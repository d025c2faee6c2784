// Helpers shared by the allocator-policy tests: hand-worked steps that assert as they go, the
// error checks every policy must pass (bad frees, bad rebuild input), and a randomized driver that
// runs thousands of operations against a FreeSpaceModel with check_consistency() after each.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/memory/bfc_reference_model.h"
#include "tests/memory/free_space_model.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/bfc_policy.h"

namespace vtpu::testing {

inline std::vector<ChunkInfo> walk_all(const AllocatorPolicy& p) {
  std::vector<ChunkInfo> out;
  p.walk([&](const ChunkInfo& c) { out.push_back(c); });
  return out;
}

/// Allocates, expects success and a consistent policy, so that hand-worked layouts read top to
/// bottom.
inline PolicyAllocation must_allocate(AllocatorPolicy& p, uint64_t size_bytes) {
  std::optional<PolicyAllocation> a = p.allocate(size_bytes);
  EXPECT_TRUE(a.has_value()) << "allocate(" << size_bytes << ") failed";
  p.check_consistency();
  return a.value_or(PolicyAllocation{~uint64_t{0}, 0});
}

/// Expects `fn` to throw InvalidArgumentError whose what() contains `needle`.
template <typename Fn>
void expect_invalid_argument(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no exception (expected InvalidArgumentError with '" << needle << "')";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

/// Expects `fn` (a call on `p` that must fail) to throw InvalidArgumentError containing `needle`
/// and to leave `p` exactly as it was.
template <typename Fn>
void expect_rejected_unchanged(AllocatorPolicy& p, Fn&& fn, const std::string& needle) {
  SCOPED_TRACE(needle);
  const std::vector<ChunkInfo> before = walk_all(p);
  const uint64_t free_before = p.total_free_bytes();
  const uint64_t largest_before = p.largest_free_block_bytes();
  expect_invalid_argument(fn, needle);
  p.check_consistency();
  expect_same_chunks(walk_all(p), before);
  EXPECT_EQ(p.total_free_bytes(), free_before);
  EXPECT_EQ(p.largest_free_block_bytes(), largest_before);
}

/// free(offset) must throw InvalidArgumentError naming the offset and change nothing.
inline void expect_bad_free(AllocatorPolicy& p, uint64_t offset) {
  expect_rejected_unchanged(
      p, [&] { p.free(offset); }, "offset " + std::to_string(offset));
}

/// On a fresh 8 KiB policy: two 1 KiB chunks at 0 and 1024, then frees of offsets that are not
/// the start of a chunk in use (inside a chunk, a free chunk, unaligned, beyond the range, double
/// frees before and after merging) must throw and change nothing.
inline void expect_double_and_stray_frees_rejected(AllocatorPolicy& p) {
  ASSERT_EQ(p.capacity_bytes(), 8192u);
  ASSERT_EQ(must_allocate(p, 1024).offset, 0u);
  ASSERT_EQ(must_allocate(p, 1024).offset, 1024u);
  expect_bad_free(p, 256);       // inside a live chunk
  expect_bad_free(p, 2048);      // start of free space
  expect_bad_free(p, 5000);      // inside free space, not aligned
  expect_bad_free(p, 1u << 20);  // beyond the range
  EXPECT_EQ(p.free(0), 1024u);
  expect_bad_free(p, 0);  // double free
  EXPECT_EQ(p.free(1024), 1024u);
  expect_bad_free(p, 1024);  // double free after merging
  expect_same_chunks(walk_all(p), {{0, 8192, false}});
}

/// rebuild(in_use) must throw InvalidArgumentError containing `needle` and change nothing.
inline void expect_bad_rebuild(AllocatorPolicy& p, const std::vector<ChunkInfo>& in_use,
                               const std::string& needle) {
  expect_rejected_unchanged(
      p, [&] { p.rebuild(in_use); }, needle);
}

/// The policy-specific check of one allocate(size_bytes) answer, made before the model records
/// it: exact prediction (first_fit, buddy) or legality (tlsf).
using AllocateCheck = std::function<void(
    uint64_t size_bytes, const std::optional<PolicyAllocation>& got, const FreeSpaceModel& model)>;

struct RandomRunCounts {
  int num_allocs = 0;
  int num_failures = 0;
  int num_frees = 0;
};

/// Randomized driver: `num_ops` allocate/free/stray-free operations drawn from `seed`, each
/// allocation checked by `check`, and after every operation check_consistency(), the free-space
/// totals and the full walk compared with `model`. Ends by freeing everything. Use with
/// ASSERT_NO_FATAL_FAILURE.
inline void run_random_operations(AllocatorPolicy& policy, FreeSpaceModel& model, uint32_t seed,
                                  int num_ops, const AllocateCheck& check,
                                  RandomRunCounts* counts) {
  ASSERT_EQ(policy.capacity_bytes(), model.capacity_bytes());
  const uint64_t capacity = policy.capacity_bytes();
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  // Small sizes dominate; a log-uniform tail reaches every size class up to past the capacity,
  // and a few requests near the capacity often fail.
  auto random_size = [&]() -> uint64_t {
    const uint64_t kind = uniform(0, 99);
    if (kind < 45) return uniform(1, std::min<uint64_t>(2048, capacity));
    if (kind < 73) return uniform(1, std::max<uint64_t>(capacity / 64, 1));
    if (kind < 75) return uniform(capacity / 2, capacity + std::min(capacity / 8, ~capacity));
    const int bits = static_cast<int>(uniform(0, std::bit_width(capacity)));
    const uint64_t hi = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits);
    return uniform(1, hi);
  };
  std::vector<uint64_t> live;  // offsets of live chunks
  for (int op = 0; op < num_ops; ++op) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " op " + std::to_string(op));
    const uint64_t r = uniform(0, 99);
    if (live.empty() || (r < 52 && live.size() < 120)) {
      const uint64_t size = random_size();
      const std::optional<PolicyAllocation> got = policy.allocate(size);
      ASSERT_NO_FATAL_FAILURE(check(size, got, model)) << "allocate(" << size << ")";
      if (got) {
        ASSERT_GE(got->chunk_bytes, size);
        ASSERT_EQ(got->offset % policy.placement_alignment(got->chunk_bytes), 0u);
        ASSERT_NO_FATAL_FAILURE(model.take(got->offset, got->chunk_bytes));
        live.push_back(got->offset);
        ++counts->num_allocs;
      } else {
        ++counts->num_failures;
      }
    } else if (r < 98) {
      const size_t i = uniform(0, live.size() - 1);
      const uint64_t offset = live[i];
      live[i] = live.back();
      live.pop_back();
      ASSERT_EQ(policy.free(offset), model.chunk_bytes(offset));
      model.give_back(offset);
      ++counts->num_frees;
    } else {
      // A stray or repeated free: any offset that is not the start of a live chunk.
      uint64_t offset = uniform(0, capacity);
      if (model.is_live(offset)) offset += 1;
      ASSERT_THROW(policy.free(offset), InvalidArgumentError) << "offset " << offset;
    }
    ASSERT_NO_THROW(policy.check_consistency());
    ASSERT_EQ(policy.total_free_bytes(), model.total_free_bytes());
    ASSERT_EQ(policy.largest_free_block_bytes(), model.largest_free_block_bytes());
    ASSERT_EQ(policy.total_free_bytes() + model.used_bytes(), capacity);
    ASSERT_NO_FATAL_FAILURE(expect_same_chunks(walk_all(policy), model.chunks()));
  }
  for (uint64_t offset : live) {
    ASSERT_EQ(policy.free(offset), model.chunk_bytes(offset));
    model.give_back(offset);
    ASSERT_NO_THROW(policy.check_consistency());
  }
  ASSERT_NO_FATAL_FAILURE(expect_same_chunks(walk_all(policy), model.chunks()));
  EXPECT_EQ(policy.total_free_bytes(), capacity);
}

/// The rebuild rules every policy shares: chunks out of address order, overlapping, or outside
/// the range (also where offset + size would wrap past 2^64) must be rejected, naming the rule,
/// and change nothing. Each chunk's size is valid for every policy (a power of two >= 256).
inline void expect_order_and_range_enforced_by_rebuild(AllocatorPolicy& p) {
  const uint64_t capacity = p.capacity_bytes();
  ASSERT_GE(capacity, 2048u);
  expect_bad_rebuild(p, {{1024, 256, true}, {512, 256, true}},
                     "chunk 1 at offset 512 of 256 bytes is out of address order or overlaps the "
                     "previous chunk, which ends at 1280");
  expect_bad_rebuild(p, {{0, 1024, true}, {768, 256, true}}, "which ends at 1024");
  expect_bad_rebuild(
      p, {{capacity - 256, 512, true}},
      "lies outside the range (expected within [0, " + std::to_string(capacity) + "))");
  const uint64_t two_to_63 = uint64_t{1} << 63;
  expect_bad_rebuild(p, {{two_to_63, two_to_63, true}}, "outside the range");
  expect_bad_rebuild(p, {{~uint64_t{0} - 255, 256, true}}, "outside the range");
}

/// An AllocateCheck that expects exactly what `predict` (a FreeSpaceModel prediction) returns.
inline AllocateCheck exactly(std::optional<PolicyAllocation> (FreeSpaceModel::*predict)(uint64_t)
                                 const) {
  return [predict](uint64_t size_bytes, const std::optional<PolicyAllocation>& got,
                   const FreeSpaceModel& model) {
    const std::optional<PolicyAllocation> expected = (model.*predict)(size_bytes);
    ASSERT_EQ(got.has_value(), expected.has_value());
    if (!got) return;
    ASSERT_EQ(got->offset, expected->offset);
    ASSERT_EQ(got->chunk_bytes, expected->chunk_bytes);
  };
}

/// The randomized test of `policy` for one seed: a capacity drawn from the seed (64 KiB .. 2 MiB,
/// not a multiple of 256; every fifth seed 1 GiB .. 2^50 bytes of offsets, so that large size
/// classes take part), 2000 operations of run_random_operations, and a run that exercised
/// successes, failures and frees.
inline void run_random_test(const std::string& policy, FreeChunks free_chunks, uint32_t seed,
                            const AllocateCheck& check) {
  std::mt19937_64 rng(seed ^ 0x5eed);
  const uint64_t capacity =
      seed % 5 == 4 ? std::uniform_int_distribution<uint64_t>(uint64_t{1} << 30, 1ull << 50)(rng)
                    : std::uniform_int_distribution<uint64_t>(64 << 10, 2 << 20)(rng);
  const std::unique_ptr<AllocatorPolicy> p = make_allocator_policy(policy, capacity);
  FreeSpaceModel model(capacity, free_chunks);
  RandomRunCounts counts;
  ASSERT_NO_FATAL_FAILURE(run_random_operations(*p, model, seed, 2000, check, &counts));
  EXPECT_GT(counts.num_allocs, 300);
  EXPECT_GT(counts.num_frees, 300);
  EXPECT_GT(counts.num_failures, 0);
}

// The lower bound of every TLSF list, in list order, from the definition rather than bit tricks:
// below 8 KiB one list per 256 B (list 0 holds [0, 256) and stays empty); each power-of-two class
// [2^k, 2^(k+1)), k = 13..63, cut into 32 equal slices.
inline const std::vector<uint64_t>& list_lower_bounds() {
  static const std::vector<uint64_t> bounds = [] {
    std::vector<uint64_t> b;
    for (uint64_t s = 0; s < 8192; s += 256) b.push_back(s);
    for (int k = 13; k < 64; ++k) {
      const uint64_t base = uint64_t{1} << k;
      for (uint64_t i = 0; i < 32; ++i) b.push_back(base + i * (base / 32));
    }
    return b;
  }();
  return bounds;
}

// Position in list order of the list that files a free block of `size_bytes`.
inline size_t list_of_block(uint64_t size_bytes) {
  const auto& b = list_lower_bounds();
  return std::upper_bound(b.begin(), b.end(), size_bytes) - b.begin() - 1;
}

// Position of the first list all of whose blocks are >= `size_bytes`; the number of lists if none.
inline size_t first_list_at_least(uint64_t size_bytes) {
  const auto& b = list_lower_bounds();
  return std::lower_bound(b.begin(), b.end(), size_bytes) - b.begin();
}

// The AllocateCheck of TLSF. Its choice among lists is deterministic but its order within a list
// depends on history, so each answer is checked for the rule instead: a block from the lowest
// non-empty list at or above the first list whose blocks all fit, split to the rounded size; when
// there is none, exactly the block the exact-list fallback must take (the smallest block of the
// request's own list that fits, lowest offset first); nullopt exactly when no free block fits.
inline void expect_tlsf_choice(uint64_t size, const std::optional<PolicyAllocation>& got,
                               const FreeSpaceModel& model) {
  if (size > model.capacity_bytes()) {
    ASSERT_FALSE(got.has_value());
    return;
  }
  const uint64_t rounded = FreeSpaceModel::round_up(size);
  const size_t first = first_list_at_least(rounded);
  size_t lowest = SIZE_MAX;  // the lowest non-empty list at or above `first`
  for (const auto& [offset, bytes] : model.free_intervals()) {
    const size_t list = list_of_block(bytes);
    if (list >= first) lowest = std::min(lowest, list);
  }
  if (lowest == SIZE_MAX) {
    const size_t own = list_of_block(rounded);
    std::optional<std::pair<uint64_t, uint64_t>> best;  // (bytes, offset): the fallback's choice
    for (const auto& [offset, bytes] : model.free_intervals()) {
      if (list_of_block(bytes) == own && bytes >= rounded &&
          (!best || std::make_pair(bytes, offset) < *best)) {
        best = std::make_pair(bytes, offset);
      }
    }
    if (!best) {
      ASSERT_FALSE(got.has_value()) << "no free block fits " << rounded << " bytes";
      return;
    }
    ASSERT_TRUE(got.has_value()) << "the fallback must take the block at " << best->second;
    ASSERT_EQ(got->offset, best->second);
    ASSERT_EQ(got->chunk_bytes, rounded);
    return;
  }
  ASSERT_TRUE(got.has_value()) << "list " << lowest << " holds a block";
  ASSERT_EQ(got->chunk_bytes, rounded);
  auto it = model.free_intervals().find(got->offset);
  ASSERT_NE(it, model.free_intervals().end())
      << "offset " << got->offset << " starts no free block";
  ASSERT_EQ(list_of_block(it->second), lowest) << "block of " << it->second << " bytes";
}

// The randomized test of BfcPolicy for one seed: allocate/free against BfcReferenceModel, which
// predicts every answer exactly, with check_consistency() and a full walk comparison after every
// operation. Use with ASSERT_NO_FATAL_FAILURE.
inline void run_bfc_random_test(uint32_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  // Capacity 64 KiB .. 2 MiB, not a multiple of 256; the threshold varies so that both split
  // rules fire: 0 (always split), small, medium, and the default (only the 2x rule matters).
  const uint64_t capacity = uniform(64 * kKiB, 2 * kMiB) + uniform(0, 255);
  const uint64_t thresholds[] = {0, 1024, 16 * kKiB, 128 * kMiB};
  PolicyOptions options;
  options.max_internal_fragmentation_bytes = thresholds[seed % 4];
  BfcPolicy policy(capacity, options);
  BfcReferenceModel model(capacity, *options.max_internal_fragmentation_bytes);
  ASSERT_EQ(policy.capacity_bytes(), model.capacity_bytes());
  std::vector<uint64_t> live;  // offsets of live chunks

  auto random_size = [&]() -> uint64_t {
    const uint64_t kind = uniform(0, 99);
    if (kind < 55) return uniform(1, 2048);
    if (kind < 85) return uniform(2049, 32 * kKiB);
    if (kind < 97) return uniform(32 * kKiB, capacity / 4);
    return uniform(capacity / 4, capacity + 1024);  // often fails
  };

  constexpr int kOps = 2000;
  int num_allocs = 0, num_failures = 0, num_frees = 0;
  for (int op = 0; op < kOps; ++op) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " op " + std::to_string(op));
    const uint64_t r = uniform(0, 99);
    if (live.empty() || (r < 52 && live.size() < 120)) {
      const uint64_t size = random_size();
      const std::optional<PolicyAllocation> expected = model.predict_allocate(size);
      const std::optional<PolicyAllocation> got = policy.allocate(size);
      ASSERT_EQ(got.has_value(), expected.has_value()) << "allocate(" << size << ")";
      if (got) {
        ASSERT_EQ(got->offset, expected->offset) << "allocate(" << size << ")";
        ASSERT_EQ(got->chunk_bytes, expected->chunk_bytes) << "allocate(" << size << ")";
        ASSERT_GE(got->chunk_bytes, size);
        ASSERT_EQ(got->offset % 256, 0u);
        ASSERT_NO_FATAL_FAILURE(model.take(got->offset, got->chunk_bytes));
        live.push_back(got->offset);
        ++num_allocs;
      } else {
        ++num_failures;
      }
    } else if (r < 98) {
      const size_t i = uniform(0, live.size() - 1);
      const uint64_t offset = live[i];
      live[i] = live.back();
      live.pop_back();
      const uint64_t expected_bytes = model.chunk_bytes(offset);
      ASSERT_EQ(policy.free(offset), expected_bytes);
      model.give_back(offset);
      ++num_frees;
    } else {
      // A stray or repeated free: any offset that is not the start of a live chunk.
      uint64_t offset = uniform(0, capacity);
      if (model.is_live(offset)) offset += 1;
      ASSERT_THROW(policy.free(offset), InvalidArgumentError) << "offset " << offset;
    }
    ASSERT_NO_THROW(policy.check_consistency());
    ASSERT_EQ(policy.total_free_bytes(), model.total_free_bytes());
    ASSERT_EQ(policy.largest_free_block_bytes(), model.largest_free_bytes());
    ASSERT_EQ(policy.total_free_bytes() + model.used_bytes(), policy.capacity_bytes());
    ASSERT_NO_FATAL_FAILURE(expect_same_chunks(walk_all(policy), model.chunks()));
  }
  // The run exercised both outcomes.
  EXPECT_GT(num_allocs, 300);
  EXPECT_GT(num_frees, 300);
  EXPECT_GT(num_failures, 0);
  // Free everything: full coalescing leaves one chunk spanning the range.
  for (uint64_t offset : live) {
    ASSERT_EQ(policy.free(offset), model.chunk_bytes(offset));
    model.give_back(offset);
    ASSERT_NO_THROW(policy.check_consistency());
  }
  expect_same_chunks(walk_all(policy), {{0, policy.capacity_bytes(), false}});
  EXPECT_EQ(policy.largest_free_block_bytes(), policy.capacity_bytes());
}

}  // namespace vtpu::testing
