// The steps the `vtpu train` subcommands share: the per-step loss line, metering every step when
// a run is compared with a plan's estimate, the checks of a run against its plan, the comparison
// itself and the --json output. One wording and one rule for the same thing in every trainer.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/bench/estimate_report.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/train/mlp_trainer.h"
#include "vtpu/train/train_runtime_config.h"

namespace vtpu {

/// The digits MLP's training options that train mlp and train fsdp share, as added by
/// add_mlp_training_options: the ones whose absence gives way to a plan's or an optimizer's value.
struct MlpTrainingOptions {
  CLI::Option* batch = nullptr;   // --batch
  CLI::Option* hidden = nullptr;  // --hidden
  CLI::Option* lr = nullptr;      // --lr
};

/// Adds --steps, --batch (`batch_help`; its default shown in the help when
/// `show_batch_default`), --hidden and --lr of the digits MLP, in that order, to `app`.
MlpTrainingOptions add_mlp_training_options(CLI::App& app, MlpConfig& mlp,
                                            const std::string& batch_help, bool show_batch_default);

/// The digits MLP's run settings as the trainers' --json "config" holds them: "cores", "steps",
/// "global_batch", "hidden", "optimizer", "learning_rate", "seed" and "data" (`data_path`).
nlohmann::json mlp_config_json(int cores, const MlpConfig& mlp, const std::string& data_path);

/// A trainer's on_log callback: (step, loss).
using StepLog = std::function<void(int64_t, double)>;

/// --config loaded (train/train_runtime_config.h), its options under the command's flags. A
/// memory_events key is a usage error unless the command records events (`memory_events`);
/// `command` names the command in that message. nullopt after printing a usage error (exit 2).
std::optional<TrainRuntimeConfig> load_runtime_config(const std::string& path, bool memory_events,
                                                      const std::string& command);

/// The digits trainers' per-step line, "step     10  loss 0.123456"; nothing under --json.
StepLog step_loss_printer(bool json);

/// `log` wrapped to tick `meter` on every step (StepMeter::wrap), for a run compared with an
/// estimate: the wrapper forwards only where the trainer would have logged, so the trainer must
/// call back on every step, and `log_every` becomes 1.
StepLog metered_step_log(StepMeter& meter, StepLog log, int64_t& log_every, int64_t steps);

/// --cores and --config's num_cores against the plan's mesh (check_plan_cores,
/// TrainRuntimeConfig::check_plan_mesh_cores). False after printing a usage error (exit 2).
bool plan_cores_usage_ok(const TrainPlan& plan, std::optional<int> cores,
                         const TrainRuntimeConfig& config);

/// The hidden size and optimizer of the plan's model_graph (`planned`) into `mlp`, where the flag
/// was not given or says the same (plan_setting). A flag that contradicts the plan is a usage
/// error, as --cores is: false after printing it (exit 2).
bool apply_plan_model(const TrainPlan& plan, const MlpPlanModel& planned, bool hidden_given,
                      bool optimizer_given, MlpConfig& mlp);

/// Which of the digits MLP's flags were given: where one was not, the plan's value applies.
struct MlpFlagsGiven {
  bool batch = false;
  bool hidden = false;
  bool optimizer = false;
};

/// The digits MLP a plan file was made for, the one check for `train mlp --plan` and
/// `--estimate-from` alike: the plan's estimated batch, hidden size and optimizer into `mlp`
/// where the flag was not `given` (apply_plan_model), its estimate for that batch into
/// `estimate` (comparable_estimate; nullopt when the file has none), then the plan's layers and
/// parameter shapes against the model `mlp` trains (check_plan_layout). A flag that contradicts
/// the plan is a usage error: false after printing it (exit 2); a layer or shape the model does
/// not have throws InvalidArgumentError naming the file and the entry (exit 1).
bool apply_mlp_plan(const TrainPlan& plan, const MlpFlagsGiven& given, MlpConfig& mlp,
                    std::optional<PlanEstimate>& estimate);

/// The plan's estimate against a finished run (compare_estimate): `measured` with the run's
/// thread pinning; the step not judged for `step_not_judged` (a reason, when not empty) and for
/// more than one micro-batch; then the collective probe, which must follow the run directly to
/// meet the host in the mode the run met.
EstimateReport compare_run_with_estimate(const PlanEstimate& estimate, MeasuredRun measured,
                                         const ThreadPinning& pinning, const TrainPlan& plan,
                                         int64_t micro_batches = 1,
                                         const std::string& step_not_judged = {});

/// Prints `j` as the command's --json output, with the comparison with the plan's estimate as
/// "estimate_vs_measured" when there is one and the run's process count as "num_processes"
/// (cli/run_processes.h).
void print_json_result(nlohmann::json j, const std::optional<EstimateReport>& report);

/// "final loss 0.1234   test accuracy 0.9500   train accuracy 0.9600".
void print_final_accuracy(double final_loss, double test_accuracy, double train_accuracy);

/// "16.00 GiB HBM each" for the trainers' headers, with ", arrays unpadded" when
/// options.pad_arrays is false, so a run's text says how its HBM figures were charged.
std::string hbm_each_text(const RuntimeOptions& options);

/// Adds `--pad-arrays BOOL` (RuntimeOptions::pad_arrays, replacing pad_arrays of --config) to
/// `app`, storing it in `pad_arrays`: the one definition for every trainer command.
CLI::Option* add_pad_arrays_option(CLI::App& app, std::optional<bool>& pad_arrays);

/// Every core's peak_bytes_in_use and bytes_limit, one row a core under a header.
void print_peak_hbm_per_core(const std::vector<MemoryStats>& hbm);

}  // namespace vtpu
