#include "vtpu/cli/bench_memory_command.h"

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/bench/policy_benchmark.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/trace.h"
#include "vtpu/stress/alloc_workload.h"

namespace vtpu {

struct BenchMemoryCommand {
  CLI::App* app = nullptr;
  std::vector<std::string> allocators = known_allocator_policies();
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

namespace {

// Accepts what parse_bytes accepts ("16GiB", "512M", "4096").
// Checks what CLI11 cannot: names against the policy registry, the capacity against every policy
// and the workload size. Returns a message for a usage error, empty when the arguments are fine.
std::string check_args(const BenchMemoryCommand& args) {
  // Each list names a thing at most once, as in vtpu stress: a policy given twice would run twice.
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
  const uint64_t capacity = parse_bytes(args.capacity);
  for (const std::string& name : args.allocators) {
    try {
      make_allocator_policy(name, capacity);
    } catch (const InvalidArgumentError& e) {
      return "--capacity " + args.capacity + " for policy " + name + ": " + e.message();
    }
  }
  for (uint64_t live : args.live) {
    if (live == 0) return "--live: 0 live buffers (expected >= 1)";
    if (args.hot > live)
      return "--hot " + std::to_string(args.hot) + " exceeds --live " + std::to_string(live) +
             " (expected 0..live)";
    if (live > kMaxWorkloadEvents || args.pairs > (kMaxWorkloadEvents - live) / 2)
      return "--live " + std::to_string(live) + " with --pairs " + std::to_string(args.pairs) +
             " exceeds " + std::to_string(kMaxWorkloadEvents) + " events";
  }
  return {};
}

void print_bench_row(const ReplayResult& r, const std::string& workload) {
  std::printf("%-10s %-6s %10s %9llu %9.1f %9.1f %10.1f %10.1f %8.1f %8.2f %6llu\n",
              r.policy.c_str(), r.through_arena ? "arena" : "policy", workload.c_str(),
              static_cast<unsigned long long>(r.latency.samples), r.latency.median_ns,
              r.latency.p99_ns, r.latency.p9999_ns, r.latency.max_ns, r.clock_overhead_ns,
              r.ops_per_second * 1e-6, static_cast<unsigned long long>(r.num_ooms));
  std::fflush(stdout);
}

int run(const BenchMemoryCommand& args) {
  ReplayOptions options;
  options.capacity_bytes = parse_bytes(args.capacity);
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
  auto record = [&](const ReplayResult& r, const std::string& workload, nlohmann::json extra) {
    if (args.json) {
      nlohmann::json j = r;
      j.update(extra);
      results.push_back(std::move(j));
    } else {
      print_bench_row(r, workload);
    }
  };
  if (!args.trace_path.empty()) {
    const Trace trace = read_trace(args.trace_path);
    const ReplayProgram program(trace.events, args.trace_path);
    // An empty or header-only trace would give rows of 0 samples with 0.0 ns medians that look
    // like measurements; as in `vtpu stress`, it is an error.
    if (program.ops().empty()) {
      throw InvalidArgumentError("trace '" + args.trace_path + "' has no alloc or free events (" +
                                 std::to_string(trace.events.size()) +
                                 " events in all; expected at least one to replay)");
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
          format_bytes(options.capacity_bytes).c_str());
    }
    header();
    for (const std::string& policy : args.allocators) {
      for (const std::string& via : args.via) {
        options.through_arena = via == "arena";
        const ReplayResult r = replay_benchmark(policy, program, options);
        record(r, "trace", nlohmann::json::object());
      }
    }
  } else {
    SteadyStateOptions w;
    w.pairs = args.pairs;
    w.hot_buffers = args.hot;
    w.seed = args.seed;
    w.sizes.distribution = parse_size_distribution(args.workload);
    const std::string sizes = describe_sizes(w.sizes);
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
          format_bytes(options.capacity_bytes).c_str(), static_cast<unsigned long long>(args.seed));
    }
    header();
    // Policies side by side at each live count, so that their ratios come from one stretch of
    // machine load.
    for (uint64_t live : args.live) {
      w.live_buffers = live;
      const std::vector<TraceEvent> events = make_steady_state_workload(w);
      const ReplayProgram program(events, "steady-state workload");
      options.timed_from_event = live;
      options.ops_per_sample = 2;
      for (const std::string& policy : args.allocators) {
        for (const std::string& via : args.via) {
          options.through_arena = via == "arena";
          const ReplayResult r = replay_benchmark(policy, program, options);
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

}  // namespace

std::shared_ptr<BenchMemoryCommand> add_bench_memory_command(CLI::App& bench) {
  auto cmd = std::make_shared<BenchMemoryCommand>();
  CLI::App* memory = cmd->app = bench.add_subcommand(
      "memory",
      "Allocator policy latency and throughput: a steady-state workload at several live "
      "buffer counts, or a trace replay");
  memory
      ->add_option("--allocators", cmd->allocators,
                   "Comma-separated policies (default: every known policy: " +
                       join(known_allocator_policies(), ",") + ")")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& s) {
            for (const std::string& k : known_allocator_policies())
              if (s == k) return std::string();
            return "unknown allocator policy '" + s +
                   "' (expected one of: " + join(known_allocator_policies()) + ")";
          },
          "POLICY"));
  CLI::Option* live_opt =
      memory->add_option("--live", cmd->live, "Comma-separated live buffer counts L")
          ->delimiter(',')
          ->capture_default_str()
          ->check(CLI::Range(uint64_t{1}, kMaxWorkloadEvents));
  CLI::Option* pairs_opt =
      memory->add_option("--pairs", cmd->pairs, "Timed free+alloc pairs per run")
          ->capture_default_str()
          ->check(CLI::Range(uint64_t{1}, kMaxWorkloadEvents / 2));
  CLI::Option* hot_opt =
      memory
          ->add_option("--hot", cmd->hot,
                       "Free one of the W most recently allocated buffers; the other L-W stay "
                       "live (0: any live buffer)")
          ->capture_default_str();
  CLI::Option* workload_opt = memory->add_option("--workload", cmd->workload, "Size distribution")
                                  ->capture_default_str()
                                  ->check(CLI::IsMember({"uniform", "lognormal", "bimodal"}));
  memory
      ->add_option("--trace", cmd->trace_path,
                   "Replay a vtpu trace (JSON Lines) instead of the steady-state workload")
      ->excludes(live_opt)
      ->excludes(pairs_opt)
      ->excludes(hot_opt)
      ->excludes(workload_opt)
      ->check(nonempty_path_validator());
  memory->add_option("--capacity", cmd->capacity, "Bytes per policy, e.g. 16GiB, 512M")
      ->capture_default_str()
      ->check(size_validator());
  memory
      ->add_option("--via", cmd->via,
                   "Comma-separated: policy (bare), arena (metadata-only HbmArena over it)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"policy", "arena"}));
  memory->add_option("--seed", cmd->seed, "Workload seed, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  memory->add_flag("--json", cmd->json, "Print the configuration and results as JSON");
  return cmd;
}

bool run_bench_memory_if_selected(const BenchMemoryCommand& command, int* exit_code) {
  if (!command.app->parsed()) return false;
  if (const std::string problem = check_args(command); !problem.empty()) {
    *exit_code = report_usage_error(problem);
    return true;
  }
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
