// Every collective for every element type (f32, f64, bf16, f16, s32, s64) on groups of 1, 3, 4
// and 8 cores, against a sequential reference written here: a left fold in rank order with
// float arithmetic (bf16 and f16 widened to f32 and rounded back after every step) and exact
// 128-bit integer arithmetic reduced modulo 2^bits, and naive index arithmetic for the data
// movement. Results must match bit for bit. The group lists the cores in reverse, so that ranks
// are not core ids.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tests/collectives/test_util.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/error.h"
#include "vtpu/common/float16.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {

// Names in failure messages instead of the enum's bytes (gtest looks PrintTo up in the enum's
// namespace).
void PrintTo(ElementType t, std::ostream* os) { *os << element_type_name(t); }

namespace {

using testing_util::from_double;
using testing_util::mix;
using testing_util::naive_combine;
using testing_util::num_elements;
using testing_util::ravel;
using testing_util::small_options;
using testing_util::unravel;
using Dims = std::vector<int64_t>;

constexpr std::array<ReduceOp, 4> kOps = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin,
                                          ReduceOp::kProd};
constexpr std::array<Algorithm, 7> kAllReduceAlgorithms = {Algorithm::kAuto,
                                                           Algorithm::kRing,
                                                           Algorithm::kBidirectionalRing,
                                                           Algorithm::kRecursiveDoubling,
                                                           Algorithm::kTorus2d,
                                                           Algorithm::kRingReduceScatter,
                                                           Algorithm::kDirect};

template <typename T>
constexpr bool kNarrow = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

// ---- the reference ---------------------------------------------------------------------------

// bf16 and f16 widen exactly to f32, where the reference computes.
template <typename T>
float widen(T v) {
  return static_cast<float>(testing_util::to_double(v));
}

// Two's complement wrap of an exact result: keep its low bits (C++20 defines the conversion of
// an out-of-range unsigned value to a signed type as modular).
template <typename T>
T wrap(__int128 exact) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<unsigned __int128>(exact)));
}

template <typename T>
T reference_op(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    const auto x = static_cast<__int128>(a);
    const auto y = static_cast<__int128>(b);
    switch (op) {
      case ReduceOp::kSum:
        return wrap<T>(x + y);
      case ReduceOp::kProd:
        return wrap<T>(x * y);
      case ReduceOp::kMax:
        return a < b ? b : a;
      case ReduceOp::kMin:
        return b < a ? b : a;
    }
    return a;
  } else if constexpr (kNarrow<T>) {
    return from_double<T>(naive_combine(widen(a), widen(b), op));  // f32 result: exact in double
  } else {
    return naive_combine(a, b, op);
  }
}

// The rank-order fold with the combine above.
template <typename T>
std::vector<T> fold_in_rank_order(const std::vector<std::vector<T>>& in, ReduceOp op) {
  return testing_util::fold_reference(in, op, &reference_op<T>);
}

// ---- inputs ----------------------------------------------------------------------------------

// Integers: the whole range, so sums and products wrap. Floats: values that round at every step,
// with large ones that overflow f16 (60000 + 60000) and tiny ones in its subnormal range;
// products near 1 with some that overflow or underflow f16. `exact`: small integers (sums) and
// +-1, +-2 (products), exact in every type in any order, for the algorithm whose fold order
// depends on the chunk.
template <typename T>
T input_value(int rank, uint64_t i, ReduceOp op, bool exact, uint64_t salt) {
  const uint64_t h = mix(salt * 0x100000001b3ull ^ (static_cast<uint64_t>(rank) << 40) ^ i);
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(h);
  } else {
    const double r = rank;
    double v = 0;
    if (exact) {
      constexpr std::array<double, 4> kFactors = {-2, -1, 1, 2};
      v = op == ReduceOp::kProd ? kFactors[h % 4] : static_cast<double>(h % 13) - 6;
    } else if (op == ReduceOp::kProd) {
      v = 0.5 + static_cast<double>((h >> 11) % 1000) / 1000;
      if (h % 5 == 0) v = -v;
      if (i % 29 == 0) v = 200 + r;
      if (i % 41 == 0) v = 0.01 * (r + 1);
    } else {
      v = (static_cast<double>((h >> 11) % 20001) - 10000) *
          std::ldexp(1.0, -static_cast<int>(h % 10));
      if (i % 31 == 0) v = 60000 + 16 * r;
      if (i % 37 == 0) v = 1e-6 * (r + 1);
    }
    return from_double<T>(v);
  }
}

template <typename T>
std::vector<std::vector<T>> make_inputs(int n, uint64_t count, ReduceOp op, bool exact,
                                        uint64_t salt) {
  std::vector<std::vector<T>> in(static_cast<size_t>(n), std::vector<T>(count));
  for (int r = 0; r < n; ++r)
    for (uint64_t i = 0; i < count; ++i)
      in[static_cast<size_t>(r)][i] = input_value<T>(r, i, op, exact, salt);
  return in;
}

// ---- checks ----------------------------------------------------------------------------------

template <typename T>
uint64_t bits_of(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

// Adds a failure naming the first element whose bits differ (and how many do); true if none.
template <typename T>
bool same_bits(std::span<const T> actual, const std::vector<T>& expected, const std::string& what) {
  if (actual.size() != expected.size()) {
    ADD_FAILURE() << what << ": " << actual.size() << " elements, expected " << expected.size();
    return false;
  }
  uint64_t wrong = 0, first = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (bits_of(actual[i]) != bits_of(expected[i]) && wrong++ == 0) first = i;
  }
  if (wrong == 0) return true;
  ADD_FAILURE() << what << ": " << wrong << " of " << expected.size()
                << " elements differ; first at " << first << ": bits 0x" << std::hex
                << bits_of(actual[first]) << ", expected 0x" << bits_of(expected[first]);
  return false;
}

// A filler that no collective writes, to see that every output element is written.
template <typename T>
std::vector<T> garbage(uint64_t count) {
  std::vector<T> v(count);
  if (count) std::memset(static_cast<void*>(v.data()), 0xa5, count * sizeof(T));
  return v;
}

std::string describe(std::initializer_list<std::string> parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : " ") + p;
  return s;
}

std::string dims_string(const Dims& d) {
  std::string s = "[";
  for (size_t k = 0; k < d.size(); ++k) s += (k ? "," : "") + std::to_string(d[k]);
  return s + "]";
}

// A group of n cores listed in reverse (rank r is core n-1-r) on a runtime of n cores, with
// 256 B x 2 link slots so that every payload here crosses several slots.
class Group {
 public:
  explicit Group(int n) : n_(n), rt_(options(n)), comm_(rt_, reversed(n)) {}
  int size() const { return n_; }
  Communicator& comm() { return comm_; }
  /// Runs fn(ctx, rank) on every core.
  template <typename Fn>
  void run(Fn&& fn) {
    rt_.run_spmd([&](CoreContext& ctx) { fn(ctx, comm_.rank_of(ctx.core_id())); });
  }

 private:
  static RuntimeOptions options(int n) {
    RuntimeOptions o = small_options(n);
    o.hbm_bytes_per_core = 16ull << 20;
    return o;
  }
  static std::vector<int> reversed(int n) {
    std::vector<int> g(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) g[static_cast<size_t>(r)] = n - 1 - r;
    return g;
  }
  int n_;
  Runtime rt_;
  Communicator comm_;
};

// all_reduce: every op with every algorithm; 4500 elements span several fold tiles (8 KiB) and
// leave a remainder for every group size. Every other call runs in place.
template <typename T>
void check_all_reduce(Group& g) {
  const uint64_t count = 4500;
  uint64_t salt = 1;
  for (ReduceOp op : kOps) {
    for (Algorithm alg : kAllReduceAlgorithms) {
      // The classic ring reduce-scatter folds in an order that depends on the chunk.
      const bool exact = !std::is_integral_v<T> && alg == Algorithm::kRingReduceScatter;
      const auto in = make_inputs<T>(g.size(), count, op, exact, ++salt);
      const std::vector<T> expected = fold_in_rank_order(in, op);
      const bool in_place = salt % 2 == 0;
      const std::string what =
          describe({"all_reduce", std::string(reduce_op_name(op)), std::string(algorithm_name(alg)),
                    in_place ? "in place" : "out of place"});
      g.run([&](CoreContext& ctx, int rank) {
        std::vector<T> send = in[static_cast<size_t>(rank)];
        std::vector<T> recv = garbage<T>(count);
        std::span<T> out = in_place ? std::span<T>(send) : std::span<T>(recv);
        g.comm().all_reduce<T>(ctx, std::span<const T>(send), out, op, {alg});
        same_bits<T>(out, expected, what + " rank " + std::to_string(rank));
      });
    }
  }
}

// all_gather: tiled along the first and last axis, stacked at the front, middle and back.
template <typename T>
void check_all_gather(Group& g) {
  const int n = g.size();
  const Dims shape = {6, 5, 7};
  const uint64_t count = num_elements(shape);
  const auto in = make_inputs<T>(n, count, ReduceOp::kSum, false, 11);
  struct Case {
    int axis;
    bool tiled;
  };
  for (const Case c :
       {Case{0, true}, Case{2, true}, Case{0, false}, Case{1, false}, Case{3, false}}) {
    Dims out_shape = shape;
    if (c.tiled) {
      out_shape[static_cast<size_t>(c.axis)] *= n;
    } else {
      out_shape.insert(out_shape.begin() + c.axis, n);
    }
    std::vector<T> expected(num_elements(out_shape));
    for (uint64_t f = 0; f < expected.size(); ++f) {
      Dims idx = unravel(f, out_shape);
      const auto a = static_cast<size_t>(c.axis);
      int64_t q = 0;
      if (c.tiled) {
        q = idx[a] / shape[a];
        idx[a] %= shape[a];
      } else {
        q = idx[a];
        idx.erase(idx.begin() + c.axis);
      }
      expected[f] = in[static_cast<size_t>(q)][ravel(idx, shape)];
    }
    const std::string what = describe({"all_gather axis", std::to_string(c.axis),
                                       c.tiled ? "tiled" : "stacked", dims_string(out_shape)});
    g.run([&](CoreContext& ctx, int rank) {
      std::vector<T> recv = garbage<T>(expected.size());
      g.comm().all_gather<T>(ctx, in[static_cast<size_t>(rank)], recv, shape, c.axis, c.tiled);
      same_bits<T>(recv, expected, what + " rank " + std::to_string(rank));
    });
  }
}

// reduce_scatter (psum_scatter): every op, tiled and untiled, on every scatter dimension.
template <typename T>
void check_reduce_scatter(Group& g) {
  const int64_t n = g.size();
  struct Case {
    ReduceOp op;
    Dims shape;
    int dim;
    bool tiled;
  };
  const std::vector<Case> cases = {
      {ReduceOp::kSum, {2 * n, 7, 3}, 0, true}, {ReduceOp::kProd, {3, 2 * n, 5}, 1, true},
      {ReduceOp::kMax, {4, 5, 3 * n}, 2, true}, {ReduceOp::kMin, {n, 11, 4}, 0, false},
      {ReduceOp::kSum, {5, 9, n}, 2, false},    {ReduceOp::kProd, {7, n, 3}, 1, false}};
  uint64_t salt = 20;
  for (const Case& c : cases) {
    const auto in = make_inputs<T>(g.size(), num_elements(c.shape), c.op, false, ++salt);
    const std::vector<T> folded = fold_in_rank_order(in, c.op);
    const auto d = static_cast<size_t>(c.dim);
    Dims out_shape = c.shape;
    if (c.tiled) {
      out_shape[d] /= n;
    } else {
      out_shape.erase(out_shape.begin() + c.dim);
    }
    std::vector<std::vector<T>> expected(static_cast<size_t>(n));
    for (int64_t q = 0; q < n; ++q) {
      for (uint64_t f = 0; f < num_elements(out_shape); ++f) {
        Dims idx = unravel(f, out_shape);
        if (c.tiled) {
          idx[d] += q * out_shape[d];
        } else {
          idx.insert(idx.begin() + c.dim, q);
        }
        expected[static_cast<size_t>(q)].push_back(folded[ravel(idx, c.shape)]);
      }
    }
    const std::string what =
        describe({"reduce_scatter", std::string(reduce_op_name(c.op)), dims_string(c.shape), "dim",
                  std::to_string(c.dim), c.tiled ? "tiled" : "untiled"});
    g.run([&](CoreContext& ctx, int rank) {
      const auto& want = expected[static_cast<size_t>(rank)];
      std::vector<T> recv = garbage<T>(want.size());
      g.comm().reduce_scatter<T>(ctx, in[static_cast<size_t>(rank)], recv, c.shape, c.op, c.dim,
                                 c.tiled);
      same_bits<T>(recv, want, what + " rank " + std::to_string(rank));
    });
  }
}

// all_to_all: rank r's output block q along concat_axis is block r along split_axis of rank q's
// input (lax.all_to_all), for distinct and equal axes.
template <typename T>
void check_all_to_all(Group& g) {
  const int64_t n = g.size();
  struct Case {
    Dims shape;
    int split;
    int concat;
  };
  const std::vector<Case> cases = {
      {{2 * n, 3, 5}, 0, 1}, {{4, 3, 2 * n}, 2, 0}, {{3, n, 2}, 1, 1}, {{n, 5}, 0, 1}};
  uint64_t salt = 40;
  for (const Case& c : cases) {
    const auto in = make_inputs<T>(g.size(), num_elements(c.shape), ReduceOp::kSum, false, ++salt);
    const auto s = static_cast<size_t>(c.split);
    const auto k = static_cast<size_t>(c.concat);
    const int64_t split_block = c.shape[s] / n;
    Dims out_shape = c.shape;
    out_shape[s] /= n;
    const int64_t concat_block = out_shape[k];
    out_shape[k] *= n;
    std::vector<std::vector<T>> expected(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      for (uint64_t f = 0; f < num_elements(out_shape); ++f) {
        Dims idx = unravel(f, out_shape);
        const int64_t q = idx[k] / concat_block;
        idx[k] %= concat_block;
        idx[s] += r * split_block;
        expected[static_cast<size_t>(r)].push_back(in[static_cast<size_t>(q)][ravel(idx, c.shape)]);
      }
    }
    const std::string what =
        describe({"all_to_all", dims_string(c.shape), "split", std::to_string(c.split), "concat",
                  std::to_string(c.concat)});
    g.run([&](CoreContext& ctx, int rank) {
      const auto& want = expected[static_cast<size_t>(rank)];
      std::vector<T> recv = garbage<T>(want.size());
      g.comm().all_to_all<T>(ctx, in[static_cast<size_t>(rank)], recv, c.shape, c.split, c.concat);
      same_bits<T>(recv, want, what + " rank " + std::to_string(rank));
    });
  }
}

// collective_permute (ppermute): a shift, a reversal, and a partial permutation whose
// non-destinations get zeros.
template <typename T>
void check_collective_permute(Group& g) {
  const int n = g.size();
  const uint64_t count = 333;
  const auto in = make_inputs<T>(n, count, ReduceOp::kSum, false, 60);
  std::vector<std::vector<PermutePair>> perms(3);
  for (int j = 0; j < n; ++j) {
    perms[0].push_back({j, (j + 1) % n});
    perms[1].push_back({j, n - 1 - j});
    if (j % 2 == 0) perms[2].push_back({j, (j + 2) % n});
  }
  for (size_t p = 0; p < perms.size(); ++p) {
    std::vector<int> source(static_cast<size_t>(n), -1);
    for (const auto& [src, dst] : perms[p]) source[static_cast<size_t>(dst)] = src;
    const std::string what = "collective_permute #" + std::to_string(p);
    g.run([&](CoreContext& ctx, int rank) {
      const int src = source[static_cast<size_t>(rank)];
      const std::vector<T> want = src < 0 ? std::vector<T>(count) : in[static_cast<size_t>(src)];
      std::vector<T> recv = garbage<T>(count);
      g.comm().collective_permute<T>(ctx, in[static_cast<size_t>(rank)], recv, perms[p]);
      same_bits<T>(recv, want, what + " rank " + std::to_string(rank));
    });
  }
}

// broadcast from the first, middle and last rank.
template <typename T>
void check_broadcast(Group& g) {
  const int n = g.size();
  const uint64_t count = 333;
  const auto in = make_inputs<T>(n, count, ReduceOp::kSum, false, 70);
  for (int root : {0, n / 2, n - 1}) {
    g.run([&](CoreContext& ctx, int rank) {
      std::vector<T> recv = garbage<T>(count);
      g.comm().broadcast<T>(ctx, in[static_cast<size_t>(rank)], recv, root);
      same_bits<T>(recv, in[static_cast<size_t>(root)],
                   "broadcast root " + std::to_string(root) + " rank " + std::to_string(rank));
    });
  }
}

// reduce: every op to a different root; only the root's output is written.
template <typename T>
void check_reduce(Group& g) {
  const int n = g.size();
  const uint64_t count = 333;
  uint64_t salt = 80;
  for (size_t k = 0; k < kOps.size(); ++k) {
    const ReduceOp op = kOps[k];
    const int root = static_cast<int>(k) % n;
    const auto in = make_inputs<T>(n, count, op, false, ++salt);
    const std::vector<T> expected = fold_in_rank_order(in, op);
    const std::string what =
        describe({"reduce", std::string(reduce_op_name(op)), "root", std::to_string(root)});
    g.run([&](CoreContext& ctx, int rank) {
      std::vector<T> recv = rank == root ? garbage<T>(count) : std::vector<T>();
      g.comm().reduce<T>(ctx, in[static_cast<size_t>(rank)], recv, root, op);
      if (rank == root) same_bits<T>(recv, expected, what);
    });
  }
}

enum class Family {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kBroadcast,
  kReduce
};

std::string family_name(Family f) {
  constexpr std::array<const char*, 7> kNames = {"AllReduce", "AllGather",         "ReduceScatter",
                                                 "AllToAll",  "CollectivePermute", "Broadcast",
                                                 "Reduce"};
  return kNames[static_cast<size_t>(f)];
}

void PrintTo(Family f, std::ostream* os) { *os << family_name(f); }

template <typename T>
void check_family(Family f, Group& g) {
  switch (f) {
    case Family::kAllReduce:
      return check_all_reduce<T>(g);
    case Family::kAllGather:
      return check_all_gather<T>(g);
    case Family::kReduceScatter:
      return check_reduce_scatter<T>(g);
    case Family::kAllToAll:
      return check_all_to_all<T>(g);
    case Family::kCollectivePermute:
      return check_collective_permute<T>(g);
    case Family::kBroadcast:
      return check_broadcast<T>(g);
    case Family::kReduce:
      return check_reduce<T>(g);
  }
}

using Param = std::tuple<ElementType, Family, int>;

class TypedCollectivesTest : public ::testing::TestWithParam<Param> {};

TEST_P(TypedCollectivesTest, MatchesTheSequentialReferenceBitForBit) {
  const auto [dtype, family, n] = GetParam();
  Group g(n);
  visit_data_type(dtype, [&](auto tag) { check_family<typename decltype(tag)::type>(family, g); });
}

INSTANTIATE_TEST_SUITE_P(
    EveryDtypeAndCollective, TypedCollectivesTest,
    ::testing::Combine(::testing::Values(ElementType::kF32, ElementType::kF64, ElementType::kBf16,
                                         ElementType::kF16, ElementType::kS32, ElementType::kS64),
                       ::testing::Values(Family::kAllReduce, Family::kAllGather,
                                         Family::kReduceScatter, Family::kAllToAll,
                                         Family::kCollectivePermute, Family::kBroadcast,
                                         Family::kReduce),
                       ::testing::Values(1, 3, 4, 8)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(element_type_name(std::get<0>(info.param))) + "_" +
             family_name(std::get<1>(info.param)) + "_" + std::to_string(std::get<2>(info.param)) +
             "cores";
    });

// ---- values worked out by hand ---------------------------------------------------------------

// Integer sums and products wrap as two's complement, as XLA's (and so JAX's) integer adds do.
TEST(TypedCollectivesExamples, IntegerSumAndProductWrapAsTwosComplement) {
  Group g(3);
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  g.run([&](CoreContext& ctx, int rank) {
    // s32 sum: (2^31 - 1) + 1 + 0 = 2^31 -> -2^31; (2^31 - 1) x 2 + 2 = 2^32 -> 0.
    std::vector<int32_t> a = {rank == 1 ? 1 : rank == 0 ? kMax32 : 0, rank == 2 ? 2 : kMax32};
    g.comm().all_reduce<int32_t>(ctx, std::span<int32_t>(a));
    EXPECT_EQ(a, (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 0}));
    // s32 prod: 65536^2 x 1 = 2^32 -> 0; 65537^2 x 1 = 2^32 + 2^17 + 1 -> 131073;
    // (-65536) x 32768 x 1 = -2^31 (fits).
    std::vector<int32_t> p = {rank == 2 ? 1 : 65536, rank == 2 ? 1 : 65537,
                              rank == 0   ? -65536
                              : rank == 1 ? 32768
                                          : 1};
    g.comm().all_reduce<int32_t>(ctx, std::span<int32_t>(p), ReduceOp::kProd);
    EXPECT_EQ(p, (std::vector<int32_t>{0, 131073, std::numeric_limits<int32_t>::min()}));
    // s64 sum: (2^63 - 1) x 3 = 2^64 + 2^63 - 3 -> 2^63 - 3; prod: 2^32 x 2^32 x 3 = 3 x 2^64 -> 0.
    std::vector<int64_t> s = {kMax64, rank == 2 ? 3 : int64_t{1} << 32};
    g.comm().all_reduce<int64_t>(ctx, std::span<int64_t>(s.data(), 1));
    g.comm().all_reduce<int64_t>(ctx, std::span<int64_t>(s.data() + 1, 1), ReduceOp::kProd);
    EXPECT_EQ(s, (std::vector<int64_t>{kMax64 - 2, 0}));
  });
}

// f16 sums round per fold: 2048 + 1 rounds to 2048 (ulp 2 from 2048, tie to even), and again,
// so rank order gives 2048; 65504 + 16 + 16 = 65536 overflows (65520 already rounds to infinity).
TEST(TypedCollectivesExamples, Float16SumRoundsAfterEveryStep) {
  Group g(3);
  g.run([&](CoreContext& ctx, int rank) {
    const std::array<float, 3> first = {2048, 1, 1};
    const std::array<float, 3> second = {65504, 16, 16};
    const std::array<float, 3> third = {1, 0x1p-24f, 0x1p-24f};  // 1 + 2^-24 + 2^-24 -> 1
    std::vector<Float16> v = {float_to_f16(first[static_cast<size_t>(rank)]),
                              float_to_f16(second[static_cast<size_t>(rank)]),
                              float_to_f16(third[static_cast<size_t>(rank)])};
    g.comm().all_reduce<Float16>(ctx, std::span<Float16>(v));
    EXPECT_EQ(v[0].bits, 0x6800);  // 2048
    EXPECT_EQ(v[1].bits, 0x7c00);  // +infinity
    EXPECT_EQ(v[2].bits, 0x3c00);  // 1
  });
}

// ---- mixed dtypes ----------------------------------------------------------------------------

// Every ordered pair of distinct dtypes, split across the cores of one all_reduce (even ranks pass
// the first, odd ranks the second): every core fails with InvalidArgumentError naming both
// dtypes, on 2 and 4 cores, for a small message and one above the direct algorithm's threshold.
TEST(TypedCollectivesMixedDtypes, EveryCoreFailsNamingBothDtypes) {
  const std::array<ElementType, 6> types = {ElementType::kF32,  ElementType::kF64,
                                            ElementType::kBf16, ElementType::kF16,
                                            ElementType::kS32,  ElementType::kS64};
  for (int n : {2, 4}) {
    Group g(n);
    for (ElementType a : types) {
      for (ElementType b : types) {
        if (a == b) continue;
        for (int64_t count : {16, 5000}) {
          const std::string what = std::string(element_type_name(a)) + " vs " +
                                   std::string(element_type_name(b)) + " x" +
                                   std::to_string(count) + " on " + std::to_string(n);
          std::vector<std::string> codes(static_cast<size_t>(n)), messages(static_cast<size_t>(n));
          try {
            g.run([&](CoreContext& ctx, int rank) {
              const ElementType t = rank % 2 == 0 ? a : b;
              std::vector<std::byte> buf(static_cast<size_t>(count) * element_size_bytes(t));
              try {
                g.comm().all_reduce_bytes(ctx, t, buf, buf, std::span<const int64_t>(&count, 1));
              } catch (const Error& e) {
                codes[static_cast<size_t>(rank)] = std::string(error_code_name(e.code()));
                messages[static_cast<size_t>(rank)] = e.message();
                throw;
              }
            });
            ADD_FAILURE() << what << ": no error";
          } catch (const InvalidArgumentError&) {
          }
          g.comm().reset();
          // " f16[" and not "bf16[": the fingerprint prints the dtype then the shape.
          const std::string name_a = " " + std::string(element_type_name(a)) + "[";
          const std::string name_b = " " + std::string(element_type_name(b)) + "[";
          for (int r = 0; r < n; ++r) {
            const auto ri = static_cast<size_t>(r);
            EXPECT_EQ(codes[ri], error_code_name(ErrorCode::kInvalidArgument))
                << what << " rank " << r << ": " << messages[ri];
            EXPECT_NE(messages[ri].find(name_a), std::string::npos) << what << ": " << messages[ri];
            EXPECT_NE(messages[ri].find(name_b), std::string::npos) << what << ": " << messages[ri];
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace vtpu
