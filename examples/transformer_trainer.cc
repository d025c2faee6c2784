#include "examples/transformer_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "examples/train_step_log.h"
#include "runtime/pallas_kernels.h"

namespace vtpu::examples {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

constexpr uint64_t kMaxTextBytes = uint64_t{1} << 30;

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

std::string default_fortunes_path() {
  if (const char* dir = std::getenv("VTPU_DATA_DIR"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/fortunes.txt";
  }
  return std::string(VTPU_SOURCE_DIR) + "/data/fortunes.txt";
}

TokenText make_token_text(std::span<const char> text, int64_t vocab) {
  TokenText t;
  t.tokens = tokenize_bytes(text, vocab);
  std::set<int32_t> used(t.tokens.begin(), t.tokens.end());
  t.vocab_used = static_cast<int64_t>(used.size());
  t.uniform_loss = t.vocab_used > 0 ? std::log(static_cast<double>(t.vocab_used)) : 0.0;
  return t;
}

TokenText load_token_text(const std::string& path, int64_t vocab, int64_t context) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw NotFoundError("cannot open text file '" + path +
                        "' (run scripts/fetch-data.sh to fetch Debian's fortunes into "
                        "data/fortunes.txt, or pass --data PATH)");
  }
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxTextBytes) {
      throw InvalidArgumentError("text file '" + path + "' is larger than 1 GiB");
    }
  }
  if (static_cast<int64_t>(text.size()) < context + 2) {
    throw InvalidArgumentError("text file '" + path + "' has " +
                               str(static_cast<int64_t>(text.size())) +
                               " bytes (expected at least context + 2 = " + str(context + 2) + ")");
  }
  return make_token_text(text, vocab);
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
  config.validate();
  config.validate_mesh(mesh.data, mesh.tensor);
  const int64_t dsz = mesh.data, tsz = mesh.tensor;
  if (mesh.num_cores() != runtime.num_cores()) {
    throw InvalidArgumentError("mesh " + mesh.to_string() + " needs " + str(mesh.num_cores()) +
                               " cores, the runtime has " + str(runtime.num_cores()));
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
  const int64_t local_batch = config.batch / dsz;
  const int64_t ctx_len = config.context;
  const float grad_scale = 1.0f / static_cast<float>(config.batch * ctx_len);

  // Replica groups: rows of the mesh for the tensor axis, columns for the data axis.
  std::vector<std::vector<int>> tp_groups(static_cast<size_t>(dsz)),
      dp_groups(static_cast<size_t>(tsz));
  for (int64_t d = 0; d < dsz; ++d)
    for (int64_t t = 0; t < tsz; ++t) {
      const int core = static_cast<int>(d * tsz + t);
      tp_groups[static_cast<size_t>(d)].push_back(core);
      dp_groups[static_cast<size_t>(t)].push_back(core);
    }
  auto tp_comms = Communicator::for_groups(runtime, tp_groups);
  auto dp_comms = Communicator::for_groups(runtime, dp_groups);

  const std::vector<float> init = transformer_init_parameters(config);
  std::vector<std::vector<float>> init_shards;
  for (int64_t t = 0; t < tsz; ++t) {
    init_shards.push_back(shard_transformer_parameters<float>(config, init, tsz, t));
  }
  const TransformerShard<float> model(config, tsz, local_batch);
  const int64_t shard_size = model.layout().size();

  // The global batches, the same for every mesh (drawn on the host before the run).
  WindowSampler sampler(static_cast<int64_t>(tokens.size()), ctx_len, config.seed);
  std::vector<std::vector<int64_t>> starts(static_cast<size_t>(config.steps));
  for (auto& s : starts) s = sampler.next(config.batch);

  TransformerResult result;
  result.mesh = mesh;
  result.num_parameters = static_cast<int64_t>(init.size());
  result.shard_parameters = shard_size;
  result.losses.assign(static_cast<size_t>(config.steps), 0.0);
  result.step_seconds.assign(static_cast<size_t>(config.steps), 0.0);
  const uint64_t f = sizeof(float);
  result.weight_bytes = static_cast<uint64_t>(shard_size) * f;
  result.gradient_bytes = static_cast<uint64_t>(shard_size + 1) * f;
  result.optimizer_bytes = 2 * static_cast<uint64_t>(shard_size) * f;
  result.activation_bytes = static_cast<uint64_t>(model.workspace_elements()) * f;
  result.token_bytes = static_cast<uint64_t>(local_batch * (ctx_len + 1)) * sizeof(int32_t);
  std::vector<DeviceBuffer> final_params(static_cast<size_t>(mesh.num_cores()));

  const auto t_start = std::chrono::steady_clock::now();
  runtime.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    const int64_t d = c / tsz, t = c % tsz;
    Communicator& tp = *tp_comms[static_cast<size_t>(d)];
    Communicator& dp = *dp_comms[static_cast<size_t>(t)];
    DeviceBuffer params = ctx.allocate(result.weight_bytes, "transformer/weights");
    DeviceBuffer grads = ctx.allocate(result.gradient_bytes, "transformer/grads+loss");
    DeviceBuffer adam_m = ctx.allocate(result.optimizer_bytes / 2, "transformer/adam_m");
    DeviceBuffer adam_v = ctx.allocate(result.optimizer_bytes / 2, "transformer/adam_v");
    DeviceBuffer work = ctx.allocate(result.activation_bytes, "transformer/activations");
    DeviceBuffer toks = ctx.allocate(result.token_bytes, "transformer/tokens");
    const BufferPin pins[] = {params.pin(), grads.pin(), adam_m.pin(),
                              adam_v.pin(), work.pin(),  toks.pin()};
    std::span<float> p = params.as<float>(), g = grads.as<float>();
    std::span<float> m = adam_m.as<float>(), v = adam_v.as<float>();
    std::span<int32_t> tk = toks.as<int32_t>();
    const auto& shard = init_shards[static_cast<size_t>(t)];
    std::copy(shard.begin(), shard.end(), p.begin());
    std::fill(m.begin(), m.end(), 0.0f);
    std::fill(v.begin(), v.end(), 0.0f);
    const TensorAllReduce<float> tp_all_reduce = [&](std::span<float> x) {
      tp.all_reduce<float>(ctx, x);
    };
    // --kernels pallas: every dense projection is the pipelined tiled matmul on this core, its
    // operands located in the HBM buffers above (blocks of at most 256, two VMEM buffers each).
    DenseMatmul<float> pallas_matmul_fn;
    if (config.kernels == "pallas") {
      auto locate = [&](const float* ptr, int64_t rows, int64_t cols) {
        for (const DeviceBuffer* b : {&params, &grads, &work}) {
          const float* base = b->as<float>().data();
          const auto len = static_cast<int64_t>(b->as<float>().size());
          if (ptr >= base && ptr - base + rows * cols <= len) {
            return HbmMatrix{b, rows, cols, static_cast<uint64_t>(ptr - base) * sizeof(float)};
          }
        }
        throw InternalError("a transformer matmul operand lies outside the core's HBM buffers");
      };
      pallas_matmul_fn = [&, locate](const float* a, bool ta, const float* b, bool tb, float* out,
                                     int64_t m, int64_t n, int64_t k) {
        MatmulOptions o;
        o.transpose_lhs = ta;
        o.transpose_rhs = tb;
        pallas_matmul(ctx.core(), locate(a, ta ? k : m, ta ? m : k),
                      locate(b, tb ? n : k, tb ? k : n), locate(out, m, n), fit_blocks(o, m, n, k));
      };
    }
    for (int64_t step = 0; step < config.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      // This data shard's sequences: [d * local_batch, (d + 1) * local_batch) of the batch.
      const auto& st = starts[static_cast<size_t>(step)];
      for (int64_t s = 0; s < local_batch; ++s) {
        const int64_t start = st[static_cast<size_t>(d * local_batch + s)];
        std::copy_n(tokens.begin() + start, ctx_len + 1, tk.begin() + s * (ctx_len + 1));
      }
      const double loss_sum = model.run(p, g.first(static_cast<size_t>(shard_size)), tk, grad_scale,
                                        work.as<float>(), tp_all_reduce, pallas_matmul_fn);
      g[static_cast<size_t>(shard_size)] = static_cast<float>(loss_sum);
      // Data parallel: one bucket (the shard's gradients and the loss sum) over the column.
      dp.all_reduce<float>(ctx, g);
      adam_update(p, g.first(static_cast<size_t>(shard_size)), m, v, step + 1, config);
      const double loss = static_cast<double>(g[static_cast<size_t>(shard_size)]) /
                          static_cast<double>(config.batch * ctx_len);
      finish_step(c, step, config.steps, config.log_every, loss, t0, result.step_seconds,
                  result.losses, on_log);
    }
    final_params[static_cast<size_t>(c)] = std::move(params);
  });
  result.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  result.median_step_ms = 1e3 * median(result.step_seconds);
  result.replicas_identical = true;
  for (int64_t t = 0; t < tsz; ++t) {
    auto p0 = final_params[static_cast<size_t>(t)].as<float>();
    result.shards.emplace_back(p0.begin(), p0.end());
    for (int64_t d = 1; d < dsz; ++d) {
      auto pd = final_params[static_cast<size_t>(d * tsz + t)].as<float>();
      if (std::memcmp(pd.data(), p0.data(), p0.size_bytes()) != 0) {
        result.replicas_identical = false;
      }
    }
  }
  for (int c = 0; c < runtime.num_cores(); ++c) {
    result.hbm.push_back(runtime.core(c).hbm().memory_stats());
    result.tensor_all_reduce.push_back(tp_comms[static_cast<size_t>(c / tsz)]->stats(c));
    result.data_all_reduce.push_back(dp_comms[static_cast<size_t>(c % tsz)]->stats(c));
  }
  return result;
}

void to_json(nlohmann::json& j, const TransformerResult& r) {
  nlohmann::json cores = nlohmann::json::array();
  for (size_t c = 0; c < r.hbm.size(); ++c) {
    cores.push_back({{"core", c},
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
                     {"losses", r.losses},
                     {"final_loss", r.losses.empty() ? 0.0 : r.losses.back()},
                     {"median_step_ms", r.median_step_ms},
                     {"total_seconds", r.total_seconds},
                     {"num_parameters", r.num_parameters},
                     {"shard_parameters", r.shard_parameters},
                     {"hbm_bytes_per_core",
                      {{"weights", r.weight_bytes},
                       {"gradients", r.gradient_bytes},
                       {"optimizer", r.optimizer_bytes},
                       {"activations", r.activation_bytes},
                       {"tokens", r.token_bytes}}},
                     {"replicas_identical", r.replicas_identical},
                     {"cores", cores}};
}

TransformerPlan read_transformer_plan(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw NotFoundError("cannot open plan file '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError("plan file '" + path + "' is not valid JSON: " + e.what());
  }
  return parse_transformer_plan(j, path);
}

TransformerPlan parse_transformer_plan(const nlohmann::json& j, const std::string& source) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("plan " + source + ": " + what +
                                " (format in /work/plan-format.md: vtpu plan --emit)");
  };
  if (!j.is_object()) throw bad("not a JSON object");
  if (!j.contains("format") || j["format"] != "vtpu-plan") {
    throw bad("\"format\" is " + (j.contains("format") ? j["format"].dump() : "missing") +
              ", expected \"vtpu-plan\"");
  }
  if (!j.contains("version") || j["version"] != 1) {
    throw bad("\"version\" is " + (j.contains("version") ? j["version"].dump() : "missing") +
              ", expected 1");
  }
  if (!j.contains("model") || j["model"] != "transformer") {
    throw bad("\"model\" is " + (j.contains("model") ? j["model"].dump() : "missing") +
              ", expected \"transformer\" for vtpu train transformer");
  }
  if (!j.contains("mesh") || !j["mesh"].is_object()) throw bad("\"mesh\" missing or not an object");
  const auto& jm = j["mesh"];
  if (!jm.contains("axes") || !jm["axes"].is_array() || !jm.contains("shape") ||
      !jm["shape"].is_array() || jm["axes"].size() != jm["shape"].size() || jm["axes"].empty() ||
      jm["axes"].size() > 2) {
    throw bad("\"mesh\" is " + jm.dump() +
              ", expected {\"axes\": [1 or 2 names], \"shape\": [as many sizes >= 1]}");
  }
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < jm["axes"].size(); ++i) {
    if (!jm["axes"][i].is_string() || !jm["shape"][i].is_number_integer() ||
        jm["shape"][i].get<int64_t>() < 1) {
      throw bad("\"mesh\" entry " + std::to_string(i) + " is " + jm["axes"][i].dump() + ": " +
                jm["shape"][i].dump() + ", expected a name and an integer size >= 1");
    }
    axes.push_back(jm["axes"][i].get<std::string>());
    sizes.push_back(jm["shape"][i].get<int64_t>());
  }
  if (axes.size() == 2 && axes[0] == axes[1]) throw bad("mesh axis '" + axes[0] + "' named twice");
  if (!j.contains("strategy") || !j["strategy"].is_object()) {
    throw bad("\"strategy\" missing or not an object");
  }
  const auto& js = j["strategy"];
  TransformerPlan plan;
  plan.strategy_name = js.contains("name") && js["name"].is_string() ? js["name"].get<std::string>()
                                                                     : std::string("(unnamed)");
  if (js.contains("fsdp") && !js["fsdp"].is_null()) {
    throw UnimplementedError("plan " + source + ": strategy '" + plan.strategy_name +
                             "' uses FSDP over " + js["fsdp"].dump() +
                             ", which is not implemented for transformer (vtpu train transformer "
                             "runs data and tensor parallelism; vtpu train fsdp runs FSDP on the "
                             "MLP)");
  }
  std::vector<bool> used(axes.size(), false);
  auto axis_size = [&](const char* role) -> int64_t {
    if (!js.contains(role) || js[role].is_null()) return 1;
    nlohmann::json v = js[role];
    if (v.is_array()) {
      if (v.size() != 1) {
        throw UnimplementedError("plan " + source + ": strategy \"" + role + "\" is " + v.dump() +
                                 ", several mesh axes on one role are not implemented for "
                                 "transformer (expected one axis name or null)");
      }
      v = v[0];
    }
    if (!v.is_string())
      throw bad(std::string("strategy \"") + role + "\" is " + v.dump() +
                ", expected an axis name or null");
    const std::string name = v.get<std::string>();
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] == name) {
        if (used[i]) throw bad("mesh axis '" + name + "' is used by both data and tensor");
        used[i] = true;
        return sizes[i];
      }
    }
    throw bad(std::string("strategy \"") + role + "\" names axis '" + name +
              "', which is not in the mesh axes " + jm["axes"].dump());
  };
  if (j.contains("estimate") && j["estimate"].is_object()) {
    const auto& e = j["estimate"];
    if (e.contains("step_seconds") && e["step_seconds"].is_number()) {
      plan.estimated_step_seconds = e["step_seconds"].get<double>();
    }
    if (e.contains("hbm_bytes_per_core") && e["hbm_bytes_per_core"].is_number_unsigned()) {
      plan.estimated_hbm_bytes_per_core = e["hbm_bytes_per_core"].get<uint64_t>();
    }
  }
  plan.mesh.data = axis_size("data");
  plan.mesh.tensor = axis_size("tensor");
  for (size_t i = 0; i < axes.size(); ++i) {
    if (!used[i] && sizes[i] > 1) {
      throw bad("mesh axis '" + axes[i] + "' of size " + str(sizes[i]) +
                " is used by no strategy (expected it as \"data\" or \"tensor\")");
    }
  }
  return plan;
}

}  // namespace vtpu::examples
