#include "vtpu/cli/bench_kernel_command.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "vtpu/bench/kernel_bench.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/common/error.h"
#include "vtpu/common/output_path.h"
#include "vtpu/common/units.h"

namespace vtpu {

namespace {

/// The kernels `vtpu bench kernel` knows, for its usage messages.
constexpr const char* kKernelNames = "matmul";

/// A usage error of `vtpu bench kernel ...` (exit code 2).
struct UsageError {
  std::string message;
};

/// Parses `text` as an integer in [1, max] for option `flag`; anything else (empty, "1.5", "0",
/// a value beyond int64) is a UsageError naming the flag and the text.
int64_t parse_positive(const std::string& flag, const std::string& text, int64_t max) {
  const std::string expected =
      "expected a positive integer" + (max == std::numeric_limits<int64_t>::max()
                                           ? std::string()
                                           : " up to " + std::to_string(max));
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range) {
    throw UsageError{flag + " " + text + ": too large (" + expected + ", at most " +
                     std::to_string(std::numeric_limits<int64_t>::max()) + ")"};
  }
  if (text.empty() || ec != std::errc() || ptr != end || v < 1 || v > max) {
    throw UsageError{flag + " " + (text.empty() ? std::string("''") : text) + ": " + expected};
  }
  return v;
}

}  // namespace

struct BenchKernelCommand {
  CLI::App* kernel = nullptr;
  CLI::App* matmul = nullptr;
  CLI::App* hardware = nullptr;
  KernelBenchOptions options;
  // Integers are read as text and parsed after CLI11 (parse_positive), for exact messages.
  std::string m = "2048", n = "128", k = "2048", bm = "256", bn = "128", bk = "256";
  std::string buffers = "1,2,3", repeats = "10";
  bool force = false;
  std::string vmem_limit = "0";
  bool json = false;
  std::string out_path;
  std::string copy_bytes = "64M";
  int gemm_n = 1024;
};

std::shared_ptr<BenchKernelCommand> add_bench_kernel_command(CLI::App& bench) {
  auto cmd = std::make_shared<BenchKernelCommand>();
  cmd->kernel =
      bench.add_subcommand("kernel", "Pipelined (Pallas-style) kernels on one virtual core");
  // No require_subcommand: an unknown kernel name is left over (allow_extras) and reported with
  // the list of kernels by run_bench_kernel_if_selected.
  cmd->kernel->allow_extras();
  cmd->matmul = cmd->kernel->add_subcommand(
      "matmul",
      "Tiled f32 matmul with 1, 2, 3 VMEM buffers per operand: measured wall time against Eigen's "
      "single-threaded GEMM, and the simulated time on a hardware profile");
  CLI::App* m = cmd->matmul;
  KernelBenchOptions& o = cmd->options;
  m->add_option("--buffers", cmd->buffers,
                "VMEM buffers per operand, comma-separated, one run each (1 none, 2 double, "
                "3..8 circular)")
      ->capture_default_str();
  m->add_option("--m", cmd->m, "Rows of A and C (1..65536)")->capture_default_str();
  m->add_option("--n", cmd->n, "Columns of B and C (1..65536)")->capture_default_str();
  m->add_option("--k", cmd->k, "Columns of A, rows of B (1..65536)")->capture_default_str();
  m->add_option("--bm", cmd->bm,
                "Block rows of A and C: a multiple of 8, or m (larger than m only as a multiple of "
                "8, as Pallas allows)")
      ->capture_default_str();
  m->add_option("--bn", cmd->bn, "Block columns of B and C: a multiple of 128, or n")
      ->capture_default_str();
  m->add_option("--bk", cmd->bk, "Block depth: a multiple of 128, or k")->capture_default_str();
  m->add_option("--hardware", o.hardware,
                "Hardware profile for the simulated time: v4, v5e, v5p, "
                "this_machine, or a .json file")
      ->capture_default_str()
      ->check(hardware_validator());
  m->add_option("--repeats", cmd->repeats, "Timed runs per configuration (median), 1..10000")
      ->capture_default_str();
  m->add_option("--vmem-limit", cmd->vmem_limit,
                "Scoped VMEM per core, e.g. 16M (0: the profile's)")
      ->capture_default_str()
      ->check(parse_validator(
          [](const std::string& s) {
            // RuntimeOptions' bounds, checked before the run: a usage error, exit 2.
            if (const uint64_t v = parse_bytes(s); v != 0 && (v < 1024 || v > (uint64_t{4} << 30)))
              throw InvalidArgumentError(s + " (expected 0 for the profile's, or 1K..4G)");
          },
          "SIZE"));
  m->add_option("--dma-bytes-per-second", o.dma_bytes_per_second,
                "Throttle the DMA engine (0: as fast as memcpy)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) {
            // Not CLI::NonNegativeNumber: its range error prints DBL_MAX in 309 digits.
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0.0 ||
                (v > 0.0 && v < 1.0)) {
              return text +
                     " is not a rate (expected 0 = unthrottled, or a finite rate >= 1 "
                     "byte/s)";
            }
            return std::string();
          },
          "RATE"));
  m->add_option("--dma-timeout-ms", o.dma_timeout_ms,
                "Every DMA wait gives up after this long (DeadlineExceeded)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  m->add_option("--seed", o.seed, "Input seed")->capture_default_str();
  m->add_flag("--force", cmd->force,
              "Run even when the estimated run time or memory is over the limits (docs/KERNELS.md)");
  m->add_flag("--json", cmd->json, "Print the configuration and results as JSON");

  cmd->hardware = bench.add_subcommand(
      "hardware",
      "Measure this machine (memcpy bandwidth, single-threaded Eigen GEMM) and print "
      "a hardware profile named this_machine");
  cmd->hardware->add_option("--out", cmd->out_path, "Also write the profile JSON to this file")
      ->check(nonempty_path_validator());
  cmd->hardware->add_option("--copy-bytes", cmd->copy_bytes, "memcpy size")
      ->capture_default_str()
      ->check(size_validator());
  cmd->hardware->add_option("--gemm-n", cmd->gemm_n, "GEMM size n (n x n x n)")
      ->capture_default_str()
      ->check(CLI::Range(64, 8192));
  return cmd;
}

bool run_bench_kernel_if_selected(const BenchKernelCommand& cmd, int* exit_code) {
  if (cmd.hardware != nullptr && cmd.hardware->parsed()) {
    // The copy size is bounded (0 would give a misleading profile error, 1 a nonsense
    // bandwidth, 1T bad_alloc), and --out is opened before minutes of measuring.
    const uint64_t copy_bytes = parse_bytes(cmd.copy_bytes);
    if (copy_bytes < kMiB || copy_bytes > 4 * kGiB) {
      std::fprintf(stderr,
                   "vtpu: usage error: --copy-bytes %s: expected 1M..4G (memcpy size; the "
                   "program allocates twice that)\nRun with --help for the options.\n",
                   cmd.copy_bytes.c_str());
      *exit_code = 2;
      return true;
    }
    if (!check_usage([&] { check_output_path("--out", cmd.out_path); })) {
      *exit_code = 2;
      return true;
    }
    const HardwareProfile p = measure_this_machine(copy_bytes, cmd.gemm_n);
    const std::string text = p.to_json().dump(2);
    std::printf("%s\n", text.c_str());
    if (!cmd.out_path.empty()) write_output_file("--out", cmd.out_path, text + "\n");
    // This profile prices every collective as a memcpy with no latency
    // (microseconds too cheap per hand-off on this VM); say which profile to plan with.
    std::fprintf(stderr,
                 "vtpu bench hardware: this profile has no calibrated collectives (they are "
                 "priced as a memcpy with 0 s latency); to plan collectives on this machine, "
                 "write a profile with vtpu bench collectives --calibrate FILE\n");
    *exit_code = 0;
    return true;
  }
  if (cmd.kernel == nullptr || !cmd.kernel->parsed()) return false;
  if (!cmd.matmul->parsed()) {
    const std::vector<std::string> rest = cmd.kernel->remaining();
    *exit_code = report_usage_error(
        rest.empty() ? "bench kernel: expected a kernel name (one of: " +
                           std::string(kKernelNames) + ")"
                     : "bench kernel: unknown kernel '" + rest.front() +
                           "' (expected one of: " + std::string(kKernelNames) + ")");
    return true;
  }
  if (const std::vector<std::string> rest = cmd.kernel->remaining(true); !rest.empty()) {
    // allow_extras() above lets unknown arguments through; report them as CLI11 would.
    *exit_code =
        report_usage_error("unexpected argument '" + rest.front() + "' for bench kernel matmul");
    return true;
  }
  KernelBenchOptions o = cmd.options;
  try {
    constexpr int64_t kMaxDim = int64_t{1} << 16;
    constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
    o.m = parse_positive("--m", cmd.m, kMaxDim);
    o.n = parse_positive("--n", cmd.n, kMaxDim);
    o.k = parse_positive("--k", cmd.k, kMaxDim);
    o.bm = parse_positive("--bm", cmd.bm, kAny);
    o.bn = parse_positive("--bn", cmd.bn, kAny);
    o.bk = parse_positive("--bk", cmd.bk, kAny);
    o.repeats = static_cast<int>(parse_positive("--repeats", cmd.repeats, 10000));
    o.buffers.clear();
    if (cmd.buffers.empty()) {
      throw UsageError{
          "--buffers '': expected a comma-separated list of buffer counts 1..8, "
          "e.g. 1,2,3"};
    }
    size_t pos = 0;
    for (;;) {
      const size_t comma = cmd.buffers.find(',', pos);
      const std::string item = cmd.buffers.substr(pos, comma - pos);
      o.buffers.push_back(static_cast<int>(parse_positive("--buffers", item, 8)));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  } catch (const UsageError& e) {
    *exit_code = report_usage_error(e.message);
    return true;
  }
  o.vmem_limit_bytes = parse_bytes(cmd.vmem_limit);
  if (!cmd.force) check_matmul_bench_size(o);
  const KernelBenchResult r = run_matmul_bench(o);
  if (cmd.json) {
    std::printf("%s\n", nlohmann::json(r).dump(2).c_str());
  } else {
    print_matmul_bench(r);
  }
  // The benchmark checks its result: f32 sums in another order stay within 1e-3 * k.
  double max_err = 0.0;
  for (const auto& row : r.rows) max_err = std::max(max_err, row.max_abs_error);
  *exit_code = max_err <= 1e-4 * static_cast<double>(o.k) ? 0 : 1;
  if (*exit_code != 0)
    std::fprintf(stderr, "vtpu: error: matmul result differs from Eigen by %g\n", max_err);
  return true;
}

}  // namespace vtpu
