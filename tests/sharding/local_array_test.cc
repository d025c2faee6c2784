// LocalArray: owned arrays and read-only views of one core's HBM.
#include "vtpu/sharding/local_array.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/expect_error.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using ::testing::ElementsAre;
using vtpu::testing::expect_error;

class LocalArrayTest : public ::testing::Test {
 protected:
  // Runs fn on core 0 of a one-core runtime.
  template <typename Fn>
  void on_core(Fn fn, bool pad = true) {
    RuntimeOptions o;
    o.num_cores = 1;
    o.hbm_bytes_per_core = uint64_t{16} << 20;
    o.pad_arrays = pad;
    Runtime rt(o);
    rt.run_spmd([&](CoreContext& ctx) { fn(ctx); });
  }
};

TEST_F(LocalArrayTest, FromHostKeepsValuesShapeAndDtype) {
  on_core([](CoreContext& ctx) {
    const int32_t v[] = {1, 2, 3, 4, 5, 6};
    LocalArray a = LocalArray::from_host<int32_t>(ctx, v, {2, 3});
    EXPECT_EQ(a.dtype(), ElementType::kS32);
    EXPECT_THAT(a.shape(), ElementsAre(2, 3));
    EXPECT_EQ(a.size(), 6);
    EXPECT_EQ(a.nbytes(), 24u);
    EXPECT_THAT(a.to_host<int32_t>(), ElementsAre(1, 2, 3, 4, 5, 6));
    EXPECT_TRUE(a.owns_buffer());
    expect_error(ErrorCode::kInvalidArgument, [&] { (void)a.data<float>(); }, {"s32", "f32"});
    expect_error(ErrorCode::kInvalidArgument, [&] { LocalArray::from_host<int32_t>(ctx, v, {4}); },
                 {"6", "4"});
  });
}

TEST_F(LocalArrayTest, ZerosAndUnsupportedDtypes) {
  on_core([](CoreContext& ctx) {
    LocalArray z = LocalArray::zeros(ctx, ElementType::kS64, {3});
    EXPECT_THAT(z.to_host<int64_t>(), ElementsAre(0, 0, 0));
    expect_error(ErrorCode::kInvalidArgument,
                 [&] { LocalArray::empty(ctx, ElementType::kU8, {3}); }, {"u8"});
    expect_error(ErrorCode::kInvalidArgument,
                 [&] {
                   LocalArray::empty(ctx, ElementType::kF32, {2, -1});
                 },
                 {"-1"});
  });
}

TEST_F(LocalArrayTest, ViewsAreReadOnlyAndDoNotOwn) {
  on_core([](CoreContext& ctx) {
    const float v[] = {1.5f, 2.5f};
    LocalArray a = LocalArray::from_host<float>(ctx, v, {2});
    LocalArray view = LocalArray::view(ElementType::kF32, {2}, a.buffer());
    EXPECT_FALSE(view.owns_buffer());
    EXPECT_THAT(view.to_host<float>(), ElementsAre(1.5f, 2.5f));
    expect_error(ErrorCode::kFailedPrecondition, [&] { view.data<float>(); }, {});
    expect_error(ErrorCode::kFailedPrecondition, [&] { std::move(view).release(); }, {});
    expect_error(ErrorCode::kInvalidArgument,
                 [&] { LocalArray::view(ElementType::kF32, {3}, a.buffer()); }, {"8", "12"});
  });
}

TEST_F(LocalArrayTest, AdoptAndReleaseMoveTheBuffer) {
  on_core([](CoreContext& ctx) {
    DeviceBuffer b = ctx.allocate(16);
    const BufferId id = b.id();
    LocalArray a = LocalArray::adopt(ElementType::kBf16, {2, 4}, std::move(b));
    EXPECT_EQ(a.buffer().id(), id);
    DeviceBuffer back = std::move(a).release();
    EXPECT_EQ(back.id(), id);
    expect_error(ErrorCode::kInvalidArgument,
                 [&] { LocalArray::adopt(ElementType::kF32, {5}, std::move(back)); }, {"16", "20"});
  });
}

TEST_F(LocalArrayTest, ChargesPaddedBytesUnlessPaddingIsOff) {
  for (bool pad : {true, false}) {
    on_core(
        [&](CoreContext& ctx) {
          const uint64_t before = ctx.hbm().memory_stats().bytes_in_use;
          LocalArray a = LocalArray::empty(ctx, ElementType::kF32, {1437, 64});
          // 1440 x 128 x 4 under the TPU (8, 128) tile; 1437 x 64 x 4 without padding.
          EXPECT_EQ(ctx.hbm().memory_stats().bytes_in_use - before, pad ? 737280u : 367872u);
        },
        pad);
  }
}

}  // namespace
}  // namespace vtpu
