#include "examples/bench_kernel_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/units.h"
#include "examples/kernel_bench.h"

namespace vtpu::examples {

struct BenchKernelCommand {
  CLI::App* kernel = nullptr;
  CLI::App* matmul = nullptr;
  CLI::App* hardware = nullptr;
  KernelBenchOptions options;
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
  cmd->kernel->require_subcommand(1);
  cmd->matmul = cmd->kernel->add_subcommand(
      "matmul",
      "Tiled f32 matmul with 1, 2, 3 VMEM buffers per operand: measured wall time against Eigen's "
      "single-threaded GEMM, and the simulated time on a hardware profile");
  CLI::App* m = cmd->matmul;
  KernelBenchOptions& o = cmd->options;
  m->add_option("--buffers", o.buffers,
                "VMEM buffers per operand, one run each (1 none, 2 double, "
                ">=3 circular)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  m->add_option("--m", o.m, "Rows of A and C")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  m->add_option("--n", o.n, "Columns of B and C")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  m->add_option("--k", o.k, "Columns of A, rows of B")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  m->add_option("--bm", o.bm, "Block rows of A and C (multiple of 8, or >= m)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  m->add_option("--bn", o.bn, "Block columns of B and C (multiple of 128, or >= n)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  m->add_option("--bk", o.bk, "Block depth (multiple of 128, or >= k)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  m->add_option("--hardware", o.hardware,
                "Hardware profile for the simulated time: v4, v5e, v5p, "
                "this_machine, or a .json file")
      ->capture_default_str();
  m->add_option("--repeats", o.repeats, "Timed runs per configuration (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  m->add_option("--vmem-limit", cmd->vmem_limit,
                "Scoped VMEM per core, e.g. 16M (0: the profile's)")
      ->capture_default_str();
  m->add_option("--dma-bytes-per-second", o.dma_bytes_per_second,
                "Throttle the DMA engine (0: as fast as memcpy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  m->add_option("--seed", o.seed, "Input seed")->capture_default_str();
  m->add_flag("--json", cmd->json, "Print the configuration and results as JSON");

  cmd->hardware = bench.add_subcommand(
      "hardware",
      "Measure this machine (memcpy bandwidth, single-threaded Eigen GEMM) and print "
      "a hardware profile named this_machine");
  cmd->hardware->add_option("--out", cmd->out_path, "Also write the profile JSON to this file");
  cmd->hardware->add_option("--copy-bytes", cmd->copy_bytes, "memcpy size")->capture_default_str();
  cmd->hardware->add_option("--gemm-n", cmd->gemm_n, "GEMM size n (n x n x n)")
      ->capture_default_str()
      ->check(CLI::Range(64, 8192));
  return cmd;
}

bool run_bench_kernel_if_selected(const BenchKernelCommand& cmd, int* exit_code) {
  if (cmd.hardware != nullptr && cmd.hardware->parsed()) {
    const HardwareProfile p = measure_this_machine(parse_bytes(cmd.copy_bytes), cmd.gemm_n);
    const std::string text = p.to_json().dump(2);
    std::printf("%s\n", text.c_str());
    if (!cmd.out_path.empty()) {
      std::ofstream out(cmd.out_path);
      if (!out) throw NotFoundError("cannot write '" + cmd.out_path + "'");
      out << text << "\n";
    }
    *exit_code = 0;
    return true;
  }
  if (cmd.matmul == nullptr || !cmd.matmul->parsed()) return false;
  KernelBenchOptions o = cmd.options;
  o.vmem_limit_bytes = parse_bytes(cmd.vmem_limit);
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

}  // namespace vtpu::examples
