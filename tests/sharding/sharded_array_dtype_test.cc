// ShardedArray for every element type it holds: device_put, local_data, gather and from_buffers
// by dtype, the reduce identities of partial arrays per dtype, and the padded HBM bytes each block
// is charged (hand-worked from the TPU tiled layouts of memory/tiled_layout.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "tests/sharding/expect_invalid.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/float16.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {
namespace {

using Shape = std::vector<int64_t>;
using ::testing::ElementsAre;
using vtpu::testing::expect_invalid;

std::unique_ptr<Runtime> make_runtime(int num_cores, bool pad_arrays = true) {
  RuntimeOptions o;
  o.num_cores = num_cores;
  o.hbm_bytes_per_core = 16 * kMiB;
  o.pad_arrays = pad_arrays;
  return std::make_unique<Runtime>(o);
}

NamedSharding sharding(Mesh mesh, const char* spec) {
  return NamedSharding(std::move(mesh), PartitionSpec::parse(spec));
}

template <typename T>
std::vector<T> iota_of(size_t n, T (*make)(int64_t)) {
  std::vector<T> x;
  for (size_t i = 0; i < n; ++i) x.push_back(make(static_cast<int64_t>(i)));
  return x;
}

BFloat16 bf16(int64_t i) { return float_to_bf16(static_cast<float>(i) * 0.5f); }
Float16 f16(int64_t i) { return float_to_f16(static_cast<float>(i) * 0.25f - 3.0f); }
int32_t s32(int64_t i) { return static_cast<int32_t>(i * 1000003 - 7); }
int64_t s64(int64_t i) { return (int64_t{1} << 40) * i - 3; }

template <typename T>
std::vector<T> local(const ShardedArray& a, int dev) {
  const std::span<const T> d = a.local_data<T>(dev);
  return {d.begin(), d.end()};
}

TEST(ShardedArrayDtypeTest, DtypeAndToStringNameTheElementType) {
  auto rt = make_runtime(4);
  const std::vector<BFloat16> x = iota_of<BFloat16>(50, bf16);
  const ShardedArray a = ShardedArray::device_put(*rt, x, {5, 10}, sharding(Mesh({4}, {"x"}), "x"));
  EXPECT_EQ(a.dtype(), ElementType::kBf16);
  EXPECT_EQ(a.to_string(), "ShardedArray(bf16[5,10], NamedSharding(mesh=Mesh(x=4), spec=P('x')))");
  const std::vector<float> f(4);
  EXPECT_EQ(ShardedArray::device_put(*rt, f, {4}, sharding(Mesh({4}, {"x"}), "x")).dtype(),
            ElementType::kF32);
}

// Rows [0,2), [2,4), [4,5), [5,5) of a (5, 10) array over four devices, for each dtype.
TEST(ShardedArrayDtypeTest, EveryDtypeRoundTripsBlockByBlock) {
  auto rt = make_runtime(4);
  const NamedSharding s = sharding(Mesh({4}, {"x"}), "x");
  const std::vector<BFloat16> b = iota_of<BFloat16>(50, bf16);
  const std::vector<int32_t> i = iota_of<int32_t>(50, s32);
  const std::vector<int64_t> l = iota_of<int64_t>(50, s64);
  const std::vector<Float16> h = iota_of<Float16>(50, f16);
  const ShardedArray ab = ShardedArray::device_put(*rt, b, {5, 10}, s);
  const ShardedArray ah = ShardedArray::device_put(*rt, h, {5, 10}, s);
  const ShardedArray ai = ShardedArray::device_put(*rt, i, {5, 10}, s);
  const ShardedArray al = ShardedArray::device_put(*rt, l, {5, 10}, s);
  EXPECT_EQ(ab.gather<BFloat16>(), b);
  EXPECT_EQ(ah.dtype(), ElementType::kF16);
  EXPECT_EQ(ah.gather<Float16>(), h);
  EXPECT_EQ(local<Float16>(ah, 0), std::vector<Float16>(h.begin(), h.begin() + 20));
  EXPECT_EQ(ai.gather<int32_t>(), i);
  EXPECT_EQ(al.gather<int64_t>(), l);
  // Device 2 holds row 4 (elements 40..49); device 3 holds nothing.
  EXPECT_EQ(local<int32_t>(ai, 2), std::vector<int32_t>(i.begin() + 40, i.end()));
  EXPECT_EQ(local<int64_t>(al, 2), std::vector<int64_t>(l.begin() + 40, l.end()));
  EXPECT_EQ(local<BFloat16>(ab, 1), std::vector<BFloat16>(b.begin() + 20, b.begin() + 40));
  EXPECT_TRUE(ai.local_data<int32_t>(3).empty());
  EXPECT_EQ(al.buffer(0).size_bytes(), 20u * 8);  // logical bytes: 2 rows of 10 s64
  EXPECT_EQ(ab.buffer(2).size_bytes(), 10u * 2);
}

TEST(ShardedArrayDtypeTest, ByteFormTakesTheDtype) {
  auto rt = make_runtime(2);
  const std::vector<int32_t> x = {1, -2, 3, -4, 5, -6};
  const ShardedArray a =
      ShardedArray::device_put(*rt, ElementType::kS32, std::as_bytes(std::span(x)), {3, 2},
                               sharding(Mesh({2}, {"x"}), "None, x"));
  EXPECT_EQ(a.dtype(), ElementType::kS32);
  EXPECT_THAT(local<int32_t>(a, 0), ElementsAre(1, 3, 5));
  EXPECT_THAT(local<int32_t>(a, 1), ElementsAre(-2, -4, -6));
  EXPECT_EQ(a.gather<int32_t>(), x);
}

TEST(ShardedArrayDtypeTest, TypedAccessOfAnotherDtypeIsAnError) {
  auto rt = make_runtime(2);
  const std::vector<BFloat16> x = iota_of<BFloat16>(4, bf16);
  const ShardedArray a = ShardedArray::device_put(*rt, x, {4}, sharding(Mesh({2}, {"x"}), "x"));
  expect_invalid([&] { a.gather(); }, {"gather<f32>", "bf16"});
  expect_invalid([&] { a.gather<int32_t>(); }, {"gather<s32>", "bf16"});
  expect_invalid([&] { a.local_data(0); }, {"local_data<f32>", "bf16"});
  expect_invalid([&] { a.local_data<int64_t>(1); }, {"local_data<s64>", "bf16"});
}

TEST(ShardedArrayDtypeTest, HostSizeAndUnsupportedDtypeAreChecked) {
  auto rt = make_runtime(2);
  const NamedSharding s = sharding(Mesh({2}, {"x"}), "x");
  const std::vector<int64_t> seven(7);
  expect_invalid([&] { ShardedArray::device_put(*rt, seven, {8}, s); },
                 {"7 elements", "56 bytes", "s64", "(8,)", "expected 8 elements"});
  const std::vector<std::byte> bytes(8);
  expect_invalid([&] { ShardedArray::device_put(*rt, ElementType::kS8, bytes, {8}, s); },
                 {"device_put", "s8"});
  expect_invalid([&] { ShardedArray::from_buffers({8}, s, {}, ElementType::kU32); },
                 {"from_buffers", "u32"});
}

TEST(ShardedArrayDtypeTest, FromBuffersChecksBytesByDtype) {
  auto rt = make_runtime(2);
  const NamedSharding s = sharding(Mesh({2}, {"x"}), "x");
  auto buffers = [&](uint64_t bytes0) {
    std::vector<DeviceBuffer> b;
    b.push_back(rt->allocate(0, bytes0));
    b.push_back(rt->allocate(1, 4));
    return b;
  };
  // bf16[4] over two devices: 2 elements, 4 bytes per block.
  const ShardedArray a = ShardedArray::from_buffers({4}, s, buffers(4), ElementType::kBf16);
  EXPECT_EQ(a.dtype(), ElementType::kBf16);
  expect_invalid([&] { ShardedArray::from_buffers({4}, s, buffers(8), ElementType::kBf16); },
                 {"holds 8 bytes", "expected 4 bytes", "bf16"});
}

// Addends other than partial index 0 hold the identity of the reduce op in the array's dtype, so
// gather (the fold of the addends) gives the host array back exactly.
TEST(ShardedArrayDtypeTest, PartialIdentitiesPerDtype) {
  auto rt = make_runtime(2);
  const Mesh mesh({2}, {"x"});
  using L32 = std::numeric_limits<int32_t>;
  using L64 = std::numeric_limits<int64_t>;
  const std::vector<int32_t> i = {7, -8};
  const std::vector<int64_t> l = {int64_t{1} << 50, -9};
  struct Case {
    const char* op;
    int32_t s32;
    int64_t s64;
    uint16_t bf16_bits;
    uint16_t f16_bits;
  };
  for (const Case& c : {Case{"sum", 0, 0, 0x0000, 0x0000}, Case{"prod", 1, 1, 0x3f80, 0x3c00},
                        Case{"max", L32::lowest(), L64::lowest(), 0xff80, 0xfc00},
                        Case{"min", L32::max(), L64::max(), 0x7f80, 0x7c00}}) {
    SCOPED_TRACE(c.op);
    const std::string spec = std::string("P(unreduced={'x'}, reduce_op='") + c.op + "')";
    const NamedSharding s = sharding(mesh, spec.c_str());
    const ShardedArray ai = ShardedArray::device_put(*rt, i, {2}, s);
    const ShardedArray al = ShardedArray::device_put(*rt, l, {2}, s);
    const std::vector<BFloat16> b = {float_to_bf16(1.5f), float_to_bf16(-2.0f)};
    const ShardedArray ab = ShardedArray::device_put(*rt, b, {2}, s);
    EXPECT_EQ(local<int32_t>(ai, 0), i);
    EXPECT_THAT(local<int32_t>(ai, 1), ElementsAre(c.s32, c.s32));
    EXPECT_THAT(local<int64_t>(al, 1), ElementsAre(c.s64, c.s64));
    EXPECT_EQ(local<BFloat16>(ab, 1)[0].bits, c.bf16_bits);
    const std::vector<Float16> h = {float_to_f16(0.5f), float_to_f16(-65504.0f)};
    const ShardedArray ah = ShardedArray::device_put(*rt, h, {2}, s);
    EXPECT_EQ(local<Float16>(ah, 1)[1].bits, c.f16_bits);
    EXPECT_EQ(ah.gather<Float16>(), h);
    EXPECT_EQ(ai.gather<int32_t>(), i);
    EXPECT_EQ(al.gather<int64_t>(), l);
    EXPECT_EQ(ab.gather<BFloat16>(), b);
  }
}

// Integer sums of partial arrays wrap modulo 2^32, as the collectives' combine() does.
TEST(ShardedArrayDtypeTest, PartialS32SumGatherWraps) {
  auto rt = make_runtime(2);
  const NamedSharding s = sharding(Mesh({2}, {"x"}), "P(unreduced={'x'})");
  ShardedArray a = ShardedArray::device_put(*rt, std::vector<int32_t>{2147483647, 5}, {2}, s);
  a.local_data<int32_t>(1)[0] = 1;
  a.local_data<int32_t>(1)[1] = -7;
  EXPECT_THAT(a.gather<int32_t>(), ElementsAre(std::numeric_limits<int32_t>::min(), -2));
}

// f32[1437,64] replicated on two cores: each holds the whole array, padded by T(8,128) to
// (1440, 128) x 4 bytes = 737,280 bytes; its logical size is 1437 x 64 x 4 = 367,872.
TEST(ShardedArrayDtypeTest, DevicePutChargesPaddedBytes) {
  for (bool pad : {true, false}) {
    SCOPED_TRACE(pad);
    auto rt = make_runtime(2, pad);
    const std::vector<float> x(1437 * 64, 1.0f);
    const ShardedArray a =
        ShardedArray::device_put(*rt, x, {1437, 64}, sharding(Mesh({2}, {"x"}), "P()"));
    for (int core : {0, 1}) {
      const MemoryStats m = rt->core(core).hbm().memory_stats();
      EXPECT_EQ(m.bytes_in_use, pad ? 737280u : 367872u);
      EXPECT_EQ(m.logical_bytes_in_use, 367872u);
      EXPECT_EQ(a.buffer(core).size_bytes(), 367872u);
    }
  }
}

// Sharded blocks are padded one by one, by the tile of their dtype:
//   f32[5,10] P('x') on 4: blocks (2,10), (2,10), (1,10), (0,10) -> (8,128) x 4 = 4096 bytes for
//     each non-empty block, nothing for the empty one;
//   bf16[20,300] P('x','y') on (2,2): blocks (10,150) -> T(8,128)(2,1) pads to (16,256) x 2 =
//     8192 bytes (logical 3000);
//   s64[3,200] P(None,'x') on 2: blocks (3,100) -> (8,128) x 8 = 8192 bytes (logical 2400);
//   f16[3,129] replicated on 2: (3,129) -> T(8,128)(2,1) pads to (8,256) x 2 = 4096 bytes
//     (logical 774).
TEST(ShardedArrayDtypeTest, ShardedBlocksArePaddedByTheirDtypesTile) {
  auto rt = make_runtime(4);
  auto in_use = [&](int core) { return rt->core(core).hbm().memory_stats().bytes_in_use; };
  {
    const ShardedArray a = ShardedArray::device_put(*rt, std::vector<float>(50), {5, 10},
                                                    sharding(Mesh({4}, {"x"}), "x"));
    EXPECT_THAT((std::vector<uint64_t>{in_use(0), in_use(1), in_use(2), in_use(3)}),
                ElementsAre(4096, 4096, 4096, 0));
  }
  {
    const ShardedArray a = ShardedArray::device_put(*rt, std::vector<BFloat16>(6000), {20, 300},
                                                    sharding(Mesh({2, 2}, {"x", "y"}), "x, y"));
    for (int core = 0; core < 4; ++core) {
      EXPECT_EQ(in_use(core), 8192u);
      EXPECT_EQ(rt->core(core).hbm().memory_stats().logical_bytes_in_use, 3000u);
    }
  }
  {
    const ShardedArray a = ShardedArray::device_put(*rt, std::vector<int64_t>(600), {3, 200},
                                                    sharding(Mesh({2}, {"x"}), "None, x"));
    EXPECT_EQ(in_use(0), 8192u);
    EXPECT_EQ(in_use(1), 8192u);
    EXPECT_EQ(rt->core(1).hbm().memory_stats().logical_bytes_in_use, 2400u);
  }
  {
    const ShardedArray a = ShardedArray::device_put(*rt, std::vector<Float16>(387), {3, 129},
                                                    sharding(Mesh({2}, {"x"}), "P()"));
    EXPECT_EQ(in_use(0), 4096u);
    EXPECT_EQ(rt->core(1).hbm().memory_stats().logical_bytes_in_use, 774u);
  }
}

}  // namespace
}  // namespace vtpu
