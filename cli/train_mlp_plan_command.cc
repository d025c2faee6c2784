#include "vtpu/cli/train_mlp_plan_command.h"

#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/bench/estimate_report.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_reference.h"
#include "vtpu/train/mlp_tp_trainer.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/runtime.h"

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
};

}  // namespace

int run_train_mlp_plan(const TrainMlpPlanArgs& args) {
  const TrainPlan plan = load_train_plan(args.plan_path);
  // First: a plan for another model is refused as such, before its strategy is looked at.
  const std::optional<MlpPlanModel> planned = mlp_plan_model(plan);
  const MlpPlanMode mode = mlp_plan_mode(plan, /*allow_tensor=*/true);
  if (!check_usage([&] {
        check_plan_cores(plan, args.cores);
        args.config.check_plan_mesh_cores(plan, args.cores);
      }))
    return 2;
  RuntimeOptions options = args.config.options;
  options.num_cores = static_cast<int>(plan.num_cores());
  options.validate();
  MlpConfig mlp = args.mlp;
  if (!args.batch_given && plan.estimated_batch() > 0) mlp.global_batch = plan.estimated_batch();
  // The model the plan was made for (its model_graph), unless a flag says the same. A flag that
  // contradicts the plan is a usage error, exit 2, as --cores is (new-user pass nu10, NU13).
  if (planned && !check_usage([&] {
        mlp.hidden =
            plan_setting(plan, "hidden", "fc1.out", "--hidden", planned->hidden,
                         args.hidden_given ? std::optional<int64_t>(mlp.hidden) : std::nullopt);
        mlp.optimizer = plan_setting(
            plan, "optimizer", "model_graph.optimizer", "--optimizer", planned->optimizer,
            args.optimizer_given ? std::optional<std::string>(mlp.optimizer) : std::nullopt);
      })) {
    return 2;
  }
  if (!args.lr_given) mlp.learning_rate = mlp_default_learning_rate(mlp.optimizer);
  // The plan's estimate, compared with this run (bench/estimate_report.h); checked before
  // anything runs. A --batch other than the estimate's is a usage error (exit 2), checked before
  // the batch is split over the cores: adversarial pass adv12, ADV9 (--batch 63 said "cannot be
  // split evenly across 2 cores", exit 1, while --batch 2 named the plan's batch, exit 2).
  std::optional<PlanEstimate> estimate;
  if (!check_usage([&] { estimate = comparable_estimate(plan, mlp.global_batch); })) return 2;
  std::optional<DataTensorLayout> layout;
  if (mode == MlpPlanMode::kTensorParallel)
    layout = plan_data_tensor_layout(plan, "vtpu train mlp");
  // --micro-batches against the rows of a data shard: a usage error, exit 2, as the other flags
  // that disagree with the plan (new-user pass nu12, NU53).
  if (!check_usage([&] {
        if (mode == MlpPlanMode::kFsdp && mlp.micro_batches != 1) {
          throw InvalidArgumentError(
              "--micro-batches " + std::to_string(mlp.micro_batches) +
              " cannot be combined with an fsdp plan (expected 1: train fsdp does not accumulate "
              "micro-batches)");
        }
        const int64_t shards = layout ? layout->data : options.num_cores;
        const std::vector<std::string>& axes = layout ? layout->data_axes : plan.data;
        const std::string over =
            axes.empty() ? "one data shard: the plan has no data axis"
            : axes.size() == 1
                ? "the " + std::to_string(shards) + "-way data axis"
                : "the " + std::to_string(shards) + "-way data axes (" + join(axes, ", ") + ")";
        check_micro_batches(mlp.micro_batches, mlp.global_batch, shards, "data shard", over);
      }))
    return 2;
  if (layout) {
    mlp.validate(static_cast<int>(layout->data));
    // Regression (adversarial pass adv7, G5): a tensor group that does not divide hidden (64
    // over 3) printed "21 hidden units per core" before the trainer refused it; checked first.
    (void)mlp_tp_shard_parameters(mlp.hidden, layout->tensor);
  } else {
    mlp.validate(options.num_cores);
  }
  // The plan's layers and parameter shapes against the model this run trains (adv12 ADV3).
  check_plan_layout(plan, mlp_model_graph(mlp.hidden), "vtpu train mlp");
  const int n = options.num_cores;
  const DigitsSplit split = split_digits(load_digits_csv(args.data_path));
  if (!args.json) {
    std::printf("vtpu train mlp --plan %s: strategy %s on mesh %s: %s, %s HBM each\n",
                plan.path.c_str(), plan.describe_strategy().c_str(), plan.describe_mesh().c_str(),
                count_text(n, "virtual core").c_str(),
                format_bytes(options.hbm_bytes_per_core).c_str());
    if (layout) {
      std::printf(
          "Megatron tensor parallel: %s; W1 column-parallel, W2 row-parallel, %lld hidden units "
          "per core, one all-reduce of the logits per step\n",
          layout->describe().c_str(), static_cast<long long>(mlp.hidden / layout->tensor));
    } else {
      std::printf("%s over %s\n",
                  mode == MlpPlanMode::kFsdp ? "ZeRO-3 / FSDP (train fsdp)" : "data parallel",
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
  auto log = [&](int64_t step, double loss) {
    if (!args.json) std::printf("step %6lld  loss %.6f\n", static_cast<long long>(step), loss);
  };

  StepMeter meter;
  MlpConfig run_config = mlp;
  std::function<void(int64_t, double)> on_log = log;
  HbmBreakdown peak;  // core 0 after the last step (train_mlp's buffers are allocated once)
  if (estimate) {
    on_log = meter.wrap(log, mlp.log_every, mlp.steps);  // every step, for the process CPU time
    run_config.log_every = 1;
    run_config.at_peak = [&peak](Runtime& rt) {
      peak = hbm_breakdown(rt.core(0).hbm().chunk_records());
    };
  }
  PlanRun run;
  std::optional<MlpTensorParallelResult> tp;
  // Data and tensor parallel runs keep data replicas; FSDP shards the parameters over every core
  // and holds none. Where the replicas differ (train/replica_check.h).
  const bool has_replicas = mode != MlpPlanMode::kFsdp;
  std::optional<ReplicaMismatch> replica_mismatch;
  ThreadPinning pinning;  // the run's, for the estimate report
  {
    Runtime runtime(options);
    pinning = runtime.thread_pinning();
    if (mode == MlpPlanMode::kTensorParallel) {
      tp = train_mlp_tensor_parallel(runtime, split, run_config, *layout, on_log);
      const MlpResult& r = tp->run;
      run = {r.losses, r.median_step_ms, r.test_accuracy, r.train_accuracy, r.hbm,
             *tp,      peak.training_set};
      replica_mismatch = r.replica_mismatch;
    } else if (mode == MlpPlanMode::kFsdp) {
      FsdpConfig fc;
      fc.mlp = run_config;
      fc.mlp.at_peak = {};              // train_fsdp records its own peak
      fc.prefetch = kPlanFsdpPrefetch;  // as priced: collectives not overlapped
      const FsdpResult r = train_fsdp(runtime, split, fc, on_log);
      run = {r.losses, r.median_step_ms,   r.test_accuracy, r.train_accuracy, r.hbm,
             r,        r.peak.training_set};
    } else {
      const MlpResult r = train_mlp(runtime, split, run_config, on_log);
      run = {r.losses, r.median_step_ms, r.test_accuracy, r.train_accuracy, r.hbm,
             r,        peak.training_set};
      replica_mismatch = r.replica_mismatch;
    }
  }
  std::optional<EstimateReport> report;
  if (estimate) {
    MeasuredRun measured =
        measure_run(n, mlp.steps, run.median_step_ms, meter, run.hbm, run.training_set_bytes,
                    "training set (replicated on every core)");
    measured.thread_pinning = pinning;
    report = compare_estimate(*estimate, measured);
    mark_micro_batches_not_judged(*report, mlp.micro_batches);
    add_collective_probe(*report, plan);  // right after the run: the host mode it met
  }
  // The reference of the data-parallel group (train/mlp_reference.h): 1 core with one
  // micro-batch per data-parallel core performs the group's f32 gradient additions in their
  // order; the one-batch run is printed, not checked. Under pure tensor parallelism the group is
  // one core, and the reference is the one-batch run.
  const int64_t data_group = layout ? layout->data : n;
  const MlpReference reference = run_mlp_reference(options, split, mlp, data_group);
  const bool ok = reference.matches(run.losses);
  // Replicas that drifted apart fail the run, as a loss mismatch does (adversarial pass adv12,
  // ADV2: the data-parallel plans printed no verdict, and "NO" never changed the exit code).
  auto exit_code = [&] { return report_replicas(replica_mismatch) && ok ? 0 : 1; };

  if (args.json) {
    nlohmann::json j;
    j["plan"] = {{"path", plan.path},
                 {"strategy", plan.strategy_name},
                 {"mesh", {{"axes", plan.mesh_axes}, {"shape", plan.mesh_shape}}}};
    j["mode"] = mode_name(mode);
    j["config"] = {
        {"cores", n},           {"steps", mlp.steps},         {"global_batch", mlp.global_batch},
        {"hidden", mlp.hidden}, {"optimizer", mlp.optimizer}, {"learning_rate", mlp.learning_rate},
        {"seed", mlp.seed},     {"data", args.data_path}};
    if (layout) j["config"]["data_x_tensor"] = {layout->data, layout->tensor};
    j["run"] = run.json;
    // The run's step time and replica verdict at the top level, as every trainer has them (the
    // data and tensor parallel runs' objects hold the verdict; FSDP's has none).
    hoist_run_facts(j, "run");
    reference.add_json(j, run.losses);
    if (report) j["estimate_vs_measured"] = report->to_json();
    std::cout << j.dump(2) << std::endl;
    return exit_code();
  }
  std::printf("%s", reference.to_string("the plan", n, run.losses).c_str());
  std::printf("final loss %.4f   test accuracy %.4f   train accuracy %.4f\n", run.losses.back(),
              run.test_accuracy, run.train_accuracy);
  std::printf("median step time %.3f ms on %s; train mlp on 1 core %.3f ms\n", run.median_step_ms,
              count_text(n, "core").c_str(), reference.checked.result.median_step_ms);
  if (tp) {
    // As train transformer words it (nu10 NU14: "tensor group 1" meant calls per step here and
    // the group's size there): calls and bytes per group, none for a group of 1 core.
    const int64_t k = mlp.micro_batches;
    std::printf(
        "all-reduce on core 0: tensor group %s; data-parallel group %s; shard %lld of %lld "
        "parameters per core\n",
        describe_group_all_reduce(
            tp->tensor_all_reduce[0], layout->tensor,
            std::to_string(k) + " per step: the logits" + (k > 1 ? " of each micro-batch" : ""))
            .c_str(),
        describe_group_all_reduce(tp->run.all_reduce[0], layout->data,
                                  "1 per step: the gradient bucket")
            .c_str(),
        static_cast<long long>(tp->shard_parameters),
        static_cast<long long>(tp->run.num_parameters));
  }
  if (has_replicas) {
    std::printf("replicas identical after training: %s\n", replica_mismatch ? "NO" : "yes");
  }
  std::printf("%5s %18s %14s\n", "core", "peak_bytes_in_use", "bytes_limit");
  for (size_t i = 0; i < run.hbm.size(); ++i) {
    std::printf("%5zu %18llu %14llu\n", i,
                static_cast<unsigned long long>(run.hbm[i].peak_bytes_in_use),
                static_cast<unsigned long long>(run.hbm[i].bytes_limit));
  }
  if (report) std::printf("%s", report->to_string().c_str());
  return exit_code();
}

}  // namespace vtpu
