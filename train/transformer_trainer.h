// Trains the transformer of train/transformer_model.h on a data x tensor mesh of virtual cores:
// `vtpu train transformer --mesh DxT`.
//
// Mesh (D, T) with axes ("data", "model"), core (d, t) = d * T + t, as jax.sharding.Mesh lays out
// devices row-major:
//   - tensor parallel over "model": the T cores of a mesh row hold the T Megatron shards of the
//     weights (TransformerLayout(config, T), shard t) in their HBM, and run the 2 * layers forward
//     and 2 * layers backward all-reduces of activation gradients over their row's replica group
//     {d*T, ..., d*T + T-1};
//   - data parallel over "data": the D cores of a mesh column hold the same shard; each takes
//     batch / D sequences of the global batch, and after backward one all-reduce over the column's
//     replica group {t, T + t, ...} sums the shard's gradients and the loss (one bucket, as
//     PyTorch DDP), then every core applies the same Adam update.
// The training loop is one shard_map over this mesh, and the all-reduces are collectives over the
// axis "model" (tensor) or "data" (psum of the bucket). A plan's layout is renamed onto the same
// two axes: the device at (d, t) is its core with data shard d and tensor shard t.
// Every all-reduce is the Communicator's deterministic one (folds in rank order), so a run is
// bit-reproducible, and every core of a replica group ends with identical values. A group of one
// core runs no all-reduce at all (T = 1: no tensor all-reduces, as Megatron with tensor parallel
// size 1; D = 1: no gradient all-reduce).
//
// With config.micro_batches = K > 1 each core computes its batch / D sequences as K micro-batches
// and adds their gradients in order into the bucket (gradient accumulation). The CLI's
// single-core reference runs with K = D: its f32 gradient additions are those of the mesh's
// data-parallel all-reduce, in the same (rank) order, so a pure data-parallel mesh gives the
// reference's losses bit for bit. Tensor parallelism splits the matmul sums of the row-parallel
// projections (and of the input gradients in backward) across cores, which the reference, one
// unsplit model, does not follow: there the losses agree up to f32 reordering.
//
// Each core's HBM holds: its weight shard, the gradient bucket (two with micro-batches), Adam's m
// and v (all of the shard's size), the activation workspace for batch / (D K) sequences, and the
// step's tokens; each buffer is charged the padded bytes of the tensors it packs. The host feeds
// the token windows each step (an input pipeline); the windows of a step are drawn from the seed
// independently of the mesh, so every mesh sees the same global batches as the single-core run.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/memory/memory_stats.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/data_tensor_layout.h"
#include "vtpu/train/replica_check.h"
#include "vtpu/train/transformer_model.h"

namespace vtpu {

/// A data x tensor mesh: `data` cores along the data-parallel axis, `tensor` along the
/// tensor-parallel one. Plain data, thread-compatible.
struct TransformerMesh {
  int64_t data = 1;
  int64_t tensor = 1;
  int64_t num_cores() const { return data * tensor; }
  std::string to_string() const;  // "2x4"
};

/// Parses "DxT" (e.g. "2x4"; both >= 1). Throws InvalidArgumentError naming the text.
TransformerMesh parse_transformer_mesh(const std::string& text);

/// The text a trainer reads: byte tokens and the uniform-guess loss ln(distinct tokens).
/// Plain data, thread-compatible.
struct TokenText {
  std::vector<int32_t> tokens;
  int64_t vocab_used = 0;     // distinct token ids in `tokens`
  double uniform_loss = 0.0;  // ln(vocab_used), nats
  int64_t mapped_bytes = 0;   // bytes >= vocab, which became '?' (tokenize_bytes)

  /// "" when mapped_bytes is 0, else "94 of 2463880 bytes (0.00382%) are >= 128 and were mapped
  /// to '?'" (the percentage with 3 significant digits), for the run's data line.
  std::string describe_mapped(int64_t vocab) const;
};
/// The largest share of a text file's bytes that may be >= vocab (mapped to '?'): more means the
/// file is not text (a gzip file: about half), and load_token_text refuses it. Data/fortunes.txt
/// has 94 of 2463880 (0.004%).
inline constexpr double kMaxMappedByteFraction = 0.10;
/// fortunes.txt (written by scripts/fetch-data.sh) in $VTPU_DATA_DIR, <prefix>/share/vtpu or the
/// source tree's data/, the first that holds it (common/data_dir.h).
std::string default_fortunes_path();
/// Reads a text file as byte tokens (bytes >= vocab become '?', counted in mapped_bytes). Throws
/// NotFoundError (with the fetch-data.sh hint) when it does not exist, PermissionDeniedError when
/// it may not be read, InvalidArgumentError when it is a directory, has a NUL byte, is shorter
/// than context + 2 bytes or larger than 64 MiB (read_bounded_text_file: at most that much is
/// read, also of an endless stream), or has more than kMaxMappedByteFraction of its bytes >= vocab
/// (naming the file, the count and the limit).
TokenText load_token_text(const std::string& path, int64_t vocab, int64_t context);
/// The same from memory.
TokenText make_token_text(std::span<const char> text, int64_t vocab);

/// The global batch of step `step`: `batch` window starts in [0, num_tokens - context - 1], drawn
/// from mt19937_64(seed ^ constant) advanced step by step (raw draws modulo the range).
/// Thread-compatible.
class WindowSampler {
 public:
  WindowSampler(int64_t num_tokens, int64_t context, uint64_t seed);
  /// The next step's `batch` starts.
  std::vector<int64_t> next(int64_t batch);

 private:
  std::mt19937_64 gen_;
  int64_t range_;
};

/// What a run produced. Times in seconds unless the name says otherwise.
/// Plain data, thread-compatible.
struct TransformerResult {
  TransformerMesh mesh;
  int num_processes = 1;             // processes hosting the cores (runtime/process_group.h)
  std::vector<double> losses;        // per step: mean token cross-entropy of the global batch
  std::vector<double> step_seconds;  // per step wall time on this process's first core
  double median_step_ms = 0.0;
  double total_seconds = 0.0;    // the SPMD program, all steps
  int64_t num_parameters = 0;    // of the whole model
  int64_t shard_parameters = 0;  // of one core's shard
  /// Bytes each core's arena is charged, by purpose (the same on every core): every buffer as
  /// the tensors it packs, each at its padded bytes under the TPU layout (its logical bytes with
  /// RuntimeOptions::pad_arrays false).
  uint64_t weight_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0, activation_bytes = 0,
           token_bytes = 0;
  /// Where the data replicas' final shards first differ from replica 0's (train/
  /// replica_check.h); nullopt when they are all bitwise equal.
  std::optional<ReplicaMismatch> replica_mismatch;
  /// Every data replica's final shard equals replica 0's, bitwise (no replica_mismatch).
  bool replicas_identical() const { return !replica_mismatch; }
  // Per core of every process, in core order (the processes exchange theirs).
  std::vector<MemoryStats> hbm;  // per core, after training (peak_bytes_in_use is the peak)
  /// Per core, over its tensor group (4 * layers per step); none when the group has one core.
  std::vector<CollectiveStats> tensor_all_reduce;
  /// Per core, over its data-parallel group (1 per step); none when the group has one core.
  std::vector<CollectiveStats> data_all_reduce;
  std::vector<std::vector<float>> shards;  // final weights of cores (0, t), t < T
};
/// The step time as "median_step_seconds" (seconds, as in every trainer's --json).
void to_json(nlohmann::json& j, const TransformerResult& r);

/// Trains config.steps Adam steps on `tokens` (ids < config.vocab) over `mesh`, which must use
/// every core of `runtime` (mesh.num_cores() == runtime.num_cores()). Calls on_log(step, loss) on
/// core 0's thread every config.log_every steps and at the last step. Throws
/// InvalidArgumentError (bad config, mesh, or too little text), OutOfMemoryError when the shard
/// does not fit, FailedPreconditionError when the loss is not finite.
TransformerResult train_transformer(Runtime& runtime, std::span<const int32_t> tokens,
                                    const TransformerConfig& config, const TransformerMesh& mesh,
                                    const std::function<void(int64_t, double)>& on_log = {});
/// The same on any data x tensor layout (a `vtpu plan` file's mesh and roles, see
/// sharding/data_tensor_layout.h): the tensor and data all-reduces run over the layout's groups,
/// and core c takes data shard layout.data_rank[c] and tensor shard layout.tensor_rank[c].
/// TransformerResult::mesh is (D, T); shards[t] comes from the data-rank-0 core of shard t.
TransformerResult train_transformer_on_layout(
    Runtime& runtime, std::span<const int32_t> tokens, const TransformerConfig& config,
    const DataTensorLayout& layout, const std::function<void(int64_t, double)>& on_log = {});

}  // namespace vtpu
