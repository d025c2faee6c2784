// `--config FILE` of `vtpu train mlp|fsdp|transformer`, `vtpu reshard` and `vtpu bench
// collectives`: the runtime options (RuntimeOptions, runtime/runtime_options.h: allocator,
// collective algorithm and timeout, thread pinning, links, ...) read from a JSON file, under the
// command line. One rule in every command (reshard and bench collectives: --cores and the mesh as
// below; bench collectives: --link-slot-bytes and --link-slots replace link_slot_bytes and
// link_num_slots):
//   - the file's keys replace the defaults (and the VTPU_* variables' defaults);
//   - a flag replaces the file's key: --cores num_cores, --hbm-bytes hbm_bytes_per_core,
//     --allocator allocator (train mlp);
//   - num_cores is the default of --cores: where --cores N alone picks the mesh (train mlp and
//     fsdp: N cores; train transformer: --mesh 1xN), num_cores does;
//   - a mesh that --mesh, --plan or --estimate-from fixes must have num_cores cores when the file
//     gives num_cores and no --cores replaces it: else a usage error naming both;
//   - record_memory_events true needs something that writes the log (train mlp --memory-events).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/planner/plan_file.h"
#include "vtpu/runtime/runtime_options.h"

namespace vtpu {

/// The --config file of a trainer run. Plain data, thread-compatible.
struct TrainRuntimeConfig {
  std::string path;                   // --config FILE; empty: none
  RuntimeOptions options;             // the file's keys over the defaults
  std::optional<int> file_num_cores;  // num_cores, when the file sets it
  std::vector<std::string> keys;      // the keys the file sets, in file order

  /// Whether the file sets `key` (e.g. "link_slot_bytes").
  bool sets(const std::string& key) const;

  /// Reads `path` (RuntimeOptions::load_json_file; an empty path: the defaults). Throws what
  /// load_json_file throws: NotFoundError, InvalidArgumentError naming the key or the position.
  static TrainRuntimeConfig load(const std::string& path);

  /// The cores to run on when no mesh is given: `cores_flag` (--cores) when given, else the
  /// file's num_cores, else nullopt (the trainer's default).
  std::optional<int> cores(std::optional<int> cores_flag) const {
    return cores_flag ? cores_flag : file_num_cores;
  }

  /// For a run whose mesh `mesh` (e.g. "--mesh 2x4", "plan 'p.json' (mesh data=2 x model=4)")
  /// fixes `mesh_cores`: throws InvalidArgumentError (callers report it as a usage error, exit 2)
  /// "num_cores 4 in --config c.json does not match --mesh 2x4 (8 cores; expected num_cores 8,
  /// or num_cores left out of the file)" when the file's num_cores differs and `cores_flag` does
  /// not replace it (a --cores flag is checked against the mesh by the caller).
  void check_mesh_cores(int64_t mesh_cores, const std::string& mesh,
                        std::optional<int> cores_flag) const;

  /// check_mesh_cores for the mesh of `plan` (a --plan or --estimate-from file).
  void check_plan_mesh_cores(const TrainPlan& plan, std::optional<int> cores_flag) const;

  /// Throws InvalidArgumentError (a usage error) when the file sets record_memory_events true
  /// and `written` is false: nothing would write the event log `command` records.
  void check_memory_events(bool written, const std::string& command) const;
};

/// Adds `--config FILE` to `app`, storing the path in `path`: "RuntimeOptions JSON file (keys as
/// README, \"Runtime options\"; " + `rules` + ")". The one definition of the option for every
/// command that takes it.
CLI::Option* add_runtime_config_option(CLI::App& app, std::string& path, const std::string& rules);

}  // namespace vtpu
