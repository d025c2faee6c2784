// Regressions from breaking shard_map on purpose: failures that leaked into other calls,
// overflowing shapes, empty outputs, unbounded picture options.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/sharding/shard_map.h"
#include "vtpu/sharding/visualize.h"

namespace vtpu {
namespace {

using Outputs = std::vector<LocalArray>;
using Inputs = std::span<const LocalArray>;
using namespace std::chrono_literals;

std::unique_ptr<Runtime> make_rt(int n) {
  RuntimeOptions o;
  o.num_cores = n;
  o.hbm_bytes_per_core = uint64_t{64} << 20;
  o.collective_timeout = 2000ms;
  return std::make_unique<Runtime>(o);
}

ShardMap psum_map(const DeviceMesh& mesh) {
  return shard_map(mesh, {P("x")}, {P()},
                   [](ShardMapContext& ctx, Inputs in) { return outputs(ctx.psum(in[0], "x")); });
}

TEST(ShardMapRegression, AnUnrelatedFailureDoesNotFailTheNextCall) {
  auto rt = make_rt(8);
  DeviceMesh mesh = make_mesh(*rt, {8}, {"x"});
  std::vector<float> host(8, 1.0f);
  ShardedArray x = ShardedArray::device_put(*rt, host, {8}, NamedSharding(mesh, P("x")));
  ShardMap f = psum_map(mesh);
  f(x);  // makes the communicators
  EXPECT_ANY_THROW(
      rt->run_spmd({0}, [](CoreContext&) { throw InvalidArgumentError("unrelated"); }));
  EXPECT_NO_THROW(f(x));

  DeviceMesh other = make_mesh(*rt, {8}, {"y"});
  auto bad = shard_map(other, {}, {}, [](ShardMapContext&, Inputs) -> Outputs {
    throw InvalidArgumentError("other mesh");
  });
  EXPECT_ANY_THROW(bad());
  EXPECT_NO_THROW(f(x));
}

TEST(ShardMapRegression, AFailingCallFromAnotherThreadDoesNotFailThisOne) {
  auto rt = make_rt(8);
  DeviceMesh mesh = make_mesh(*rt, {8}, {"x"});
  std::vector<float> host(8, 1.0f);
  ShardedArray x = ShardedArray::device_put(*rt, host, {8}, NamedSharding(mesh, P("x")));
  ShardMap good = psum_map(mesh);
  auto bad = shard_map(mesh, {P("x")}, {P()}, [](ShardMapContext& ctx, Inputs in) {
    if (ctx.device() == 0) throw InvalidArgumentError("bad thread");
    return outputs(ctx.psum(in[0], "x"));
  });
  std::atomic<int> good_failures{0};
  std::thread a([&] {
    for (int i = 0; i < 30; ++i) {
      try {
        good(x);
      } catch (const Error&) {
        ++good_failures;
      }
    }
  });
  std::thread b([&] {
    for (int i = 0; i < 30; ++i) {
      try {
        bad(x);
      } catch (const Error&) {
      }
    }
  });
  a.join();
  b.join();
  EXPECT_EQ(good_failures.load(), 0);
}

TEST(ShardMapRegression, AnOutputGlobalShapeThatOverflowsIsAnError) {
  auto rt = make_rt(8);
  DeviceMesh mesh = make_mesh(*rt, {8}, {"x"});
  auto g = shard_map(mesh, {}, {P(None, "x")}, [](ShardMapContext& ctx, Inputs) {
    return outputs(LocalArray::empty(ctx.core(), ElementType::kF32, {0, int64_t{1} << 62}));
  });
  // 2^62 x 8 wrapped to 0 and gave a ShardedArray f32[0,0].
  EXPECT_THROW(g(), InvalidArgumentError);
}

TEST(ShardMapRegression, ALocalArrayShapeWhoseCountOverflowsIsAnError) {
  auto rt = make_rt(1);
  DeviceBuffer b = rt->allocate_array(0, ElementType::kF32, std::vector<int64_t>{8});
  EXPECT_THROW(LocalArray::view(ElementType::kF32, {(int64_t{1} << 61) + 1, 8}, b),
               InvalidArgumentError);
}

TEST(ShardMapRegression, AnEmptyLocalArrayOutputIsAnError) {
  auto rt = make_rt(3);
  DeviceMesh mesh = make_mesh(*rt, {3}, {"x"});
  auto d =
      shard_map(mesh, {}, {P()}, [](ShardMapContext&, Inputs) { return outputs(LocalArray{}); });
  EXPECT_THROW(d(), InvalidArgumentError);
}

TEST(ShardMapRegression, VisualizeOptionsOutOfBoundsAreErrors) {
  auto rt = make_rt(4);
  DeviceMesh mesh = make_mesh(*rt, {2, 2}, {"a", "b"});
  NamedSharding s(mesh, P("a", "b"));
  VisualizeOptions o;
  o.min_width = 100;
  o.max_width = 10;
  EXPECT_THROW(visualize_array_sharding(s, {8, 8}, o), InvalidArgumentError);
  // A huge scale built a multi-GB picture; 1e300 and NaN were undefined float-to-int casts.
  for (double scale : {1e7, 1e300, std::numeric_limits<double>::quiet_NaN(), 0.0, -1.0}) {
    VisualizeOptions big;
    big.scale = scale;
    EXPECT_THROW(visualize_array_sharding(s, {8, 8}, big), InvalidArgumentError) << scale;
  }
}

TEST(ShardMapRegression, ASingleOutSpecPrefixLaysOutEveryOutput) {
  auto rt = make_rt(4);
  DeviceMesh mesh = make_mesh(*rt, {4}, {"x"});
  auto fn = [](ShardMapContext& ctx, Inputs) {
    const auto i = static_cast<float>(ctx.axis_index("x"));
    const float a[] = {i}, b[] = {10 + i, 20 + i};
    return outputs(LocalArray::from_host<float>(ctx.core(), a, {1}),
                   LocalArray::from_host<float>(ctx.core(), b, {2}));
  };
  std::vector<ShardedArray> out = shard_map(mesh, {}, {P("x")}, fn, {.out_spec_prefix = true})();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].gather<float>(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(out[1].gather<float>(), (std::vector<float>{10, 20, 11, 21, 12, 22, 13, 23}));
  // Without the option one spec still means exactly one output.
  EXPECT_THROW(shard_map(mesh, {}, {P("x")}, fn)(), InvalidArgumentError);
}

}  // namespace
}  // namespace vtpu
