#include "vtpu/cli/train_mlp_command.h"

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "vtpu/bench/estimate_report.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/run_processes.h"
#include "vtpu/cli/train_mlp_plan_command.h"
#include "vtpu/cli/trainer_steps.h"
#include "vtpu/common/error.h"
#include "vtpu/common/output_path.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_trainer.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/train/train_runtime_config.h"

namespace vtpu {

struct TrainMlpCommand {
  CLI::App* app = nullptr;
  std::optional<int> cores;              // the global count (cli/run_processes.h)
  std::optional<int> cores_per_process;  // --cores-per-process, folded into cores by run()
  std::string allocator;
  std::string memory_profile;   // pprof path
  std::string memory_snapshot;  // JSON snapshot path
  std::string memory_events;    // event-log trace path
  std::string hbm_bytes;
  std::optional<bool> pad_arrays;  // --pad-arrays, when given
  std::string config_path;         // --config: runtime options (train/train_runtime_config.h)
  std::string data_path = default_digits_path();
  std::string plan_path;      // --plan: run a `vtpu plan` file (cli/train_mlp_plan_command.h)
  std::string estimate_from;  // a `vtpu plan --emit` file whose estimate to compare with the run
  MlpConfig mlp;
  bool json = false;
  CLI::Option* batch_option = nullptr;      // --batch; with --plan, default the plan's
  CLI::Option* lr_option = nullptr;         // --lr; when absent the optimizer's default applies
  CLI::Option* hidden_option = nullptr;     // --hidden; with --plan, default the plan's
  CLI::Option* optimizer_option = nullptr;  // --optimizer; with --plan, default the plan's
};

namespace {

/// A --estimate-from plan and the estimate to compare the run with.
struct EstimateFrom {
  TrainPlan plan;
  PlanEstimate estimate;
};

void print_report(const MlpResult& r, const MlpConfig& c) {
  print_final_accuracy(r.losses.back(), r.test_accuracy, r.train_accuracy);
  std::printf(
      "median step time %.3f ms over %s (batch rows into HBM, forward, backward, "
      "all-reduce, %s)\n",
      r.median_step_ms, count_text(static_cast<long long>(r.step_seconds.size()), "step").c_str(),
      c.optimizer == "adam" ? "Adam" : "SGD");
  uint64_t calls = 0, bytes = 0;
  double seconds = 0;
  for (const auto& s : r.all_reduce) {
    calls += s.num_collectives;
    bytes += s.bytes;
    seconds += s.seconds;
  }
  const double n = static_cast<double>(r.all_reduce.size());
  std::printf(
      "all-reduce per core: %.0f calls, %s (%llu bytes) reduced, %.3f ms in all-reduce "
      "(mean over cores)\n",
      static_cast<double>(calls) / n,
      format_bytes(static_cast<uint64_t>(static_cast<double>(bytes) / n)).c_str(),
      static_cast<unsigned long long>(static_cast<double>(bytes) / n), 1e3 * seconds / n);
  std::printf("replicas identical after training: %s\n", r.replicas_identical() ? "yes" : "NO");
  if (c.kernels == "pallas" && !r.vmem.empty()) {
    std::printf("kernels: pallas; VMEM per core: peak %s of the %s scoped limit (core 0)\n",
                format_bytes(r.vmem[0].peak_bytes_in_use).c_str(),
                format_bytes(r.vmem[0].bytes_limit).c_str());
  }
  std::printf("HBM per core (bytes; keys as in jax Device.memory_stats()):\n");
  std::printf("%5s %14s %18s %14s %19s %25s %11s\n", "core", "bytes_in_use", "peak_bytes_in_use",
              "bytes_limit", "largest_alloc_size", "largest_free_block_bytes", "num_allocs");
  for (size_t i = 0; i < r.hbm.size(); ++i) {
    const auto& s = r.hbm[i];
    std::printf("%5zu %14llu %18llu %14llu %19llu %25llu %11llu\n", i,
                static_cast<unsigned long long>(s.bytes_in_use),
                static_cast<unsigned long long>(s.peak_bytes_in_use),
                static_cast<unsigned long long>(s.bytes_limit),
                static_cast<unsigned long long>(s.largest_alloc_size),
                static_cast<unsigned long long>(s.largest_free_block_bytes),
                static_cast<unsigned long long>(s.num_allocs));
  }
}

/// The memory output paths: writable, not one file twice (they would overwrite each other), and
/// none of the run's inputs (an output over an input replaced it). False after a usage error.
bool check_memory_outputs(const TrainMlpCommand& cmd) {
  return check_usage([&] {
    check_output_path("--memory-profile", cmd.memory_profile);
    check_output_path("--memory-snapshot", cmd.memory_snapshot);
    check_output_path("--memory-events", cmd.memory_events);
    const std::pair<const char*, const std::string*> outputs[] = {
        {"--memory-profile", &cmd.memory_profile},
        {"--memory-snapshot", &cmd.memory_snapshot},
        {"--memory-events", &cmd.memory_events}};
    for (size_t i = 0; i < std::size(outputs); ++i)
      for (size_t k = i + 1; k < std::size(outputs); ++k)
        check_distinct_outputs(outputs[i].first, *outputs[i].second, outputs[k].first,
                               *outputs[k].second,
                               std::string("the ") + outputs[k].first +
                                   " file would overwrite the " + outputs[i].first + " file");
    check_outputs_not_inputs({{"--memory-profile", cmd.memory_profile},
                              {"--memory-snapshot", cmd.memory_snapshot},
                              {"--memory-events", cmd.memory_events}},
                             {{"--data", cmd.data_path},
                              {"--config", cmd.config_path},
                              {"--plan", cmd.plan_path},
                              {"--estimate-from", cmd.estimate_from}});
  });
}

/// --plan: the flags that belong to the plain data-parallel run are usage errors (a flag --plan
/// would ignore, as CLI11's excludes() is), then the plan runs (cli/train_mlp_plan_command.h).
int run_plan(const TrainMlpCommand& cmd, TrainRuntimeConfig config) {
  const bool usage_ok = check_usage([&] {
    for (const auto& [flag, value] : {std::pair{"--memory-profile", &cmd.memory_profile},
                                      std::pair{"--memory-snapshot", &cmd.memory_snapshot},
                                      std::pair{"--memory-events", &cmd.memory_events},
                                      std::pair{"--estimate-from", &cmd.estimate_from}}) {
      // --estimate-from B with --plan A would compare A's run with A's estimate.
      if (!value->empty()) {
        throw InvalidArgumentError(std::string(flag) +
                                   " cannot be combined with --plan (expected one of them" +
                                   (std::string(flag) == "--estimate-from"
                                        ? ": --plan compares the run with its own plan's estimate)"
                                        : ")"));
      }
    }
    if (cmd.mlp.kernels != "eigen") {
      throw InvalidArgumentError(
          "--kernels " + cmd.mlp.kernels +
          " cannot be combined with --plan (expected --kernels eigen with --plan; "
          "--estimate-from compares a run with other kernels with a data-parallel plan)");
    }
  });
  if (!usage_ok) return 2;
  if (!cmd.hbm_bytes.empty()) config.options.hbm_bytes_per_core = parse_bytes(cmd.hbm_bytes);
  if (cmd.pad_arrays) config.options.pad_arrays = *cmd.pad_arrays;
  if (!cmd.allocator.empty()) config.options.allocator = cmd.allocator;
  TrainMlpPlanArgs args;
  args.plan_path = cmd.plan_path;
  args.config = std::move(config);
  args.cores = cmd.cores;
  args.mlp = cmd.mlp;
  args.batch_given = cmd.batch_option->count() > 0;
  args.hidden_given = cmd.hidden_option->count() > 0;
  args.optimizer_given = cmd.optimizer_option->count() > 0;
  args.lr_given = cmd.lr_option->count() > 0;
  args.data_path = cmd.data_path;
  args.json = cmd.json;
  return run_train_mlp_plan(args);
}

/// --estimate-from: the plan must be one this command runs (data parallel over all its cores)
/// for the model the flags train. Sets the plan's cores in `options` and its batch, hidden size
/// and optimizer in `mlp` where no flag gives them; a flag that contradicts the plan is a usage
/// error. nullopt after printing a usage error.
std::optional<EstimateFrom> load_estimate_from(const TrainMlpCommand& cmd,
                                               const TrainRuntimeConfig& config, MlpConfig& mlp,
                                               RuntimeOptions& options) {
  TrainPlan plan = load_train_plan(cmd.estimate_from);
  if (!check_usage([&] { check_mlp_estimate_plan(plan); }) ||
      !plan_cores_usage_ok(plan, cmd.cores, config)) {
    return std::nullopt;
  }
  // The model the estimate was made for, checked as --plan checks it: a hidden-128 Adam plan
  // judged against a hidden-64 SGD run would compare two different models.
  std::optional<PlanEstimate> estimate;
  if (!apply_mlp_plan(plan,
                      {cmd.batch_option->count() > 0, cmd.hidden_option->count() > 0,
                       cmd.optimizer_option->count() > 0},
                      mlp, estimate)) {
    return std::nullopt;
  }
  options.num_cores = static_cast<int>(plan.num_cores());
  if (!estimate) {
    throw InvalidArgumentError("--estimate-from " + cmd.estimate_from +
                               ": the plan has no estimate (expected a `vtpu plan "
                               "--emit` file)");
  }
  return EstimateFrom{std::move(plan), *estimate};
}

/// The flags over --config's runtime options, validated.
void apply_runtime_flags(const TrainMlpCommand& cmd, RuntimeOptions& options) {
  if (cmd.cores) options.num_cores = *cmd.cores;
  if (!cmd.hbm_bytes.empty()) options.hbm_bytes_per_core = parse_bytes(cmd.hbm_bytes);
  if (cmd.pad_arrays) options.pad_arrays = *cmd.pad_arrays;
  if (!cmd.allocator.empty()) options.allocator = cmd.allocator;
  if (!cmd.memory_events.empty()) options.record_memory_events = true;
  options.validate();
}

void print_header(const TrainMlpCommand& cmd, const RuntimeOptions& options, const MlpConfig& mlp,
                  const DigitsSplit& split) {
  std::printf(
      "vtpu train mlp: %s, %s (%s), digits %s: %lld train / "
      "%lld test rows\n",
      (count_text(options.num_cores, "virtual core") + processes_text(options.num_cores)).c_str(),
      hbm_each_text(options).c_str(), options.allocator.c_str(), cmd.data_path.c_str(),
      static_cast<long long>(split.train.num_rows()),
      static_cast<long long>(split.test.num_rows()));
  std::printf("model 64->%lld->10, global batch %lld (%lld per core",
              static_cast<long long>(mlp.hidden), static_cast<long long>(mlp.global_batch),
              static_cast<long long>(mlp.global_batch / options.num_cores));
  if (mlp.micro_batches > 1) {
    std::printf(" in %lld micro-batches", static_cast<long long>(mlp.micro_batches));
  }
  std::printf("), %s lr %g, %s, seed %llu\n", mlp.optimizer == "adam" ? "Adam" : "SGD",
              static_cast<double>(mlp.learning_rate),
              count_text(static_cast<long long>(mlp.steps), "step").c_str(),
              static_cast<unsigned long long>(mlp.seed));
  std::fflush(stdout);
}

/// Trains, and writes the memory event log, also when the run fails: a failed run (an OOM, most
/// often) is when the log matters most, as it ends with the failing request. The profile and
/// snapshot describe the peak of a finished step, which a failed run does not reach; the OOM
/// report in the error gives the arena's state at the failure instead.
MlpResult train_writing_events(const TrainMlpCommand& cmd, Runtime& runtime,
                               const DigitsSplit& split, const MlpConfig& mlp,
                               const StepLog& on_log) {
  MlpResult result;
  try {
    result = train_mlp(runtime, split, mlp, on_log);
  } catch (const Error&) {
    if (!cmd.memory_events.empty()) {
      runtime.save_memory_event_log(cmd.memory_events);
      std::fprintf(stderr, "vtpu: wrote %s (events up to the failure)\n",
                   cmd.memory_events.c_str());
    }
    for (const std::string* p : {&cmd.memory_profile, &cmd.memory_snapshot}) {
      if (!p->empty()) std::fprintf(stderr, "vtpu: %s not written: the run failed\n", p->c_str());
    }
    throw;
  }
  if (!cmd.memory_events.empty()) runtime.save_memory_event_log(cmd.memory_events);
  return result;
}

void print_json(const TrainMlpCommand& cmd, const MlpResult& result, const MlpConfig& mlp,
                const RuntimeOptions& options, const std::optional<EstimateReport>& report) {
  nlohmann::json j = result;
  char lr[32];  // the f32 value as the user wrote it, not its double expansion
  std::snprintf(lr, sizeof lr, "%.7g", static_cast<double>(mlp.learning_rate));
  j["config"] = {{"steps", mlp.steps},
                 {"global_batch", mlp.global_batch},
                 {"micro_batches", mlp.micro_batches},
                 {"hidden", mlp.hidden},
                 {"optimizer", mlp.optimizer},
                 {"learning_rate", std::strtod(lr, nullptr)},
                 {"seed", mlp.seed},
                 {"data", cmd.data_path},
                 {"runtime", options.to_json()}};
  print_json_result(std::move(j), report);
}

/// The data-parallel run of `mlp` on `options`' cores, compared with `from`'s estimate when
/// given, and its report.
int run_data_parallel(const TrainMlpCommand& cmd, const RuntimeOptions& options, MlpConfig mlp,
                      const std::optional<EstimateFrom>& from) {
  HbmBreakdown peak;  // core 0 at its peak (for --estimate-from)
  if (!cmd.memory_profile.empty() || !cmd.memory_snapshot.empty() || from) {
    mlp.at_peak = [&cmd, &peak](Runtime& rt) {
      if (!cmd.memory_profile.empty()) rt.save_device_memory_profile(cmd.memory_profile);
      if (!cmd.memory_snapshot.empty()) rt.save_memory_snapshot(cmd.memory_snapshot);
      peak = hbm_breakdown(rt.core(0).hbm().chunk_records());
    };
  }
  const DigitsSplit split = split_digits(load_digits_csv(cmd.data_path));
  const std::unique_ptr<Runtime> runtime_ptr = make_run_runtime(options);
  Runtime& runtime = *runtime_ptr;
  if (!cmd.json) print_header(cmd, options, mlp, split);
  StepMeter meter;
  StepLog on_log = step_loss_printer(cmd.json);
  if (from) on_log = metered_step_log(meter, on_log, mlp.log_every, mlp.steps);
  const MlpResult result = train_writing_events(cmd, runtime, split, mlp, on_log);
  std::optional<EstimateReport> report;
  if (from) {
    // The estimate prices the Eigen kernels' measured rates, not the pallas ones.
    report = compare_run_with_estimate(
        from->estimate,
        measure_run(options.num_cores, cmd.mlp.steps, result.median_step_ms, meter, result.hbm,
                    peak.training_set, "training set (replicated on every core)"),
        runtime.thread_pinning(), from->plan, mlp.micro_batches,
        mlp.kernels == "pallas" ? "the estimate prices the Eigen kernels' measured rates; this "
                                  "run used --kernels pallas"
                                : "");
  }
  if (cmd.json) {
    print_json(cmd, result, mlp, options, report);
  } else {
    print_report(result, mlp);
    if (report) std::printf("%s", report->to_string().c_str());
  }
  // Replicas that drifted apart fail the run, as a loss mismatch does.
  return report_replicas(result.replica_mismatch) ? 0 : 1;
}

int run(const TrainMlpCommand& given) {
  // --cores-per-process is --cores K x processes from here on.
  TrainMlpCommand cmd = given;
  if (!check_usage([&] {
        cmd.cores = global_cores(given.cores, given.cores_per_process);
        check_one_process_outputs({{"--memory-profile", cmd.memory_profile},
                                   {"--memory-snapshot", cmd.memory_snapshot},
                                   {"--memory-events", cmd.memory_events}},
                                  "vtpu train mlp");
      })) {
    return 2;
  }
  if (!check_memory_outputs(cmd)) return 2;
  std::optional<TrainRuntimeConfig> config = load_runtime_config(
      cmd.config_path, !cmd.memory_events.empty(), "vtpu train mlp without --memory-events");
  if (!config) return 2;
  if (!cmd.plan_path.empty()) return run_plan(cmd, std::move(*config));
  MlpConfig mlp = cmd.mlp;
  RuntimeOptions& options = config->options;
  std::optional<EstimateFrom> from;
  if (!cmd.estimate_from.empty()) {
    from = load_estimate_from(cmd, *config, mlp, options);
    if (!from) return 2;
  }
  apply_runtime_flags(cmd, options);
  if (cmd.lr_option->count() == 0) mlp.learning_rate = mlp_default_learning_rate(mlp.optimizer);
  if (!check_usage([&] {
        check_cores_split(options.num_cores, (cmd.cores ? "--cores " : "num_cores ") +
                                                 std::to_string(options.num_cores));
        check_micro_batches(mlp.micro_batches, mlp.global_batch, options.num_cores, "core",
                            count_text(options.num_cores, "core"));
      }))
    return 2;
  mlp.validate(options.num_cores);
  return run_data_parallel(cmd, options, std::move(mlp), from);
}

}  // namespace

std::shared_ptr<TrainMlpCommand> add_train_mlp_command(CLI::App& train) {
  auto cmd = std::make_shared<TrainMlpCommand>();
  MlpConfig& m = cmd->mlp;
  CLI::App* app = cmd->app = train.add_subcommand(
      "mlp",
      "64->H->10 MLP on the UCI handwritten digits (ReLU, softmax cross-entropy, SGD or "
      "Adam): data parallel, or with --plan any strategy of a `vtpu plan` file");
  app->add_option("--cores", cmd->cores,
                  "Virtual cores over all processes (default 8, or num_cores of --config; "
                  "under mpirun -np H a multiple of H, split evenly)")
      ->check(CLI::Range(1, 1024));
  add_cores_per_process_option(*app, cmd->cores_per_process);
  const MlpTrainingOptions training = add_mlp_training_options(
      *app, m,
      "Global batch (rows per step over all cores; a multiple of --cores; with --plan, default "
      "the plan's)",
      /*show_batch_default=*/true);
  cmd->batch_option = training.batch;
  cmd->hidden_option = training.hidden;
  cmd->lr_option = training.lr;
  cmd->optimizer_option =
      app->add_option("--optimizer", m.optimizer,
                      "sgd (plain SGD, no state) or adam (Adam with bias correction, betas "
                      "0.9/0.999, eps 1e-8; m and v replicated like the parameters; with --plan, "
                      "default the plan's)")
          ->capture_default_str()
          ->check(CLI::IsMember({"sgd", "adam"}));
  app->add_option("--micro-batches", m.micro_batches,
                  "Gradient accumulation: each core computes its rows as K micro-batches and sums "
                  "their gradients in order before the all-reduce (K divides batch / cores); "
                  "--cores 1 --micro-batches N repeats the f32 sums of --cores N exactly")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app->add_option("--seed", m.seed, "Seed for parameter init and batch order, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  app->add_option("--data", cmd->data_path, "digits.csv.gz from Debian python3-sklearn")
      ->capture_default_str()
      ->check(nonempty_path_validator());
  app->add_option("--hbm-bytes", cmd->hbm_bytes, "HBM per core, e.g. 16G, 512M (default 16G)")
      ->check(hbm_bytes_validator());
  add_runtime_config_option(
      *app, cmd->config_path,
      "num_cores is the default of --cores and must match a --plan or --estimate-from mesh; "
      "--hbm-bytes, --allocator and --pad-arrays replace their keys");
  add_pad_arrays_option(*app, cmd->pad_arrays);
  app->add_option("--kernels", m.kernels,
                  "Forward/backward compute: eigen (Eigen over HBM) or pallas (pipelined kernels "
                  "streaming blocks through VMEM with the DMA engine)")
      ->capture_default_str()
      ->check(CLI::IsMember({"eigen", "pallas"}));
  app->add_option("--allocator", cmd->allocator,
                  "HBM allocator policy: " + join(known_allocator_policies(), "|") +
                      " (default bfc, or allocator of --config)")
      ->check(CLI::IsMember(known_allocator_policies()));
  app->add_option("--memory-profile", cmd->memory_profile,
                  "Write a pprof device memory profile (gzipped profile.proto, as "
                  "jax.profiler.save_device_memory_profile) after the last step, before its step "
                  "buffers are freed (not written if the run fails)")
      ->check(nonempty_path_validator());
  app->add_option("--memory-snapshot", cmd->memory_snapshot,
                  "Write a JSON snapshot of every core's chunks after the last step, before its "
                  "step buffers are freed (not written if the run fails)")
      ->check(nonempty_path_validator());
  app->add_option("--memory-events", cmd->memory_events,
                  "Record every core's alloc/free/oom/defragment events and write them as a "
                  "vtpu trace (JSON Lines), also when the run fails")
      ->check(nonempty_path_validator());
  app->add_option("--log-every", m.log_every, "Print the loss every K steps (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--estimate-from", cmd->estimate_from,
                  "A `vtpu plan --emit` file for this plain run (data parallel, its mesh's cores): "
                  "print its estimated step time and HBM per core against the measured ones "
                  "(--plan prints the same for any plan it runs)")
      ->check(nonempty_path_validator());
  app->add_flag("--json", cmd->json, "Print the result as JSON (with the per-step losses)");
  app->add_option("--plan", cmd->plan_path,
                  "Run a `vtpu plan` file for the mlp model: data parallel, FSDP or (data x) "
                  "Megatron tensor parallel as it says, checked against 1 core "
                  "(cli/train_mlp_plan_command.h)")
      ->check(nonempty_path_validator());
  return cmd;
}

bool run_train_mlp_if_selected(const TrainMlpCommand& command, int* exit_code) {
  if (!command.app->parsed()) return false;
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
