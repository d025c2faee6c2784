#include "vtpu/planner/reshard_planner.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <tuple>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/sharding/block_copy.h"

namespace vtpu {

namespace {

using Axes = std::vector<int>;  // mesh axis indices, major first

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/// True when gathering (or slicing) k shards under a kept prefix of n_prefix shards is exact with
/// padded blocks: the kept prefix's chunk is k chunks of the finer split (or the prefix is empty,
/// so the coverage starts at 0 and is trimmed at D).
bool nests(int64_t dim, int64_t n_prefix, int64_t k) {
  if (n_prefix == 1 || k == 1) return true;
  return ceil_div(dim, n_prefix) == k * ceil_div(dim, n_prefix * k);
}

/// Sharding state in mesh axis indices.
struct State {
  std::vector<Axes> dims;  // one per array dimension
  Axes partial;            // mesh order
  ReduceOp op = ReduceOp::kSum;
};

/// The state of `s` for an array of rank `rank`. Unreduced axes of size 1 are left out: a
/// pending reduction over one addend is already done (its value is the addend, for every op), so
/// P(unreduced={'u'}) with |u| = 1 is the state of P().
/// Leaving them in made the search enumerate all 2^k subsets of k size-1 axes as all-reduce moves
/// from every state (bad_alloc at k = 32), for a reduction over one addend.
State state_of(const NamedSharding& s, size_t rank) {
  State st;
  for (size_t d = 0; d < rank; ++d) st.dims.push_back(s.dim_axis_indices(static_cast<int>(d)));
  for (int a : s.partial_axis_indices()) {
    if (s.mesh().shape()[static_cast<size_t>(a)] > 1) st.partial.push_back(a);
  }
  st.op = st.partial.empty() ? ReduceOp::kSum : s.spec().reduce_op();
  return st;
}

PartitionSpec spec_of(const Mesh& mesh, const State& st) {
  std::vector<PartitionSpec::Entry> entries;
  for (const Axes& axes : st.dims) {
    PartitionSpec::Entry e;
    for (int a : axes) e.push_back(mesh.axis_names()[static_cast<size_t>(a)]);
    entries.push_back(std::move(e));
  }
  std::vector<std::string> unreduced;
  for (int a : st.partial) unreduced.push_back(mesh.axis_names()[static_cast<size_t>(a)]);
  return PartitionSpec(std::move(entries), std::move(unreduced), st.op).normalized();
}

/// Replica groups of `axes` (Mesh::replica_groups): rank = shard index among them.
std::vector<std::vector<int>> replica_groups(const Mesh& mesh, const Axes& axes) {
  return mesh.replica_groups(axes);
}

uint64_t f32_bytes(const std::vector<int64_t>& shape) {
  return static_cast<uint64_t>(num_elements_of(shape)) * sizeof(float);
}

/// Key of the data a device holds: its block's ranges and its coordinates on the unreduced axes.
std::vector<int64_t> holding_key(const NamedSharding& s, int device,
                                 const std::vector<int64_t>& shape) {
  std::vector<int64_t> key;
  for (const IndexRange& r : s.index_ranges(device, shape)) {
    key.push_back(r.start);
    key.push_back(r.stop);
  }
  // Size-1 unreduced axes are left out (every device's coordinate on them is 0): the planner's
  // states drop them (state_of), so a spec with them and one without hold the same data.
  const std::vector<int64_t> coords = s.mesh().coords_of(device);
  for (int a : s.partial_axis_indices()) {
    if (s.mesh().shape()[static_cast<size_t>(a)] > 1) key.push_back(coords[static_cast<size_t>(a)]);
  }
  return key;
}

/// Permute pairs (device ids) that give every device of `to` its data from a device of `from`
/// with the same key; devices that already hold what they need receive nothing.
std::vector<std::pair<int, int>> permute_pairs(const NamedSharding& from, const NamedSharding& to,
                                               const std::vector<int64_t>& shape) {
  std::map<std::vector<int64_t>, std::vector<int>> senders, receivers;
  for (int dev : from.mesh().devices()) {
    if (holding_key(from, dev, shape) != holding_key(to, dev, shape)) {
      senders[holding_key(from, dev, shape)].push_back(dev);
    }
  }
  for (int dev : to.mesh().devices()) {
    if (holding_key(from, dev, shape) != holding_key(to, dev, shape)) {
      receivers[holding_key(to, dev, shape)].push_back(dev);
    }
  }
  std::vector<std::pair<int, int>> pairs;
  for (const auto& [key, dsts] : receivers) {
    const std::vector<int>& srcs = senders[key];
    if (srcs.size() != dsts.size()) {
      throw InternalError("reshard permute: " + std::to_string(srcs.size()) +
                          " devices can send a block that " + std::to_string(dsts.size()) +
                          " devices need");
    }
    for (size_t i = 0; i < dsts.size(); ++i) pairs.emplace_back(srcs[i], dsts[i]);
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

/// Fills sent_bytes_per_core and estimated_seconds of `step` (formula_bytes and op set) for a
/// group over the mesh axes `axes` (indices into mesh's axes), with the cost model.
void apply_cost(ReshardStep& step, const Mesh& mesh, const Axes& axes, const CostModel& cost) {
  step.sent_bytes_per_core = 0;
  step.estimated_seconds = 0;
  CollectiveKind kind;
  switch (step.op) {
    case ReshardOpKind::kAllGather:
      kind = CollectiveKind::kAllGather;
      break;
    case ReshardOpKind::kReduceScatter:
      kind = CollectiveKind::kReduceScatter;
      break;
    case ReshardOpKind::kAllReduce:
      kind = CollectiveKind::kAllReduce;
      break;
    case ReshardOpKind::kAllToAll:
      kind = CollectiveKind::kAllToAll;
      break;
    case ReshardOpKind::kCollectivePermute:
      kind = CollectiveKind::kCollectivePermute;
      break;
    default:
      return;  // local steps
  }
  std::vector<int64_t> sizes;
  for (int a : axes) sizes.push_back(mesh.shape()[static_cast<size_t>(a)]);
  const CollectiveCost c = cost.collective(kind, step.formula_bytes, axes, sizes);
  step.sent_bytes_per_core = static_cast<uint64_t>(c.sent_bytes_per_core);
  step.estimated_seconds = c.seconds;
}

/// One transition of the search: the step kind and its mesh axes / dimensions.
struct Move {
  ReshardOpKind op = ReshardOpKind::kSlice;
  Axes axes;
  int dim = -1;
  int split_dim = -1;
};

class Planner {
 public:
  Planner(const std::vector<int64_t>& shape, const NamedSharding& source,
          const NamedSharding& target, const CostModel& cost)
      : shape_(shape),
        source_spec_(source.spec()),
        target_(target),
        mesh_(source.mesh()),
        cur_(state_of(source, shape.size())),
        tgt_(state_of(target, shape.size())),
        cost_(cost) {}

  /// States the last search discovered (0 before any search).
  size_t search_states() const { return search_states_; }

  std::vector<ReshardStep> plan(ReshardStrategy strategy, size_t max_states) {
    if (strategy == ReshardStrategy::kSearch) {
      std::vector<Move> moves;
      if (search(max_states, &moves)) {
        replay(moves);
        if (!on_target_mesh_ && !(mesh_ == target_.mesh())) permute_to_target();
        return finish();
      }
    }
    reduce_partials();
    if (same_tiling()) {
      if (!(key_of(cur_) == key_of(tgt_) && mesh_ == target_.mesh())) permute_to_target();
      return finish();
    }
    change_tiling();
    slice_and_make_partial();
    if (!(mesh_ == target_.mesh())) permute_to_target();
    return finish();
  }

 private:
  /// The steps, the first one starting at the source's spec and the last one ending at the
  /// target's as the caller wrote them: the states leave out size-1 unreduced axes (state_of),
  /// so spec_of() of the first and last state may lack them.
  std::vector<ReshardStep> finish() {
    if (!steps_.empty()) {
      steps_.front().spec_before = source_spec_.normalized();
      steps_.back().spec_after = target_.spec().normalized();
    }
    return std::move(steps_);
  }

  // ---- search: Dijkstra over sharding states --------------------------------------------------

  /// An injective text key of a state: each axis index in decimal followed by ',', each
  /// dimension closed by '|', then 'p', the unreduced axes the same way and the reduce op.
  /// Numbers, not one char('a' + axis) per axis: that made axis 27 the dimension separator '|'
  /// and wrapped axis 256 to axis 0, so distinct states shared a key.
  static std::string key_of(const State& st) {
    std::string k;
    for (const Axes& axes : st.dims) {
      for (int a : axes) k += std::to_string(a) + ',';
      k += '|';
    }
    k += 'p';
    for (int a : st.partial) k += std::to_string(a) + ',';
    if (!st.partial.empty()) k += std::to_string(static_cast<int>(st.op));
    return k;
  }
  bool in_dims(const State& st, int a) const {
    for (const Axes& axes : st.dims) {
      if (std::find(axes.begin(), axes.end(), a) != axes.end()) return true;
    }
    return false;
  }
  static bool contains(const Axes& axes, int a) {
    return std::find(axes.begin(), axes.end(), a) != axes.end();
  }
  std::vector<int64_t> padded_block_of(const State& st) const {
    std::vector<int64_t> s(shape_.size());
    for (size_t d = 0; d < shape_.size(); ++d) s[d] = ceil_div(dim_size(d), count(st.dims[d]));
    return s;
  }
  bool same_tiling_as_target(const State& st) const {
    for (size_t d = 0; d < shape_.size(); ++d) {
      if (count(st.dims[d]) != count(tgt_.dims[d])) return false;
    }
    return st.partial == tgt_.partial && (st.partial.empty() || st.op == tgt_.op);
  }

  /// The step `m` takes from `st`, without replica groups or specs; cost filled in.
  ReshardStep describe(const State& st, const Move& m) const {
    ReshardStep step;
    step.op = m.op;
    step.dim = m.dim;
    step.split_dim = m.split_dim;
    step.buffer_shape = padded_block_of(st);
    const int64_t n = count(m.axes);
    switch (m.op) {
      case ReshardOpKind::kAllToAll: {
        const size_t e = static_cast<size_t>(m.split_dim);
        step.buffer_shape[e] = n * ceil_div(dim_size(e), count(st.dims[e]) * n);
        break;
      }
      case ReshardOpKind::kReduceScatter: {
        const size_t e = static_cast<size_t>(m.dim);
        step.buffer_shape[e] = n * ceil_div(dim_size(e), count(st.dims[e]) * n);
        break;
      }
      default:
        break;
    }
    step.buffer_bytes = padded_bytes(step.buffer_shape);
    switch (m.op) {
      case ReshardOpKind::kAllGather:
      case ReshardOpKind::kAllToAll:
        step.formula_bytes = static_cast<double>(step.buffer_bytes) * static_cast<double>(n);
        break;
      case ReshardOpKind::kReduceScatter:
      case ReshardOpKind::kAllReduce:
      case ReshardOpKind::kCollectivePermute:
        step.formula_bytes = static_cast<double>(step.buffer_bytes);
        break;
      default:
        step.buffer_bytes = 0;
        break;
    }
    apply_cost(step, mesh_, m.axes, cost_);
    return step;
  }

  State apply(const State& st, const Move& m) const {
    State next = st;
    switch (m.op) {
      case ReshardOpKind::kAllGather:
        next.dims[static_cast<size_t>(m.dim)].resize(next.dims[static_cast<size_t>(m.dim)].size() -
                                                     m.axes.size());
        break;
      case ReshardOpKind::kAllToAll:
        next.dims[static_cast<size_t>(m.dim)].pop_back();
        next.dims[static_cast<size_t>(m.split_dim)].push_back(m.axes[0]);
        break;
      case ReshardOpKind::kSlice:
        next.dims[static_cast<size_t>(m.dim)].push_back(m.axes[0]);
        break;
      case ReshardOpKind::kReduceScatter:
      case ReshardOpKind::kAllReduce:
        for (int a : m.axes)
          next.partial.erase(std::find(next.partial.begin(), next.partial.end(), a));
        if (m.op == ReshardOpKind::kReduceScatter) {
          next.dims[static_cast<size_t>(m.dim)].push_back(m.axes[0]);
        }
        if (next.partial.empty()) next.op = ReduceOp::kSum;
        break;
      case ReshardOpKind::kMakePartial:
        next.partial.push_back(m.axes[0]);
        std::sort(next.partial.begin(), next.partial.end());
        next.op = tgt_.op;
        break;
      case ReshardOpKind::kCollectivePermute:
        next = tgt_;
        break;
    }
    return next;
  }

  std::vector<Move> moves_from(const State& st) const {
    std::vector<Move> out;
    const int rank = static_cast<int>(shape_.size());
    for (int d = 0; d < rank; ++d) {
      const Axes& c = st.dims[static_cast<size_t>(d)];
      for (size_t k = 1; k <= c.size(); ++k) {  // all-gather the k minor-most axes
        const size_t keep = c.size() - k;
        if (nests(dim_size(static_cast<size_t>(d)), count(c, 0, keep), count(c, keep))) {
          out.push_back({ReshardOpKind::kAllGather,
                         Axes(c.begin() + static_cast<std::ptrdiff_t>(keep), c.end()), d, -1});
        }
      }
      if (c.empty()) continue;
      const int a = c.back();  // all-to-all: the minor-most axis moves to another dimension
      if (!nests(dim_size(static_cast<size_t>(d)), count(c, 0, c.size() - 1), axis_size(a)))
        continue;
      for (int e = 0; e < rank; ++e) {
        if (e != d && nests(dim_size(static_cast<size_t>(e)),
                            count(st.dims[static_cast<size_t>(e)]), axis_size(a))) {
          out.push_back({ReshardOpKind::kAllToAll, {a}, d, e});
        }
      }
    }
    for (int a = 0; a < mesh_.num_axes(); ++a) {
      const bool target_shards = in_dims(tgt_, a);
      if (contains(st.partial, a)) {
        for (int e = 0; e < rank && target_shards; ++e) {
          if (nests(dim_size(static_cast<size_t>(e)), count(st.dims[static_cast<size_t>(e)]),
                    axis_size(a))) {
            out.push_back({ReshardOpKind::kReduceScatter, {a}, e, -1});
          }
        }
        continue;
      }
      if (in_dims(st, a)) continue;
      for (int e = 0; e < rank && target_shards; ++e) {  // local slice
        if (nests(dim_size(static_cast<size_t>(e)), count(st.dims[static_cast<size_t>(e)]),
                  axis_size(a))) {
          out.push_back({ReshardOpKind::kSlice, {a}, e, -1});
        }
      }
      if (contains(tgt_.partial, a) && (st.partial.empty() || st.op == tgt_.op)) {
        out.push_back({ReshardOpKind::kMakePartial, {a}, -1, -1});
      }
    }
    // All-reduce over any non-empty subset of the unreduced axes (mesh order), up to
    // kMaxAllReduceSubsetAxes of them. Past that: each axis alone, all of them at once, and the
    // ones the target does not keep at once; any subset is still reachable as a chain of
    // single-axis all-reduces, so the search stays complete (but may miss a cheaper subset).
    // Every subset would be 2^k moves per state, and `1u << k` is undefined from k = 32.
    const size_t np = st.partial.size();
    if (np <= kMaxAllReduceSubsetAxes) {
      for (uint64_t mask = 1; mask < (uint64_t{1} << np); ++mask) {
        Axes axes;
        for (size_t i = 0; i < np; ++i) {
          if (mask & (uint64_t{1} << i)) axes.push_back(st.partial[i]);
        }
        out.push_back({ReshardOpKind::kAllReduce, axes, -1, -1});
      }
    } else {
      for (int a : st.partial) out.push_back({ReshardOpKind::kAllReduce, {a}, -1, -1});
      out.push_back({ReshardOpKind::kAllReduce, st.partial, -1, -1});
      Axes not_kept;
      for (int a : st.partial) {
        if (!contains(tgt_.partial, a) || st.op != tgt_.op) not_kept.push_back(a);
      }
      if (not_kept.size() > 1 && not_kept.size() < np) {
        out.push_back({ReshardOpKind::kAllReduce, not_kept, -1, -1});
      }
    }
    if (same_tiling_as_target(st) && key_of(st) != key_of(tgt_)) {
      Axes all;
      for (int a = 0; a < mesh_.num_axes(); ++a) all.push_back(a);
      out.push_back({ReshardOpKind::kCollectivePermute, all, -1, -1});
    }
    return out;
  }

  /// Dijkstra from cur_ to tgt_ over moves_from(), minimising (estimated seconds, steps). False
  /// when more than `max_states` states were settled, or more than
  /// kMaxDiscoveredStatesPerSettled * `max_states` discovered, without reaching the target.
  bool search(size_t max_states, std::vector<Move>* path) const {
    struct Entry {
      double cost = 0;
      int steps = 0;
      std::string parent;
      Move move;
      State state;
      bool done = false;
    };
    using Item = std::tuple<double, int, std::string>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
    std::map<std::string, Entry> best;
    const std::string start = key_of(cur_), goal = key_of(tgt_);
    best[start] = Entry{0, 0, "", {}, cur_, false};
    queue.emplace(0.0, 0, start);
    size_t settled = 0;
    while (!queue.empty()) {
      const auto [cost, steps, key] = queue.top();
      queue.pop();
      Entry& e = best.at(key);
      if (e.done) continue;
      e.done = true;
      if (key == goal) break;
      search_states_ = best.size();
      if (++settled > max_states) return false;
      // Discovered states are bounded too: on a 1024-core mesh of 10 axes every state of a fully
      // partial array has ~2^10 all-reduce moves, so settled states alone bound nothing useful.
      if (best.size() > kMaxDiscoveredStatesPerSettled * max_states) return false;
      const State st = e.state;
      for (const Move& m : moves_from(st)) {
        const double c = cost + describe(st, m).estimated_seconds;
        State next = apply(st, m);
        std::string nk = key_of(next);
        auto it = best.find(nk);
        if (it != best.end() &&
            (it->second.done ||
             std::make_pair(it->second.cost, it->second.steps) <= std::make_pair(c, steps + 1))) {
          continue;
        }
        best[nk] = Entry{c, steps + 1, key, m, std::move(next), false};
        queue.emplace(c, steps + 1, std::move(nk));
      }
    }
    search_states_ = best.size();
    if (!best.count(goal) || !best.at(goal).done) return false;
    path->clear();
    for (std::string k = goal; k != start; k = best.at(k).parent) path->push_back(best.at(k).move);
    std::reverse(path->begin(), path->end());
    return true;
  }

  /// Emits the steps of `moves` from cur_, merging consecutive slices and consecutive
  /// make-partials into one local step each.
  void replay(const std::vector<Move>& moves) {
    for (const Move& m : moves) {
      if (m.op == ReshardOpKind::kCollectivePermute) {
        permute_to_target();
        continue;
      }
      const PartitionSpec before = spec_of(mesh_, cur_);
      ReshardStep step = describe(cur_, m);
      step.reduce_op = m.op == ReshardOpKind::kMakePartial ? tgt_.op : cur_.op;
      const bool local = m.op == ReshardOpKind::kSlice || m.op == ReshardOpKind::kMakePartial;
      if (!local) step.replica_groups = replica_groups(mesh_, m.axes);
      if (local) step.dim = -1;  // a merged slice may cut several dimensions
      cur_ = apply(cur_, m);
      if (local && !steps_.empty() && steps_.back().op == m.op) {
        steps_.back().spec_after = spec_of(mesh_, cur_);
        steps_.back().axes.push_back(mesh_.axis_names()[static_cast<size_t>(m.axes[0])]);
        continue;
      }
      emit(std::move(step), before, m.axes);
    }
  }

  // ---- greedy rule (the fallback) -------------------------------------------------------------

  int64_t axis_size(int a) const { return mesh_.shape()[static_cast<size_t>(a)]; }
  /// Shards of axes[from, to) (to clamped to the size).
  int64_t count(const Axes& axes, size_t from = 0, size_t to = SIZE_MAX) const {
    int64_t n = 1;
    const size_t end = to < axes.size() ? to : axes.size();
    for (auto it = axes.begin() + static_cast<std::ptrdiff_t>(std::min(from, end));
         it != axes.begin() + static_cast<std::ptrdiff_t>(end); ++it) {
      n *= axis_size(*it);
    }
    return n;
  }
  static bool is_prefix(const Axes& a, const Axes& b) {
    return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  int64_t dim_size(size_t d) const { return shape_[d]; }

  /// Dimension d can reach the target by slicing alone.
  bool good(size_t d) const {
    const Axes& c = cur_.dims[d];
    const Axes& t = tgt_.dims[d];
    return is_prefix(c, t) && nests(dim_size(d), count(c), count(t, c.size()));
  }
  /// Axis a can join dimension d as its next minor axis and d stays good.
  bool can_append(size_t d, int a) const {
    const Axes& c = cur_.dims[d];
    const Axes& t = tgt_.dims[d];
    if (!is_prefix(c, t) || c.size() >= t.size() || t[c.size()] != a) return false;
    return nests(dim_size(d), count(c), axis_size(a)) &&
           nests(dim_size(d), count(c) * axis_size(a), count(t, c.size() + 1));
  }
  bool same_tiling() const {
    for (size_t d = 0; d < shape_.size(); ++d) {
      if (count(cur_.dims[d]) != count(tgt_.dims[d])) return false;
    }
    return cur_.partial == tgt_.partial && (cur_.partial.empty() || cur_.op == tgt_.op);
  }

  /// Bytes of an f32 collective buffer of `buffer_shape`: a block padded to a multiple of the
  /// shard count. Throws InvalidArgumentError naming the array's shape and the buffer's when the
  /// buffer has more than 2^60 elements.
  /// The error names the user's array as well as the padded buffer: 2^60 elements over 7 shards
  /// pass the shape check and fail only once padded.
  uint64_t padded_bytes(const std::vector<int64_t>& buffer_shape) const {
    try {
      return f32_bytes(buffer_shape);
    } catch (const InvalidArgumentError&) {
      throw InvalidArgumentError(
          "array shape " + shape_text(shape_) + " needs a collective buffer of shape " +
          shape_text(buffer_shape) +
          " on its mesh, which has more than 2^60 elements (expected at most 2^60 elements, "
          "padding to a multiple of the shard count included)");
    }
  }

  /// Per-core padded block shape of the current state.
  std::vector<int64_t> padded_block() const {
    std::vector<int64_t> s(shape_.size());
    for (size_t d = 0; d < shape_.size(); ++d) s[d] = ceil_div(dim_size(d), count(cur_.dims[d]));
    return s;
  }

  /// Appends a step that ends in the current state (cur_ already updated).
  void emit(ReshardStep step, const PartitionSpec& before, const Axes& axes) {
    step.spec_before = before;
    step.spec_after = spec_of(mesh_, cur_);
    for (int a : axes) step.axes.push_back(mesh_.axis_names()[static_cast<size_t>(a)]);
    apply_cost(step, mesh_, axes, cost_);
    steps_.push_back(std::move(step));
  }

  void reduce_partials() {
    Axes to_reduce;
    for (int a : cur_.partial) {
      const bool kept =
          std::find(tgt_.partial.begin(), tgt_.partial.end(), a) != tgt_.partial.end() &&
          cur_.op == tgt_.op;
      if (!kept) to_reduce.push_back(a);
    }
    bool progress = true;
    while (progress && !to_reduce.empty()) {
      progress = false;
      for (size_t i = 0; i < to_reduce.size() && !progress; ++i) {
        const int a = to_reduce[i];
        for (size_t d = 0; d < shape_.size() && !progress; ++d) {
          if (!can_append(d, a)) continue;
          const PartitionSpec before = spec_of(mesh_, cur_);
          ReshardStep step;
          step.op = ReshardOpKind::kReduceScatter;
          step.dim = static_cast<int>(d);
          step.reduce_op = cur_.op;
          step.replica_groups = replica_groups(mesh_, {a});
          step.buffer_shape = padded_block();
          step.buffer_shape[d] =
              axis_size(a) * ceil_div(dim_size(d), count(cur_.dims[d]) * axis_size(a));
          step.buffer_bytes = padded_bytes(step.buffer_shape);
          step.formula_bytes = static_cast<double>(step.buffer_bytes);
          cur_.dims[d].push_back(a);
          remove_partial(a);
          to_reduce.erase(to_reduce.begin() + static_cast<std::ptrdiff_t>(i));
          emit(std::move(step), before, {a});
          progress = true;
        }
      }
    }
    if (!to_reduce.empty()) {
      const PartitionSpec before = spec_of(mesh_, cur_);
      ReshardStep step;
      step.op = ReshardOpKind::kAllReduce;
      step.reduce_op = cur_.op;
      step.replica_groups = replica_groups(mesh_, to_reduce);
      step.buffer_shape = padded_block();
      step.buffer_bytes = padded_bytes(step.buffer_shape);
      step.formula_bytes = static_cast<double>(step.buffer_bytes);
      for (int a : to_reduce) remove_partial(a);
      emit(std::move(step), before, to_reduce);
    }
  }

  void remove_partial(int a) {
    cur_.partial.erase(std::find(cur_.partial.begin(), cur_.partial.end(), a));
    if (cur_.partial.empty()) cur_.op = ReduceOp::kSum;
  }

  void change_tiling() {
    while (true) {
      size_t d = 0;
      while (d < shape_.size() && good(d)) ++d;
      if (d == shape_.size()) return;
      Axes& c = cur_.dims[d];
      const Axes& t = tgt_.dims[d];
      size_t p = 0;
      while (p < c.size() && p < t.size() && c[p] == t[p]) ++p;
      if (c.size() > p) {  // "a sharded dimension moves": all-to-all
        const int a = c.back();
        for (size_t e = 0; e < shape_.size(); ++e) {
          if (e == d || !can_append(e, a) ||
              !nests(dim_size(d), count(c, 0, c.size() - 1), axis_size(a))) {
            continue;
          }
          const PartitionSpec before = spec_of(mesh_, cur_);
          ReshardStep step;
          step.op = ReshardOpKind::kAllToAll;
          step.dim = static_cast<int>(d);
          step.split_dim = static_cast<int>(e);
          step.replica_groups = replica_groups(mesh_, {a});
          step.buffer_shape = padded_block();
          step.buffer_shape[e] =
              axis_size(a) * ceil_div(dim_size(e), count(cur_.dims[e]) * axis_size(a));
          step.buffer_bytes = padded_bytes(step.buffer_shape);
          step.formula_bytes =
              static_cast<double>(step.buffer_bytes) * static_cast<double>(axis_size(a));
          c.pop_back();
          cur_.dims[e].push_back(a);
          emit(std::move(step), before, {a});
          goto next;
        }
      }
      {
        // All-gather the axes past a prefix q <= p for which gathering and then slicing to the
        // target are exact with padded blocks.
        size_t q = p;
        while (q > 0 && !(nests(dim_size(d), count(c, 0, q), count(c, q)) &&
                          nests(dim_size(d), count(c, 0, q), count(t, q)))) {
          --q;
        }
        const PartitionSpec before = spec_of(mesh_, cur_);
        const Axes gathered(c.begin() + static_cast<std::ptrdiff_t>(q), c.end());
        ReshardStep step;
        step.op = ReshardOpKind::kAllGather;
        step.dim = static_cast<int>(d);
        step.replica_groups = replica_groups(mesh_, gathered);
        step.buffer_shape = padded_block();
        step.buffer_bytes = padded_bytes(step.buffer_shape);
        step.formula_bytes =
            static_cast<double>(step.buffer_bytes) * static_cast<double>(count(gathered));
        c.resize(q);
        emit(std::move(step), before, gathered);
      }
    next:;
    }
  }

  void slice_and_make_partial() {
    Axes sliced;
    for (size_t d = 0; d < shape_.size(); ++d) {
      const Axes& t = tgt_.dims[d];
      sliced.insert(sliced.end(), t.begin() + static_cast<std::ptrdiff_t>(cur_.dims[d].size()),
                    t.end());
    }
    if (!sliced.empty()) {
      const PartitionSpec before = spec_of(mesh_, cur_);
      ReshardStep step;
      step.op = ReshardOpKind::kSlice;
      step.buffer_shape = padded_block();
      for (size_t d = 0; d < shape_.size(); ++d) cur_.dims[d] = tgt_.dims[d];
      emit(std::move(step), before, sliced);
    }
    Axes added;
    for (int a : tgt_.partial) {
      if (std::find(cur_.partial.begin(), cur_.partial.end(), a) == cur_.partial.end()) {
        added.push_back(a);
      }
    }
    if (!added.empty()) {
      const PartitionSpec before = spec_of(mesh_, cur_);
      ReshardStep step;
      step.op = ReshardOpKind::kMakePartial;
      step.reduce_op = tgt_.op;
      step.buffer_shape = padded_block();
      cur_.partial = tgt_.partial;
      cur_.op = tgt_.op;
      emit(std::move(step), before, added);
    }
  }

  void permute_to_target() {
    const PartitionSpec before = spec_of(mesh_, cur_);
    const NamedSharding from(mesh_, before);
    ReshardStep step;
    step.op = ReshardOpKind::kCollectivePermute;
    step.pairs = permute_pairs(from, target_, shape_);
    if (step.pairs.empty()) return;  // every device already holds its block
    step.replica_groups = {mesh_.devices()};
    step.buffer_shape = padded_block();
    step.buffer_bytes = padded_bytes(step.buffer_shape);
    step.formula_bytes = step.pairs.empty() ? 0.0 : static_cast<double>(step.buffer_bytes);
    Axes all;
    for (int a = 0; a < mesh_.num_axes(); ++a) all.push_back(a);
    cur_ = tgt_;
    emit(std::move(step), before, all);
    steps_.back().spec_after = target_.spec().normalized();
    on_target_mesh_ = true;
  }

  const std::vector<int64_t>& shape_;
  const PartitionSpec source_spec_;
  const NamedSharding& target_;
  const Mesh& mesh_;
  State cur_;
  const State tgt_;
  const CostModel& cost_;
  std::vector<ReshardStep> steps_;
  bool on_target_mesh_ = false;
  mutable size_t search_states_ = 0;  // written by the const search()
};

void check_same_mesh(const Mesh& a, const Mesh& b) {
  std::vector<int> da = a.devices(), db = b.devices();
  std::sort(da.begin(), da.end());
  std::sort(db.begin(), db.end());
  if (a.shape() != b.shape() || a.axis_names() != b.axis_names() || da != db) {
    throw InvalidArgumentError("reshard target is on " + b.to_string() + " but the array is on " +
                               a.to_string() +
                               " (expected the same mesh: same axes, sizes and devices; only the "
                               "device order may differ)");
  }
}

}  // namespace

ReshardPlan plan_reshard(const std::vector<int64_t>& global_shape, const NamedSharding& source,
                         const NamedSharding& target, const CostModel& cost,
                         ReshardStrategy strategy) {
  source.check_shape(global_shape);
  target.check_shape(global_shape);
  // Checked first, so that the error quotes the array's shape, not a shard's deep in the planner.
  const int64_t elements = num_elements_of(global_shape);
  check_same_mesh(source.mesh(), target.mesh());
  ReshardPlan plan{global_shape,
                   source,
                   target,
                   CostModel::without_label(cost.summary(/*with_compute=*/false)),
                   CostModel::without_label(cost.describe(/*with_compute=*/false)),
                   {},
                   0};
  // Every block of an empty array is empty in either sharding, so nothing moves, as XLA's
  // ZeroSizedHloElimination replaces the SPMD partitioner's zero-element collectives with empty
  // constants.
  if (elements == 0) return plan;
  Planner planner(global_shape, source, target, cost);
  plan.steps = planner.plan(strategy, kMaxSearchStates);
  plan.search_states = planner.search_states();
  return plan;
}

ReshardPlan plan_reshard(const std::vector<int64_t>& global_shape, const NamedSharding& source,
                         const NamedSharding& target, ReshardStrategy strategy) {
  // As cli/reshard_command.cc prices it: the mesh's cores at once.
  return plan_reshard(global_shape, source, target,
                      CostModel::this_machine().for_cores(static_cast<int>(source.mesh().size())),
                      strategy);
}

ReshardPlan plan_reshard(const std::vector<int64_t>& global_shape, const NamedSharding& source,
                         const NamedSharding& target, const ReshardCostModel& cost,
                         ReshardStrategy strategy) {
  return plan_reshard(
      global_shape, source, target,
      CostModel::uniform(cost.alpha_seconds, cost.beta_seconds_per_byte, cost.all_to_all_factor),
      strategy);
}

ShardedArray reshard(Runtime& runtime, const ShardedArray& array, const NamedSharding& target) {
  return execute_reshard(runtime, array,
                         plan_reshard(array.global_shape(), array.sharding(), target));
}

}  // namespace vtpu