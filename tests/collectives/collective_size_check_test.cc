// Sizes are checked whatever desync_check says: cores that pass different sizes to a collective
// all fail with InvalidArgument naming both sizes, for every operation and algorithm, and never
// write outside a receive buffer (guard elements around each stay untouched); cores that
// disagree on a broadcast's root all fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/collectives/test_util.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using testing_util::iota_group;
using testing_util::SlotOnlyTransport;
using testing_util::small_options;

constexpr uint64_t kGuard = 64;          // guard elements on each side of a receive buffer
constexpr float kGuardValue = -4242.0f;  // what they hold

// One operation: the receive count for an input of n elements on `cores` cores, and the call.
struct Op {
  std::string name;
  std::function<uint64_t(uint64_t n, int cores)> recv_count;
  std::function<void(Communicator&, CoreContext&, std::span<const float> send,
                     std::span<float> recv, int cores)>
      call;
};

Op all_reduce_by(Algorithm a) {
  return {"all_reduce " + std::string(algorithm_name(a)), [](uint64_t n, int) { return n; },
          [a](Communicator& c, CoreContext& ctx, std::span<const float> s, std::span<float> r,
              int) { c.all_reduce<float>(ctx, s, r, ReduceOp::kSum, {a}); }};
}

std::vector<Op> every_op() {
  std::vector<Op> ops;
  for (Algorithm a :
       {Algorithm::kRing, Algorithm::kBidirectionalRing, Algorithm::kRecursiveDoubling,
        Algorithm::kTorus2d, Algorithm::kRingReduceScatter, Algorithm::kDirect}) {
    ops.push_back(all_reduce_by(a));
  }
  const auto shape = [](std::span<const float> s) {
    return std::vector<int64_t>{static_cast<int64_t>(s.size())};
  };
  ops.push_back({"all_gather", [](uint64_t n, int cores) { return n * cores; },
                 [=](Communicator& c, CoreContext& ctx, auto s, auto r, int) {
                   c.all_gather<float>(ctx, s, r, shape(s), 0, true);
                 }});
  ops.push_back({"reduce_scatter", [](uint64_t n, int cores) { return n / cores; },
                 [=](Communicator& c, CoreContext& ctx, auto s, auto r, int) {
                   c.reduce_scatter<float>(ctx, s, r, shape(s), ReduceOp::kSum, 0, true);
                 }});
  ops.push_back({"all_to_all", [](uint64_t n, int) { return n; },
                 [=](Communicator& c, CoreContext& ctx, auto s, auto r, int) {
                   c.all_to_all<float>(ctx, s, r, shape(s), 0, 0);
                 }});
  ops.push_back({"collective_permute (shift)", [](uint64_t n, int) { return n; },
                 [](Communicator& c, CoreContext& ctx, auto s, auto r, int cores) {
                   std::vector<PermutePair> pairs;
                   for (int q = 0; q < cores; ++q) pairs.push_back({q, (q + 1) % cores});
                   c.collective_permute<float>(ctx, s, r, pairs);
                 }});
  ops.push_back({"collective_permute (0 -> 1 only)", [](uint64_t n, int) { return n; },
                 [](Communicator& c, CoreContext& ctx, auto s, auto r, int) {
                   const std::vector<PermutePair> pairs = {{0, 1}};
                   c.collective_permute<float>(ctx, s, r, pairs);
                 }});
  for (int root : {0, 1}) {
    ops.push_back({"broadcast root " + std::to_string(root), [](uint64_t n, int) { return n; },
                   [root](Communicator& c, CoreContext& ctx, auto s, auto r, int) {
                     c.broadcast<float>(ctx, s, r, root);
                   }});
    ops.push_back({"reduce root " + std::to_string(root), [](uint64_t n, int) { return n; },
                   [root](Communicator& c, CoreContext& ctx, auto s, auto r, int) {
                     c.reduce<float>(ctx, s, r, root);
                   }});
  }
  return ops;
}

// The communicator settings each operation runs under: direct access (in-process links) or slot
// copies only (the algorithms of links between processes), desync check on or off.
struct Setting {
  std::string name;
  bool slot_only;
  bool desync_check;
};

std::vector<Setting> every_setting() {
  return {{"direct links, check on", false, true},
          {"direct links, check off", false, false},
          {"slot links, check on", true, true},
          {"slot links, check off", true, false}};
}

// Core c calls `op` with counts[c] input elements; every core must fail with InvalidArgument,
// leave its guards untouched, and (name_both) name f32[counts[0]] and f32[counts[1]].
void expect_every_core_fails(Runtime& rt, const Op& op, const Setting& setting,
                             const std::vector<uint64_t>& counts, bool name_both) {
  const int cores = static_cast<int>(counts.size());
  CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
  o.desync_check = setting.desync_check;
  if (setting.slot_only) o.transport = std::make_shared<SlotOnlyTransport>();
  if (setting.slot_only && op.name == "all_reduce direct") return;  // needs direct access
  Communicator comm(rt, iota_group(cores), o);
  std::vector<std::vector<float>> guarded(static_cast<size_t>(cores));
  std::vector<ErrorCode> codes(static_cast<size_t>(cores), ErrorCode::kInternal);
  std::vector<std::string> messages(static_cast<size_t>(cores), "no error");
  rt.run_spmd([&](CoreContext& ctx) {
    const size_t c = static_cast<size_t>(ctx.core_id());
    const std::vector<float> send(counts[c], 1.0f);  // exact size: ASan sees any over-read
    std::vector<float>& g = guarded[c];
    const uint64_t rc = op.recv_count(counts[c], cores);
    g.assign(rc + 2 * kGuard, kGuardValue);
    try {
      op.call(comm, ctx, send, std::span<float>(g).subspan(kGuard, rc), cores);
    } catch (const Error& e) {
      codes[c] = e.code();
      messages[c] = e.message();
    }
  });
  const std::string what = op.name + " (" + setting.name + ")";
  for (size_t c = 0; c < counts.size(); ++c) {
    EXPECT_EQ(error_code_name(codes[c]), error_code_name(ErrorCode::kInvalidArgument))
        << what << " core " << c << ": " << messages[c];
    const std::vector<float>& g = guarded[c];
    const uint64_t rc = g.size() - 2 * kGuard;
    EXPECT_TRUE(
        std::all_of(g.begin(), g.begin() + kGuard, [](float x) { return x == kGuardValue; }))
        << what << " core " << c << ": guard before the receive buffer written";
    EXPECT_TRUE(std::all_of(g.begin() + static_cast<int64_t>(kGuard + rc), g.end(),
                            [](float x) { return x == kGuardValue; }))
        << what << " core " << c << ": guard after the receive buffer written";
    if (!name_both) continue;
    for (uint64_t n : {counts[0], counts[1]}) {
      const std::string shape = "f32[" + std::to_string(n) + "]";
      EXPECT_NE(messages[c].find(shape), std::string::npos)
          << what << " core " << c << " does not name " << shape << ": " << messages[c];
    }
  }
}

// The case: f32[8] against f32[6] on two cores. Before, `direct` wrote 2 floats past
// core 1's receive buffer with the desync check off.
TEST(CollectiveSizeCheckTest, EightAgainstSixFailsOnBothCoresForEveryOpAndAlgorithm) {
  Runtime rt(small_options(2));
  for (const Setting& s : every_setting()) {
    for (const Op& op : every_op()) expect_every_core_fails(rt, op, s, {8, 6}, true);
  }
}

// f32[1048576] against f32[786432] with 1 MiB slots. Before, `direct` "succeeded" with a quarter
// of core 0's result never written.
TEST(CollectiveSizeCheckTest, LargeMismatchFailsOnBothCoresNeverAPartialResult) {
  Runtime rt(small_options(2, uint64_t{1} << 20, 4));
  for (const Setting& s : every_setting()) {
    for (const Op& op : every_op()) {
      expect_every_core_fails(rt, op, s, {1048576, 786432}, true);
    }
  }
}

// Three cores, the middle one smaller: cores that never receive from it directly fail too (the
// direct algorithms compare every rank's sizes before any touches a peer's buffer).
TEST(CollectiveSizeCheckTest, OneOddCoreOfThreeFailsEveryCore) {
  Runtime rt(small_options(3));
  for (const Setting& s : every_setting()) {
    for (const Op& op : every_op()) {
      expect_every_core_fails(rt, op, s, {12, 6, 12}, false);
    }
  }
}

// Cores that disagree on a broadcast's root all fail (before, the chain let some finish), with
// the check on or off, whichever cores claim which root.
TEST(CollectiveSizeCheckTest, BroadcastRootDisagreementFailsEveryCore) {
  Runtime rt(small_options(4));
  const std::vector<std::vector<int>> root_of_core = {
      {0, 1, 1, 1}, {1, 0, 0, 0}, {0, 1, 2, 3}, {0, 0, 0, 1}, {2, 2, 3, 3}};
  for (bool check : {true, false}) {
    for (const std::vector<int>& roots : root_of_core) {
      for (int run = 0; run < 20; ++run) {
        CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
        o.desync_check = check;
        Communicator comm(rt, iota_group(4), o);
        std::vector<ErrorCode> codes(4, ErrorCode::kInternal);
        std::vector<std::string> messages(4, "no error");
        rt.run_spmd([&](CoreContext& ctx) {
          const size_t c = static_cast<size_t>(ctx.core_id());
          std::vector<float> v(300, static_cast<float>(c));
          try {
            comm.broadcast<float>(ctx, std::span<float>(v), roots[c]);
          } catch (const Error& e) {
            codes[c] = e.code();
            messages[c] = e.message();
          }
        });
        for (size_t c = 0; c < 4; ++c) {
          ASSERT_EQ(error_code_name(codes[c]), error_code_name(ErrorCode::kInvalidArgument))
              << "roots " << ::testing::PrintToString(roots) << " check " << check << " core " << c
              << ": " << messages[c];
          // Names two different roots: this core's and another's.
          int named = 0;
          for (int r = 0; r < 4; ++r) {
            named += messages[c].find("root=" + std::to_string(r)) != std::string::npos;
          }
          EXPECT_GE(named, 2) << messages[c];
        }
      }
    }
  }
}

}  // namespace
}  // namespace vtpu
