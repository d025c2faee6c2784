// The hierarchical all-reduce in one process, with the ranks placed in simulated processes
// (CommunicatorOptions::simulated_process_of_rank): results must be bit-identical to a
// rank-order fold computed here (float arithmetic, bf16 and f16 widened to f32 and rounded back
// after every step, integers wrapped modulo 2^bits) and to the other deterministic algorithms,
// for 2 and 4 processes of 1, 2 and 4 ranks, every element type and op, in and out of place.
// Groups list cores in reverse, so that ranks are not core ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tests/collectives/test_util.h"
#include "tests/expect_error.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using testing::expect_error;
using testing_util::from_double;
using testing_util::mix;
using testing_util::naive_combine;
using testing_util::small_options;

constexpr std::array<ReduceOp, 4> kOps = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin,
                                          ReduceOp::kProd};

// ---- the reference and inputs ----------------------------------------------------------------

template <typename T>
constexpr bool kNarrow = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

template <typename T>
T reference_op(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (op == ReduceOp::kSum) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if (op == ReduceOp::kProd) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    return naive_combine(a, b, op);
  } else if constexpr (kNarrow<T>) {
    const auto wide = [](T v) { return static_cast<float>(testing_util::to_double(v)); };
    return from_double<T>(naive_combine(wide(a), wide(b), op));
  } else {
    return naive_combine(a, b, op);
  }
}

// Integers over the whole range (sums and products wrap); floats that round at every step, and
// factors near 1 for products.
template <typename T>
std::vector<std::vector<T>> make_inputs(int n, uint64_t count, ReduceOp op, uint64_t salt) {
  std::vector<std::vector<T>> in(static_cast<size_t>(n), std::vector<T>(count));
  for (int r = 0; r < n; ++r) {
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t h = mix(salt * 0x100000001b3ull ^ (static_cast<uint64_t>(r) << 40) ^ i);
      const double f = static_cast<double>(h >> 11) / static_cast<double>(uint64_t{1} << 53);
      T& x = in[static_cast<size_t>(r)][i];
      if constexpr (std::is_integral_v<T>) {
        x = static_cast<T>(h);
      } else {
        x = from_double<T>(op == ReduceOp::kProd ? 0.6 + 0.8 * f : (f - 0.5) * (1 << (h % 12)));
      }
    }
  }
  return in;
}

template <typename T>
std::vector<T> rank_order_fold(const std::vector<std::vector<T>>& in, ReduceOp op) {
  return testing_util::fold_reference(in, op, &reference_op<T>);
}

template <typename T>
bool same_bits(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

// ---- a group in simulated processes ----------------------------------------------------------

std::vector<int> placement(int processes, int per_process) {
  std::vector<int> p;
  for (int k = 0; k < processes; ++k) p.insert(p.end(), static_cast<size_t>(per_process), k);
  return p;
}

std::vector<int> reversed(int n) {
  std::vector<int> g(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) g[static_cast<size_t>(r)] = n - 1 - r;
  return g;
}

CommunicatorOptions options_for(const Runtime& rt, std::vector<int> process_of_rank) {
  CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
  o.simulated_process_of_rank = std::move(process_of_rank);
  return o;
}

// Runs one all_reduce of `in` (one vector per rank) with `alg` on every core and returns each
// rank's output; every other rank passes a garbage-filled output, or runs in place.
template <typename T>
std::vector<std::vector<T>> all_reduce(Runtime& rt, Communicator& comm,
                                       const std::vector<std::vector<T>>& in, ReduceOp op,
                                       Algorithm alg, bool in_place) {
  std::vector<std::vector<T>> out(in.size());
  rt.run_spmd([&](CoreContext& ctx) {
    const int rank = comm.rank_of(ctx.core_id());
    std::vector<T> send = in[static_cast<size_t>(rank)];
    std::vector<T> recv(send.size());
    if (!recv.empty()) std::memset(static_cast<void*>(recv.data()), 0xa5, recv.size() * sizeof(T));
    std::span<T> dst = in_place ? std::span<T>(send) : std::span<T>(recv);
    comm.all_reduce<T>(ctx, std::span<const T>(send), dst, op, {alg});
    out[static_cast<size_t>(rank)].assign(dst.begin(), dst.end());
  });
  return out;
}

// ---- sweep: processes x ranks per process x sizes ---------------------------------------------

// 1 process (no chain: a local fold written to every output), 2 and 4. Slots of 256 B x 2 (64
// floats a piece): 100 and 4099 elements leave partial pieces and parts of different lengths; 0
// sends one empty piece per lane.
class HierarchicalSweep : public ::testing::TestWithParam<std::tuple<int, int, uint64_t>> {};

TEST_P(HierarchicalSweep, MatchesTheRankOrderFoldAndTheRingBitForBit) {
  const auto [processes, per_process, count] = GetParam();
  const int n = processes * per_process;
  Runtime rt(small_options(n));
  Communicator comm(rt, reversed(n), options_for(rt, placement(processes, per_process)));
  const auto in = make_inputs<float>(n, count, ReduceOp::kSum, count + 7);
  const std::vector<float> expected = rank_order_fold(in, ReduceOp::kSum);
  const auto ring = all_reduce(rt, comm, in, ReduceOp::kSum, Algorithm::kRing, false);
  for (bool in_place : {false, true}) {
    const auto out = all_reduce(rt, comm, in, ReduceOp::kSum, Algorithm::kHierarchical, in_place);
    for (int r = 0; r < n; ++r) {
      const auto& o = out[static_cast<size_t>(r)];
      EXPECT_TRUE(same_bits<float>(o, expected)) << "rank " << r << (in_place ? " in place" : "");
      EXPECT_TRUE(same_bits<float>(o, ring[static_cast<size_t>(r)])) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ProcessesRanksSizes, HierarchicalSweep,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(1, 2, 4),
                                            ::testing::Values(uint64_t{0}, uint64_t{1},
                                                              uint64_t{100}, uint64_t{4099})),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "processes_" +
                                  std::to_string(std::get<1>(info.param)) + "each_" +
                                  std::to_string(std::get<2>(info.param)) + "elems";
                         });

// ---- every element type and op ----------------------------------------------------------------

// 2 processes of 2 ranks and 4 of 1, 4500 elements (several fold tiles, partial pieces), every op,
// alternately in place: the fold computed here, and every deterministic algorithm's bits.
template <typename T>
void check_every_op(int processes, int per_process) {
  const int n = processes * per_process;
  Runtime rt(small_options(n));
  Communicator comm(rt, reversed(n), options_for(rt, placement(processes, per_process)));
  uint64_t salt = 1;
  for (ReduceOp op : kOps) {
    const auto in = make_inputs<T>(n, 4500, op, ++salt);
    const std::vector<T> expected = rank_order_fold(in, op);
    const auto out = all_reduce(rt, comm, in, op, Algorithm::kHierarchical, salt % 2 == 0);
    const std::string what = std::string(data_type_name(data_type_of<T>())) + " " +
                             std::string(reduce_op_name(op)) + " on " + std::to_string(processes) +
                             "x" + std::to_string(per_process);
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(same_bits<T>(out[static_cast<size_t>(r)], expected)) << what << " rank " << r;
    for (Algorithm alg : {Algorithm::kRing, Algorithm::kBidirectionalRing,
                          Algorithm::kRecursiveDoubling, Algorithm::kTorus2d, Algorithm::kDirect}) {
      const auto other = all_reduce(rt, comm, in, op, alg, false);
      EXPECT_TRUE(same_bits<T>(other[0], out[0])) << what << " against " << algorithm_name(alg);
    }
  }
}

template <typename T>
class HierarchicalTyped : public ::testing::Test {};
using ElementTypes = ::testing::Types<float, double, BFloat16, Float16, int32_t, int64_t>;
TYPED_TEST_SUITE(HierarchicalTyped, ElementTypes);

TYPED_TEST(HierarchicalTyped, EveryOpIsTheRankOrderFold) {
  check_every_op<TypeParam>(2, 2);
  check_every_op<TypeParam>(4, 1);
}

// ---- placement, selection and errors ----------------------------------------------------------

TEST(HierarchicalAllReduceTest, AutoPicksItForGroupsAcrossProcessesAboveSmallMessages) {
  Runtime rt(small_options(8));
  Communicator across(rt, reversed(8), options_for(rt, placement(2, 4)));
  EXPECT_EQ(across.select_algorithm(1 << 20), Algorithm::kHierarchical);
  EXPECT_EQ(across.select_algorithm(1024), Algorithm::kRecursiveDoubling);
  Communicator one_process(rt, reversed(8), options_for(rt, placement(1, 8)));
  EXPECT_EQ(one_process.select_algorithm(1 << 20), Algorithm::kDirect);
  // A placement that does not fit: auto falls back.
  Communicator mixed(rt, reversed(8), options_for(rt, {0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(mixed.select_algorithm(1 << 20), Algorithm::kDirect);
  // Without direct access inside a process it cannot run; with one rank per process it needs none.
  CommunicatorOptions slots = options_for(rt, placement(2, 4));
  slots.transport = std::make_shared<testing_util::SlotOnlyTransport>();
  EXPECT_EQ(Communicator(rt, reversed(8), slots).select_algorithm(1 << 20), Algorithm::kRing);
  slots.simulated_process_of_rank = placement(8, 1);
  EXPECT_EQ(Communicator(rt, reversed(8), slots).select_algorithm(1 << 20),
            Algorithm::kHierarchical);
}

TEST(HierarchicalAllReduceTest, AutoRunsItAndGivesTheFold) {
  Runtime rt(small_options(4));
  Communicator comm(rt, reversed(4), options_for(rt, placement(2, 2)));
  const auto in =
      make_inputs<float>(4, 5000, ReduceOp::kSum, 3);  // 20 KB: above recursive doubling
  const auto out = all_reduce(rt, comm, in, ReduceOp::kSum, Algorithm::kAuto, true);
  const std::vector<float> expected = rank_order_fold(in, ReduceOp::kSum);
  for (const auto& o : out) EXPECT_TRUE(same_bits<float>(o, expected));
}

TEST(HierarchicalAllReduceTest, NameParsesAndRuntimeOptionsSelectIt) {
  EXPECT_EQ(algorithm_name(Algorithm::kHierarchical), "hierarchical");
  EXPECT_EQ(parse_algorithm("hierarchical"), Algorithm::kHierarchical);
  RuntimeOptions ro = small_options(2);
  ro.collective_algorithm = "hierarchical";
  ro.validate();
  EXPECT_EQ(CommunicatorOptions::from_runtime(ro).algorithm, Algorithm::kHierarchical);
}

// Asked for explicitly, a placement that does not fit is an error on every rank, naming it.
TEST(HierarchicalAllReduceTest, PlacementThatDoesNotFitIsRejectedNamingIt) {
  Runtime rt(small_options(4));
  struct Case {
    std::vector<int> process_of_rank;
    std::vector<std::string> named;
  };
  for (const Case& c :
       {Case{{0, 1, 0, 1}, {"[0,1,0,1]", "process 0"}}, Case{{0, 0, 0, 1}, {"[0,0,0,1]", "3", "1"}},
        Case{{3, 3, 5, 9}, {"[3,3,5,9]", "2"}}}) {
    Communicator comm(rt, reversed(4), options_for(rt, c.process_of_rank));
    std::vector<std::string> errors(4);
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> v(10, 1.0f);
      errors[static_cast<size_t>(ctx.core_id())] =
          expect_error(ErrorCode::kInvalidArgument,
                       [&] {
                         comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum,
                                                {Algorithm::kHierarchical});
                       },
                       {});
    });
    for (const std::string& e : errors)
      for (const std::string& v : c.named) EXPECT_NE(e.find(v), std::string::npos) << e;
  }
}

TEST(HierarchicalAllReduceTest, BadSimulatedPlacementIsRejected) {
  Runtime rt(small_options(4));
  expect_error(ErrorCode::kInvalidArgument,
               [&] {
                 Communicator(rt, reversed(4), options_for(rt, {0, 0, 1}));
               },
               {"3"});
  expect_error(ErrorCode::kInvalidArgument,
               [&] {
                 Communicator(rt, reversed(4), options_for(rt, {0, 0, -1, 1}));
               },
               {"-1"});
}

TEST(HierarchicalAllReduceTest, NeedsDirectAccessInsideAProcessUnlessOneRankEach) {
  Runtime rt(small_options(4));
  CommunicatorOptions o = options_for(rt, placement(2, 2));
  o.transport = std::make_shared<testing_util::SlotOnlyTransport>();
  Communicator pairs(rt, reversed(4), o);
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(10, 1.0f);
    expect_error(ErrorCode::kUnimplemented,
                 [&] {
                   pairs.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum,
                                           {Algorithm::kHierarchical});
                 },
                 {"hierarchical", "slot_only"});
  });
  o.simulated_process_of_rank = placement(4, 1);
  Communicator singles(rt, reversed(4), o);
  const auto in = make_inputs<double>(4, 777, ReduceOp::kSum, 5);
  const auto out = all_reduce(rt, singles, in, ReduceOp::kSum, Algorithm::kHierarchical, false);
  for (const auto& v : out) EXPECT_TRUE(same_bits<double>(v, rank_order_fold(in, ReduceOp::kSum)));
}

// A rank that passes a different shape fails every rank with InvalidArgumentError naming the
// hierarchical all_reduce, whether the odd rank is met first inside its process (2 x 2) or
// across processes (4 x 1).
TEST(HierarchicalAllReduceTest, DesyncFailsOnEveryRank) {
  const CollectiveOptions hier{Algorithm::kHierarchical};
  for (int per_process : {2, 1}) {
    Runtime rt(small_options(4));
    Communicator comm(rt, reversed(4), options_for(rt, placement(4 / per_process, per_process)));
    for (int odd_rank : {0, 3}) {
      comm.reset();
      std::vector<std::string> errors(4);
      rt.run_spmd([&](CoreContext& ctx) {
        const int rank = comm.rank_of(ctx.core_id());
        std::vector<float> v(rank == odd_rank ? 11 : 10, 1.0f);
        errors[static_cast<size_t>(rank)] = expect_error(
            ErrorCode::kInvalidArgument,
            [&] { comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, hier); },
            {"f32[10]", "f32[11]", "via hierarchical"});
      });
      for (int r = 0; r < 4; ++r) {
        EXPECT_FALSE(errors[static_cast<size_t>(r)].empty())
            << per_process << " per process, odd rank " << odd_rank << ", rank " << r;
      }
    }
  }
}

// Back-to-back calls of different sizes, started asynchronously and mixed with another
// collective: each call's local exchange and final barrier keep its buffers apart from the next.
TEST(HierarchicalAllReduceTest, ConsecutiveAndStartedCallsStayCorrect) {
  Runtime rt(small_options(8));
  Communicator comm(rt, reversed(8), options_for(rt, placement(2, 4)));
  const CollectiveOptions hier{Algorithm::kHierarchical};
  rt.run_spmd([&](CoreContext& ctx) {
    const int rank = comm.rank_of(ctx.core_id());
    for (uint64_t count : {300u, 5u, 0u, 2049u}) {
      std::vector<int32_t> a(count, rank + 1), b(count, 2 * rank);
      CollectiveHandle h =
          comm.all_reduce_start<int32_t>(ctx, std::span<int32_t>(a), ReduceOp::kSum, hier);
      h.wait();
      comm.all_reduce<int32_t>(ctx, std::span<int32_t>(b), ReduceOp::kMax, hier);
      comm.barrier(ctx);
      for (int32_t x : a) ASSERT_EQ(x, 36);
      for (int32_t x : b) ASSERT_EQ(x, 14);
    }
  });
}

// Timing on simulated placement (run with --gtest_also_run_disabled_tests): median microseconds
// of an in-place f32 sum per algorithm, with the runtime's default links. In one process the
// "processes" share memory, so this compares the algorithms' local costs, not a network's.
TEST(HierarchicalAllReduceTest, DISABLED_TimingsOnSimulatedPlacement) {
  for (const auto& [processes, per_process] : {std::pair{2, 4}, std::pair{2, 1}, std::pair{4, 2}}) {
    const int n = processes * per_process;
    RuntimeOptions o;
    o.num_cores = n;
    o.hbm_bytes_per_core = 256ull << 20;
    Runtime rt(o);
    Communicator comm(rt, reversed(n), options_for(rt, placement(processes, per_process)));
    for (uint64_t bytes :
         {uint64_t{64} << 10, uint64_t{1} << 20, uint64_t{8} << 20, uint64_t{32} << 20}) {
      std::printf("%dx%d bytes=%-9llu", processes, per_process,
                  static_cast<unsigned long long>(bytes));
      for (Algorithm alg : {Algorithm::kRing, Algorithm::kDirect, Algorithm::kHierarchical}) {
        std::vector<double> us;
        rt.run_spmd([&](CoreContext& ctx) {
          std::vector<float> v(bytes / 4, 1.0f);
          for (int i = 0; i < 12; ++i) {
            comm.barrier(ctx);
            const auto t0 = std::chrono::steady_clock::now();
            comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {alg});
            const std::chrono::duration<double, std::micro> t =
                std::chrono::steady_clock::now() - t0;
            if (comm.rank_of(ctx.core_id()) == 0 && i > 1) us.push_back(t.count());
          }
        });
        std::sort(us.begin(), us.end());
        std::printf("  %s %.0f", std::string(algorithm_name(alg)).c_str(), us[us.size() / 2]);
      }
      std::printf("\n");
    }
  }
}

}  // namespace
}  // namespace vtpu
