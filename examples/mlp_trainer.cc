#include "examples/mlp_trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>

#include "common/error.h"
#include "examples/train_step_log.h"
#include "runtime/pallas_kernels.h"
#include "sharding/sharded_array.h"

namespace vtpu::examples {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMatrix>;
using ConstMatMap = Eigen::Map<const RowMatrix>;
using VecMap = Eigen::Map<Eigen::RowVectorXf>;

constexpr int64_t kIn = DigitsDataset::kNumFeatures;
constexpr int64_t kOut = DigitsDataset::kNumClasses;

/// Offsets of the flat parameter vector [W1 (64 x H), b1 (H), W2 (H x 10), b2 (10)], in elements.
struct Layout {
  int64_t hidden;
  int64_t w1() const { return 0; }
  int64_t b1() const { return kIn * hidden; }
  int64_t w2() const { return b1() + hidden; }
  int64_t b2() const { return w2() + hidden * kOut; }
  int64_t size() const { return b2() + kOut; }
};

}  // namespace

int64_t mlp_num_parameters(int64_t hidden) { return Layout{hidden}.size(); }

std::vector<float> mlp_init_parameters(int64_t hidden, uint64_t seed) {
  const Layout l{hidden};
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

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ReplicatedDigits replicate_digits(Runtime& runtime, const DigitsDataset& train,
                                  const std::string& label_prefix) {
  const Mesh mesh({runtime.num_cores()}, {"data"});
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

void copy_batch_rows(BatchSampler& sampler, int64_t global_batch, int64_t first, int64_t rows,
                     const float* data_x, const float* data_y, float* x, float* y) {
  for (int64_t r = 0; r < global_batch; ++r) {
    const int64_t row = sampler.next();
    const int64_t local = r - first;
    if (local < 0 || local >= rows) continue;
    std::memcpy(x + local * kIn, data_x + row * kIn, kIn * sizeof(float));
    std::memcpy(y + local * kOut, data_y + row * kOut, kOut * sizeof(float));
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

namespace {

/// What outlives the SPMD program on each core: the parameter replica and the gradient bucket.
/// One forward and backward pass with the pipelined kernels (runtime/pallas_kernels.h) on this
/// core's buffers: a1 = relu(x W1 + b1) and logits = a1 W2 + b2 (fused dense), P = softmax(logits)
/// (row softmax), then dW2 = a1^T dZ2, dA1 = dZ2 W2^T, dW1 = x^T dZ1 (tiled matmuls with transposed
/// operands). Writes the gradients into `grads` (the layout of `params`) and returns the local loss
/// sum. The same math as the Eigen path; only f32 summation order may differ.
double pallas_step(VirtualCore& core, const DeviceBuffer& x, const DeviceBuffer& y,
                   const DeviceBuffer& params, const DeviceBuffer& grads, const DeviceBuffer& a1buf,
                   const DeviceBuffer& z1buf, const DeviceBuffer& logitsbuf,
                   const DeviceBuffer& probsbuf, const Layout& layout, int64_t b, float inv_batch) {
  const int64_t h = layout.hidden;
  const uint64_t f = sizeof(float);
  auto at = [&](const DeviceBuffer& buf, int64_t rows, int64_t cols, int64_t offset_elements) {
    return HbmMatrix{&buf, rows, cols, static_cast<uint64_t>(offset_elements) * f};
  };
  const HbmMatrix X = at(x, b, kIn, 0), A1 = at(a1buf, b, h, 0), Z1 = at(z1buf, b, h, 0);
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
  MatMap yb(y.as<float>().data(), b, kOut);
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

struct CoreState {
  DeviceBuffer params;  // Layout::size() floats
  DeviceBuffer grads;   // Layout::size() + 1 floats; the last is the global loss sum
};

}  // namespace

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
    throw InvalidArgumentError("learning rate is " + std::to_string(learning_rate) +
                               " (expected a finite value > 0)");
  }
  if (global_batch < 1) {
    throw InvalidArgumentError("global batch is " + std::to_string(global_batch) +
                               " (expected >= 1)");
  }
  if (global_batch % num_cores != 0) {
    throw InvalidArgumentError("global batch " + std::to_string(global_batch) +
                               " cannot be split evenly across " + std::to_string(num_cores) +
                               " cores (expected a multiple of " + std::to_string(num_cores) +
                               ", as PyTorch DDP and jax.device_put with a sharded batch need)");
  }
  if (log_every < 0) {
    throw InvalidArgumentError("log_every is " + std::to_string(log_every) + " (expected >= 0)");
  }
  if (kernels != "eigen" && kernels != "pallas") {
    throw InvalidArgumentError("kernels is '" + kernels + "' (expected eigen or pallas)");
  }
}

double mlp_accuracy(const std::vector<float>& parameters, int64_t hidden, const DigitsDataset& ds) {
  if (ds.num_rows() == 0) return 0.0;
  const Layout l{hidden};
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
  const int n = runtime.num_cores();
  config.validate(n);
  const DigitsDataset& train = split.train;
  if (train.num_rows() == 0) throw InvalidArgumentError("training split is empty");
  const Layout layout{config.hidden};
  const int64_t num_params = layout.size();
  const int64_t local_batch = config.global_batch / n;
  const int64_t batch = config.global_batch;
  const float inv_batch = 1.0f / static_cast<float>(batch);

  std::vector<int> cores(static_cast<size_t>(n));
  std::iota(cores.begin(), cores.end(), 0);
  Communicator comm(runtime, cores);
  // The at_peak hook's barriers run on their own communicator, so that `comm`'s stats count only
  // the gradient all-reduces.
  std::optional<Communicator> sync;
  if (config.at_peak) sync.emplace(runtime, cores);

  // The training rows go to every core once (replicated, P() on a 1-D mesh), as a device-side
  // input pipeline would hold them; each step, core c takes rows [c*b, (c+1)*b) of the global
  // batch from its replica. So the host is not on the step's critical path.
  const ReplicatedDigits data = replicate_digits(runtime, train, "mlp");
  const ShardedArray& train_x = data.pixels;
  const ShardedArray& train_y = data.one_hot;

  const std::vector<float> init = mlp_init_parameters(config.hidden, config.seed);
  MlpResult result;
  result.num_cores = n;
  result.num_parameters = num_params;
  result.losses.assign(static_cast<size_t>(config.steps), 0.0);
  result.step_seconds.assign(static_cast<size_t>(config.steps), 0.0);
  std::vector<CoreState> state(static_cast<size_t>(n));

  // One SPMD program runs every step, as a jitted training loop would.
  runtime.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    CoreState& s = state[static_cast<size_t>(c)];
    const int64_t b = local_batch;
    const int64_t h = config.hidden;
    const auto f = sizeof(float);
    // Buffers live across steps, allocated once, as XLA's buffer assignment would.
    s.params = ctx.allocate(static_cast<uint64_t>(num_params) * f, "mlp/params");
    s.grads = ctx.allocate(static_cast<uint64_t>(num_params + 1) * f, "mlp/grads+loss");
    DeviceBuffer xbuf = ctx.allocate(static_cast<uint64_t>(b * kIn) * f, "mlp/x");
    DeviceBuffer ybuf = ctx.allocate(static_cast<uint64_t>(b * kOut) * f, "mlp/y");
    DeviceBuffer z1buf = ctx.allocate(static_cast<uint64_t>(b * h) * f, "mlp/z1");
    DeviceBuffer a1buf = ctx.allocate(static_cast<uint64_t>(b * h) * f, "mlp/a1");
    DeviceBuffer logitsbuf = ctx.allocate(static_cast<uint64_t>(b * kOut) * f, "mlp/logits");
    const bool pallas = config.kernels == "pallas";
    // The pallas path keeps the softmax probabilities apart from the logits.
    DeviceBuffer probsbuf =
        pallas ? ctx.allocate(static_cast<uint64_t>(b * kOut) * f, "mlp/probs") : DeviceBuffer();
    std::memcpy(s.params.data(), init.data(), init.size() * f);
    // The step below keeps raw pointers into these buffers for the whole run: pin them so that
    // defragmentation (on an allocation by anyone else on this core) never moves them.
    const BufferPin pins[] = {s.params.pin(),
                              s.grads.pin(),
                              xbuf.pin(),
                              ybuf.pin(),
                              z1buf.pin(),
                              a1buf.pin(),
                              logitsbuf.pin(),
                              train_x.buffer(c).pin(),
                              train_y.buffer(c).pin()};

    float* p = s.params.as<float>().data();
    float* g = s.grads.as<float>().data();
    const float* data_x = train_x.local_data(c).data();
    const float* data_y = train_y.local_data(c).data();
    MatMap xb(xbuf.as<float>().data(), b, kIn);
    MatMap yb(ybuf.as<float>().data(), b, kOut);
    ConstMatMap w1(p + layout.w1(), kIn, h);
    Eigen::Map<const Eigen::RowVectorXf> b1(p + layout.b1(), h);
    ConstMatMap w2(p + layout.w2(), h, kOut);
    Eigen::Map<const Eigen::RowVectorXf> b2(p + layout.b2(), kOut);
    MatMap z1(z1buf.as<float>().data(), b, h);
    MatMap a1(a1buf.as<float>().data(), b, h);
    MatMap logits(logitsbuf.as<float>().data(), b, kOut);
    MatMap dw1(g + layout.w1(), kIn, h);
    VecMap db1(g + layout.b1(), h);
    MatMap dw2(g + layout.w2(), h, kOut);
    VecMap db2(g + layout.b2(), kOut);
    Eigen::Map<Eigen::VectorXf> params(p, num_params);
    Eigen::Map<const Eigen::VectorXf> grads(g, num_params);
    BatchSampler sampler(train.num_rows(), config.seed);  // same batches on every core count

    for (int64_t step = 0; step < config.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      // This core's rows of the global batch.
      copy_batch_rows(sampler, config.global_batch, c * b, b, data_x, data_y, xb.data(), yb.data());
      double loss_sum = 0.0;
      if (pallas) {
        loss_sum = pallas_step(ctx.core(), xbuf, ybuf, s.params, s.grads, a1buf, z1buf, logitsbuf,
                               probsbuf, layout, b, inv_batch);
      } else {
        // Forward.
        z1.noalias() = xb * w1;
        z1.rowwise() += b1;
        a1 = z1.cwiseMax(0.0f);
        logits.noalias() = a1 * w2;
        logits.rowwise() += b2;
        // Softmax cross-entropy, stable; logits become the probabilities.
        loss_sum = softmax_cross_entropy_rows(logits.data(), yb.data(), b);
        // Backward: dZ2 = (P - Y) / B, scaled by the global batch so that the sum over cores is
        // the gradient of the global mean.
        logits = (logits - yb) * inv_batch;
        dw2.noalias() = a1.transpose() * logits;
        db2 = logits.colwise().sum();
        a1.noalias() = logits * w2.transpose();     // dA1
        z1 = (z1.array() > 0.0f).select(a1, 0.0f);  // dZ1
        dw1.noalias() = xb.transpose() * z1;
        db1 = z1.colwise().sum();
      }
      g[num_params] = static_cast<float>(loss_sum);
      // One bucket, one all-reduce: the gradients and the loss sum.
      comm.all_reduce<float>(ctx, s.grads.as<float>());
      // SGD on every replica (identical inputs, identical results).
      params -= config.learning_rate * grads;
      const double loss = static_cast<double>(g[num_params]) / static_cast<double>(batch);
      finish_step(c, step, config.steps, config.log_every, loss, t0, result.step_seconds,
                  result.losses, on_log);
    }
    if (config.at_peak) {
      sync->barrier(ctx);  // every core at its peak (timeouts and aborts included)
      if (c == 0) config.at_peak(runtime);
      sync->barrier(ctx);
    }
  });

  result.median_step_ms = 1e3 * median_of(result.step_seconds);
  auto p0 = state[0].params.as<float>();
  result.parameters.assign(p0.begin(), p0.end());
  result.replicas_identical = true;
  for (int c = 1; c < n; ++c) {
    auto pc = state[static_cast<size_t>(c)].params.as<float>();
    if (std::memcmp(pc.data(), p0.data(), p0.size_bytes()) != 0) result.replicas_identical = false;
  }
  result.test_accuracy = mlp_accuracy(result.parameters, config.hidden, split.test);
  result.train_accuracy = mlp_accuracy(result.parameters, config.hidden, train);
  for (int c = 0; c < n; ++c) {
    result.hbm.push_back(runtime.core(c).hbm().memory_stats());
    result.vmem.push_back(runtime.core(c).memory(MemorySpace::kVmem).memory_stats());
    result.all_reduce.push_back(comm.stats(c));
  }
  return result;
}

void to_json(nlohmann::json& j, const MlpResult& r) {
  nlohmann::json hbm = nlohmann::json::array();
  for (size_t c = 0; c < r.hbm.size(); ++c) {
    nlohmann::json s = r.hbm[c];
    s["core"] = c;
    hbm.push_back(s);
  }
  nlohmann::json ar = nlohmann::json::array();
  for (size_t c = 0; c < r.all_reduce.size(); ++c) {
    ar.push_back({{"core", c},
                  {"num_collectives", r.all_reduce[c].num_collectives},
                  {"bytes", r.all_reduce[c].bytes},
                  {"seconds", r.all_reduce[c].seconds}});
  }
  j = nlohmann::json{{"num_cores", r.num_cores},
                     {"num_parameters", r.num_parameters},
                     {"losses", r.losses},
                     {"final_loss", r.losses.empty() ? 0.0 : r.losses.back()},
                     {"test_accuracy", r.test_accuracy},
                     {"train_accuracy", r.train_accuracy},
                     {"median_step_ms", r.median_step_ms},
                     {"replicas_identical", r.replicas_identical},
                     {"hbm", hbm},
                     {"vmem", r.vmem},
                     {"all_reduce", ar}};
}

}  // namespace vtpu::examples
