// shard_map and the named collectives on a (4,2) mesh ('x','y') and a (2,2,2) mesh ('x','y','z').
// Expected values are worked out by hand or by a sequential reference over the replica groups.
#include "vtpu/sharding/shard_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "tests/expect_error.h"
#include "vtpu/collectives/reduce_kernels.h"

namespace vtpu {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using vtpu::testing::expect_error;
using Outputs = std::vector<LocalArray>;
using Inputs = std::span<const LocalArray>;

std::unique_ptr<Runtime> make_runtime(int num_cores) {
  RuntimeOptions o;
  o.num_cores = num_cores;
  o.hbm_bytes_per_core = uint64_t{64} << 20;
  return std::make_unique<Runtime>(o);
}

std::vector<float> arange(int n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

// A one-element f32 array holding `v` on this core.
LocalArray scalar_block(ShardMapContext& ctx, float v) {
  return LocalArray::from_host<float>(ctx.core(), std::span<const float>(&v, 1), {1, 1});
}

TEST(PartitionSpecBuilderTest, NoneAndTuplesReadAsInJax) {
  EXPECT_EQ(P("data", None, {"x", "y"}), PartitionSpec({{"data"}, {}, {"x", "y"}}));
  EXPECT_EQ(P(), PartitionSpec{});
  EXPECT_EQ(P(None, "model"), PartitionSpec({{}, {"model"}}));
  EXPECT_EQ(P(std::string("x")).to_string(), "P('x')");
}

TEST(ShardMapTest, AxisIndexOfYOnFourByTwoMesh) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  std::vector<int64_t> size_xy(8, -1);
  auto f = shard_map(mesh, {}, {P("x", "y")}, [&](ShardMapContext& ctx, Inputs) {
    size_xy[ctx.device()] = ctx.axis_size({"x", "y"});
    Outputs out;
    out.push_back(scalar_block(ctx, static_cast<float>(ctx.axis_index("y"))));
    return out;
  });
  std::vector<ShardedArray> out = f();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].global_shape(), ElementsAre(4, 2));
  EXPECT_THAT(out[0].gather(), ElementsAre(0, 1, 0, 1, 0, 1, 0, 1));
  EXPECT_THAT(size_xy, ElementsAre(8, 8, 8, 8, 8, 8, 8, 8));
}

TEST(ShardMapTest, AxisIndexOfTupleFlattensInTheGivenOrder) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  std::vector<int64_t> xy(8), yx(8);
  shard_map(mesh, {}, {}, [&](ShardMapContext& ctx, Inputs) {
    xy[ctx.device()] = ctx.axis_index({"x", "y"});
    yx[ctx.device()] = ctx.axis_index({"y", "x"});
    return Outputs{};
  })();
  // Device d sits at (d / 2, d % 2): ('x','y') gives 2 i + j, ('y','x') gives 4 j + i.
  EXPECT_THAT(xy, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(yx, ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
}

TEST(ShardMapTest, TiledAllGatherOnTwoByTwoByTwoMesh) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {2, 2, 2}, {"x", "y", "z"});
  const std::vector<float> host = arange(64);
  ShardedArray x =
      ShardedArray::device_put(*rt, host, {8, 8}, NamedSharding(mesh, P("z", {"x", "y"})));
  std::vector<std::vector<int64_t>> in_shape(8), z_shape(8), xy_shape(8);
  auto f = shard_map(mesh, {P("z", {"x", "y"})}, {P(None, {"x", "y"}), P("z")},
                     [&](ShardMapContext& ctx, Inputs in) {
                       in_shape[ctx.device()] = in[0].shape();
                       Outputs out;
                       out.push_back(ctx.all_gather(in[0], "z", 0, /*tiled=*/true));
                       out.push_back(ctx.all_gather(in[0], {"x", "y"}, 1, /*tiled=*/true));
                       z_shape[ctx.device()] = out[0].shape();
                       xy_shape[ctx.device()] = out[1].shape();
                       return out;
                     });
  std::vector<ShardedArray> out = f(x);
  for (int d = 0; d < 8; ++d) {
    EXPECT_THAT(in_shape[d], ElementsAre(4, 2)) << d;
    EXPECT_THAT(z_shape[d], ElementsAre(8, 2)) << d;
    EXPECT_THAT(xy_shape[d], ElementsAre(4, 8)) << d;
  }
  // Gathering the split axes back gives the whole array, laid out by the out specs.
  EXPECT_EQ(out[0].gather(), host);
  EXPECT_EQ(out[1].gather(), host);
  EXPECT_EQ(x.gather(), host);  // the input is unchanged
}

TEST(ShardMapTest, UntiledPsumScatterGivesOneColumnSumPerCore) {
  auto rt = make_runtime(4);
  DeviceMesh mesh = make_mesh(*rt, {4}, {"i"});
  ShardedArray x = ShardedArray::device_put(*rt, arange(16), {4, 4}, NamedSharding(mesh, P("i")));
  std::vector<std::vector<float>> per_core(4);
  auto f = shard_map(mesh, {P("i")}, {P("i")}, [&](ShardMapContext& ctx, Inputs in) {
    Outputs out;  // block (1, 4): row i of arange(16).reshape(4, 4)
    out.push_back(ctx.psum_scatter(in[0], "i", /*scatter_dimension=*/1, /*tiled=*/false));
    per_core[ctx.device()] = out[0].to_host<float>();
    return out;
  });
  std::vector<ShardedArray> out = f(x);
  // Column sums: 0+4+8+12 = 24, 28, 32, 36, one per core.
  EXPECT_THAT(per_core,
              ElementsAre(ElementsAre(24), ElementsAre(28), ElementsAre(32), ElementsAre(36)));
  EXPECT_THAT(out[0].global_shape(), ElementsAre(4));
  EXPECT_THAT(out[0].gather(), ElementsAre(24, 28, 32, 36));
  EXPECT_EQ(x.gather(), arange(16));
}

TEST(ShardMapTest, PpermuteShiftsByOneAndZeroesCoresThatReceiveNothing) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {8}, {"i"});
  ShardedArray x = ShardedArray::device_put(*rt, arange(16), {8, 2}, NamedSharding(mesh, P("i")));
  std::vector<PermutePair> shift, one;
  for (int j = 0; j < 8; ++j) shift.push_back({j, (j + 1) % 8});
  one.push_back({0, 1});
  auto f = shard_map(mesh, {P("i")}, {P("i"), P("i")}, [&](ShardMapContext& ctx, Inputs in) {
    Outputs out;
    out.push_back(ctx.ppermute(in[0], "i", shift));
    out.push_back(ctx.ppermute(in[0], "i", one));
    return out;
  });
  std::vector<ShardedArray> out = f(x);
  // Core j holds rows [2j, 2j+1]; after the shift core j holds core j-1's.
  EXPECT_THAT(out[0].gather(), ElementsAre(14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13));
  EXPECT_THAT(out[1].gather(), ElementsAre(0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  EXPECT_EQ(x.gather(), arange(16));
}

TEST(ShardMapTest, PpermuteRejectsARepeatedSourceOrDestination) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {8}, {"i"});
  ShardedArray x = ShardedArray::device_put(*rt, arange(8), {8}, NamedSharding(mesh, P("i")));
  // Each bad list with the pair the error must name (axis indices, as JAX's perm).
  const std::vector<std::pair<std::vector<PermutePair>, std::string>> bad = {
      {{{0, 1}, {0, 2}}, "(0, 2)"},
      {{{0, 1}, {2, 1}}, "(2, 1)"},
      {{{0, 8}}, "(0, 8)"},
      {{{-1, 3}}, "(-1, 3)"}};
  for (const auto& [perm, pair] : bad) {
    auto f = shard_map(mesh, {P("i")}, {P("i")}, [&](ShardMapContext& ctx, Inputs in) {
      Outputs out;
      out.push_back(ctx.ppermute(in[0], "i", perm));
      return out;
    });
    expect_error(ErrorCode::kInvalidArgument, [&] { f(x); }, {"ppermute", pair});
  }
  // The failure left the mesh usable.
  std::vector<PermutePair> ok = {{0, 1}};
  auto g = shard_map(mesh, {P("i")}, {P("i")}, [&](ShardMapContext& ctx, Inputs in) {
    Outputs out;
    out.push_back(ctx.ppermute(in[0], "i", ok));
    return out;
  });
  EXPECT_THAT(g(x)[0].gather(), ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
}

TEST(ShardMapTest, PmeanOfS32GivesF32AsJaxTrueDivision) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  std::vector<ElementType> dtype(8);
  auto f = shard_map(mesh, {}, {P(None, "y")}, [&](ShardMapContext& ctx, Inputs) {
    // x index i contributes i and 2 i + 1: sums 6 and 16 over 'x', means 1.5 and 4.
    const int32_t v[] = {static_cast<int32_t>(ctx.axis_index("x")),
                         static_cast<int32_t>(2 * ctx.axis_index("x") + 1)};
    LocalArray a = LocalArray::from_host<int32_t>(ctx.core(), v, {1, 2});
    Outputs out;
    out.push_back(ctx.pmean(a, "x"));
    dtype[ctx.device()] = out[0].dtype();
    return out;
  });
  std::vector<ShardedArray> out = f();
  EXPECT_THAT(dtype, ::testing::Each(ElementType::kF32));
  EXPECT_THAT(out[0].gather(), ElementsAre(1.5f, 4.0f, 1.5f, 4.0f));
}

TEST(ShardMapTest, DonatedPsumAndPpermuteReuseTheInputBuffer) {
  auto rt = make_runtime(4);
  DeviceMesh mesh = make_mesh(*rt, {4}, {"i"});
  std::vector<int> same(4, 0);
  std::vector<float> sums(4), moved(4);
  shard_map(mesh, {}, {}, [&](ShardMapContext& ctx, Inputs) {
    LocalArray a = scalar_block(ctx, static_cast<float>(ctx.device() + 1));
    const BufferId id = a.buffer().id();
    LocalArray s = ctx.psum(std::move(a), "i");
    const std::vector<PermutePair> perm = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
    LocalArray p = ctx.ppermute(std::move(s), "i", perm);
    same[ctx.device()] = p.buffer().id() == id;
    moved[ctx.device()] = p.data<float>()[0];
    return Outputs{};
  })();
  EXPECT_THAT(same, ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(moved, ElementsAre(10, 10, 10, 10));
}

TEST(ShardMapTest, CheckVmaNamesTheAxisAnOutputDiffersAlong) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  auto fn = [](ShardMapContext& ctx, Inputs) {
    Outputs out;
    out.push_back(scalar_block(ctx, static_cast<float>(ctx.axis_index("y"))));
    return out;
  };
  expect_error(ErrorCode::kInvalidArgument, [&] { shard_map(mesh, {}, {P("x")}, fn)(); }, {"'y'"});
  // Without the check the device at y = 0 supplies the block.
  std::vector<ShardedArray> out = shard_map(mesh, {}, {P("x")}, fn, {.check_vma = false})();
  EXPECT_THAT(out[0].gather(), ElementsAre(0, 0, 0, 0));
  // After a psum over 'y' the output is replicated along it and passes.
  auto summed = [](ShardMapContext& ctx, Inputs) {
    Outputs out;
    out.push_back(ctx.psum(scalar_block(ctx, static_cast<float>(ctx.axis_index("y"))), "y"));
    return out;
  };
  EXPECT_THAT(shard_map(mesh, {}, {P("x")}, summed)()[0].gather(), ElementsAre(1, 1, 1, 1));
}

TEST(ShardMapTest, WrongNumberOfInputsOrOutputs) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  ShardedArray x = ShardedArray::device_put(*rt, arange(8), {8}, NamedSharding(mesh, P("x")));
  auto one_in = shard_map(mesh, {P("x")}, {}, [](ShardMapContext&, Inputs) { return Outputs{}; });
  expect_error(ErrorCode::kInvalidArgument, [&] { one_in(); }, {"0", "1"});
  expect_error(ErrorCode::kInvalidArgument, [&] { one_in(x, x); }, {"2", "1"});
  auto two_out = shard_map(mesh, {}, {P("x")}, [](ShardMapContext& ctx, Inputs) {
    Outputs out;
    out.push_back(scalar_block(ctx, 1));
    out.push_back(scalar_block(ctx, 2));
    return out;
  });
  expect_error(ErrorCode::kInvalidArgument, [&] { two_out(); }, {"2", "1"});
}

TEST(ShardMapTest, UnknownAxisNamesAreInvalid) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  auto none = [](ShardMapContext&, Inputs) { return Outputs{}; };
  expect_error(ErrorCode::kInvalidArgument, [&] { shard_map(mesh, {P("q")}, {}, none); }, {"q"});
  expect_error(ErrorCode::kInvalidArgument, [&] { shard_map(mesh, {}, {P(None, "w")}, none); },
               {"w"});
  auto f = shard_map(mesh, {}, {}, [](ShardMapContext& ctx, Inputs) {
    ctx.psum(scalar_block(ctx, 1), {"x", "q"});
    return Outputs{};
  });
  expect_error(ErrorCode::kInvalidArgument, [&] { f(); }, {"q"});
  expect_error(ErrorCode::kInvalidArgument, [&] { mesh.communicator({"x", "x"}, 0); }, {"x"});
  expect_error(ErrorCode::kInvalidArgument,
               [&] {
                 make_mesh(*rt, {4, 4}, {"x", "y"});
               },
               {"16", "8"});
}

TEST(ShardMapTest, InputsWithAnotherShardingAreReshardedFirst) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  ShardedArray x = ShardedArray::device_put(*rt, arange(16), {4, 4}, NamedSharding(mesh, P()));
  std::vector<std::vector<int64_t>> shapes(8);
  auto f = shard_map(mesh, {P("x", "y")}, {P("x", "y")}, [&](ShardMapContext& ctx, Inputs in) {
    shapes[ctx.device()] = in[0].shape();
    Outputs out;
    out.push_back(ctx.psum(in[0], {}));  // a copy
    return out;
  });
  std::vector<ShardedArray> out = f(x);
  EXPECT_THAT(shapes, ::testing::Each(ElementsAre(1, 2)));
  EXPECT_EQ(out[0].gather(), arange(16));
  EXPECT_EQ(out[0].sharding(), NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(x.sharding(), NamedSharding(mesh, P()));
}

TEST(ShardMapTest, TypedArraysKeepTheirDtypeThroughShardMap) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  const std::vector<int64_t> host = {0, 1, 2, 3, 4, 5, 6, 7};
  ShardedArray x = ShardedArray::device_put(*rt, host, {4, 2}, NamedSharding(mesh, P("x")));
  const std::vector<BFloat16> half = {float_to_bf16(0.5f), float_to_bf16(-2.0f)};
  ShardedArray h = ShardedArray::device_put(*rt, half, {2}, NamedSharding(mesh, P("y")));
  auto f = shard_map(mesh, {P("x"), P("y")}, {P(), P()}, [](ShardMapContext& ctx, Inputs in) {
    Outputs out;
    out.push_back(ctx.psum(in[0], "x"));                 // (1, 2) column sums
    out.push_back(ctx.all_gather(in[1], "y", 0, true));  // (2)
    return out;
  });
  std::vector<ShardedArray> out = f(x, h);
  EXPECT_EQ(out[0].dtype(), ElementType::kS64);
  EXPECT_THAT(out[0].gather<int64_t>(), ElementsAre(12, 16));  // 0+2+4+6, 1+3+5+7
  EXPECT_EQ(out[1].dtype(), ElementType::kBf16);
  EXPECT_EQ(out[1].gather<BFloat16>(), half);
  EXPECT_EQ(x.gather<int64_t>(), host);
}

TEST(ShardMapTest, F16InputIsReshardedToItsInSpec) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  // 0.5, 1.5, ..., 3.5 are exact in f16; the input is replicated and fn wants it split over 'x'.
  std::vector<Float16> host;
  for (int i = 0; i < 4; ++i) host.push_back(float_to_f16(0.5f + static_cast<float>(i)));
  ShardedArray x = ShardedArray::device_put(*rt, host, {4}, NamedSharding(mesh, P()));
  auto f = shard_map(mesh, {P("x")}, {P()}, [](ShardMapContext& ctx, Inputs in) {
    EXPECT_EQ(in[0].shape(), std::vector<int64_t>{1});
    return outputs(ctx.psum(in[0], "x"));
  });
  std::vector<ShardedArray> out = f(x);
  EXPECT_EQ(out[0].dtype(), ElementType::kF16);
  EXPECT_EQ(f16_to_float(out[0].gather<Float16>()[0]), 8.0f);  // 0.5 + 1.5 + 2.5 + 3.5
}

TEST(ShardMapTest, ScatterAndAllToAllSizesAreCheckedInJaxTerms) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  ShardedArray x = ShardedArray::device_put(*rt, arange(12), {12}, NamedSharding(mesh, P()));
  // A (12,) block over the 4-core axis 'x': untiled needs size 4, tiled a multiple of 4; 3 on 'y'
  // is no multiple of 2.
  auto scatter = shard_map(mesh, {P()}, {P()}, [](ShardMapContext& ctx, Inputs in) {
    return outputs(ctx.psum_scatter(in[0], "x"));
  });
  expect_error(ErrorCode::kInvalidArgument, [&] { scatter(x); }, {"psum_scatter", "12", "4"});
  auto a2a = shard_map(mesh, {P()}, {P()}, [](ShardMapContext& ctx, Inputs in) {
    return outputs(ctx.all_to_all(in[0], "x", 0, 0));
  });
  expect_error(ErrorCode::kInvalidArgument, [&] { a2a(x); }, {"all_to_all", "12", "4"});
  ShardedArray odd = ShardedArray::device_put(*rt, arange(3), {3}, NamedSharding(mesh, P()));
  auto g = shard_map(mesh, {P()}, {P()}, [&](ShardMapContext& ctx, Inputs in) {
    return outputs(ctx.psum_scatter(in[0], "y", 0, /*tiled=*/true));
  });
  expect_error(ErrorCode::kInvalidArgument, [&] { g(odd); }, {"psum_scatter", "3", "2"});
}

TEST(ShardMapTest, CommunicatorsAreMadeOncePerAxisTuple) {
  auto rt = make_runtime(8);
  DeviceMesh mesh = make_mesh(*rt, {4, 2}, {"x", "y"});
  DeviceMesh copy = mesh;
  Communicator& a = mesh.communicator("y", 3);
  EXPECT_EQ(&copy.communicator("y", 2), &a);  // devices 2 and 3 share x = 1
  EXPECT_THAT(a.group(), ElementsAre(2, 3));
  EXPECT_NE(&mesh.communicator({"x", "y"}, 3), &mesh.communicator({"y", "x"}, 3));
  EXPECT_THAT(mesh.communicator({"y", "x"}, 3).group(), ElementsAre(0, 2, 4, 6, 1, 3, 5, 7));
}

}  // namespace
}  // namespace vtpu
