#include "vtpu/cli/reshard_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "vtpu/cli/cli_validators.h"
#include "vtpu/cli/run_processes.h"
#include "vtpu/collectives/reduce_kernels.h"
#include "vtpu/common/error.h"
#include "vtpu/common/median.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/reshard_planner.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/process_exchange.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/block_copy.h"
#include "vtpu/sharding/mesh_arg.h"
#include "vtpu/train/train_runtime_config.h"

namespace vtpu {

struct ReshardCommand {
  CLI::App* app = nullptr;
  std::string mesh = "2x2x2";
  std::string axes;
  std::string shape_text;      // --shape as given, checked by dimension_list_validator
  std::vector<int64_t> shape;  // the parsed --shape, set after parsing
  std::string from;
  std::string to;
  bool explain = false;
  bool json = false;     // --json: the plan, the run and the check as one JSON object
  bool verbose = false;  // --verbose: the cost model's every term (CostModel::describe)
  std::string hardware = "this_machine";
  ReshardCostModel cost;
  CLI::Option* alpha_opt = nullptr;
  CLI::Option* beta_opt = nullptr;
  CLI::Option* factor_opt = nullptr;
  uint64_t seed = 1;
  int warmup = 3;
  int iters = 10;
  std::string config_path;  // --config: runtime options (train/train_runtime_config.h)
};

namespace {

// What a checked run may hold: 2^28 elements of f32 (1 GiB) over the host copies and every core's
// source and target blocks.
constexpr double kMaxRunElements = double(1 << 28);

// A run of a huge --shape would allocate the whole array on the host (once per partial index,
// plus the value) and every core's blocks before anything failed, enough to exhaust the machine.
// Rejects such a run before allocating.
void check_run_size(const std::vector<int64_t>& shape, const NamedSharding& source,
                    const NamedSharding& target) {
  const double n = static_cast<double>(num_elements_of(shape));
  double elements = n * static_cast<double>(source.num_partials() + 1);
  for (int dev : source.mesh().devices()) {
    elements += static_cast<double>(num_elements_of(source.local_shape(dev, shape)));
    elements += static_cast<double>(num_elements_of(target.local_shape(dev, shape)));
  }
  if (elements > kMaxRunElements) {
    const double bytes = elements * sizeof(float);
    throw InvalidArgumentError(
        "running reshard of f32" + shape_text(shape) + " would hold about " +
        (bytes < 1.8e19 ? format_bytes(static_cast<uint64_t>(bytes)) : std::string("2^64+ B")) +
        " (the array and one addend per partial index on the host, and every core's source and "
        "target blocks; expected at most " +
        format_bytes(static_cast<uint64_t>(kMaxRunElements) * sizeof(float)) +
        "): use --explain to plan it without running, or a smaller --shape");
  }
}

// "source blocks per core (uneven): d0 (2, 10), d1 (2, 10), d2 (1, 10), d3 (0, 10)" when the
// logical blocks of `sharding` differ between devices; nothing when they are all equal. At most
// kMaxListed devices are listed, then the count of the rest.
void print_uneven_blocks(const char* side, const NamedSharding& sharding, const Mesh& mesh,
                         const std::vector<int64_t>& shape) {
  constexpr size_t kMaxListed = 16;
  const std::vector<int64_t> first = sharding.local_shape(mesh.devices()[0], shape);
  bool uneven = false;
  for (int dev : mesh.devices()) uneven = uneven || sharding.local_shape(dev, shape) != first;
  if (!uneven) return;
  std::string line = std::string(side) + " blocks per core (uneven):";
  size_t listed = 0;
  for (int dev : mesh.devices()) {
    if (listed == kMaxListed) {
      line += ", ... (" + std::to_string(mesh.devices().size() - kMaxListed) + " more)";
      break;
    }
    line += (listed++ == 0 ? " d" : ", d") + std::to_string(dev) + " " +
            shape_text(sharding.local_shape(dev, shape));
  }
  std::printf("%s\n", line.c_str());
}

// Every core's logical block of `sharding`, in mesh device order, when they differ between
// devices (as print_uneven_blocks lists them, but all of them); null when they are all equal.
nlohmann::json uneven_blocks_json(const NamedSharding& sharding, const Mesh& mesh,
                                  const std::vector<int64_t>& shape) {
  const std::vector<int64_t> first = sharding.local_shape(mesh.devices()[0], shape);
  nlohmann::json blocks = nlohmann::json::array();
  bool uneven = false;
  for (int dev : mesh.devices()) {
    const std::vector<int64_t> local = sharding.local_shape(dev, shape);
    uneven = uneven || local != first;
    blocks.push_back(local);
  }
  return uneven ? blocks : nlohmann::json();
}

// The sharding's per-core blocks for --json: "block" (the first core's logical block), "padded"
// (the padded shard shape every collective buffer has) and "uneven_blocks".
nlohmann::json blocks_json(const NamedSharding& sharding, const Mesh& mesh,
                           const std::vector<int64_t>& shape) {
  return {{"block", sharding.local_shape(mesh.devices()[0], shape)},
          {"padded", sharding.shard_shape(shape)},
          {"uneven_blocks", uneven_blocks_json(sharding, mesh, shape)}};
}

/// --mesh and --axes parsed and checked against the run's limits, --config and the choice of
/// cost model. False after a usage error (a malformed --mesh or --axes, too many devices,
/// --hardware with a uniform model).
bool parse_mesh_usage(const ReshardCommand& c, const TrainRuntimeConfig& runtime_config,
                      bool uniform, std::vector<int64_t>& mesh_shape,
                      std::vector<std::string>& axes) {
  return check_usage([&] {
    mesh_shape = parse_mesh_shape(c.mesh);
    axes = mesh_axis_names(c.axes, c.mesh, mesh_shape, default_axis_names(mesh_shape.size()));
    // Each --mesh size is bounded, and so is their product: planning 4096x4096 devices would
    // take minutes and gigabytes, and a run of 2048 would fail only after planning.
    if (c.explain) {
      check_mesh_devices(c.mesh, mesh_shape, kMaxPlanDevices, " to plan");
    } else {
      check_mesh_devices(
          c.mesh, mesh_shape, kMaxRunDevices,
          " for a run on virtual cores; --explain plans up to " + std::to_string(kMaxPlanDevices));
    }
    runtime_config.check_mesh_cores(num_elements_of(mesh_shape), "--mesh " + c.mesh, std::nullopt);
    runtime_config.check_memory_events(false, "vtpu reshard");
    if (uniform && c.app->get_option("--hardware")->count() > 0) {
      throw InvalidArgumentError(
          "--hardware cannot be combined with --alpha/--beta/--a2a-factor (expected either a "
          "hardware profile or a uniform alpha-beta model)");
    }
  });
}

/// The plan, the blocks, and after a run its times and the check (null with --explain), as one
/// JSON object printed at the end.
nlohmann::json plan_json(const ReshardCommand& c, const ReshardPlan& plan, const CostModel& model,
                         bool uniform, const NamedSharding& source, const NamedSharding& target) {
  const Mesh& mesh = source.mesh();
  nlohmann::json j = plan.to_json();
  j["hardware"] = uniform ? nlohmann::json("uniform") : nlohmann::json(c.hardware);
  if (c.verbose) j["cost_model"] = CostModel::without_label(model.describe(/*with_compute=*/false));
  j["source_blocks"] = blocks_json(source, mesh, c.shape);
  j["target_blocks"] = blocks_json(target, mesh, c.shape);
  j["run"] = nullptr;
  j["check"] = nullptr;
  return j;
}

void print_plan(const ReshardCommand& c, const ReshardPlan& plan, const NamedSharding& source,
                const NamedSharding& target) {
  const Mesh& mesh = source.mesh();
  std::printf("%s", plan.to_string(c.verbose).c_str());
  std::printf("per-core block: %s -> %s (padded shard shape %s -> %s)\n",
              shape_text(source.local_shape(mesh.devices()[0], c.shape)).c_str(),
              shape_text(target.local_shape(mesh.devices()[0], c.shape)).c_str(),
              shape_text(source.shard_shape(c.shape)).c_str(),
              shape_text(target.shard_shape(c.shape)).c_str());
  // The first core's block hides the short ones of uneven shards, so list every core's logical
  // block, in mesh device order, for a side whose blocks differ.
  print_uneven_blocks("source", source, mesh, c.shape);
  print_uneven_blocks("target", target, mesh, c.shape);
}

/// The run's input and the logical value it holds.
struct ReshardInput {
  std::vector<float> value;  // the fold of the addends with the reduce op
  ShardedArray array;
};

/// Random small values per addend, the logical value their fold with the reduce op, and every
/// core's source block of its addend. The values make every fold order exact in f32, since a
/// plan may fold axis by axis where the reference folds in partial index order: integers in
/// -8..8 for sum (at most 8 * 1024 addends of a run: below 2^24), max and min; for prod, +-1,
/// +-2, +-4 and +-8, so every partial product is a power of two of magnitude at most the whole
/// product's (exact, or +-inf in every order once it passes 2^127). Integers in -8..8 would not
/// do for prod: a product of 16 of them reaches 2^48 and rounds.
ReshardInput make_input(const ReshardCommand& c, Runtime& runtime, const NamedSharding& source) {
  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<int> small(-8, 8);
  const bool prod = source.is_partial() && source.spec().reduce_op() == ReduceOp::kProd;
  std::uniform_int_distribution<int> sign_and_exponent(0, 7);
  auto draw = [&]() -> float {
    if (!prod) return static_cast<float>(small(rng));
    const int r = sign_and_exponent(rng);  // bit 2: the sign; bits 0-1: the exponent 0..3
    return static_cast<float>((r & 4) != 0 ? -1 : 1) * static_cast<float>(1 << (r & 3));
  };
  const size_t n = static_cast<size_t>(num_elements_of(c.shape));
  const size_t parts = static_cast<size_t>(source.num_partials());
  std::vector<std::vector<float>> addend(parts, std::vector<float>(n));
  std::vector<float> value(n, 0.0f);
  for (size_t p = 0; p < parts; ++p) {
    for (size_t i = 0; i < n; ++i) {
      addend[p][i] = draw();
      value[i] = p == 0 ? addend[p][i] : combine(value[i], addend[p][i], source.spec().reduce_op());
    }
  }
  std::vector<DeviceBuffer> buffers;  // this process's devices' (empty for the others)
  for (int dev : source.mesh().devices()) {
    if (!runtime.is_local(dev)) {
      buffers.emplace_back();
      continue;
    }
    const std::vector<IndexRange> box = source.index_ranges(dev, c.shape);
    const std::vector<int64_t> local = source.local_shape(dev, c.shape);
    DeviceBuffer b = runtime.allocate(
        dev, static_cast<uint64_t>(num_elements_of(local)) * sizeof(float), "reshard/input");
    extract_block(std::span<const float>(addend[static_cast<size_t>(source.partial_index(dev))]),
                  c.shape, box, b.as<float>());
    buffers.push_back(std::move(b));
  }
  return {std::move(value),
          ShardedArray::from_buffers(runtime, c.shape, source, std::move(buffers))};
}

/// The times of the timed runs: the whole plan's and each step's.
struct ReshardTimings {
  std::vector<double> walls;
  std::vector<std::vector<double>> step_collective;
  std::vector<std::vector<double>> step_wall;
};

/// Timed as nccl-tests and `vtpu bench collectives` time a collective: --warmup untimed runs
/// (link setup, the first touch of fresh HBM pages and link slots, the first use of each core's
/// threads: the first runs at 1 MiB took 4-8 ms against ~45 us steady), then --iters timed runs
/// of the whole plan, each on the same input into new output buffers. Returns the last timed
/// run's output, the one checked.
ShardedArray run_timed(const ReshardCommand& c, Runtime& runtime, const ShardedArray& input,
                       const ReshardPlan& plan, ReshardTimings& t) {
  ReshardCommunicatorCache communicators(runtime);  // every run reuses the first run's links
  for (int i = 0; i < c.warmup; ++i) execute_reshard(runtime, input, plan, nullptr, &communicators);
  t.step_collective.assign(plan.steps.size(), {});
  t.step_wall.assign(plan.steps.size(), {});
  std::optional<ShardedArray> last;
  for (int i = 0; i < c.iters; ++i) {
    last.reset();  // the previous run's buffers go back to the arenas before this run allocates
    std::vector<ReshardStepTiming> timings;
    const auto t0 = std::chrono::steady_clock::now();
    last = execute_reshard(runtime, input, plan, &timings, &communicators);
    t.walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (size_t s = 0; s < timings.size() && s < plan.steps.size(); ++s) {
      t.step_collective[s].push_back(timings[s].collective_seconds);
      t.step_wall[s].push_back(timings[s].wall_seconds);
    }
  }
  return std::move(*last);
}

/// The elements of `output` that differ from the logical value sliced per device (a partial
/// target is compared after its pending reduction, through gather()), over every process (each
/// compares its own devices' blocks).
size_t count_mismatches(const ReshardCommand& c, const Runtime& runtime, const ShardedArray& output,
                        const NamedSharding& target, const std::vector<float>& value) {
  size_t bad = 0;
  if (target.is_partial()) {
    const std::vector<float> got = output.gather();
    for (size_t i = 0; i < value.size(); ++i) bad += got[i] != value[i];
    return bad;
  }
  for (int dev : target.mesh().devices()) {
    if (!runtime.is_local(dev)) continue;
    const std::vector<int64_t> local = target.local_shape(dev, c.shape);
    std::vector<float> want(static_cast<size_t>(num_elements_of(local)));
    extract_block(std::span<const float>(value), c.shape, target.index_ranges(dev, c.shape),
                  std::span<float>(want));
    const std::span<const float> got = output.local_data(dev);
    if (got.size() != want.size()) {
      bad += want.size() + 1;
      continue;
    }
    for (size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
  }
  size_t total = 0;
  for (size_t b : all_gather_values(runtime.process_group(), std::span<const size_t>(&bad, 1))) {
    total += b;
  }
  return total;
}

void print_run_json(const ReshardCommand& c, nlohmann::json& j, const ReshardPlan& plan,
                    const Runtime& runtime, const ReshardTimings& t, size_t bad) {
  nlohmann::json steps = nlohmann::json::array();
  for (size_t i = 0; i < plan.steps.size() && !t.step_wall[i].empty(); ++i) {
    // The step's op, as in the plan's steps[i], so that a script need not zip the two lists.
    steps.push_back({{"op", reshard_op_name(plan.steps[i].op)},
                     {"median_collective_seconds", median_of(t.step_collective[i])},
                     {"median_wall_seconds", median_of(t.step_wall[i])}});
  }
  j["run"] = {{"num_cores", runtime.num_cores()},
              {"num_processes", runtime.process_count()},
              {"thread_pinning", runtime.thread_pinning().to_json()},
              {"warmup", c.warmup},
              {"iters", c.iters},
              {"median_wall_seconds", median_of(t.walls)},
              {"min_wall_seconds", std::ranges::min(t.walls)},
              {"max_wall_seconds", std::ranges::max(t.walls)},
              {"steps", steps}};
  j["check"] = {{"reference", "gather-then-slice"},
                {"result", bad == 0 ? "ok" : "mismatch"},
                {"mismatched_elements", bad}};
  std::cout << j.dump(2) << std::endl;
}

void print_run_text(const ReshardCommand& c, const ReshardPlan& plan, const Runtime& runtime,
                    const ReshardTimings& t, size_t bad) {
  std::printf(
      "ran on %s: %d warm-up run%s, then %d timed run%s of the whole plan: "
      "median %.3f ms wall (min %.3f, max %.3f; estimate %.3f ms)\n",
      count_text(static_cast<long long>(runtime.num_cores()), "virtual core").c_str(), c.warmup,
      c.warmup == 1 ? "" : "s", c.iters, c.iters == 1 ? "" : "s", median_of(t.walls) * 1e3,
      std::ranges::min(t.walls) * 1e3, std::ranges::max(t.walls) * 1e3,
      plan.total_estimated_seconds() * 1e3);
  std::printf("%4s  %-22s %11s %15s %11s\n", "step", "op", "est. time", "in collective", "wall");
  for (size_t i = 0; i < plan.steps.size() && !t.step_wall[i].empty(); ++i) {
    std::printf("%4zu  %-22s %8.3f ms %12.3f ms %8.3f ms\n", i + 1,
                plan.steps[i].op_label().c_str(), plan.steps[i].estimated_seconds * 1e3,
                median_of(t.step_collective[i]) * 1e3, median_of(t.step_wall[i]) * 1e3);
  }
  std::printf(
      "(medians over the timed runs; in collective: the slowest core's time inside the "
      "collective call; wall adds padding copies, allocation and the SPMD launch)\n");
  std::printf("check against gather-then-slice: %s", bad == 0 ? "ok\n" : "mismatch");
  if (bad != 0) std::printf(" (%zu elements differ)\n", bad);
  // Pinning changes a 2-core hand-off about 3.5x.
  std::printf("threads: pin_threads %s\n", runtime.thread_pinning().describe().c_str());
}

int run(const ReshardCommand& c) {
  // --alpha/--beta/--a2a-factor replace the profile's collective model by a uniform one (the
  // profile still gives nothing else a reshard uses).
  const bool uniform = c.alpha_opt->count() + c.beta_opt->count() + c.factor_opt->count() > 0;
  // --config, under the flags (train/train_runtime_config.h): the runtime of a run.
  const TrainRuntimeConfig runtime_config = TrainRuntimeConfig::load(c.config_path);
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> axes;
  if (!parse_mesh_usage(c, runtime_config, uniform, mesh_shape, axes)) return 2;
  const Mesh mesh(mesh_shape, axes);
  // --from/--to/--shape are command-line values: a spec that does not parse, names an axis the
  // mesh lacks or does not fit the shape is a usage error.
  std::optional<NamedSharding> source_opt, target_opt;
  if (!check_usage([&] {
        source_opt.emplace(mesh, PartitionSpec::parse(c.from));
        target_opt.emplace(mesh, PartitionSpec::parse(c.to));
      }))
    return 2;
  const NamedSharding& source = *source_opt;
  const NamedSharding& target = *target_opt;
  // Priced for the mesh's cores all running at once, as `vtpu plan` prices a mesh: a run keeps
  // every core of the mesh busy (each step runs all its replica groups concurrently), so on
  // this_machine a 2-core group of an 8-core mesh gets the oversubscription s(8) / s(2) of the
  // cost model's header. No effect on the TPU profiles or a uniform model.
  const CostModel model =
      (uniform ? CostModel::uniform(c.cost.alpha_seconds, c.cost.beta_seconds_per_byte,
                                    c.cost.all_to_all_factor)
               : CostModel(HardwareProfile::get(c.hardware)))
          .for_cores(static_cast<int>(mesh.size()));
  std::optional<ReshardPlan> plan_opt;
  if (!check_usage([&] { plan_opt.emplace(plan_reshard(c.shape, source, target, model)); }))
    return 2;
  const ReshardPlan& plan = *plan_opt;
  nlohmann::json j;
  if (c.json) {
    j = plan_json(c, plan, model, uniform, source, target);
  } else {
    print_plan(c, plan, source, target);
  }
  if (c.explain) {
    if (c.json) std::cout << j.dump(2) << std::endl;
    return 0;
  }
  check_run_size(c.shape, source, target);
  RuntimeOptions options = runtime_config.options;
  options.num_cores = static_cast<int>(mesh.size());
  if (!check_usage([&] { check_cores_split(mesh.size(), "the mesh " + mesh.to_string()); }))
    return 2;
  const std::unique_ptr<Runtime> runtime_ptr = make_run_runtime(options);
  Runtime& runtime = *runtime_ptr;
  const ReshardInput input = make_input(c, runtime, source);
  ReshardTimings timings;
  const ShardedArray output = run_timed(c, runtime, input.array, plan, timings);
  const size_t bad = count_mismatches(c, runtime, output, target, input.value);
  if (c.json) {
    print_run_json(c, j, plan, runtime, timings, bad);
  } else {
    print_run_text(c, plan, runtime, timings, bad);
  }
  return bad == 0 ? 0 : 1;
}

// The help text of a uniform-model option: its value applies only when one of --alpha, --beta
// or --a2a-factor is given (a CLI11 "=5e-05" default reads as in effect).
std::string uniform_default(double value) {
  std::ostringstream os;
  os << value;
  return "when any of --alpha/--beta/--a2a-factor is given, default " + os.str() +
         "; otherwise --hardware prices the plan";
}

}  // namespace

std::shared_ptr<ReshardCommand> add_reshard_command(CLI::App& app) {
  auto c = std::make_shared<ReshardCommand>();
  c->app = app.add_subcommand(
      "reshard",
      "Plan the collectives that turn one sharding of an array into another (all-gather, "
      "all-to-all, all-reduce, reduce-scatter, slice, permute); run and check them unless "
      "--explain");
  c->app->add_option("--mesh", c->mesh, "Mesh shape, e.g. 2x2x2")->capture_default_str();
  c->app->add_option("--axes", c->axes, "Comma-separated mesh axis names (default x,y,z,w)");
  // One string checked as a whole, not CLI11's delimiter: that drops empty entries ("8,,3"
  // would be (8, 3)) and refuses "08" with a bare "Could not convert".
  c->app
      ->add_option("--shape", c->shape_text,
                   "Comma-separated global array shape, e.g. 8,8 (integers in 0..2^62)")
      ->required()
      ->check(dimension_list_validator())
      ->each([c](const std::string& text) { c->shape = parse_dimension_list(text); });
  c->app
      ->add_option("--from", c->from,
                   "Source PartitionSpec, e.g. \"P('z',('x','y'))\" or \"P(unreduced={'x'})\"")
      ->required();
  c->app->add_option("--to", c->to, "Target PartitionSpec")->required();
  c->app->add_flag("--explain", c->explain, "Print the plan and estimate; do not run");
  c->app->add_flag("--json", c->json,
                   "Print the plan (every step's collective, mesh axes, replica groups, bytes sent "
                   "per core and estimate, and the totals), and after a run its times and the "
                   "check, as JSON");
  c->app->add_flag("--verbose", c->verbose,
                   "Print the cost model's every term (each calibrated fit and its measured "
                   "curve) in place of its one-line summary");
  c->app
      ->add_option("--hardware", c->hardware,
                   "Hardware profile of the cost model: " + join(HardwareProfile::builtin_names()) +
                       ", or a profile .json (e.g. one written by vtpu bench collectives "
                       "--calibrate)")
      ->capture_default_str()
      ->check(hardware_validator());
  c->alpha_opt = c->app
                     ->add_option("--alpha", c->cost.alpha_seconds,
                                  "Uniform model instead of --hardware: latency per collective, "
                                  "seconds (0..60; " +
                                      uniform_default(c->cost.alpha_seconds) + ")")
                     ->check(CLI::Range(0.0, 60.0));
  c->beta_opt = c->app
                    ->add_option("--beta", c->cost.beta_seconds_per_byte,
                                 "Uniform model: seconds per byte (1 / bus bandwidth; 0..1; " +
                                     uniform_default(c->cost.beta_seconds_per_byte) + ")")
                    ->check(CLI::Range(0.0, 1.0));
  c->factor_opt = c->app
                      ->add_option("--a2a-factor", c->cost.all_to_all_factor,
                                   "Uniform model: constant c of the all-to-all formula "
                                   "alpha + beta*(n-1)/n^2*B*c (0..1e6; " +
                                       uniform_default(c->cost.all_to_all_factor) + ")")
                      ->check(CLI::Range(0.0, 1e6));
  c->app
      ->add_option("--warmup", c->warmup,
                   "Untimed runs of the whole plan before the timed ones (link setup, first touch "
                   "of buffers), 0..1000")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  c->app
      ->add_option("--iters", c->iters,
                   "Timed runs of the whole plan; the report gives the median of each time over "
                   "them, 1..1000")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  add_runtime_config_option(*c->app, c->config_path,
                            "for the run; num_cores, if given, must match --mesh");
  c->app->add_option("--seed", c->seed, "Seed of the random input, 0 .. 2^64 - 1")
      ->capture_default_str()
      ->check(seed_validator());
  return c;
}

bool run_reshard_if_selected(const ReshardCommand& command, int* exit_code) {
  if (!command.app->parsed()) return false;
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
