#include "vtpu/train/fsdp_trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "vtpu/common/error.h"
#include "vtpu/common/median.h"
#include "vtpu/memory/tiled_layout.h"
#include "vtpu/runtime/process_exchange.h"
#include "vtpu/sharding/shard_map.h"
#include "vtpu/sharding/sharded_array.h"
#include "vtpu/train/adam.h"
#include "vtpu/train/mlp_eigen_layers.h"
#include "vtpu/train/mlp_layout.h"
#include "vtpu/train/train_step_log.h"

namespace vtpu {

namespace {

constexpr int64_t kIn = kMlpIn;
constexpr int64_t kOut = kMlpOut;
constexpr uint64_t kF = sizeof(float);

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

/// What outlives the SPMD program on each core: the parameter shards and, with Adam, the m and v
/// shards (one per layer each). Written only by the owning core.
struct CoreState {
  std::vector<DeviceBuffer> param_shards;
  std::vector<DeviceBuffer> m_shards;
  std::vector<DeviceBuffer> v_shards;
};

/// The axis every FSDP collective runs over: all N cores, rank r = core r.
constexpr const char* kAxis = "fsdp";

/// What every core of a run reads: the configuration, one mesh per kind of collective, the
/// replicated training rows and the initial FlatParameters. Built in this order before the SPMD
/// program; while it runs, every core reads the rest and calls the thread-safe communicators.
struct FsdpRun {
  FsdpRun(Runtime& runtime, const DigitsSplit& split, const FsdpConfig& config)
      : mc(config.mlp),
        flat(fsdp_flat_params(mc.hidden, runtime.num_cores())),
        rows(mc.global_batch / runtime.num_cores()),
        inv_batch(1.0f / static_cast<float>(mc.global_batch)),
        prefetch(config.prefetch),
        adam(mc.optimizer == "adam"),
        gather_mesh(make_mesh(runtime, {runtime.num_cores()}, {kAxis})),
        scatter_mesh(make_mesh(runtime, {runtime.num_cores()}, {kAxis})),
        loss_mesh(make_mesh(runtime, {runtime.num_cores()}, {kAxis})),
        // The same input pipeline as train_mlp: the training rows replicated on every core.
        data(replicate_digits(runtime, split.train, "fsdp")) {
    // The initial parameters as train_mlp draws them, split into the padded FlatParameters.
    const std::vector<float> init = mlp_init_parameters(mc.hidden, mc.seed);
    int64_t offset = 0;
    for (const FlatParamShape& f : flat) {
      padded.emplace_back(static_cast<size_t>(f.padded_numel), 0.0f);
      std::copy_n(init.begin() + offset, f.numel, padded.back().begin());
      offset += f.numel;
    }
  }

  const MlpConfig& mc;
  const std::vector<FlatParamShape> flat;  // layer 0 [W1, b1], layer 1 [W2, b2]
  const int64_t rows;                      // rows of the global batch per core
  const float inv_batch;                   // 1 / global batch
  const bool prefetch, adam;
  // The same 1-D mesh of the N cores, three times: a mesh makes one communicator per axis set,
  // and one each keeps the stats of the all-gathers, the reduce-scatters and the loss all-reduce
  // apart (every core starts and calls each kind in the same order).
  const DeviceMesh gather_mesh, scatter_mesh, loss_mesh;
  const ReplicatedDigits data;
  std::vector<std::vector<float>> padded;  // initial FlatParameters, zero-padded
};

/// A temporary of one layer's padded flat size, pinned while it lives. Only the owning core may
/// use it.
struct Temp {
  DeviceBuffer buf;
  BufferPin pin;
  std::span<float> span() const { return buf.as<float>(); }
};

// Offsets within the FlatParameters: layer 0 is [W1, b1], layer 1 is [W2, b2].
constexpr int64_t kW1 = 0, kW2 = 0;
int64_t b1_offset(int64_t hidden) { return kIn * hidden; }
int64_t b2_offset(int64_t hidden) { return hidden * kOut; }

/// One core's part of an FSDP run: its shards (persistent), its batch and activations, and the
/// named parts of a step, whose all-gathers and reduce-scatters follow the header's schedule.
/// Core 0 records its HBM at the highest bytes_in_use of the first step into `peak`. Only the
/// owning core may call.
class FsdpCore {
 public:
  /// `gather` is this core's shard_map context on run.gather_mesh; the reduce-scatters and the
  /// loss use the same core's contexts on the other two meshes.
  FsdpCore(ShardMapContext& gather, FsdpRun& run, CoreState& state, HbmBreakdown* peak)
      : ctx_(gather.core()),
        run_(run),
        s_(state),
        peak_(peak),
        hidden_(run.mc.hidden),
        rank_(gather.axis_index(kAxis)),
        ag_(gather.communicator(kAxis)),
        rs_(ShardMapContext(run.scatter_mesh, ctx_).communicator(kAxis)),
        loss_(run.loss_mesh, ctx_) {
    CoreContext& ctx = ctx_;
    // Persistent, sharded: each core's 1/N of every FlatParameter, of its gradient and, with
    // Adam, of its two moments (zero-initialised; plain SGD has no optimizer state).
    const auto c = static_cast<size_t>(rank_);
    for (size_t l = 0; l < run.flat.size(); ++l) {
      const FlatParamShape& f = run.flat[l];
      s_.param_shards.push_back(allocate(f.shard_numel, "fsdp/params." + f.name));
      std::memcpy(s_.param_shards[l].data(), run.padded[l].data() + c * f.shard_numel,
                  static_cast<size_t>(f.shard_numel) * kF);
      grad_shards_.push_back(allocate(f.shard_numel, "fsdp/grads." + f.name));
      if (run.adam) {
        s_.m_shards.push_back(allocate(f.shard_numel, "fsdp/opt_state.exp_avg." + f.name));
        s_.v_shards.push_back(allocate(f.shard_numel, "fsdp/opt_state.exp_avg_sq." + f.name));
        std::memset(s_.m_shards[l].data(), 0, s_.m_shards[l].size_bytes());
        std::memset(s_.v_shards[l].data(), 0, s_.v_shards[l].size_bytes());
      }
    }
    // Batch and activations, allocated once and pinned as in train_mlp (one micro-batch); the
    // loss sum for the all-reduce.
    io_.emplace(ctx, run.data, MlpStepShape{run.rows, run.rows, hidden_, false}, "fsdp",
                run.mc.seed);
    note_allocation();
    // The loss sum is a scalar, f32[] (untiled: 4 bytes either way).
    lossbuf_ = ctx.allocate_array(ElementType::kF32, {}, "fsdp/loss");
    note_allocation();
    // Raw pointers live for the whole run: pin so that defragmentation never moves them.
    for (const DeviceBuffer* buf : {&s_.param_shards[0], &s_.param_shards[1], &grad_shards_[0],
                                    &grad_shards_[1], &lossbuf_}) {
      pins_.push_back(buf->pin());
    }
    for (size_t l = 0; l < s_.m_shards.size(); ++l) {
      pins_.push_back(s_.m_shards[l].pin());
      pins_.push_back(s_.v_shards[l].pin());
    }
    layers_.emplace(*io_);
  }

  /// Forward of both units, each gathered before and freed after it computes; the batch rows
  /// are copied while layer 0's gather runs (and, with prefetch, layer 1's too). Leaves dZ2 in
  /// the logits buffer and returns the local loss sum.
  double forward() {
    std::optional<Temp> g0 = temp(0, "gathered");
    CollectiveHandle h0 = gather(0, *g0);
    std::optional<Temp> g1;
    CollectiveHandle h1;
    io_->load_batch(run_.mc.global_batch, rank_ * run_.rows);
    if (run_.prefetch) {  // forward prefetch: layer 1's gather runs while layer 0 computes
      g1 = temp(1, "gathered");
      h1 = gather(1, *g1);
    }
    h0.wait();
    const float* p0 = g0->span().data();
    layers_->hidden_forward(p0 + kW1, p0 + b1_offset(hidden_));
    g0.reset();  // FULL_SHARD reshards after forward
    if (!run_.prefetch) {
      g1 = temp(1, "gathered");
      h1 = gather(1, *g1);
    }
    h1.wait();
    const float* p1 = g1->span().data();
    layers_->output_forward(p1 + kW2);
    layers_->add_output_bias(p1 + b2_offset(hidden_));
    g1.reset();
    return layers_->loss_and_output_grad(run_.inv_batch);
  }

  /// Backward of layer 1 then layer 0: each unit gathered again (FSDP's pre-backward hook), its
  /// full gradient computed into a temporary and reduce-scattered into the gradient shards. With
  /// prefetch, layer 0's gather starts with layer 1's and layer 1's reduce-scatter runs while
  /// layer 0 computes.
  void backward() {
    std::optional<Temp> gb1 = temp(1, "gathered");
    CollectiveHandle hb1 = gather(1, *gb1);
    if (run_.prefetch) {  // BACKWARD_PRE: layer 0's gather runs while layer 1's backward computes
      gb0_ = temp(0, "gathered");
      hb0_ = gather(0, *gb0_);
    }
    full1_ = temp(1, "unsharded_grad");
    float* g1 = zero_padding(1, *full1_);
    layers_->output_backward(g1 + kW2, g1 + b2_offset(hidden_));
    hb1.wait();
    layers_->hidden_input_grad(gb1->span().data() + kW2);
    gb1.reset();
    rs1_ = scatter(1, *full1_);
    if (!run_.prefetch) full1_.reset();
    backward_layer0();
    peak_ = nullptr;  // the first step has allocated everything a step allocates
  }

  /// The optimizer on the shards only.
  void optimizer_step(int64_t step) {
    for (size_t l = 0; l < run_.flat.size(); ++l) {
      mlp_optimizer_update(s_.param_shards[l].as<float>(), grad_shards_[l].as<float>(),
                           run_.adam ? s_.m_shards[l].as<float>() : std::span<float>(),
                           run_.adam ? s_.v_shards[l].as<float>() : std::span<float>(), step,
                           run_.mc);
    }
  }

  /// The mean loss over the global batch: psum of the cores' loss sums, the scalar donated so
  /// that the sum lands in its (pinned) buffer.
  double all_reduce_loss(double loss_sum) {
    lossbuf_.as<float>()[0] = static_cast<float>(loss_sum);
    LocalArray loss = LocalArray::adopt(ElementType::kF32, {}, std::move(lossbuf_));
    lossbuf_ = loss_.psum(std::move(loss), kAxis).release();
    return static_cast<double>(lossbuf_.as<float>()[0]) / static_cast<double>(run_.mc.global_batch);
  }

 private:
  /// Layer 0's backward. W1 is not read (the input needs no gradient), but FSDP's pre-backward
  /// hook unshards the module anyway; it is freed at once. Then waits for both reduce-scatters.
  void backward_layer0() {
    if (!run_.prefetch) {
      gb0_ = temp(0, "gathered");
      hb0_ = gather(0, *gb0_);
    }
    hb0_.wait();
    gb0_.reset();
    std::optional<Temp> full0 = temp(0, "unsharded_grad");
    float* g0 = zero_padding(0, *full0);
    layers_->hidden_backward(g0 + kW1, g0 + b1_offset(hidden_));
    CollectiveHandle rs0 = scatter(0, *full0);
    rs1_.wait();
    full1_.reset();
    rs0.wait();
    full0.reset();
  }

  /// Core 0, during the first step: records the arena when bytes_in_use reaches a new high
  /// (checked after every allocation; only allocations raise it).
  void note_allocation() {
    if (peak_ == nullptr) return;
    HbmArena& arena = ctx_.core().hbm();
    const uint64_t in_use = arena.free_space().bytes_in_use;
    if (in_use > peak_seen_) {
      peak_seen_ = in_use;
      *peak_ = hbm_breakdown(arena.chunk_records());
    }
  }
  /// A 1-D f32 array of `elements`, charged fsdp_vector_charged_bytes.
  DeviceBuffer allocate(int64_t elements, const std::string& label) {
    const int64_t dims[] = {elements};
    DeviceBuffer buf = ctx_.allocate_array(ElementType::kF32, dims, label);
    note_allocation();
    return buf;
  }
  Temp temp(size_t l, const char* kind) {
    Temp t;
    t.buf =
        allocate(run_.flat[l].padded_numel, std::string("fsdp/") + kind + "." + run_.flat[l].name);
    t.pin = t.buf.pin();
    return t;
  }
  /// Zeroes the padding of layer l's full-gradient temporary; returns its data.
  float* zero_padding(size_t l, const Temp& full) const {
    float* g = full.span().data();
    std::fill(g + run_.flat[l].numel, g + run_.flat[l].padded_numel, 0.0f);
    return g;
  }
  /// all_gather of layer l's shards into `into` (tiled along the flat dimension: rank r's shard
  /// lands at [r * shard_numel, ...)), started on the communication worker or run now.
  CollectiveHandle gather(size_t l, const Temp& into) {
    const int64_t dims[] = {run_.flat[l].shard_numel};
    auto shard = std::span<const float>(s_.param_shards[l].as<float>());
    if (run_.prefetch) {
      return ag_.all_gather_start<float>(ctx_, shard, into.span(), dims, 0, true);
    }
    ag_.all_gather<float>(ctx_, shard, into.span(), dims, 0, true);
    return CollectiveHandle();
  }
  /// reduce_scatter (sum) of layer l's full gradient: rank r gets the sum of block r.
  CollectiveHandle scatter(size_t l, const Temp& full) {
    const int64_t dims[] = {run_.flat[l].padded_numel};
    auto send = std::span<const float>(full.span());
    auto recv = grad_shards_[l].as<float>();
    if (run_.prefetch) {
      return rs_.reduce_scatter_start<float>(ctx_, send, recv, dims, ReduceOp::kSum, 0, true);
    }
    rs_.reduce_scatter<float>(ctx_, send, recv, dims, ReduceOp::kSum, 0, true);
    return CollectiveHandle();
  }

  CoreContext& ctx_;
  FsdpRun& run_;
  CoreState& s_;
  HbmBreakdown* peak_;  // core 0 during the first step, else nullptr
  uint64_t peak_seen_ = 0;
  const int64_t hidden_;
  const int64_t rank_;  // axis_index("fsdp"): which shard this core holds
  // The all-gathers and reduce-scatters write into this core's buffers and may run async (the
  // *_start forms), which the named collectives do not offer: they call the axes' communicators.
  Communicator& ag_;
  Communicator& rs_;
  ShardMapContext loss_;  // on run.loss_mesh
  std::vector<DeviceBuffer> grad_shards_;
  std::optional<MlpStepBuffers> io_;
  DeviceBuffer lossbuf_;
  std::vector<BufferPin> pins_;
  std::optional<MlpEigenLayers> layers_;
  // In flight between backward's two layers; a handle is declared after the buffers it writes,
  // so that it is destroyed (and waited for) first.
  std::optional<Temp> gb0_, full1_;
  CollectiveHandle hb0_, rs1_;
};

/// The final parameters: every core's shard, in rank order, with the padding dropped (each
/// process reads its own cores' shards and the processes exchange them). Sets `padding_is_zero`
/// when the padding of every parameter and moment shard is exactly 0.
std::vector<float> collect_parameters(const Runtime& runtime, const std::vector<CoreState>& state,
                                      const std::vector<FlatParamShape>& flat,
                                      bool& padding_is_zero) {
  std::vector<float> parameters;
  padding_is_zero = true;
  for (size_t l = 0; l < flat.size(); ++l) {
    std::vector<float> mine;  // this process's cores' shards, in core (= rank) order
    for (int core : runtime.local_core_ids()) {
      const auto c = static_cast<size_t>(core);
      const CoreState& cs = state[c];
      auto shard = cs.param_shards[l].as<float>();
      mine.insert(mine.end(), shard.begin(), shard.end());
      for (const std::vector<DeviceBuffer>* bufs : {&cs.param_shards, &cs.m_shards, &cs.v_shards}) {
        if (bufs->empty()) continue;
        auto values = (*bufs)[l].as<float>();
        for (int64_t i = 0; i < flat[l].shard_numel; ++i) {
          const bool padding = static_cast<int64_t>(c) * flat[l].shard_numel + i >= flat[l].numel;
          if (padding && values[static_cast<size_t>(i)] != 0.0f) padding_is_zero = false;
        }
      }
    }
    const std::vector<float> full =
        all_gather_values(runtime.process_group(), std::span<const float>(mine));
    parameters.insert(parameters.end(), full.begin(), full.begin() + flat[l].numel);
  }
  const int zero = padding_is_zero ? 1 : 0;
  for (int z : all_gather_values(runtime.process_group(), std::span<const int>(&zero, 1))) {
    if (z == 0) padding_is_zero = false;
  }
  return parameters;
}

}  // namespace

void FsdpConfig::validate(int num_cores) const {
  mlp.validate(num_cores);
  if (mlp.kernels != "eigen") {
    throw InvalidArgumentError("train_fsdp computes with Eigen; kernels is '" + mlp.kernels +
                               "' (expected eigen)");
  }
  if (mlp.micro_batches != 1) {
    throw InvalidArgumentError("train_fsdp does not accumulate micro-batches; micro_batches is " +
                               std::to_string(mlp.micro_batches) + " (expected 1)");
  }
}

uint64_t fsdp_vector_charged_bytes(int64_t elements, bool pad_arrays) {
  const int64_t dims[] = {elements};
  const ArrayBytes bytes = array_bytes(ElementType::kF32, dims);
  return pad_arrays ? bytes.padded_bytes : bytes.logical_bytes;
}

std::vector<FlatParamShape> fsdp_flat_params(int64_t hidden, int num_cores) {
  if (hidden < 1) {
    throw InvalidArgumentError("hidden is " + std::to_string(hidden) + " (expected >= 1)");
  }
  if (num_cores < 1) {
    throw InvalidArgumentError("num_cores is " + std::to_string(num_cores) + " (expected >= 1)");
  }
  std::vector<FlatParamShape> out;
  auto add = [&](const char* name, int64_t numel) {
    const int64_t shard = (numel + num_cores - 1) / num_cores;
    out.push_back({name, numel, shard * num_cores, shard});
  };
  add("layer0", kIn * hidden + hidden);
  add("layer1", hidden * kOut + kOut);
  return out;
}

HbmBreakdown hbm_breakdown(const std::vector<MemoryChunkRecord>& chunks) {
  HbmBreakdown b;
  for (const MemoryChunkRecord& c : chunks) {
    if (!c.in_use) continue;
    const std::string& l = c.label;
    uint64_t* into = &b.other;
    if (ends_with(l, "/train_pixels") || ends_with(l, "/train_labels")) {
      into = &b.training_set;
    } else if (l == "mlp/params" || starts_with(l, "fsdp/params.")) {
      into = &b.params;
    } else if (l == "mlp/grads+loss" || starts_with(l, "fsdp/grads.")) {
      into = &b.grads;
    } else if (starts_with(l, "fsdp/opt_state.") || starts_with(l, "mlp/opt_state.")) {
      into = &b.opt_state;
    } else if (starts_with(l, "fsdp/gathered.")) {
      into = &b.gathered;
    } else if (starts_with(l, "fsdp/unsharded_grad.") || l == "mlp/micro_grads+loss") {
      into = &b.unsharded_grads;
    } else {
      for (const char* a : {"/x", "/y", "/z1", "/a1", "/logits", "/probs"}) {
        if (ends_with(l, a)) into = &b.activations;
      }
    }
    *into += c.chunk_bytes;
  }
  return b;
}

void to_json(nlohmann::json& j, const HbmBreakdown& b) {
  j = nlohmann::json{{"training_set", b.training_set},
                     {"params", b.params},
                     {"grads", b.grads},
                     {"opt_state", b.opt_state},
                     {"gathered", b.gathered},
                     {"unsharded_grads", b.unsharded_grads},
                     {"activations", b.activations},
                     {"other", b.other},
                     {"persistent_state", b.persistent_state()},
                     {"total", b.total()}};
}

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) {
    throw InvalidArgumentError("loss curves of " + std::to_string(a.size()) + " and " +
                               std::to_string(b.size()) + " steps (expected the same length)");
  }
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    worst = std::max(worst, b[i] != 0.0 ? d / std::abs(b[i]) : d);
  }
  return worst;
}

FsdpResult train_fsdp(Runtime& runtime, const DigitsSplit& split, const FsdpConfig& config,
                      const std::function<void(int64_t, double)>& on_log) {
  const int n = runtime.num_cores();
  config.validate(n);
  const MlpConfig& mc = config.mlp;
  if (split.train.num_rows() == 0) throw InvalidArgumentError("training split is empty");
  FsdpRun fr(runtime, split, config);

  FsdpResult result;
  result.num_cores = n;
  result.prefetch = config.prefetch;
  result.optimizer = mc.optimizer;
  result.num_parameters = mlp_num_parameters(mc.hidden);
  result.flat_params = fr.flat;
  result.losses.assign(static_cast<size_t>(mc.steps), 0.0);
  result.step_seconds.assign(static_cast<size_t>(mc.steps), 0.0);
  std::vector<CoreState> state(static_cast<size_t>(n));

  // The training loop is one shard_map over the cores: no array goes in or out (the shards are
  // made from fr.padded and left in `state`).
  shard_map(fr.gather_mesh, {}, {}, [&](ShardMapContext& smc, std::span<const LocalArray>) {
    const int c = smc.device();
    FsdpCore core(smc, fr, state[static_cast<size_t>(c)], c == 0 ? &result.peak : nullptr);
    for (int64_t step = 0; step < mc.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      const double loss_sum = core.forward();
      core.backward();
      core.optimizer_step(step);
      const double loss = core.all_reduce_loss(loss_sum);
      finish_step(c == runtime.first_local_core(), step, mc.steps, mc.log_every, loss, t0,
                  result.step_seconds, result.losses, on_log);
    }
    return std::vector<LocalArray>{};
  })();

  result.median_step_ms = 1e3 * median_of(result.step_seconds);
  result.parameters = collect_parameters(runtime, state, fr.flat, result.padding_is_zero);
  result.test_accuracy = mlp_accuracy(result.parameters, mc.hidden, split.test);
  result.train_accuracy = mlp_accuracy(result.parameters, mc.hidden, split.train);
  // Per-core figures: each process reads its own cores and the processes exchange them.
  result.num_processes = runtime.process_count();
  result.hbm =
      all_gather_per_core(runtime, [&](int c) { return runtime.core(c).hbm().memory_stats(); });
  result.all_gather = all_gather_per_core(
      runtime, [&](int c) { return fr.gather_mesh.communicator(kAxis, c).stats(c); });
  result.reduce_scatter = all_gather_per_core(
      runtime, [&](int c) { return fr.scatter_mesh.communicator(kAxis, c).stats(c); });
  result.loss_all_reduce = all_gather_per_core(
      runtime, [&](int c) { return fr.loss_mesh.communicator(kAxis, c).stats(c); });
  return result;
}

void to_json(nlohmann::json& j, const FsdpResult& r) {
  nlohmann::json flat = nlohmann::json::array();
  for (const FlatParamShape& f : r.flat_params) {
    flat.push_back({{"name", f.name},
                    {"numel", f.numel},
                    {"padded_numel", f.padded_numel},
                    {"shard_numel", f.shard_numel}});
  }
  j = nlohmann::json{{"num_cores", r.num_cores},
                     {"num_processes", r.num_processes},
                     {"prefetch", r.prefetch},
                     {"optimizer", r.optimizer},
                     {"padding_is_zero", r.padding_is_zero},
                     {"num_parameters", r.num_parameters},
                     {"flat_params", flat},
                     {"losses", r.losses},
                     {"final_loss", r.losses.empty() ? 0.0 : r.losses.back()},
                     {"test_accuracy", r.test_accuracy},
                     {"train_accuracy", r.train_accuracy},
                     {"median_step_seconds", 1e-3 * r.median_step_ms},
                     {"peak_hbm_core0", r.peak},
                     {"hbm", per_core_json(r.hbm, r.num_processes)},
                     {"all_gather", per_core_json(r.all_gather, r.num_processes)},
                     {"reduce_scatter", per_core_json(r.reduce_scatter, r.num_processes)},
                     {"loss_all_reduce", per_core_json(r.loss_all_reduce, r.num_processes)}};
}

}  // namespace vtpu
