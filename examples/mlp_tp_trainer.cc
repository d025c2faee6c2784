#include "examples/mlp_tp_trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "examples/train_step_log.h"

namespace vtpu::examples {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMatrix>;
using ConstMatMap = Eigen::Map<const RowMatrix>;
using VecMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstVecMap = Eigen::Map<const Eigen::RowVectorXf>;

constexpr int64_t kIn = DigitsDataset::kNumFeatures;
constexpr int64_t kOut = DigitsDataset::kNumClasses;

/// Offsets of one shard's flat vector [W1_t (64 x hs), b1_t (hs), W2_t (hs x 10), b2 (10)].
struct ShardLayout {
  int64_t hs;  // hidden units per shard
  int64_t w1() const { return 0; }
  int64_t b1() const { return kIn * hs; }
  int64_t w2() const { return b1() + hs; }
  int64_t b2() const { return w2() + hs * kOut; }
  int64_t size() const { return b2() + kOut; }
};

/// The full model's offsets (train_mlp's flat [W1, b1, W2, b2]).
ShardLayout full_layout(int64_t hidden) { return ShardLayout{hidden}; }

int64_t shard_hidden(int64_t hidden, int64_t tensor) {
  if (tensor < 1 || hidden < 1 || hidden % tensor != 0) {
    throw InvalidArgumentError("hidden " + std::to_string(hidden) +
                               " does not split over a tensor-parallel group of " +
                               std::to_string(tensor) +
                               " cores (expected a tensor size >= 1 that divides hidden: "
                               "Megatron splits the hidden units evenly)");
  }
  return hidden / tensor;
}

}  // namespace

int64_t mlp_tp_shard_parameters(int64_t hidden, int64_t tensor) {
  return ShardLayout{shard_hidden(hidden, tensor)}.size();
}

std::vector<float> mlp_tp_shard(const std::vector<float>& full, int64_t hidden, int64_t tensor,
                                int64_t rank) {
  const ShardLayout s{shard_hidden(hidden, tensor)};
  const ShardLayout f = full_layout(hidden);
  if (static_cast<int64_t>(full.size()) != f.size()) {
    throw InvalidArgumentError("MLP has " + std::to_string(full.size()) + " parameters, expected " +
                               std::to_string(f.size()) + " for hidden " + std::to_string(hidden));
  }
  if (rank < 0 || rank >= tensor) {
    throw InvalidArgumentError("tensor rank " + std::to_string(rank) + " (expected 0.." +
                               std::to_string(tensor - 1) + ")");
  }
  std::vector<float> out(static_cast<size_t>(s.size()));
  const int64_t c0 = rank * s.hs;  // first hidden unit of the shard
  ConstMatMap w1(full.data() + f.w1(), kIn, hidden);
  MatMap(out.data() + s.w1(), kIn, s.hs) = w1.middleCols(c0, s.hs);
  VecMap(out.data() + s.b1(), s.hs) = ConstVecMap(full.data() + f.b1() + c0, s.hs);
  ConstMatMap w2(full.data() + f.w2(), hidden, kOut);
  MatMap(out.data() + s.w2(), s.hs, kOut) = w2.middleRows(c0, s.hs);
  VecMap(out.data() + s.b2(), kOut) = ConstVecMap(full.data() + f.b2(), kOut);
  return out;
}

MlpTensorParallelResult train_mlp_tensor_parallel(
    Runtime& runtime, const DigitsSplit& split, const MlpConfig& config,
    const DataTensorLayout& layout, const std::function<void(int64_t, double)>& on_log) {
  const int n = runtime.num_cores();
  if (layout.num_cores() != n) {
    throw InvalidArgumentError("data x tensor layout " + layout.to_string() + " needs " +
                               std::to_string(layout.num_cores()) + " cores, the runtime has " +
                               std::to_string(n));
  }
  if (config.kernels != "eigen") {
    throw UnimplementedError("kernels '" + config.kernels +
                             "' are not implemented for the tensor-parallel MLP (expected eigen)");
  }
  config.validate(static_cast<int>(layout.data));  // the batch splits over the data shards
  const DigitsDataset& train = split.train;
  if (train.num_rows() == 0) throw InvalidArgumentError("training split is empty");
  const int64_t tsz = layout.tensor;
  const ShardLayout sl{shard_hidden(config.hidden, tsz)};
  const int64_t shard_size = sl.size();
  const int64_t batch = config.global_batch;
  const int64_t b = batch / layout.data;  // rows per data shard
  const float inv_batch = 1.0f / static_cast<float>(batch);

  auto tp_comms = Communicator::for_groups(runtime, layout.tensor_groups);
  auto dp_comms = Communicator::for_groups(runtime, layout.data_groups);
  const ReplicatedDigits data = replicate_digits(runtime, train, "mlp_tp");
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
  std::vector<DeviceBuffer> final_params(static_cast<size_t>(n));

  runtime.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    const auto ci = static_cast<size_t>(c);
    const int64_t d = layout.data_rank[ci], t = layout.tensor_rank[ci];
    Communicator& tp = *tp_comms[static_cast<size_t>(layout.tensor_group[ci])];
    Communicator& dp = *dp_comms[static_cast<size_t>(layout.data_group[ci])];
    const int64_t hs = sl.hs;
    const auto f = sizeof(float);
    DeviceBuffer params = ctx.allocate(static_cast<uint64_t>(shard_size) * f, "mlp_tp/params");
    DeviceBuffer grads =
        ctx.allocate(static_cast<uint64_t>(shard_size + 1) * f, "mlp_tp/grads+loss");
    DeviceBuffer xbuf = ctx.allocate(static_cast<uint64_t>(b * kIn) * f, "mlp_tp/x");
    DeviceBuffer ybuf = ctx.allocate(static_cast<uint64_t>(b * kOut) * f, "mlp_tp/y");
    DeviceBuffer z1buf = ctx.allocate(static_cast<uint64_t>(b * hs) * f, "mlp_tp/z1");
    DeviceBuffer a1buf = ctx.allocate(static_cast<uint64_t>(b * hs) * f, "mlp_tp/a1");
    DeviceBuffer logitsbuf = ctx.allocate(static_cast<uint64_t>(b * kOut) * f, "mlp_tp/logits");
    const BufferPin pins[] = {params.pin(),
                              grads.pin(),
                              xbuf.pin(),
                              ybuf.pin(),
                              z1buf.pin(),
                              a1buf.pin(),
                              logitsbuf.pin(),
                              data.pixels.buffer(c).pin(),
                              data.one_hot.buffer(c).pin()};
    const std::vector<float>& shard = init_shards[static_cast<size_t>(t)];
    std::memcpy(params.data(), shard.data(), shard.size() * f);

    float* p = params.as<float>().data();
    float* g = grads.as<float>().data();
    const float* data_x = data.pixels.local_data(c).data();
    const float* data_y = data.one_hot.local_data(c).data();
    MatMap xb(xbuf.as<float>().data(), b, kIn);
    MatMap yb(ybuf.as<float>().data(), b, kOut);
    ConstMatMap w1(p + sl.w1(), kIn, hs);
    ConstVecMap b1(p + sl.b1(), hs);
    ConstMatMap w2(p + sl.w2(), hs, kOut);
    ConstVecMap b2(p + sl.b2(), kOut);
    MatMap z1(z1buf.as<float>().data(), b, hs);
    MatMap a1(a1buf.as<float>().data(), b, hs);
    MatMap logits(logitsbuf.as<float>().data(), b, kOut);
    MatMap dw1(g + sl.w1(), kIn, hs);
    VecMap db1(g + sl.b1(), hs);
    MatMap dw2(g + sl.w2(), hs, kOut);
    VecMap db2(g + sl.b2(), kOut);
    Eigen::Map<Eigen::VectorXf> pv(p, shard_size);
    Eigen::Map<const Eigen::VectorXf> gv(g, shard_size);
    BatchSampler sampler(train.num_rows(), config.seed);  // the same batches as train_mlp

    for (int64_t step = 0; step < config.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      copy_batch_rows(sampler, batch, d * b, b, data_x, data_y, xb.data(), yb.data());
      // Forward: column-parallel W1, row-parallel W2, one all-reduce of the partial logits.
      z1.noalias() = xb * w1;
      z1.rowwise() += b1;
      a1 = z1.cwiseMax(0.0f);
      logits.noalias() = a1 * w2;
      tp.all_reduce<float>(ctx, logitsbuf.as<float>());
      logits.rowwise() += b2;
      const double loss_sum = softmax_cross_entropy_rows(logits.data(), yb.data(), b);
      // Backward, all local (see the header for the input gradient that is not needed).
      logits = (logits - yb) * inv_batch;  // dZ2, the same on every tensor shard
      dw2.noalias() = a1.transpose() * logits;
      db2 = logits.colwise().sum();
      a1.noalias() = logits * w2.transpose();     // dA1 (this shard's hidden units)
      z1 = (z1.array() > 0.0f).select(a1, 0.0f);  // dZ1
      dw1.noalias() = xb.transpose() * z1;
      db1 = z1.colwise().sum();
      g[shard_size] = static_cast<float>(loss_sum);
      // Data parallel: one bucket (the shard's gradients and the loss sum) over the data group.
      dp.all_reduce<float>(ctx, grads.as<float>());
      pv -= config.learning_rate * gv;
      const double loss = static_cast<double>(g[shard_size]) / static_cast<double>(batch);
      finish_step(c, step, config.steps, config.log_every, loss, t0, run.step_seconds, run.losses,
                  on_log);
    }
    final_params[ci] = std::move(params);
  });

  run.median_step_ms = 1e3 * median_of(run.step_seconds);
  // Gather the full parameters from the data-shard-0 core of each tensor shard, and check that
  // the replicas agree bitwise.
  const ShardLayout fl = full_layout(config.hidden);
  run.parameters.assign(static_cast<size_t>(fl.size()), 0.0f);
  run.replicas_identical = true;
  std::vector<float> b2_ref;
  for (const std::vector<int>& group : layout.data_groups) {  // one per tensor shard
    auto s0 = final_params[static_cast<size_t>(group[0])].as<float>();
    for (size_t r = 1; r < group.size(); ++r) {
      auto sr = final_params[static_cast<size_t>(group[r])].as<float>();
      if (std::memcmp(sr.data(), s0.data(), s0.size_bytes()) != 0) run.replicas_identical = false;
    }
    const int64_t t = layout.tensor_rank[static_cast<size_t>(group[0])];
    const int64_t c0 = t * sl.hs;
    float* full = run.parameters.data();
    MatMap(full + fl.w1(), kIn, config.hidden).middleCols(c0, sl.hs) =
        ConstMatMap(s0.data() + sl.w1(), kIn, sl.hs);
    VecMap(full + fl.b1() + c0, sl.hs) = ConstVecMap(s0.data() + sl.b1(), sl.hs);
    MatMap(full + fl.w2(), config.hidden, kOut).middleRows(c0, sl.hs) =
        ConstMatMap(s0.data() + sl.w2(), sl.hs, kOut);
    const std::vector<float> b2(s0.data() + sl.b2(), s0.data() + sl.b2() + kOut);
    if (b2_ref.empty()) {
      b2_ref = b2;
      std::copy(b2.begin(), b2.end(), full + fl.b2());
    } else if (std::memcmp(b2.data(), b2_ref.data(), b2.size() * sizeof(float)) != 0) {
      run.replicas_identical = false;
    }
  }
  run.test_accuracy = mlp_accuracy(run.parameters, config.hidden, split.test);
  run.train_accuracy = mlp_accuracy(run.parameters, config.hidden, train);
  for (int c = 0; c < n; ++c) {
    const auto ci = static_cast<size_t>(c);
    run.hbm.push_back(runtime.core(c).hbm().memory_stats());
    run.vmem.push_back(runtime.core(c).memory(MemorySpace::kVmem).memory_stats());
    run.all_reduce.push_back(dp_comms[static_cast<size_t>(layout.data_group[ci])]->stats(c));
    result.tensor_all_reduce.push_back(
        tp_comms[static_cast<size_t>(layout.tensor_group[ci])]->stats(c));
  }
  return result;
}

void to_json(nlohmann::json& j, const MlpTensorParallelResult& r) {
  j = r.run;
  j["data"] = r.data;
  j["tensor"] = r.tensor;
  j["shard_parameters"] = r.shard_parameters;
  nlohmann::json tar = nlohmann::json::array();
  for (size_t c = 0; c < r.tensor_all_reduce.size(); ++c) {
    tar.push_back({{"core", c},
                   {"num_collectives", r.tensor_all_reduce[c].num_collectives},
                   {"bytes", r.tensor_all_reduce[c].bytes},
                   {"seconds", r.tensor_all_reduce[c].seconds}});
  }
  j["tensor_all_reduce"] = tar;
}

}  // namespace vtpu::examples
