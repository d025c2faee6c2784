#include "vtpu/cli/stress_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/soak_command.h"
#include "vtpu/common/error.h"
#include "vtpu/common/output_path.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/stress/stress_flags.h"
#include "vtpu/stress/stress_harness.h"
#include "vtpu/stress/stress_html_output.h"

namespace vtpu {

struct StressCommand {
  CLI::App* app = nullptr;
  StressOptions options;
  std::string allocators = "bfc";
  std::string auto_defragment = "both";
  std::string hbm_bytes = "16G";
  std::string activation_bytes, weight_bytes, kv_block_bytes, bucket_bytes;
  std::string load = "on";
  std::string capacity_search = "on";
  std::string capacity_search_max;
  std::string seed = "1";
  std::string json_path;
  std::string html_path;
  std::shared_ptr<SoakCommand> soak;  // `vtpu stress soak`
};

namespace {

// Draws format_stress_progress's line (the phase, its bar and counts) on stderr, from a thread
// of its own, when stderr is a terminal and the run has lasted a second; erases the line when
// done.
class ProgressBar {
 public:
  explicit ProgressBar(StressOptions::Progress* p) : p_(p) {
    if (isatty(fileno(stderr)) != 0) thread_ = std::thread([this] { loop(); });
  }
  ~ProgressBar() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    const auto start = std::chrono::steady_clock::now();
    size_t drawn = 0;  // characters of the last line drawn
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return done_; })) {
      if (std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) continue;
      std::string text = format_stress_progress(*p_);
      const size_t width = text.size();
      if (width < drawn) text.append(drawn - width, ' ');  // cover a longer previous line
      std::fprintf(stderr, "\r%s", text.c_str());
      std::fflush(stderr);
      drawn = width;
    }
    if (drawn > 0) std::fprintf(stderr, "\r%s\r", std::string(drawn, ' ').c_str());
  }

  StressOptions::Progress* p_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace

std::shared_ptr<StressCommand> add_stress_command(CLI::App& app) {
  auto cmd = std::make_shared<StressCommand>();
  StressOptions& o = cmd->options;
  CLI::App* s = app.add_subcommand(
      "stress",
      "Fragmentation stress harness: a seeded workload or a trace replayed on every core at once "
      "(with all-reduces, matmuls and cross-core frees alongside), allocator policies compared "
      "side by side on the same events");
  cmd->app = s;
  s->add_option("--cores", o.cores, "Virtual cores")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  s->add_option("--workload", o.workload.name, "Generated workload")
      ->capture_default_str()
      ->check(CLI::IsMember(stress_workload_names()));
  s->add_option("--trace", o.trace_path,
                "Replay a vtpu trace (JSON Lines); an event of core c runs on core c % --cores. "
                "Not with the generator options (--workload, --events, --seed, ...)")
      ->check(CLI::ExistingFile);
  s->add_option("--allocators", cmd->allocators,
                "Comma-separated policies: " + join(known_allocator_policies(), ",") +
                    ",planned (planned: a heap plan made from each core's stream)")
      ->capture_default_str();
  s->add_option("--auto-defragment", cmd->auto_defragment,
                "When arenas compact, one run per mode, comma-separated: on (on a fragmentation "
                "OOM, then retry), growth (also before a request would raise the reserved "
                "footprint, when compacting lets it land lower), off; both = on,off")
      ->capture_default_str()
      ->check(parse_validator([](const std::string& s) { parse_defrag_modes(s); }, "MODES",
                              "--auto-defragment"));
  s->add_option("--hbm-bytes", cmd->hbm_bytes,
                "Arena capacity per core (K, M, G, T = 1024^n; 16G = 16GB = 16GiB)")
      ->capture_default_str()
      ->check(size_validator());
  s->add_option("--seed", cmd->seed, "Workload seed, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  s->add_option("--events", o.workload.events_per_core,
                "Events per core, exactly (generated workloads: the last step may be cut short)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, kMaxWorkloadEvents));
  s->add_option("--layers", o.workload.layers, "training_step/variable_batch: layers")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  s->add_option("--activation-bytes", cmd->activation_bytes,
                "training_step/variable_batch: mean activation per layer (default 8M)")
      ->check(size_validator());
  s->add_option("--weight-bytes", cmd->weight_bytes,
                "training_step/variable_batch: mean weight per layer (default 2M)")
      ->check(size_validator());
  s->add_option("--live", o.workload.live_buffers,
                "uniform/lognormal/bimodal: live buffers in the steady state")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, kMaxWorkloadEvents));
  s->add_option("--max-requests", o.workload.max_requests, "kv_cache: concurrent requests")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  s->add_option("--kv-block-bytes", cmd->kv_block_bytes, "kv_cache: bytes per block (default 64K)")
      ->check(size_validator());
  s->add_option("--max-blocks", o.workload.max_blocks, "kv_cache: longest request, in blocks")
      ->capture_default_str()
      ->check(CLI::Range(4, 1000000));
  s->add_option("--load", cmd->load,
                "on: all-reduces, matmuls and cross-core frees run alongside; off: replay only "
                "(deterministic)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  s->add_option("--collective-rounds", o.collective_rounds, "All-reduces per core per run")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000000));
  s->add_option("--bucket-bytes", cmd->bucket_bytes, "All-reduce gradient bucket (default 256K)")
      ->check(size_validator());
  s->add_option("--cross-core-frees", o.cross_core_free_per_mille,
                "Frees handed to the next core, per mille")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  s->add_option("--cross-core-free-lag", o.cross_core_free_max_lag,
                "A cross-core free lands within this many of the owner's events (0: before its "
                "next event)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  s->add_flag("--backing", o.backing,
              "Real bytes: fill every buffer, checksum it, verify after every defragmentation "
              "and at the end");
  s->add_flag("--stop-on-oom", o.stop_on_oom,
              "Stop at the first out-of-memory, print its full report and exit 1");
  s->add_option("--capacity-search", cmd->capacity_search,
                "Bisect the smallest capacity with no OOM per core: on or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  s->add_option("--capacity-search-max", cmd->capacity_search_max,
                "Largest capacity the search tries, the same for every policy (K, M, G, T; default "
                "max(4 x --hbm-bytes, 64G)); a policy that needs more shows >SIZE")
      ->check(size_validator());
  s->add_option("--json", cmd->json_path, "Write the full report (every figure) as JSON")
      ->check(nonempty_path_validator());
  s->add_option("--html", cmd->html_path, "Write a self-contained HTML report")
      ->check(nonempty_path_validator());
  s->require_subcommand(0, 1);
  cmd->soak = add_soak_command(*s);
  return cmd;
}

bool run_stress_if_selected(const StressCommand& cmd, int argc, char** argv, int* exit_code) {
  if (cmd.app == nullptr || !cmd.app->parsed()) return false;
  if (!cmd.app->get_subcommands().empty()) {  // `vtpu stress soak`
    // The replay's options do not apply to the soak, which takes its own after `soak`.
    for (const CLI::Option* opt : cmd.app->get_options()) {
      if (opt->count() > 0) {
        *exit_code = report_usage_error(opt->get_name() +
                                        " is a `vtpu stress` option (the soak's follow `soak`)");
        return true;
      }
    }
    return run_soak_if_selected(*cmd.soak, exit_code);
  }
  StressOptions o = cmd.options;
  try {
    o.under_load = cmd.load == "on";
    o.search_capacity = cmd.capacity_search == "on";
    check_stress_options_apply(
        o, [&](std::string_view flag) { return cmd.app->count(std::string(flag)) > 0; });
    o.allocators = split_comma_list(cmd.allocators);
    o.defrag_modes = parse_defrag_modes(cmd.auto_defragment);
    o.hbm_bytes = parse_bytes(cmd.hbm_bytes);
    o.workload.seed = parse_seed(cmd.seed);
    for (const char* flag : {"--json", "--html"}) {
      const std::string& path = std::string(flag) == "--json" ? cmd.json_path : cmd.html_path;
      if (cmd.app->count(flag) > 0 && path.empty())
        throw InvalidArgumentError(std::string(flag) + " was given an empty path");
    }
    if (!cmd.activation_bytes.empty())
      o.workload.activation_bytes = parse_bytes(cmd.activation_bytes);
    if (!cmd.weight_bytes.empty()) o.workload.weight_bytes = parse_bytes(cmd.weight_bytes);
    if (!cmd.kv_block_bytes.empty()) o.workload.kv_block_bytes = parse_bytes(cmd.kv_block_bytes);
    if (!cmd.bucket_bytes.empty()) o.bucket_bytes = parse_bytes(cmd.bucket_bytes);
    if (!cmd.capacity_search_max.empty()) {
      o.capacity_search_max_bytes = parse_bytes(cmd.capacity_search_max);
      if (o.capacity_search_max_bytes < 4 * kKiB)
        throw InvalidArgumentError("--capacity-search-max " + cmd.capacity_search_max +
                                   " (expected at least 4K)");
    }
    for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
    o.validate();
    check_output_path("--json", cmd.json_path);
    check_output_path("--html", cmd.html_path);
    check_distinct_outputs("--json", cmd.json_path, "--html", cmd.html_path,
                           "the HTML page would overwrite the JSON");
    // An output over the replayed trace would replace it.
    check_outputs_not_inputs({{"--json", cmd.json_path}, {"--html", cmd.html_path}},
                             {{"--trace", o.trace_path}});
  } catch (const InvalidArgumentError& e) {
    *exit_code = report_usage_error(e.message());
    return true;
  }
  try {
    StressOptions::Progress progress;
    o.progress = &progress;
    nlohmann::json report;
    {
      ProgressBar bar(&progress);
      report = run_stress(o);
    }
    std::fputs(format_stress_table(report).c_str(), stdout);
    if (!cmd.json_path.empty()) {
      write_output_file("--json", cmd.json_path, report.dump(1) + "\n");
    }
    if (!cmd.html_path.empty()) write_stress_html(report, cmd.html_path);
    *exit_code = stress_exit_code(report);
    if (*exit_code != 0) {
      uint64_t integrity_failures = 0, failed_runs = 0, runs_not_run = 0;
      for (const auto& run : report["runs"]) {
        integrity_failures += run["summary"]["integrity_failures"].get<uint64_t>();
        if (run.value("failed", false)) {
          ++failed_runs;
        } else if (run.contains("error")) {
          ++runs_not_run;
        }
      }
      std::fprintf(
          stderr,
          "vtpu: error: %llu failed runs (FAILED above, with their errors), %llu runs that "
          "could not start (not run above, with the reason), %llu buffer checksum failures and "
          "%llu wrong all-reduce results\n",
          static_cast<unsigned long long>(failed_runs),
          static_cast<unsigned long long>(runs_not_run),
          static_cast<unsigned long long>(integrity_failures),
          static_cast<unsigned long long>(report["load"]["all_reduce_failures"].get<uint64_t>()));
    }
  } catch (const OutOfMemoryError& e) {
    std::fprintf(stderr, "vtpu: error: ResourceExhausted: out of memory (--stop-on-oom)\n%s\n",
                 e.report().to_string().c_str());
    *exit_code = 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "vtpu: error: %s\n", e.what());
    *exit_code = 1;
  }
  return true;
}

}  // namespace vtpu
