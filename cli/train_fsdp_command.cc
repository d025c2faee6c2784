#include "vtpu/cli/train_fsdp_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
#include "vtpu/common/host.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_reference.h"
#include "vtpu/train/mlp_trainer.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/train/train_runtime_config.h"

namespace vtpu {

struct TrainFsdpCommand {
  CLI::App* app = nullptr;
  std::optional<int> cores;              // the global count (cli/run_processes.h)
  std::optional<int> cores_per_process;  // --cores-per-process, folded into cores by run()
  FsdpConfig config;
  std::string prefetch = "on";
  std::string plan_path;
  std::string data_path = default_digits_path();
  std::string hbm_bytes;
  std::optional<bool> pad_arrays;  // --pad-arrays, when given
  std::string config_path;         // --config: runtime options (train/train_runtime_config.h)
  bool json = false;
  CLI::Option* lr_option = nullptr;         // --lr; when absent the optimizer's default applies
  CLI::Option* batch_option = nullptr;      // --batch; when absent a plan's estimate.batch applies
  CLI::Option* prefetch_option = nullptr;   // --prefetch; absent with --plan: kPlanFsdpPrefetch
  CLI::Option* hidden_option = nullptr;     // --hidden; with --plan, default the plan's
  CLI::Option* optimizer_option = nullptr;  // --optimizer; with --plan, default the plan's
};

namespace {

/// "1 core / FSDP" as "%.2fx", or "-" when either side is 0 bytes (a buffer only one of the two
/// runs has, such as FSDP's gathered temps: no ratio to print).
std::string ratio_text(uint64_t one, uint64_t fsdp) {
  if (fsdp == 0 || one == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", static_cast<double>(one) / static_cast<double>(fsdp));
  return buf;
}

/// Core 0's HBM at its peak by what the bytes hold: the 1-core reference run, data parallel on
/// the N cores and, when it ran, FSDP on the N cores, with the ratio 1 core / FSDP.
void print_breakdown(const MlpRun& one, const MlpRun& dp, const FsdpResult* fsdp, bool adam) {
  const HbmBreakdown *a = &one.peak, *b = &dp.peak, *f = fsdp ? &fsdp->peak : nullptr;
  std::printf("%-34s %14s %14s %14s %11s\n", "HBM per core (core 0, at its peak)", "1 core (ref)",
              "DP (N cores)", f ? "FSDP (N cores)" : "", f ? "1 core/FSDP" : "");
  auto value_row = [&](const char* name, uint64_t x, uint64_t y, uint64_t z) {
    std::printf("%-34s %14llu %14llu %14s %11s\n", name, static_cast<unsigned long long>(x),
                static_cast<unsigned long long>(y), f ? std::to_string(z).c_str() : "",
                f ? ratio_text(x, z).c_str() : "");
  };
  auto row = [&](const char* name, uint64_t HbmBreakdown::*field) {
    value_row(name, a->*field, b->*field, f ? f->*field : 0);
  };
  auto total = [](const HbmBreakdown* h) { return h ? h->total() : 0; };
  auto state = [](const HbmBreakdown* h) { return h ? h->persistent_state() : 0; };
  auto data = [](const HbmBreakdown* h) { return h ? h->training_set : 0; };
  row("  parameters", &HbmBreakdown::params);
  row("  gradients", &HbmBreakdown::grads);
  row(adam ? "  optimizer state (Adam m + v)" : "  optimizer state (SGD: none)",
      &HbmBreakdown::opt_state);
  value_row("persistent state (p + g + os)", state(a), state(b), state(f));
  row("  gathered parameter temps", &HbmBreakdown::gathered);
  row("  gradient temps (unsharded/micro)", &HbmBreakdown::unsharded_grads);
  row("  batch rows + activations", &HbmBreakdown::activations);
  row("  other (loss scalar)", &HbmBreakdown::other);
  value_row("total without the training set", total(a) - data(a), total(b) - data(b),
            total(f) - data(f));
  row("  training set (replicated)", &HbmBreakdown::training_set);
  value_row("total at the peak (chunk records)", total(a), total(b), total(f));
  value_row("peak_bytes_in_use (memory_stats)", one.result.hbm[0].peak_bytes_in_use,
            dp.result.hbm[0].peak_bytes_in_use, fsdp ? fsdp->hbm[0].peak_bytes_in_use : 0);
}

/// What the flags and the plan resolve to, before anything runs.
struct FsdpSetup {
  RuntimeOptions options;
  FsdpConfig config;
  bool fsdp_mode = true;          // false: a data-parallel plan (only DP and the reference run)
  std::optional<TrainPlan> plan;  // --plan
  bool plan_batch = false;        // the global batch is the plan's
  std::optional<PlanEstimate> estimate;
};

/// The trainings of one `train fsdp` run and the checks of their losses.
struct FsdpRuns {
  std::optional<FsdpResult> fsdp;  // the FSDP run (none for a data-parallel plan)
  MlpRun dp;                       // data parallel on the same cores
  std::optional<EstimateReport> report;
  MlpReference reference;
  const std::vector<double>& losses() const { return fsdp ? fsdp->losses : dp.result.losses; }
};

/// --plan: its mode, mesh and model. Sets the plan's cores in `setup.options`. False after a
/// usage error.
bool load_plan(const TrainFsdpCommand& cmd, const TrainRuntimeConfig& runtime_config,
               FsdpSetup& setup, std::optional<MlpPlanModel>& planned) {
  TrainPlan& plan = setup.plan.emplace(load_train_plan(cmd.plan_path));
  planned = mlp_plan_model(plan);  // first: a plan for another model is refused as such
  setup.fsdp_mode = mlp_plan_mode(plan) == MlpPlanMode::kFsdp;
  if (!plan_cores_usage_ok(plan, cmd.cores, runtime_config)) return false;
  // The plan's estimate prices the collectives one after the other (kPlanFsdpPrefetch): a
  // prefetching run is another schedule, which the report would judge against it as if it were
  // the one priced.
  if (!check_usage([&] {
        if (cmd.prefetch_option->count() > 0 && cmd.prefetch == "on") {
          throw InvalidArgumentError(
              "--prefetch on cannot be combined with --plan (expected --prefetch off or "
              "--prefetch left out: the plan's estimate prices FSDP's collectives unoverlapped; "
              "`vtpu train fsdp --cores " +
              std::to_string(plan.num_cores()) + "` without --plan runs the prefetching schedule)");
        }
      })) {
    return false;
  }
  setup.options.num_cores = static_cast<int>(plan.num_cores());
  return true;
}

/// The run's options and configuration from --config, the flags and the plan. nullopt after a
/// usage error.
std::optional<FsdpSetup> resolve(const TrainFsdpCommand& cmd) {
  const std::optional<TrainRuntimeConfig> runtime_config =
      load_runtime_config(cmd.config_path, false, "vtpu train fsdp");
  if (!runtime_config) return std::nullopt;
  FsdpSetup setup;
  setup.options = runtime_config->options;
  if (!cmd.hbm_bytes.empty()) setup.options.hbm_bytes_per_core = parse_bytes(cmd.hbm_bytes);
  if (cmd.pad_arrays) setup.options.pad_arrays = *cmd.pad_arrays;
  if (const std::optional<int> cores = runtime_config->cores(cmd.cores)) {
    setup.options.num_cores = *cores;
  }
  std::optional<MlpPlanModel> planned;  // the plan's model_graph, when it has one
  if (!cmd.plan_path.empty() && !load_plan(cmd, *runtime_config, setup, planned)) {
    return std::nullopt;
  }
  setup.options.validate();
  if (!check_usage([&] {
        check_cores_split(setup.options.num_cores,
                          setup.plan ? "the plan's mesh " + setup.plan->describe_mesh()
                                     : (cmd.cores ? "--cores " : "num_cores ") +
                                           std::to_string(setup.options.num_cores));
      })) {
    return std::nullopt;
  }
  const std::optional<TrainPlan>& plan = setup.plan;
  FsdpConfig& config = setup.config;
  config = cmd.config;
  // A plan runs as priced (kPlanFsdpPrefetch) unless --prefetch says otherwise.
  config.prefetch =
      plan && cmd.prefetch_option->count() == 0 ? kPlanFsdpPrefetch : cmd.prefetch == "on";
  // As train mlp --plan: the global batch defaults to the plan's, so that the run is the one
  // estimated.
  setup.plan_batch = plan && cmd.batch_option->count() == 0 && plan->estimated_batch() > 0;
  if (setup.plan_batch) config.mlp.global_batch = plan->estimated_batch();
  if (planned && !apply_plan_model(*plan, *planned, cmd.hidden_option->count() > 0,
                                   cmd.optimizer_option->count() > 0, config.mlp)) {
    return std::nullopt;
  }
  if (cmd.lr_option->count() == 0) {
    config.mlp.learning_rate = mlp_default_learning_rate(config.mlp.optimizer);
  }
  // The plan's estimate, compared with the run of its strategy (bench/estimate_report.h). A
  // --batch other than the estimate's is a usage error, checked before the header and before the
  // batch is split over the cores, whose error would come first for some batches.
  if (plan &&
      !check_usage([&] { setup.estimate = comparable_estimate(*plan, config.mlp.global_batch); })) {
    return std::nullopt;
  }
  config.validate(setup.options.num_cores);
  // The plan's layers and parameter shapes against the model this run trains.
  if (plan) check_plan_layout(*plan, mlp_model_graph(config.mlp.hidden), "vtpu train fsdp");
  return setup;
}

void print_header(const TrainFsdpCommand& cmd, const FsdpSetup& setup, const DigitsSplit& split) {
  const MlpConfig& mc = setup.config.mlp;
  const int n = setup.options.num_cores;
  std::printf(
      "vtpu train fsdp: %s on %s, %s, digits %s: %lld train / %lld "
      "test rows\n",
      setup.fsdp_mode ? "ZeRO-3 / FSDP" : "data parallel",
      (count_text(n, "virtual core") + processes_text(n)).c_str(),
      hbm_each_text(setup.options).c_str(), cmd.data_path.c_str(),
      static_cast<long long>(split.train.num_rows()),
      static_cast<long long>(split.test.num_rows()));
  if (setup.plan) {
    std::printf("plan %s: mesh", cmd.plan_path.c_str());
    for (size_t i = 0; i < setup.plan->mesh_axes.size(); ++i) {
      std::printf(" %s=%lld", setup.plan->mesh_axes[i].c_str(),
                  static_cast<long long>(setup.plan->mesh_shape[i]));
    }
    std::printf(", strategy %s\n", setup.plan->describe_strategy().c_str());
  }
  std::printf(
      "model 64->%lld->10, global batch %lld (%lld per core)%s, %s lr %g, %s, seed "
      "%llu, prefetch %s\n",
      static_cast<long long>(mc.hidden), static_cast<long long>(mc.global_batch),
      static_cast<long long>(mc.global_batch / n), setup.plan_batch ? " (the plan's)" : "",
      mc.optimizer == "adam" ? "Adam" : "SGD", static_cast<double>(mc.learning_rate),
      count_text(static_cast<long long>(mc.steps), "step").c_str(),
      static_cast<unsigned long long>(mc.seed),
      setup.fsdp_mode ? (setup.config.prefetch ? "on" : "off") : "n/a");
  std::fflush(stdout);
}

/// The data-parallel run on the same cores: the comparison of an FSDP run, or the run itself
/// for a data-parallel plan. An out-of-HBM error says which run it came from.
MlpRun run_data_parallel(const FsdpSetup& setup, const DigitsSplit& split, StepMeter& meter) {
  const MlpConfig& mc = setup.config.mlp;
  const int n = setup.options.num_cores;
  try {
    return run_mlp(setup.options, split, mc,
                   setup.estimate && !setup.fsdp_mode ? meter.wrap({}, 0, mc.steps) : StepLog(),
                   run_process_group());
  } catch (const ResourceExhaustedError& e) {
    if (!setup.fsdp_mode) throw ResourceExhaustedError("the data-parallel run: " + e.message());
    // The FSDP run fitted (it ran first); its comparison keeps every parameter, gradient and
    // optimizer state on every core, so it needs more HBM than the FSDP run.
    throw ResourceExhaustedError(
        "the data-parallel comparison run (train mlp on the same " + count_text(n, "core") +
        ", which train fsdp runs after the FSDP run, which fitted, to compare their losses; "
        "data parallel replicates the parameters, gradients and optimizer state on every "
        "core, so it needs more HBM per core than FSDP: raise --hbm-bytes): " +
        e.message());
  }
}

/// FSDP (when the mode is), data parallel, the comparison with the plan's estimate and the
/// single-core reference.
FsdpRuns run_trainings(const TrainFsdpCommand& cmd, const FsdpSetup& setup,
                       const DigitsSplit& split) {
  const MlpConfig& mc = setup.config.mlp;
  const int n = setup.options.num_cores;
  StepMeter meter;
  std::optional<FsdpResult> fsdp;
  // The run's pinning, for the estimate report: the FSDP runtime's, or what run_mlp's runtime of
  // the same options applies.
  ThreadPinning pinning = plan_thread_pinning(setup.options.pin_threads, n, usable_cpu_ids());
  if (setup.fsdp_mode) {
    const std::unique_ptr<Runtime> runtime_ptr = make_run_runtime(setup.options);
    Runtime& runtime = *runtime_ptr;
    pinning = runtime.thread_pinning();
    FsdpConfig run_config = setup.config;
    StepLog on_log = step_loss_printer(cmd.json);
    if (setup.estimate) {
      on_log = metered_step_log(meter, on_log, run_config.mlp.log_every, mc.steps);
    }
    try {
      fsdp = train_fsdp(runtime, split, run_config, on_log);
    } catch (const ResourceExhaustedError& e) {
      throw ResourceExhaustedError("the FSDP run: " + e.message());
    }
  }
  MlpRun dp = run_data_parallel(setup, split, meter);
  std::optional<EstimateReport> report;
  if (setup.estimate) {
    report = compare_run_with_estimate(
        *setup.estimate,
        measure_run(n, mc.steps, fsdp ? fsdp->median_step_ms : dp.result.median_step_ms, meter,
                    fsdp ? fsdp->hbm : dp.result.hbm, (fsdp ? fsdp->peak : dp.peak).training_set,
                    "training set (replicated on every core)"),
        pinning, *setup.plan);
  }
  // The reference: train mlp on 1 core, accumulating its gradient over N micro-batches (core c's
  // rows), so that it performs the N-core runs' f32 additions in their rank order; and, for
  // comparison only, 1 core with the whole batch in one GEMM (train/mlp_reference.h).
  MlpReference reference = run_mlp_reference(setup.options, split, mc, n);
  return {std::move(fsdp), std::move(dp), std::move(report), std::move(reference)};
}

void print_json(const TrainFsdpCommand& cmd, const FsdpSetup& setup, const FsdpRuns& runs) {
  const MlpConfig& mc = setup.config.mlp;
  const std::optional<FsdpResult>& fsdp = runs.fsdp;
  const MlpResult& dp = runs.dp.result;
  nlohmann::json j;
  j["mode"] = fsdp ? "fsdp" : "data_parallel";
  if (setup.plan) {
    j["plan"] = {{"path", setup.plan->path}, {"strategy", setup.plan->strategy_name}};
  }
  j["config"] = mlp_config_json(setup.options.num_cores, mc, cmd.data_path);
  j["config"]["prefetch"] = setup.config.prefetch;
  j["config"]["runtime"] = setup.options.to_json();
  j["data_parallel"] = {{"losses", dp.losses},
                        {"test_accuracy", dp.test_accuracy},
                        {"peak_hbm_core0", runs.dp.peak},
                        {"peak_bytes_in_use_core0", dp.hbm[0].peak_bytes_in_use}};
  // The top level holds the judged run's step time (FSDP's, or the data-parallel run's when it
  // is the run; data_parallel keeps its own beside FSDP) and the data-parallel run's replica
  // verdict, which fails the run in either mode.
  const double dp_step_seconds = 1e-3 * dp.median_step_ms;
  if (fsdp) {
    j["fsdp"] = *fsdp;
    hoist_run_facts(j, "fsdp");
    j["data_parallel"]["median_step_seconds"] = dp_step_seconds;
  } else {
    j["median_step_seconds"] = dp_step_seconds;
  }
  j["replicas_identical"] = dp.replicas_identical();
  j["replica_mismatch"] = replica_mismatch_json(dp.replica_mismatch);
  runs.reference.add_json(j, runs.losses());
  if (fsdp) {
    j["max_relative_loss_difference_vs_data_parallel"] =
        max_relative_difference(fsdp->losses, dp.losses);
  }
  print_json_result(std::move(j), runs.report);
}

/// The FSDP run's own lines: against data parallel, its accuracy, its FlatParameters and its
/// collectives per step.
void print_fsdp_text(const FsdpResult& fsdp, const MlpResult& dp, const MlpConfig& mc, int n) {
  // FSDP against data parallel on the same cores: both split the batch the same way, so what
  // remains is the order of the gradient sums (reduce-scatter vs all-reduce).
  std::printf(
      "        FSDP vs data parallel (train mlp) on the same %s: max relative "
      "difference %.3g\n",
      count_text(n, "core").c_str(), max_relative_difference(fsdp.losses, dp.losses));
  print_final_accuracy(fsdp.losses.back(), fsdp.test_accuracy, fsdp.train_accuracy);
  std::printf("FlatParameters (f32 elements):");
  for (const FlatParamShape& f : fsdp.flat_params) {
    std::printf("  %s numel %lld padded %lld shard %lld", f.name.c_str(),
                static_cast<long long>(f.numel), static_cast<long long>(f.padded_numel),
                static_cast<long long>(f.shard_numel));
  }
  std::printf("\n");
  // Totals over the run / steps: means, not the median the step time below is, as one slow call
  // under load would make a collective look longer than the whole step.
  const double steps = static_cast<double>(mc.steps);
  auto per_step = [&](const char* name, const CollectiveStats& s) {
    std::printf("  %-15s %4.0f calls, %9.0f input bytes, %8.4f mean ms per step (core 0)\n", name,
                static_cast<double>(s.num_collectives) / steps,
                static_cast<double>(s.bytes) / steps, 1e3 * s.seconds / steps);
  };
  std::printf("collectives per step:\n");
  per_step("all-gather", fsdp.all_gather[0]);
  per_step("reduce-scatter", fsdp.reduce_scatter[0]);
  per_step("all-reduce loss", fsdp.loss_all_reduce[0]);
  const CollectiveStats& ar = dp.all_reduce[0];
  std::printf("  %-15s %4.0f calls, %9.0f input bytes, %8.4f mean ms per step (core 0, DP)\n",
              "DP all-reduce", static_cast<double>(ar.num_collectives) / steps,
              static_cast<double>(ar.bytes) / steps, 1e3 * ar.seconds / steps);
}

void print_text(const FsdpSetup& setup, const FsdpRuns& runs) {
  const MlpConfig& mc = setup.config.mlp;
  const int n = setup.options.num_cores;
  const std::optional<FsdpResult>& fsdp = runs.fsdp;
  const MlpResult& dp = runs.dp.result;
  std::printf("%s",
              runs.reference.to_string(fsdp ? "FSDP" : "data parallel", n, runs.losses()).c_str());
  if (fsdp) {
    print_fsdp_text(*fsdp, dp, mc, n);
  } else {
    print_final_accuracy(dp.losses.back(), dp.test_accuracy, dp.train_accuracy);
  }
  std::printf("median step time: ");
  if (fsdp) std::printf("FSDP %.3f ms, ", fsdp->median_step_ms);
  std::printf("DP %.3f ms (%s); train mlp on 1 core %.3f ms (%s)\n", dp.median_step_ms,
              count_text(n, "core").c_str(), runs.reference.checked.result.median_step_ms,
              count_text(n, "micro-batch", "micro-batches").c_str());
  std::printf("%sreplicas identical after training: %s\n", fsdp ? "data-parallel run: " : "",
              dp.replica_mismatch ? "NO" : "yes");
  if (fsdp) {
    std::printf("padding of the parameter%s shards after training: %s\n",
                mc.optimizer == "adam" ? ", m and v" : "",
                fsdp->padding_is_zero ? "all 0" : "NOT 0");
  }
  print_breakdown(runs.reference.checked, runs.dp, fsdp ? &*fsdp : nullptr, mc.optimizer == "adam");
  if (runs.report) std::printf("%s", runs.report->to_string().c_str());
}

int run(const TrainFsdpCommand& given) {
  // --cores-per-process is --cores K x processes from here on.
  TrainFsdpCommand cmd = given;
  if (!check_usage([&] { cmd.cores = global_cores(given.cores, given.cores_per_process); })) {
    return 2;
  }
  const std::optional<FsdpSetup> setup = resolve(cmd);
  if (!setup) return 2;
  const DigitsSplit split = split_digits(load_digits_csv(cmd.data_path));
  if (!cmd.json) print_header(cmd, *setup, split);
  const FsdpRuns runs = run_trainings(cmd, *setup, split);
  if (cmd.json) {
    print_json(cmd, *setup, runs);
  } else {
    print_text(*setup, runs);
  }
  const bool ok = runs.reference.matches(runs.losses());
  const bool padding_ok = !runs.fsdp || runs.fsdp->padding_is_zero;
  // The data-parallel run keeps a replica of the parameters on every core; replicas that drifted
  // apart fail the run, as a loss mismatch does. FSDP shards them and holds none.
  const bool replicas_ok =
      report_replicas(runs.dp.result.replica_mismatch, "the data-parallel run's data replicas");
  return ok && padding_ok && replicas_ok ? 0 : 1;
}

}  // namespace

std::shared_ptr<TrainFsdpCommand> add_train_fsdp_command(CLI::App& train) {
  auto cmd = std::make_shared<TrainFsdpCommand>();
  MlpConfig& m = cmd->config.mlp;
  cmd->app = train.add_subcommand(
      "fsdp",
      "The digits MLP with ZeRO-3 / FSDP: parameters, gradients and optimizer state sharded over "
      "the cores, all-gather before use, reduce-scatter of gradients; checked against 1 core");
  CLI::App* app = cmd->app;
  app->add_option("--cores", cmd->cores,
                  "Virtual cores over all processes (default 8, or the --plan mesh's, or "
                  "num_cores of --config; under mpirun -np H a multiple of H, split evenly)")
      ->check(CLI::Range(1, 1024));
  add_cores_per_process_option(*app, cmd->cores_per_process);
  const MlpTrainingOptions training = add_mlp_training_options(
      *app, m,
      "Global batch (rows per step over all cores; a multiple of the cores; default 64, or the "
      "--plan estimate's batch)",
      /*show_batch_default=*/false);
  cmd->batch_option = training.batch;
  cmd->hidden_option = training.hidden;
  cmd->lr_option = training.lr;
  cmd->optimizer_option =
      app->add_option(
             "--optimizer", m.optimizer,
             "sgd (plain SGD, no state) or adam (Adam with bias correction, betas 0.9/0.999, "
             "eps 1e-8; m and v sharded like the parameters)")
          ->capture_default_str()
          ->check(CLI::IsMember({"sgd", "adam"}));
  app->add_option("--seed", m.seed, "Seed for parameter init and batch order, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  app->add_option("--plan", cmd->plan_path,
                  "A `vtpu plan` file: strategy.fsdp runs FSDP over its mesh, strategy.data alone "
                  "runs data parallel")
      ->check(nonempty_path_validator());
  cmd->prefetch_option =
      app->add_option("--prefetch", cmd->prefetch,
                      "on: start all-gathers early and overlap reduce-scatters (async "
                      "collectives); off: every collective synchronous (default on; off with "
                      "--plan, whose estimate prices the collectives unoverlapped, and on is "
                      "then a usage error)")
          ->check(CLI::IsMember({"on", "off"}));
  app->add_option("--data", cmd->data_path, "digits.csv.gz from Debian python3-sklearn")
      ->capture_default_str()
      ->check(nonempty_path_validator());
  app->add_option("--hbm-bytes", cmd->hbm_bytes,
                  "HBM per core, e.g. 16G, 512M (default 16G, or hbm_bytes_per_core of --config)")
      ->check(hbm_bytes_validator());
  add_runtime_config_option(*app, cmd->config_path,
                            "num_cores is the default of --cores and must match a --plan mesh");
  add_pad_arrays_option(*app, cmd->pad_arrays);
  app->add_option("--log-every", m.log_every, "Print the FSDP loss every K steps (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--json", cmd->json, "Print the results as JSON (with the per-step losses)");
  return cmd;
}

bool run_train_fsdp_if_selected(const TrainFsdpCommand& command, int* exit_code) {
  if (!command.app->parsed()) return false;
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
