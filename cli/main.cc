// The `vtpu` command-line program: builds the CLI11 app, registers the subcommands (one file
// each in cli/) and runs the one selected. `vtpu --help`, `vtpu SUBCOMMAND --help` and each
// subcommand's header list the options.
//
//   vtpu train mlp|transformer|fsdp ...   cli/train_mlp_command.h, train_transformer_command.h,
//                                         train_fsdp_command.h (--plan: train_mlp_plan_command.h)
//   vtpu bench memory|fragmentation|collectives|kernel|hardware ...
//                                         cli/bench_*_command.h
//   vtpu stress ...                       cli/stress_command.h
//   vtpu reshard ...                      cli/reshard_command.h
//   vtpu plan MODEL.json ...              cli/plan_command.h
//   vtpu --version                        "vtpu <version>"
//
// Bare `vtpu`, `vtpu train` and `vtpu bench` print their help on stdout and exit 0, as a group
// of commands does in git-style tools (docker, kubectl, gh): there is nothing to run but the
// choice to show.
//
// Exit codes: 0 success (and --help, --version); 1 a vtpu error while running (the message names
// the value and what was expected: a bad data or config file, out of HBM, ...); 2 bad
// command-line usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "vtpu/cli/bench_collectives_command.h"
#include "vtpu/cli/bench_fragmentation_command.h"
#include "vtpu/cli/bench_kernel_command.h"
#include "vtpu/cli/bench_memory_command.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/parse_error_text.h"
#include "vtpu/cli/plan_command.h"
#include "vtpu/cli/reshard_command.h"
#include "vtpu/cli/stress_command.h"
#include "vtpu/cli/train_fsdp_command.h"
#include "vtpu/cli/train_mlp_command.h"
#include "vtpu/cli/train_transformer_command.h"
#include "vtpu/common/error.h"

#ifndef VTPU_VERSION
#error "VTPU_VERSION (the CMake project version) must be defined by cli/CMakeLists.txt"
#endif

namespace {

/// Every subcommand's handle, in the order of the help listings.
struct Commands {
  CLI::App* train = nullptr;
  CLI::App* bench = nullptr;
  std::shared_ptr<vtpu::TrainMlpCommand> mlp;
  std::shared_ptr<vtpu::TrainTransformerCommand> transformer;
  std::shared_ptr<vtpu::TrainFsdpCommand> fsdp;
  std::shared_ptr<vtpu::BenchMemoryCommand> memory;
  std::shared_ptr<vtpu::BenchFragmentationCommand> fragmentation;
  std::shared_ptr<vtpu::BenchCollectivesCommand> collectives;
  std::shared_ptr<vtpu::BenchKernelCommand> kernel;
  std::shared_ptr<vtpu::ReshardCommand> reshard;
  std::shared_ptr<vtpu::StressCommand> stress;
  std::shared_ptr<vtpu::PlanCommand> plan;
};

Commands add_commands(CLI::App& app) {
  Commands c;
  c.train = app.add_subcommand("train", "Train an example model across virtual cores");
  // No hard requirement here, so that `vtpu train nope` reports the unexpected "nope" by name.
  c.train->require_subcommand(0, 1);
  c.mlp = vtpu::add_train_mlp_command(*c.train);
  c.transformer = vtpu::add_train_transformer_command(*c.train);
  c.fsdp = vtpu::add_train_fsdp_command(*c.train);
  c.bench = app.add_subcommand("bench", "Benchmarks");
  c.bench->require_subcommand(0, 1);
  c.memory = vtpu::add_bench_memory_command(*c.bench);
  c.fragmentation = vtpu::add_bench_fragmentation_command(*c.bench);
  c.collectives = vtpu::add_bench_collectives_command(*c.bench);
  c.kernel = vtpu::add_bench_kernel_command(*c.bench);  // kernel and hardware
  c.reshard = vtpu::add_reshard_command(app);
  c.stress = vtpu::add_stress_command(app);
  c.plan = vtpu::add_plan_command(app);
  return c;
}

/// Runs the selected subcommand and returns its exit code; 0 when none ran.
int run_selected(const Commands& c, int argc, char** argv) {
  int code = 0;
  if (vtpu::run_train_mlp_if_selected(*c.mlp, &code) ||
      vtpu::run_train_transformer_if_selected(*c.transformer, &code) ||
      vtpu::run_train_fsdp_if_selected(*c.fsdp, &code) ||
      vtpu::run_bench_memory_if_selected(*c.memory, &code) ||
      vtpu::run_bench_fragmentation_if_selected(*c.fragmentation, &code) ||
      vtpu::run_bench_collectives_if_selected(*c.collectives, &code) ||
      vtpu::run_bench_kernel_if_selected(*c.kernel, &code) ||
      vtpu::run_reshard_if_selected(*c.reshard, &code) ||
      vtpu::run_stress_if_selected(*c.stress, argc, argv, &code) ||
      vtpu::run_plan_if_selected(*c.plan, &code)) {
    return code;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "vtpu: a virtual TPU pod on one machine (virtual cores, HBM arenas, collectives, "
      "sharding)"};
  app.set_version_flag("--version", std::string("vtpu ") + VTPU_VERSION);
  // No hard requirement, so that `vtpu nope` reports the unexpected "nope" by name; bare `vtpu`
  // prints the help.
  app.require_subcommand(0, 1);
  const Commands commands = add_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return vtpu::report_usage_error(vtpu::parse_error_text(e, argc, argv));
  }
  // Bare `vtpu`, or a group without its subcommand: the help of what was given, as --help prints
  // it (app.help() shows the selected subcommand's).
  if (app.get_subcommands().empty()) {
    std::printf("%s", app.help().c_str());
    return 0;
  }
  for (const CLI::App* group : {commands.train, commands.bench}) {
    if (*group && group->get_subcommands().empty()) {
      std::printf("%s", app.help().c_str());
      return 0;
    }
  }
  try {
    return run_selected(commands, argc, argv);
  } catch (const vtpu::Error& e) {
    std::fprintf(stderr, "vtpu: error: %s\n", e.what());
    return 1;
  } catch (const CLI::ParseError& e) {
    // An option value that can only be checked once the command has run part way (vtpu plan
    // --strategy: the candidates' names depend on the mesh).
    return vtpu::report_usage_error(vtpu::parse_error_text(e, argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vtpu: internal error: %s\n", e.what());
    return 1;
  }
}
