// The `vtpu` command-line program.
//
//   vtpu train mlp [--cores N] [--steps S] [--batch B] [--hidden H] [--lr LR] [--seed K]
//                  [--data FILE] [--hbm-bytes SIZE] [--config FILE] [--log-every K] [--json]
//                  [--allocator P] [--memory-profile FILE] [--memory-snapshot FILE]
//                  [--memory-events FILE] [--kernels eigen|pallas] [--optimizer sgd|adam]
//                  [--micro-batches K] [--plan PLAN.json]
//                  (--plan: cli/train_mlp_plan_command.h)
//   vtpu train transformer [--mesh DxT | --cores N | --plan PLAN.json] [--config FILE] ...
//                          (cli/train_transformer_command.h)
//   vtpu train fsdp [--cores N] [--steps S] [--batch B] [--hidden H] [--lr LR] [--seed K]
//                   [--optimizer sgd|adam] [--plan PLAN.json] [--config FILE] ...
//                   (cli/train_fsdp_command.h)
//   vtpu bench memory [--allocators A,B] [--live L1,L2] [--pairs K] [--hot W] [--workload W]
//                     [--trace FILE] [--capacity SIZE] [--via policy,arena] [--seed S] [--json]
//   vtpu bench fragmentation [--allocators A,B] [--defrag on,off] [--workloads N] [--ops K]
//                            [--occupancy F] [--capacity SIZE] [--seed S] [--json]
//   vtpu stress [--cores 8] [--workload W | --trace FILE] [--allocators A,B] ...
//               (cli/stress_command.h)
//   vtpu bench collectives [--cores N] [--op all_reduce] [--min-bytes 8] [--max-bytes 64M] ...
//                          (cli/bench_collectives_command.h)
//   vtpu reshard --mesh 2x2x2 [--axes x,y,z] --shape 8,8 --from SPEC --to SPEC [--explain]
//                [--hardware P] [--alpha S] [--beta S_PER_BYTE] [--a2a-factor F] [--seed K]
//                (cli/reshard_command.h)
//   vtpu bench kernel matmul [--buffers 1,2,3] [--m --n --k --bm --bn --bk] [--hardware P] ...
//   vtpu bench hardware [--out FILE]     (cli/bench_kernel_command.h)
//   vtpu plan MODEL.json --mesh 2x4 [--hardware v5e] [--hbm-bytes 16G] [--batch B]
//             [--emit PLAN.json] [--json]   (cli/plan_command.h)
//
// Exit codes: 0 success (and --help); 1 a vtpu error while running (the message names the value
// and what was expected: a bad data or config file, out of HBM, ...); 2 bad command-line usage.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/cli/bench_collectives_command.h"
#include "vtpu/cli/bench_kernel_command.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/bench/estimate_report.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_trainer.h"
#include "vtpu/common/output_path.h"
#include "vtpu/cli/plan_command.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/cli/reshard_command.h"
#include "vtpu/cli/stress_command.h"
#include "vtpu/cli/train_fsdp_command.h"
#include "vtpu/cli/train_mlp_plan_command.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/train/train_runtime_config.h"
#include "vtpu/cli/train_transformer_command.h"
#include "vtpu/stress/alloc_workload.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/stress/fragmentation_check.h"
#include "vtpu/bench/policy_benchmark.h"
#include "vtpu/memory/trace.h"
#include "vtpu/runtime/runtime.h"

namespace {

using vtpu::MlpConfig;
using vtpu::MlpResult;

struct TrainArgs {
  std::optional<int> cores;
  std::string allocator;
  std::string memory_profile;   // pprof path
  std::string memory_snapshot;  // JSON snapshot path
  std::string memory_events;    // event-log trace path
  std::string hbm_bytes;
  std::string config_path;
  std::string data_path = vtpu::default_digits_path();
  std::string plan_path;      // --plan: run a `vtpu plan` file (cli/train_mlp_plan_command.h)
  std::string estimate_from;  // a `vtpu plan --emit` file whose estimate to compare with the run
  bool batch_given = false;   // --batch was given
  MlpConfig mlp;
  bool json = false;
  CLI::Option* lr_option = nullptr;         // --lr; when absent the optimizer's default applies
  CLI::Option* hidden_option = nullptr;     // --hidden; with --plan, default the plan's
  CLI::Option* optimizer_option = nullptr;  // --optimizer; with --plan, default the plan's
};

void print_mlp_report(const MlpResult& r, const MlpConfig& c) {
  std::printf("final loss %.4f   test accuracy %.4f   train accuracy %.4f\n", r.losses.back(),
              r.test_accuracy, r.train_accuracy);
  std::printf(
      "median step time %.3f ms over %s (batch rows into HBM, forward, backward, "
      "all-reduce, %s)\n",
      r.median_step_ms,
      vtpu::count_text(static_cast<long long>(r.step_seconds.size()), "step").c_str(),
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
      vtpu::format_bytes(static_cast<uint64_t>(static_cast<double>(bytes) / n)).c_str(),
      static_cast<unsigned long long>(static_cast<double>(bytes) / n), 1e3 * seconds / n);
  std::printf("replicas identical after training: %s\n", r.replicas_identical() ? "yes" : "NO");
  if (c.kernels == "pallas" && !r.vmem.empty()) {
    std::printf("kernels: pallas; VMEM per core: peak %s of the %s scoped limit (core 0)\n",
                vtpu::format_bytes(r.vmem[0].peak_bytes_in_use).c_str(),
                vtpu::format_bytes(r.vmem[0].bytes_limit).c_str());
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
  (void)c;
}

using vtpu::check_output_path;

int run_train_mlp(const TrainArgs& args) {
  check_output_path("--memory-profile", args.memory_profile);
  check_output_path("--memory-snapshot", args.memory_snapshot);
  check_output_path("--memory-events", args.memory_events);
  // Adversarial pass adv12, ADV8: two outputs on one path silently overwrote each other; a usage
  // error (exit 2), as `vtpu stress --json --html` is.
  if (!vtpu::check_usage([&] {
        const std::pair<const char*, const std::string*> outputs[] = {
            {"--memory-profile", &args.memory_profile},
            {"--memory-snapshot", &args.memory_snapshot},
            {"--memory-events", &args.memory_events}};
        for (size_t i = 0; i < std::size(outputs); ++i)
          for (size_t k = i + 1; k < std::size(outputs); ++k)
            vtpu::check_distinct_outputs(
                outputs[i].first, *outputs[i].second, outputs[k].first, *outputs[k].second,
                std::string("the ") + outputs[k].first + " file would overwrite the " +
                    outputs[i].first + " file");
        // Adversarial pass adv15, ADV24: a memory output over an input replaced it, exit 0.
        vtpu::check_outputs_not_inputs({{"--memory-profile", args.memory_profile},
                                                  {"--memory-snapshot", args.memory_snapshot},
                                                  {"--memory-events", args.memory_events}},
                                                 {{"--data", args.data_path},
                                                  {"--config", args.config_path},
                                                  {"--plan", args.plan_path},
                                                  {"--estimate-from", args.estimate_from}});
      }))
    return 2;
  // --config, under the flags (train/train_runtime_config.h).
  vtpu::TrainRuntimeConfig config =
      vtpu::TrainRuntimeConfig::load(args.config_path);
  if (!vtpu::check_usage([&] {
        config.check_memory_events(!args.memory_events.empty(),
                                   "vtpu train mlp without --memory-events");
      }))
    return 2;
  vtpu::RuntimeOptions& options = config.options;
  if (!args.plan_path.empty()) {
    // The memory outputs, --estimate-from and the pallas kernels belong to the plain
    // data-parallel run; a flag --plan would ignore is a usage error (exit 2), as CLI11's
    // excludes() is. Regression (new-user pass nu10, NU23): --estimate-from B with --plan A ran A
    // and silently compared it with A's estimate.
    const bool usage_ok = vtpu::check_usage([&] {
      for (const auto& [flag, value] : {std::pair{"--memory-profile", &args.memory_profile},
                                        std::pair{"--memory-snapshot", &args.memory_snapshot},
                                        std::pair{"--memory-events", &args.memory_events},
                                        std::pair{"--estimate-from", &args.estimate_from}}) {
        if (!value->empty()) {
          throw vtpu::InvalidArgumentError(
              std::string(flag) + " cannot be combined with --plan (expected one of them" +
              (std::string(flag) == "--estimate-from"
                   ? ": --plan compares the run with its own plan's estimate)"
                   : ")"));
        }
      }
      // New-user pass nu10, NU13: this was Unimplemented, exit 1.
      if (args.mlp.kernels != "eigen") {
        throw vtpu::InvalidArgumentError(
            "--kernels " + args.mlp.kernels +
            " cannot be combined with --plan (expected --kernels eigen with --plan; "
            "--estimate-from compares a run with other kernels with a data-parallel plan)");
      }
    });
    if (!usage_ok) return 2;
    if (!args.hbm_bytes.empty()) options.hbm_bytes_per_core = vtpu::parse_bytes(args.hbm_bytes);
    if (!args.allocator.empty()) options.allocator = args.allocator;
    vtpu::TrainMlpPlanArgs plan_args;
    plan_args.plan_path = args.plan_path;
    plan_args.config = config;
    plan_args.cores = args.cores;
    plan_args.mlp = args.mlp;
    plan_args.batch_given = args.batch_given;
    plan_args.hidden_given = args.hidden_option->count() > 0;
    plan_args.optimizer_given = args.optimizer_option->count() > 0;
    plan_args.lr_given = args.lr_option->count() > 0;
    plan_args.data_path = args.data_path;
    plan_args.json = args.json;
    return vtpu::run_train_mlp_plan(plan_args);
  }
  // --estimate-from: the plan must be one this command runs (data parallel over all its cores).
  std::optional<vtpu::PlanEstimate> estimate;
  std::optional<vtpu::TrainPlan> estimate_plan;
  std::optional<int64_t> plan_batch;   // the estimate's global batch, without --batch
  std::optional<int64_t> plan_hidden;  // the estimate's model, when its plan records one
  std::optional<std::string> plan_optimizer;
  if (!args.estimate_from.empty()) {
    const vtpu::TrainPlan& plan =
        estimate_plan.emplace(vtpu::load_train_plan(args.estimate_from));
    // A plan of another strategy or model is a usage error like the other plan/flag mismatches
    // (exit 2; new-user pass nu13, NU69).
    if (!vtpu::check_usage([&] {
          vtpu::check_mlp_estimate_plan(plan);
          vtpu::check_plan_cores(plan, args.cores);
          config.check_plan_mesh_cores(plan, args.cores);
        }))
      return 2;
    // The model the estimate was made for (its model_graph), as --plan takes it: a --hidden or
    // --optimizer that contradicts it is a usage error, exit 2. Regression (new-user pass nu11,
    // NU42): a hidden-128 Adam plan was judged against a hidden-64 SGD run ("HBM 0.30x").
    if (const auto planned = vtpu::mlp_plan_model(plan);
        planned && !vtpu::check_usage([&] {
          using vtpu::plan_setting;
          plan_hidden =
              plan_setting(plan, "hidden", "fc1.out", "--hidden", planned->hidden,
                           args.hidden_option->count() > 0 ? std::optional<int64_t>(args.mlp.hidden)
                                                           : std::nullopt);
          plan_optimizer = plan_setting(
              plan, "optimizer", "model_graph.optimizer", "--optimizer", planned->optimizer,
              args.optimizer_option->count() > 0 ? std::optional<std::string>(args.mlp.optimizer)
                                                 : std::nullopt);
        })) {
      return 2;
    }
    options.num_cores = static_cast<int>(plan.num_cores());
    // The global batch defaults to the estimate's, as with --plan; another --batch is a usage
    // error (exit 2; new-user pass nu10, NU13).
    if (!args.batch_given && plan.estimated_batch() > 0) plan_batch = plan.estimated_batch();
    if (!vtpu::check_usage([&] {
          estimate = vtpu::comparable_estimate(
              plan, plan_batch ? *plan_batch : args.mlp.global_batch);
        })) {
      return 2;
    }
    if (!estimate) {
      throw vtpu::InvalidArgumentError("--estimate-from " + args.estimate_from +
                                       ": the plan has no estimate (expected a `vtpu plan "
                                       "--emit` file)");
    }
  }
  if (args.cores) options.num_cores = *args.cores;
  if (!args.hbm_bytes.empty()) options.hbm_bytes_per_core = vtpu::parse_bytes(args.hbm_bytes);
  if (!args.allocator.empty()) options.allocator = args.allocator;
  if (!args.memory_events.empty()) options.record_memory_events = true;
  options.validate();
  MlpConfig mlp = args.mlp;
  if (plan_batch) mlp.global_batch = *plan_batch;
  if (plan_hidden) mlp.hidden = *plan_hidden;
  if (plan_optimizer) mlp.optimizer = *plan_optimizer;
  if (args.lr_option->count() == 0) {
    mlp.learning_rate = vtpu::mlp_default_learning_rate(mlp.optimizer);
  }
  if (!vtpu::check_usage([&] {
        vtpu::check_micro_batches(mlp.micro_batches, mlp.global_batch, options.num_cores,
                                            "core", vtpu::count_text(options.num_cores, "core"));
      }))
    return 2;
  mlp.validate(options.num_cores);
  vtpu::HbmBreakdown peak;  // core 0 at its peak (for --estimate-from)
  if (!args.memory_profile.empty() || !args.memory_snapshot.empty() || estimate) {
    mlp.at_peak = [&args, &peak](vtpu::Runtime& rt) {
      if (!args.memory_profile.empty()) rt.save_device_memory_profile(args.memory_profile);
      if (!args.memory_snapshot.empty()) rt.save_memory_snapshot(args.memory_snapshot);
      peak = vtpu::hbm_breakdown(rt.core(0).hbm().chunk_records());
    };
  }

  const vtpu::DigitsDataset all = vtpu::load_digits_csv(args.data_path);
  const vtpu::DigitsSplit split = vtpu::split_digits(all);
  vtpu::Runtime runtime(options);
  if (!args.json) {
    std::printf(
        "vtpu train mlp: %s, %s HBM each (%s), digits %s: %lld train / "
        "%lld test rows\n",
        vtpu::count_text(options.num_cores, "virtual core").c_str(),
        vtpu::format_bytes(options.hbm_bytes_per_core).c_str(), options.allocator.c_str(),
        args.data_path.c_str(), static_cast<long long>(split.train.num_rows()),
        static_cast<long long>(split.test.num_rows()));
    std::printf("model 64->%lld->10, global batch %lld (%lld per core",
                static_cast<long long>(mlp.hidden), static_cast<long long>(mlp.global_batch),
                static_cast<long long>(mlp.global_batch / options.num_cores));
    if (mlp.micro_batches > 1) {
      std::printf(" in %lld micro-batches", static_cast<long long>(mlp.micro_batches));
    }
    std::printf("), %s lr %g, %s, seed %llu\n", mlp.optimizer == "adam" ? "Adam" : "SGD",
                static_cast<double>(mlp.learning_rate),
                vtpu::count_text(static_cast<long long>(mlp.steps), "step").c_str(),
                static_cast<unsigned long long>(mlp.seed));
    std::fflush(stdout);
  }
  auto log = [&](int64_t step, double loss) {
    if (!args.json) std::printf("step %6lld  loss %.6f\n", static_cast<long long>(step), loss);
  };
  vtpu::StepMeter meter;
  std::function<void(int64_t, double)> on_log = log;
  if (estimate) {  // a callback every step, to read the process CPU time
    on_log = meter.wrap(log, mlp.log_every, mlp.steps);
    mlp.log_every = 1;
  }
  MlpResult result;
  try {
    result = vtpu::train_mlp(runtime, split, mlp, on_log);
  } catch (const vtpu::Error&) {
    // A failed run (an OOM, most often) is when the event log matters most: it ends with the
    // failing request and holds every allocation before it. The profile and snapshot describe the
    // peak of a finished step, which a failed run does not reach; the OOM report in the error
    // gives the arena's state at the failure instead.
    if (!args.memory_events.empty()) {
      runtime.save_memory_event_log(args.memory_events);
      std::fprintf(stderr, "vtpu: wrote %s (events up to the failure)\n",
                   args.memory_events.c_str());
    }
    for (const std::string* p : {&args.memory_profile, &args.memory_snapshot}) {
      if (!p->empty()) std::fprintf(stderr, "vtpu: %s not written: the run failed\n", p->c_str());
    }
    throw;
  }
  if (!args.memory_events.empty()) runtime.save_memory_event_log(args.memory_events);
  std::optional<vtpu::EstimateReport> report;
  if (estimate) {
    vtpu::MeasuredRun measured = vtpu::measure_run(
        options.num_cores, args.mlp.steps, result.median_step_ms, meter, result.hbm,
        peak.training_set, "training set (replicated on every core)");
    measured.thread_pinning = runtime.thread_pinning();
    report = vtpu::compare_estimate(*estimate, measured);
    // New-user pass nu12, NU52: a pallas run was judged against an estimate priced from the
    // Eigen kernels' rates (--plan refuses --kernels pallas for that reason).
    if (mlp.kernels == "pallas") {
      report->mark_step_not_judged(
          "the estimate prices the Eigen kernels' measured rates; this run used --kernels "
          "pallas");
    }
    vtpu::mark_micro_batches_not_judged(*report, mlp.micro_batches);
    vtpu::add_collective_probe(*report,
                                         *estimate_plan);  // right after the run: its host mode
  }
  if (args.json) {
    nlohmann::json j = result;
    if (report) j["estimate_vs_measured"] = report->to_json();
    char lr[32];  // the f32 value as the user wrote it, not its double expansion
    std::snprintf(lr, sizeof lr, "%.7g", static_cast<double>(mlp.learning_rate));
    j["config"] = {{"steps", mlp.steps},
                   {"global_batch", mlp.global_batch},
                   {"micro_batches", mlp.micro_batches},
                   {"hidden", mlp.hidden},
                   {"optimizer", mlp.optimizer},
                   {"learning_rate", std::strtod(lr, nullptr)},
                   {"seed", mlp.seed},
                   {"data", args.data_path},
                   {"runtime", options.to_json()}};
    std::cout << j.dump(2) << std::endl;
  } else {
    print_mlp_report(result, mlp);
    if (report) std::printf("%s", report->to_string().c_str());
  }
  // Replicas that drifted apart fail the run, as a loss mismatch does (adversarial pass adv12,
  // ADV2: "NO" was printed and the run exited 0).
  return vtpu::report_replicas(result.replica_mismatch) ? 0 : 1;
}

struct BenchMemoryArgs {
  std::vector<std::string> allocators = vtpu::known_allocator_policies();
  std::vector<uint64_t> live = {1000, 10000, 100000};
  uint64_t pairs = 200000;
  uint64_t hot = 0;  // W hot buffers (0: every live buffer may be freed)
  std::string workload = "lognormal";
  std::string trace_path;
  std::string capacity = "16GiB";
  std::vector<std::string> via = {"policy", "arena"};
  uint64_t seed = 1;
  bool json = false;
};

// Accepts what vtpu::parse_bytes accepts ("16GiB", "512M", "4096").
// Checks what CLI11 cannot: names against the policy registry, the capacity against every policy
// and the workload size. Returns a message for a usage error, empty when the arguments are fine.
std::string check_bench_memory_args(const BenchMemoryArgs& args) {
  // New-user pass U14: `--allocators bfc,bfc` ran bfc twice where `vtpu stress` refuses it; each
  // list names a thing at most once, as in vtpu stress.
  const auto twice = [](const auto& list) -> std::optional<std::string> {
    for (size_t i = 0; i < list.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (list[j] == list[i]) {
          std::ostringstream value;
          value << list[i];
          return value.str();
        }
    return std::nullopt;
  };
  if (const auto name = twice(args.allocators))
    return "--allocators: allocator policy '" + *name + "' given twice (each policy runs once)";
  if (const auto via = twice(args.via))
    return "--via: '" + *via + "' given twice (each of policy, arena runs once)";
  if (const auto live = twice(args.live))
    return "--live: " + *live + " given twice (each live count runs once)";
  const uint64_t capacity = vtpu::parse_bytes(args.capacity);
  for (const std::string& name : args.allocators) {
    try {
      vtpu::make_allocator_policy(name, capacity);
    } catch (const vtpu::InvalidArgumentError& e) {
      return "--capacity " + args.capacity + " for policy " + name + ": " + e.message();
    }
  }
  for (uint64_t live : args.live) {
    if (live == 0) return "--live: 0 live buffers (expected >= 1)";
    if (args.hot > live)
      return "--hot " + std::to_string(args.hot) + " exceeds --live " + std::to_string(live) +
             " (expected 0..live)";
    if (live > vtpu::kMaxWorkloadEvents || args.pairs > (vtpu::kMaxWorkloadEvents - live) / 2)
      return "--live " + std::to_string(live) + " with --pairs " + std::to_string(args.pairs) +
             " exceeds " + std::to_string(vtpu::kMaxWorkloadEvents) + " events";
  }
  return {};
}

void print_bench_row(const vtpu::ReplayResult& r, const std::string& workload) {
  std::printf("%-10s %-6s %10s %9llu %9.1f %9.1f %10.1f %10.1f %8.1f %8.2f %6llu\n",
              r.policy.c_str(), r.through_arena ? "arena" : "policy", workload.c_str(),
              static_cast<unsigned long long>(r.latency.samples), r.latency.median_ns,
              r.latency.p99_ns, r.latency.p9999_ns, r.latency.max_ns, r.clock_overhead_ns,
              r.ops_per_second * 1e-6, static_cast<unsigned long long>(r.num_ooms));
  std::fflush(stdout);
}

int run_bench_memory(const BenchMemoryArgs& args) {
  vtpu::ReplayOptions options;
  options.capacity_bytes = vtpu::parse_bytes(args.capacity);
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json config = {{"allocators", args.allocators},
                           {"via", args.via},
                           {"capacity_bytes", options.capacity_bytes},
                           {"clock", "std::chrono::steady_clock"},
                           {"percentiles", "nearest-rank"}};
  auto header = [&] {
    if (args.json) return;
    std::printf("%-10s %-6s %10s %9s %9s %9s %10s %10s %8s %8s %6s\n", "policy", "via",
                args.trace_path.empty() ? "live" : "trace", "samples", "median_ns", "p99_ns",
                "p99.99_ns", "max_ns", "clock_ns", "Mops/s", "ooms");
  };
  auto record = [&](const vtpu::ReplayResult& r, const std::string& workload,
                    nlohmann::json extra) {
    if (args.json) {
      nlohmann::json j = r;
      j.update(extra);
      results.push_back(std::move(j));
    } else {
      print_bench_row(r, workload);
    }
  };
  if (!args.trace_path.empty()) {
    const vtpu::Trace trace = vtpu::read_trace(args.trace_path);
    const vtpu::ReplayProgram program(trace.events, args.trace_path);
    // New-user pass U15: an empty or header-only trace gave rows of 0 samples with 0.0 ns
    // medians that looked like measurements; as in `vtpu stress` (U2), it is an error.
    if (program.ops().empty()) {
      throw vtpu::InvalidArgumentError(
          "trace '" + args.trace_path + "' has no alloc or free events (" +
          std::to_string(trace.events.size()) + " events in all; expected at least one to replay)");
    }
    options.ops_per_sample = 1;
    config["trace"] = args.trace_path;
    config["trace_header"] = trace.header;
    config["events"] = trace.events.size();
    config["latency_unit"] = "op";
    if (!args.json) {
      std::printf(
          "vtpu bench memory: replay of %s (%zu events, %zu allocs and frees, %llu oom/defragment "
          "events skipped) on %zu core(s), capacity %s per core\n"
          "latency per op (one alloc or one free): steady_clock read between ops, its median "
          "cost (clock_ns) subtracted; nearest-rank percentiles. Mops/s: allocs + frees per "
          "second in a second pass without clock reads.\n",
          args.trace_path.c_str(), trace.events.size(), program.ops().size(),
          static_cast<unsigned long long>(program.skipped_events()), program.cores().size(),
          vtpu::format_bytes(options.capacity_bytes).c_str());
    }
    header();
    for (const std::string& policy : args.allocators) {
      for (const std::string& via : args.via) {
        options.through_arena = via == "arena";
        const vtpu::ReplayResult r = vtpu::replay_benchmark(policy, program, options);
        record(r, "trace", nlohmann::json::object());
      }
    }
  } else {
    vtpu::SteadyStateOptions w;
    w.pairs = args.pairs;
    w.hot_buffers = args.hot;
    w.seed = args.seed;
    w.sizes.distribution = vtpu::parse_size_distribution(args.workload);
    const std::string sizes = vtpu::describe_sizes(w.sizes);
    config["workload"] = args.workload;
    config["sizes"] = sizes;
    config["pairs"] = args.pairs;
    config["hot_buffers"] = args.hot;
    config["seed"] = args.seed;
    config["latency_unit"] = "free+alloc pair";
    if (!args.json) {
      std::printf(
          "vtpu bench memory: steady state, %s; fill to L live buffers, then %llu free+alloc "
          "pairs (%s freed, a new one allocated); capacity %s; seed %llu\n"
          "latency per free+alloc pair: steady_clock read between pairs, its median cost "
          "(clock_ns) subtracted; nearest-rank percentiles. Mops/s: allocs + frees per second "
          "in a second pass without clock reads.\n",
          sizes.c_str(), static_cast<unsigned long long>(args.pairs),
          args.hot == 0 ? "a random live buffer"
                        : ("one of the " + std::to_string(args.hot) +
                           " most recently allocated (the rest stay live)")
                              .c_str(),
          vtpu::format_bytes(options.capacity_bytes).c_str(),
          static_cast<unsigned long long>(args.seed));
    }
    header();
    // Policies side by side at each live count, so that their ratios come from one stretch of
    // machine load.
    for (uint64_t live : args.live) {
      w.live_buffers = live;
      const std::vector<vtpu::TraceEvent> events = vtpu::make_steady_state_workload(w);
      const vtpu::ReplayProgram program(events, "steady-state workload");
      options.timed_from_event = live;
      options.ops_per_sample = 2;
      for (const std::string& policy : args.allocators) {
        for (const std::string& via : args.via) {
          options.through_arena = via == "arena";
          const vtpu::ReplayResult r = vtpu::replay_benchmark(policy, program, options);
          record(r, std::to_string(live), {{"live_buffers", live}});
        }
      }
    }
  }
  if (args.json) {
    std::cout << nlohmann::json{{"config", config}, {"results", results}}.dump(2) << std::endl;
  }
  return 0;
}

struct BenchFragmentationArgs {
  std::vector<std::string> allocators = {"bfc"};
  std::vector<std::string> defrag = {"on", "off"};
  int workloads = 1000;
  int ops = 2000;
  double occupancy = 0.95;
  std::string capacity = "64MiB";
  uint64_t seed = 1;
  bool json = false;
};

int run_bench_fragmentation(const BenchFragmentationArgs& args) {
  nlohmann::json results = nlohmann::json::array();
  if (!args.json) {
    std::printf(
        "vtpu bench fragmentation: %d seeded workloads x %d allocations per policy, arena %s "
        "held at up to %.0f%% occupancy (live requested bytes), log-normal sizes (median 64 KiB, "
        "sigma 1.5, 256 B..4 MiB); seeds %llu..%llu\n"
        "false OOM: a failed allocation although total free >= the rounded request\n",
        args.workloads, args.ops, args.capacity.c_str(), 100.0 * args.occupancy,
        static_cast<unsigned long long>(args.seed),
        static_cast<unsigned long long>(args.seed + static_cast<uint64_t>(args.workloads) - 1));
    std::printf("%-10s %-7s %10s %11s %10s %9s %14s %9s %11s %10s %8s\n", "policy", "defrag",
                "workloads", "allocs", "false_oom", "true_oom", "wl_false_oom", "defrags",
                "moved_MiB", "defrag_ms", "wall_s");
  }
  for (const std::string& policy : args.allocators) {
    for (const std::string& d : args.defrag) {
      vtpu::FragmentationCheckOptions o;
      o.policy = policy;
      o.auto_defragment = d == "on";
      o.workloads = args.workloads;
      o.ops = args.ops;
      o.occupancy = args.occupancy;
      o.capacity_bytes = vtpu::parse_bytes(args.capacity);
      o.first_seed = args.seed;
      const vtpu::FragmentationCheckResult r = vtpu::run_fragmentation_check(o);
      if (args.json) {
        results.push_back({{"policy", policy},
                           {"auto_defragment", o.auto_defragment},
                           {"workloads", r.workloads},
                           {"allocations", r.allocations},
                           {"false_ooms", r.false_ooms},
                           {"true_ooms", r.true_ooms},
                           {"workloads_with_false_oom", r.workloads_with_false_oom},
                           {"defragmentations", r.defragmentations},
                           {"defrag_bytes_moved", r.bytes_moved},
                           {"defrag_time_ns", r.defrag_time_ns},
                           {"max_occupancy", r.max_occupancy},
                           {"wall_seconds", r.wall_seconds}});
      } else {
        std::printf("%-10s %-7s %10d %11llu %10llu %9llu %14d %9llu %11.1f %10.1f %8.2f\n",
                    policy.c_str(), d.c_str(), r.workloads,
                    static_cast<unsigned long long>(r.allocations),
                    static_cast<unsigned long long>(r.false_ooms),
                    static_cast<unsigned long long>(r.true_ooms), r.workloads_with_false_oom,
                    static_cast<unsigned long long>(r.defragmentations),
                    static_cast<double>(r.bytes_moved) / (1 << 20),
                    static_cast<double>(r.defrag_time_ns) * 1e-6, r.wall_seconds);
        std::fflush(stdout);
      }
    }
  }
  if (args.json) std::cout << nlohmann::json{{"results", results}}.dump(2) << std::endl;
  return 0;
}

// The text of a command-line parse error, with CLI11's wording made plain where a user trips on
// it: an option given twice (new-user pass U16: "--cores: At Most 1 required but received 2"),
// and a file name after a --json that prints to stdout (U18: `bench collectives --json out.json`
// said only that out.json was not expected, where `vtpu stress --json FILE` takes one).
std::string parse_error_text(const CLI::ParseError& e, int argc, char** argv) {
  std::string text = e.what();
  static const std::regex kTwice(R"(^(-[^:]+): At Most 1 required but received (\d+)$)");
  if (std::smatch m; std::regex_match(text, m, kTwice))
    return m[1].str() + " given " + m[2].str() + " times (expected at most once)";
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    // New-user pass nu15, NU102: CLI11 lists the unexpected words last first ("2x4 --mesh"). Put
    // them in command-line order: the list is the reverse of a subsequence of argv, so take the
    // words of argv, first to last, that the list ends with.
    for (const std::string lead : {"The following arguments were not expected: ",
                                   "The following argument was not expected: "}) {
      if (!text.starts_with(lead)) continue;
      std::string rest = text.substr(lead.size());
      std::vector<std::string> words;
      for (int i = 1; i < argc && !rest.empty(); ++i) {
        const std::string word = argv[i];
        if (word.empty() || !rest.ends_with(word)) continue;
        if (rest.size() == word.size()) {
          rest.clear();
        } else if (rest[rest.size() - word.size() - 1] == ' ') {
          rest.resize(rest.size() - word.size() - 1);
        } else {
          continue;
        }
        words.push_back(word);
      }
      if (rest.empty()) text = lead + vtpu::join(words, " ");
    }
    // A JAX user gives the digits trainers a mesh (train transformer and vtpu plan take --mesh);
    // vtpu plan a core count.
    const auto given = [&](const std::string& flag) {
      for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == flag || a.starts_with(flag + "=")) return true;
      }
      return false;
    };
    const std::string command = argc > 2 ? std::string(argv[1]) + " " + argv[2] : "";
    if ((command == "train mlp" || command == "train fsdp") && given("--mesh")) {
      return text + " (vtpu " + command +
             " takes no --mesh: give --cores N for an N-core 1-D run, or a mesh through a plan: "
             "vtpu plan examples/models/mlp.json --mesh 2x4 --emit PLAN.json, then vtpu " +
             command + " --plan PLAN.json)";
    }
    if (argc > 1 && std::string(argv[1]) == "plan" && given("--cores")) {
      return text +
             " (vtpu plan takes no --cores: give --mesh N for N devices on one axis, or "
             "--mesh 2x4 for a 2-D mesh)";
    }
    for (int i = 1; i + 1 < argc; ++i) {
      const std::string next = argv[i + 1];
      if (std::string(argv[i]) == "--json" && !next.empty() && next[0] != '-' &&
          text.find(next) != std::string::npos)
        return text +
               " (here --json takes no file name: it prints the JSON on stdout; redirect "
               "it: --json > " +
               next + ")";
    }
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "vtpu: a virtual TPU pod on one machine (virtual cores, HBM arenas, collectives, "
      "sharding)"};
  app.require_subcommand(1);
  CLI::App* train = app.add_subcommand("train", "Train an example model across virtual cores");
  // No hard requirement here, so that `vtpu train nope` reports the unexpected "nope" by name.
  train->require_subcommand(0, 1);
  CLI::App* mlp = train->add_subcommand(
      "mlp",
      "64->H->10 MLP on the UCI handwritten digits (ReLU, softmax cross-entropy, SGD or "
      "Adam): data parallel, or with --plan any strategy of a `vtpu plan` file");
  TrainArgs args;
  mlp->add_option("--cores", args.cores, "Virtual cores (default 8, or num_cores of --config)")
      ->check(CLI::Range(1, 1024));
  mlp->add_option("--steps", args.mlp.steps, "Optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  CLI::Option* mlp_batch =
      mlp->add_option("--batch", args.mlp.global_batch,
                      "Global batch (rows per step over all cores; a multiple of --cores; with "
                      "--plan, default the plan's)")
          ->capture_default_str()
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  args.hidden_option =
      mlp->add_option("--hidden", args.mlp.hidden, "Hidden units (with --plan, default the plan's)")
          ->capture_default_str()
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  args.lr_option =
      mlp->add_option(
             "--lr", args.mlp.learning_rate,
             "Learning rate (> 0; default 0.2 with sgd, 1e-3 with adam as torch.optim.Adam)")
          ->check(vtpu::learning_rate_validator());
  args.optimizer_option =
      mlp->add_option("--optimizer", args.mlp.optimizer,
                      "sgd (plain SGD, no state) or adam (Adam with bias correction, betas "
                      "0.9/0.999, eps 1e-8; m and v replicated like the parameters; with --plan, "
                      "default the plan's)")
          ->capture_default_str()
          ->check(CLI::IsMember({"sgd", "adam"}));
  mlp->add_option("--micro-batches", args.mlp.micro_batches,
                  "Gradient accumulation: each core computes its rows as K micro-batches and sums "
                  "their gradients in order before the all-reduce (K divides batch / cores); "
                  "--cores 1 --micro-batches N repeats the f32 sums of --cores N exactly")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  mlp->add_option("--seed", args.mlp.seed, "Seed for parameter init and batch order, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(vtpu::seed_validator());
  mlp->add_option("--data", args.data_path, "digits.csv.gz from Debian python3-sklearn")
      ->capture_default_str();
  mlp->add_option("--hbm-bytes", args.hbm_bytes, "HBM per core, e.g. 16G, 512M (default 16G)")
      ->check(vtpu::size_validator());
  vtpu::add_runtime_config_option(
      *mlp, args.config_path,
      "num_cores is the default of --cores and must match a --plan or --estimate-from mesh; "
      "--hbm-bytes and --allocator replace their keys");
  mlp->add_option("--kernels", args.mlp.kernels,
                  "Forward/backward compute: eigen (Eigen over HBM) or pallas (pipelined kernels "
                  "streaming blocks through VMEM with the DMA engine)")
      ->capture_default_str()
      ->check(CLI::IsMember({"eigen", "pallas"}));
  mlp->add_option("--allocator", args.allocator,
                  "HBM allocator policy: " + vtpu::join(vtpu::known_allocator_policies(), "|") +
                      " (default bfc, or allocator of --config)")
      ->check(CLI::IsMember(vtpu::known_allocator_policies()));
  mlp->add_option("--memory-profile", args.memory_profile,
                  "Write a pprof device memory profile (gzipped profile.proto, as "
                  "jax.profiler.save_device_memory_profile) after the last step, before its step "
                  "buffers are freed (not written if the run fails)");
  mlp->add_option("--memory-snapshot", args.memory_snapshot,
                  "Write a JSON snapshot of every core's chunks after the last step, before its "
                  "step buffers are freed (not written if the run fails)");
  mlp->add_option("--memory-events", args.memory_events,
                  "Record every core's alloc/free/oom/defragment events and write them as a "
                  "vtpu trace (JSON Lines), also when the run fails");
  mlp->add_option("--log-every", args.mlp.log_every, "Print the loss every K steps (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  mlp->add_option("--estimate-from", args.estimate_from,
                  "A `vtpu plan --emit` file for this plain run (data parallel, its mesh's cores): "
                  "print its estimated step time and HBM per core against the measured ones "
                  "(--plan prints the same for any plan it runs)");
  mlp->add_flag("--json", args.json, "Print the result as JSON (with the per-step losses)");
  mlp->add_option("--plan", args.plan_path,
                  "Run a `vtpu plan` file for the mlp model: data parallel, FSDP or (data x) "
                  "Megatron tensor parallel as it says, checked against 1 core "
                  "(cli/train_mlp_plan_command.h)");

  const auto transformer = vtpu::add_train_transformer_command(*train);

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(0, 1);
  CLI::App* memory = bench->add_subcommand(
      "memory",
      "Allocator policy latency and throughput: a steady-state workload at several live "
      "buffer counts, or a trace replay");
  BenchMemoryArgs bench_args;
  memory
      ->add_option("--allocators", bench_args.allocators,
                   "Comma-separated policies (default: every known policy: " +
                       vtpu::join(vtpu::known_allocator_policies(), ",") + ")")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& s) {
            for (const std::string& k : vtpu::known_allocator_policies())
              if (s == k) return std::string();
            return "unknown allocator policy '" + s +
                   "' (expected one of: " + vtpu::join(vtpu::known_allocator_policies()) + ")";
          },
          "POLICY"));
  CLI::Option* live_opt =
      memory->add_option("--live", bench_args.live, "Comma-separated live buffer counts L")
          ->delimiter(',')
          ->capture_default_str()
          ->check(CLI::Range(uint64_t{1}, vtpu::kMaxWorkloadEvents));
  CLI::Option* pairs_opt =
      memory->add_option("--pairs", bench_args.pairs, "Timed free+alloc pairs per run")
          ->capture_default_str()
          ->check(CLI::Range(uint64_t{1}, vtpu::kMaxWorkloadEvents / 2));
  CLI::Option* hot_opt =
      memory
          ->add_option("--hot", bench_args.hot,
                       "Free one of the W most recently allocated buffers; the other L-W stay "
                       "live (0: any live buffer)")
          ->capture_default_str();
  CLI::Option* workload_opt =
      memory->add_option("--workload", bench_args.workload, "Size distribution")
          ->capture_default_str()
          ->check(CLI::IsMember({"uniform", "lognormal", "bimodal"}));
  memory
      ->add_option("--trace", bench_args.trace_path,
                   "Replay a vtpu trace (JSON Lines) instead of the steady-state workload")
      ->excludes(live_opt)
      ->excludes(pairs_opt)
      ->excludes(hot_opt)
      ->excludes(workload_opt);
  memory->add_option("--capacity", bench_args.capacity, "Bytes per policy, e.g. 16GiB, 512M")
      ->capture_default_str()
      ->check(vtpu::size_validator());
  memory
      ->add_option("--via", bench_args.via,
                   "Comma-separated: policy (bare), arena (metadata-only HbmArena over it)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"policy", "arena"}));
  memory->add_option("--seed", bench_args.seed, "Workload seed, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(vtpu::seed_validator());
  memory->add_flag("--json", bench_args.json, "Print the configuration and results as JSON");
  CLI::App* frag = bench->add_subcommand(
      "fragmentation",
      "Seeded random workloads near a target occupancy: out-of-memory failures that total free "
      "bytes would have covered (false OOMs), with and without auto-defragmentation");
  BenchFragmentationArgs frag_args;
  frag->add_option("--allocators", frag_args.allocators, "Comma-separated policies")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember(vtpu::known_allocator_policies()));
  frag->add_option("--defrag", frag_args.defrag, "Comma-separated: on, off")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  frag->add_option("--workloads", frag_args.workloads, "Seeded workloads per policy")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  frag->add_option("--ops", frag_args.ops, "Allocations per workload")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  frag->add_option("--occupancy", frag_args.occupancy,
                   "Upper bound of live requested bytes / capacity, in (0, 1]")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  frag->add_option("--capacity", frag_args.capacity, "Arena bytes, e.g. 64MiB")
      ->capture_default_str()
      ->check(vtpu::size_validator());
  frag->add_option("--seed", frag_args.seed, "First seed, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(vtpu::seed_validator());
  frag->add_flag("--json", frag_args.json, "Print the results as JSON");
  const auto fsdp = vtpu::add_train_fsdp_command(*train);
  const auto collectives = vtpu::add_bench_collectives_command(*bench);
  const auto reshard = vtpu::add_reshard_command(app);
  const auto stress = vtpu::add_stress_command(app);
  const auto kernel = vtpu::add_bench_kernel_command(*bench);
  const auto plan = vtpu::add_plan_command(app);
  const auto usage_error = [](const std::string& what) {
    std::fprintf(stderr, "vtpu: usage error: %s\nRun with --help for the options.\n", what.c_str());
    return 2;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return usage_error(parse_error_text(e, argc, argv));
  }
  if (*train && train->get_subcommands().empty()) {
    std::fprintf(stderr, "vtpu train: expected a model name (mlp, transformer, fsdp)\n%s",
                 train->help().c_str());
    return 2;
  }
  if (*bench && bench->get_subcommands().empty()) {
    std::fprintf(stderr,
                 "vtpu bench: expected a benchmark name (memory, fragmentation, collectives, "
                 "kernel, hardware)\n%s",
                 bench->help().c_str());
    return 2;
  }
  if (*memory) {
    if (const std::string problem = check_bench_memory_args(bench_args); !problem.empty()) {
      return usage_error(problem);
    }
  }
  args.batch_given = mlp_batch->count() > 0;
  try {
    if (*mlp) return run_train_mlp(args);
    if (int code = 0; vtpu::run_train_transformer_if_selected(*transformer, &code))
      return code;
    if (int code = 0; vtpu::run_train_fsdp_if_selected(*fsdp, &code)) return code;
    if (*memory) return run_bench_memory(bench_args);
    if (*frag) return run_bench_fragmentation(frag_args);
    if (int code = 0; vtpu::run_bench_collectives_if_selected(*collectives, &code))
      return code;
    if (int code = 0; vtpu::run_reshard_if_selected(*reshard, &code)) return code;
    if (int code = 0; vtpu::run_stress_if_selected(*stress, argc, argv, &code))
      return code;
    if (int code = 0; vtpu::run_bench_kernel_if_selected(*kernel, &code)) return code;
    if (int code = 0; vtpu::run_plan_if_selected(*plan, &code)) return code;
  } catch (const vtpu::Error& e) {
    std::fprintf(stderr, "vtpu: error: %s\n", e.what());
    return 1;
  } catch (const CLI::ParseError& e) {
    // An option value that can only be checked once the command has run part way (vtpu plan
    // --strategy: the candidates' names depend on the mesh).
    return usage_error(parse_error_text(e, argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vtpu: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
