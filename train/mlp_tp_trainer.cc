#include "vtpu/train/mlp_tp_trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <span>

#include "vtpu/common/error.h"
#include "vtpu/common/median.h"
#include "vtpu/common/strings.h"
#include "vtpu/train/adam.h"
#include "vtpu/train/mlp_layout.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/train/train_step_log.h"
#include "vtpu/runtime/pallas_kernels.h"

namespace vtpu {

namespace {

constexpr int64_t kIn = kMlpIn;
constexpr int64_t kOut = kMlpOut;

int64_t shard_hidden(int64_t hidden, int64_t tensor) {
  if (tensor < 1 || hidden < 1 || hidden % tensor != 0) {
    throw InvalidArgumentError("hidden " + std::to_string(hidden) +
                               " does not split over a tensor-parallel group of " +
                               count_text(tensor, "core") +
                               " (expected a tensor size >= 1 that divides hidden: "
                               "Megatron splits the hidden units evenly)");
  }
  return hidden / tensor;
}

/// One forward and backward pass with the pipelined kernels (runtime/pallas_kernels.h) on rows
/// [row0, row0 + b) of this core's batch buffers x and y: a1 = relu(x W1 + b1) and logits = a1 W2 +
/// b2 (fused dense), P = softmax(logits) (row softmax), then dW2 = a1^T dZ2, dA1 = dZ2 W2^T, dW1 =
/// x^T dZ1 (tiled matmuls with transposed operands). Writes the gradients into `grads` (the layout
/// of `params`) and returns the local loss sum. The same math as the Eigen path; only f32 summation
/// order may differ.
double pallas_step(VirtualCore& core, const DeviceBuffer& x, const DeviceBuffer& y, int64_t row0,
                   const DeviceBuffer& params, const DeviceBuffer& grads, const DeviceBuffer& a1buf,
                   const DeviceBuffer& z1buf, const DeviceBuffer& logitsbuf,
                   const DeviceBuffer& probsbuf, const MlpLayout& layout, int64_t b,
                   float inv_batch) {
  const int64_t h = layout.hidden;
  const uint64_t f = sizeof(float);
  auto at = [&](const DeviceBuffer& buf, int64_t rows, int64_t cols, int64_t offset_elements) {
    return HbmMatrix{&buf, rows, cols, static_cast<uint64_t>(offset_elements) * f};
  };
  const HbmMatrix X = at(x, b, kIn, row0 * kIn), A1 = at(a1buf, b, h, 0), Z1 = at(z1buf, b, h, 0);
  const HbmMatrix L = at(logitsbuf, b, kOut, 0), P = at(probsbuf, b, kOut, 0);
  MatmulOptions relu, bias, ta, tb;
  relu.epilogue = MatmulEpilogue::kBiasRelu;
  bias.epilogue = MatmulEpilogue::kBias;
  ta.transpose_lhs = true;
  tb.transpose_rhs = true;
  // Blocks of at most 256 (the default), and the whole dim when it is smaller (always legal).
  // Forward.
  pallas_dense(core, X, at(params, kIn, h, layout.w1()), at(params, 1, h, layout.b1()), A1,
               fit_blocks(relu, b, h, kIn));
  pallas_dense(core, A1, at(params, h, kOut, layout.w2()), at(params, 1, kOut, layout.b2()), L,
               fit_blocks(bias, b, kOut, h));
  pallas_softmax(core, L, P, fit_block(256, b));
  MatMap probs(probsbuf.as<float>().data(), b, kOut);
  MatMap yb(y.as<float>().data() + row0 * kOut, b, kOut);
  double loss_sum = 0.0;
  for (int64_t i = 0; i < b; ++i) {
    Eigen::Index label;
    yb.row(i).maxCoeff(&label);
    loss_sum -= std::log(static_cast<double>(probs(i, label)));
  }
  // Backward: dZ2 = (P - Y) / B into the logits buffer.
  MatMap dz2(logitsbuf.as<float>().data(), b, kOut);
  dz2 = (probs - yb) * inv_batch;
  float* g = grads.as<float>().data();
  pallas_matmul(core, A1, L, at(grads, h, kOut, layout.w2()),
                fit_blocks(ta, h, kOut, b));  // a1^T dZ2
  VecMap(g + layout.b2(), kOut) = dz2.colwise().sum();
  pallas_matmul(core, L, at(params, h, kOut, layout.w2()), Z1,
                fit_blocks(tb, b, h, kOut));  // dZ2 W2^T
  MatMap a1(a1buf.as<float>().data(), b, h), dz1(z1buf.as<float>().data(), b, h);
  dz1 = (a1.array() > 0.0f).select(dz1, 0.0f);  // dZ1 (a1 > 0 exactly where z1 > 0)
  pallas_matmul(core, X, Z1, at(grads, kIn, h, layout.w1()), fit_blocks(ta, kIn, h, b));  // x^T dZ1
  VecMap(g + layout.b1(), h) = dz1.colwise().sum();
  return loss_sum;
}

/// What outlives the SPMD program on each core: its parameter shard (read after the run) and its
/// gradient bucket, as train_mlp has always kept them (the HBM stats after training count both).
struct CoreState {
  DeviceBuffer params;  // MlpLayout{hidden / T}.size() floats
  DeviceBuffer grads;   // that + 1 floats; the last is the loss sum, summed over the data group
};

}  // namespace

int64_t mlp_tp_shard_parameters(int64_t hidden, int64_t tensor) {
  return MlpLayout{shard_hidden(hidden, tensor)}.size();
}

std::vector<float> mlp_tp_shard(const std::vector<float>& full, int64_t hidden, int64_t tensor,
                                int64_t rank) {
  const MlpLayout s{shard_hidden(hidden, tensor)};
  const MlpLayout f{hidden};
  if (static_cast<int64_t>(full.size()) != f.size()) {
    throw InvalidArgumentError("MLP has " + std::to_string(full.size()) + " parameters, expected " +
                               std::to_string(f.size()) + " for hidden " + std::to_string(hidden));
  }
  if (rank < 0 || rank >= tensor) {
    throw InvalidArgumentError("tensor rank " + std::to_string(rank) + " (expected 0.." +
                               std::to_string(tensor - 1) + ")");
  }
  std::vector<float> out(static_cast<size_t>(s.size()));
  const int64_t c0 = rank * s.hidden;  // first hidden unit of the shard
  ConstMatMap w1(full.data() + f.w1(), kIn, hidden);
  MatMap(out.data() + s.w1(), kIn, s.hidden) = w1.middleCols(c0, s.hidden);
  VecMap(out.data() + s.b1(), s.hidden) = ConstVecMap(full.data() + f.b1() + c0, s.hidden);
  ConstMatMap w2(full.data() + f.w2(), hidden, kOut);
  MatMap(out.data() + s.w2(), s.hidden, kOut) = w2.middleRows(c0, s.hidden);
  VecMap(out.data() + s.b2(), kOut) = ConstVecMap(full.data() + f.b2(), kOut);
  return out;
}

MlpTensorParallelResult train_mlp_tensor_parallel(
    Runtime& runtime, const DigitsSplit& split, const MlpConfig& config,
    const DataTensorLayout& layout, const std::function<void(int64_t, double)>& on_log) {
  const int n = runtime.num_cores();
  if (layout.num_cores() != n) {
    throw InvalidArgumentError("data x tensor layout " + layout.to_string() + " needs " +
                               count_text(layout.num_cores(), "core") + ", the runtime has " +
                               std::to_string(n));
  }
  config.validate(static_cast<int>(layout.data));  // the batch splits over the data shards
  const int64_t tsz = layout.tensor;
  const MlpLayout sl{shard_hidden(config.hidden, tsz)};
  if (config.kernels == "pallas" && tsz > 1) {
    // The fused dense + bias kernel would add b2 to every tensor shard's partial logits.
    throw UnimplementedError(
        "kernels 'pallas' are not implemented for the tensor-parallel MLP "
        "(tensor " +
        std::to_string(tsz) + "; expected eigen, or a tensor size of 1)");
  }
  const DigitsDataset& train = split.train;
  if (train.num_rows() == 0) throw InvalidArgumentError("training split is empty");
  const int64_t shard_size = sl.size();
  const int64_t batch = config.global_batch;
  const int64_t b = batch / layout.data;  // rows per data shard
  const int64_t k_micro = config.micro_batches;
  const int64_t mb = b / k_micro;  // rows per micro-batch (all of b by default)
  const float inv_batch = 1.0f / static_cast<float>(batch);
  const bool adam = config.optimizer == "adam";
  const bool pallas = config.kernels == "pallas";

  // One tensor shard needs no tensor group: its logits are whole.
  std::vector<std::unique_ptr<Communicator>> tp_comms;
  if (tsz > 1) tp_comms = Communicator::for_groups(runtime, layout.tensor_groups);
  auto dp_comms = Communicator::for_groups(runtime, layout.data_groups);
  // The at_peak hook's barriers run on their own communicator, so that the stats count only the
  // training collectives.
  std::optional<Communicator> sync;
  if (config.at_peak) {
    std::vector<int> cores(static_cast<size_t>(n));
    std::iota(cores.begin(), cores.end(), 0);
    sync.emplace(runtime, std::move(cores));
  }
  // The training rows go to every core once (replicated, P() on a 1-D mesh), as a device-side
  // input pipeline would hold them; each step a core takes its data shard's rows of the global
  // batch from its replica. So the host is not on the step's critical path.
  const ReplicatedDigits data = replicate_digits(runtime, train, "mlp");
  const std::vector<float> init = mlp_init_parameters(config.hidden, config.seed);
  std::vector<std::vector<float>> init_shards;
  for (int64_t t = 0; t < tsz; ++t) {
    init_shards.push_back(mlp_tp_shard(init, config.hidden, tsz, t));
  }

  MlpTensorParallelResult result;
  result.data = layout.data;
  result.tensor = tsz;
  result.shard_parameters = shard_size;
  MlpResult& run = result.run;
  run.num_cores = n;
  run.num_parameters = mlp_num_parameters(config.hidden);
  run.losses.assign(static_cast<size_t>(config.steps), 0.0);
  run.step_seconds.assign(static_cast<size_t>(config.steps), 0.0);
  std::vector<CoreState> state(static_cast<size_t>(n));

  // One SPMD program runs every step, as a jitted training loop would.
  runtime.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    const auto ci = static_cast<size_t>(c);
    const int64_t d = layout.data_rank[ci], t = layout.tensor_rank[ci];
    Communicator* tp =
        tsz > 1 ? tp_comms[static_cast<size_t>(layout.tensor_group[ci])].get() : nullptr;
    Communicator& dp = *dp_comms[static_cast<size_t>(layout.data_group[ci])];
    CoreState& s = state[ci];
    const int64_t hs = sl.hidden;
    const auto f = sizeof(float);
    // Buffers live across steps, allocated once, as XLA's buffer assignment would.
    s.params = ctx.allocate(static_cast<uint64_t>(shard_size) * f, "mlp/params");
    s.grads = ctx.allocate(static_cast<uint64_t>(shard_size + 1) * f, "mlp/grads+loss");
    // Gradient accumulation: micro-batches after the first compute into this bucket, which is
    // then added into s.grads.
    DeviceBuffer micro = k_micro > 1 ? ctx.allocate(static_cast<uint64_t>(shard_size + 1) * f,
                                                    "mlp/micro_grads+loss")
                                     : DeviceBuffer();
    // Adam's moments (PyTorch's exp_avg and exp_avg_sq), shaped like the parameter shard.
    DeviceBuffer adam_m, adam_v;
    if (adam) {
      adam_m = ctx.allocate(static_cast<uint64_t>(shard_size) * f, "mlp/opt_state.exp_avg");
      adam_v = ctx.allocate(static_cast<uint64_t>(shard_size) * f, "mlp/opt_state.exp_avg_sq");
      std::memset(adam_m.data(), 0, adam_m.size_bytes());
      std::memset(adam_v.data(), 0, adam_v.size_bytes());
    }
    MlpStepBuffers io(ctx, data, MlpStepShape{b, mb, hs, pallas}, "mlp", config.seed);
    const std::vector<float>& shard = init_shards[static_cast<size_t>(t)];
    std::memcpy(s.params.data(), shard.data(), shard.size() * f);
    // The step keeps raw pointers into these buffers for the whole run (io pins its own).
    std::vector<BufferPin> pins;
    for (const DeviceBuffer* buf : {&s.params, &s.grads, &micro, &adam_m, &adam_v}) {
      if (buf->valid()) pins.push_back(buf->pin());
    }

    float* p = s.params.as<float>().data();
    float* g = s.grads.as<float>().data();
    ConstMatMap w1(p + sl.w1(), kIn, hs);
    ConstVecMap b1(p + sl.b1(), hs);
    ConstMatMap w2(p + sl.w2(), hs, kOut);
    ConstVecMap b2(p + sl.b2(), kOut);
    MatMap z1(io.z1.as<float>().data(), mb, hs);
    MatMap a1(io.a1.as<float>().data(), mb, hs);
    MatMap logits(io.logits.as<float>().data(), mb, kOut);
    Eigen::Map<Eigen::VectorXf> params(p, shard_size);
    Eigen::Map<const Eigen::VectorXf> grads(g, shard_size);

    // W2 and its gradient through copies at Eigen's alignment (64 bytes). Regression (new-user
    // pass nu8, N23): W2 starts 65 Hs floats into the flat parameters here and at the start of
    // the gathered unit in train_fsdp, other addresses modulo the SIMD width. Eigen computes a
    // product this small (rows + depth + cols < 20, e.g. dA1 = dZ2 W2^T for Hs = 1 and 8 rows)
    // coefficient by coefficient, and which terms of those sums go through SIMD packets and which
    // through scalar code depends on the operands' addresses: dA1 differed in its last bits, and
    // FSDP's losses from these by 1.2e-7. Both trainers multiply with such copies (Hs x 10
    // floats each), so the same operands at the same alignment run the same instructions.
    RowMatrix w2_aligned(hs, kOut), dw2_aligned(hs, kOut);

    // Forward and backward (Eigen) of rows [row0, row0 + mb) of this core's batch: writes this
    // shard's gradients into `grad` (MlpLayout{hs}) and returns the loss sum.
    auto eigen_step = [&](int64_t row0, float* grad) {
      ConstMatMap xb(io.x_data() + row0 * kIn, mb, kIn);
      ConstMatMap yb(io.y_data() + row0 * kOut, mb, kOut);
      MatMap dw1(grad + sl.w1(), kIn, hs);
      VecMap db1(grad + sl.b1(), hs);
      MatMap dw2(grad + sl.w2(), hs, kOut);
      VecMap db2(grad + sl.b2(), kOut);
      w2_aligned = w2;
      // Forward: column-parallel W1, row-parallel W2.
      z1.noalias() = xb * w1;
      z1.rowwise() += b1;
      a1 = z1.cwiseMax(0.0f);
      logits.noalias() = a1 * w2_aligned;
      // Megatron's g: the partial logits of the T shards, summed over the tensor group.
      if (tp != nullptr) tp->all_reduce<float>(ctx, io.logits.as<float>());
      logits.rowwise() += b2;
      // Softmax cross-entropy, stable; logits become the probabilities.
      const double loss_sum = softmax_cross_entropy_rows(logits.data(), yb.data(), mb);
      // Backward, all local (see the header for the input gradient that is not needed): dZ2 =
      // (P - Y) / B, the same on every tensor shard, scaled by the global batch so that the sum
      // over the data shards is the gradient of the global mean.
      logits = (logits - yb) * inv_batch;
      dw2_aligned.noalias() = a1.transpose() * logits;
      dw2 = dw2_aligned;
      db2 = logits.colwise().sum();
      a1.noalias() = logits * w2_aligned.transpose();  // dA1 (this shard's hidden units)
      z1 = (z1.array() > 0.0f).select(a1, 0.0f);       // dZ1
      dw1.noalias() = xb.transpose() * z1;
      db1 = z1.colwise().sum();
      return loss_sum;
    };

    for (int64_t step = 0; step < config.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      io.load_batch(batch, d * b);  // this data shard's rows of the global batch
      // Micro-batch k's gradients and loss sum: k = 0 straight into the bucket, each later one
      // into `micro` and then added, so the bucket holds ((g_0 + g_1) + g_2) + ..., the order in
      // which the all-reduce folds the data shards' buckets.
      for (int64_t k = 0; k < k_micro; ++k) {
        const DeviceBuffer& into = k == 0 ? s.grads : micro;
        float* gk = into.as<float>().data();
        const double loss_sum =
            pallas ? pallas_step(ctx.core(), io.x, io.y, k * mb, s.params, into, io.a1, io.z1,
                                 io.logits, io.probs, sl, mb, inv_batch)
                   : eigen_step(k * mb, gk);
        gk[shard_size] = static_cast<float>(loss_sum);
        if (k > 0) {
          Eigen::Map<Eigen::VectorXf>(g, shard_size + 1) +=
              Eigen::Map<const Eigen::VectorXf>(gk, shard_size + 1);
        }
      }
      // Data parallel: one bucket (the shard's gradients and the loss sum) over the data group.
      // A group of one core sums nothing, so it runs no all-reduce (as train_transformer_on_layout;
      // the one-core all-reduce in place left the buffer as it was: the same bits).
      if (dp.size() > 1) dp.all_reduce<float>(ctx, s.grads.as<float>());
      // The optimizer on the shard; every core of a data group applies identical sums.
      if (adam) {
        adam_update(s.params.as<float>(), std::span<const float>(g, shard_size), adam_m.as<float>(),
                    adam_v.as<float>(), step + 1, config.learning_rate, config.adam);
      } else {
        params -= config.learning_rate * grads;
      }
      const double loss = static_cast<double>(g[shard_size]) / static_cast<double>(batch);
      finish_step(c, step, config.steps, config.log_every, loss, t0, run.step_seconds, run.losses,
                  on_log);
    }
    if (config.at_peak) {
      sync->barrier(ctx);  // every core at its peak (timeouts and aborts included)
      if (c == 0) config.at_peak(runtime);
      sync->barrier(ctx);
    }
  });

  run.median_step_ms = 1e3 * median_of(run.step_seconds);
  // The replicas: every core of a data group holds its group's first core's shard, and every
  // tensor shard holds the same b2 (train/replica_check.h).
  std::vector<std::span<const float>> shards;
  std::vector<std::span<const float>> b2s;
  for (const CoreState& s : state) {
    shards.push_back(s.params.as<float>());
    b2s.push_back(shards.back().subspan(static_cast<size_t>(sl.b2()), kOut));
  }
  const std::string of_shard =
      tsz > 1 ? " (its tensor shard of " + std::to_string(tsz) + ")" : std::string();
  run.replica_mismatch = compare_replicas(shards, layout.data_groups,
                                          {{"fc1.w" + of_shard, sl.w1(), kIn * sl.hidden},
                                           {"fc1.b" + of_shard, sl.b1(), sl.hidden},
                                           {"fc2.w" + of_shard, sl.w2(), sl.hidden * kOut},
                                           {"fc2.b", sl.b2(), kOut}});
  if (!run.replica_mismatch) {
    std::vector<int> tensor_shard_0s;  // the data-shard-0 core of each tensor shard
    for (const std::vector<int>& group : layout.data_groups) tensor_shard_0s.push_back(group[0]);
    run.replica_mismatch = compare_replicas(b2s, {tensor_shard_0s}, {{"fc2.b", 0, kOut}});
  }
  // Gather the full parameters from the data-shard-0 core of each tensor shard.
  const MlpLayout fl{config.hidden};
  run.parameters.assign(static_cast<size_t>(fl.size()), 0.0f);
  for (const std::vector<int>& group : layout.data_groups) {  // one per tensor shard
    auto s0 = state[static_cast<size_t>(group[0])].params.as<float>();
    const int64_t t = layout.tensor_rank[static_cast<size_t>(group[0])];
    const int64_t c0 = t * sl.hidden;
    float* full = run.parameters.data();
    MatMap(full + fl.w1(), kIn, config.hidden).middleCols(c0, sl.hidden) =
        ConstMatMap(s0.data() + sl.w1(), kIn, sl.hidden);
    VecMap(full + fl.b1() + c0, sl.hidden) = ConstVecMap(s0.data() + sl.b1(), sl.hidden);
    MatMap(full + fl.w2(), config.hidden, kOut).middleRows(c0, sl.hidden) =
        ConstMatMap(s0.data() + sl.w2(), sl.hidden, kOut);
    if (t == 0) std::copy_n(s0.data() + sl.b2(), kOut, full + fl.b2());
  }
  run.test_accuracy = mlp_accuracy(run.parameters, config.hidden, split.test);
  run.train_accuracy = mlp_accuracy(run.parameters, config.hidden, train);
  for (int c = 0; c < n; ++c) {
    const auto ci = static_cast<size_t>(c);
    run.hbm.push_back(runtime.core(c).hbm().memory_stats());
    run.vmem.push_back(runtime.core(c).memory(MemorySpace::kVmem).memory_stats());
    run.all_reduce.push_back(dp_comms[static_cast<size_t>(layout.data_group[ci])]->stats(c));
    result.tensor_all_reduce.push_back(
        tsz > 1 ? tp_comms[static_cast<size_t>(layout.tensor_group[ci])]->stats(c)
                : CollectiveStats{});
  }
  return result;
}

void to_json(nlohmann::json& j, const MlpTensorParallelResult& r) {
  j = r.run;
  j["data"] = r.data;
  j["tensor"] = r.tensor;
  j["shard_parameters"] = r.shard_parameters;
  j["tensor_all_reduce"] = per_core_json(r.tensor_all_reduce);
}

}  // namespace vtpu
