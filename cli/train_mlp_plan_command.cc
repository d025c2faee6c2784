#include "vtpu/cli/train_mlp_plan_command.h"

#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "vtpu/bench/estimate_report.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/run_processes.h"
#include "vtpu/cli/trainer_steps.h"
#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_reference.h"
#include "vtpu/train/mlp_tp_trainer.h"
#include "vtpu/train/replica_check.h"

namespace vtpu {

namespace {

const char* mode_name(MlpPlanMode m) {
  switch (m) {
    case MlpPlanMode::kFsdp:
      return "fsdp";
    case MlpPlanMode::kDataParallel:
      return "data_parallel";
    case MlpPlanMode::kTensorParallel:
      return "tensor_parallel";
  }
  return "?";
}

/// What the three trainers report in common.
struct PlanRun {
  std::vector<double> losses;
  double median_step_ms = 0;
  double test_accuracy = 0, train_accuracy = 0;
  std::vector<MemoryStats> hbm;
  nlohmann::json json;
  uint64_t training_set_bytes = 0;  // core 0's replica of the training set (chunk bytes)
  /// Data and tensor parallel runs keep data replicas; where they differ (train/replica_check.h).
  /// FSDP shards the parameters over every core and holds none.
  std::optional<ReplicaMismatch> replica_mismatch;
  std::optional<MlpTensorParallelResult> tp;  // the tensor-parallel run's own figures
  ThreadPinning pinning;                      // the run's, for the estimate report
};

/// What the plan and the flags resolve to, before anything runs.
struct MlpPlanSetup {
  TrainPlan plan;
  MlpPlanMode mode = MlpPlanMode::kDataParallel;
  RuntimeOptions options;
  MlpConfig mlp;
  std::optional<PlanEstimate> estimate;
  std::optional<DataTensorLayout> layout;  // the cores per role of a tensor-parallel plan
};

/// --micro-batches against the rows of a data shard: a usage error, as the other flags that
/// disagree with the plan. False after printing it.
bool micro_batches_usage_ok(const MlpPlanSetup& setup) {
  return check_usage([&] {
    const MlpConfig& mlp = setup.mlp;
    if (setup.mode == MlpPlanMode::kFsdp && mlp.micro_batches != 1) {
      throw InvalidArgumentError(
          "--micro-batches " + std::to_string(mlp.micro_batches) +
          " cannot be combined with an fsdp plan (expected 1: train fsdp does not accumulate "
          "micro-batches)");
    }
    const std::optional<DataTensorLayout>& layout = setup.layout;
    const int64_t shards = layout ? layout->data : setup.options.num_cores;
    const std::vector<std::string>& axes = layout ? layout->data_axes : setup.plan.data;
    const std::string over = axes.empty()       ? "one data shard: the plan has no data axis"
                             : axes.size() == 1 ? "the " + std::to_string(shards) + "-way data axis"
                                                : "the " + std::to_string(shards) +
                                                      "-way data axes (" + join(axes, ", ") + ")";
    check_micro_batches(mlp.micro_batches, mlp.global_batch, shards, "data shard", over);
  });
}

/// The plan, its mode and estimate, and the run's configuration, checked. nullopt after a usage
/// error.
std::optional<MlpPlanSetup> resolve(const TrainMlpPlanArgs& args) {
  MlpPlanSetup setup{load_train_plan(args.plan_path),
                     MlpPlanMode::kDataParallel,
                     {},
                     {},
                     std::nullopt,
                     std::nullopt};
  const TrainPlan& plan = setup.plan;
  // First: a plan for another model is refused as such, before its strategy is looked at.
  (void)mlp_plan_model(plan);
  setup.mode = mlp_plan_mode(plan, /*allow_tensor=*/true);
  if (!plan_cores_usage_ok(plan, args.cores, args.config)) return std::nullopt;
  setup.options = args.config.options;
  setup.options.num_cores = static_cast<int>(plan.num_cores());
  setup.options.validate();
  if (!check_usage([&] {
        check_cores_split(plan.num_cores(), "the plan's mesh " + plan.describe_mesh() + " (" +
                                                count_text(plan.num_cores(), "core") + ")");
      })) {
    return std::nullopt;
  }
  MlpConfig& mlp = setup.mlp;
  mlp = args.mlp;
  // The model and the estimate (bench/estimate_report.h) the plan was made for, checked before
  // anything runs, as --estimate-from checks them.
  if (!apply_mlp_plan(plan, {args.batch_given, args.hidden_given, args.optimizer_given}, mlp,
                      setup.estimate)) {
    return std::nullopt;
  }
  if (!args.lr_given) mlp.learning_rate = mlp_default_learning_rate(mlp.optimizer);
  if (setup.mode == MlpPlanMode::kTensorParallel) {
    setup.layout = plan_data_tensor_layout(plan, "vtpu train mlp");
  }
  if (!micro_batches_usage_ok(setup)) return std::nullopt;
  if (setup.layout) {
    mlp.validate(static_cast<int>(setup.layout->data));
    // A tensor group that does not divide hidden (64 over 3) is refused before the header
    // prints a fractional "21 hidden units per core".
    (void)mlp_tp_shard_parameters(mlp.hidden, setup.layout->tensor);
  } else {
    mlp.validate(setup.options.num_cores);
  }
  return setup;
}

void print_header(const TrainMlpPlanArgs& args, const MlpPlanSetup& setup,
                  const DigitsSplit& split) {
  const TrainPlan& plan = setup.plan;
  const MlpConfig& mlp = setup.mlp;
  const int n = setup.options.num_cores;
  std::printf("vtpu train mlp --plan %s: strategy %s on mesh %s: %s, %s\n", plan.path.c_str(),
              plan.describe_strategy().c_str(), plan.describe_mesh().c_str(),
              (count_text(n, "virtual core") + processes_text(n)).c_str(),
              hbm_each_text(setup.options).c_str());
  if (setup.layout) {
    std::printf(
        "Megatron tensor parallel: %s; W1 column-parallel, W2 row-parallel, %lld hidden units "
        "per core, one all-reduce of the logits per step\n",
        setup.layout->describe().c_str(),
        static_cast<long long>(mlp.hidden / setup.layout->tensor));
  } else {
    std::printf("%s over %s\n",
                setup.mode == MlpPlanMode::kFsdp ? "ZeRO-3 / FSDP (train fsdp)" : "data parallel",
                n == 1 ? "1 core" : ("all " + std::to_string(n) + " cores").c_str());
  }
  std::printf(
      "model 64->%lld->10%s, global batch %lld%s, %s lr %g, %s, seed %llu; digits %s: "
      "%lld train / %lld test rows\n",
      static_cast<long long>(mlp.hidden), plan.model_graph ? " (the plan's)" : "",
      static_cast<long long>(mlp.global_batch),
      !args.batch_given && plan.estimated_batch() > 0 ? " (the plan's)" : "",
      mlp.optimizer == "adam" ? "Adam" : "SGD", static_cast<double>(mlp.learning_rate),
      count_text(static_cast<long long>(mlp.steps), "step").c_str(),
      static_cast<unsigned long long>(mlp.seed), args.data_path.c_str(),
      static_cast<long long>(split.train.num_rows()),
      static_cast<long long>(split.test.num_rows()));
  std::fflush(stdout);
}

/// Runs the plan's strategy with its trainer. `peak` is what run_config.at_peak records.
PlanRun train_strategy(const MlpPlanSetup& setup, const DigitsSplit& split,
                       const MlpConfig& run_config, const StepLog& on_log,
                       const HbmBreakdown& peak) {
  const std::unique_ptr<Runtime> runtime_ptr = make_run_runtime(setup.options);
  Runtime& runtime = *runtime_ptr;
  const ThreadPinning pinning = runtime.thread_pinning();
  PlanRun run;
  if (setup.mode == MlpPlanMode::kTensorParallel) {
    MlpTensorParallelResult tp =
        train_mlp_tensor_parallel(runtime, split, run_config, *setup.layout, on_log);
    const MlpResult& r = tp.run;
    run = {r.losses, r.median_step_ms,  r.test_accuracy,    r.train_accuracy, r.hbm,
           tp,       peak.training_set, r.replica_mismatch, std::nullopt,     {}};
    run.tp = std::move(tp);
  } else if (setup.mode == MlpPlanMode::kFsdp) {
    FsdpConfig fc;
    fc.mlp = run_config;
    fc.mlp.at_peak = {};              // train_fsdp records its own peak
    fc.prefetch = kPlanFsdpPrefetch;  // as priced: collectives not overlapped
    const FsdpResult r = train_fsdp(runtime, split, fc, on_log);
    run = {r.losses, r.median_step_ms,    r.test_accuracy, r.train_accuracy, r.hbm,
           r,        r.peak.training_set, std::nullopt,    std::nullopt,     {}};
  } else {
    const MlpResult r = train_mlp(runtime, split, run_config, on_log);
    run = {r.losses, r.median_step_ms,  r.test_accuracy,    r.train_accuracy, r.hbm,
           r,        peak.training_set, r.replica_mismatch, std::nullopt,     {}};
  }
  run.pinning = pinning;
  return run;
}

void print_json(const TrainMlpPlanArgs& args, const MlpPlanSetup& setup, const PlanRun& run,
                const MlpReference& reference, const std::optional<EstimateReport>& report) {
  const TrainPlan& plan = setup.plan;
  const MlpConfig& mlp = setup.mlp;
  nlohmann::json j;
  j["plan"] = {{"path", plan.path},
               {"strategy", plan.strategy_name},
               {"mesh", {{"axes", plan.mesh_axes}, {"shape", plan.mesh_shape}}}};
  j["mode"] = mode_name(setup.mode);
  j["config"] = mlp_config_json(setup.options.num_cores, mlp, args.data_path);
  if (setup.layout) j["config"]["data_x_tensor"] = {setup.layout->data, setup.layout->tensor};
  j["run"] = run.json;
  // The run's step time and replica verdict at the top level, as every trainer has them (the
  // data and tensor parallel runs' objects hold the verdict; FSDP's has none).
  hoist_run_facts(j, "run");
  reference.add_json(j, run.losses);
  print_json_result(std::move(j), report);
}

void print_text(const MlpPlanSetup& setup, const PlanRun& run, const MlpReference& reference,
                const std::optional<EstimateReport>& report) {
  const int n = setup.options.num_cores;
  std::printf("%s", reference.to_string("the plan", n, run.losses).c_str());
  print_final_accuracy(run.losses.back(), run.test_accuracy, run.train_accuracy);
  std::printf("median step time %.3f ms on %s; train mlp on 1 core %.3f ms\n", run.median_step_ms,
              count_text(n, "core").c_str(), reference.checked.result.median_step_ms);
  if (run.tp) {
    // Worded as in train transformer: calls and bytes per group, none for a group of 1 core.
    const DataTensorLayout& layout = *setup.layout;
    const int64_t k = setup.mlp.micro_batches;
    std::printf(
        "all-reduce on core 0: tensor group %s; data-parallel group %s; shard %lld of %lld "
        "parameters per core\n",
        describe_group_all_reduce(
            run.tp->tensor_all_reduce[0], layout.tensor,
            std::to_string(k) + " per step: the logits" + (k > 1 ? " of each micro-batch" : ""))
            .c_str(),
        describe_group_all_reduce(run.tp->run.all_reduce[0], layout.data,
                                  "1 per step: the gradient bucket")
            .c_str(),
        static_cast<long long>(run.tp->shard_parameters),
        static_cast<long long>(run.tp->run.num_parameters));
  }
  if (setup.mode != MlpPlanMode::kFsdp) {
    std::printf("replicas identical after training: %s\n", run.replica_mismatch ? "NO" : "yes");
  }
  print_peak_hbm_per_core(run.hbm);
  if (report) std::printf("%s", report->to_string().c_str());
}

}  // namespace

int run_train_mlp_plan(const TrainMlpPlanArgs& args) {
  const std::optional<MlpPlanSetup> resolved = resolve(args);
  if (!resolved) return 2;
  const MlpPlanSetup& setup = *resolved;
  const MlpConfig& mlp = setup.mlp;
  const int n = setup.options.num_cores;
  const DigitsSplit split = split_digits(load_digits_csv(args.data_path));
  if (!args.json) print_header(args, setup, split);
  StepMeter meter;
  MlpConfig run_config = mlp;
  StepLog on_log = step_loss_printer(args.json);
  HbmBreakdown peak;  // core 0 after the last step (train_mlp's buffers are allocated once)
  if (setup.estimate) {
    on_log = metered_step_log(meter, on_log, run_config.log_every, mlp.steps);
    run_config.at_peak = [&peak](Runtime& rt) {
      peak = hbm_breakdown(rt.core(0).hbm().chunk_records());
    };
  }
  const PlanRun run = train_strategy(setup, split, run_config, on_log, peak);
  std::optional<EstimateReport> report;
  if (setup.estimate) {
    report = compare_run_with_estimate(
        *setup.estimate,
        measure_run(n, mlp.steps, run.median_step_ms, meter, run.hbm, run.training_set_bytes,
                    "training set (replicated on every core)"),
        run.pinning, setup.plan, mlp.micro_batches);
  }
  // The reference of the data-parallel group (train/mlp_reference.h): 1 core with one
  // micro-batch per data-parallel core performs the group's f32 gradient additions in their
  // order; the one-batch run is printed, not checked. Under pure tensor parallelism the group is
  // one core, and the reference is the one-batch run.
  const int64_t data_group = setup.layout ? setup.layout->data : n;
  const MlpReference reference = run_mlp_reference(setup.options, split, mlp, data_group);
  if (args.json) {
    print_json(args, setup, run, reference, report);
  } else {
    print_text(setup, run, reference, report);
  }
  // Replicas that drifted apart fail the run, as a loss mismatch does.
  const bool ok = reference.matches(run.losses);
  return report_replicas(run.replica_mismatch) && ok ? 0 : 1;
}

}  // namespace vtpu
