#include "vtpu/cli/train_transformer_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "vtpu/bench/estimate_report.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/run_processes.h"
#include "vtpu/cli/trainer_steps.h"
#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/train/train_runtime_config.h"
#include "vtpu/train/transformer_trainer.h"

namespace vtpu {

struct TrainTransformerCommand {
  CLI::App* app = nullptr;
  std::optional<int> cores;              // the global count (cli/run_processes.h)
  std::optional<int> cores_per_process;  // --cores-per-process, folded into cores by run()
  std::string mesh;
  std::string plan;
  std::string data = default_fortunes_path();
  std::string hbm_bytes;
  std::optional<bool> pad_arrays;  // --pad-arrays, when given
  std::string config_path;         // --config: runtime options (train/train_runtime_config.h)
  TransformerConfig config;
  CLI::Option* batch_option = nullptr;  // to tell whether --batch was given
  bool no_reference = false;
  bool json = false;
};

namespace {

constexpr double kMaxRelativeDifference = 1e-4;  // N cores against 1 core

/// ", 2 micro-batches: ..." for the reference's heading and summary when the mesh has `data` > 1
/// data shards, else "".
std::string reference_note(int64_t data) {
  if (data == 1) return "";
  return ", " + std::to_string(data) +
         " micro-batches: the data-parallel group's f32 gradient additions in its order";
}

uint64_t total(const TransformerResult& r) {
  return r.weight_bytes + r.gradient_bytes + r.optimizer_bytes + r.activation_bytes + r.token_bytes;
}

/// What the flags and the plan resolve to, before the text is read.
struct TransformerSetup {
  TransformerMesh mesh{2, 4};
  std::string strategy = "dp(data)+tp(model)";
  std::optional<TrainPlan> plan;
  std::optional<DataTensorLayout> layout;  // the plan's cores per role (else the DxT grid)
  TransformerConfig config;
  std::optional<PlanEstimate> estimate;
  RuntimeOptions options;  // --config's, completed once the text is read
  std::string mesh_label;  // the plan's mesh, else "mesh DxT"
  /// The plan's cores per role, else the DxT grid (axes "data", "model").
  DataTensorLayout run_layout() const {
    return layout ? *layout : DataTensorLayout::grid(mesh.data, mesh.tensor);
  }
};

/// The mesh, model and batch of a --plan file. False after a usage error.
bool load_plan(const TrainTransformerCommand& cmd, const TrainRuntimeConfig& runtime_config,
               TransformerSetup& setup) {
  TrainPlan& plan = setup.plan.emplace(load_train_plan(cmd.plan));
  TransformerConfig& c = setup.config;
  require_plan_model(plan, "transformer", "vtpu train transformer");
  // The plan's mesh and file are named, not the flattened data x tensor grid ("8x1").
  if (!plan_cores_usage_ok(plan, cmd.cores, runtime_config)) return false;
  // The estimate is priced from the Eigen kernels' rates: a pallas run is not the one priced.
  if (!check_usage([&] {
        if (c.kernels != "eigen") {
          throw InvalidArgumentError("--kernels " + c.kernels +
                                     " cannot be combined with --plan (expected --kernels eigen "
                                     "with --plan: the plan's estimate is priced from the Eigen "
                                     "kernels' rates)");
        }
      })) {
    return false;
  }
  setup.layout = plan_data_tensor_layout(plan, "vtpu train transformer");
  setup.mesh = TransformerMesh{setup.layout->data, setup.layout->tensor};
  // An unnamed strategy is described by its roles.
  setup.strategy = (plan.strategy_name.empty() ? plan.describe_strategy() : plan.strategy_name) +
                   " (from " + cmd.plan + ")";
  // The global batch of the estimate, unless --batch says otherwise.
  if (cmd.batch_option->count() == 0 && plan.estimated_batch() > 0) {
    c.batch = plan.estimated_batch();
  }
  // The model the plan was made for (its model_graph; vtpu train transformer has no flags for
  // the sizes): a model_graph that is not this transformer is an error.
  if (const std::optional<TransformerPlanModel> m = transformer_plan_model(plan)) {
    c.vocab = m->vocab;
    c.context = m->context;
    c.d_model = m->d_model;
    c.heads = m->heads;
    c.layers = m->layers;
    c.hidden = m->hidden;
  }
  return true;
}

/// The mesh (--plan, else --mesh, else --cores N as 1xN, else 2x4), the model and the estimate,
/// checked. nullopt after a usage error.
std::optional<TransformerSetup> resolve(const TrainTransformerCommand& cmd) {
  TransformerSetup setup;
  TransformerConfig& c = setup.config;
  TransformerMesh& mesh = setup.mesh;
  c = cmd.config;
  // --config, under the flags: its num_cores is the default of --cores (so alone it means
  // --mesh 1xN) and must match --mesh or --plan.
  const std::optional<TrainRuntimeConfig> runtime_config =
      load_runtime_config(cmd.config_path, false, "vtpu train transformer");
  if (!runtime_config) return std::nullopt;
  setup.options = runtime_config->options;
  if (!cmd.plan.empty()) {
    if (!load_plan(cmd, *runtime_config, setup)) return std::nullopt;
  } else if (!cmd.mesh.empty()) {
    if (!check_usage([&] {
          mesh = parse_transformer_mesh(cmd.mesh);
          runtime_config->check_mesh_cores(mesh.num_cores(), "--mesh " + cmd.mesh, cmd.cores);
        }))
      return std::nullopt;
  } else if (const std::optional<int> cores = runtime_config->cores(cmd.cores)) {
    mesh = TransformerMesh{1, *cores};
  }
  if (cmd.cores && *cmd.cores != mesh.num_cores()) {
    report_usage_error("--cores " + std::to_string(*cmd.cores) + " does not match the mesh " +
                       mesh.to_string() + " (" + count_text(mesh.num_cores(), "core") + ")");
    return std::nullopt;
  }
  if (!check_usage([&] {
        check_cores_split(mesh.num_cores(),
                          setup.plan         ? "the plan's mesh " + setup.plan->describe_mesh()
                          : cmd.mesh.empty() ? "--cores " + std::to_string(mesh.num_cores())
                                             : "--mesh " + cmd.mesh);
      })) {
    return std::nullopt;
  }
  if (mesh.tensor == 1 && cmd.plan.empty()) setup.strategy = "dp(data)";
  if (mesh.data == 1 && cmd.plan.empty()) {
    setup.strategy = mesh.tensor > 1 ? "tp(model)" : "single core";
  }
  // The plan's estimate, compared with this run (bench/estimate_report.h). A --batch other than
  // the estimate's is a usage error, checked before the header, before the single-core reference
  // trains and before the batch is split over the mesh.
  if (setup.plan &&
      !check_usage([&] { setup.estimate = comparable_estimate(*setup.plan, c.batch); })) {
    return std::nullopt;
  }
  c.validate();
  c.validate_mesh(mesh.data, mesh.tensor);
  // The plan's layers and parameter shapes against the model this run trains.
  if (setup.plan) {
    check_plan_layout(*setup.plan,
                      transformer_model_graph(TransformerPlanModel{c.vocab, c.context, c.d_model,
                                                                   c.heads, c.layers, c.hidden}),
                      "vtpu train transformer");
  }
  // The printout names the groups and the plan's mesh axes, not the axis names for the roles.
  setup.mesh_label = setup.plan ? setup.plan->mesh().to_string() : "mesh " + mesh.to_string();
  return setup;
}

void print_header(const TrainTransformerCommand& cmd, const TransformerSetup& setup,
                  const TokenText& text) {
  const TransformerConfig& c = setup.config;
  const TransformerMesh& mesh = setup.mesh;
  const int64_t params = TransformerLayout(c, 1).size();
  const int64_t shard = TransformerLayout(c, mesh.tensor).size();
  std::printf("vtpu train transformer: %s: %s on %s, %s; strategy %s\n", setup.mesh_label.c_str(),
              setup.run_layout().describe().c_str(),
              (count_text(setup.options.num_cores, "virtual core") +
               processes_text(setup.options.num_cores))
                  .c_str(),
              hbm_each_text(setup.options).c_str(), setup.strategy.c_str());
  const std::string mapped = text.describe_mapped(c.vocab);
  std::printf("text %s: %zu byte tokens, %lld distinct%s%s\n", cmd.data.c_str(), text.tokens.size(),
              static_cast<long long>(text.vocab_used), mapped.empty() ? "" : "; ", mapped.c_str());
  std::printf(
      "model: vocab %lld, context %lld, d_model %lld, heads %lld (%lld per core), layers %lld, "
      "MLP hidden %lld (%lld per core), GELU, pre-LN, untied head; %lld parameters, %lld per "
      "core\n",
      static_cast<long long>(c.vocab), static_cast<long long>(c.context),
      static_cast<long long>(c.d_model), static_cast<long long>(c.heads),
      static_cast<long long>(c.heads / mesh.tensor), static_cast<long long>(c.layers),
      static_cast<long long>(c.hidden), static_cast<long long>(c.hidden / mesh.tensor),
      static_cast<long long>(params), static_cast<long long>(shard));
  std::printf(
      "training: batch %lld sequences (%lld per data shard), Adam lr %g, %s, seed "
      "%llu, f32, %s kernels\n",
      static_cast<long long>(c.batch), static_cast<long long>(c.batch / mesh.data),
      static_cast<double>(c.learning_rate),
      count_text(static_cast<long long>(c.steps), "step").c_str(),
      static_cast<unsigned long long>(c.seed), c.kernels.c_str());
  std::fflush(stdout);
}

/// The per-step line of run `who`, flushed (the transformer's steps are slow); none under --json.
StepLog transformer_step_log(bool json, const char* who) {
  return [json, who](int64_t step, double loss) {
    if (!json) {
      std::printf("  %s step %6lld  loss %.6f\n", who, static_cast<long long>(step), loss);
      std::fflush(stdout);
    }
  };
}

/// The single-core reference: one micro-batch per data shard, in data-rank order, so that it
/// performs the data-parallel all-reduce's f32 gradient additions in its order.
TransformerResult run_reference(const TrainTransformerCommand& cmd, const TransformerSetup& setup,
                                const TokenText& text) {
  const TransformerConfig& c = setup.config;
  // --log-every 0 prints no per-step losses, so no heading above them.
  if (!cmd.json && c.log_every > 0) {
    std::printf("single-core reference (mesh 1x1%s):\n", reference_note(setup.mesh.data).c_str());
  }
  RuntimeOptions one = setup.options;
  one.num_cores = 1;
  // As train mlp's reference (train/mlp_reference.h): one core holds the whole model, so
  // --hbm-bytes limits the mesh run, not the reference (at least 16 GiB).
  one.hbm_bytes_per_core =
      std::max(setup.options.hbm_bytes_per_core, RuntimeOptions{}.hbm_bytes_per_core);
  Runtime rt(one);
  TransformerConfig ref_config = c;
  ref_config.micro_batches = setup.mesh.data;
  return train_transformer(rt, text.tokens, ref_config, {1, 1},
                           transformer_step_log(cmd.json, "1 core"));
}

/// The largest relative difference of the mesh's losses from the reference's, and its step.
struct LossDifference {
  double max_relative = 0.0;
  int64_t worst_step = 0;
};

LossDifference loss_difference(const TransformerResult& r,
                               const std::optional<TransformerResult>& ref) {
  LossDifference d;
  if (!ref) return d;
  for (size_t s = 0; s < r.losses.size(); ++s) {
    const double rel = std::abs(r.losses[s] - ref->losses[s]) / std::abs(ref->losses[s]);
    if (rel > d.max_relative) {
      d.max_relative = rel;
      d.worst_step = static_cast<int64_t>(s);
    }
  }
  return d;
}

void print_json(const TrainTransformerCommand& cmd, const TransformerSetup& setup,
                const TokenText& text, const TransformerResult& r,
                const std::optional<TransformerResult>& ref, const LossDifference& diff,
                const std::optional<EstimateReport>& report) {
  const TransformerConfig& c = setup.config;
  nlohmann::json j;
  j["config"] = {{"vocab", c.vocab},
                 {"context", c.context},
                 {"d_model", c.d_model},
                 {"heads", c.heads},
                 {"layers", c.layers},
                 {"hidden", c.hidden},
                 {"batch", c.batch},
                 {"steps", c.steps},
                 {"seed", c.seed},
                 {"learning_rate", c.learning_rate},
                 {"data", cmd.data},
                 {"strategy", setup.strategy},
                 {"runtime", setup.options.to_json()}};
  j["vocab_used"] = text.vocab_used;
  j["text_bytes"] = text.tokens.size();
  j["bytes_mapped_to_question_mark"] = text.mapped_bytes;  // bytes >= vocab
  j["uniform_loss"] = text.uniform_loss;
  j["mesh"] = r;
  hoist_run_facts(j, "mesh");  // top level, as in every trainer's --json
  if (ref) {
    j["reference"] = *ref;
    // One core holds no data replicas: its verdict would say nothing.
    j["reference"].erase("replicas_identical");
    j["reference"].erase("replica_mismatch");
    j["max_relative_loss_difference"] = diff.max_relative;
    j["reference_micro_batches"] = setup.mesh.data;
  }
  print_json_result(std::move(j), report);
}

/// The closing table of both runs' losses: every --log-every steps and the last (--log-every 0:
/// only the last).
void print_loss_table(const TransformerConfig& c, const TransformerResult& r,
                      const TransformerResult& ref) {
  std::printf("%6s %12s %12s %10s\n", "step", "loss(mesh)", "loss(1core)", "rel_diff");
  for (int64_t s = 0; s < c.steps; ++s) {
    if (s != c.steps - 1 && (c.log_every == 0 || s % c.log_every != 0)) continue;
    const size_t i = static_cast<size_t>(s);
    std::printf("%6lld %12.6f %12.6f %10.2e\n", static_cast<long long>(s), r.losses[i],
                ref.losses[i], std::abs(r.losses[i] - ref.losses[i]) / ref.losses[i]);
  }
}

/// The all-reduce counts and HBM per core of the mesh run (and the reference's total).
void print_resources(const TransformerSetup& setup, const TransformerResult& r,
                     const std::optional<TransformerResult>& ref) {
  const TransformerConfig& c = setup.config;
  // A group of one core runs no all-reduce (train/transformer_trainer.h).
  std::printf("all-reduce on core 0: tensor group %s; data-parallel group %s\n",
              describe_group_all_reduce(
                  r.tensor_all_reduce[0], setup.mesh.tensor,
                  std::to_string(4 * c.layers) + " per step: 2 forward + 2 backward per block")
                  .c_str(),
              describe_group_all_reduce(r.data_all_reduce[0], setup.mesh.data,
                                        "1 per step: the gradient bucket")
                  .c_str());
  std::printf(
      "HBM per core (bytes): weights %llu, gradients+loss %llu, Adam m+v %llu, activations "
      "%llu, tokens %llu; total %llu",
      static_cast<unsigned long long>(r.weight_bytes),
      static_cast<unsigned long long>(r.gradient_bytes),
      static_cast<unsigned long long>(r.optimizer_bytes),
      static_cast<unsigned long long>(r.activation_bytes),
      static_cast<unsigned long long>(r.token_bytes), static_cast<unsigned long long>(total(r)));
  if (ref) std::printf(" (single core: %llu)", static_cast<unsigned long long>(total(*ref)));
  std::printf("\n");
  print_peak_hbm_per_core(r.hbm);
}

void print_text(const TransformerSetup& setup, const TokenText& text, const TransformerResult& r,
                const std::optional<TransformerResult>& ref, const LossDifference& diff,
                const std::optional<EstimateReport>& report) {
  const TransformerConfig& c = setup.config;
  const char* label = setup.mesh_label.c_str();
  if (ref) print_loss_table(c, r, *ref);
  std::printf("uniform-guess loss ln(%lld distinct bytes) = %.4f nats; initial loss %.4f\n",
              static_cast<long long>(text.vocab_used), text.uniform_loss, r.losses.front());
  std::printf("final loss %.4f (%s) = %.2f x uniform\n", r.losses.back(), label,
              r.losses.back() / text.uniform_loss);
  if (ref) {
    const int64_t data = setup.mesh.data;
    std::printf(
        "single core%s final loss %.4f; max relative difference over %s %.2e (step %lld; "
        "limit %.0e): %s\n",
        data > 1 ? (" (" + std::to_string(data) + " micro-batches)").c_str() : "",
        ref->losses.back(), count_text(static_cast<long long>(c.steps), "step").c_str(),
        diff.max_relative, static_cast<long long>(diff.worst_step), kMaxRelativeDifference,
        diff.max_relative <= kMaxRelativeDifference ? "ok" : "EXCEEDED");
  }
  std::printf("time: %s %.2f s (median step %.2f ms)", label, r.total_seconds, r.median_step_ms);
  if (ref) {
    std::printf(", single core %.2f s (median step %.2f ms)", ref->total_seconds,
                ref->median_step_ms);
  }
  std::printf("\n");
  print_resources(setup, r, ref);
  std::printf("data replicas identical after training: %s\n",
              r.replicas_identical() ? "yes" : "NO");
  if (report) std::printf("%s", report->to_string().c_str());
}

/// The error of a loss mismatch, on stderr.
void print_mismatch(const TransformerSetup& setup, const LossDifference& diff) {
  std::fprintf(stderr,
               "vtpu: error: the mesh's losses differ from the single-core losses by %.2e "
               "relative at step %lld (limit %.0e)\n",
               diff.max_relative, static_cast<long long>(diff.worst_step), kMaxRelativeDifference);
  // The reference follows the data-parallel additions but not the tensor-parallel split of the
  // matmul sums (train/transformer_trainer.h): say so when the mesh has one.
  if (setup.mesh.tensor > 1) {
    std::fprintf(stderr,
                 "vtpu: note: the tensor group of %lld splits the row-parallel matmul sums "
                 "across cores, an f32 order the single-core reference does not follow; a "
                 "sensitive Adam trajectory (large --batch and --lr) can amplify that past the "
                 "limit (docs/TRAINING.md, \"Transformer\")\n",
                 static_cast<long long>(setup.mesh.tensor));
  }
}

int run(const TrainTransformerCommand& given) {
  // --cores-per-process is --cores K x processes from here on.
  TrainTransformerCommand cmd = given;
  if (!check_usage([&] { cmd.cores = global_cores(given.cores, given.cores_per_process); })) {
    return 2;
  }
  std::optional<TransformerSetup> resolved = resolve(cmd);
  if (!resolved) return 2;
  TransformerSetup& setup = *resolved;
  const TransformerConfig& c = setup.config;
  const TokenText text = load_token_text(cmd.data, c.vocab, c.context);
  setup.options.num_cores = static_cast<int>(setup.mesh.num_cores());
  if (!cmd.hbm_bytes.empty()) setup.options.hbm_bytes_per_core = parse_bytes(cmd.hbm_bytes);
  if (cmd.pad_arrays) setup.options.pad_arrays = *cmd.pad_arrays;
  setup.options.validate();
  if (!cmd.json) print_header(cmd, setup, text);
  std::optional<TransformerResult> ref;
  if (!cmd.no_reference) ref = run_reference(cmd, setup, text);
  if (!cmd.json && c.log_every > 0) std::printf("%s:\n", setup.mesh_label.c_str());
  StepMeter meter;
  TransformerConfig run_config = c;
  StepLog on_log = transformer_step_log(cmd.json, "mesh  ");
  if (setup.estimate) on_log = metered_step_log(meter, on_log, run_config.log_every, c.steps);
  const std::unique_ptr<Runtime> runtime_ptr = make_run_runtime(setup.options);
  Runtime& runtime = *runtime_ptr;
  const TransformerResult r =
      train_transformer_on_layout(runtime, text.tokens, run_config, setup.run_layout(), on_log);
  std::optional<EstimateReport> report;
  if (setup.estimate) {
    // The tokens are the step's input batch: nothing unmodelled.
    report = compare_run_with_estimate(*setup.estimate,
                                       measure_run(static_cast<int>(setup.mesh.num_cores()),
                                                   c.steps, r.median_step_ms, meter, r.hbm),
                                       runtime.thread_pinning(), *setup.plan);
  }
  const LossDifference diff = loss_difference(r, ref);
  const bool ok = !ref || diff.max_relative <= kMaxRelativeDifference;
  if (cmd.json) {
    print_json(cmd, setup, text, r, ref, diff, report);
  } else {
    print_text(setup, text, r, ref, diff, report);
  }
  if (!ok) print_mismatch(setup, diff);
  // Replicas that drifted apart fail the run, as a loss mismatch does, --no-reference or not.
  const bool replicas_ok = report_replicas(r.replica_mismatch);
  return ok && replicas_ok ? 0 : 1;
}

}  // namespace

std::shared_ptr<TrainTransformerCommand> add_train_transformer_command(CLI::App& train) {
  auto cmd = std::make_shared<TrainTransformerCommand>();
  CLI::App* app = train.add_subcommand(
      "transformer",
      "Decoder-only transformer on Debian's fortunes text (character level), data parallel x "
      "Megatron tensor parallel, checked against a single-core run");
  cmd->app = app;
  TransformerConfig& c = cmd->config;
  auto* mesh = app->add_option("--mesh", cmd->mesh,
                               "DxT: data-parallel size x tensor-parallel size (default 2x4)");
  app->add_option("--cores", cmd->cores,
                  "Cores over all processes; alone it means --mesh 1xN (pure tensor parallel)")
      ->check(CLI::Range(1, 1024));
  add_cores_per_process_option(*app, cmd->cores_per_process);
  app->add_option("--plan", cmd->plan,
                  "Run the mesh and strategy of a `vtpu plan --emit` file (data and tensor "
                  "parallel over any mesh axes, flattened; FSDP is not implemented for "
                  "transformer)")
      ->excludes(mesh)
      ->check(nonempty_path_validator());
  app->add_option("--steps", c.steps, "Adam steps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  app->add_option("--seed", c.seed, "Seed for parameter init and batch windows, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  cmd->batch_option =
      app->add_option("--batch", c.batch,
                      "Sequences per step over all cores (a multiple of D; with --plan, default "
                      "the plan's)")
          ->capture_default_str()
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app->add_option("--lr", c.learning_rate, "Adam learning rate (> 0)")
      ->capture_default_str()
      ->check(learning_rate_validator());
  app->add_option("--data", cmd->data, "Text file (data/fortunes.txt from scripts/fetch-data.sh)")
      ->capture_default_str()
      ->check(nonempty_path_validator());
  app->add_option("--log-every", c.log_every,
                  "Print the loss every K steps (0: only the last, in the closing table; no "
                  "per-step lines)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--hbm-bytes", cmd->hbm_bytes,
                  "HBM per core, e.g. 16G, 512M (default 16G, or hbm_bytes_per_core of --config)")
      ->check(hbm_bytes_validator());
  add_runtime_config_option(*app, cmd->config_path,
                            "num_cores is the default of --cores, so alone it means --mesh 1xN, "
                            "and must match --mesh or --plan");
  add_pad_arrays_option(*app, cmd->pad_arrays);
  app->add_option(
         "--kernels", c.kernels,
         "Dense projections: eigen (Eigen GEMMs) or pallas (the pipelined tiled matmul "
         "through VMEM and the DMA engine; eigen with --plan, whose estimate is priced from "
         "the Eigen kernels)")
      ->capture_default_str()
      ->check(CLI::IsMember({"eigen", "pallas"}));
  app->add_flag("--no-reference", cmd->no_reference, "Skip the single-core reference run");
  app->add_flag("--json", cmd->json, "Print the results as JSON (with every step's losses)");
  return cmd;
}

bool run_train_transformer_if_selected(const TrainTransformerCommand& command, int* exit_code) {
  if (command.app == nullptr || !command.app->parsed()) return false;
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
