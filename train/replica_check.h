// The check that data-parallel training keeps its replicas identical: after the last step every
// core of a data group must hold, bit for bit, the parameters of the group's first core, because
// every core applies the same all-reduced gradient sums (PyTorch DDP's invariant; Megatron-LM's
// data-parallel groups). The trainers compare their final shards with compare_replicas, and the
// `vtpu train` commands print the verdict ("replicas identical after training: yes") and fail the
// run (exit 1, "vtpu: error: data replicas differ after training: ...") when it does not hold,
// as they do for a loss mismatch.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace vtpu {

/// A named part of a flat f32 parameter shard: elements [offset, offset + num_elements).
/// Plain data.
struct ParamSegment {
  std::string name;  // e.g. "fc1.w", "blocks.0.attn.wqkv"
  int64_t offset = 0;
  int64_t num_elements = 0;
};

/// Where the data replicas of a run first differ. Plain data.
struct ReplicaMismatch {
  int core = 0;            // the core whose copy differs
  int reference_core = 0;  // the first core of its group, whose copy it is compared with
  std::string parameter;   // the segment of the first differing element ("" when none covers it)
  int64_t element = 0;     // that element's index within the segment (within the shard if none)
  float value = 0.0f, reference_value = 0.0f;  // the element on `core` and on `reference_core`
  int64_t shard_elements = 0, reference_elements = 0;  // shard sizes (they differ: a size mismatch)

  /// "core 3's parameters differ from core 0's: fc1.w element 17 is 0.125 on core 3, 0.12500001
  /// on core 0" (or "...: core 3 has 10 elements, core 0 has 12").
  std::string describe() const;
};

/// Compares the shards of every group with its first core's, bitwise (memcmp of the f32 bits, so
/// -0.0 differs from 0.0 and equal NaN bits are equal). shards[c] is core c's flat parameter
/// shard; each group lists core ids, the first being the reference. `segments` name the parts of
/// a shard for the message (may be empty). Returns the first mismatch, groups in order and cores
/// in group order, or nullopt when every core agrees with its reference. Throws
/// InvalidArgumentError when a group names a core outside shards. Thread-safe.
std::optional<ReplicaMismatch> compare_replicas(const std::vector<std::span<const float>>& shards,
                                                const std::vector<std::vector<int>>& groups,
                                                const std::vector<ParamSegment>& segments = {});

/// The JSON reports' "replica_mismatch": null when `mismatch` is empty, else {"core",
/// "reference_core", "parameter", "element", "message": describe()}. Thread-safe.
nlohmann::json replica_mismatch_json(const std::optional<ReplicaMismatch>& mismatch);

/// The run's verdict for the `vtpu train` commands: when `mismatch` is set, prints
/// "vtpu: error: <what> differ after training: <mismatch->describe()>" to stderr and returns
/// false; else returns true. `what` names the replicas ("data replicas"). Thread-compatible
/// (writes stderr).
bool report_replicas(const std::optional<ReplicaMismatch>& mismatch,
                     const std::string& what = "data replicas");

/// The facts of the run a `vtpu train` command judges that every trainer's `--json` keeps at its
/// top level, under these names, whatever object holds the run itself (docs/TRAINING.md, "JSON
/// fields per trainer"): the run's median step time on core 0 in seconds, and its replica verdict.
inline constexpr const char* kRunFactKeys[] = {"median_step_seconds", "replicas_identical",
                                               "replica_mismatch"};

/// Moves the kRunFactKeys that `j[run_key]` (the judged run's own object, as its to_json wrote
/// it) holds to the top level of `j`, replacing any there; keys it lacks are left alone. Throws
/// InvalidArgumentError when j[run_key] is not an object. Not thread-safe on `j`.
void hoist_run_facts(nlohmann::json& j, const std::string& run_key);

}  // namespace vtpu
