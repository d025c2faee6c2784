// Collectives over a group that spans processes give the same bits as one process: each test
// runs the collective on the distributed runtime and on a one-process runtime of the same cores
// in this process, and compares.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/distributed/distributed.h"
#include "tests/distributed/test_util.h"

namespace vtpu {
namespace {

using distributed_test::default_link_options;

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Every core's all-reduced values, indexed by core (cores of other processes stay empty).
std::vector<std::vector<float>> all_reduce_on(Runtime& rt, int n, Algorithm alg) {
  Communicator comm(rt, iota(rt.num_cores()));
  std::vector<std::vector<float>> out(static_cast<size_t>(rt.num_cores()));
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 0.1f * static_cast<float>(ctx.core_id() + 1) + 1e-3f * static_cast<float>(i % 977);
    CollectiveOptions co;
    co.algorithm = alg;
    comm.all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum, co);
    out[static_cast<size_t>(ctx.core_id())] = std::move(x);
  });
  return out;
}

TEST(MpiTransportTest, AllReduceMatchesOneProcessBitForBit) {
  auto dist = distributed::make_runtime(default_link_options(8));
  Runtime one(default_link_options(8));
  for (int n : {1, 1000, 300000}) {
    for (Algorithm alg : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kBidirectionalRing,
                          Algorithm::kRecursiveDoubling}) {
      const auto got = all_reduce_on(*dist, n, alg);
      const auto want = all_reduce_on(one, n, alg);
      for (int c : dist->local_core_ids()) {
        ASSERT_EQ(0, std::memcmp(got[c].data(), want[c].data(), want[c].size() * sizeof(float)))
            << "core " << c << " n " << n << " " << algorithm_name(alg);
      }
    }
  }
}

}  // namespace
}  // namespace vtpu
