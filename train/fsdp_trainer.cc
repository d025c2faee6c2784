#include "vtpu/train/fsdp_trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "vtpu/common/error.h"
#include "vtpu/common/median.h"
#include "vtpu/train/adam.h"
#include "vtpu/train/mlp_layout.h"
#include "vtpu/train/train_step_log.h"
#include "vtpu/sharding/sharded_array.h"

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
/// shards (one per layer each).
struct CoreState {
  std::vector<DeviceBuffer> param_shards;
  std::vector<DeviceBuffer> m_shards;
  std::vector<DeviceBuffer> v_shards;
};

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
  const DigitsDataset& train = split.train;
  if (train.num_rows() == 0) throw InvalidArgumentError("training split is empty");
  const int64_t h = mc.hidden;
  const int64_t b = mc.global_batch / n;
  const float inv_batch = 1.0f / static_cast<float>(mc.global_batch);
  const std::vector<FlatParamShape> flat = fsdp_flat_params(h, n);
  const bool prefetch = config.prefetch;
  const bool adam = mc.optimizer == "adam";

  std::vector<int> cores(static_cast<size_t>(n));
  std::iota(cores.begin(), cores.end(), 0);
  // One communicator per kind of collective, so that the stats separate them. Every core starts
  // and calls them in the same order (the communicator's rule for several communicators).
  Communicator ag_comm(runtime, cores);
  Communicator rs_comm(runtime, cores);
  Communicator loss_comm(runtime, cores);

  // The same input pipeline as train_mlp: the training rows replicated on every core.
  const ReplicatedDigits data = replicate_digits(runtime, train, "fsdp");

  // The initial parameters as train_mlp draws them, split into the two padded FlatParameters.
  const std::vector<float> init = mlp_init_parameters(h, mc.seed);
  std::vector<std::vector<float>> padded(flat.size());
  {
    int64_t offset = 0;
    for (size_t l = 0; l < flat.size(); ++l) {
      padded[l].assign(static_cast<size_t>(flat[l].padded_numel), 0.0f);
      std::copy_n(init.begin() + offset, flat[l].numel, padded[l].begin());
      offset += flat[l].numel;
    }
  }

  FsdpResult result;
  result.num_cores = n;
  result.prefetch = prefetch;
  result.optimizer = mc.optimizer;
  result.num_parameters = mlp_num_parameters(h);
  result.flat_params = flat;
  result.losses.assign(static_cast<size_t>(mc.steps), 0.0);
  result.step_seconds.assign(static_cast<size_t>(mc.steps), 0.0);
  std::vector<CoreState> state(static_cast<size_t>(n));

  runtime.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    CoreState& s = state[static_cast<size_t>(c)];
    HbmArena& arena = ctx.core().hbm();
    // Core 0 records its arena at the highest bytes_in_use of the first step (checked after every
    // allocation; only allocations raise it).
    uint64_t peak_seen = 0;
    bool recording = c == 0;
    auto note_allocation = [&] {
      if (!recording) return;
      const uint64_t in_use = arena.free_space().bytes_in_use;
      if (in_use > peak_seen) {
        peak_seen = in_use;
        result.peak = hbm_breakdown(arena.chunk_records());
      }
    };
    auto allocate = [&](int64_t elements, const std::string& label) {
      DeviceBuffer buf = ctx.allocate(static_cast<uint64_t>(elements) * kF, label);
      note_allocation();
      return buf;
    };

    // Persistent, sharded: each core's 1/N of every FlatParameter, of its gradient and, with
    // Adam, of its two moments (zero-initialised; plain SGD has no optimizer state).
    std::vector<DeviceBuffer> grad_shards;
    for (size_t l = 0; l < flat.size(); ++l) {
      s.param_shards.push_back(allocate(flat[l].shard_numel, "fsdp/params." + flat[l].name));
      std::memcpy(s.param_shards[l].data(),
                  padded[l].data() + static_cast<size_t>(c) * flat[l].shard_numel,
                  static_cast<size_t>(flat[l].shard_numel) * kF);
      grad_shards.push_back(allocate(flat[l].shard_numel, "fsdp/grads." + flat[l].name));
      if (adam) {
        s.m_shards.push_back(
            allocate(flat[l].shard_numel, "fsdp/opt_state.exp_avg." + flat[l].name));
        s.v_shards.push_back(
            allocate(flat[l].shard_numel, "fsdp/opt_state.exp_avg_sq." + flat[l].name));
        std::memset(s.m_shards[l].data(), 0, s.m_shards[l].size_bytes());
        std::memset(s.v_shards[l].data(), 0, s.v_shards[l].size_bytes());
      }
    }
    // Batch and activations, allocated once and pinned as in train_mlp (one micro-batch); the
    // loss sum for the all-reduce.
    MlpStepBuffers io(ctx, data, MlpStepShape{b, b, h, false}, "fsdp", mc.seed);
    note_allocation();
    DeviceBuffer lossbuf = allocate(1, "fsdp/loss");
    // Raw pointers below live for the whole run: pin so that defragmentation never moves them.
    std::vector<BufferPin> pins;
    for (const DeviceBuffer* buf : std::initializer_list<const DeviceBuffer*>{
             &s.param_shards[0], &s.param_shards[1], &grad_shards[0], &grad_shards[1], &lossbuf}) {
      pins.push_back(buf->pin());
    }
    for (size_t l = 0; l < s.m_shards.size(); ++l) {
      pins.push_back(s.m_shards[l].pin());
      pins.push_back(s.v_shards[l].pin());
    }
    MatMap xb(io.x_data(), b, kIn);
    MatMap yb(io.y_data(), b, kOut);
    MatMap z1(io.z1.as<float>().data(), b, h);
    MatMap a1(io.a1.as<float>().data(), b, h);
    MatMap logits(io.logits.as<float>().data(), b, kOut);
    float* loss_slot = lossbuf.as<float>().data();

    // A temporary of one layer's padded flat size, pinned while it lives.
    struct Temp {
      DeviceBuffer buf;
      BufferPin pin;
      std::span<float> span() const { return buf.as<float>(); }
    };
    auto temp = [&](size_t l, const char* kind) {
      Temp t;
      t.buf = allocate(flat[l].padded_numel, std::string("fsdp/") + kind + "." + flat[l].name);
      t.pin = t.buf.pin();
      return t;
    };
    // all_gather of layer l's shards into `into` (tiled along the flat dimension: rank r's shard
    // lands at [r * shard_numel, ...)), started on the communication worker or run now.
    auto gather = [&](size_t l, const Temp& into) {
      const int64_t dims[] = {flat[l].shard_numel};
      auto shard = std::span<const float>(s.param_shards[l].as<float>());
      if (prefetch) return ag_comm.all_gather_start<float>(ctx, shard, into.span(), dims, 0, true);
      ag_comm.all_gather<float>(ctx, shard, into.span(), dims, 0, true);
      return CollectiveHandle();
    };
    // reduce_scatter (sum) of layer l's full gradient: rank r gets the sum of block r.
    auto scatter = [&](size_t l, const Temp& full) {
      const int64_t dims[] = {flat[l].padded_numel};
      auto send = std::span<const float>(full.span());
      auto recv = grad_shards[l].as<float>();
      if (prefetch) {
        return rs_comm.reduce_scatter_start<float>(ctx, send, recv, dims, ReduceOp::kSum, 0, true);
      }
      rs_comm.reduce_scatter<float>(ctx, send, recv, dims, ReduceOp::kSum, 0, true);
      return CollectiveHandle();
    };
    const int64_t w2_offset = 0, b2_offset = h * kOut;  // within layer 1
    const int64_t w1_offset = 0, b1_offset = kIn * h;   // within layer 0
    // W2 and dW2 through copies at Eigen's alignment, as train_mlp does
    // (train/mlp_tp_trainer.cc: Eigen's smallest products round differently at other operand
    // addresses).
    RowMatrix w2_aligned(h, kOut), dw2_aligned(h, kOut);

    for (int64_t step = 0; step < mc.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      // ---- forward -------------------------------------------------------------------------
      std::optional<Temp> g0 = temp(0, "gathered");
      CollectiveHandle h0 = gather(0, *g0);  // prefetch: overlaps the batch copy below
      std::optional<Temp> g1;
      CollectiveHandle h1;
      io.load_batch(mc.global_batch, c * b);
      if (prefetch) {  // forward prefetch: layer 1's gather runs while layer 0 computes
        g1 = temp(1, "gathered");
        h1 = gather(1, *g1);
      }
      h0.wait();
      {
        const float* p = g0->span().data();
        z1.noalias() = xb * ConstMatMap(p + w1_offset, kIn, h);
        z1.rowwise() += ConstVecMap(p + b1_offset, h);
        a1 = z1.cwiseMax(0.0f);
      }
      g0.reset();  // free the gathered layer 0 (FULL_SHARD reshards after forward)
      if (!prefetch) {
        g1 = temp(1, "gathered");
        h1 = gather(1, *g1);
      }
      h1.wait();
      double loss_sum = 0.0;
      {
        const float* p = g1->span().data();
        w2_aligned = ConstMatMap(p + w2_offset, h, kOut);
        logits.noalias() = a1 * w2_aligned;
        logits.rowwise() += ConstVecMap(p + b2_offset, kOut);
      }
      g1.reset();
      loss_sum = softmax_cross_entropy_rows(logits.data(), yb.data(), b);
      logits = (logits - yb) * inv_batch;  // dZ2, scaled by the global batch

      // ---- backward, layer 1 ---------------------------------------------------------------
      std::optional<Temp> gb1 = temp(1, "gathered");
      CollectiveHandle hb1 = gather(1, *gb1);
      std::optional<Temp> gb0;
      CollectiveHandle hb0;
      if (prefetch) {  // BACKWARD_PRE: layer 0's gather runs while layer 1's backward computes
        gb0 = temp(0, "gathered");
        hb0 = gather(0, *gb0);
      }
      std::optional<Temp> full1 = temp(1, "unsharded_grad");
      {
        float* g = full1->span().data();
        std::fill(g + flat[1].numel, g + flat[1].padded_numel, 0.0f);  // padding
        dw2_aligned.noalias() = a1.transpose() * logits;
        MatMap(g + w2_offset, h, kOut) = dw2_aligned;
        VecMap(g + b2_offset, kOut) = logits.colwise().sum();
        hb1.wait();
        w2_aligned = ConstMatMap(gb1->span().data() + w2_offset, h, kOut);
        a1.noalias() = logits * w2_aligned.transpose();
      }
      gb1.reset();
      CollectiveHandle rs1 = scatter(1, *full1);
      if (!prefetch) full1.reset();

      // ---- backward, layer 0 ---------------------------------------------------------------
      if (!prefetch) {
        gb0 = temp(0, "gathered");
        hb0 = gather(0, *gb0);
      }
      // W1 is not read (the input needs no gradient), but FSDP's pre-backward hook unshards the
      // module anyway; freed at once.
      hb0.wait();
      gb0.reset();
      std::optional<Temp> full0 = temp(0, "unsharded_grad");
      {
        float* g = full0->span().data();
        std::fill(g + flat[0].numel, g + flat[0].padded_numel, 0.0f);
        z1 = (z1.array() > 0.0f).select(a1, 0.0f);  // dZ1
        MatMap(g + w1_offset, kIn, h).noalias() = xb.transpose() * z1;
        VecMap(g + b1_offset, h) = z1.colwise().sum();
      }
      CollectiveHandle rs0 = scatter(0, *full0);
      rs1.wait();
      full1.reset();
      rs0.wait();
      full0.reset();
      recording = false;  // the first step has allocated everything a step allocates

      // ---- optimizer on the shards, then the loss -------------------------------------------
      for (size_t l = 0; l < flat.size(); ++l) {
        if (adam) {
          adam_update(s.param_shards[l].as<float>(), grad_shards[l].as<float>(),
                      s.m_shards[l].as<float>(), s.v_shards[l].as<float>(), step + 1,
                      mc.learning_rate, mc.adam);
          continue;
        }
        Eigen::Map<Eigen::VectorXf> p(s.param_shards[l].as<float>().data(), flat[l].shard_numel);
        Eigen::Map<const Eigen::VectorXf> g(grad_shards[l].as<float>().data(), flat[l].shard_numel);
        p -= mc.learning_rate * g;
      }
      *loss_slot = static_cast<float>(loss_sum);
      loss_comm.all_reduce<float>(ctx, lossbuf.as<float>());
      const double loss = static_cast<double>(*loss_slot) / static_cast<double>(mc.global_batch);
      finish_step(c, step, mc.steps, mc.log_every, loss, t0, result.step_seconds, result.losses,
                  on_log);
    }
  });

  result.median_step_ms = 1e3 * median_of(result.step_seconds);
  // The final parameters: every core's shard, in rank order, with the padding dropped; and the
  // padding (elements numel.. of the padded vector) of the parameters and moments checked.
  result.padding_is_zero = true;
  for (size_t l = 0; l < flat.size(); ++l) {
    std::vector<float> full;
    for (int c = 0; c < n; ++c) {
      const CoreState& cs = state[static_cast<size_t>(c)];
      auto shard = cs.param_shards[l].as<float>();
      full.insert(full.end(), shard.begin(), shard.end());
      for (const std::vector<DeviceBuffer>* bufs : {&cs.param_shards, &cs.m_shards, &cs.v_shards}) {
        if (bufs->empty()) continue;
        auto values = (*bufs)[l].as<float>();
        for (int64_t i = 0; i < flat[l].shard_numel; ++i) {
          const bool padding = c * flat[l].shard_numel + i >= flat[l].numel;
          if (padding && values[static_cast<size_t>(i)] != 0.0f) result.padding_is_zero = false;
        }
      }
    }
    result.parameters.insert(result.parameters.end(), full.begin(), full.begin() + flat[l].numel);
  }
  result.test_accuracy = mlp_accuracy(result.parameters, h, split.test);
  result.train_accuracy = mlp_accuracy(result.parameters, h, train);
  for (int c = 0; c < n; ++c) {
    result.hbm.push_back(runtime.core(c).hbm().memory_stats());
    result.all_gather.push_back(ag_comm.stats(c));
    result.reduce_scatter.push_back(rs_comm.stats(c));
    result.loss_all_reduce.push_back(loss_comm.stats(c));
  }
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
                     {"hbm", per_core_json(r.hbm)},
                     {"all_gather", per_core_json(r.all_gather)},
                     {"reduce_scatter", per_core_json(r.reduce_scatter)},
                     {"loss_all_reduce", per_core_json(r.loss_all_reduce)}};
}

}  // namespace vtpu
