#include "vtpu/planner/auto_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/sharding/partition_spec.h"

namespace vtpu {

namespace {

/// format_bytes with the exact count where it rounds: "512 B" below 1 KiB (already exact),
/// "53.58 KiB (54864 bytes)" from 1 KiB up: for the limits and needs a user compares.
std::string format_bytes_exact(uint64_t size_bytes) {
  if (size_bytes < 1024) return format_bytes(size_bytes);
  return format_bytes(size_bytes) + " (" + std::to_string(size_bytes) + " bytes)";
}

/// One way to run a layer over the tensor axes.
struct Option {
  const char* choice;
  char in;
  char out;
  bool bwd_input_all_reduce;  // R input, split weights: partial input gradient
};

/// Costs of one layer under one option, per core.
struct LayerCost {
  double compute_seconds = 0;
  double comm_seconds = 0;
  double comm_bytes = 0;
  double add_bytes = 0;  // parameters, gradients, optimizer state, saved activations
  /// FSDP: the layer's flat parameter gathered over the fsdp axes (tensor-local, padded to a
  /// multiple of the fsdp cores), which is also the size of its unsharded gradient; 0 without
  /// fsdp axes or parameters (the layer is then no FSDP unit).
  double unit_bytes = 0;
  double param_state_bytes = 0;
  double activation_bytes = 0;
  /// Bytes of the layer's gradients in the data axes' gradient bucket (per core; 0 without data
  /// axes). comm_seconds holds the layer's share of the bucket's all-reduce, priced per byte
  /// (StrategyPlanner::plan).
  double grad_bucket_bytes = 0;
};

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

int state_index(char s) { return s == 'R' ? 0 : s == 'S' ? 1 : 2; }
constexpr char kStates[3] = {'R', 'S', 'P'};

/// FSDP's transient bytes while unit u1 (the unit before it u2, after it u3; 0: none) is in use,
/// in the schedule of `vtpu train fsdp` with prefetch (train/fsdp_trainer.cc), which is PyTorch
/// FSDP's FULL_SHARD with forward_prefetch and BackwardPrefetch.BACKWARD_PRE. A unit's gathered
/// parameters and its unsharded gradient have the same size. Forward: u1 gathered and u3
/// prefetched. Backward: u1 gathered, its gradient, u2 prefetched and u3's gradient (its
/// reduce-scatter pending): u2 + 2 u1 + u3. The first unit (u2 = 0) needs no input gradient, so
/// its gathered parameters are freed before its gradient exists: u1 + u3 forward and backward.
double fsdp_transient(double u2, double u1, double u3) {
  if (u1 == 0) return 0;
  return u2 == 0 ? u1 + u3 : u2 + 2 * u1 + u3;
}

/// The part of a label on which the bytes still to come depend, besides add_bytes: the transient
/// peak so far and the last two FSDP units. Every completion's bytes grow with each of them
/// (fsdp_transient is monotone in its arguments).
std::array<double, 3> unit_key(const Label& l) { return {l.max_bytes, l.last_unit, l.unit_before}; }

bool key_le(const std::array<double, 3>& a, const std::array<double, 3>& b) {
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
void keep_smallest(std::vector<Label>& labels) {
  const auto lex_le = [](const Label& a, const Label& b) {
    return a.add_bytes < b.add_bytes || (a.add_bytes == b.add_bytes && a.time <= b.time);
  };
  std::vector<size_t> best;  // per distinct unit_key, its first lexicographically smallest label
  for (size_t k = 0; k < labels.size(); ++k) {
    const auto it = std::find_if(best.begin(), best.end(), [&](size_t b) {
      return unit_key(labels[b]) == unit_key(labels[k]);
    });
    if (it == best.end()) {
      best.push_back(k);
    } else if (!lex_le(labels[*it], labels[k])) {
      *it = k;
    }
  }
  std::vector<char> kept(labels.size(), 0);
  for (size_t b : best) {
    const bool beaten = std::any_of(best.begin(), best.end(), [&](size_t a) {
      return a != b && key_le(unit_key(labels[a]), unit_key(labels[b])) &&
             lex_le(labels[a], labels[b]);
    });
    if (!beaten) kept[b] = 1;
  }
  size_t w = 0;
  for (size_t k = 0; k < labels.size(); ++k)
    if (kept[k]) labels[w++] = labels[k];
  labels.resize(w);
}

class StrategyPlanner {
 public:
  StrategyPlanner(const ModelGraph& m, const CostModel& cost, const std::vector<int64_t>& shape,
                  const std::vector<AxisRole>& roles, const PlanConstraints& constraints)
      : m_(m), cost_(cost), constraints_(constraints) {
    for (size_t a = 0; a < shape.size(); ++a) {
      switch (roles[a]) {
        case AxisRole::kData:
          dp_pos_.push_back(static_cast<int>(a));
          dp_sizes_.push_back(shape[a]);
          d_ *= shape[a];
          break;
        case AxisRole::kTensor:
          tp_pos_.push_back(static_cast<int>(a));
          tp_sizes_.push_back(shape[a]);
          t_ *= shape[a];
          break;
        case AxisRole::kFsdp:
          fsdp_pos_.push_back(static_cast<int>(a));
          fsdp_sizes_.push_back(shape[a]);
          f_ *= shape[a];
          break;
        case AxisRole::kNone:
          break;
      }
    }
    e_ = static_cast<double>(m.dtype_bytes());
  }

  /// Empty when the strategy can run; else why not, and `*by_constraints` is set when only the
  /// constraints' required sharding of a layer makes it infeasible (every layer may otherwise
  /// stay replicated: all_options always holds "replicated").
  std::string infeasible(bool* by_constraints) const {
    *by_constraints = false;
    if (m_.batch % (d_ * f_) != 0) {
      return "batch " + std::to_string(m_.batch) + " does not split over " +
             count_text(d_ * f_, "data x fsdp core");
    }
    for (const ModelLayer& l : m_.layers) {
      if (options(l).empty()) {
        *by_constraints = true;
        return "layer '" + l.name + "' (" + layer_kind_name(l.kind) + ", " + layer_dims(l) +
               ") must be split '" + required(l) + "' (" +
               (constraints_.runner.empty() ? std::string("the runner") : constraints_.runner) +
               " runs it so), " + "which does not divide over " + count_text(t_, "tensor core");
      }
    }
    return {};
  }

  /// ceil(bytes) per core as an integer. Throws InvalidArgumentError naming the model, `what`
  /// and the strategy when it is 2^63 or more (or not finite). Regression (issue 6 adversarial
  /// pass, F15): the double-to-uint64 conversion saturated, and a hand-built ModelGraph (which
  /// skips the model file's size limits) printed "the smallest HBM per core that would fit is
  /// 16384.00 PiB (18446744073709551615 bytes)".
  uint64_t byte_count(double bytes, const char* what, const std::string& strategy) const {
    if (!(bytes < 0x1p63)) {
      char b[64];
      std::snprintf(b, sizeof b, "%.4g", bytes);
      throw InvalidArgumentError("model '" + m_.name + "' needs " + b + " bytes of " + what +
                                 " per core with " + strategy +
                                 " (expected less than 2^63 bytes; the model file's limits, "
                                 "docs/SHARDING.md \"Model files\", keep sizes below that)");
    }
    return static_cast<uint64_t>(std::ceil(bytes));
  }

  /// Runs the DPs; fills `c` (layers, times, bytes, fits, min HBM).
  void plan(uint64_t limit, PlanCandidate& c) {
    bl_ = static_cast<double>(m_.batch / (d_ * f_));
    tokens_ = bl_ * static_cast<double>(m_.seq_len);
    const size_t n = m_.layers.size();
    // The step's input batch on each core (replicated over the tensor axes): the first layer's
    // input (token ids are int32) and one int32 label per token. The same for every label; it
    // counts against the limit (the limit is the whole arena).
    const ModelLayer& first = m_.layers.front();
    const double in_bytes =
        first.kind == LayerKind::kEmbedding ? 4.0 : static_cast<double>(first.in) * e_;
    const double input_bytes = tokens_ * (in_bytes + 4.0);
    std::vector<LayerOptions> layers(n);
    const auto price_layers = [&] {
      for (size_t i = 0; i < n; ++i) {
        layers[i].options = options(m_.layers[i]);
        layers[i].costs.clear();
        for (const Option& op : layers[i].options)
          layers[i].costs.push_back(layer_cost(m_.layers[i], op, i == 0, i + 1 == n));
      }
    };
    price_layers();
    // The last-level cache holds a layer's data only when the step's whole footprint on every
    // core fits it (cost_model.h): priced again with the footprint of each layer's smallest
    // option, the bytes the step keeps per core at least.
    if (cost_.profile().llc_bytes > 0) {
      double footprint = input_bytes;
      for (const LayerOptions& lo : layers) {
        double least = std::numeric_limits<double>::infinity();
        for (const LayerCost& lc : lo.costs) least = std::min(least, lc.add_bytes);
        if (!lo.costs.empty()) footprint += least;
      }
      cost_ = cost_.with_step_footprint(footprint);
      price_layers();
    }
    price_gradient_bucket(layers);
    // Two DPs: the fastest plan that fits, and the smallest plan in HBM (what the limit must be;
    // the plan shown when nothing fits).
    const Chain fastest =
        run_chain(layers, Keep::kFastestFit, static_cast<double>(limit), input_bytes);
    const Chain smallest_chain = run_chain(layers, Keep::kSmallest, 0, input_bytes);
    // The loss: a partial output is all-reduced; a sharded one pays the parallel cross-entropy;
    // FSDP's batch shards sum their losses. Then the gradient bucket's latency, once. Rows of their
    // own in the table (after_layers).
    const ModelLayer& last = m_.layers.back();
    const auto end_rows = [&](int s, double grad_bucket_bytes) {
      std::vector<LayerPlan> rows;
      // One row: no layer, no compute; in/out '-' when the activation's layout does not change.
      const auto add = [&](const char* name, char in, char out, const char* reshard, double seconds,
                           double bytes) {
        LayerPlan r;
        r.layer = name;
        r.choice = "-";
        r.in_state = in;
        r.out_state = out;
        r.reshard_in = reshard;
        r.comm_seconds = seconds;
        r.comm_bytes_per_core = bytes;
        rows.push_back(std::move(r));
      };
      if (kStates[s] != 'R') {
        const bool partial = kStates[s] == 'P';
        const CollectiveCost cc =
            tp(CollectiveKind::kAllReduce, partial ? act_bytes(last.out) : 2 * tokens_ * e_);
        add(partial ? "(final all-reduce)" : "(loss all-reduce)", kStates[s], partial ? 'R' : 'S',
            "all_reduce", cc.seconds, cc.sent_bytes_per_core);
      }
      if (f_ > 1 && d_ == 1) {
        // FSDP shards the batch over its axes: the step's loss is summed over them by an
        // all-reduce of one element, as vtpu train fsdp does ("all-reduce loss"). With data
        // axes too, the loss rides in the gradient bucket (below).
        const CollectiveCost cc =
            cost_.collective(CollectiveKind::kAllReduce, e_, fsdp_pos_, fsdp_sizes_);
        add("(loss all-reduce)", '-', '-', "all_reduce", cc.seconds, cc.sent_bytes_per_core);
      }
      if (d_ > 1 && m_.num_parameters() > 0) {
        // The one all-reduce of the whole bucket, less the per-byte shares the layers' rows
        // already hold: with a straight alpha + beta x this is 2 alpha, the latency paid once.
        add("(gradient bucket)", '-', '-', "",
            bucket_seconds(grad_bucket_bytes) - bucket_rate_ * grad_bucket_bytes, 0);
      }
      return rows;
    };
    // The complete plans of a DP: its last labels with the end rows' costs (Step: the label's
    // index and state after the last layer).
    const auto finals_of = [&](const Chain& chain) {
      std::vector<Label> finals;
      for (int s = 0; s < 3; ++s) {
        const std::vector<Label>& labels = chain.last[static_cast<size_t>(s)];
        for (size_t k = 0; k < labels.size(); ++k) {
          Label l = labels[k];
          double seconds = 0, bytes = 0;
          for (const LayerPlan& r : end_rows(s, l.grad_bucket_bytes)) {
            seconds += r.comm_seconds;
            bytes += r.comm_bytes_per_core;
          }
          l.comm += seconds;
          l.comm_bytes += bytes;
          l.time += seconds;
          l.max_bytes = std::max(l.max_bytes, fsdp_transient(l.unit_before, l.last_unit, 0));
          l.step = {static_cast<int32_t>(k), static_cast<int8_t>(s), -1};
          finals.push_back(l);
        }
      }
      return finals;
    };
    const std::vector<Label> fast_finals = finals_of(fastest);
    const std::vector<Label> small_finals = finals_of(smallest_chain);
    if (small_finals.empty()) {  // no chain of allowed layouts (not reached: every R/S input is
                                 // allowed)
      c.feasible = false;
      c.infeasible_reason = "no sequence of the allowed layer shardings connects";
      return;
    }
    c.input_bytes_per_core = byte_count(input_bytes, "input batch", c.name);
    const Label* best_fit = nullptr;
    const Label* smallest = nullptr;
    for (const Label& l : small_finals) {
      if (smallest == nullptr || l.total_bytes() < smallest->total_bytes() ||
          (l.total_bytes() == smallest->total_bytes() && l.time < smallest->time)) {
        smallest = &l;
      }
    }
    for (const Label& l : fast_finals) {
      if (l.total_bytes() + input_bytes <= static_cast<double>(limit) &&
          (best_fit == nullptr || l.time < best_fit->time)) {
        best_fit = &l;
      }
    }
    c.fits = best_fit != nullptr;
    c.tensor_splits_nothing = t_ > 1;
    c.min_hbm_bytes_per_core = byte_count(smallest->total_bytes() + input_bytes, "HBM", c.name);
    const Label& chosen = best_fit != nullptr ? *best_fit : *smallest;
    const Chain& chain = best_fit != nullptr ? fastest : smallest_chain;
    c.compute_seconds = chosen.compute;
    c.comm_seconds = chosen.comm;
    c.step_seconds = chosen.time;
    c.comm_bytes_per_core = chosen.comm_bytes;
    (void)byte_count(chosen.comm_bytes, "communication", c.name);  // to_json's llround needs it
    c.hbm_bytes_per_core = byte_count(chosen.total_bytes(), "HBM", c.name);
    c.param_bytes_per_core = byte_count(chosen.param_state_bytes, "parameter state", c.name);
    c.activation_bytes_per_core = byte_count(chosen.activation_bytes, "activations", c.name);
    c.transient_bytes_per_core = byte_count(chosen.max_bytes, "transient buffers", c.name);
    c.after_layers = end_rows(chosen.step.parent_state, chosen.grad_bucket_bytes);
    // Walk back, recomputing each layer's costs from its option and the state before it (the
    // same sums the DP added).
    c.layers.assign(n, LayerPlan{});
    int index = chosen.step.parent, state = chosen.step.parent_state;
    for (size_t i = n; i-- > 0;) {
      const Step st = chain.steps[i][static_cast<size_t>(state)][static_cast<size_t>(index)];
      const Option& op = layers[i].options[static_cast<size_t>(st.option)];
      const LayerCost& lc = layers[i].costs[static_cast<size_t>(st.option)];
      double fwd_bwd_seconds = 0, bytes = 0;
      std::string reshard;
      transition(i == 0 ? 'R' : kStates[st.parent_state], op.in, act_bytes(m_.layers[i].in),
                 &fwd_bwd_seconds, &bytes, &reshard);
      LayerPlan& p = c.layers[i];
      p.layer = m_.layers[i].name;
      p.choice = op.choice;
      p.in_state = op.in;
      p.out_state = op.out;
      p.reshard_in = reshard;
      p.compute_seconds = lc.compute_seconds;
      p.comm_seconds = lc.comm_seconds + fwd_bwd_seconds;
      p.comm_bytes_per_core = lc.comm_bytes + bytes;
      if (p.choice != "replicated") c.tensor_splits_nothing = false;
      index = st.parent;
      state = st.parent_state;
    }
  }

  int64_t tensor_size() const { return t_; }
  double tensor_d() const { return static_cast<double>(t_); }

 private:
  /// A layer's options over the tensor axes and its costs under each.
  struct LayerOptions {
    std::vector<Option> options;
    std::vector<LayerCost> costs;
  };

  /// What a DP over the chain keeps per layer and state.
  enum class Keep {
    /// Every label that may lead to the fastest plan within the limit (keep_pareto), less those
    /// that cannot fit whatever the rest of the chain does.
    kFastestFit,
    /// The labels that may lead to the plan of fewest bytes, and of those the fastest
    /// (keep_smallest): at most one per unit_key.
    kSmallest,
  };

  /// One DP's result: the labels after the last layer, per output state, and per layer and
  /// output state how each kept label was reached (index k of steps[i][s] is label k after
  /// layer i in state s).
  struct Chain {
    std::array<std::vector<Label>, 3> last;
    std::vector<std::array<std::vector<Step>, 3>> steps;
  };

  /// Runs the DP over the chain: each layer extends every kept label of the previous layer by
  /// each option (with the reshard between them), then keeps what `keep` keeps. `limit` and
  /// `input_bytes` (bytes per core) are the HBM limit and the input batch counted against it.
  ///
  /// Regression (adversarial pass adv8, H5): the frontier of a long chain of dense layers grows
  /// with the chain (each split or replicated choice a new time/HBM trade-off). Three rules keep
  /// kFastestFit exact and fast:
  ///   - a label is safe when even the largest bytes the rest of the chain can add keep it within
  ///     the limit: any completion of a slower label in the same state is then beaten by the same
  ///     completion of the safe one (time and bytes add up the same way from a state), so the
  ///     slower labels go (far from the limit: 1,000 layers on 2x4 took 105 s before this rule);
  ///   - a label that cannot fit even if the rest of the chain adds the least it can (each later
  ///     layer's smallest option, no reshard, no transient peak beyond what its units already
  ///     imply) goes: no completion of it fits, and no label it beats could fit either;
  ///   - the frontier is built per layer by sorting (keep_pareto), not by inserting labels one
  ///     at a time: near the limit the frontier still holds O(L) labels for L layers (every
  ///     count of split layers that can still fit), and insertion cost O(L^3) over the chain
  ///     (1,000 layers under --hbm-bytes 200K: 114 s); sorting costs O(L^2 log L).
  /// The labels kept that can fit are the same, in the same order, as the one-by-one Pareto
  /// insertion of every label, so the winner and its plan are the same.
  Chain run_chain(const std::vector<LayerOptions>& layers, Keep keep, double limit,
                  double input_bytes) const {
    const size_t n = layers.size();
    // Per layer i, over the layers after it: the most and the least bytes they can add, and
    // their largest FSDP unit.
    std::vector<double> rest_add(n, 0.0), rest_min_add(n, 0.0), rest_unit(n, 0.0);
    for (size_t i = n; i-- > 1;) {
      double add = 0, min_add = std::numeric_limits<double>::infinity(), unit = 0;
      for (const LayerCost& lc : layers[i].costs) {
        add = std::max(add, lc.add_bytes + act_bytes(m_.layers[i].in));  // + the largest reshard
        min_add = std::min(min_add, lc.add_bytes);
        unit = std::max(unit, lc.unit_bytes);
      }
      rest_add[i - 1] = rest_add[i] + add;
      rest_min_add[i - 1] = rest_min_add[i] + min_add;
      rest_unit[i - 1] = std::max(rest_unit[i], unit);
    }
    Chain chain;
    chain.steps.resize(n);
    std::array<std::vector<Label>, 3> prev, next;
    for (size_t i = 0; i < n; ++i) {
      const ModelLayer& l = m_.layers[i];
      for (std::vector<Label>& v : next) v.clear();
      for (size_t o = 0; o < layers[i].options.size(); ++o) {
        const Option& op = layers[i].options[o];
        const LayerCost& lc = layers[i].costs[o];
        std::vector<Label>& out = next[static_cast<size_t>(state_index(op.out))];
        for (int s = 0; s < (i == 0 ? 1 : 3); ++s) {
          const char from = i == 0 ? 'R' : kStates[s];
          double fwd_bwd_seconds = 0, bytes = 0;
          std::string reshard;
          if (!transition(from, op.in, act_bytes(l.in), &fwd_bwd_seconds, &bytes, &reshard)) {
            continue;
          }
          // A reshard makes a new activation that the layer's backward reads: saved too.
          const double resharded =
              from == op.in ? 0.0 : act_bytes(l.in) / (op.in == 'S' ? tensor_d() : 1.0);
          const double layer_comm = lc.comm_seconds + fwd_bwd_seconds;
          const double layer_comm_bytes = lc.comm_bytes + bytes;
          const size_t count = i == 0 ? 1 : prev[static_cast<size_t>(s)].size();
          for (size_t k = 0; k < count; ++k) {
            Label nl = i == 0 ? Label{} : prev[static_cast<size_t>(s)][k];
            nl.step = {i == 0 ? -1 : static_cast<int32_t>(k), static_cast<int8_t>(s),
                       static_cast<int8_t>(o)};
            nl.compute += lc.compute_seconds;
            nl.comm += layer_comm;
            nl.comm_bytes += layer_comm_bytes;
            nl.time = nl.compute + nl.comm;
            nl.add_bytes += lc.add_bytes + resharded;
            if (lc.unit_bytes > 0) {  // the previous unit's neighbours are now known
              nl.max_bytes = std::max(nl.max_bytes,
                                      fsdp_transient(nl.unit_before, nl.last_unit, lc.unit_bytes));
              nl.unit_before = nl.last_unit;
              nl.last_unit = lc.unit_bytes;
            }
            nl.param_state_bytes += lc.param_state_bytes;
            nl.activation_bytes += lc.activation_bytes + resharded;
            nl.grad_bucket_bytes += lc.grad_bucket_bytes;
            out.push_back(nl);
          }
        }
      }
      for (size_t s = 0; s < 3; ++s) {
        std::vector<Label>& labels = next[s];
        if (keep == Keep::kSmallest) {
          keep_smallest(labels);
        } else {
          // Every FSDP transient still to come is u2 + 2 u1 + u3 (fsdp_transient) of units among
          // the label's last two and the rest's: at most 4 times the largest of them.
          const auto safe = [&](const Label& x) {
            const double unit = std::max({x.last_unit, x.unit_before, rest_unit[i]});
            return x.add_bytes + rest_add[i] + std::max(x.max_bytes, 4 * unit) + input_bytes <=
                   limit;
          };
          // The least bytes any completion needs: the transient of the last unit is at least
          // its value with no unit after it. A relative margin of 1e-9 keeps rounding in these
          // sums from dropping a label that fits.
          const auto cannot_fit = [&](const Label& x) {
            const double least =
                x.add_bytes + rest_min_add[i] +
                std::max(x.max_bytes, fsdp_transient(x.unit_before, x.last_unit, 0)) + input_bytes;
            return least > limit * (1 + 1e-9);
          };
          std::erase_if(labels, cannot_fit);
          keep_pareto(labels, safe);
        }
        chain.steps[i][s].reserve(labels.size());
        for (const Label& x : labels) chain.steps[i][s].push_back(x.step);
      }
      std::swap(prev, next);
    }
    chain.last = std::move(prev);
    return chain;
  }

  double act_bytes(int64_t features) const { return tokens_ * static_cast<double>(features) * e_; }
  CollectiveCost tp(CollectiveKind k, double bytes) const {
    return cost_.collective(k, bytes, tp_pos_, tp_sizes_);
  }

  /// The sharding the constraints require of `l` under tensor axes; "" for any.
  std::string required(const ModelLayer& l) const {
    if (t_ <= 1 || !constraints_.tensor_sharding) return {};
    return constraints_.tensor_sharding(l);
  }

  static std::string layer_dims(const ModelLayer& l) {
    switch (l.kind) {
      case LayerKind::kDense:
        return "in " + std::to_string(l.in) + ", out " + std::to_string(l.out);
      case LayerKind::kAttention:
        return "d_model " + std::to_string(l.out) + ", heads " + std::to_string(l.heads);
      case LayerKind::kEmbedding:
        return "vocab " + std::to_string(l.vocab) + ", d_model " + std::to_string(l.out);
      default:
        return "dim " + std::to_string(l.out);
    }
  }

  /// The layer's options over the tensor axes, narrowed to the required one when constrained.
  std::vector<Option> options(const ModelLayer& l) const {
    std::vector<Option> o = all_options(l);
    const std::string want = required(l);
    if (!want.empty()) {
      std::erase_if(o, [&](const Option& x) { return want != x.choice; });
    }
    return o;
  }

  std::vector<Option> all_options(const ModelLayer& l) const {
    std::vector<Option> o;
    const bool split = t_ > 1;
    switch (l.kind) {
      case LayerKind::kDense:
        o.push_back({"replicated", 'R', 'R', false});
        if (split && l.out % t_ == 0) o.push_back({"column", 'R', 'S', true});
        if (split && l.in % t_ == 0) o.push_back({"row", 'S', 'P', false});
        break;
      case LayerKind::kElementwise:
        o.push_back({"replicated", 'R', 'R', false});
        if (split && l.out % t_ == 0) o.push_back({"sharded", 'S', 'S', false});
        break;
      case LayerKind::kLayerNorm:
        o.push_back({"replicated", 'R', 'R', false});
        break;
      case LayerKind::kAttention:
        o.push_back({"replicated", 'R', 'R', false});
        if (split && l.heads % t_ == 0) o.push_back({"heads", 'R', 'P', true});
        break;
      case LayerKind::kEmbedding:
        o.push_back({"replicated", 'R', 'R', false});
        if (split && l.vocab % t_ == 0) o.push_back({"vocab", 'R', 'P', false});
        if (split && l.out % t_ == 0) o.push_back({"features", 'R', 'S', false});
        break;
    }
    return o;
  }

  /// Reshard from `from` to `to` of an activation of `bytes` (over the tensor group): adds the
  /// forward and backward collectives' time and bytes. False when the transition is not allowed.
  bool transition(char from, char to, double bytes, double* seconds, double* sent,
                  std::string* name) const {
    *seconds = 0;
    *sent = 0;
    if (from == to) return true;
    if (to == 'P') return false;
    const auto add = [&](CollectiveKind k) {
      const CollectiveCost c = tp(k, bytes);
      *seconds += c.seconds;
      *sent += c.sent_bytes_per_core;
    };
    if (from == 'P' && to == 'R') {
      add(CollectiveKind::kAllReduce);
      *name = "all_reduce";
    } else if (from == 'P' && to == 'S') {
      add(CollectiveKind::kReduceScatter);
      add(CollectiveKind::kAllGather);
      *name = "reduce_scatter";
    } else if (from == 'S' && to == 'R') {
      add(CollectiveKind::kAllGather);
      add(CollectiveKind::kReduceScatter);
      *name = "all_gather";
    } else {  // R -> S
      add(CollectiveKind::kAllGather);
      *name = "dynamic_slice";
    }
    return true;
  }

  /// The sizes the layer's costs read: tensor cores t, local tokens T, sequence length S, the
  /// layer's split s (t when its weights are split, else 1), its in and out features.
  struct Dims {
    double t, T, S, s, in, out;
  };
  Dims dims(const ModelLayer& l, const Option& op) const {
    const double t = static_cast<double>(t_);
    return {t,
            tokens_,
            static_cast<double>(m_.seq_len),
            std::string(op.choice) != "replicated" ? t : 1.0,
            static_cast<double>(l.in),
            static_cast<double>(l.out)};
  }

  /// Seconds per core of one training step's kernels of layer `l` under `op` (forward and
  /// backward, as vtpu's trainers run them) on a profile with kernel rates (cost_model.h):
  ///   dense      GEMMs (T, in, out) forward, (in, T, out) weight gradient, (T, out, in) input
  ///              gradient (not for the first layer: its input needs none), in/out the local
  ///              shard's; bias add and bias gradient: 2 T out elementwise passes
  ///   elementwise 2 T dim passes (forward, backward) and 2 T dim transcendentals_per_element
  ///              transcendentals (forward, and the backward recomputes them: GELU's tanh)
  ///   layer_norm T rows of dim through the measured layer norm (forward + backward)
  ///   attention  GEMMs (T, d, 3d/t), (T, d/t, d) forward and their two gradients each; per
  ///              sequence and local head: scores (S, dh, S) and context (S, S, dh) forward,
  ///              4 (S, S, dh)-sized GEMMs backward; softmax rows (forward causal + backward);
  ///              bias adds and residual adds as passes
  ///   embedding  gather and scatter-add: 2 T d passes
  /// and, after the last layer, the softmax cross-entropy's rows of its output features.
  /// Every GEMM is priced warm or cold by the layer's working set (`working_set_bytes`, bytes,
  /// as layer_cost computes it for the memory term): the layer's weights, input and output
  /// either stay in the cache level between its kernels or they do not (cost_model.h).
  double kernel_seconds(const ModelLayer& l, const Option& op, bool first, bool last,
                        double working_set_bytes) const {
    const std::string choice = op.choice;
    const auto [t, T, S, s, in, out] = dims(l, op);
    const std::string& dt = m_.dtype;
    const auto gemm = [&](double m, double k, double n, double count = 1) {
      return cost_.gemm_seconds(m, k, n, dt, count, working_set_bytes);
    };
    const auto pass = [&](double elements) { return cost_.elementwise_seconds("pass", elements); };
    double sec = 0;
    switch (l.kind) {
      case LayerKind::kDense: {
        const double kin = choice == "row" ? in / t : in;
        const double nout = choice == "column" ? out / t : out;
        sec = gemm(T, kin, nout) + gemm(kin, T, nout) + (first ? 0.0 : gemm(T, nout, kin));
        if (l.bias) sec += pass(2 * T * nout);
        break;
      }
      case LayerKind::kElementwise: {
        const double e = T * out / s;
        sec = pass(2 * e);
        if (l.transcendentals_per_element > 0) {
          sec += cost_.elementwise_seconds("transcendental", 2 * l.transcendentals_per_element * e);
        }
        break;
      }
      case LayerKind::kLayerNorm:
        sec = cost_.row_seconds("layer_norm", T, out);
        break;
      case LayerKind::kAttention: {
        const double dl = out / s, heads = static_cast<double>(l.heads) / s;
        const double dh = out / static_cast<double>(l.heads);
        const double problems = bl_ * heads;  // (sequence, local head) pairs
        sec = gemm(T, out, 3 * dl) + gemm(out, T, 3 * dl) + (first ? 0.0 : gemm(T, 3 * dl, out));
        sec += gemm(T, dl, out) + gemm(dl, T, out) + gemm(T, out, dl);
        sec += gemm(S, dh, S, problems) + gemm(S, S, dh, problems);      // forward
        sec += gemm(S, S, dh, 3 * problems) + gemm(S, dh, S, problems);  // backward
        sec += cost_.row_seconds("softmax", problems * S, S);
        // qkv bias add and gradient, output bias and residual adds forward and backward.
        sec += pass(2 * T * 3 * dl + 4 * T * out);
        break;
      }
      case LayerKind::kEmbedding:
        sec = pass(2 * T * (choice == "features" ? out / t : out));
        break;
    }
    if (last) {  // softmax cross-entropy over the output features (sharded: the local ones)
      sec += cost_.row_seconds("cross_entropy", T, op.out == 'S' ? out / t : out);
    }
    return sec;
  }

  /// `first`: the model's first layer, whose input (data or token ids) needs no gradient, so a
  /// split first layer has no backward all-reduce of its input gradient (nor, with kernel rates,
  /// an input-gradient GEMM); `last`: the layer the loss reads.
  LayerCost layer_cost(const ModelLayer& l, const Option& op, bool first, bool last) const {
    const std::string choice = op.choice;
    const auto [t, T, S, s, in, out] = dims(l, op);
    double flops = 0, params = 0, act = 0;  // per core, elements for params/act
    switch (l.kind) {
      case LayerKind::kDense:
        flops = 2 * T * in * out / s;
        params = in * out / s + (l.bias ? (choice == "column" ? out / t : out) : 0);
        act = T * (op.out == 'S' ? out / t : out);
        break;
      case LayerKind::kElementwise:
        flops = l.flops_per_element * T * out / s;
        act = T * out / s;
        break;
      case LayerKind::kLayerNorm:
        flops = 8 * T * out;
        params = 2 * out;
        act = T * out + 2 * T;
        break;
      case LayerKind::kAttention: {
        const double h = static_cast<double>(l.heads);
        flops = (8 * T * out * out + 4 * T * S * out + 5 * bl_ * h * S * S) / s;
        params = (4 * out * out + (l.bias ? 3 * out : 0)) / s + (l.bias ? out : 0);
        act = (3 * T * out + bl_ * h * S * S + T * out) / s + T * out;
        break;
      }
      case LayerKind::kEmbedding: {
        const double vocab = static_cast<double>(l.vocab), pos = static_cast<double>(l.positions);
        flops = T * out / (choice == "features" ? t : 1.0);
        if (choice == "vocab")
          params = vocab * out / t + pos * out;
        else
          params = (vocab + pos) * out / s;
        act = T * (choice == "features" ? out / t : out);
        break;
      }
    }
    LayerCost c;
    const double f = static_cast<double>(f_);
    const double param_bytes = params * e_;  // tensor-local, before FSDP sharding
    // FSDP's flat parameter is padded to a multiple of the fsdp cores (as `train fsdp` and
    // PyTorch's FlatParameter): each core's shard of it, and of its gradient and optimizer state.
    const double shard_bytes = f_ > 1 ? std::ceil(params / f) * e_ : param_bytes;
    const double in_bytes =
        (l.kind == LayerKind::kEmbedding ? T * 4 : T * in * e_) / (op.in == 'S' ? t : 1.0);
    // Forward reads the weights and the input and writes the output; backward's two matmuls
    // touch each again: 3 x the working set (weights + input + output), which decides the memory
    // level on a profile with a cache (cost_model.h), and whether the layer's GEMMs run warm.
    const double working_set = param_bytes + in_bytes + act * e_;
    const double traffic = 3 * working_set;
    // A profile with measured kernel rates (this machine) prices the layer's kernels one by one
    // (kernel_seconds), under the same memory roofline; the TPU profiles price its FLOPs at the
    // peak, as before.
    c.compute_seconds = cost_.has_kernel_rates()
                            ? std::max(kernel_seconds(l, op, first, last, working_set),
                                       cost_.memory_seconds(traffic, working_set))
                            : cost_.op_seconds(3 * flops, traffic, working_set, m_.dtype);
    // Optimizer update: memory-bound, words read + written per local parameter; its working set
    // is the local parameters, gradients and optimizer state.
    const int k = m_.optimizer_state_factor();
    const double words = k == 2 ? 7 : k == 1 ? 5 : 3;
    c.compute_seconds += cost_.memory_seconds(words * param_bytes / f, (2.0 + k) * param_bytes / f);
    if (op.bwd_input_all_reduce && !first) {
      const CollectiveCost ar = tp(CollectiveKind::kAllReduce, T * in * e_);
      c.comm_seconds += ar.seconds;
      c.comm_bytes += ar.sent_bytes_per_core;
    }
    if (f_ > 1 && param_bytes > 0) {
      const CollectiveCost ag =
          cost_.collective(CollectiveKind::kAllGather, param_bytes, fsdp_pos_, fsdp_sizes_);
      const CollectiveCost rs =
          cost_.collective(CollectiveKind::kReduceScatter, param_bytes, fsdp_pos_, fsdp_sizes_);
      c.comm_seconds += 2 * ag.seconds + rs.seconds;
      c.comm_bytes += 2 * ag.sent_bytes_per_core + rs.sent_bytes_per_core;
      c.unit_bytes = shard_bytes * f;
    }
    if (d_ > 1 && param_bytes > 0) {
      // Gradients go into one bucket per step (as DDP and vtpu's trainers do): the layer's
      // gradient bytes join it, and plan() prices the bucket's one all-reduce
      // (price_gradient_bucket, the "(gradient bucket)" row). Bytes sent are linear in the size.
      const CollectiveCost ar =
          cost_.collective(CollectiveKind::kAllReduce, param_bytes / f, dp_pos_, dp_sizes_);
      c.comm_bytes += ar.sent_bytes_per_core;
      c.grad_bucket_bytes = param_bytes / f;
    }
    c.param_state_bytes = (2.0 + k) * shard_bytes;
    c.activation_bytes = act * e_;
    c.add_bytes = c.param_state_bytes + c.activation_bytes;
    return c;
  }

  /// Seconds of the data axes' all-reduce of a gradient bucket of `bytes` per core.
  double bucket_seconds(double bytes) const {
    return cost_.collective(CollectiveKind::kAllReduce, std::max(bytes, 1.0), dp_pos_, dp_sizes_)
        .seconds;
  }

  /// Prices the gradient bucket (as DDP and vtpu's trainers run it: one all-reduce of every
  /// gradient per step) so that the DP over layers stays additive: each layer's option pays
  /// bucket_rate_ seconds per byte of its gradients, where bucket_rate_ is the bucket's cost
  /// without its latency, (t(B) - 2 alpha) / B, at B = the bucket of the options with the most
  /// gradient bytes (replicated layers), and the "(gradient bucket)" row after the layers holds
  /// t(B_chosen) - bucket_rate_ x B_chosen, so that the candidate's total is exactly the
  /// one all-reduce t(B_chosen). A straight alpha + beta x gives each layer its bandwidth term and
  /// the row 2 alpha, as before; on measured curves (calibrated profiles), which are not straight,
  /// summing t(B_layer) - 2 alpha per layer priced the transformer's 2x4 bucket at 3.4x the one
  /// all-reduce of its 483 KB (new-user pass nu13, NU63).
  void price_gradient_bucket(std::vector<LayerOptions>& layers) {
    bucket_rate_ = 0;
    if (d_ <= 1) return;
    double total = 0;
    for (const LayerOptions& lo : layers) {
      double most = 0;
      for (const LayerCost& lc : lo.costs) most = std::max(most, lc.grad_bucket_bytes);
      total += most;
    }
    if (total <= 0) return;
    const CollectiveCost ar =
        cost_.collective(CollectiveKind::kAllReduce, total, dp_pos_, dp_sizes_);
    bucket_rate_ = std::max(0.0, ar.seconds - 2 * ar.alpha_seconds) / total;
    for (LayerOptions& lo : layers)
      for (LayerCost& lc : lo.costs) lc.comm_seconds += bucket_rate_ * lc.grad_bucket_bytes;
  }

  const ModelGraph& m_;
  CostModel cost_;  // the mesh's, with the step's footprint once plan() knows it
  const PlanConstraints& constraints_;
  std::vector<int> dp_pos_, tp_pos_, fsdp_pos_;
  std::vector<int64_t> dp_sizes_, tp_sizes_, fsdp_sizes_;
  int64_t d_ = 1, t_ = 1, f_ = 1;
  double e_ = 4;
  double bl_ = 0, tokens_ = 0;
  double bucket_rate_ = 0;  // seconds per gradient byte (price_gradient_bucket)
};

std::string axes_list(const std::vector<std::string>& axes) { return join(axes, ","); }

// Regression (new-user pass nu8, N10): one axis was written as a string ("data": "x"), where
// docs/SHARDING.md shows lists; always a list now (the plan reader takes both).
nlohmann::json axis_json(const std::vector<std::string>& axes) {
  if (axes.empty()) return nullptr;
  return axes;
}

}  // namespace

void check_planner_limits(const Mesh& mesh, size_t num_layers) {
  const auto active =
      static_cast<size_t>(std::ranges::count_if(mesh.shape(), [](int64_t s) { return s > 1; }));
  // Regression (adversarial pass adv7, G6): the 3^k candidates were unbounded: --mesh of 12 axes
  // of 2 took 40 s and 0.9 GB, and 16 axes (65,536 devices, within vtpu plan's device bound)
  // would be 43 million candidates.
  if (active > static_cast<size_t>(kMaxPlannedAxes)) {
    throw InvalidArgumentError(abbreviate(mesh.to_string()) + " has " + std::to_string(active) +
                               " axes of size > 1, so the planner would try 3^" +
                               std::to_string(active) + " strategies (expected at most " +
                               std::to_string(kMaxPlannedAxes) +
                               " such axes; merge axes that play one role into one)");
  }
  uint64_t strategies = 1;  // 3^8 at most
  for (size_t i = 0; i < active; ++i) strategies *= 3;
  // num_layers is at most 2^16 in a model file (kMaxLayers); checked arithmetic all the same.
  uint64_t evaluations = 0;
  const bool overflow =
      __builtin_mul_overflow(strategies, static_cast<uint64_t>(num_layers), &evaluations);
  if (overflow || evaluations > kMaxPlanLayerEvaluations) {
    throw InvalidArgumentError(
        std::to_string(strategies) + (strategies == 1 ? " strategy x " : " strategies x ") +
        std::to_string(num_layers) +
        " layers = " + (overflow ? std::string("more than 2^64") : std::to_string(evaluations)) +
        " layer evaluations exceeds the planner's budget of " +
        std::to_string(kMaxPlanLayerEvaluations) + " (expected at most " +
        std::to_string(kMaxPlanLayerEvaluations / strategies) + " layers on a mesh with " +
        std::to_string(active) + (active == 1 ? " axis" : " axes") + " of size > 1" +
        (active > 0 ? ", or fewer such axes)" : ")"));
  }
}

AutoShardingPlan plan_auto_sharding(const ModelGraph& model, const std::vector<int64_t>& mesh_shape,
                                    const std::vector<std::string>& axis_names,
                                    const CostModel& mesh_cost, uint64_t hbm_limit_bytes,
                                    const PlanConstraints& constraints) {
  const Mesh mesh(mesh_shape, axis_names);  // validates
  // Every strategy keeps all of the mesh's cores busy (cost_model.h: oversubscription and cache
  // sharing on a host profile; nothing changes on a TPU profile).
  const CostModel cost = mesh_cost.for_cores(static_cast<int>(mesh.size()));
  AutoShardingPlan plan;
  plan.model = model;
  plan.mesh_shape = mesh_shape;
  plan.axis_names = axis_names;
  plan.hardware = cost.profile().name;
  plan.profile = mesh_cost.profile();
  plan.hbm_limit_bytes = hbm_limit_bytes != 0 ? hbm_limit_bytes : cost.hbm_bytes_per_core();
  // A host profile's "HBM" is the host's RAM, which the mesh's virtual cores share.
  if (hbm_limit_bytes == 0 && cost.profile().host_cpus > 0) {
    plan.host_ram_bytes = cost.hbm_bytes_per_core();
    plan.hbm_limit_bytes = plan.host_ram_bytes / static_cast<uint64_t>(mesh.size());
  }
  // Adversarial pass adv15, ADV26: a profile with "hbm_bytes": 1 gave "fits on no strategy within
  // 0 B of HBM per core", a limit that --hbm-bytes 0 refuses as a usage error.
  if (plan.hbm_limit_bytes == 0) {
    const HardwareProfile& p = mesh_cost.profile();
    throw InvalidArgumentError(
        "hardware profile '" + p.name + "': hbm_bytes " + std::to_string(p.hbm_bytes) +
        " leaves 0 bytes of HBM per core (" +
        (p.host_cpus > 0 ? "the host's RAM shared by the mesh's " + count_text(mesh.size(), "core")
                         : std::to_string(p.cores_per_chip) + " cores per chip") +
        "; expected at least 1 byte per core, or an explicit HBM limit per core: vtpu plan "
        "--hbm-bytes)");
  }
  plan.oversubscription = cost.oversubscription();
  cost.peak_flops_per_core(model.dtype);  // a dtype the profile lacks is an error up front

  check_planner_limits(mesh, model.layers.size());
  std::vector<size_t> active;  // axes of size > 1
  for (size_t a = 0; a < mesh_shape.size(); ++a)
    if (mesh_shape[a] > 1) active.push_back(a);
  size_t combos = 1;
  for (size_t i = 0; i < active.size(); ++i) combos *= 3;
  static const AxisRole kRoles[3] = {AxisRole::kData, AxisRole::kTensor, AxisRole::kFsdp};
  for (size_t code = 0; code < combos; ++code) {
    PlanCandidate c;
    c.roles.assign(mesh_shape.size(), AxisRole::kNone);
    size_t rest = code;
    for (size_t a : active) {
      c.roles[a] = kRoles[rest % 3];
      rest /= 3;
    }
    for (size_t a = 0; a < mesh_shape.size(); ++a) {
      if (c.roles[a] == AxisRole::kData) c.data_axes.push_back(axis_names[a]);
      if (c.roles[a] == AxisRole::kTensor) c.tensor_axes.push_back(axis_names[a]);
      if (c.roles[a] == AxisRole::kFsdp) c.fsdp_axes.push_back(axis_names[a]);
    }
    std::vector<std::string> parts;
    if (!c.data_axes.empty()) parts.push_back("dp(" + axes_list(c.data_axes) + ")");
    if (!c.fsdp_axes.empty()) parts.push_back("fsdp(" + axes_list(c.fsdp_axes) + ")");
    if (!c.tensor_axes.empty()) parts.push_back("tp(" + axes_list(c.tensor_axes) + ")");
    c.name = parts.empty() ? "single core" : join(parts, "+");
    StrategyPlanner sp(model, cost, mesh_shape, c.roles, constraints);
    c.infeasible_reason = sp.infeasible(&c.infeasible_by_constraints);
    c.feasible = c.infeasible_reason.empty();
    if (c.feasible) sp.plan(plan.hbm_limit_bytes, c);
    if (c.feasible && constraints.unsupported) {
      c.unsupported_reason = constraints.unsupported(c);
      if (!c.unsupported_reason.empty() && !constraints.runner.empty()) {
        c.unsupported_reason = constraints.runner + ": " + c.unsupported_reason;
      }
    }
    plan.candidates.push_back(std::move(c));
  }
  // Winner: fastest that fits; ties: fewer bytes sent, then less HBM.
  const auto better = [](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
    if (a.comm_bytes_per_core != b.comm_bytes_per_core)
      return a.comm_bytes_per_core < b.comm_bytes_per_core;
    return a.hbm_bytes_per_core < b.hbm_bytes_per_core;
  };
  // Order: runnable and fitting, then fitting but not runnable, then not fitting, then
  // infeasible (kept in enumeration order).
  const auto rank = [](const PlanCandidate& k) {
    if (!k.feasible) return 3;
    if (!k.fits) return 2;
    return k.unsupported_reason.empty() ? 0 : 1;
  };
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [&](const PlanCandidate& a, const PlanCandidate& b) {
                     const int ra = rank(a), rb = rank(b);
                     if (ra != rb) return ra < rb;
                     if (ra == 3) return false;
                     return better(a, b);
                   });
  if (!plan.candidates.empty() && rank(plan.candidates[0]) == 0) plan.winner = 0;
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    PlanCandidate& c = plan.candidates[i];
    if (static_cast<int>(i) == plan.winner) continue;
    if (!c.feasible) {
      c.why_lost = "cannot run: " + c.infeasible_reason;
    } else if (!c.unsupported_reason.empty()) {
      c.why_lost = "cannot run: " + c.unsupported_reason;
    } else if (!c.fits) {
      c.why_lost = "exceeds HBM by " +
                   format_bytes(c.min_hbm_bytes_per_core - plan.hbm_limit_bytes) + " (needs " +
                   format_bytes(c.min_hbm_bytes_per_core) + " per core)";
    } else if (plan.winner < 0) {
      c.why_lost = "";  // not reached: a fitting, runnable candidate is the winner
    } else {
      const PlanCandidate& w = plan.candidates[static_cast<size_t>(plan.winner)];
      const double pct = 100.0 * (c.step_seconds / w.step_seconds - 1.0);
      if (pct < 0.05) {
        // What `better` decided on (new-user pass nu11, NU35: identical rows were said to send
        // more bytes or use more HBM).
        c.why_lost = "ties with the winner (" +
                     std::string(c.step_seconds > w.step_seconds ? "under 0.05% slower"
                                 : c.comm_bytes_per_core > w.comm_bytes_per_core
                                     ? "same time; sends more bytes"
                                 : c.hbm_bytes_per_core > w.hbm_bytes_per_core
                                     ? "same time and bytes; uses more HBM"
                                     : "exactly: same time, bytes and HBM; the first listed wins") +
                     ")";
      } else {
        char b[64];
        std::snprintf(b, sizeof b, "%.1f%% slower than the winner", pct);
        c.why_lost = b;
      }
    }
  }
  return plan;
}

std::string canonical_strategy_name(const std::string& name) {
  // The roles: the parts between "+" at parenthesis depth 0.
  std::vector<std::string> parts(1);
  int depth = 0;
  for (char ch : name) {
    if (ch == '(') ++depth;
    if (ch == ')') --depth;
    if (ch == '+' && depth == 0) {
      parts.emplace_back();
    } else {
      parts.back() += ch;
    }
  }
  if (parts.size() < 2) return name;
  static const std::vector<std::string> kOrder = {"dp(", "fsdp(", "tp("};  // as the planner names
  std::vector<std::pair<size_t, std::string>> ranked;
  for (std::string& part : parts) {
    const auto kind = std::ranges::find_if(
        kOrder, [&](const std::string& prefix) { return part.starts_with(prefix); });
    if (kind == kOrder.end() || !part.ends_with(")")) return name;
    ranked.emplace_back(static_cast<size_t>(kind - kOrder.begin()), std::move(part));
  }
  std::ranges::sort(ranked, {}, &std::pair<size_t, std::string>::first);
  for (size_t i = 1; i < ranked.size(); ++i) {
    if (ranked[i].first == ranked[i - 1].first) return name;  // a role named twice
  }
  std::string out;
  for (const auto& [kind, part] : ranked) out += (out.empty() ? "" : "+") + part;
  return out;
}

std::vector<std::string> AutoShardingPlan::candidate_names() const {
  std::vector<std::string> names;
  for (const PlanCandidate& c : candidates) names.push_back(c.name);
  return names;
}

void AutoShardingPlan::choose(const std::string& name, bool allow_over_hbm) {
  // Regression (new-user pass nu10, NU16): 'tp(model)+dp(data)' was not a candidate because the
  // planner names it 'dp(data)+tp(model)'; the order of the roles does not matter.
  const std::string canonical = canonical_strategy_name(name);
  const auto it = std::find_if(candidates.begin(), candidates.end(),
                               [&](const PlanCandidate& c) { return c.name == canonical; });
  if (it == candidates.end()) {
    throw InvalidArgumentError("strategy '" + abbreviate(name) + "' is not a candidate of model '" +
                               model.name + "' on " +
                               abbreviate(Mesh(mesh_shape, axis_names).to_string()) +
                               " (expected one of: " + abbreviate(join(candidate_names())) + ")");
  }
  const PlanCandidate& c = *it;
  if (!c.feasible) {
    throw FailedPreconditionError("strategy '" + name + "' of model '" + model.name +
                                  "' cannot run: " + c.infeasible_reason);
  }
  if (!c.unsupported_reason.empty()) {
    throw FailedPreconditionError("strategy '" + name + "' of model '" + model.name +
                                  "' cannot run: " + c.unsupported_reason);
  }
  if (!c.fits && !allow_over_hbm) {
    throw ResourceExhaustedError(
        "strategy '" + name + "' of model '" + model.name + "' does not fit: it needs " +
        format_bytes_exact(c.min_hbm_bytes_per_core) + " of HBM per core, over the limit of " +
        format_bytes_exact(hbm_limit_bytes));
  }
  pinned = static_cast<int>(it - candidates.begin());
}

void AutoShardingPlan::require_fit() const {
  if (winner >= 0 || pinned >= 0) return;
  const PlanCandidate* best = nullptr;  // the smallest in HBM of the runnable candidates
  const PlanCandidate* unsupported = nullptr;
  // The candidates the runner cannot run that fit (new-user pass nu14, NU86: the transformer
  // under 3 MiB on 2x4 fits only with FSDP, which `vtpu train transformer` does not run), and
  // the smallest of them.
  size_t fitting_unsupported = 0;
  const PlanCandidate* smallest_unsupported = nullptr;
  for (const PlanCandidate& c : candidates) {
    if (!c.feasible) continue;
    if (!c.unsupported_reason.empty()) {
      if (unsupported == nullptr) unsupported = &c;
      if (c.fits) {
        ++fitting_unsupported;
        if (smallest_unsupported == nullptr ||
            c.min_hbm_bytes_per_core < smallest_unsupported->min_hbm_bytes_per_core) {
          smallest_unsupported = &c;
        }
      }
      continue;
    }
    if (best == nullptr || c.min_hbm_bytes_per_core < best->min_hbm_bytes_per_core) best = &c;
  }
  if (best == nullptr && unsupported != nullptr) {
    throw FailedPreconditionError("model '" + model.name +
                                  "': no strategy of the mesh can be run: " + cannot_run_summary());
  }
  if (best == nullptr) {
    throw InvalidArgumentError("model '" + model.name + "' runs on no strategy of the mesh: " +
                               (candidates.empty() ? "no candidates" : cannot_run_summary()));
  }
  throw ResourceExhaustedError(
      "model '" + model.name + "' fits on no strategy within " +
      format_bytes_exact(hbm_limit_bytes) + " of HBM per core" +
      (host_ram_bytes != 0 ? " (host RAM " + format_bytes_exact(host_ram_bytes) + " over " +
                                 count_text(Mesh(mesh_shape, axis_names).size(), "core") + ")"
                           : std::string()) +
      "; the smallest HBM per core that would fit is " +
      format_bytes_exact(best->min_hbm_bytes_per_core) + ", with " + best->name +
      (fitting_unsupported == 0
           ? std::string()
           : "; " +
                 count_text(static_cast<long long>(fitting_unsupported), "strategy", "strategies") +
                 " that cannot run would fit (smallest: " + smallest_unsupported->name + ", " +
                 format_bytes_exact(smallest_unsupported->min_hbm_bytes_per_core) +
                 "; --any-strategy plans it as a what-if)"));
}

std::string AutoShardingPlan::cannot_run_summary() const {
  // (reason, count) in table order of each reason's first candidate.
  std::vector<std::pair<std::string, size_t>> reasons;
  size_t total = 0;
  for (const PlanCandidate& c : candidates) {
    const std::string& reason = !c.feasible ? c.infeasible_reason : c.unsupported_reason;
    if (reason.empty()) continue;
    ++total;
    const auto it = std::ranges::find(reasons, reason, &std::pair<std::string, size_t>::first);
    if (it == reasons.end()) {
      reasons.emplace_back(reason, 1);
    } else {
      ++it->second;
    }
  }
  if (total == 0) return {};
  std::ranges::stable_sort(reasons, std::greater<>(), &std::pair<std::string, size_t>::second);
  std::string out =
      total == candidates.size()
          ? (total == 1 ? std::string("its one candidate cannot run: ")
                        : "none of the " + std::to_string(total) + " candidates can run: ")
          : std::to_string(total) + " of the " + std::to_string(candidates.size()) +
                " candidates cannot run: ";
  size_t listed = 0;
  for (size_t i = 0; i < reasons.size() && i < kMaxReasons; ++i) {
    out += (i > 0 ? "; " : "") + std::to_string(reasons[i].second) + " because " + reasons[i].first;
    listed += reasons[i].second;
  }
  if (reasons.size() > kMaxReasons) {
    const size_t others = reasons.size() - kMaxReasons;
    out +=
        "; " + std::to_string(total - listed) + " for " +
        (others == 1 ? std::string("another reason") : std::to_string(others) + " other reasons") +
        " (the table gives each candidate's)";
  }
  return out;
}

std::string AutoShardingPlan::to_string() const {
  // Every line is built whole (format_text): a fixed char[640] cut a long "why it lost" reason,
  // model name or profile path.
  std::string out;
  std::string mesh = "Mesh(";
  for (size_t a = 0; a < mesh_shape.size(); ++a)
    mesh += (a ? ", " : "") + axis_names[a] + "=" + std::to_string(mesh_shape[a]);
  mesh += ")";
  out += format_text(
      "vtpu plan: model '%s' (%lld parameters, %s, %s, batch %lld x seq %lld) on %s, "
      "hardware %s, HBM limit %s per core",
      model.name.c_str(), static_cast<long long>(model.num_parameters()), model.dtype.c_str(),
      model.optimizer.c_str(), static_cast<long long>(model.batch),
      static_cast<long long>(model.seq_len), mesh.c_str(),
      (hardware + (profile.source_path.empty() ? "" : " from " + profile.source_path)).c_str(),
      format_bytes(hbm_limit_bytes).c_str());
  if (host_ram_bytes != 0) {
    const int64_t n = Mesh(mesh_shape, axis_names).size();
    out += " (host RAM " + format_bytes(host_ram_bytes) + " shared by " +
           count_text(n, "virtual core") +
           (host_ram_bytes % static_cast<uint64_t>(n) != 0 ? ", rounded down to whole bytes" : "") +
           ")";
  }
  out += "\n";
  if (oversubscription != 1.0) {
    out += format_text(
        "host: %s share the host's CPUs: per-core work x %.3g "
        "(docs/SHARDING.md, \"Estimate against measurement\")\n",
        count_text(Mesh(mesh_shape, axis_names).size(), "virtual core").c_str(), oversubscription);
  }
  // Regression (new-user pass nu10, NU18): a name longer than the column (dp(f,g,h)+fsdp(a)+
  // tp(b,c,d,e) on 8 axes) pushed its row right; the column is as wide as the longest name.
  int name_width = 26;
  for (const PlanCandidate& c : candidates) {
    name_width = std::max(name_width, static_cast<int>(c.name.size()));
  }
  out += format_text("%-*s %12s %14s %12s %12s %12s  %s\n", name_width, "strategy", "HBM/core",
                     "comm B/core", "compute", "comm", "step", "result");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const PlanCandidate& c = candidates[i];
    if (!c.feasible) {
      out += format_text("%-*s %12s %14s %12s %12s %12s  %s", name_width, c.name.c_str(), "-", "-",
                         "-", "-", "-", c.why_lost.c_str());
    } else {
      out += format_text(
          "%-*s %12s %14.0f %12s %12s %12s  %s", name_width, c.name.c_str(),
          format_bytes(c.arena_bytes_per_core()).c_str(), c.comm_bytes_per_core,
          format_seconds(c.compute_seconds).c_str(), format_seconds(c.comm_seconds).c_str(),
          format_seconds(c.step_seconds).c_str(), result_text(static_cast<int>(i)).c_str());
    }
    if (c.feasible && c.tensor_splits_nothing) {
      out += " (tp splits no layer: its axes repeat the compute)";
    }
    out += "\n";
  }
  if (chosen() < 0) {
    // New-user pass nu10, NU18: "no strategy fits" when nothing could run at all.
    const bool some_runs = std::ranges::any_of(candidates, [](const PlanCandidate& c) {
      return c.feasible && c.unsupported_reason.empty();
    });
    return out + (some_runs ? "no strategy fits the HBM limit of " + format_bytes(hbm_limit_bytes) +
                                  " per core\n"
                            : std::string("no strategy can run (every candidate is marked \"cannot "
                                          "run\")\n"));
  }
  const PlanCandidate& w = candidates[static_cast<size_t>(chosen())];
  std::string who = "winner " + w.name;
  if (pinned >= 0 && pinned != winner) {
    who = "chosen " + w.name + " (--strategy; the winner is " +
          (winner >= 0 ? candidates[static_cast<size_t>(winner)].name : std::string("none")) + ")";
  } else if (pinned >= 0) {
    who += " (chosen by --strategy too)";
  }
  out += format_text(
      "%s: HBM per core %s = parameters+gradients+optimizer %s + activations %s "
      "+ FSDP transient %s + input batch %s\n",
      who.c_str(), format_bytes(w.arena_bytes_per_core()).c_str(),
      format_bytes(w.param_bytes_per_core).c_str(),
      format_bytes(w.activation_bytes_per_core).c_str(),
      format_bytes(w.transient_bytes_per_core).c_str(),
      format_bytes(w.input_bytes_per_core).c_str());
  out += format_text("%-22s %-11s %-6s %-16s %12s %12s %14s\n", "layer", "sharding", "in->out",
                     "reshard before", "compute", "comm", "comm B/core");
  for (const LayerPlan& l : w.layers) {
    out += format_text("%-22s %-11s %c->%c   %-16s %12s %12s %14.0f\n", l.layer.c_str(),
                       l.choice.c_str(), l.in_state, l.out_state,
                       l.reshard_in.empty() ? "-" : l.reshard_in.c_str(),
                       format_seconds(l.compute_seconds).c_str(),
                       format_seconds(l.comm_seconds).c_str(), l.comm_bytes_per_core);
  }
  // The communication after the last layer (PlanCandidate::after_layers): no layer, no compute.
  for (const LayerPlan& l : w.after_layers) {
    const std::string in_out =
        l.in_state == '-' ? "-" : std::string{l.in_state, '-', '>', l.out_state};
    out +=
        format_text("%-22s %-11s %-6s %-16s %12s %12s %14.0f\n", l.layer.c_str(), l.choice.c_str(),
                    in_out.c_str(), l.reshard_in.empty() ? "-" : l.reshard_in.c_str(), "-",
                    format_seconds(l.comm_seconds).c_str(), l.comm_bytes_per_core);
  }
  return out;
}

std::string AutoShardingPlan::result_text(int i) const {
  const PlanCandidate& c = candidates[static_cast<size_t>(i)];
  if (i == winner) return i == pinned ? "WINNER, CHOSEN (--strategy)" : "WINNER";
  if (i == pinned) return "CHOSEN (--strategy); " + c.why_lost;
  return c.why_lost;
}

nlohmann::json AutoShardingPlan::to_json() const {
  if (chosen() < 0) {
    throw FailedPreconditionError("no plan to emit: model '" + model.name +
                                  "' fits on no strategy");
  }
  const PlanCandidate& w = candidates[static_cast<size_t>(chosen())];
  std::vector<std::string> batch_axes;  // data and fsdp axes, mesh order
  for (size_t a = 0; a < axis_names.size(); ++a) {
    if (w.roles[a] == AxisRole::kData || w.roles[a] == AxisRole::kFsdp)
      batch_axes.push_back(axis_names[a]);
  }
  const std::vector<std::string>& tp = w.tensor_axes;
  const std::vector<std::string>& fs = w.fsdp_axes;
  nlohmann::json shardings = nlohmann::json::object();
  const auto spec = [](std::vector<PartitionSpec::Entry> entries,
                       std::vector<std::string> unreduced = {}) {
    return PartitionSpec(std::move(entries), std::move(unreduced)).normalized().to_string();
  };
  const PartitionSpec::Entry none;
  // Every parameter's global shape beside its spec, so that the spec can be applied as written
  // (jax.sharding.NamedSharding(mesh, spec) on an array of that shape): the model's parameters
  // (model_parameter_shapes, the rule the trainers check a plan file with), each given a spec
  // below.
  const std::map<std::string, std::vector<int64_t>> shapes = model_parameter_shapes(model);
  size_t specified = 0;
  const auto param = [&](const std::string& name, std::vector<PartitionSpec::Entry> entries) {
    const auto it = shapes.find(name);
    if (it == shapes.end() || entries.size() > it->second.size()) {
      throw InternalError("plan: parameter '" + name + "' has no shape of rank >= " +
                          std::to_string(entries.size()) + " in model_parameter_shapes");
    }
    if (!shardings.contains(name)) ++specified;
    shardings[name] = spec(std::move(entries));
  };
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const ModelLayer& l = model.layers[i];
    const LayerPlan& p = w.layers[i];
    const std::string& c = p.choice;
    const std::string& n = l.name;
    switch (l.kind) {
      case LayerKind::kDense:
        if (c == "column") {
          param(n + ".w", {fs, tp});
          if (l.bias) param(n + ".b", {tp});
        } else if (c == "row") {
          param(n + ".w", {tp, fs});
          if (l.bias) param(n + ".b", {fs});
        } else {
          param(n + ".w", {fs, none});
          if (l.bias) param(n + ".b", {fs});
        }
        break;
      case LayerKind::kAttention:
        // Regression (new-user pass nu8, N17): wqkv was written P(None, 'model') over a (d, 3d)
        // array, a contiguous split of the fused Q|K|V columns (core 0: Q and half of K). The
        // trainer holds it as (d, 3, d) -- input, q/k/v, heads x head dim -- and splits the last
        // dimension, so every core has whole heads of Q, K and V (train/transformer_model.h).
        if (c == "heads") {
          param(n + ".wqkv", {fs, none, tp});
          param(n + ".wo", {tp, fs});
          if (l.bias) param(n + ".bqkv", {none, tp});
        } else {
          param(n + ".wqkv", {fs, none, none});
          param(n + ".wo", {fs, none});
          if (l.bias) param(n + ".bqkv", {none, fs});
        }
        if (l.bias) param(n + ".bo", {fs});
        break;
      case LayerKind::kLayerNorm:
        param(n + ".gamma", {fs});
        param(n + ".beta", {fs});
        break;
      case LayerKind::kEmbedding:
        if (c == "vocab") {
          param(n + ".table", {tp, fs});
        } else if (c == "features") {
          param(n + ".table", {fs, tp});
        } else {
          param(n + ".table", {fs, none});
        }
        if (l.positions > 0) {
          param(n + ".positions", {fs, c == "features" ? tp : none});
        }
        break;
      case LayerKind::kElementwise:
        break;
    }
    // The activation: (batch, [seq,] features).
    std::vector<PartitionSpec::Entry> act = {batch_axes};
    if (model.seq_len > 1) act.push_back(none);
    act.push_back(p.out_state == 'S' ? tp : none);
    shardings[n + ".out"] = spec(act, p.out_state == 'P' ? tp : std::vector<std::string>{});
  }
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerPlan& l : w.layers) {
    layers.push_back({{"name", l.layer},
                      {"sharding", l.choice},
                      {"in", std::string(1, l.in_state)},
                      {"out", std::string(1, l.out_state)},
                      {"reshard_before", l.reshard_in.empty() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(l.reshard_in)}});
  }
  nlohmann::json j;
  j["format"] = "vtpu-plan";
  j["version"] = 1;
  j["model"] = model.name;
  j["mesh"] = {{"axes", axis_names}, {"shape", mesh_shape}};
  j["strategy"] = {{"name", w.name},
                   {"data", axis_json(w.data_axes)},
                   {"tensor", axis_json(w.tensor_axes)},
                   {"fsdp", axis_json(w.fsdp_axes)},
                   {"batch_axes", batch_axes}};
  j["shardings"] = shardings;
  if (specified != shapes.size()) {
    throw InternalError("plan: " + std::to_string(shapes.size() - specified) +
                        " of the model's parameters have no spec");
  }
  j["parameter_shapes"] = shapes;
  j["estimate"] = {
      {"step_seconds", w.step_seconds},
      {"compute_seconds", w.compute_seconds},
      {"comm_seconds", w.comm_seconds},
      {"hbm_bytes_per_core", w.hbm_bytes_per_core},
      {"input_bytes_per_core", w.input_bytes_per_core},
      {"oversubscription", oversubscription},
      {"mesh_shape", mesh_shape},  // the mesh it was priced for; the trainers check it
      {"comm_bytes_per_core", static_cast<uint64_t>(std::llround(w.comm_bytes_per_core))},
      {"hardware", hardware},
      {"strategy", w.name},  // the strategy it was priced for; the trainers check the roles
      {"batch", model.batch}};
  // The profile itself, so the run is compared with what the plan was priced with (an edited or
  // recalibrated profile file keeps the shipped name); "hardware_file" says where it was read.
  if (!profile.name.empty()) j["estimate"]["hardware_profile"] = profile.to_json();
  if (!profile.source_path.empty()) j["estimate"]["hardware_file"] = profile.source_path;
  j["layers"] = layers;
  if (pinned >= 0 && pinned != winner) {
    j["pinned"] = {
        {"winner", winner >= 0 ? nlohmann::json(candidates[static_cast<size_t>(winner)].name)
                               : nlohmann::json(nullptr)},
        {"why_lost", w.why_lost}};
  }
  j["model_graph"] = model.to_json();  // the sizes the plan is for (trainers take them)
  return j;
}

}  // namespace vtpu
