// `vtpu reshard`: plan (and run) the collectives that turn one sharding of an array into another,
// with planner/reshard_planner.h and sharding/reshard.h.
//
//   vtpu reshard --mesh 2x2x2 [--axes x,y,z] --shape 8,8 --from "P('z',('x','y'))"
//                --to "P(None,('x','y'))" [--explain] [--json]
//                [--hardware this_machine|v4|v5e|v5p|F.json]
//                [--alpha 5e-5 --beta 5e-9 --a2a-factor 1] [--seed 1]
//
// The estimate comes from the cost model of planner/cost_model.h on --hardware (default the
// shipped this_machine profile); --alpha/--beta/--a2a-factor instead set a uniform alpha-beta
// model (and exclude --hardware).
//
// --explain prints the plan (one row per collective: mesh axes, replica groups, per-core
// buffer, bytes sent per core, alpha-beta estimate) without running it. Without it, the plan
// is printed and then run on mesh-size virtual cores with random small-integer data (so every
// summation order is exact), and each core's block is compared with the gather-then-slice
// reference: "ok" (exit 0) or "mismatch" (exit 1).
//
// --json prints one JSON object instead of the text: ReshardPlan::to_json (sharding/reshard_plan.h:
// "steps" with each step's "op", "axes", "replica_groups", "comm_bytes_per_core" and
// "comm_seconds", and those totals), "hardware", "source_blocks" and "target_blocks" (the first
// core's block, the padded shard shape, every core's block when they are uneven), "run" (num_cores,
// warmup, iters, the median/min/max wall seconds of the whole plan, and each step's median
// collective and wall seconds) and "check" ({"reference": "gather-then-slice", "result": "ok" or
// "mismatch", "mismatched_elements"}); "run" and "check" are null with --explain. Exit codes as
// without --json.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct ReshardCommand;

/// Adds the `reshard` subcommand to `app`. Keep the returned handle alive until after
/// run_reshard_if_selected().
std::shared_ptr<ReshardCommand> add_reshard_command(CLI::App& app);

/// After parsing: when `reshard` was selected, runs it, sets *exit_code (0 ok, 1 mismatch) and
/// returns true; false when it was not selected. Bad specs, shapes or meshes throw
/// vtpu::InvalidArgumentError naming the value.
bool run_reshard_if_selected(const ReshardCommand& command, int* exit_code);

}  // namespace vtpu
