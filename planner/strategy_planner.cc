#include "vtpu/planner/strategy_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/common/element_type.h"
#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/memory/tiled_layout.h"
#include "vtpu/planner/strategy_labels.h"

namespace vtpu::planner_dp {

namespace {

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
    dtype_ = m.dtype == "bf16" ? ElementType::kBf16 : ElementType::kF32;
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
  /// and the strategy when it is 2^63 or more (or not finite): the double-to-uint64 conversion
  /// would saturate, and a hand-built ModelGraph skips the model file's size limits.
  uint64_t byte_count(double bytes, const char* what, const std::string& strategy) const {
    if (!(bytes < 0x1p63)) {
      char b[64];
      std::snprintf(b, sizeof b, "%.4g", bytes);
      throw InvalidArgumentError("model '" + m_.name + "' needs " + b + " bytes of " + what +
                                 " per core with " + strategy +
                                 " (expected less than 2^63 bytes; the model file's limits, "
                                 "docs/PLANNER.md \"Model files\", keep sizes below that)");
    }
    return static_cast<uint64_t>(std::ceil(bytes));
  }

  /// Runs the DPs; fills `c` (layers, times, bytes, fits, min HBM).
  void plan(uint64_t limit, PlanCandidate& c) {
    bl_ = static_cast<double>(m_.batch / (d_ * f_));
    tokens_ = bl_ * static_cast<double>(m_.seq_len);
    const double input_bytes = step_input_bytes();
    const std::vector<LayerOptions> layers = price_layers(input_bytes);
    // Two DPs: the fastest plan that fits, and the smallest plan in HBM (what the limit must be;
    // the plan shown when nothing fits).
    const Chain fastest =
        run_chain(layers, Keep::kFastestFit, static_cast<double>(limit), input_bytes);
    const Chain smallest_chain = run_chain(layers, Keep::kSmallest, 0, input_bytes);
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
    c.min_hbm_bytes_per_core = byte_count(smallest->total_bytes() + input_bytes, "HBM", c.name);
    const Label& chosen = best_fit != nullptr ? *best_fit : *smallest;
    fill_totals(chosen, c);
    c.after_layers = end_rows(chosen.step.parent_state, chosen.grad_bucket_bytes);
    walk_back(layers, best_fit != nullptr ? fastest : smallest_chain, chosen, c);
  }

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

  /// The step's input batch on each core (replicated over the tensor axes): the first layer's
  /// input (token ids are int32) and one int32 label per token. The same for every label; it
  /// counts against the limit (the limit is the whole arena).
  double step_input_bytes() const {
    const ModelLayer& first = m_.layers.front();
    const double labels = hbm_bytes({tokens_}, ElementType::kS32);
    if (first.kind == LayerKind::kEmbedding)
      return hbm_bytes({tokens_}, ElementType::kS32) + labels;
    return hbm_bytes({tokens_, static_cast<double>(first.in)}) + labels;
  }

  /// HBM bytes of one array of `type` (the model's dtype by default) with the local shape `dims`
  /// (whole numbers of elements): its bytes under tpu_default_layout, or its logical bytes
  /// without padding (PlanConstraints::pad_arrays).
  double hbm_bytes(std::initializer_list<double> dims, std::optional<ElementType> type = {}) const {
    const ElementType t = type.value_or(dtype_);
    double logical = static_cast<double>(element_size_bytes(t));
    for (const double d : dims) logical *= d;
    // Past 2^62 bytes byte_count() refuses the total anyway, naming the model: padding, which
    // only adds, need not be computed (nor overflow tiled_layout's 64-bit sizes).
    if (!constraints_.pad_arrays || !(logical < 0x1p62)) return logical;
    std::vector<int64_t> shape;
    for (const double d : dims) shape.push_back(std::llround(d));
    return static_cast<double>(array_bytes(t, shape).padded_bytes);
  }

  /// Every layer's options and their costs, with the gradient bucket's shares.
  std::vector<LayerOptions> price_layers(double input_bytes) {
    const size_t n = m_.layers.size();
    std::vector<LayerOptions> layers(n);
    const auto price = [&] {
      for (size_t i = 0; i < n; ++i) {
        layers[i].options = options(m_.layers[i]);
        layers[i].costs.clear();
        for (const Option& op : layers[i].options)
          layers[i].costs.push_back(layer_cost(m_.layers[i], op, i == 0, i + 1 == n));
      }
    };
    price();
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
      price();
    }
    price_gradient_bucket(layers);
    return layers;
  }

  /// The rows after the layers, for a chain ending in state `s`: the loss (a partial output is
  /// all-reduced; a sharded one pays the parallel cross-entropy; FSDP's batch shards sum their
  /// losses), then the gradient bucket's latency, once.
  std::vector<LayerPlan> end_rows(int s, double grad_bucket_bytes) const {
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
      const CollectiveCost cc = tp(CollectiveKind::kAllReduce,
                                   partial ? act_bytes(m_.layers.back().out) : 2 * tokens_ * e_);
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
  }

  /// The complete plans of a DP: its last labels with the end rows' costs (Step: the label's
  /// index and state after the last layer).
  std::vector<Label> finals_of(const Chain& chain) const {
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
  }

  /// The candidate's times and bytes per core from its chosen complete plan.
  void fill_totals(const Label& chosen, PlanCandidate& c) const {
    c.compute_seconds = chosen.compute;
    c.comm_seconds = chosen.comm;
    c.step_seconds = chosen.time;
    c.comm_bytes_per_core = chosen.comm_bytes;
    (void)byte_count(chosen.comm_bytes, "communication", c.name);  // to_json's llround needs it
    c.hbm_bytes_per_core = byte_count(chosen.total_bytes(), "HBM", c.name);
    c.param_bytes_per_core = byte_count(chosen.param_state_bytes, "parameter state", c.name);
    c.activation_bytes_per_core = byte_count(chosen.activation_bytes, "activations", c.name);
    c.transient_bytes_per_core = byte_count(chosen.max_bytes, "transient buffers", c.name);
  }

  /// Walks back from `chosen`, recomputing each layer's costs from its option and the state
  /// before it (the same sums the DP added), into c.layers.
  void walk_back(const std::vector<LayerOptions>& layers, const Chain& chain, const Label& chosen,
                 PlanCandidate& c) const {
    const size_t n = m_.layers.size();
    c.tensor_splits_nothing = t_ > 1;
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

  /// Runs the DP over the chain: each layer extends every kept label of the previous layer by
  /// each option (with the reshard between them), then keeps what `keep` keeps. `limit` and
  /// `input_bytes` (bytes per core) are the HBM limit and the input batch counted against it.
  ///
  /// The frontier of a long chain of dense layers grows with the chain (each split or replicated
  /// choice a new time/HBM trade-off). Three rules keep kFastestFit exact and fast:
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
              from == op.in ? 0.0
                            : hbm_bytes({tokens_, static_cast<double>(l.in) /
                                                      (op.in == 'S' ? tensor_d() : 1.0)});
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

  /// HBM bytes per core of layer `l`'s parameters (tensor-local, before FSDP sharding) and of the
  /// activations it saves under `op`, each array charged hbm_bytes() of its local shape: the
  /// arrays whose elements layer_cost() counts, one by one ({parameters, activations}).
  std::pair<double, double> layer_hbm_bytes(const ModelLayer& l, const Option& op) const {
    const std::string choice = op.choice;
    const auto [t, T, S, s, in, out] = dims(l, op);
    double params = 0, act = 0;
    switch (l.kind) {
      case LayerKind::kDense:
        params =
            hbm_bytes({in / (choice == "row" ? t : 1.0), out / (choice == "column" ? t : 1.0)});
        if (l.bias) params += hbm_bytes({choice == "column" ? out / t : out});
        act = hbm_bytes({T, op.out == 'S' ? out / t : out});
        break;
      case LayerKind::kElementwise:
        act = hbm_bytes({T, out / s});
        break;
      case LayerKind::kLayerNorm:  // scale and offset; normalised output, mean and 1/stddev
        params = 2 * hbm_bytes({out});
        act = hbm_bytes({T, out}) + 2 * hbm_bytes({T});
        break;
      case LayerKind::kAttention: {  // qkv and output projections; qkv, scores, context, output
        params = hbm_bytes({out, 3 * out / s}) + hbm_bytes({out / s, out});
        if (l.bias) params += hbm_bytes({3 * out / s}) + hbm_bytes({out});
        act = hbm_bytes({T, 3 * out / s}) +
              hbm_bytes({bl_ * static_cast<double>(l.heads) / s, S, S}) + hbm_bytes({T, out / s}) +
              hbm_bytes({T, out});
        break;
      }
      case LayerKind::kEmbedding: {  // token and position tables
        const double vocab = static_cast<double>(l.vocab), pos = static_cast<double>(l.positions);
        params = choice == "vocab" ? hbm_bytes({vocab / t, out}) + hbm_bytes({pos, out})
                                   : hbm_bytes({vocab, out / s}) + hbm_bytes({pos, out / s});
        act = hbm_bytes({T, choice == "features" ? out / t : out});
        break;
      }
    }
    return {params, act};
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
    // PyTorch's FlatParameter): each core's shard of it, and of its gradient and optimizer state,
    // is one rank-1 array. Without fsdp axes each parameter is an array of its own.
    const auto [param_hbm, act_hbm] = layer_hbm_bytes(l, op);
    const double shard_elements = std::ceil(params / f);
    const double shard_hbm = f_ > 1 ? hbm_bytes({shard_elements}) : param_hbm;
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
      c.unit_bytes = hbm_bytes({shard_elements * f});
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
    c.param_state_bytes = (2.0 + k) * shard_hbm;
    c.activation_bytes = act_hbm;
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
  /// all-reduce of its 483 KB.
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
  ElementType dtype_ = ElementType::kF32;  // the model's dtype, e_ bytes an element
  double bl_ = 0, tokens_ = 0;
  double bucket_rate_ = 0;  // seconds per gradient byte (price_gradient_bucket)
};

}  // namespace

void plan_strategy(const ModelGraph& model, const CostModel& cost,
                   const std::vector<int64_t>& mesh_shape, const PlanConstraints& constraints,
                   uint64_t hbm_limit_bytes, PlanCandidate& c) {
  StrategyPlanner sp(model, cost, mesh_shape, c.roles, constraints);
  c.infeasible_reason = sp.infeasible(&c.infeasible_by_constraints);
  c.feasible = c.infeasible_reason.empty();
  if (c.feasible) sp.plan(hbm_limit_bytes, c);
}

}  // namespace vtpu::planner_dp
