#include "vtpu/stress/core_replay_loop.h"

#include <Eigen/Core>
#include <algorithm>
#include <span>
#include <vector>

namespace vtpu {
namespace {

constexpr uint64_t kProgressEvery = 4096;  // events between updates of the shared counter

// One all-reduce round on core `c`: a matmul, then the bucket (every element c + 1) summed over
// the group and checked against n (n + 1) / 2.
void load_round(CoreContext& ctx, Communicator& comm, std::vector<float>& bucket,
                Eigen::MatrixXf& a, Eigen::MatrixXf& b, Eigen::MatrixXf& c, LoadCounters& k) {
  c.noalias() = a * b;
  k.matmuls.fetch_add(1, std::memory_order_relaxed);
  const auto me = static_cast<float>(ctx.core_id() + 1);
  std::fill(bucket.begin(), bucket.end(), me + 0.0f * c(0, 0));
  comm.all_reduce(ctx, std::span<float>(bucket));
  const double n = ctx.num_cores();
  const auto expect = static_cast<float>(n * (n + 1) / 2);
  if (bucket.front() != expect || bucket.back() != expect)
    k.all_reduce_failures.fetch_add(1, std::memory_order_relaxed);
  k.all_reduces.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

std::unique_ptr<Communicator> make_load_communicator(Runtime& runtime) {
  std::vector<int> group(static_cast<size_t>(runtime.num_cores()));
  for (int c = 0; c < runtime.num_cores(); ++c) group[c] = c;
  return std::make_unique<Communicator>(runtime, group);
}

StressCoreMetrics replay_core(CoreContext& ctx, const StressOptions& options,
                              const std::string& policy, const CoreStream& stream, CoreReplayer& r,
                              Communicator* comm, CrossCoreFrees* frees, LoadCounters& load) {
  const int c = ctx.core_id();
  const auto& ops = stream.ops;
  const size_t total = ops.size();
  StressOptions::Progress* progress = options.progress;
  const bool load_on = options.under_load;
  const auto rounds = load_on ? static_cast<size_t>(options.collective_rounds) : 0;
  std::vector<float> bucket(load_on ? options.bucket_bytes / 4 : 0);
  const int d = options.matmul_dim;
  Eigen::MatrixXf a, b, m;
  if (load_on) {
    a = Eigen::MatrixXf::Constant(d, d, 0.5f);
    b = Eigen::MatrixXf::Constant(d, d, 0.25f);
    m.resize(d, d);
  }
  auto round = [&] {
    // With cross-core frees, all cores meet (applying their inboxes) before any enters the
    // all-reduce, so a core blocked in it never holds up a free another core awaits.
    if (frees) frees->gate(c);
    load_round(ctx, *comm, bucket, a, b, m, load);
  };
  size_t next_round = 0;
  uint64_t unreported = 0;
  r.begin();
  for (size_t i = 0; i < total && !r.stopped(); ++i) {
    // Round k sits before event floor(k * total / rounds), so every core runs `rounds`.
    while (next_round < rounds && i >= next_round * total / rounds) {
      round();
      ++next_round;
    }
    if (frees) frees->before_event(c, i);
    if (options.before_event_for_testing) options.before_event_for_testing(policy, c, i);
    const CoreStream::Op& op = ops[i];
    if (frees && !op.is_alloc &&
        is_cross_core_free(c, op.slot, options.cross_core_free_per_mille) && r.is_live(op.slot)) {
      frees->hand_off(c, op.slot, i);
    } else {
      r.run_op(i);
    }
    if (progress != nullptr && ++unreported == kProgressEvery) {
      progress->done.fetch_add(unreported, std::memory_order_relaxed);
      unreported = 0;
    }
  }
  while (next_round < rounds) {
    round();
    ++next_round;
  }
  if (frees) {
    frees->flush(c);  // every free this core handed off is applied
    frees->gate(c);   // and every other core's: no core frees into another after this
  }
  if (progress != nullptr) progress->done.fetch_add(unreported, std::memory_order_relaxed);
  return r.finish();
}

}  // namespace vtpu
