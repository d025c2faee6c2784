// Every collective other than all_reduce over groups that span processes gives the bits of one
// process, for every element type and size: all_gather (stacked and tiled), reduce_scatter,
// all_to_all, collective_permute, broadcast, reduce, barrier, and the *_start forms
// (tests/distributed/test_util.h has the groups and the comparison).
#include <gtest/gtest.h>

#include "tests/distributed/test_util.h"

namespace vtpu::distributed_test {
namespace {

using Dims = std::vector<int64_t>;

uint64_t seed_of(const std::string& name, int core) {
  return std::hash<std::string>{}(name)*131 + static_cast<uint64_t>(core);
}

uint64_t count_of(const Dims& d) {
  uint64_t n = 1;
  for (int64_t v : d) n *= static_cast<uint64_t>(v);
  return n;
}

// A case whose shape depends on the group size N (given to `shape`), with an output of
// `out_elements(N, input elements)` elements.
Case shaped_case(std::string name, DataType dtype, ReduceOp op, std::function<Dims(int)> shape,
                 std::function<uint64_t(int, uint64_t)> out_elements,
                 std::function<void(Communicator&, CoreContext&, std::span<const std::byte>,
                                    std::span<std::byte>, const Dims&)>
                     call) {
  return {name, [=](Communicator& comm, CoreContext& ctx) {
            const Dims dims = shape(comm.size());
            const uint64_t n = count_of(dims);
            const auto x = make_input(dtype, n, seed_of(name, ctx.core_id()), op);
            std::vector<std::byte> y(out_elements(comm.size(), n) * data_type_bytes(dtype));
            call(comm, ctx, x, y, dims);
            return y;
          }};
}

class SpanningCollectives : public ::testing::TestWithParam<Partition> {
 protected:
  void expect_same(const std::vector<Case>& cases) {
    auto dist = distributed::make_runtime(options());
    Runtime one(options());
    expect_same_as_one_process(*dist, one, GetParam(), cases);
  }
};

TEST_P(SpanningCollectives, AllGatherStackedAndTiled) {
  std::vector<Case> cases;
  for (DataType dt : kDtypes) {
    for (int64_t m : kCounts) {
      for (auto [axis, tiled, dims] : {std::tuple{0, false, Dims{m}}, std::tuple{1, false, Dims{m}},
                                       std::tuple{1, true, Dims{3, m}}}) {
        cases.push_back(shaped_case(
            case_name("all_gather(axis=" + std::to_string(axis) + (tiled ? ", tiled)" : ")"), dt,
                      m),
            dt, ReduceOp::kSum, [dims](int) { return dims; },
            [](int n, uint64_t e) { return e * static_cast<uint64_t>(n); },
            [dt, axis, tiled](Communicator& c, CoreContext& ctx, std::span<const std::byte> x,
                              std::span<std::byte> y, const Dims& d) {
              c.all_gather_bytes(ctx, dt, x, y, d, axis, tiled);
            }));
      }
    }
  }
  expect_same(cases);
}

TEST_P(SpanningCollectives, ReduceScatterEveryOp) {
  std::vector<Case> cases;
  for (DataType dt : kDtypes) {
    for (int64_t m : kCounts) {
      for (ReduceOp op : kOps) {
        // Tiled over a flat array of N * m, and (sum only) untiled over N x m.
        cases.push_back(shaped_case(
            case_name("reduce_scatter(" + std::string(reduce_op_name(op)) + ", tiled) N x", dt, m),
            dt, op, [m](int n) { return Dims{n * m}; },
            [](int n, uint64_t e) { return e / static_cast<uint64_t>(n); },
            [dt, op](Communicator& c, CoreContext& ctx, std::span<const std::byte> x,
                     std::span<std::byte> y,
                     const Dims& d) { c.reduce_scatter_bytes(ctx, dt, x, y, d, op, 0, true); }));
      }
      cases.push_back(shaped_case(
          case_name("reduce_scatter(sum, dimension 0 of N x)", dt, m), dt, ReduceOp::kSum,
          [m](int n) {
            return Dims{n, m};
          },
          [](int n, uint64_t e) { return e / static_cast<uint64_t>(n); },
          [dt](Communicator& c, CoreContext& ctx, std::span<const std::byte> x,
               std::span<std::byte> y, const Dims& d) {
            c.reduce_scatter_bytes(ctx, dt, x, y, d, ReduceOp::kSum, 0, false);
          }));
    }
  }
  expect_same(cases);
}

TEST_P(SpanningCollectives, AllToAll) {
  std::vector<Case> cases;
  for (DataType dt : kDtypes) {
    for (int64_t m : kCounts) {
      for (auto [split, concat] : {std::pair{0, 0}, std::pair{0, 1}}) {
        cases.push_back(shaped_case(
            case_name("all_to_all(split " + std::to_string(split) + ", concat " +
                          std::to_string(concat) + ") N x",
                      dt, m),
            dt, ReduceOp::kSum,
            [m, concat](int n) {
              return concat == 0 ? Dims{n * m} : Dims{n, m};
            },
            [](int, uint64_t e) { return e; },
            [dt, split, concat](Communicator& c, CoreContext& ctx, std::span<const std::byte> x,
                                std::span<std::byte> y, const Dims& d) {
              c.all_to_all_bytes(ctx, dt, x, y, d, split, concat);
            }));
      }
    }
  }
  expect_same(cases);
}

TEST_P(SpanningCollectives, CollectivePermuteBroadcastReduceBarrier) {
  std::vector<Case> cases;
  for (DataType dt : kDtypes) {
    for (int64_t m : kCounts) {
      const auto flat = [m](int) { return Dims{m}; };
      const auto same = [](int, uint64_t e) { return e; };
      // A shift round the ring, and one pair (the last rank receives rank 0's; others get zeros).
      for (bool shift : {true, false}) {
        cases.push_back(shaped_case(
            case_name(shift ? "collective_permute(shift)" : "collective_permute(0 -> N-1)", dt, m),
            dt, ReduceOp::kSum, flat, same,
            [dt, shift](Communicator& c, CoreContext& ctx, std::span<const std::byte> x,
                        std::span<std::byte> y, const Dims& d) {
              std::vector<PermutePair> pairs;
              const int n = c.size();
              if (shift) {
                for (int r = 0; r < n; ++r) pairs.push_back({r, (r + 1) % n});
              } else {
                pairs.push_back({0, n - 1});
              }
              c.collective_permute_bytes(ctx, dt, x, y, d, pairs);
            }));
      }
      // Roots 0 and N-1 (in another process than rank 0 in every spanning group).
      for (bool last : {false, true}) {
        cases.push_back(
            shaped_case(case_name(last ? "broadcast(root N-1)" : "broadcast(root 0)", dt, m), dt,
                        ReduceOp::kSum, flat, same,
                        [dt, last](Communicator& c, CoreContext& ctx, std::span<const std::byte> x,
                                   std::span<std::byte> y, const Dims& d) {
                          c.broadcast_bytes(ctx, dt, x, y, d, last ? c.size() - 1 : 0);
                        }));
      }
      for (ReduceOp op : kOps) {
        cases.push_back(shaped_case(
            case_name("reduce(" + std::string(reduce_op_name(op)) + ", root N-1)", dt, m), dt, op,
            flat, same,
            [dt, op](Communicator& c, CoreContext& ctx, std::span<const std::byte> x,
                     std::span<std::byte> y, const Dims& d) {
              // recv is written on the root only; other ranks keep their zeros.
              c.reduce_bytes(ctx, dt, x, y, d, c.size() - 1, op);
            }));
      }
    }
  }
  cases.push_back({"barrier", [](Communicator& c, CoreContext& ctx) {
                     for (int i = 0; i < 3; ++i) c.barrier(ctx);
                     return std::vector<std::byte>{};
                   }});
  expect_same(cases);
}

// The *_start forms run on each core's communication worker while the program goes on; two are
// in flight at once (the second queued behind the first), and wait() returns their results.
template <typename T>
std::vector<std::byte> async_round(Communicator& c, CoreContext& ctx, int64_t m, uint64_t seed) {
  const int n = c.size();
  const uint64_t um = static_cast<uint64_t>(m), un = static_cast<uint64_t>(n);
  const DataType dt = data_type_of<T>();
  const auto input = [&](uint64_t count, uint64_t s) {
    std::vector<T> v(count);
    const auto b = make_input(dt, count, s);
    if (count) std::memcpy(v.data(), b.data(), b.size());
    return v;
  };
  const std::vector<T> x = input(um * un, seed);
  std::vector<T> ar(x.size()), ag(x.size() * un), rs(um), a2a(x.size()), cp(x.size()), bc(x.size()),
      rd(x.size());
  const Dims d{static_cast<int64_t>(x.size())};
  std::vector<PermutePair> shift;
  for (int r = 0; r < n; ++r) shift.push_back({r, (r + 1) % n});
  const std::span<const T> xs(x);
  {
    CollectiveHandle h1 = c.all_reduce_start<T>(ctx, xs, std::span<T>(ar));
    CollectiveHandle h2 = c.all_gather_start<T>(ctx, xs, std::span<T>(ag), d);
    h2.wait();
    h1.wait();
  }
  c.reduce_scatter_start<T>(ctx, xs, std::span<T>(rs), d, ReduceOp::kSum, 0, true).wait();
  c.all_to_all_start<T>(ctx, xs, std::span<T>(a2a), d, 0, 0).wait();
  c.collective_permute_start<T>(ctx, xs, std::span<T>(cp), shift).wait();
  c.broadcast_start<T>(ctx, xs, std::span<T>(bc), n - 1).wait();
  c.reduce_start<T>(ctx, xs, std::span<T>(rd), 0, ReduceOp::kSum).wait();
  c.barrier_start(ctx).wait();
  std::vector<std::byte> out;
  for (const std::vector<T>* v : {&ar, &ag, &rs, &a2a, &cp, &bc, &rd}) {
    const auto b = std::as_bytes(std::span<const T>(*v));
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

TEST_P(SpanningCollectives, StartFormsMatchOneProcess) {
  std::vector<Case> cases;
  for (DataType dt : kDtypes) {
    for (int64_t m : {int64_t{0}, int64_t{7}, int64_t{1001}}) {
      const std::string name = case_name("every *_start form", dt, m);
      cases.push_back({name, [dt, m, name](Communicator& c, CoreContext& ctx) {
                         return visit_data_type(dt, [&](auto tag) {
                           using T = typename decltype(tag)::type;
                           return async_round<T>(c, ctx, m, seed_of(name, ctx.core_id()));
                         });
                       }});
    }
  }
  expect_same(cases);
}

INSTANTIATE_TEST_SUITE_P(Groups, SpanningCollectives, ::testing::ValuesIn(partitions()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace vtpu::distributed_test
