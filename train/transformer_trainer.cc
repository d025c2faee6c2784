#include "vtpu/train/transformer_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "vtpu/common/data_dir.h"
#include "vtpu/common/error.h"
#include "vtpu/common/json_fields.h"
#include "vtpu/common/median.h"
#include "vtpu/common/strings.h"
#include "vtpu/memory/tiled_layout.h"
#include "vtpu/runtime/pallas_kernels.h"
#include "vtpu/runtime/process_exchange.h"
#include "vtpu/sharding/shard_map.h"
#include "vtpu/train/train_step_log.h"

namespace vtpu {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// fortunes.txt is 2.4 MB; a larger corpus than this is no toy model's, and a stream without
// end (/dev/zero) is cut off here instead of after a gigabyte.
constexpr uint64_t kMaxTextBytes = uint64_t{64} << 20;

}  // namespace

std::string TransformerMesh::to_string() const { return str(data) + "x" + str(tensor); }

TransformerMesh parse_transformer_mesh(const std::string& text) {
  const size_t x = text.find('x');
  auto bad = [&] {
    return InvalidArgumentError("mesh '" + text +
                                "' is not DxT (expected two integers >= 1 joined by 'x', e.g. "
                                "2x4: data-parallel size x tensor-parallel size)");
  };
  if (x == std::string::npos || x == 0 || x + 1 >= text.size()) throw bad();
  auto num = [&](const std::string& s) {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit)) throw bad();
    const int64_t v = std::stoll(s);
    if (v < 1) throw bad();
    return v;
  };
  return TransformerMesh{num(text.substr(0, x)), num(text.substr(x + 1))};
}

// The shipped text's name under a data directory and its place in the source tree
// (common/data_dir.h).
constexpr const char* kFortunesName = "fortunes.txt";
constexpr const char* kFortunesSourcePath = "data/fortunes.txt";

std::string default_fortunes_path() { return find_data_file(kFortunesName, kFortunesSourcePath); }

TokenText make_token_text(std::span<const char> text, int64_t vocab) {
  TokenText t;
  t.tokens = tokenize_bytes(text, vocab);
  std::set<int32_t> used(t.tokens.begin(), t.tokens.end());
  t.vocab_used = static_cast<int64_t>(used.size());
  t.uniform_loss = t.vocab_used > 0 ? std::log(static_cast<double>(t.vocab_used)) : 0.0;
  t.mapped_bytes = std::count_if(
      text.begin(), text.end(), [vocab](char b) { return static_cast<unsigned char>(b) >= vocab; });
  return t;
}

namespace {

std::string mapped_text(int64_t mapped, int64_t total, int64_t vocab) {
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.3g%%",
                100.0 * static_cast<double>(mapped) / static_cast<double>(total));
  return str(mapped) + " of " + str(total) + " bytes (" + percent + ") are >= " + str(vocab);
}

}  // namespace

std::string TokenText::describe_mapped(int64_t vocab) const {
  if (mapped_bytes == 0) return "";
  return mapped_text(mapped_bytes, static_cast<int64_t>(tokens.size()), vocab) +
         " and were mapped to '?'";
}

TokenText load_token_text(const std::string& path, int64_t vocab, int64_t context) {
  // Bounded, and a NUL byte (binary data, /dev/zero) refused at once: text has none.
  std::string text;
  try {
    text = read_bounded_text_file(path, kMaxTextBytes, "text file", "64 MiB");
  } catch (const NotFoundError& e) {
    throw NotFoundError(e.message() +
                        data_file_lookup_note(path, kFortunesName, kFortunesSourcePath) +
                        " (run scripts/fetch-data.sh to fetch Debian's fortunes into "
                        "data/fortunes.txt, or pass --data PATH)");
  }
  if (static_cast<int64_t>(text.size()) < context + 2) {
    throw InvalidArgumentError("text file '" + path + "' has " +
                               str(static_cast<int64_t>(text.size())) +
                               " bytes (expected at least context + 2 = " + str(context + 2) + ")");
  }
  TokenText t = make_token_text(text, vocab);
  // A binary or compressed file would train silently, half its bytes turned into '?'.
  const auto total = static_cast<int64_t>(text.size());
  if (static_cast<double>(t.mapped_bytes) > kMaxMappedByteFraction * static_cast<double>(total)) {
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g%%", 100.0 * kMaxMappedByteFraction);
    throw InvalidArgumentError("text file '" + path +
                               "': " + mapped_text(t.mapped_bytes, total, vocab) +
                               ", more than the " + limit +
                               " limit (expected a text file: bytes >= vocab become '?', and this "
                               "many mean a binary or compressed file)");
  }
  return t;
}

WindowSampler::WindowSampler(int64_t num_tokens, int64_t context, uint64_t seed)
    : gen_(seed ^ 0x5851f42d4c957f2dULL), range_(num_tokens - context) {
  if (range_ < 1) {
    throw InvalidArgumentError("text of " + str(num_tokens) + " tokens is too short for context " +
                               str(context) + " (expected at least context + 1 tokens)");
  }
}

std::vector<int64_t> WindowSampler::next(int64_t batch) {
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  for (auto& s : starts) s = static_cast<int64_t>(gen_() % static_cast<uint64_t>(range_));
  return starts;
}

TransformerResult train_transformer(Runtime& runtime, std::span<const int32_t> tokens,
                                    const TransformerConfig& config, const TransformerMesh& mesh,
                                    const std::function<void(int64_t, double)>& on_log) {
  if (mesh.data < 1 || mesh.tensor < 1) {
    throw InvalidArgumentError("mesh " + mesh.to_string() + " (expected both sizes >= 1)");
  }
  return train_transformer_on_layout(runtime, tokens, config,
                                     DataTensorLayout::grid(mesh.data, mesh.tensor), on_log);
}

namespace {

/// The checks of train_transformer_on_layout's arguments.
void check_run(const Runtime& runtime, std::span<const int32_t> tokens,
               const TransformerConfig& config, const TransformerMesh& mesh) {
  config.validate();
  config.validate_mesh(mesh.data, mesh.tensor);
  if (mesh.num_cores() != runtime.num_cores()) {
    throw InvalidArgumentError("mesh " + mesh.to_string() + " needs " +
                               count_text(mesh.num_cores(), "core") + ", the runtime has " +
                               str(runtime.num_cores()));
  }
  if (static_cast<int64_t>(tokens.size()) < config.context + 1) {
    throw InvalidArgumentError("text of " + str(static_cast<int64_t>(tokens.size())) +
                               " tokens is too short for context " + str(config.context));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= config.vocab) {
      throw InvalidArgumentError("token id " + std::to_string(t) + " outside [0, " +
                                 str(config.vocab) + ")");
    }
  }
}

/// The layout as a (D, T) mesh with axes ("data", "model"): the device at (d, t) is the core
/// with data shard d and tensor shard t, so that the mesh's replica groups over "data" and over
/// "model" are the layout's data and tensor groups, each in rank order (grid(D, T): cores 0..n-1
/// row-major, as jax.make_mesh lays them out).
DeviceMesh layout_mesh(Runtime& runtime, const DataTensorLayout& layout) {
  std::vector<int> devices(static_cast<size_t>(layout.num_cores()));
  for (int c = 0; c < static_cast<int>(devices.size()); ++c) {
    const auto i = static_cast<size_t>(c);
    devices[static_cast<size_t>(layout.data_rank[i] * layout.tensor + layout.tensor_rank[i])] = c;
  }
  return make_mesh(runtime, {layout.data, layout.tensor}, {"data", "model"}, std::move(devices));
}

/// What every core of a run reads: the configuration, the mesh (whose communicators the named
/// collectives use), the initial shards, the model and the global batches. Built before the SPMD
/// program; while it runs, every core reads the rest and calls the thread-safe communicators.
struct TransformerRun {
  TransformerRun(Runtime& runtime, std::span<const int32_t> tokens, const TransformerConfig& config,
                 const DataTensorLayout& layout)
      : config(config),
        layout(layout),
        tokens(tokens),
        local_batch(config.batch / layout.data),
        micro_batch(local_batch / config.micro_batches),
        grad_scale(1.0f / static_cast<float>(config.batch * config.context)),
        mesh(layout_mesh(runtime, layout)),
        init(transformer_init_parameters(config)),
        model(config, layout.tensor, micro_batch),
        pad_arrays(runtime.options().pad_arrays) {
    for (const TransformerParam& p : model.layout().params())
      weight_shapes.push_back(p.local_shape);
    bucket_shapes = weight_shapes;
    bucket_shapes.push_back({});  // the loss sum, a scalar after the gradients
    token_shape = {local_batch, config.context + 1};
    for (int64_t t = 0; t < layout.tensor; ++t) {
      init_shards.push_back(shard_transformer_parameters<float>(config, init, layout.tensor, t));
    }
    // The global batches, the same for every mesh (drawn on the host before the run).
    WindowSampler sampler(static_cast<int64_t>(tokens.size()), config.context, config.seed);
    starts.resize(static_cast<size_t>(config.steps));
    for (auto& s : starts) s = sampler.next(config.batch);
  }

  /// The communicators behind the named collectives over "model" and "data" (for the stats).
  Communicator& tensor_comm(int c) const { return mesh.communicator("model", c); }
  Communicator& data_comm(int c) const { return mesh.communicator("data", c); }
  int64_t shard_size() const { return model.layout().size(); }
  /// What the arena is charged for arrays of `dtype` and `shapes` packed in one buffer
  /// (CoreContext::allocate_arrays): their padded bytes, or their logical bytes without padding.
  uint64_t charged_bytes(ElementType dtype, std::span<const std::vector<int64_t>> shapes) const {
    uint64_t total = 0;
    for (const std::vector<int64_t>& dims : shapes) {
      const ArrayBytes b = array_bytes(dtype, dims);
      total += pad_arrays ? b.padded_bytes : b.logical_bytes;
    }
    return total;
  }

  const TransformerConfig& config;
  const DataTensorLayout& layout;
  const std::span<const int32_t> tokens;
  const int64_t local_batch;      // sequences per data shard
  const int64_t micro_batch;      // sequences per micro-batch
  const float grad_scale;         // 1 / (global batch * context)
  const DeviceMesh mesh;          // (D, T), axes ("data", "model")
  const std::vector<float> init;  // the whole model's initial parameters
  std::vector<std::vector<float>> init_shards;
  const TransformerShard<float> model;
  std::vector<std::vector<int64_t>> starts;  // per step, the global batch's window starts
  // Every HBM buffer is charged per tensor, as the arrays it packs would be one by one: the
  // shard's weights (each tensor's local block; also the shape of Adam's m and v), the gradient
  // bucket (those blocks and the loss scalar), and the tokens s32[local_batch, context + 1].
  const bool pad_arrays;  // RuntimeOptions::pad_arrays
  std::vector<std::vector<int64_t>> weight_shapes, bucket_shapes;
  std::vector<int64_t> token_shape;
};

/// A TransformerResult with the run's sizes filled in and its per-step vectors sized.
TransformerResult empty_result(const TransformerRun& run) {
  const TransformerConfig& config = run.config;
  const int64_t shard_size = run.shard_size();
  TransformerResult result;
  result.mesh = TransformerMesh{run.layout.data, run.layout.tensor};
  result.num_parameters = static_cast<int64_t>(run.init.size());
  result.shard_parameters = shard_size;
  result.losses.assign(static_cast<size_t>(config.steps), 0.0);
  result.step_seconds.assign(static_cast<size_t>(config.steps), 0.0);
  // What TransformerCore's buffers are charged (padded bytes, per tensor, by default).
  constexpr ElementType f32 = ElementType::kF32;
  result.weight_bytes = run.charged_bytes(f32, run.weight_shapes);
  // The bucket, and with micro-batches a second one that each later micro-batch computes into.
  result.gradient_bytes = static_cast<uint64_t>(config.micro_batches > 1 ? 2 : 1) *
                          run.charged_bytes(f32, run.bucket_shapes);
  result.optimizer_bytes = 2 * result.weight_bytes;
  result.activation_bytes = run.charged_bytes(f32, run.model.workspace_shapes());
  result.token_bytes = run.charged_bytes(
      ElementType::kS32, std::span<const std::vector<int64_t>>(&run.token_shape, 1));
  return result;
}

/// One core's part of the run, inside shard_map: its HBM buffers (weight shard, gradient bucket,
/// micro-batch bucket, Adam's m and v, activations, tokens), allocated once and pinned, and the
/// named parts of a step. Only the owning core may call.
class TransformerCore {
 public:
  TransformerCore(ShardMapContext& smc, const TransformerRun& run)
      : smc_(smc),
        ctx_(smc.core()),
        run_(run),
        tp_(smc.communicator("model")),
        data_rank_(smc.axis_index("data")) {
    CoreContext& ctx = ctx_;
    // Each buffer packs several tensors and is charged as those tensors (the sizes empty_result
    // reports).
    constexpr ElementType f32 = ElementType::kF32;
    params_ = ctx.allocate_arrays(f32, run.weight_shapes, "transformer/weights");
    grads_ = ctx.allocate_arrays(f32, run.bucket_shapes, "transformer/grads+loss");
    if (run.config.micro_batches > 1) {
      micro_ = ctx.allocate_arrays(f32, run.bucket_shapes, "transformer/micro_grads+loss");
    }
    adam_m_ = ctx.allocate_arrays(f32, run.weight_shapes, "transformer/adam_m");
    adam_v_ = ctx.allocate_arrays(f32, run.weight_shapes, "transformer/adam_v");
    work_ = ctx.allocate_arrays(f32, run.model.workspace_shapes(), "transformer/activations");
    toks_ = ctx.allocate_array(ElementType::kS32, run.token_shape, "transformer/tokens");
    for (const DeviceBuffer* b : {&params_, &grads_, &adam_m_, &adam_v_, &work_, &toks_}) {
      pins_.push_back(b->pin());
    }
    if (micro_.valid()) pins_.push_back(micro_.pin());
    const int64_t t = smc.axis_index("model");
    const auto& shard = run.init_shards[static_cast<size_t>(t)];
    std::copy(shard.begin(), shard.end(), params_.as<float>().begin());
    std::ranges::fill(adam_m_.as<float>(), 0.0f);
    std::ranges::fill(adam_v_.as<float>(), 0.0f);
    // A group of one core sums nothing: Megatron with tensor parallel size 1 (and DDP on one
    // replica) runs no all-reduce, so neither does this trainer; the one-core all-reduce in
    // place would leave the same bits. The model all-reduces slices of the workspace in place,
    // which the named psum (a whole array) does not offer: it calls the axis's communicator.
    if (smc.axis_size("model") > 1) {
      tp_all_reduce_ = [this](std::span<float> x) { tp_.all_reduce<float>(ctx_, x); };
    }
    if (run.config.kernels == "pallas") pallas_matmul_ = pallas_dense_matmul();
  }

  /// Copies this data shard's sequences of step `step`'s global batch into the token buffer:
  /// [d * local_batch, (d + 1) * local_batch) of the batch.
  void load_tokens(int64_t step) {
    const int64_t len = run_.config.context + 1;
    std::span<int32_t> tk = toks_.as<int32_t>();
    const auto& st = run_.starts[static_cast<size_t>(step)];
    for (int64_t s = 0; s < run_.local_batch; ++s) {
      const int64_t start = st[static_cast<size_t>(data_rank_ * run_.local_batch + s)];
      std::copy_n(run_.tokens.begin() + start, len, tk.begin() + s * len);
    }
  }

  /// Forward and backward of every micro-batch: k = 0 straight into the bucket, each later one
  /// into the micro bucket and then added, so the bucket holds ((g_0 + g_1) + g_2) + ..., the
  /// order in which the data-parallel all-reduce folds the data shards' buckets (rank order).
  /// The bucket's last float is the loss sum.
  void compute_gradients() {
    const auto size = static_cast<size_t>(run_.shard_size());
    const auto seq = static_cast<size_t>(run_.micro_batch * (run_.config.context + 1));
    std::span<float> p = params_.as<float>(), g = grads_.as<float>();
    std::span<int32_t> tk = toks_.as<int32_t>();
    for (int64_t k = 0; k < run_.config.micro_batches; ++k) {
      std::span<float> gk = k == 0 ? g : micro_.as<float>();
      const double loss_sum =
          run_.model.run(p, gk.first(size), tk.subspan(static_cast<size_t>(k) * seq, seq),
                         run_.grad_scale, work_.as<float>(), tp_all_reduce_, pallas_matmul_);
      gk[size] = static_cast<float>(loss_sum);
      if (k > 0) {
        for (size_t i = 0; i < g.size(); ++i) g[i] += gk[i];
      }
    }
  }

  /// Data parallel: one bucket (the shard's gradients and the loss sum), psum over "data". The
  /// bucket is donated, so the sum lands in its buffer (no second bucket), which stays pinned.
  void all_reduce_gradients() {
    if (smc_.axis_size("data") == 1) return;
    const int64_t elements = run_.shard_size() + 1;
    LocalArray bucket = LocalArray::adopt(ElementType::kF32, {elements}, std::move(grads_));
    grads_ = smc_.psum(std::move(bucket), "data").release();
  }

  void optimizer_step(int64_t step) {
    const auto size = static_cast<size_t>(run_.shard_size());
    adam_update(params_.as<float>(), grads_.as<float>().first(size), adam_m_.as<float>(),
                adam_v_.as<float>(), step + 1, run_.config);
  }

  /// The step's mean token loss over the global batch (after all_reduce_gradients).
  double loss() const {
    return static_cast<double>(grads_.as<float>()[static_cast<size_t>(run_.shard_size())]) /
           static_cast<double>(run_.config.batch * run_.config.context);
  }

  /// The final weight shard, handed over so that it outlives the SPMD program.
  DeviceBuffer take_params() { return std::move(params_); }

 private:
  /// --kernels pallas: every dense projection is the pipelined tiled matmul on this core, its
  /// operands located in the HBM buffers above (blocks of at most 256, two VMEM buffers each).
  DenseMatmul<float> pallas_dense_matmul() {
    auto locate = [this](const float* ptr, int64_t rows, int64_t cols) {
      for (const DeviceBuffer* b : {&params_, &grads_, &micro_, &work_}) {
        if (!b->valid()) continue;
        const float* base = b->as<float>().data();
        const auto len = static_cast<int64_t>(b->as<float>().size());
        if (ptr >= base && ptr - base + rows * cols <= len) {
          return HbmMatrix{b, rows, cols, static_cast<uint64_t>(ptr - base) * sizeof(float)};
        }
      }
      throw InternalError("a transformer matmul operand lies outside the core's HBM buffers");
    };
    return [this, locate](const float* a, bool ta, const float* b, bool tb, float* out, int64_t m,
                          int64_t n, int64_t k) {
      MatmulOptions o;
      o.transpose_lhs = ta;
      o.transpose_rhs = tb;
      pallas_matmul(ctx_.core(), locate(a, ta ? k : m, ta ? m : k),
                    locate(b, tb ? n : k, tb ? k : n), locate(out, m, n), fit_blocks(o, m, n, k));
    };
  }

  ShardMapContext& smc_;
  CoreContext& ctx_;
  const TransformerRun& run_;
  Communicator& tp_;  // "model"
  const int64_t data_rank_;
  DeviceBuffer params_, grads_, micro_, adam_m_, adam_v_, work_, toks_;
  std::vector<BufferPin> pins_;
  TensorAllReduce<float> tp_all_reduce_;  // null for a tensor group of one core
  DenseMatmul<float> pallas_matmul_;      // null: Eigen
};

/// The result's final shards (from each tensor shard's data-rank-0 core), replica verdict and
/// per-core stats. `final_params[c]` is core c's final shard (empty for another process's core).
void collect_results(const Runtime& runtime, const TransformerRun& run,
                     std::vector<DeviceBuffer> final_params, TransformerResult& result) {
  const DataTensorLayout& layout = run.layout;
  result.shards.resize(static_cast<size_t>(layout.tensor));
  // Every core's shard in every process: the shards as the blocks of one array over the mesh
  // (P over both axes), gathered.
  const int64_t shard_size = run.shard_size();
  std::vector<DeviceBuffer> blocks;
  for (int dev : run.mesh.devices())
    blocks.push_back(std::move(final_params[static_cast<size_t>(dev)]));
  // Kept until the stats below are read, as the shards were before.
  const ShardedArray every_shard = ShardedArray::from_buffers(
      runtime, {shard_size * run.mesh.size()},
      NamedSharding(run.mesh, PartitionSpec({{"data", "model"}})), std::move(blocks));
  const std::vector<float> all = every_shard.gather();
  std::vector<std::span<const float>> shards;
  for (int c = 0; c < runtime.num_cores(); ++c) {
    shards.push_back(std::span<const float>(all).subspan(
        static_cast<size_t>(run.mesh.flat_index_of(c) * shard_size),
        static_cast<size_t>(shard_size)));
  }
  for (const std::vector<int>& group : layout.data_groups) {  // one per tensor shard
    const std::span<const float> p0 = shards[static_cast<size_t>(group[0])];
    result.shards[static_cast<size_t>(layout.tensor_rank[static_cast<size_t>(group[0])])].assign(
        p0.begin(), p0.end());
  }
  std::vector<ParamSegment> segments;
  for (const TransformerParam& p : run.model.layout().params()) {
    segments.push_back(
        {p.name + (layout.tensor > 1 ? " (its tensor shard of " + str(layout.tensor) + ")" : ""),
         p.offset, p.num_elements()});
  }
  result.replica_mismatch = compare_replicas(shards, layout.data_groups, segments);
  // Per-core figures: each process reads its own cores and the processes exchange them.
  result.num_processes = runtime.process_count();
  result.hbm =
      all_gather_per_core(runtime, [&](int c) { return runtime.core(c).hbm().memory_stats(); });
  result.tensor_all_reduce =
      all_gather_per_core(runtime, [&](int c) { return run.tensor_comm(c).stats(c); });
  result.data_all_reduce =
      all_gather_per_core(runtime, [&](int c) { return run.data_comm(c).stats(c); });
}

}  // namespace

TransformerResult train_transformer_on_layout(Runtime& runtime, std::span<const int32_t> tokens,
                                              const TransformerConfig& config,
                                              const DataTensorLayout& layout,
                                              const std::function<void(int64_t, double)>& on_log) {
  check_run(runtime, tokens, config, TransformerMesh{layout.data, layout.tensor});
  const TransformerRun run(runtime, tokens, config, layout);
  TransformerResult result = empty_result(run);
  std::vector<DeviceBuffer> final_params(static_cast<size_t>(runtime.num_cores()));

  const auto t_start = std::chrono::steady_clock::now();
  // The whole training loop is one shard_map over the (D, T) mesh: no array goes in or out (each
  // core reads its shard of the initial weights and its sequences from `run`, and hands its
  // final weights to final_params).
  shard_map(run.mesh, {}, {}, [&](ShardMapContext& smc, std::span<const LocalArray>) {
    const int c = smc.device();
    TransformerCore core(smc, run);
    for (int64_t step = 0; step < config.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      core.load_tokens(step);
      core.compute_gradients();
      core.all_reduce_gradients();
      core.optimizer_step(step);
      finish_step(c == runtime.first_local_core(), step, config.steps, config.log_every,
                  core.loss(), t0, result.step_seconds, result.losses, on_log);
    }
    final_params[static_cast<size_t>(c)] = core.take_params();
    return std::vector<LocalArray>{};
  })();
  result.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  result.median_step_ms = 1e3 * median_of(result.step_seconds);
  collect_results(runtime, run, std::move(final_params), result);
  return result;
}

void to_json(nlohmann::json& j, const TransformerResult& r) {
  nlohmann::json cores = nlohmann::json::array();
  for (size_t c = 0; c < r.hbm.size(); ++c) {
    cores.push_back({{"core", c},
                     {"process", c / (r.hbm.size() / static_cast<size_t>(r.num_processes))},
                     {"peak_bytes_in_use", r.hbm[c].peak_bytes_in_use},
                     {"bytes_limit", r.hbm[c].bytes_limit},
                     {"tensor_all_reduce",
                      {{"num_collectives", r.tensor_all_reduce[c].num_collectives},
                       {"bytes", r.tensor_all_reduce[c].bytes},
                       {"seconds", r.tensor_all_reduce[c].seconds}}},
                     {"data_all_reduce",
                      {{"num_collectives", r.data_all_reduce[c].num_collectives},
                       {"bytes", r.data_all_reduce[c].bytes},
                       {"seconds", r.data_all_reduce[c].seconds}}}});
  }
  j = nlohmann::json{{"mesh", {{"data", r.mesh.data}, {"tensor", r.mesh.tensor}}},
                     {"num_processes", r.num_processes},
                     {"losses", r.losses},
                     {"final_loss", r.losses.empty() ? 0.0 : r.losses.back()},
                     {"median_step_seconds", 1e-3 * r.median_step_ms},
                     {"total_seconds", r.total_seconds},
                     {"num_parameters", r.num_parameters},
                     {"shard_parameters", r.shard_parameters},
                     {"hbm_bytes_per_core",
                      {{"weights", r.weight_bytes},
                       {"gradients", r.gradient_bytes},
                       {"optimizer", r.optimizer_bytes},
                       {"activations", r.activation_bytes},
                       {"tokens", r.token_bytes}}},
                     {"replicas_identical", r.replicas_identical()},
                     {"replica_mismatch", replica_mismatch_json(r.replica_mismatch)},
                     {"cores", cores}};
}

}  // namespace vtpu
