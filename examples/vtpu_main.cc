// The `vtpu` command-line program.
//
//   vtpu train mlp [--cores N] [--steps S] [--batch B] [--hidden H] [--lr LR] [--seed K]
//                  [--data FILE] [--hbm-bytes SIZE] [--config FILE] [--log-every K] [--json]
//
// Exit codes: 0 success (and --help); 1 a vtpu error while running (the message names the value
// and what was expected: a bad data or config file, out of HBM, ...); 2 bad command-line usage.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/error.h"
#include "common/units.h"
#include "examples/digits_dataset.h"
#include "examples/mlp_trainer.h"
#include "runtime/runtime.h"

namespace {

using vtpu::examples::MlpConfig;
using vtpu::examples::MlpResult;

struct TrainArgs {
  std::optional<int> cores;
  std::string hbm_bytes;
  std::string config_path;
  std::string data_path = vtpu::examples::default_digits_path();
  MlpConfig mlp;
  bool json = false;
};

void print_mlp_report(const MlpResult& r, const MlpConfig& c) {
  std::printf("final loss %.4f   test accuracy %.4f   train accuracy %.4f\n", r.losses.back(),
              r.test_accuracy, r.train_accuracy);
  std::printf(
      "median step time %.3f ms over %zu steps (batch rows into HBM, forward, backward, "
      "all-reduce, SGD)\n",
      r.median_step_ms, r.step_seconds.size());
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
  std::printf("replicas identical after training: %s\n", r.replicas_identical ? "yes" : "NO");
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

int run_train_mlp(const TrainArgs& args) {
  vtpu::RuntimeOptions options;
  if (!args.config_path.empty()) options = vtpu::RuntimeOptions::load_json_file(args.config_path);
  if (args.cores) options.num_cores = *args.cores;
  if (!args.hbm_bytes.empty()) options.hbm_bytes_per_core = vtpu::parse_bytes(args.hbm_bytes);
  options.validate();
  args.mlp.validate(options.num_cores);

  const vtpu::examples::DigitsDataset all = vtpu::examples::load_digits_csv(args.data_path);
  const vtpu::examples::DigitsSplit split = vtpu::examples::split_digits(all);
  vtpu::Runtime runtime(options);
  if (!args.json) {
    std::printf(
        "vtpu train mlp: %d virtual cores, %s HBM each (%s), digits %s: %lld train / "
        "%lld test rows\n",
        options.num_cores, vtpu::format_bytes(options.hbm_bytes_per_core).c_str(),
        options.allocator.c_str(), args.data_path.c_str(),
        static_cast<long long>(split.train.num_rows()),
        static_cast<long long>(split.test.num_rows()));
    std::printf(
        "model 64->%lld->10, global batch %lld (%lld per core), lr %g, %lld steps, "
        "seed %llu\n",
        static_cast<long long>(args.mlp.hidden), static_cast<long long>(args.mlp.global_batch),
        static_cast<long long>(args.mlp.global_batch / options.num_cores),
        static_cast<double>(args.mlp.learning_rate), static_cast<long long>(args.mlp.steps),
        static_cast<unsigned long long>(args.mlp.seed));
    std::fflush(stdout);
  }
  auto log = [&](int64_t step, double loss) {
    if (!args.json) std::printf("step %6lld  loss %.6f\n", static_cast<long long>(step), loss);
  };
  const MlpResult result = vtpu::examples::train_mlp(runtime, split, args.mlp, log);
  if (args.json) {
    nlohmann::json j = result;
    char lr[32];  // the f32 value as the user wrote it, not its double expansion
    std::snprintf(lr, sizeof lr, "%.7g", static_cast<double>(args.mlp.learning_rate));
    j["config"] = {{"steps", args.mlp.steps},     {"global_batch", args.mlp.global_batch},
                   {"hidden", args.mlp.hidden},   {"learning_rate", std::strtod(lr, nullptr)},
                   {"seed", args.mlp.seed},       {"data", args.data_path},
                   {"runtime", options.to_json()}};
    std::cout << j.dump(2) << std::endl;
  } else {
    print_mlp_report(result, args.mlp);
  }
  return 0;
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
      "Data-parallel 64->H->10 MLP on the UCI handwritten digits (ReLU, softmax "
      "cross-entropy, SGD)");
  TrainArgs args;
  mlp->add_option("--cores", args.cores, "Virtual cores (default 8, or num_cores of --config)")
      ->check(CLI::Range(1, 1024));
  mlp->add_option("--steps", args.mlp.steps, "SGD steps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  mlp->add_option("--batch", args.mlp.global_batch,
                  "Global batch (rows per step over all cores; a multiple of --cores)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  mlp->add_option("--hidden", args.mlp.hidden, "Hidden units")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  mlp->add_option("--lr", args.mlp.learning_rate, "SGD learning rate (> 0)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) {
            const double v = std::strtod(s.c_str(), nullptr);
            return v > 0.0 && std::isfinite(v)
                       ? std::string()
                       : "learning rate " + s + " must be a finite number > 0";
          },
          "> 0"));
  mlp->add_option("--seed", args.mlp.seed, "Seed for parameter init and batch order")
      ->capture_default_str();
  mlp->add_option("--data", args.data_path, "digits.csv.gz from Debian python3-sklearn")
      ->capture_default_str();
  mlp->add_option("--hbm-bytes", args.hbm_bytes, "HBM per core, e.g. 16G, 512M (default 16G)")
      ->check(CLI::Validator(
          [](std::string& s) {
            try {
              vtpu::parse_bytes(s);
              return std::string();
            } catch (const vtpu::Error& e) {
              return e.message();
            }
          },
          "SIZE"));
  mlp->add_option("--config", args.config_path, "RuntimeOptions JSON file");
  mlp->add_option("--log-every", args.mlp.log_every, "Print the loss every K steps (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  mlp->add_flag("--json", args.json, "Print the result as JSON (with the per-step losses)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "vtpu: usage error: %s\nRun with --help for the options.\n", e.what());
    return 2;
  }
  if (*train && train->get_subcommands().empty()) {
    std::fprintf(stderr, "vtpu train: expected a model name (mlp)\n%s", train->help().c_str());
    return 2;
  }
  try {
    if (*mlp) return run_train_mlp(args);
  } catch (const vtpu::Error& e) {
    std::fprintf(stderr, "vtpu: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vtpu: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
