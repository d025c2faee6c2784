// all_reduce over groups that span processes gives the bits of one process, for every algorithm,
// element type, op and size (tests/distributed/test_util.h has the groups and the comparison).
// kDirect needs direct access, which links between processes lack: it is refused on every core
// with Unimplemented before any message moves, and the communicator stays usable. kHierarchical
// (tested apart) needs each process's ranks in one run.
#include <gtest/gtest.h>

#include "tests/distributed/test_util.h"
#include "vtpu/common/error.h"

namespace vtpu::distributed_test {
namespace {

constexpr std::array<Algorithm, 6> kAlgorithms = {Algorithm::kAuto,
                                                  Algorithm::kRing,
                                                  Algorithm::kBidirectionalRing,
                                                  Algorithm::kRecursiveDoubling,
                                                  Algorithm::kTorus2d,
                                                  Algorithm::kRingReduceScatter};

Case all_reduce_case(Algorithm alg, DataType dtype, ReduceOp op, int64_t count, bool in_place) {
  const uint64_t seed = (static_cast<uint64_t>(alg) << 16) ^ (static_cast<uint64_t>(dtype) << 8) ^
                        (static_cast<uint64_t>(op) << 4) ^ static_cast<uint64_t>(count);
  std::string name =
      case_name(std::string("all_reduce(") + std::string(reduce_op_name(op)) + ", " +
                    std::string(algorithm_name(alg)) + (in_place ? ", in place)" : ")"),
                dtype, count);
  return {std::move(name), [=](Communicator& comm, CoreContext& ctx) {
            std::vector<std::byte> x =
                make_input(dtype, static_cast<uint64_t>(count), seed * 131 + ctx.core_id(), op);
            std::vector<std::byte> y(in_place ? 0 : x.size());
            std::span<std::byte> out = in_place ? std::span<std::byte>(x) : std::span<std::byte>(y);
            CollectiveOptions co;
            co.algorithm = alg;
            comm.all_reduce_bytes(ctx, dtype, x, out, std::span<const int64_t>(&count, 1), op, co);
            return in_place ? x : y;
          }};
}

class SpanningAllReduce : public ::testing::TestWithParam<Partition> {};

TEST_P(SpanningAllReduce, EveryAlgorithmTypeAndSizeMatchesOneProcess) {
  auto dist = distributed::make_runtime(options());
  Runtime one(options());
  std::vector<Case> cases;
  for (Algorithm alg : kAlgorithms) {
    for (DataType dtype : kDtypes) {
      for (int64_t count : kCounts) {
        cases.push_back(all_reduce_case(alg, dtype, ReduceOp::kSum, count, count % 2 == 1));
      }
    }
  }
  expect_same_as_one_process(*dist, one, GetParam(), cases);
}

TEST_P(SpanningAllReduce, EveryOpMatchesOneProcess) {
  auto dist = distributed::make_runtime(options());
  Runtime one(options());
  std::vector<Case> cases;
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    for (Algorithm alg : kAlgorithms) {
      for (DataType dtype : kDtypes) {
        for (int64_t count : kCounts) {
          cases.push_back(all_reduce_case(alg, dtype, op, count, false));
        }
      }
    }
  }
  expect_same_as_one_process(*dist, one, GetParam(), cases);
}

// True when the group's ranks sit in processes as the hierarchical all-reduce needs: one
// contiguous run of ranks per process, every run of the same length.
bool runs_per_process(const Runtime& rt, const std::vector<int>& group) {
  std::vector<int> run_lengths;
  std::vector<int> seen;
  for (size_t i = 0; i < group.size(); ++i) {
    const int p = rt.process_of(group[i]);
    if (i > 0 && p == rt.process_of(group[i - 1])) {
      ++run_lengths.back();
      continue;
    }
    for (int q : seen) {
      if (q == p) return false;  // a second run of the same process
    }
    seen.push_back(p);
    run_lengths.push_back(1);
  }
  for (int len : run_lengths) {
    if (len != run_lengths[0]) return false;
  }
  return true;
}

// kHierarchical gives the bits of one process where the placement fits; where it does not (ranks
// interleaved across processes), every core of the group gets InvalidArgument before any message
// moves, and the group stays usable.
TEST_P(SpanningAllReduce, HierarchicalMatchesOneProcessOrIsRefused) {
  auto dist = distributed::make_runtime(options());
  const Partition& p = GetParam();
  bool fits = true;
  for (const auto& g : p.groups) fits = fits && runs_per_process(*dist, g);
  if (fits) {
    Runtime one(options());
    std::vector<Case> cases;
    for (ReduceOp op : kOps) {
      for (DataType dtype : kDtypes) {
        for (int64_t count : kCounts) {
          cases.push_back(all_reduce_case(Algorithm::kHierarchical, dtype, op, count, count == 7));
        }
      }
    }
    expect_same_as_one_process(*dist, one, p, cases);
    return;
  }
  auto comms = Communicator::for_groups(*dist, p.groups);
  std::vector<std::string> codes(kCores);
  dist->run_spmd([&](CoreContext& ctx) {
    for (auto& comm : comms) {
      bool member = false;
      for (int c : comm->group()) member |= c == ctx.core_id();
      if (!member) continue;
      std::vector<float> x(100, 1.0f);
      CollectiveOptions co;
      co.algorithm = Algorithm::kHierarchical;
      try {
        comm->all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum, co);
        codes[ctx.core_id()] = "OK";
      } catch (const Error& e) {
        codes[ctx.core_id()] = std::string(error_code_name(e.code()));
      }
      comm->all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum);
    }
  });
  for (int c : dist->local_core_ids())
    EXPECT_EQ(codes[c], "InvalidArgument") << p.name << " core " << c;
}

INSTANTIATE_TEST_SUITE_P(Groups, SpanningAllReduce, ::testing::ValuesIn(partitions()),
                         [](const auto& info) { return info.param.name; });

// kDirect reads peers' buffers in place; across processes there is no such access, so every core
// of a spanning group gets Unimplemented (before the collective is sequenced: the group is not
// aborted), and the next all_reduce on the same communicator works. Groups inside one process of
// the distributed runtime still run kDirect.
TEST(SpanningAllReduceDirect, RefusedAcrossProcessesWithUnimplemented) {
  auto dist = distributed::make_runtime(options());
  for (const Partition& p : partitions()) {
    auto comms = Communicator::for_groups(*dist, p.groups);
    std::vector<int> codes(kCores, -1);
    std::vector<int> spans(kCores, 0);
    std::vector<float> after(kCores, 0.0f), want_after(kCores, 0.0f);
    dist->run_spmd([&](CoreContext& ctx) {
      for (auto& comm : comms) {
        bool member = false;
        for (int c : comm->group()) member |= c == ctx.core_id();
        if (!member) continue;
        float sum = 0.0f;  // small integers: exact in any order
        for (int c : comm->group()) {
          spans[ctx.core_id()] |= dist->process_of(c) != dist->process_index();
          sum += 1.0f + static_cast<float>(c);
        }
        // Refused: the second all_reduce sums the inputs; run in process: it sums the sums.
        want_after[ctx.core_id()] =
            spans[ctx.core_id()] ? sum : sum * static_cast<float>(comm->size());
        std::vector<float> x(100, 1.0f + static_cast<float>(ctx.core_id()));
        CollectiveOptions co;
        co.algorithm = Algorithm::kDirect;
        try {
          comm->all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum, co);
          codes[ctx.core_id()] = 0;
        } catch (const Error& e) {
          codes[ctx.core_id()] = static_cast<int>(e.code()) + 1;
        }
        comm->all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum);
        after[ctx.core_id()] = x[99];
      }
    });
    for (int c : dist->local_core_ids()) {
      const int want = spans[c] ? static_cast<int>(ErrorCode::kUnimplemented) + 1 : 0;
      EXPECT_EQ(codes[c], want) << p.name << " core " << c;
      EXPECT_EQ(after[c], want_after[c]) << p.name << " core " << c;
    }
  }
}

}  // namespace
}  // namespace vtpu::distributed_test
