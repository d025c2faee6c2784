#include "vtpu/cli/trainer_steps.h"

#include <cstdio>
#include <iostream>
#include <utility>

#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/run_processes.h"
#include "vtpu/common/units.h"

namespace vtpu {

MlpTrainingOptions add_mlp_training_options(CLI::App& app, MlpConfig& mlp,
                                            const std::string& batch_help,
                                            bool show_batch_default) {
  MlpTrainingOptions o;
  app.add_option("--steps", mlp.steps, "Optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  o.batch = app.add_option("--batch", mlp.global_batch, batch_help)
                ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  if (show_batch_default) o.batch->capture_default_str();
  o.hidden =
      app.add_option("--hidden", mlp.hidden, "Hidden units (with --plan, default the plan's)")
          ->capture_default_str()
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  o.lr = app.add_option(
                "--lr", mlp.learning_rate,
                "Learning rate (> 0; default 0.2 with sgd, 1e-3 with adam as torch.optim.Adam)")
             ->check(learning_rate_validator());
  return o;
}

nlohmann::json mlp_config_json(int cores, const MlpConfig& mlp, const std::string& data_path) {
  return {
      {"cores", cores},       {"steps", mlp.steps},         {"global_batch", mlp.global_batch},
      {"hidden", mlp.hidden}, {"optimizer", mlp.optimizer}, {"learning_rate", mlp.learning_rate},
      {"seed", mlp.seed},     {"data", data_path}};
}

std::optional<TrainRuntimeConfig> load_runtime_config(const std::string& path, bool memory_events,
                                                      const std::string& command) {
  TrainRuntimeConfig config = TrainRuntimeConfig::load(path);
  if (!check_usage([&] { config.check_memory_events(memory_events, command); })) {
    return std::nullopt;
  }
  return config;
}

StepLog step_loss_printer(bool json) {
  return [json](int64_t step, double loss) {
    if (!json) std::printf("step %6lld  loss %.6f\n", static_cast<long long>(step), loss);
  };
}

StepLog metered_step_log(StepMeter& meter, StepLog log, int64_t& log_every, int64_t steps) {
  StepLog wrapped = meter.wrap(std::move(log), log_every, steps);
  log_every = 1;
  return wrapped;
}

bool plan_cores_usage_ok(const TrainPlan& plan, std::optional<int> cores,
                         const TrainRuntimeConfig& config) {
  return check_usage([&] {
    check_plan_cores(plan, cores);
    config.check_plan_mesh_cores(plan, cores);
  });
}

bool apply_plan_model(const TrainPlan& plan, const MlpPlanModel& planned, bool hidden_given,
                      bool optimizer_given, MlpConfig& mlp) {
  return check_usage([&] {
    mlp.hidden = plan_setting(plan, "hidden", "fc1.out", "--hidden", planned.hidden,
                              hidden_given ? std::optional<int64_t>(mlp.hidden) : std::nullopt);
    mlp.optimizer =
        plan_setting(plan, "optimizer", "model_graph.optimizer", "--optimizer", planned.optimizer,
                     optimizer_given ? std::optional<std::string>(mlp.optimizer) : std::nullopt);
  });
}

bool apply_mlp_plan(const TrainPlan& plan, const MlpFlagsGiven& given, MlpConfig& mlp,
                    std::optional<PlanEstimate>& estimate) {
  if (!given.batch && plan.estimated_batch() > 0) mlp.global_batch = plan.estimated_batch();
  if (const std::optional<MlpPlanModel> planned = mlp_plan_model(plan);
      planned && !apply_plan_model(plan, *planned, given.hidden, given.optimizer, mlp)) {
    return false;
  }
  // A --batch other than the estimate's is a usage error, checked before the batch is split over
  // the cores, whose error would otherwise come first for some batches.
  if (!check_usage([&] { estimate = comparable_estimate(plan, mlp.global_batch); })) return false;
  // --estimate-from once skipped this: a renamed layer, a changed weight shape or a deleted bias
  // was compared with the run as if it were the model trained.
  check_plan_layout(plan, mlp_model_graph(mlp.hidden), "vtpu train mlp");
  return true;
}

EstimateReport compare_run_with_estimate(const PlanEstimate& estimate, MeasuredRun measured,
                                         const ThreadPinning& pinning, const TrainPlan& plan,
                                         int64_t micro_batches,
                                         const std::string& step_not_judged) {
  measured.thread_pinning = pinning;
  EstimateReport report = compare_estimate(estimate, measured);
  if (!step_not_judged.empty()) report.mark_step_not_judged(step_not_judged);
  mark_micro_batches_not_judged(report, micro_batches);
  add_collective_probe(report, plan);
  return report;
}

void print_json_result(nlohmann::json j, const std::optional<EstimateReport>& report) {
  if (report) j["estimate_vs_measured"] = report->to_json();
  j["num_processes"] = run_process_count();
  std::cout << j.dump(2) << std::endl;
}

void print_final_accuracy(double final_loss, double test_accuracy, double train_accuracy) {
  std::printf("final loss %.4f   test accuracy %.4f   train accuracy %.4f\n", final_loss,
              test_accuracy, train_accuracy);
}

CLI::Option* add_pad_arrays_option(CLI::App& app, std::optional<bool>& pad_arrays) {
  return app
      .add_option("--pad-arrays", pad_arrays,
                  "true: HBM arrays are charged their padded bytes under XLA's TPU tiled "
                  "layout; false: their logical bytes (default true, or pad_arrays of "
                  "--config)")
      ->check(CLI::IsMember({"true", "false"}, CLI::ignore_case));
}

void print_peak_hbm_per_core(const std::vector<MemoryStats>& hbm) {
  std::printf("%5s %18s %14s\n", "core", "peak_bytes_in_use", "bytes_limit");
  for (size_t i = 0; i < hbm.size(); ++i) {
    std::printf("%5zu %18llu %14llu\n", i,
                static_cast<unsigned long long>(hbm[i].peak_bytes_in_use),
                static_cast<unsigned long long>(hbm[i].bytes_limit));
  }
}

std::string hbm_each_text(const RuntimeOptions& options) {
  return format_bytes(options.hbm_bytes_per_core) + " HBM each" +
         (options.pad_arrays ? "" : ", arrays unpadded");
}

}  // namespace vtpu
