// Tests for HbmArena::allocate_array: arrays are charged their padded bytes under XLA's TPU tiled
// layouts, stats keep logical and padded bytes apart, and an out-of-memory names both.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vtpu/common/element_type.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/tiled_layout.h"

namespace vtpu {
namespace {

ArenaOptions metadata_only(uint64_t capacity_bytes) {
  ArenaOptions o;
  o.capacity_bytes = capacity_bytes;
  o.backing = false;
  return o;
}

TEST(PaddedArrayTest, IssueExampleChargesPaddedBytes) {
  // f32[256,512,128,2], default layout {3,2,1,0:T(8,128)}: the minor dimension 2 pads to 128,
  // so 256*512*128*128*4 = 8,589,934,592 bytes hold 256*512*128*2*4 = 134,217,728 (64x).
  HbmArena arena(metadata_only(16 * kGiB));
  const std::vector<int64_t> dims = {256, 512, 128, 2};
  const BufferId id = arena.allocate_array(ElementType::kF32, dims, std::nullopt, "acts");
  EXPECT_EQ(arena.size_bytes(id), 8589934592u);
  const MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.padded_bytes_in_use, 8589934592u);
  EXPECT_EQ(s.logical_bytes_in_use, 134217728u);
  EXPECT_EQ(s.bytes_in_use, 8589934592u);
  const nlohmann::json j = s;
  EXPECT_EQ(j.at("padded_bytes_in_use").get<uint64_t>(), 8589934592u);
  EXPECT_EQ(j.at("logical_bytes_in_use").get<uint64_t>(), 134217728u);
  EXPECT_FALSE(j.contains("padding_bytes_in_use"));  // padded - logical: not a key of its own
  EXPECT_FALSE(j.contains("bytes_requested"));
  arena.free(id);
  EXPECT_EQ(arena.memory_stats().logical_bytes_in_use, 0u);
  arena.check_consistency();
}

TEST(PaddedArrayTest, SmallShapesAndExplicitLayouts) {
  HbmArena arena(metadata_only(64 * kMiB));
  // f32[1024,1]: dimension 1 pads to 128 -> 1024*128*4 = 524,288 bytes for 4,096 logical.
  const std::vector<int64_t> column = {1024, 1};
  const BufferId a = arena.allocate_array(ElementType::kF32, column);
  EXPECT_EQ(arena.size_bytes(a), 524288u);
  // The same array with minor-to-major {0,1}: dimension 0 (1024) is now minor (a multiple of
  // 128) and dimension 1 (1) pads to 8: 8*1024*4 = 32,768 bytes.
  const BufferId b =
      arena.allocate_array(ElementType::kF32, column, parse_layout("{0,1:T(8,128)}"));
  EXPECT_EQ(arena.size_bytes(b), 32768u);
  // bf16[10,100] in T(8,128)(2,1): rows pad to 16, columns to 128: 16*128*2 = 4,096 bytes.
  const std::vector<int64_t> small = {10, 100};
  const BufferId c = arena.allocate_array(ElementType::kBf16, small);
  EXPECT_EQ(arena.size_bytes(c), 16u * 128 * 2);
  EXPECT_EQ(arena.memory_stats().logical_bytes_in_use, 4096u + 4096u + 2000u);
  EXPECT_THROW(arena.allocate_array(ElementType::kF32, std::vector<int64_t>{0, 5}),
               InvalidArgumentError);
  EXPECT_THROW(arena.allocate_array(ElementType::kF32, std::vector<int64_t>{-1, 5}),
               InvalidArgumentError);
  arena.check_consistency();
}

TEST(PaddedArrayTest, OomShowsLogicalPaddedAndExpansion) {
  HbmArena arena(metadata_only(256 * kMiB));
  const std::vector<int64_t> dims = {4096, 2, 64, 2};  // 4 MiB logical, 256 MiB padded (64x)
  arena.free(arena.allocate_array(ElementType::kF32, dims, std::nullopt, "kv"));  // fits exactly
  arena.allocate(1, "one byte");  // now it cannot fit
  try {
    arena.allocate_array(ElementType::kF32, dims, std::nullopt, "kv2");
    FAIL();
  } catch (const OutOfMemoryError& e) {
    const OomReport& r = e.report();
    EXPECT_EQ(r.logical_bytes, 4u * kMiB);
    EXPECT_EQ(r.requested_bytes, 256u * kMiB);
    EXPECT_DOUBLE_EQ(r.expansion(), 64.0);
    EXPECT_EQ(r.array_text, "f32[4096,2,64,2]{3,2,1,0:T(8,128)}");
    const std::string what = e.what();
    EXPECT_NE(what.find("f32[4096,2,64,2]{3,2,1,0:T(8,128)}: 4194304 bytes (4.00 MiB) logical, "
                        "268435456 bytes (256.00 MiB) padded (64.00x)"),
              std::string::npos)
        << what;
    const nlohmann::json j = r;
    EXPECT_EQ(j.at("logical_bytes").get<uint64_t>(), 4u * kMiB);
    EXPECT_EQ(j.at("padded_bytes").get<uint64_t>(), 256u * kMiB);
    EXPECT_EQ(j.at("expansion").get<double>(), 64.0);
  }
}

TEST(PaddedArrayTest, AllocatePaddedChargesTheChargedBytesAndCountsTheLogical) {
  HbmArena arena(metadata_only(16 * kMiB));
  // f32[1437,64] charged as allocate_array charges it: 1440 x 128 x 4 = 737,280 bytes for
  // 1437 x 64 x 4 = 367,872 (a multiple of BFC's 256 B granule, so no rounding).
  const BufferId a = arena.allocate_padded(737280, 367872, "x");
  // A scalar: 4 bytes, untiled; BFC rounds the chunk to 256 B.
  const BufferId b = arena.allocate_padded(4, 4, "s");
  MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.logical_bytes_in_use, 367872u + 4u);
  EXPECT_EQ(s.padded_bytes_in_use, 737280u + 4u);
  EXPECT_EQ(s.bytes_in_use, 737280u + 256u);
  EXPECT_EQ(s.total_free_bytes, 16 * kMiB - 737280u - 256u);
  EXPECT_EQ(arena.size_bytes(a), 737280u);
  arena.check_consistency();
  arena.free(a);
  s = arena.memory_stats();
  EXPECT_EQ(s.logical_bytes_in_use, 4u);
  EXPECT_EQ(s.padded_bytes_in_use, 4u);
  EXPECT_EQ(s.peak_bytes_in_use, 737280u + 256u);
  arena.free(b);
  arena.check_consistency();
  // Logical bytes of 0 are allowed (an array of zero-size dims packed with others).
  arena.free(arena.allocate_padded(256, 0));
  EXPECT_THROW(arena.allocate_padded(0, 0), InvalidArgumentError);
  EXPECT_THROW(arena.allocate_padded(100, 101), InvalidArgumentError);
  EXPECT_EQ(arena.memory_stats().num_allocs, 3u);
}

TEST(PaddedArrayTest, AllocatePaddedOomShowsLogicalAndPadded) {
  HbmArena arena(metadata_only(kMiB));
  try {
    arena.allocate_padded(2 * kMiB, 512 * kKiB, "params");
    FAIL();
  } catch (const OutOfMemoryError& e) {
    const OomReport& r = e.report();
    EXPECT_EQ(r.requested_bytes, 2 * kMiB);
    EXPECT_EQ(r.logical_bytes, 512 * kKiB);
    EXPECT_DOUBLE_EQ(r.expansion(), 4.0);
    EXPECT_NE(std::string(e.what()).find("padded arrays: 524288 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(PaddedArrayTest, PjrtReservationAndPoolKeys) {
  // The arena holds its whole capacity from creation (pool_bytes = bytes_limit, whatever is
  // live) and reserves nothing (the three reservation keys are 0), before and after use.
  HbmArena arena(metadata_only(3 * kMiB));
  for (int round = 0; round < 2; ++round) {
    const MemoryStats s = arena.memory_stats();
    EXPECT_EQ(s.bytes_limit, 3 * kMiB);
    EXPECT_EQ(s.pool_bytes, 3 * kMiB);
    EXPECT_EQ(s.peak_pool_bytes, 3 * kMiB);
    EXPECT_EQ(s.bytes_reserved, 0u);
    EXPECT_EQ(s.peak_bytes_reserved, 0u);
    EXPECT_EQ(s.bytes_reservable_limit, 0u);
    arena.allocate(kMiB);
  }
}

}  // namespace
}  // namespace vtpu
