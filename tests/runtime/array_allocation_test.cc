// Tests for CoreContext::allocate_array / allocate_arrays and Runtime::allocate_array: an array
// is stored row-major in the first bytes of its chunk and charged its padded bytes under
// tpu_default_layout (memory/tiled_layout.h), or its logical bytes with pad_arrays off. Every
// expected size below is worked out by hand from the tiling rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vtpu/common/element_type.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

RuntimeOptions options(int num_cores, bool pad_arrays, bool backing = false) {
  RuntimeOptions o;
  o.num_cores = num_cores;
  o.hbm_bytes_per_core = 16 * kMiB;
  o.hbm_backing = backing;
  o.pad_arrays = pad_arrays;
  return o;
}

// f32[1437,64] under T(8,128): rows 1437 -> 1440, columns 64 -> 128, so 1440 x 128 x 4 =
// 737,280 bytes hold 1437 x 64 x 4 = 367,872. Both are multiples of BFC's 256 B granule, so the
// chunk is exactly the charge.
constexpr uint64_t kPadded1437x64 = 737280;
constexpr uint64_t kLogical1437x64 = 367872;

class ArrayAllocationTest : public ::testing::TestWithParam<bool> {};

TEST_P(ArrayAllocationTest, F32Array1437x64OnEveryCore) {
  const bool pad = GetParam();
  const uint64_t charged = pad ? kPadded1437x64 : kLogical1437x64;
  constexpr int kCores = 4;
  Runtime rt(options(kCores, pad));
  std::vector<DeviceBuffer> buffers(kCores);
  const std::vector<int64_t> dims = {1437, 64};
  rt.run_spmd([&](CoreContext& ctx) {
    buffers[ctx.core_id()] = ctx.allocate_array(ElementType::kF32, dims, "x");
  });
  for (int c = 0; c < kCores; ++c) {
    SCOPED_TRACE("core " + std::to_string(c));
    EXPECT_EQ(buffers[c].core_id(), c);
    EXPECT_EQ(buffers[c].size_bytes(), kLogical1437x64);
    const MemoryStats s = rt.core(c).hbm().memory_stats();
    EXPECT_EQ(s.bytes_in_use, charged);
    EXPECT_EQ(s.padded_bytes_in_use, charged);
    EXPECT_EQ(s.logical_bytes_in_use, kLogical1437x64);
    EXPECT_EQ(s.peak_bytes_in_use, charged);
    EXPECT_EQ(s.num_allocs, 1u);
    const ArenaFreeSpace f = rt.core(c).hbm().free_space();
    EXPECT_EQ(f.bytes_in_use, charged);
    EXPECT_EQ(f.total_free_bytes, 16 * kMiB - charged);
    const nlohmann::json j = s;
    EXPECT_EQ(j.at("padded_bytes_in_use").get<uint64_t>(), charged);
    EXPECT_EQ(j.at("logical_bytes_in_use").get<uint64_t>(), kLogical1437x64);
  }
  buffers.clear();
  for (int c = 0; c < kCores; ++c) {
    const MemoryStats s = rt.core(c).hbm().memory_stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.logical_bytes_in_use, 0u);
    rt.core(c).hbm().check_consistency();
  }
  // The host-side call charges the named core only.
  DeviceBuffer host = rt.allocate_array(2, ElementType::kF32, dims, "host");
  EXPECT_EQ(rt.core(2).hbm().memory_stats().bytes_in_use, charged);
  EXPECT_EQ(rt.core(1).hbm().memory_stats().bytes_in_use, 0u);
}

INSTANTIATE_TEST_SUITE_P(PadArrays, ArrayAllocationTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Padded") : std::string("Logical");
                         });

struct ShapeCase {
  const char* name;
  ElementType dtype;
  std::vector<int64_t> dims;
  uint64_t logical_bytes;
  uint64_t padded_bytes;
  uint64_t chunk_bytes;  // padded bytes rounded up to BFC's 256 B
};

// Hand-worked under tpu_default_layout:
//   bf16[1437,64] T(8,128)(2,1): (1437,64) -> (180,1,8,128); the (2,1) tile packs row pairs of
//     the 8x128 block without padding: 180 x 8 x 128 x 2 = 368,640 for 1437 x 64 x 2 = 183,936.
//   bf16[9,128]: rows 9 -> 16: 16 x 128 x 2 = 4,096 for 2,304.
//   s64[3,200] T(8,128) with 8-byte elements: 8 x 256 x 8 = 16,384 for 4,800.
//   f32[1000] (rank 1, T(1024)): 1024 x 4 = 4,096 for 4,000.
//   bf16[3000] (rank 1, T(1024)(128)(2,1)): 3 x 1024 x 2 = 6,144 for 6,000.
//   f32[] (rank 0, untiled): 4 bytes; the chunk is one 256 B granule.
std::vector<ShapeCase> shape_cases() {
  return {{"bf16_1437x64", ElementType::kBf16, {1437, 64}, 183936, 368640, 368640},
          {"bf16_9x128", ElementType::kBf16, {9, 128}, 2304, 4096, 4096},
          {"s64_3x200", ElementType::kS64, {3, 200}, 4800, 16384, 16384},
          {"f32_rank1_1000", ElementType::kF32, {1000}, 4000, 4096, 4096},
          {"bf16_rank1_3000", ElementType::kBf16, {3000}, 6000, 6144, 6144},
          {"f32_scalar", ElementType::kF32, {}, 4, 4, 256}};
}

TEST(ArrayAllocationShapesTest, DtypesAndRanksChargeTheirHandWorkedBytes) {
  Runtime padded(options(1, true));
  Runtime logical(options(1, false));
  for (const ShapeCase& c : shape_cases()) {
    SCOPED_TRACE(c.name);
    DeviceBuffer p = padded.allocate_array(0, c.dtype, c.dims, c.name);
    DeviceBuffer l = logical.allocate_array(0, c.dtype, c.dims, c.name);
    EXPECT_EQ(p.size_bytes(), c.logical_bytes);
    EXPECT_EQ(l.size_bytes(), c.logical_bytes);
    const MemoryStats sp = padded.core(0).hbm().memory_stats();
    EXPECT_EQ(sp.logical_bytes_in_use, c.logical_bytes);
    EXPECT_EQ(sp.padded_bytes_in_use, c.padded_bytes);
    EXPECT_EQ(sp.bytes_in_use, c.chunk_bytes);
    const MemoryStats sl = logical.core(0).hbm().memory_stats();
    EXPECT_EQ(sl.logical_bytes_in_use, c.logical_bytes);
    EXPECT_EQ(sl.padded_bytes_in_use, c.logical_bytes);
    EXPECT_EQ(sl.bytes_in_use, (c.logical_bytes + 255) / 256 * 256);
  }
}

TEST(ArrayAllocationShapesTest, ZeroElementArraysAreEmptyBuffersAndNegativeDimsThrow) {
  Runtime rt(options(1, true));
  DeviceBuffer b = rt.allocate_array(0, ElementType::kF32, std::vector<int64_t>{0, 64});
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.size_bytes(), 0u);
  EXPECT_EQ(b.id(), 0u);
  const MemoryStats s = rt.core(0).hbm().memory_stats();
  EXPECT_EQ(s.num_allocs, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_THROW(rt.allocate_array(0, ElementType::kF32, std::vector<int64_t>{-1, 64}),
               InvalidArgumentError);
  EXPECT_THROW(rt.allocate_array(1, ElementType::kF32, std::vector<int64_t>{8, 8}),
               InvalidArgumentError);  // no core 1
  EXPECT_EQ(rt.core(0).hbm().memory_stats().num_allocs, 0u);
}

TEST(ArrayAllocationShapesTest, PackedArraysChargeTheSumOfTheirPaddedBytes) {
  // f32 [1437,64] + [64] + [64,10] + [0,5] in one buffer:
  //   padded  737,280 + 4,096 ([1,64] -> 8 x 128 x 4) + 32,768 (64 x 128 x 4) + 0 = 774,144
  //   logical 367,872 + 256 + 2,560 + 0 = 370,688
  // Both multiples of 256, so the chunk is the charge.
  const std::vector<std::vector<int64_t>> shapes = {{1437, 64}, {64}, {64, 10}, {0, 5}};
  for (const bool pad : {true, false}) {
    SCOPED_TRACE(pad ? "padded" : "logical");
    Runtime rt(options(2, pad));
    std::vector<DeviceBuffer> buffers(2);
    rt.run_spmd([&](CoreContext& ctx) {
      buffers[ctx.core_id()] = ctx.allocate_arrays(ElementType::kF32, shapes, "params");
    });
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(buffers[c].size_bytes(), 370688u);
      const MemoryStats s = rt.core(c).hbm().memory_stats();
      EXPECT_EQ(s.bytes_in_use, pad ? 774144u : 370688u);
      EXPECT_EQ(s.padded_bytes_in_use, pad ? 774144u : 370688u);
      EXPECT_EQ(s.logical_bytes_in_use, 370688u);
      EXPECT_EQ(s.num_live_buffers, 1u);
    }
  }
  // Only zero-element arrays: an empty buffer, nothing allocated.
  Runtime rt(options(1, true));
  const std::vector<std::vector<int64_t>> empty = {{0}, {3, 0}};
  rt.run_spmd([&](CoreContext& ctx) {
    const DeviceBuffer b = ctx.allocate_arrays(ElementType::kBf16, empty);
    EXPECT_EQ(b.size_bytes(), 0u);
  });
  EXPECT_EQ(rt.core(0).hbm().memory_stats().num_allocs, 0u);
}

TEST(ArrayAllocationShapesTest, DataIsRowMajorInTheChunksFirstBytes) {
  Runtime rt(options(1, true, /*backing=*/true));
  const std::vector<int64_t> dims = {3, 5};
  DeviceBuffer b = rt.allocate_array(0, ElementType::kF32, dims, "m");
  HbmArena& arena = rt.core(0).hbm();
  // The buffer starts at its chunk, and its view is the 15 logical elements, not the 8 x 128
  // padded tile.
  EXPECT_EQ(b.data(), arena.data(b.id()));
  EXPECT_EQ(arena.size_bytes(b.id()), 8u * 128 * 4);
  const auto v = b.as<float>();
  ASSERT_EQ(v.size(), 15u);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  EXPECT_EQ(v[1 * 5 + 2], 7.0f);  // element (1,2) of a row-major 3x5
  EXPECT_EQ(reinterpret_cast<const float*>(arena.data(b.id()))[14], 14.0f);
}

TEST(ArrayAllocationShapesTest, PaddedBufferConstructorRefusesBytesWithoutACharge) {
  Runtime rt(options(1, true));
  const std::shared_ptr<HbmArena> arena = rt.core(0).hbm_shared();
  EXPECT_THROW(DeviceBuffer(arena, 16, 0, "x"), InvalidArgumentError);
  EXPECT_THROW(DeviceBuffer(arena, 16, 8, "x"), InvalidArgumentError);
  const DeviceBuffer empty(arena, 0, 0, "x");
  EXPECT_EQ(empty.id(), 0u);
  EXPECT_EQ(arena->memory_stats().num_allocs, 0u);
}

}  // namespace
}  // namespace vtpu
