// Labels of the auto-sharding planner's dynamic program (planner/strategy_planner.h) and the
// rules that prune them. A label is one partial plan of the layer chain ending in an activation
// state (R, S or P); a frontier keeps the labels no other label beats, which makes the DP under
// an HBM limit exact (planner/auto_planner.h, "Exactness under the HBM limit").
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

namespace vtpu::planner_dp {

/// How a label of the DP was reached: the label it extends and the layer's option. The walk back
/// from the chosen label recomputes each layer's costs from these (StrategyPlanner::plan).
struct Step {
  int32_t parent = -1;      // index into the previous layer's labels of `parent_state`
  int8_t parent_state = 0;  // 0 R, 1 S, 2 P
  int8_t option = -1;       // index into the layer's options
};

/// A label of the DP: one partial plan ending in a state.
struct Label {
  double time = 0, compute = 0, comm = 0, comm_bytes = 0;
  double add_bytes = 0, max_bytes = 0;
  /// FSDP units so far: the last one's bytes and the one's before it (0: none). The transient
  /// peak of a unit depends on its neighbours (fsdp_transient), so they are part of the state.
  double last_unit = 0, unit_before = 0;
  double param_state_bytes = 0, activation_bytes = 0;
  double grad_bucket_bytes = 0;  // the gradient bucket so far (LayerCost::grad_bucket_bytes)
  Step step;
  double total_bytes() const { return add_bytes + max_bytes; }
};

inline int state_index(char s) { return s == 'R' ? 0 : s == 'S' ? 1 : 2; }
inline constexpr char kStates[3] = {'R', 'S', 'P'};

/// FSDP's transient bytes while unit u1 (the unit before it u2, after it u3; 0: none) is in use,
/// in the schedule of `vtpu train fsdp` with prefetch (train/fsdp_trainer.cc), which is PyTorch
/// FSDP's FULL_SHARD with forward_prefetch and BackwardPrefetch.BACKWARD_PRE. A unit's gathered
/// parameters and its unsharded gradient have the same size. Forward: u1 gathered and u3
/// prefetched. Backward: u1 gathered, its gradient, u2 prefetched and u3's gradient (its
/// reduce-scatter pending): u2 + 2 u1 + u3. The first unit (u2 = 0) needs no input gradient, so
/// its gathered parameters are freed before its gradient exists: u1 + u3 forward and backward.
inline double fsdp_transient(double u2, double u1, double u3) {
  if (u1 == 0) return 0;
  return u2 == 0 ? u1 + u3 : u2 + 2 * u1 + u3;
}

/// The part of a label on which the bytes still to come depend, besides add_bytes: the transient
/// peak so far and the last two FSDP units. Every completion's bytes grow with each of them
/// (fsdp_transient is monotone in its arguments).
inline std::array<double, 3> unit_key(const Label& l) {
  return {l.max_bytes, l.last_unit, l.unit_before};
}

inline bool key_le(const std::array<double, 3>& a, const std::array<double, 3>& b) {
  return a[0] <= b[0] && a[1] <= b[1] && a[2] <= b[2];
}

/// The labels of `labels` that the fastest-fit DP keeps, in their order: those that no other
/// label beats. Label a beats b when a dominates b (no slower, and no more bytes in add_bytes and
/// unit_key: every completion of b costs a's completion at least as much time and bytes), or when
/// `safe(a)` (every completion of a fits the HBM limit) and a is strictly faster. Of equal labels
/// the first is kept. This is the set that inserting the labels one by one into a Pareto frontier
/// keeps, in O(G N + N log N) for N labels in G distinct unit_keys instead of O(N^2): the labels
/// sorted by (time, add_bytes, unit_key, order), a label is dominated exactly when an earlier one
/// of a unit_key <= its own (componentwise) has add_bytes <= its own, which one sweep finds.
template <typename Safe>
void keep_pareto(std::vector<Label>& labels, const Safe& safe) {
  const size_t n = labels.size();
  if (n <= 1) return;
  // A safe label beats every strictly slower one.
  double safe_time = std::numeric_limits<double>::infinity();
  for (const Label& l : labels)
    if (safe(l)) safe_time = std::min(safe_time, l.time);
  // The distinct unit_keys, ranked in lexicographic order, and for each the ranks of the keys
  // it is <= (componentwise): the groups its labels may dominate.
  std::vector<std::array<double, 3>> keys;
  std::vector<uint32_t> group(n, 0);
  for (size_t k = 0; k < n; ++k) {
    const std::array<double, 3> key = unit_key(labels[k]);
    const auto it = std::find(keys.begin(), keys.end(), key);
    group[k] = static_cast<uint32_t>(it - keys.begin());
    if (it == keys.end()) keys.push_back(key);
  }
  std::vector<uint32_t> rank(keys.size());
  for (size_t g = 0; g < keys.size(); ++g) {
    rank[g] = static_cast<uint32_t>(
        std::count_if(keys.begin(), keys.end(), [&](const auto& x) { return x < keys[g]; }));
  }
  std::vector<std::vector<uint32_t>> above(keys.size());  // by rank
  for (size_t a = 0; a < keys.size(); ++a) {
    for (size_t b = 0; b < keys.size(); ++b)
      if (key_le(keys[a], keys[b])) above[rank[a]].push_back(rank[b]);
  }
  struct Entry {
    double time, add_bytes;
    uint32_t rank, index;
  };
  std::vector<Entry> order;
  order.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    if (!(labels[k].time > safe_time)) {
      order.push_back(
          {labels[k].time, labels[k].add_bytes, rank[group[k]], static_cast<uint32_t>(k)});
    }
  }
  std::sort(order.begin(), order.end(), [](const Entry& x, const Entry& y) {
    if (x.time != y.time) return x.time < y.time;
    if (x.add_bytes != y.add_bytes) return x.add_bytes < y.add_bytes;
    if (x.rank != y.rank) return x.rank < y.rank;
    return x.index < y.index;
  });
  // min_add[r]: the least add_bytes of the labels swept so far whose key is <= key r.
  std::vector<double> min_add(keys.size(), std::numeric_limits<double>::infinity());
  std::vector<char> kept(n, 0);
  for (const Entry& e : order) {
    if (e.add_bytes < min_add[e.rank]) kept[e.index] = 1;
    for (uint32_t r : above[e.rank]) min_add[r] = std::min(min_add[r], e.add_bytes);
  }
  size_t w = 0;
  for (size_t k = 0; k < n; ++k)
    if (kept[k]) labels[w++] = labels[k];
  labels.resize(w);
}

/// The labels of `labels` that the smallest-HBM DP keeps, in their order: label a beats b when
/// unit_key(a) <= unit_key(b) and (add_bytes, time) of a is lexicographically <= b's (every
/// completion of a needs fewer bytes than b's, or as many and no more time); of equal labels the
/// first is kept. So at most one label per unit_key survives.
void keep_smallest(std::vector<Label>& labels);

}  // namespace vtpu::planner_dp
