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
#include "vtpu/runtime/pallas_kernels.h"
#include "vtpu/runtime/process_exchange.h"
#include "vtpu/sharding/shard_map.h"
#include "vtpu/train/adam.h"
#include "vtpu/train/mlp_eigen_layers.h"
#include "vtpu/train/mlp_layout.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/train/train_step_log.h"

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

/// The buffer's floats, or an empty span for an empty handle (Adam's moments under SGD).
std::span<float> floats_or_empty(const DeviceBuffer& buf) {
  return buf.valid() ? buf.as<float>() : std::span<float>();
}

/// The mesh axes of the two roles: the run's mesh is (D, T) with these names (layout_mesh).
constexpr const char* kDataAxis = "data";
constexpr const char* kModelAxis = "model";

/// The layout as a (D, T) mesh over its cores: the core of data shard d and tensor shard t sits
/// at (d, t), so the groups over kDataAxis and kModelAxis are the layout's data and tensor
/// groups with the same ranks, and the named all-reduces fold the same sums in the same order
/// as the layout's groups would. (A plan's own mesh may name its axes otherwise or split a role
/// over several axes; DataTensorLayout has already flattened them as JAX does.)
DeviceMesh layout_mesh(Runtime& runtime, const DataTensorLayout& layout) {
  std::vector<int> devices(static_cast<size_t>(layout.num_cores()));
  for (size_t c = 0; c < devices.size(); ++c) {
    devices[static_cast<size_t>(layout.data_rank[c] * layout.tensor + layout.tensor_rank[c])] =
        static_cast<int>(c);
  }
  return make_mesh(runtime, {layout.data, layout.tensor}, {kDataAxis, kModelAxis},
                   std::move(devices));
}

/// psum over `axes` of the f32 array of `shape` in `buf`, donated: ShardMapContext::psum of an
/// owned array reduces in place, so the sum lands in `buf`'s own bytes and the raw pointers the
/// step keeps into it (Eigen maps, pins) stay valid. InternalError if the sum moved.
void psum_donated(ShardMapContext& ctx, DeviceBuffer& buf, std::vector<int64_t> shape,
                  const AxisNames& axes) {
  const void* before = buf.data();
  LocalArray sum =
      ctx.psum(LocalArray::adopt(ElementType::kF32, std::move(shape), std::move(buf)), axes);
  buf = std::move(sum).release();
  if (buf.data() != before) {
    throw InternalError("psum over " + axes.to_string() +
                        " of a donated buffer returned another buffer (expected the sum in place)");
  }
}

/// The checks of train_mlp_tensor_parallel's arguments; returns the layout of one tensor shard.
MlpLayout checked_shard_layout(const Runtime& runtime, const DigitsSplit& split,
                               const MlpConfig& config, const DataTensorLayout& layout) {
  const int n = runtime.num_cores();
  if (layout.num_cores() != n) {
    throw InvalidArgumentError("data x tensor layout " + layout.to_string() + " needs " +
                               count_text(layout.num_cores(), "core") + ", the runtime has " +
                               std::to_string(n));
  }
  config.validate(static_cast<int>(layout.data));  // the batch splits over the data shards
  const MlpLayout shard{shard_hidden(config.hidden, layout.tensor)};
  if (config.kernels == "pallas" && layout.tensor > 1) {
    // The fused dense + bias kernel would add b2 to every tensor shard's partial logits.
    throw UnimplementedError(
        "kernels 'pallas' are not implemented for the tensor-parallel MLP "
        "(tensor " +
        std::to_string(layout.tensor) + "; expected eigen, or a tensor size of 1)");
  }
  if (split.train.num_rows() == 0) throw InvalidArgumentError("training split is empty");
  return shard;
}

/// What every core of a run reads: the configuration, the mesh, the replicated training rows
/// and the initial tensor shards. Built in this order before the shard_map runs (the training set
/// is the first HBM allocation); while it runs, every core reads the rest and calls the mesh's
/// thread-safe communicators.
struct TensorParallelRun {
  TensorParallelRun(Runtime& runtime, const DigitsSplit& split, const MlpConfig& config,
                    const DataTensorLayout& layout)
      : config(config),
        layout(layout),
        shard(checked_shard_layout(runtime, split, config, layout)),
        rows(config.global_batch / layout.data),
        micro_rows(rows / config.micro_batches),
        inv_batch(1.0f / static_cast<float>(config.global_batch)),
        adam(config.optimizer == "adam"),
        pallas(config.kernels == "pallas"),
        mesh(layout_mesh(runtime, layout)) {
    // The at_peak hook's barriers run on their own communicator, so that the mesh's stats count
    // only the training collectives.
    if (config.at_peak) {
      std::vector<int> cores(static_cast<size_t>(runtime.num_cores()));
      std::iota(cores.begin(), cores.end(), 0);
      sync.emplace(runtime, std::move(cores));
    }
    // The training rows go to every core once, as a device-side input pipeline would hold them;
    // each step a core takes its data shard's rows of the global batch from its replica, so the
    // host is not on the step's critical path.
    data.emplace(replicate_digits(runtime, split.train, "mlp", mesh));
    const std::vector<float> init = mlp_init_parameters(config.hidden, config.seed);
    for (int64_t t = 0; t < layout.tensor; ++t) {
      init_shards.push_back(mlp_tp_shard(init, config.hidden, layout.tensor, t));
    }
  }

  const MlpConfig& config;
  const DataTensorLayout& layout;
  const MlpLayout shard;     // one tensor shard's flat parameters
  const int64_t rows;        // rows of the global batch per data shard
  const int64_t micro_rows;  // rows per micro-batch (all of `rows` by default)
  const float inv_batch;     // 1 / global batch
  const bool adam, pallas;
  const DeviceMesh mesh;  // (D, T), axes kDataAxis and kModelAxis
  std::optional<Communicator> sync;
  std::optional<ReplicatedDigits> data;
  std::vector<std::vector<float>> init_shards;
};

/// One core's part of the run, inside the shard_map: its buffers, allocated once in HBM in the
/// order the header lists (as XLA's buffer assignment would), and the named parts of a step.
/// Only the owning core may call.
class TensorParallelCore {
 public:
  /// `pixels` and `one_hot`: this core's replica of the training rows (shard_map's blocks).
  TensorParallelCore(ShardMapContext& ctx, const TensorParallelRun& run, const LocalArray& pixels,
                     const LocalArray& one_hot)
      : ctx_(ctx),
        run_(run),
        data_rank_(ctx.axis_index(kDataAxis)),
        data_size_(ctx.axis_size(kDataAxis)),
        tensor_size_(ctx.axis_size(kModelAxis)) {
    CoreContext& core = ctx.core();
    const std::vector<std::vector<int64_t>> shapes = run.shard.shapes();
    const std::vector<std::vector<int64_t>> bucket = run.shard.shapes_and_loss();
    params_ = core.allocate_arrays(ElementType::kF32, shapes, "mlp/params");
    grads_ = core.allocate_arrays(ElementType::kF32, bucket, "mlp/grads+loss");
    // Gradient accumulation: micro-batches after the first compute into this bucket, which is
    // then added into the gradient bucket.
    if (run.config.micro_batches > 1) {
      micro_ = core.allocate_arrays(ElementType::kF32, bucket, "mlp/micro_grads+loss");
    }
    // Adam's moments (PyTorch's exp_avg and exp_avg_sq), shaped like the parameter shard.
    if (run.adam) {
      adam_m_ = core.allocate_arrays(ElementType::kF32, shapes, "mlp/opt_state.exp_avg");
      adam_v_ = core.allocate_arrays(ElementType::kF32, shapes, "mlp/opt_state.exp_avg_sq");
      std::memset(adam_m_.data(), 0, adam_m_.size_bytes());
      std::memset(adam_v_.data(), 0, adam_v_.size_bytes());
    }
    io_.emplace(core, pixels.buffer(), one_hot.buffer(),
                MlpStepShape{run.rows, run.micro_rows, run.shard.hidden, run.pallas}, "mlp",
                run.config.seed);
    layers_.emplace(*io_);
    const std::vector<float>& init =
        run.init_shards[static_cast<size_t>(ctx.axis_index(kModelAxis))];
    std::memcpy(params_.data(), init.data(), init.size() * sizeof(float));
    // The step keeps raw pointers into these buffers for the whole run (io pins its own).
    for (const DeviceBuffer* buf : {&params_, &grads_, &micro_, &adam_m_, &adam_v_}) {
      if (buf->valid()) pins_.push_back(buf->pin());
    }
  }

  /// Copies this data shard's rows of the next global batch into the batch buffers.
  void load_batch() { io_->load_batch(run_.config.global_batch, data_rank_ * run_.rows); }

  /// Forward and backward of every micro-batch, k = 0 straight into the gradient bucket and each
  /// later one into the micro bucket and then added, so the bucket holds ((g_0 + g_1) + g_2) +
  /// ..., the order in which the all-reduce folds the data shards' buckets. The bucket's last
  /// float is the loss sum.
  void compute_gradients() {
    const int64_t size = run_.shard.size();
    float* g = grads_.as<float>().data();
    for (int64_t k = 0; k < run_.config.micro_batches; ++k) {
      const DeviceBuffer& into = k == 0 ? grads_ : micro_;
      float* gk = into.as<float>().data();
      const double loss_sum = run_.pallas ? pallas_forward_backward(k * run_.micro_rows, into)
                                          : eigen_forward_backward(k * run_.micro_rows, gk);
      gk[size] = static_cast<float>(loss_sum);
      if (k > 0) {
        Eigen::Map<Eigen::VectorXf>(g, size + 1) += Eigen::Map<const Eigen::VectorXf>(gk, size + 1);
      }
    }
  }

  /// Data parallel: psum over the data axis of one bucket (the shard's gradients and the loss
  /// sum), as DDP's bucket. A data axis of one core sums nothing, so it runs no psum (the
  /// one-core sum would leave the same bits).
  void all_reduce_gradients() {
    if (data_size_ > 1) psum_donated(ctx_, grads_, {run_.shard.size() + 1}, kDataAxis);
  }

  /// The optimizer on the shard; every core of a data group applies identical sums.
  void optimizer_step(int64_t step) {
    const std::span<const float> grads = grads_.as<float>();
    mlp_optimizer_update(params_.as<float>(), grads.first(grads.size() - 1),
                         floats_or_empty(adam_m_), floats_or_empty(adam_v_), step, run_.config);
  }

  /// The step's mean loss over the global batch (after all_reduce_gradients).
  double loss() const {
    return static_cast<double>(grads_.as<float>().back()) /
           static_cast<double>(run_.config.global_batch);
  }

  /// shard_map's outputs of this core: its parameter shard and its last gradient bucket (flat
  /// f32, as allocated: they stay charged for their tensors' padded bytes).
  std::vector<LocalArray> outputs() && {
    std::vector<LocalArray> out;
    out.push_back(LocalArray::adopt(ElementType::kF32, {run_.shard.size()}, std::move(params_)));
    out.push_back(LocalArray::adopt(ElementType::kF32, {run_.shard.size() + 1}, std::move(grads_)));
    return out;
  }

 private:
  /// Eigen forward and backward of rows [row0, row0 + micro_rows): this shard's gradients into
  /// `grad` (MlpLayout{Hs}); returns the loss sum. The psum over the model axis sums the partial
  /// logits before b2 (Megatron's g); the backward is all local (see the header).
  double eigen_forward_backward(int64_t row0, float* grad) {
    const MlpLayout& sl = run_.shard;
    const float* p = params_.as<float>().data();
    MlpEigenLayers& l = *layers_;
    l.select_rows(row0);
    l.hidden_forward(p + sl.w1(), p + sl.b1());  // column-parallel W1
    l.output_forward(p + sl.w2());               // row-parallel W2: partial logits
    if (tensor_size_ > 1) psum_donated(ctx_, io_->logits, {run_.micro_rows, kOut}, kModelAxis);
    l.add_output_bias(p + sl.b2());
    const double loss_sum = l.loss_and_output_grad(run_.inv_batch);
    l.output_backward(grad + sl.w2(), grad + sl.b2());
    l.hidden_input_grad(p + sl.w2());  // dA1 of this shard's hidden units
    l.hidden_backward(grad + sl.w1(), grad + sl.b1());
    return loss_sum;
  }

  double pallas_forward_backward(int64_t row0, const DeviceBuffer& grads) {
    return pallas_step(ctx_.core().core(), io_->x, io_->y, row0, params_, grads, io_->a1, io_->z1,
                       io_->logits, io_->probs, run_.shard, run_.micro_rows, run_.inv_batch);
  }

  ShardMapContext& ctx_;
  const TensorParallelRun& run_;
  const int64_t data_rank_, data_size_, tensor_size_;
  DeviceBuffer params_;  // MlpLayout{hidden / T}.size() floats
  DeviceBuffer grads_;   // that + 1 floats; the last is the loss sum, summed over the data axis
  DeviceBuffer micro_, adam_m_, adam_v_;
  std::optional<MlpStepBuffers> io_;
  std::vector<BufferPin> pins_;
  std::optional<MlpEigenLayers> layers_;
};

/// The replicas after training: every core of a data group holds its group's first core's shard,
/// and every tensor shard holds the same b2 (train/replica_check.h).
/// shards[c] is core c's parameter shard.
std::optional<ReplicaMismatch> check_replicas(const std::vector<std::span<const float>>& shards,
                                              const DataTensorLayout& layout, const MlpLayout& sl) {
  std::vector<std::span<const float>> b2s;
  for (const std::span<const float>& shard : shards) {
    b2s.push_back(shard.subspan(static_cast<size_t>(sl.b2()), kOut));
  }
  const std::string of_shard = layout.tensor > 1
                                   ? " (its tensor shard of " + std::to_string(layout.tensor) + ")"
                                   : std::string();
  std::optional<ReplicaMismatch> mismatch =
      compare_replicas(shards, layout.data_groups,
                       {{"fc1.w" + of_shard, sl.w1(), kIn * sl.hidden},
                        {"fc1.b" + of_shard, sl.b1(), sl.hidden},
                        {"fc2.w" + of_shard, sl.w2(), sl.hidden * kOut},
                        {"fc2.b", sl.b2(), kOut}});
  if (mismatch) return mismatch;
  std::vector<int> tensor_shard_0s;  // the data-shard-0 core of each tensor shard
  for (const std::vector<int>& group : layout.data_groups) tensor_shard_0s.push_back(group[0]);
  return compare_replicas(b2s, {tensor_shard_0s}, {{"fc2.b", 0, kOut}});
}

/// The full flat parameters [W1, b1, W2, b2], gathered from the data-shard-0 core of each tensor
/// shard.
std::vector<float> gather_parameters(const std::vector<std::span<const float>>& shards,
                                     const DataTensorLayout& layout, const MlpLayout& sl,
                                     int64_t hidden) {
  const MlpLayout fl{hidden};
  std::vector<float> params(static_cast<size_t>(fl.size()), 0.0f);
  float* full = params.data();
  for (const std::vector<int>& group : layout.data_groups) {  // one per tensor shard
    const std::span<const float> s0 = shards[static_cast<size_t>(group[0])];
    const int64_t t = layout.tensor_rank[static_cast<size_t>(group[0])];
    const int64_t c0 = t * sl.hidden;
    MatMap(full + fl.w1(), kIn, hidden).middleCols(c0, sl.hidden) =
        ConstMatMap(s0.data() + sl.w1(), kIn, sl.hidden);
    VecMap(full + fl.b1() + c0, sl.hidden) = ConstVecMap(s0.data() + sl.b1(), sl.hidden);
    MatMap(full + fl.w2(), hidden, kOut).middleRows(c0, sl.hidden) =
        ConstMatMap(s0.data() + sl.w2(), sl.hidden, kOut);
    if (t == 0) std::copy_n(s0.data() + sl.b2(), kOut, full + fl.b2());
  }
  return params;
}

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
  TensorParallelRun tpr(runtime, split, config, layout);
  const int n = runtime.num_cores();
  MlpTensorParallelResult result;
  result.data = layout.data;
  result.tensor = layout.tensor;
  result.shard_parameters = tpr.shard.size();
  MlpResult& run = result.run;
  run.num_cores = n;
  run.num_parameters = mlp_num_parameters(config.hidden);
  run.losses.assign(static_cast<size_t>(config.steps), 0.0);
  run.step_seconds.assign(static_cast<size_t>(config.steps), 0.0);

  // One shard_map runs every step, as a jitted training loop would: in, every core's replica of
  // the training rows; out, every core's parameter shard and last gradient bucket, each core's
  // block kept (P over both axes) so that the replicas can be compared after the run rather than
  // refused by check_vma.
  const PartitionSpec every_core({{kDataAxis, kModelAxis}});
  const ShardMap train = shard_map(
      tpr.mesh, {PartitionSpec{}, PartitionSpec{}}, {every_core, every_core},
      [&](ShardMapContext& ctx, std::span<const LocalArray> in) {
        const int c = ctx.device();
        TensorParallelCore core(ctx, tpr, in[0], in[1]);
        for (int64_t step = 0; step < config.steps; ++step) {
          const auto t0 = std::chrono::steady_clock::now();
          core.load_batch();
          core.compute_gradients();
          core.all_reduce_gradients();
          core.optimizer_step(step);
          finish_step(c == runtime.first_local_core(), step, config.steps, config.log_every,
                      core.loss(), t0, run.step_seconds, run.losses, on_log);
        }
        if (config.at_peak) {
          tpr.sync->barrier(ctx.core());  // every core at its peak (timeouts and aborts included)
          if (c == 0) config.at_peak(runtime);
          tpr.sync->barrier(ctx.core());
        }
        return std::move(core).outputs();
      });
  const std::vector<ShardedArray> out = train(tpr.data->pixels, tpr.data->one_hot);

  run.median_step_ms = 1e3 * median_of(run.step_seconds);
  // Every core's shard, in every process (the array's blocks are its cores' shards, P over both
  // axes): gathered in mesh order, so core c's is at its mesh slot.
  const std::vector<float> all_shards = out[0].gather();
  std::vector<std::span<const float>> shards;
  for (int c = 0; c < n; ++c) {
    shards.push_back(std::span<const float>(all_shards)
                         .subspan(static_cast<size_t>(tpr.mesh.flat_index_of(c) * tpr.shard.size()),
                                  static_cast<size_t>(tpr.shard.size())));
  }
  run.replica_mismatch = check_replicas(shards, layout, tpr.shard);
  run.parameters = gather_parameters(shards, layout, tpr.shard, config.hidden);
  run.test_accuracy = mlp_accuracy(run.parameters, config.hidden, split.test);
  run.train_accuracy = mlp_accuracy(run.parameters, config.hidden, split.train);
  // Per-core figures: each process reads its own cores and the processes exchange them.
  run.num_processes = runtime.process_count();
  run.hbm =
      all_gather_per_core(runtime, [&](int c) { return runtime.core(c).hbm().memory_stats(); });
  run.vmem = all_gather_per_core(
      runtime, [&](int c) { return runtime.core(c).memory(MemorySpace::kVmem).memory_stats(); });
  // The stats of the mesh's communicators: the gradient psums over the data axis, the logits'
  // over the model axis (never made for one tensor shard: no psum runs over it).
  run.all_reduce = all_gather_per_core(
      runtime, [&](int c) { return tpr.mesh.communicator(kDataAxis, c).stats(c); });
  result.tensor_all_reduce = all_gather_per_core(runtime, [&](int c) {
    return layout.tensor > 1 ? tpr.mesh.communicator(kModelAxis, c).stats(c) : CollectiveStats{};
  });
  return result;
}

void to_json(nlohmann::json& j, const MlpTensorParallelResult& r) {
  j = r.run;
  j["data"] = r.data;
  j["tensor"] = r.tensor;
  j["shard_parameters"] = r.shard_parameters;
  j["tensor_all_reduce"] = per_core_json(r.tensor_all_reduce, r.run.num_processes);
}

}  // namespace vtpu
