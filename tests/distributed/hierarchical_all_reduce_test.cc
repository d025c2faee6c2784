// The hierarchical all-reduce across real processes (run_mpi.sh: -np 2 and -np 4, 8 cores in
// all): groups of every core (L = 8 / np ranks per process, direct access inside, MPI links
// between) and of one core per process (L = 1), every element type and op, in and out of place,
// each compared bit for bit with the ring on a one-process runtime of the same cores in this
// process. A placement that does not fit is rejected naming it, and auto then falls back.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/collectives/test_util.h"
#include "tests/expect_error.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/collectives/hierarchical_all_reduce.h"
#include "vtpu/common/error.h"
#include "vtpu/distributed/distributed.h"

namespace vtpu {
namespace {

constexpr int kCores = 8;

// 1 KiB x 2 slots: a few thousand elements cross several pieces per lane.
RuntimeOptions options() {
  RuntimeOptions o = testing_util::small_options(kCores, 1024, 2);
  o.hbm_bytes_per_core = uint64_t{1} << 26;
  return o;
}

// The same inputs in every process: integers over the whole range, floats that round at every
// step, factors near 1 for products.
template <typename T>
T input(int rank, uint64_t i, ReduceOp op) {
  const uint64_t h = testing_util::mix((static_cast<uint64_t>(rank) << 40) ^ i);
  if constexpr (std::is_integral_v<T>) return static_cast<T>(h);
  const double f = static_cast<double>(h >> 11) / static_cast<double>(uint64_t{1} << 53);
  return testing_util::from_double<T>(op == ReduceOp::kProd ? 0.6 + 0.8 * f : f - 0.5);
}

// Each local rank's output of one all_reduce over `group` (other ranks' stay empty).
template <typename T>
std::vector<std::vector<T>> run(Runtime& rt, const std::vector<int>& group, uint64_t count,
                                ReduceOp op, Algorithm alg, bool in_place) {
  Communicator comm(rt, group);
  std::vector<std::vector<T>> out(group.size());
  std::vector<int> cores;
  for (int c : group)
    if (rt.is_local(c)) cores.push_back(c);
  if (cores.empty()) return out;  // a process outside the group
  rt.run_spmd(cores, [&](CoreContext& ctx) {
    const int rank = comm.rank_of(ctx.core_id());
    std::vector<T> send(count), recv(count);
    for (uint64_t i = 0; i < count; ++i) send[i] = input<T>(rank, i, op);
    std::span<T> dst = in_place ? std::span<T>(send) : std::span<T>(recv);
    comm.all_reduce<T>(ctx, std::span<const T>(send), dst, op, {alg});
    out[static_cast<size_t>(rank)].assign(dst.begin(), dst.end());
  });
  return out;
}

// Core ids of one core per process (the first of each), and of every core with the processes
// interleaved ({0, K, 2K, ..., 1, K+1, ...}: a placement that does not fit).
std::vector<int> one_per_process(const Runtime& rt) {
  std::vector<int> g;
  for (int c = 0; c < kCores; c += rt.local_num_cores()) g.push_back(c);
  return g;
}
std::vector<int> interleaved(const Runtime& rt) {
  std::vector<int> g;
  for (int j = 0; j < rt.local_num_cores(); ++j)
    for (int c = j; c < kCores; c += rt.local_num_cores()) g.push_back(c);
  return g;
}

template <typename T>
void expect_same_bits(const std::vector<std::vector<T>>& got,
                      const std::vector<std::vector<T>>& want, const std::string& what) {
  for (size_t r = 0; r < got.size(); ++r) {
    if (got[r].empty() && !want[r].empty()) continue;  // a rank of another process
    ASSERT_EQ(got[r].size(), want[r].size()) << what << " rank " << r;
    EXPECT_TRUE(got[r].empty() ||
                std::memcmp(got[r].data(), want[r].data(), got[r].size() * sizeof(T)) == 0)
        << what << " rank " << r;
  }
}

template <typename T>
class HierarchicalMpiTyped : public ::testing::Test {};
using ElementTypes = ::testing::Types<float, double, BFloat16, Float16, int32_t, int64_t>;
TYPED_TEST_SUITE(HierarchicalMpiTyped, ElementTypes);

TYPED_TEST(HierarchicalMpiTyped, EveryOpMatchesTheRingInOneProcess) {
  using T = TypeParam;
  auto dist = distributed::make_runtime(options());
  Runtime one(options());
  bool in_place = false;
  for (const std::vector<int>& group : {testing_util::iota_group(kCores), one_per_process(*dist)}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
      in_place = !in_place;
      const std::string what =
          std::string(reduce_op_name(op)) + " on " + std::to_string(group.size()) + " cores";
      expect_same_bits(run<T>(*dist, group, 2500, op, Algorithm::kHierarchical, in_place),
                       run<T>(one, group, 2500, op, Algorithm::kRing, false), what);
    }
  }
}

TEST(HierarchicalMpiTest, AutoPicksItAndEverySizeMatches) {
  auto dist = distributed::make_runtime(options());
  Runtime one(options());
  const std::vector<int> all = testing_util::iota_group(kCores);
  EXPECT_EQ(Communicator(*dist, all).select_algorithm(1 << 20), Algorithm::kHierarchical);
  EXPECT_EQ(Communicator(*dist, one_per_process(*dist)).select_algorithm(1 << 20),
            Algorithm::kHierarchical);
  for (uint64_t count : {0u, 1u, 1000u, 300000u}) {
    for (Algorithm alg : {Algorithm::kAuto, Algorithm::kHierarchical}) {
      expect_same_bits(run<float>(*dist, all, count, ReduceOp::kSum, alg, count % 2 == 0),
                       run<float>(one, all, count, ReduceOp::kSum, Algorithm::kRing, false),
                       std::to_string(count) + " elements via " + std::string(algorithm_name(alg)));
    }
  }
}

TEST(HierarchicalMpiTest, PlacementThatDoesNotFitIsRejectedAndAutoFallsBack) {
  auto dist = distributed::make_runtime(options());
  Runtime one(options());
  const std::vector<int> group = interleaved(*dist);
  Communicator comm(*dist, group);
  EXPECT_EQ(comm.select_algorithm(1 << 20), Algorithm::kRing);
  dist->run_spmd(dist->local_core_ids(), [&](CoreContext& ctx) {
    std::vector<float> v(10, 1.0f);
    testing::expect_error(ErrorCode::kInvalidArgument,
                          [&] {
                            comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum,
                                                   {Algorithm::kHierarchical});
                          },
                          {"[0,1,"});
  });
  expect_same_bits(run<float>(*dist, group, 3000, ReduceOp::kSum, Algorithm::kAuto, false),
                   run<float>(one, group, 3000, ReduceOp::kSum, Algorithm::kRing, false), "auto");
}

// The first core of processes 0 and 1: two processes of one rank (the buffer path).
std::vector<int> first_two_processes(const Runtime& rt) { return {0, rt.local_num_cores()}; }

// Two processes of one rank move a call of at least kBufferTransferMinBytes by buffer transfers:
// at the threshold, at odd lengths of several MiB (pieces of unequal halves, a short last
// piece), in and out of place, every element type: the bits of the ring in one process.
TYPED_TEST(HierarchicalMpiTyped, TwoProcessesMoveLargeBuffersBitForBit) {
  using T = TypeParam;
  auto dist = distributed::make_runtime(options());
  Runtime one(options());
  const std::vector<int> group = first_two_processes(*dist);
  const uint64_t at_threshold = detail::kBufferTransferMinBytes / sizeof(T);
  // Each half three whole pieces and an odd tail: enough for every piece boundary and the staging
  // buffer's growth; larger counts only slow the test down on a loaded machine.
  const uint64_t pieces_and_tail = 6 * detail::kBufferPieceBytes / sizeof(T) + 4099;
  int call = 0;
  for (uint64_t count : {at_threshold, at_threshold + 1, pieces_and_tail}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      const bool in_place = ++call % 2 == 0;
      const std::string what = std::to_string(count) + " elements " +
                               std::string(reduce_op_name(op)) +
                               (in_place ? " in place" : " out of place");
      expect_same_bits(run<T>(*dist, group, count, op, Algorithm::kAuto, in_place),
                       run<T>(one, group, count, op, Algorithm::kRing, false), what);
    }
  }
}

// On the buffer path a shape that differs fails both ranks at the handshake, before any buffer
// moves: InvalidArgumentError naming the other shape, with the fingerprint check or without it
// (shapes are compared on every message), or AbortedError when the other rank's failure notice
// comes first. A runtime per case: a late notice reaches only its own.
TEST(HierarchicalMpiTest, TwoProcessesDesyncOnTheBufferPathFailsBoth) {
  const uint64_t count = detail::kBufferTransferMinBytes;  // floats: 4x the threshold
  for (bool check : {true, false}) {
    auto dist = distributed::make_runtime(options());
    const std::vector<int> group = first_two_processes(*dist);
    CommunicatorOptions co = CommunicatorOptions::from_runtime(options());
    co.desync_check = check;
    Communicator comm(*dist, group, co);
    dist->process_group().barrier();
    if (dist->process_index() < 2) {
      dist->run_spmd({group[static_cast<size_t>(dist->process_index())]}, [&](CoreContext& ctx) {
        const bool first = ctx.core_id() == 0;
        std::vector<float> v(first ? count : count + 2, 1.0f);
        const std::string other_shape = std::to_string(first ? count + 2 : count);
        try {
          comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum,
                                 {Algorithm::kHierarchical});
          ADD_FAILURE() << "core " << ctx.core_id() << " did not fail";
        } catch (const Error& e) {
          if (e.code() == ErrorCode::kAborted) return;
          EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
          EXPECT_NE(e.message().find(other_shape), std::string::npos) << e.what();
        }
      });
    }
    dist->process_group().barrier();
  }
}

// A rank that throws between two large all-reduces of two processes of one rank: the other
// rank, waiting in the next call, fails with AbortedError naming the core and its error, far
// within the 20 s timeout (nothing of the buffer path outlives the abort).
TEST(HierarchicalMpiTest, TwoProcessesThrowBetweenLargeCallsFailsThePeerFast) {
  auto dist = distributed::make_runtime(options());
  const std::vector<int> group = first_two_processes(*dist);
  Communicator comm(*dist, group);
  dist->process_group().barrier();
  if (dist->process_index() < 2) {
    const int core = group[static_cast<size_t>(dist->process_index())];
    std::chrono::steady_clock::time_point entered;
    try {
      dist->run_spmd({core}, [&](CoreContext& ctx) {
        std::vector<float> v(uint64_t{1} << 20, 1.0f);  // 4 MiB
        for (int step = 0; step < 10; ++step) {
          if (ctx.core_id() != 0 && step == 5) throw InvalidArgumentError("thrown at step 5");
          entered = std::chrono::steady_clock::now();
          comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {});
        }
      });
      ADD_FAILURE() << "core " << core << " did not fail";
    } catch (const Error& e) {
      if (core == 0) {
        EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
        EXPECT_NE(e.message().find("thrown at step 5"), std::string::npos) << e.what();
        EXPECT_LT(std::chrono::steady_clock::now() - entered, std::chrono::seconds(2));
      }
    }
  }
  dist->process_group().barrier();
}

// Timing across processes (run with --gtest_also_run_disabled_tests): median microseconds of
// the slowest local core for an out-of-place f32 sum over every core, per algorithm, with the
// runtime's default links (1 MiB x 4 slots).
TEST(HierarchicalMpiTest, DISABLED_Timings) {
  RuntimeOptions o = options();
  o.link_slot_bytes = RuntimeOptions().link_slot_bytes;
  o.link_num_slots = RuntimeOptions().link_num_slots;
  o.hbm_bytes_per_core = uint64_t{1} << 28;
  auto dist = distributed::make_runtime(o);
  Communicator comm(*dist, testing_util::iota_group(kCores));
  for (uint64_t bytes = 64 << 10; bytes <= (32 << 20); bytes *= 8) {
    std::string row = std::to_string(bytes) + " B:";
    for (Algorithm alg : {Algorithm::kRing, Algorithm::kHierarchical}) {
      std::vector<std::vector<double>> all(kCores);
      dist->run_spmd(dist->local_core_ids(), [&](CoreContext& ctx) {
        std::vector<float> x(bytes / 4, 1.0f), y(bytes / 4);
        for (int i = 0; i < 12; ++i) {
          comm.barrier(ctx);
          const auto t0 = std::chrono::steady_clock::now();
          comm.all_reduce<float>(ctx, x, y, ReduceOp::kSum, {alg});
          const std::chrono::duration<double, std::micro> t = std::chrono::steady_clock::now() - t0;
          if (i > 1) all[static_cast<size_t>(ctx.core_id())].push_back(t.count());
        }
      });
      std::vector<double> slowest(all[static_cast<size_t>(dist->first_local_core())].size(), 0);
      for (int c : dist->local_core_ids())
        for (size_t i = 0; i < slowest.size(); ++i)
          slowest[i] = std::max(slowest[i], all[static_cast<size_t>(c)][i]);
      std::sort(slowest.begin(), slowest.end());
      row += " " + std::string(algorithm_name(alg)) + " " +
             std::to_string(static_cast<int>(slowest[slowest.size() / 2]));
    }
    if (dist->process_index() == 0) std::printf("%s\n", row.c_str());
  }
}

// A rank that passes a different shape fails every rank of every process, within a few seconds
// (the timeout is 20 s): those that compare fingerprints with InvalidArgumentError, the others
// with the abort it causes. The processes meet at a barrier first, so that each has its
// communicator (and its abort handler) before the first failure notice can arrive. Last: a failed
// communicator across processes is not reused.
TEST(HierarchicalMpiTest, DesyncFailsEveryRankInEveryProcess) {
  auto dist = distributed::make_runtime(options());
  Communicator comm(*dist, testing_util::iota_group(kCores));
  dist->process_group().barrier();
  std::vector<int> failed(kCores, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ANY_THROW(dist->run_spmd(dist->local_core_ids(), [&](CoreContext& ctx) {
    std::vector<float> v(ctx.core_id() == kCores - 1 ? 11 : 10, 1.0f);
    try {
      comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {Algorithm::kHierarchical});
    } catch (const Error&) {
      failed[static_cast<size_t>(ctx.core_id())] = 1;
      throw;
    }
  }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (int c : dist->local_core_ids()) EXPECT_EQ(failed[static_cast<size_t>(c)], 1) << "core " << c;
}

}  // namespace
}  // namespace vtpu
