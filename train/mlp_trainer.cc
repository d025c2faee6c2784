#include "vtpu/train/mlp_trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/common/strings.h"
#include "vtpu/sharding/sharded_array.h"
#include "vtpu/train/mlp_layout.h"
#include "vtpu/train/mlp_tp_trainer.h"

namespace vtpu {

namespace {

constexpr int64_t kIn = kMlpIn;
constexpr int64_t kOut = kMlpOut;

}  // namespace

int64_t mlp_num_parameters(int64_t hidden) { return MlpLayout{hidden}.size(); }

std::vector<float> mlp_init_parameters(int64_t hidden, uint64_t seed) {
  const MlpLayout l{hidden};
  // Glorot/Xavier uniform weights, zero biases (Glorot & Bengio 2010; PyTorch's
  // xavier_uniform_). Draws use mt19937_64 raw output so every platform gives the same values.
  std::vector<float> p(static_cast<size_t>(l.size()), 0.0f);
  std::mt19937_64 gen(seed);
  auto fill = [&](int64_t offset, int64_t fan_in, int64_t fan_out) {
    const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
    for (int64_t i = 0; i < fan_in * fan_out; ++i) {
      const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;  // [0, 1)
      p[static_cast<size_t>(offset + i)] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
  };
  fill(l.w1(), kIn, l.hidden);
  fill(l.w2(), l.hidden, kOut);
  return p;
}

BatchSampler::BatchSampler(int64_t num_rows, uint64_t seed)
    : gen_(seed ^ 0x9e3779b97f4a7c15ULL),
      order_(static_cast<size_t>(std::max<int64_t>(num_rows, 0))) {
  if (num_rows < 1) {
    throw InvalidArgumentError("batch sampler over " + std::to_string(num_rows) +
                               " rows (expected >= 1)");
  }
  std::iota(order_.begin(), order_.end(), 0);
  cursor_ = order_.size();
}

int64_t BatchSampler::next() {
  if (cursor_ == order_.size()) {
    for (size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[gen_() % (i + 1)]);
    cursor_ = 0;
  }
  return order_[cursor_++];
}

ReplicatedDigits replicate_digits(Runtime& runtime, const DigitsDataset& train,
                                  const std::string& label_prefix) {
  return replicate_digits(runtime, train, label_prefix, Mesh({runtime.num_cores()}, {"data"}));
}

ReplicatedDigits replicate_digits(Runtime& runtime, const DigitsDataset& train,
                                  const std::string& label_prefix, const Mesh& mesh) {
  const NamedSharding replicated(mesh, PartitionSpec{});
  std::vector<float> one_hot(static_cast<size_t>(train.num_rows() * kOut), 0.0f);
  for (int64_t r = 0; r < train.num_rows(); ++r) {
    one_hot[static_cast<size_t>(r * kOut + train.labels[static_cast<size_t>(r)])] = 1.0f;
  }
  return ReplicatedDigits{ShardedArray::device_put(runtime, train.pixels, {train.num_rows(), kIn},
                                                   replicated, label_prefix + "/train_pixels"),
                          ShardedArray::device_put(runtime, one_hot, {train.num_rows(), kOut},
                                                   replicated, label_prefix + "/train_labels")};
}

MlpStepBuffers::MlpStepBuffers(CoreContext& ctx, const ReplicatedDigits& data,
                               const MlpStepShape& shape, const std::string& label_prefix,
                               uint64_t seed)
    : MlpStepBuffers(ctx, data.pixels.buffer(ctx.core_id()), data.one_hot.buffer(ctx.core_id()),
                     shape, label_prefix, seed) {}

MlpStepBuffers::MlpStepBuffers(CoreContext& ctx, const DeviceBuffer& pixels,
                               const DeviceBuffer& one_hot, const MlpStepShape& shape,
                               const std::string& label_prefix, uint64_t seed)
    : shape_(shape),
      sampler_(static_cast<int64_t>(pixels.as<const float>().size()) / kIn, seed),
      data_x_(pixels.as<const float>().data()),
      data_y_(one_hot.as<const float>().data()) {
  // Each an f32 array charged its padded bytes (CoreContext::allocate_array).
  const auto f32 = [&](int64_t rows, int64_t cols, const char* name) {
    const int64_t dims[] = {rows, cols};
    return ctx.allocate_array(ElementType::kF32, dims, label_prefix + name);
  };
  x = f32(shape.rows, kIn, "/x");
  y = f32(shape.rows, kOut, "/y");
  z1 = f32(shape.micro_rows, shape.hidden, "/z1");
  a1 = f32(shape.micro_rows, shape.hidden, "/a1");
  logits = f32(shape.micro_rows, kOut, "/logits");
  if (shape.probs) probs = f32(shape.micro_rows, kOut, "/probs");
  for (const DeviceBuffer* buf : std::initializer_list<const DeviceBuffer*>{
           &x, &y, &z1, &a1, &logits, &probs, &pixels, &one_hot}) {
    if (buf->valid()) pins_.push_back(buf->pin());
  }
}

void MlpStepBuffers::load_batch(int64_t global_batch, int64_t first) {
  float* xs = x_data();
  float* ys = y_data();
  for (int64_t r = 0; r < global_batch; ++r) {
    const int64_t row = sampler_.next();
    const int64_t local = r - first;
    if (local < 0 || local >= shape_.rows) continue;
    std::memcpy(xs + local * kIn, data_x_ + row * kIn, kIn * sizeof(float));
    std::memcpy(ys + local * kOut, data_y_ + row * kOut, kOut * sizeof(float));
  }
}

double softmax_cross_entropy_rows(float* logits_data, const float* y_data, int64_t rows) {
  MatMap logits(logits_data, rows, kOut);
  ConstMatMap yb(y_data, rows, kOut);
  double loss_sum = 0.0;
  // loss_i = logsumexp(z_i) - z_i[y_i], with the max subtracted first.
  for (int64_t i = 0; i < rows; ++i) {
    auto row = logits.row(i);
    row.array() -= row.maxCoeff();
    row = row.array().exp().matrix();
    const float denom = row.sum();
    Eigen::Index label;
    yb.row(i).maxCoeff(&label);
    loss_sum -= std::log(static_cast<double>(row(label)) / denom);
    row /= denom;  // probabilities
  }
  return loss_sum;
}

void mlp_optimizer_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                          std::span<float> v, int64_t step, const MlpConfig& config) {
  if (config.optimizer == "adam") {
    adam_update(params, grads, m, v, step + 1, config.learning_rate, config.adam);
    return;
  }
  Eigen::Map<Eigen::VectorXf> p(params.data(), static_cast<Eigen::Index>(params.size()));
  Eigen::Map<const Eigen::VectorXf> g(grads.data(), static_cast<Eigen::Index>(params.size()));
  p -= config.learning_rate * g;
}

void MlpConfig::validate(int num_cores) const {
  if (num_cores < 1) {
    throw InvalidArgumentError("num_cores is " + std::to_string(num_cores) + " (expected >= 1)");
  }
  if (steps < 1)
    throw InvalidArgumentError("steps is " + std::to_string(steps) + " (expected >= 1)");
  if (hidden < 1 || hidden > (1 << 20)) {
    throw InvalidArgumentError("hidden is " + std::to_string(hidden) + " (expected 1..1048576)");
  }
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate)) {
    throw InvalidArgumentError("learning rate is " +
                               format_text("%g", static_cast<double>(learning_rate)) +
                               " (expected a finite value > 0)");
  }
  // Bounded here, not only on the command line: a plan's estimate.batch reaches the trainer too,
  // and 2^62 rows would overflow the buffer sizes.
  if (global_batch < 1 || global_batch > kMaxMlpGlobalBatch) {
    throw InvalidArgumentError("global batch is " + std::to_string(global_batch) +
                               " (expected 1.." + std::to_string(kMaxMlpGlobalBatch) + ")");
  }
  if (global_batch % num_cores != 0) {
    throw InvalidArgumentError("global batch " + std::to_string(global_batch) +
                               " cannot be split evenly across " + count_text(num_cores, "core") +
                               " (expected a multiple of " + std::to_string(num_cores) +
                               ", as PyTorch DDP and jax.device_put with a sharded batch need)");
  }
  if (log_every < 0) {
    throw InvalidArgumentError("log_every is " + std::to_string(log_every) + " (expected >= 0)");
  }
  if (kernels != "eigen" && kernels != "pallas") {
    throw InvalidArgumentError("kernels is '" + kernels + "' (expected eigen or pallas)");
  }
  mlp_default_learning_rate(optimizer);  // names an unknown optimizer
  if (optimizer == "adam") adam.validate();
  const int64_t local = global_batch / num_cores;
  if (micro_batches < 1 || local % micro_batches != 0) {
    throw InvalidArgumentError("micro_batches is " + std::to_string(micro_batches) +
                               " (expected a divisor of the " + std::to_string(local) +
                               " rows per core: global batch " + std::to_string(global_batch) +
                               " over " + count_text(num_cores, "core") + ")");
  }
}

float mlp_default_learning_rate(const std::string& optimizer) {
  if (optimizer == "sgd") return MlpConfig{}.learning_rate;
  if (optimizer == "adam") return 1e-3f;  // torch.optim.Adam's default
  throw InvalidArgumentError("optimizer is '" + optimizer + "' (expected sgd or adam)");
}

double mlp_accuracy(const std::vector<float>& parameters, int64_t hidden, const DigitsDataset& ds) {
  if (ds.num_rows() == 0) return 0.0;
  const MlpLayout l{hidden};
  if (static_cast<int64_t>(parameters.size()) != l.size()) {
    throw InvalidArgumentError("MLP has " + std::to_string(parameters.size()) +
                               " parameters, expected " + std::to_string(l.size()) +
                               " for hidden " + std::to_string(hidden));
  }
  ConstMatMap w1(parameters.data() + l.w1(), kIn, hidden);
  Eigen::Map<const Eigen::RowVectorXf> b1(parameters.data() + l.b1(), hidden);
  ConstMatMap w2(parameters.data() + l.w2(), hidden, kOut);
  Eigen::Map<const Eigen::RowVectorXf> b2(parameters.data() + l.b2(), kOut);
  // Blocks of rows, so that host memory stays O(block x hidden) for any dataset size.
  constexpr int64_t kBlockRows = 64;
  int64_t correct = 0;
  for (int64_t r0 = 0; r0 < ds.num_rows(); r0 += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, ds.num_rows() - r0);
    ConstMatMap x(ds.pixels.data() + r0 * kIn, rows, kIn);
    const RowMatrix a1 = ((x * w1).rowwise() + b1).cwiseMax(0.0f);
    const RowMatrix logits = (a1 * w2).rowwise() + b2;
    for (int64_t i = 0; i < rows; ++i) {
      Eigen::Index arg;
      logits.row(i).maxCoeff(&arg);
      correct += (arg == ds.labels[static_cast<size_t>(r0 + i)]);
    }
  }
  return static_cast<double>(correct) / static_cast<double>(ds.num_rows());
}

MlpResult train_mlp(Runtime& runtime, const DigitsSplit& split, const MlpConfig& config,
                    const std::function<void(int64_t, double)>& on_log) {
  // Data parallel is Megatron with one tensor shard: the shard is the whole model.
  return train_mlp_tensor_parallel(runtime, split, config,
                                   DataTensorLayout::grid(runtime.num_cores(), 1), on_log)
      .run;
}

namespace {

/// The process hosting core `c` of `num_cores` split evenly over `num_processes`.
size_t process_of_core(size_t c, size_t num_cores, int num_processes) {
  const size_t per_process = std::max<size_t>(1, num_cores / static_cast<size_t>(num_processes));
  return c / per_process;
}

}  // namespace

nlohmann::json per_core_json(const std::vector<MemoryStats>& stats, int num_processes) {
  nlohmann::json a = nlohmann::json::array();
  for (size_t c = 0; c < stats.size(); ++c) {
    nlohmann::json s = stats[c];
    s["core"] = c;
    s["process"] = process_of_core(c, stats.size(), num_processes);
    a.push_back(s);
  }
  return a;
}

nlohmann::json per_core_json(const std::vector<CollectiveStats>& stats, int num_processes) {
  nlohmann::json a = nlohmann::json::array();
  for (size_t c = 0; c < stats.size(); ++c) {
    a.push_back({{"core", c},
                 {"process", process_of_core(c, stats.size(), num_processes)},
                 {"num_collectives", stats[c].num_collectives},
                 {"bytes", stats[c].bytes},
                 {"seconds", stats[c].seconds}});
  }
  return a;
}

void to_json(nlohmann::json& j, const MlpResult& r) {
  j = nlohmann::json{{"num_cores", r.num_cores},
                     {"num_processes", r.num_processes},
                     {"num_parameters", r.num_parameters},
                     {"losses", r.losses},
                     {"final_loss", r.losses.empty() ? 0.0 : r.losses.back()},
                     {"test_accuracy", r.test_accuracy},
                     {"train_accuracy", r.train_accuracy},
                     {"median_step_seconds", 1e-3 * r.median_step_ms},
                     {"replicas_identical", r.replicas_identical()},
                     {"replica_mismatch", replica_mismatch_json(r.replica_mismatch)},
                     {"hbm", per_core_json(r.hbm, r.num_processes)},
                     {"vmem", r.vmem},
                     {"all_reduce", per_core_json(r.all_reduce, r.num_processes)}};
}

}  // namespace vtpu
