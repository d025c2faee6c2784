#include "vtpu/cli/soak_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "vtpu/cli/cli_validators.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/stress/soak.h"

namespace vtpu {

struct SoakCommand {
  CLI::App* app = nullptr;
  SoakOptions options;
  std::string hbm_bytes = "16M";
  std::string defragment = "on";
  std::string seed = "1";
  bool json = false;
};

std::shared_ptr<SoakCommand> add_soak_command(CLI::App& stress) {
  auto cmd = std::make_shared<SoakCommand>();
  SoakOptions& o = cmd->options;
  CLI::App* s = stress.add_subcommand(
      "soak",
      "Soak: every core churns allocations near full in a backed arena with automatic "
      "defragmentation while all cores all-reduce, for a given time; every live buffer's "
      "checksum is checked after each compaction");
  cmd->app = s;
  s->add_option("--seconds", o.seconds, "Wall time, seconds")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e7));
  s->add_option("--cores", o.cores, "Virtual cores")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  s->add_option("--allocator", o.policy, "Allocator policy")
      ->capture_default_str()
      ->check(CLI::IsMember(known_allocator_policies()));
  s->add_option("--hbm-bytes", cmd->hbm_bytes, "Backed arena per core (K, M, G = 1024^n)")
      ->capture_default_str()
      ->check(size_validator());
  s->add_option("--occupancy", o.occupancy, "Live churn bytes kept under this share of the arena")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1.0));
  s->add_option("--defragment", cmd->defragment,
                "on: compact on a fragmentation OOM, then retry; growth: also before a request "
                "would raise the arena's footprint")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "growth"}));
  s->add_option("--seed", cmd->seed, "Churn seed, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  s->add_flag("--json", cmd->json, "Print the counters (totals and per core) as JSON");
  return cmd;
}

bool run_soak_if_selected(const SoakCommand& cmd, int* exit_code) {
  if (cmd.app == nullptr || !cmd.app->parsed()) return false;
  SoakOptions o = cmd.options;
  try {
    o.hbm_bytes = parse_bytes(cmd.hbm_bytes);
    o.defragment_before_growth = cmd.defragment == "growth";
    o.seed = parse_seed(cmd.seed);
    o.validate();
  } catch (const InvalidArgumentError& e) {
    *exit_code = report_usage_error(e.message());
    return true;
  }
  try {
    const SoakResult r = run_soak(o);
    if (cmd.json) {
      std::printf("%s\n", soak_json(o, r).dump(1).c_str());
    } else {
      std::fputs(format_soak_summary(o, r).c_str(), stdout);
    }
    *exit_code = soak_exit_code(r);
    if (*exit_code != 0) {
      std::fprintf(stderr,
                   "vtpu: error: soak found %llu checksum mismatches, %llu lost buffers and %llu "
                   "wrong all-reduce results\n",
                   static_cast<unsigned long long>(r.total.checksum_mismatches),
                   static_cast<unsigned long long>(r.total.lost_buffers),
                   static_cast<unsigned long long>(r.total.all_reduce_failures));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "vtpu: error: %s\n", e.what());
    *exit_code = 1;
  }
  return true;
}

}  // namespace vtpu
