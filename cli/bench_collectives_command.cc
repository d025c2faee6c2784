#include "vtpu/cli/bench_collectives_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/bench/calibration.h"
#include "vtpu/bench/collective_bench.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/run_processes.h"
#include "vtpu/common/error.h"
#include "vtpu/common/output_path.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/train/train_runtime_config.h"

namespace vtpu {

struct BenchCollectivesCommand {
  CLI::App* app = nullptr;
  CollectiveBenchOptions options;
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  std::string dtype = "f32";
  std::string reduce = "sum";
  std::string link_slot_bytes;
  bool json = false;
  std::string calibrate_path;    // --calibrate OUT.json
  std::string config_path;       // --config: runtime options (train/train_runtime_config.h)
  std::vector<int> cores = {8};  // --cores: one size for a sweep, one or more for --calibrate
  std::optional<int> cores_per_process;  // --cores-per-process (cli/run_processes.h)
  CLI::Option* cores_opt = nullptr;
  CLI::Option* cores_per_process_opt = nullptr;
  CLI::Option* min_opt = nullptr;
  CLI::Option* max_opt = nullptr;
  CLI::Option* iters_opt = nullptr;
  CLI::Option* warmup_opt = nullptr;
  CLI::Option* link_slot_bytes_opt = nullptr;
  CLI::Option* link_slots_opt = nullptr;
  /// The sweep's options that --calibrate does not take (it sweeps the four collectives with the
  /// default type, reduction, algorithm and links, and writes its fits to the file), with why.
  std::vector<std::pair<CLI::Option*, std::string>> sweep_only;
};

namespace {

const std::vector<DataType> kDataTypes = {DataType::kF32, DataType::kF64, DataType::kS32,
                                          DataType::kS64};
const std::vector<ReduceOp> kReduceOps = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin,
                                          ReduceOp::kProd};
constexpr uint64_t kMaxBenchBytes = uint64_t{1} << 30;  // per row; buffers are per core

template <typename E>
std::vector<std::string> names_of(const std::vector<E>& values, std::string_view (*name)(E)) {
  std::vector<std::string> out;
  for (E v : values) out.emplace_back(name(v));
  return out;
}

// A byte size vtpu::parse_bytes accepts, from `lo` to kMaxBenchBytes.
CLI::Validator bench_bytes_validator(uint64_t lo) {
  return CLI::Validator(
      [lo](std::string& s) {
        try {
          const uint64_t v = parse_bytes(s);
          if (v < lo || v > kMaxBenchBytes) {
            return "size " + s + " is out of range (expected " + format_bytes(lo) + " .. " +
                   format_bytes(kMaxBenchBytes) + ")";
          }
          return std::string();
        } catch (const Error& e) {
          return e.message();
        }
      },
      "SIZE");
}

std::vector<std::string> op_names() {
  std::vector<std::string> out;
  for (const auto& op : collective_bench_ops()) out.push_back(op.name);
  return out;
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "|") + x;
  return s;
}

void print_header(CollectiveBenchmark& bench, const MemcpyBandwidth& bw) {
  const CollectiveBenchOptions& o = bench.options();
  std::string type = std::string(data_type_name(o.dtype));
  if (bench.op().uses_reduce_op) type += " " + std::string(reduce_op_name(o.reduce));
  std::string notes;
  if (o.algorithm == "auto" && (bench.op().auto_algorithm || bench.op().algorithms.size() > 1))
    notes += "# auto: the algorithm column gives what auto chose per size\n";
  const uint64_t elem = data_type_bytes(o.dtype);
  if (bench.op().shape(o.min_bytes, elem, o.cores).count == 0) {
    uint64_t first = o.min_bytes;
    while (bench.op().shape(first, elem, o.cores).count == 0) first *= 2;
    notes += "# sizes below " + std::to_string(first) + " B give a core less than one element (" +
             o.op + " on " + count_text(o.cores, "core") + ") and are skipped\n";
  }
  std::printf(
      "# vtpu bench collectives: %s on %d virtual cores%s, %s, algorithm %s, out of place, %d "
      "warmup + %d timed calls per size\n%s"
      "# time: median over the timed calls of the slowest core's time (steady_clock around each "
      "call); busbw = algbw * %.4g (nccl-tests' factor for %s)\n"
      "# links: %s slots (--link-slot-bytes; default 1M capped at cores x the largest buffer)\n"
      "# threads: pin_threads %s; set by pin_threads of --config or VTPU_PIN_THREADS "
      "(pinning changes a 2-core hand-off about 3.5x)\n"
      "# memcpy bandwidth in this run: %.2f GB/s (bytes read + written per second, %d threads x "
      "%s, beyond the caches); dram_bound = bytes every core reads and writes once / memcpy "
      "bandwidth: sizes whose buffers fit the CPU caches can run below it (time/dram_bound < 1)\n",
      o.op.c_str(), o.cores, processes_text(o.cores).c_str(), type.c_str(), o.algorithm.c_str(),
      o.warmup, o.iters, notes.c_str(), bench.busbw_factor(), o.op.c_str(),
      format_bytes(bench.link_slot_bytes()).c_str(), bench.thread_pinning().describe().c_str(),
      bw.bytes_per_second * 1e-9, bw.threads, format_bytes(bw.bytes_per_thread).c_str());
  std::printf("%12s %12s %5s %6s %14s %19s %11s %11s %11s %14s %15s %6s\n", "size(B)", "count",
              "type", "redop", "op", "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
              "dram_bound(us)", "time/dram_bound", "check");
}

/// --calibrate: fit every collective and write a profile. Sizes and call counts default to the
/// calibration's (8 B..4 MiB, 10 + 3 calls) unless given on the command line.
int run_calibrate(const BenchCollectivesCommand& cmd, const TrainRuntimeConfig& config) {
  // It calibrates this machine's in-process links: one process.
  if (run_process_count() > 1) {
    return report_usage_error("--calibrate runs in one process; an MPI launcher started " +
                              std::to_string(run_process_count()) +
                              " (expected vtpu bench collectives --calibrate without mpirun)");
  }
  if (cmd.cores_per_process_opt->count() > 0) {
    return report_usage_error(
        "--cores-per-process does not apply to --calibrate (expected --cores)");
  }
  // A sweep option --calibrate would ignore is a usage error, not dropped without a word.
  for (const auto& [opt, why] : cmd.sweep_only) {
    if (opt->count() > 0) {
      return report_usage_error(opt->get_name() + " does not apply to --calibrate (" + why + ")");
    }
  }
  // --calibrate over --config would replace the config.
  if (!check_usage([&] {
        check_outputs_not_inputs({{"--calibrate", cmd.calibrate_path}},
                                 {{"--config", cmd.config_path}});
        check_output_path("--calibrate", cmd.calibrate_path);
      }))
    return 2;
  CalibrationOptions c;
  c.runtime = config.options;
  if (cmd.cores_opt->count() > 0) {
    c.cores = cmd.cores;
  } else if (config.file_num_cores) {
    c.cores = {*config.file_num_cores};  // num_cores is the default of --cores
  }
  if (cmd.min_opt->count() > 0) c.min_bytes = parse_bytes(cmd.min_bytes);
  if (cmd.max_opt->count() > 0) c.max_bytes = parse_bytes(cmd.max_bytes);
  if (cmd.iters_opt->count() > 0) c.iters = cmd.options.iters;
  if (cmd.warmup_opt->count() > 0) c.warmup = cmd.options.warmup;
  std::string sizes;
  for (size_t i = 0; i < c.cores.size(); ++i) {
    const int n = c.cores[i];
    if (n < 2 || std::count(c.cores.begin(), c.cores.begin() + i, n) > 0) {
      std::fprintf(stderr,
                   "vtpu: usage error: --calibrate needs distinct --cores >= 2 (got %d%s)\n", n,
                   n < 2 ? "" : " twice");
      return 2;
    }
    sizes += (sizes.empty() ? "" : ",") + std::to_string(n);
  }
  // The size range is checked before the 9-23 s of measuring, not after.
  if (const std::string problem = check_calibration_options(c); !problem.empty()) {
    return report_usage_error(problem);
  }
  std::printf(
      "# vtpu bench collectives --calibrate: all_gather, reduce_scatter, all_reduce, all_to_all on "
      "%s cores, %s..%s, %d timed calls per size; fit t = alpha + beta * x (x as in "
      "planner/cost_model.h) by least squares on relative residuals, one fit per collective and "
      "core count\n",
      sizes.c_str(), format_bytes(c.min_bytes).c_str(), format_bytes(c.max_bytes).c_str(), c.iters);
  std::fflush(stdout);
  CalibrationQuality quality;
  const HardwareProfile p = calibrate_this_machine(
      c,
      [](const std::string& line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      },
      &quality);
  std::printf("peak f32 %.3g FLOP/s (Eigen GEMM, one thread), HBM (memcpy) %.3g B/s\n",
              p.peak_flops("f32"), p.hbm_bytes_per_second);
  write_output_file("--calibrate", cmd.calibrate_path, p.to_json().dump(2) + "\n");
  std::printf("wrote %s (load it with --hardware %s)\n", cmd.calibrate_path.c_str(),
              cmd.calibrate_path.c_str());
  std::fflush(stdout);
  if (const std::string warning = calibration_warning(quality); !warning.empty()) {
    std::fprintf(stderr, "%s\n", warning.c_str());
  }
  return 0;
}

int run(const BenchCollectivesCommand& cmd) {
  // --config, under the flags (train/train_runtime_config.h).
  const TrainRuntimeConfig config = TrainRuntimeConfig::load(cmd.config_path);
  if (!check_usage([&] { config.check_memory_events(false, "vtpu bench collectives"); })) return 2;
  if (!cmd.calibrate_path.empty()) return run_calibrate(cmd, config);
  if (cmd.cores.size() != 1) {
    std::fprintf(stderr,
                 "vtpu: usage error: --cores takes one core count for a sweep (got %zu; a list "
                 "such as 2,4,8 is for --calibrate)\n",
                 cmd.cores.size());
    return 2;
  }
  CollectiveBenchOptions o = cmd.options;
  o.runtime = config.options;
  o.cores = cmd.cores_opt->count() == 0 && config.file_num_cores ? *config.file_num_cores
                                                                 : cmd.cores.front();
  // The global core count over the processes of an MPI launcher (cli/run_processes.h).
  if (!check_usage([&] {
        const std::optional<int> given =
            cmd.cores_opt->count() > 0 ? std::optional<int>(cmd.cores.front()) : std::nullopt;
        if (const std::optional<int> cores = global_cores(given, cmd.cores_per_process)) {
          o.cores = *cores;
        }
        check_cores_split(o.cores, "--cores " + std::to_string(o.cores));
      })) {
    return 2;
  }
  o.processes = run_process_group();
  // --link-slot-bytes and --link-slots replace the file's link_slot_bytes and link_num_slots.
  if (cmd.link_slots_opt->count() == 0 && config.sets("link_num_slots"))
    o.link_num_slots = config.options.link_num_slots;
  if (cmd.link_slot_bytes_opt->count() == 0 && config.sets("link_slot_bytes"))
    o.link_slot_bytes = config.options.link_slot_bytes;
  o.min_bytes = parse_bytes(cmd.min_bytes);
  o.max_bytes = parse_bytes(cmd.max_bytes);
  if (!cmd.link_slot_bytes.empty()) o.link_slot_bytes = parse_bytes(cmd.link_slot_bytes);
  for (DataType t : kDataTypes)
    if (data_type_name(t) == cmd.dtype) o.dtype = t;
  for (ReduceOp r : kReduceOps)
    if (reduce_op_name(r) == cmd.reduce) o.reduce = r;
  if (const std::string problem = check_collective_bench_options(o); !problem.empty()) {
    return report_usage_error(problem);
  }
  CollectiveBenchmark bench(o);
  const MemcpyBandwidth& bw = bench.memcpy_bandwidth();
  if (!cmd.json) print_header(bench, bw);
  nlohmann::json rows = nlohmann::json::array();
  uint64_t wrong_rows = 0, num_rows = 0;
  double busbw_sum = 0;  // GB/s, for nccl-tests' closing "# Avg bus bandwidth"
  bench.run([&](const CollectiveBenchRow& r) {
    wrong_rows += r.wrong != 0;
    ++num_rows;
    busbw_sum += r.busbw_gbps;
    if (cmd.json) {
      rows.push_back(collective_bench_row_json(bench, r));
      return;
    }
    std::printf("%12llu %12llu %5s %6s %14s %19s %11.2f %11.3f %11.3f %14.2f %15.2f %6s\n",
                static_cast<unsigned long long>(r.shape.bytes),
                static_cast<unsigned long long>(r.shape.count),
                std::string(data_type_name(o.dtype)).c_str(),
                bench.op().uses_reduce_op ? std::string(reduce_op_name(o.reduce)).c_str() : "none",
                o.op.c_str(), r.algorithm.c_str(), r.time_us, r.algbw_gbps, r.busbw_gbps,
                r.dram_bound_us, r.time_us / r.dram_bound_us, r.wrong ? "WRONG" : "ok");
    std::fflush(stdout);
  });
  // nccl-tests closes with the mean busbw over the sizes, which its users grep for; the same figure
  // here (0 when every size was skipped).
  const double avg_busbw = num_rows > 0 ? busbw_sum / static_cast<double>(num_rows) : 0.0;
  if (!cmd.json) {
    // nccl-tests' two lines, word for word (scripts take the last field): the WRONG rows, and
    // the mean of the busbw column in GB/s.
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong_rows),
                wrong_rows == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g \n", avg_busbw);
  }
  if (cmd.json) {
    const nlohmann::json config = {
        {"cores", o.cores},
        {"num_processes", run_process_count()},
        {"cores_per_process", o.cores / run_process_count()},
        {"op", o.op},
        {"dtype", data_type_name(o.dtype)},
        {"reduce", bench.op().uses_reduce_op ? std::string(reduce_op_name(o.reduce)) : "none"},
        {"algorithm", o.algorithm},
        {"min_bytes", o.min_bytes},
        {"max_bytes", o.max_bytes},
        {"iters", o.iters},
        {"warmup", o.warmup},
        {"link_slot_bytes", bench.link_slot_bytes()},
        {"in_place", false},
        {"time_statistic", "median over timed calls of the slowest core's time"},
        {"busbw_factor", bench.busbw_factor()},
        {"thread_pinning", bench.thread_pinning().to_json()},
        {"thread_pinning_text", bench.thread_pinning().describe()},
        {"runtime", bench.runtime_options().to_json()}};
    const nlohmann::json memcpy = {{"threads", bw.threads},
                                   {"bytes_per_thread", bw.bytes_per_thread},
                                   {"GBps", bw.bytes_per_second * 1e-9},
                                   {"convention", "bytes read + bytes written per second"}};
    std::cout << nlohmann::json{{"config", config},
                                {"memcpy", memcpy},
                                {"rows", rows},
                                {"avg_busbw_GBps", avg_busbw},
                                {"ok", wrong_rows == 0}}
                     .dump(2)
              << std::endl;
  }
  if (wrong_rows) {
    std::fprintf(stderr, "vtpu: error: %llu size(s) gave a WRONG result (see the check column)\n",
                 static_cast<unsigned long long>(wrong_rows));
    return 1;
  }
  return 0;
}

}  // namespace

std::shared_ptr<BenchCollectivesCommand> add_bench_collectives_command(CLI::App& bench) {
  auto cmd = std::make_shared<BenchCollectivesCommand>();
  CLI::App* app = bench.add_subcommand(
      "collectives",
      "nccl-tests-style sweep of one collective over doubling sizes: time, algbw, busbw, the "
      "memory-traffic bound, and a check against a sequential reference");
  cmd->app = app;
  CollectiveBenchOptions& o = cmd->options;
  cmd->cores_opt = app->add_option("--cores", cmd->cores,
                                   "Virtual cores in the group, over all processes under mpirun "
                                   "-np H (a multiple of H); with --calibrate a comma-separated "
                                   "list, one fit per size (default 2,4,8)")
                       ->delimiter(',')
                       ->default_str("8")
                       ->check(CLI::Range(1, 1024));
  cmd->cores_per_process_opt = add_cores_per_process_option(*app, cmd->cores_per_process);
  const std::string fixed =
      "it sweeps all_gather, reduce_scatter, all_reduce and all_to_all "
      "with the default --dtype, --reduce, --algorithm and links";
  cmd->sweep_only.emplace_back(
      app->add_option("--op", o.op, "Collective: " + join_names(op_names()))
          ->capture_default_str()
          ->check(CLI::IsMember(op_names())),
      fixed);
  cmd->min_opt = app->add_option("--min-bytes", cmd->min_bytes, "First size, e.g. 8, 64K")
                     ->capture_default_str()
                     ->check(bench_bytes_validator(1));
  cmd->max_opt =
      app->add_option("--max-bytes", cmd->max_bytes, "Last size (sizes double), e.g. 64M")
          ->capture_default_str()
          ->check(bench_bytes_validator(1));
  const auto dtypes = names_of(kDataTypes, &data_type_name);
  cmd->sweep_only.emplace_back(
      app->add_option("--dtype", cmd->dtype, "Element type: " + join_names(dtypes))
          ->capture_default_str()
          ->check(CLI::IsMember(dtypes)),
      fixed);
  const auto reduces = names_of(kReduceOps, &reduce_op_name);
  cmd->sweep_only.emplace_back(
      app->add_option("--reduce", cmd->reduce, "Reduction: " + join_names(reduces))
          ->capture_default_str()
          ->check(CLI::IsMember(reduces)),
      fixed);
  std::string per_op;
  for (const auto& op : collective_bench_ops())
    per_op += (per_op.empty() ? "" : "; ") + op.name + ": " + join_names(op.algorithms);
  cmd->sweep_only.emplace_back(
      app->add_option("--algorithm", o.algorithm,
                      "auto (chosen per size by the Communicator; each row names it), or an "
                      "algorithm the op offers (" +
                          per_op + ")")
          ->capture_default_str(),
      fixed);
  cmd->iters_opt = app->add_option("--iters", o.iters, "Timed calls per size")
                       ->capture_default_str()
                       ->check(CLI::Range(1, 1000000));
  cmd->warmup_opt =
      app->add_option("--warmup", o.warmup, "Untimed calls per size before the timed ones")
          ->capture_default_str()
          ->check(CLI::Range(0, 1000000));
  cmd->link_slot_bytes_opt =
      app->add_option("--link-slot-bytes", cmd->link_slot_bytes,
                      "Bytes per link slot (default: RuntimeOptions' 1M, capped at cores x the "
                      "largest buffer, which no message exceeds; replaces link_slot_bytes of "
                      "--config)")
          ->check(bench_bytes_validator(64));
  cmd->sweep_only.emplace_back(cmd->link_slot_bytes_opt, fixed);
  cmd->link_slots_opt = app->add_option("--link-slots", o.link_num_slots,
                                        "Slots per link (default: RuntimeOptions' 4, or "
                                        "link_num_slots of --config)")
                            ->check(CLI::Range(2, 1024));
  cmd->sweep_only.emplace_back(cmd->link_slots_opt, fixed);
  add_runtime_config_option(*app, cmd->config_path,
                            "pin_threads, collective_timeout_ms, collective_algorithm (the "
                            "algorithm auto resolves to), ...; num_cores is the default of "
                            "--cores");
  cmd->sweep_only.emplace_back(
      app->add_flag("--json", cmd->json,
                    "Print the configuration, memcpy bandwidth and rows as JSON"),
      "it writes its fits as JSON to the --calibrate file and prints them as text");
  // An empty path is a usage error, not "no --calibrate" (which would run a plain sweep).
  app->add_option("--calibrate", cmd->calibrate_path,
                  "Instead of one sweep: sweep all_gather, reduce_scatter, all_reduce and "
                  "all_to_all on each of --cores (default 2,4,8; default 8 B..4 MiB, 30 timed "
                  "calls; --min-bytes, --max-bytes, --iters, --warmup apply, the sweep's other "
                  "options are usage errors), fit alpha and beta "
                  "of each per core count, measure peak "
                  "f32 FLOP/s and memcpy bandwidth, and write a this_machine hardware profile "
                  "to this JSON file")
      ->check(nonempty_path_validator());
  return cmd;
}

bool run_bench_collectives_if_selected(const BenchCollectivesCommand& command, int* exit_code) {
  if (command.app == nullptr || !command.app->parsed()) return false;
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
