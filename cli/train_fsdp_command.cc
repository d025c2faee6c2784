#include "vtpu/cli/train_fsdp_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "vtpu/common/error.h"
#include "vtpu/common/host.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/bench/estimate_report.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_reference.h"
#include "vtpu/train/mlp_trainer.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/train/train_runtime_config.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {

struct TrainFsdpCommand {
  CLI::App* app = nullptr;
  std::optional<int> cores;
  FsdpConfig config;
  std::string prefetch = "on";
  std::string plan_path;
  std::string data_path = default_digits_path();
  std::string hbm_bytes;
  std::string config_path;  // --config: runtime options (train/train_runtime_config.h)
  bool json = false;
  CLI::Option* lr_option = nullptr;         // --lr; when absent the optimizer's default applies
  CLI::Option* batch_option = nullptr;      // --batch; when absent a plan's estimate.batch applies
  CLI::Option* prefetch_option = nullptr;   // --prefetch; absent with --plan: kPlanFsdpPrefetch
  CLI::Option* hidden_option = nullptr;     // --hidden; with --plan, default the plan's
  CLI::Option* optimizer_option = nullptr;  // --optimizer; with --plan, default the plan's
};

namespace {

/// "1 core / FSDP" as "%.2fx", or "-" when either side is 0 bytes (a buffer only one of the two
/// runs has, such as FSDP's gathered temps: no ratio to print; new-user pass nu13, NU67).
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

int run(const TrainFsdpCommand& cmd) {
  // --config, under the flags (train/train_runtime_config.h).
  const TrainRuntimeConfig runtime_config = TrainRuntimeConfig::load(cmd.config_path);
  if (!check_usage([&] { runtime_config.check_memory_events(false, "vtpu train fsdp"); })) return 2;
  RuntimeOptions options = runtime_config.options;
  if (!cmd.hbm_bytes.empty()) options.hbm_bytes_per_core = parse_bytes(cmd.hbm_bytes);
  if (const std::optional<int> cores = runtime_config.cores(cmd.cores)) options.num_cores = *cores;
  bool fsdp_mode = true;
  std::optional<TrainPlan> plan;
  std::optional<MlpPlanModel> planned;  // the plan's model_graph, when it has one
  if (!cmd.plan_path.empty()) {
    plan = load_train_plan(cmd.plan_path);
    planned = mlp_plan_model(*plan);  // first: a plan for another model is refused as such
    fsdp_mode = mlp_plan_mode(*plan) == MlpPlanMode::kFsdp;
    if (!check_usage([&] {
          check_plan_cores(*plan, cmd.cores);
          runtime_config.check_plan_mesh_cores(*plan, cmd.cores);
        }))
      return 2;
    // The plan's estimate prices the collectives one after the other (kPlanFsdpPrefetch): a
    // prefetching run is another schedule, which the report would judge against it as if it
    // were the one priced. A usage error, exit 2, as `train mlp --plan --kernels pallas`
    // (new-user pass nu11, NU40: "4.46x (outside 25%)" for a run that was not the plan's).
    if (!check_usage([&] {
          if (cmd.prefetch_option->count() > 0 && cmd.prefetch == "on") {
            throw InvalidArgumentError(
                "--prefetch on cannot be combined with --plan (expected --prefetch off or "
                "--prefetch left out: the plan's estimate prices FSDP's collectives unoverlapped; "
                "`vtpu train fsdp --cores " +
                std::to_string(plan->num_cores()) +
                "` without --plan runs the prefetching schedule)");
          }
        })) {
      return 2;
    }
    options.num_cores = static_cast<int>(plan->num_cores());
  }
  options.validate();
  FsdpConfig config = cmd.config;
  // A plan runs as priced (kPlanFsdpPrefetch) unless --prefetch says otherwise.
  config.prefetch =
      plan && cmd.prefetch_option->count() == 0 ? kPlanFsdpPrefetch : cmd.prefetch == "on";
  // As train mlp --plan: the global batch defaults to the plan's, so that the run is the one
  // estimated (a plan emitted with `vtpu plan --batch 32` used to fail "estimates a global batch
  // of 32 but the run uses 64" unless --batch 32 was repeated).
  const bool plan_batch = plan && cmd.batch_option->count() == 0 && plan->estimated_batch() > 0;
  if (plan_batch) config.mlp.global_batch = plan->estimated_batch();
  // The model the plan was made for (its model_graph), unless a flag says the same. A flag that
  // contradicts the plan is a usage error, exit 2, as --cores is (new-user pass nu10, NU13).
  if (planned && !check_usage([&] {
        MlpConfig& m = config.mlp;
        m.hidden = plan_setting(
            *plan, "hidden", "fc1.out", "--hidden", planned->hidden,
            cmd.hidden_option->count() ? std::optional<int64_t>(m.hidden) : std::nullopt);
        m.optimizer = plan_setting(
            *plan, "optimizer", "model_graph.optimizer", "--optimizer", planned->optimizer,
            cmd.optimizer_option->count() ? std::optional<std::string>(m.optimizer) : std::nullopt);
      })) {
    return 2;
  }
  if (cmd.lr_option->count() == 0) {
    config.mlp.learning_rate = mlp_default_learning_rate(config.mlp.optimizer);
  }
  // The plan's estimate, compared with the run of its strategy (bench/estimate_report.h);
  // a batch that differs from the estimate's fails before the header (adv10 A5).
  // A --batch other than the estimate's is a usage error (exit 2), checked before the batch is
  // split over the cores (adv12 ADV9: the split's error, exit 1, came first for some batches).
  std::optional<PlanEstimate> estimate;
  if (plan &&
      !check_usage([&] { estimate = comparable_estimate(*plan, config.mlp.global_batch); })) {
    return 2;
  }
  config.validate(options.num_cores);
  // The plan's layers and parameter shapes against the model this run trains (adv12 ADV3).
  if (plan) check_plan_layout(*plan, mlp_model_graph(config.mlp.hidden), "vtpu train fsdp");
  const int n = options.num_cores;

  const MlpConfig& mc = config.mlp;
  const DigitsSplit split = split_digits(load_digits_csv(cmd.data_path));
  if (!cmd.json) {
    std::printf(
        "vtpu train fsdp: %s on %s, %s HBM each, digits %s: %lld train / %lld "
        "test rows\n",
        fsdp_mode ? "ZeRO-3 / FSDP" : "data parallel", count_text(n, "virtual core").c_str(),
        format_bytes(options.hbm_bytes_per_core).c_str(), cmd.data_path.c_str(),
        static_cast<long long>(split.train.num_rows()),
        static_cast<long long>(split.test.num_rows()));
    if (plan) {
      std::printf("plan %s: mesh", cmd.plan_path.c_str());
      for (size_t i = 0; i < plan->mesh_axes.size(); ++i) {
        std::printf(" %s=%lld", plan->mesh_axes[i].c_str(),
                    static_cast<long long>(plan->mesh_shape[i]));
      }
      std::printf(", strategy %s\n", plan->describe_strategy().c_str());
    }
    std::printf(
        "model 64->%lld->10, global batch %lld (%lld per core)%s, %s lr %g, %s, seed "
        "%llu, prefetch %s\n",
        static_cast<long long>(mc.hidden), static_cast<long long>(mc.global_batch),
        static_cast<long long>(mc.global_batch / n), plan_batch ? " (the plan's)" : "",
        mc.optimizer == "adam" ? "Adam" : "SGD", static_cast<double>(mc.learning_rate),
        count_text(static_cast<long long>(mc.steps), "step").c_str(),
        static_cast<unsigned long long>(mc.seed),
        fsdp_mode ? (config.prefetch ? "on" : "off") : "n/a");
    std::fflush(stdout);
  }
  auto log = [&](int64_t step, double loss) {
    if (!cmd.json) std::printf("step %6lld  loss %.6f\n", static_cast<long long>(step), loss);
  };

  StepMeter meter;
  std::optional<FsdpResult> fsdp;
  // The run's pinning, for the estimate report: the FSDP runtime's, or what run_mlp's runtime of
  // the same options applies.
  ThreadPinning pinning = plan_thread_pinning(options.pin_threads, n, usable_cpu_ids());
  if (fsdp_mode) {
    Runtime runtime(options);
    pinning = runtime.thread_pinning();
    FsdpConfig run_config = config;
    std::function<void(int64_t, double)> on_log = log;
    if (estimate) {  // a callback every step, to read the process CPU time
      on_log = meter.wrap(log, mc.log_every, mc.steps);
      run_config.mlp.log_every = 1;
    }
    // New-user pass nu15, NU95: an out-of-HBM error did not say which of the runs it came from.
    try {
      fsdp = train_fsdp(runtime, split, run_config, on_log);
    } catch (const ResourceExhaustedError& e) {
      throw ResourceExhaustedError("the FSDP run: " + e.message());
    }
  }
  MlpConfig dp_config = mc;
  const auto run_data_parallel = [&] {
    try {
      return run_mlp(options, split, dp_config,
                     estimate && !fsdp_mode ? meter.wrap({}, 0, mc.steps)
                                            : std::function<void(int64_t, double)>());
    } catch (const ResourceExhaustedError& e) {
      if (!fsdp_mode) throw ResourceExhaustedError("the data-parallel run: " + e.message());
      // The FSDP run fitted (it ran first); its comparison keeps every parameter, gradient and
      // optimizer state on every core, so it needs more HBM than the FSDP run.
      throw ResourceExhaustedError(
          "the data-parallel comparison run (train mlp on the same " + count_text(n, "core") +
          ", which train fsdp runs after the FSDP run, which fitted, to compare their losses; "
          "data parallel replicates the parameters, gradients and optimizer state on every "
          "core, so it needs more HBM per core than FSDP: raise --hbm-bytes): " +
          e.message());
    }
  };
  MlpRun dp = run_data_parallel();
  std::optional<EstimateReport> report;
  if (estimate) {
    MeasuredRun m =
        measure_run(n, mc.steps, fsdp ? fsdp->median_step_ms : dp.result.median_step_ms, meter,
                    fsdp ? fsdp->hbm : dp.result.hbm, (fsdp ? fsdp->peak : dp.peak).training_set,
                    "training set (replicated on every core)");
    m.thread_pinning = pinning;
    report = compare_estimate(*estimate, m);
    add_collective_probe(*report, *plan);  // right after the run: the host mode it met
  }
  // The reference: train mlp on 1 core, accumulating its gradient over N micro-batches (core c's
  // rows), so that it performs the N-core runs' f32 additions in their rank order; and, for
  // comparison only, 1 core with the whole batch in one GEMM (train/mlp_reference.h).
  const MlpReference reference = run_mlp_reference(options, split, mc, n);
  const std::vector<double>& losses = fsdp ? fsdp->losses : dp.result.losses;
  const bool ok = reference.matches(losses);
  const bool padding_ok = !fsdp || fsdp->padding_is_zero;
  // The data-parallel run keeps a replica of the parameters on every core; replicas that drifted
  // apart fail the run, as a loss mismatch does (adversarial pass adv12, ADV2). FSDP shards them
  // and holds none.
  auto exit_code = [&] {
    const bool replicas_ok =
        report_replicas(dp.result.replica_mismatch, "the data-parallel run's data replicas");
    return ok && padding_ok && replicas_ok ? 0 : 1;
  };
  const char* what = fsdp ? "FSDP" : "data parallel";
  if (cmd.json) {
    nlohmann::json j;
    j["mode"] = fsdp ? "fsdp" : "data_parallel";
    if (plan) j["plan"] = {{"path", plan->path}, {"strategy", plan->strategy_name}};
    j["config"] = {{"cores", n},
                   {"steps", mc.steps},
                   {"global_batch", mc.global_batch},
                   {"hidden", mc.hidden},
                   {"learning_rate", mc.learning_rate},
                   {"optimizer", mc.optimizer},
                   {"seed", mc.seed},
                   {"prefetch", config.prefetch},
                   {"data", cmd.data_path},
                   {"runtime", options.to_json()}};
    j["data_parallel"] = {{"losses", dp.result.losses},
                          {"test_accuracy", dp.result.test_accuracy},
                          {"peak_hbm_core0", dp.peak},
                          {"peak_bytes_in_use_core0", dp.result.hbm[0].peak_bytes_in_use}};
    // The top level holds the judged run's step time (FSDP's, or the data-parallel run's when it
    // is the run; data_parallel keeps its own beside FSDP) and the data-parallel run's replica
    // verdict, which fails the run in either mode (README, "JSON fields per trainer").
    const double dp_step_seconds = 1e-3 * dp.result.median_step_ms;
    if (fsdp) {
      j["fsdp"] = *fsdp;
      hoist_run_facts(j, "fsdp");
      j["data_parallel"]["median_step_seconds"] = dp_step_seconds;
    } else {
      j["median_step_seconds"] = dp_step_seconds;
    }
    j["replicas_identical"] = dp.result.replicas_identical();
    j["replica_mismatch"] = replica_mismatch_json(dp.result.replica_mismatch);
    reference.add_json(j, losses);
    if (fsdp) {
      j["max_relative_loss_difference_vs_data_parallel"] =
          max_relative_difference(fsdp->losses, dp.result.losses);
    }
    if (report) j["estimate_vs_measured"] = report->to_json();
    std::cout << j.dump(2) << std::endl;
    return exit_code();
  }
  std::printf("%s", reference.to_string(what, n, losses).c_str());
  if (fsdp) {
    // FSDP against data parallel on the same cores: both split the batch the same way, so what
    // remains is the order of the gradient sums (reduce-scatter vs all-reduce).
    std::printf(
        "        FSDP vs data parallel (train mlp) on the same %s: max relative "
        "difference %.3g\n",
        count_text(n, "core").c_str(), max_relative_difference(fsdp->losses, dp.result.losses));
    std::printf("final loss %.4f   test accuracy %.4f   train accuracy %.4f\n", fsdp->losses.back(),
                fsdp->test_accuracy, fsdp->train_accuracy);
    std::printf("FlatParameters (f32 elements):");
    for (const FlatParamShape& f : fsdp->flat_params) {
      std::printf("  %s numel %lld padded %lld shard %lld", f.name.c_str(),
                  static_cast<long long>(f.numel), static_cast<long long>(f.padded_numel),
                  static_cast<long long>(f.shard_numel));
    }
    std::printf("\n");
    // Totals over the run / steps: means, not the median the step time below is (new-user pass
    // nu12, NU56: one slow call under load made a collective look longer than the whole step).
    const double steps = static_cast<double>(mc.steps);
    auto per_step = [&](const char* name, const CollectiveStats& s) {
      std::printf("  %-15s %4.0f calls, %9.0f input bytes, %8.4f mean ms per step (core 0)\n", name,
                  static_cast<double>(s.num_collectives) / steps,
                  static_cast<double>(s.bytes) / steps, 1e3 * s.seconds / steps);
    };
    std::printf("collectives per step:\n");
    per_step("all-gather", fsdp->all_gather[0]);
    per_step("reduce-scatter", fsdp->reduce_scatter[0]);
    per_step("all-reduce loss", fsdp->loss_all_reduce[0]);
    const CollectiveStats& ar = dp.result.all_reduce[0];
    std::printf("  %-15s %4.0f calls, %9.0f input bytes, %8.4f mean ms per step (core 0, DP)\n",
                "DP all-reduce", static_cast<double>(ar.num_collectives) / steps,
                static_cast<double>(ar.bytes) / steps, 1e3 * ar.seconds / steps);
  } else {
    std::printf("final loss %.4f   test accuracy %.4f   train accuracy %.4f\n",
                dp.result.losses.back(), dp.result.test_accuracy, dp.result.train_accuracy);
  }
  std::printf("median step time: ");
  if (fsdp) std::printf("FSDP %.3f ms, ", fsdp->median_step_ms);
  std::printf("DP %.3f ms (%s); train mlp on 1 core %.3f ms (%s)\n", dp.result.median_step_ms,
              count_text(n, "core").c_str(), reference.checked.result.median_step_ms,
              count_text(n, "micro-batch", "micro-batches").c_str());
  std::printf("%sreplicas identical after training: %s\n", fsdp ? "data-parallel run: " : "",
              dp.result.replica_mismatch ? "NO" : "yes");
  if (fsdp) {
    std::printf("padding of the parameter%s shards after training: %s\n",
                mc.optimizer == "adam" ? ", m and v" : "",
                fsdp->padding_is_zero ? "all 0" : "NOT 0");
  }
  print_breakdown(reference.checked, dp, fsdp ? &*fsdp : nullptr, mc.optimizer == "adam");
  if (report) std::printf("%s", report->to_string().c_str());
  return exit_code();
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
                  "Virtual cores (default 8, or the --plan mesh's, or num_cores of --config)")
      ->check(CLI::Range(1, 1024));
  app->add_option("--steps", m.steps, "Optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  cmd->batch_option =
      app->add_option("--batch", m.global_batch,
                      "Global batch (rows per step over all cores; a multiple of the cores; "
                      "default 64, or the --plan estimate's batch)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->hidden_option =
      app->add_option("--hidden", m.hidden, "Hidden units (with --plan, default the plan's)")
          ->capture_default_str()
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->lr_option =
      app->add_option(
             "--lr", m.learning_rate,
             "Learning rate (> 0; default 0.2 with sgd, 1e-3 with adam as torch.optim.Adam)")
          ->check(learning_rate_validator());
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
                  "runs data parallel");
  cmd->prefetch_option =
      app->add_option("--prefetch", cmd->prefetch,
                      "on: start all-gathers early and overlap reduce-scatters (async "
                      "collectives); off: every collective synchronous (default on; off with "
                      "--plan, whose estimate prices the collectives unoverlapped, and on is "
                      "then a usage error)")
          ->check(CLI::IsMember({"on", "off"}));
  app->add_option("--data", cmd->data_path, "digits.csv.gz from Debian python3-sklearn")
      ->capture_default_str();
  app->add_option("--hbm-bytes", cmd->hbm_bytes,
                  "HBM per core, e.g. 16G, 512M (default 16G, or hbm_bytes_per_core of --config)")
      ->check(size_validator());
  add_runtime_config_option(*app, cmd->config_path,
                            "num_cores is the default of --cores and must match a --plan mesh");
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
