#include "vtpu/cli/bench_fragmentation_command.h"

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vtpu/cli/cli_validators.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/stress/fragmentation_check.h"

namespace vtpu {

struct BenchFragmentationCommand {
  CLI::App* app = nullptr;
  std::vector<std::string> allocators = {"bfc"};
  std::vector<std::string> defrag = {"on", "off"};
  int workloads = 1000;
  int ops = 2000;
  double occupancy = 0.95;
  std::string capacity = "64MiB";
  uint64_t seed = 1;
  bool json = false;
};

namespace {

int run(const BenchFragmentationCommand& args) {
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
      FragmentationCheckOptions o;
      o.policy = policy;
      o.auto_defragment = d == "on";
      o.workloads = args.workloads;
      o.ops = args.ops;
      o.occupancy = args.occupancy;
      o.capacity_bytes = parse_bytes(args.capacity);
      o.first_seed = args.seed;
      const FragmentationCheckResult r = run_fragmentation_check(o);
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

}  // namespace

std::shared_ptr<BenchFragmentationCommand> add_bench_fragmentation_command(CLI::App& bench) {
  auto cmd = std::make_shared<BenchFragmentationCommand>();
  CLI::App* frag = cmd->app = bench.add_subcommand(
      "fragmentation",
      "Seeded random workloads near a target occupancy: out-of-memory failures that total free "
      "bytes would have covered (false OOMs), with and without auto-defragmentation");
  frag->add_option("--allocators", cmd->allocators, "Comma-separated policies")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember(known_allocator_policies()));
  frag->add_option("--defrag", cmd->defrag, "Comma-separated: on, off")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  frag->add_option("--workloads", cmd->workloads, "Seeded workloads per policy")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  frag->add_option("--ops", cmd->ops, "Allocations per workload")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  frag->add_option("--occupancy", cmd->occupancy,
                   "Upper bound of live requested bytes / capacity, in (0, 1]")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  frag->add_option("--capacity", cmd->capacity, "Arena bytes, e.g. 64MiB")
      ->capture_default_str()
      ->check(size_validator());
  frag->add_option("--seed", cmd->seed, "First seed, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  frag->add_flag("--json", cmd->json, "Print the results as JSON");
  return cmd;
}

bool run_bench_fragmentation_if_selected(const BenchFragmentationCommand& command, int* exit_code) {
  if (!command.app->parsed()) return false;
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
