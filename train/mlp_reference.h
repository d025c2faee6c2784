// The single-core references the N-core digits-MLP runs are checked against (issue 6: every
// step's loss within 1e-4 relative of one core), shared by `vtpu train fsdp` and
// `vtpu train mlp --plan`.
//
// A data-parallel group of G cores splits the global batch into G row blocks and sums their
// gradients in rank order, ((g_0 + g_1) + g_2) + ... One core with K = G micro-batches performs
// exactly those f32 additions in that order (train/mlp_trainer.h, "Reduction order and gradient
// accumulation"), so its losses are the ones a data-parallel (or FSDP) run is checked against. One
// core with the whole batch in one GEMM sums the rows in another order; training amplifies that
// rounding (4.9e-4 relative after 500 steps at hidden 1024, docs/TRAINING.md "Reduction order and
// the single-core reference"), so that run is printed for comparison but not checked.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/runtime/process_group.h"
#include "vtpu/runtime/runtime_options.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/fsdp_trainer.h"
#include "vtpu/train/mlp_trainer.h"

namespace vtpu {

/// The tolerance of issue 6: N-core losses equal the single-core reference's within 1e-4
/// relative, at every step.
inline constexpr double kMlpLossTolerance = 1e-4;

/// One train_mlp run and core 0's HBM at its peak. Plain data.
struct MlpRun {
  MlpResult result;
  HbmBreakdown peak;  // core 0 after the last step, all training buffers live (its peak)
};

/// Runs train_mlp on a fresh Runtime(options) (over `processes` when given: options.num_cores is
/// then the global count, as Runtime's two-argument constructor takes it) and records core 0's
/// peak (config.at_peak is replaced; in the process hosting core 0). `on_step`, when set, is
/// called on this process's first core after every step (a StepMeter's callback); else nothing
/// is logged. Throws what train_mlp throws.
MlpRun run_mlp(const RuntimeOptions& options, const DigitsSplit& split, MlpConfig config,
               const std::function<void(int64_t, double)>& on_step = {},
               std::shared_ptr<ProcessGroup> processes = nullptr);

/// The references of one check. Plain data.
struct MlpReference {
  /// K: the micro-batches of the checked run (the data-parallel group size times the run's own
  /// micro-batches per core; 1 when the run has no data parallelism).
  int64_t micro_batches = 1;
  MlpRun checked;                   // 1 core, K micro-batches
  std::optional<MlpRun> one_batch;  // 1 core, 1 micro-batch; only when K > 1

  /// The one-batch run's losses (the checked run's when K = 1).
  const std::vector<double>& one_batch_losses() const;
  /// Max relative difference of `losses` against the checked run (max_relative_difference).
  double difference(const std::vector<double>& losses) const;
  /// True when difference(losses) <= kMlpLossTolerance.
  bool matches(const std::vector<double>& losses) const;
  /// Adds "reference" (num_cores 1, micro_batches K, hbm_bytes_limit (its arena), losses,
  /// median_step_seconds, peak_hbm_core0, peak_bytes_in_use_core0), "one_batch_reference"
  /// (micro_batches 1, losses, median_step_seconds, max_relative_loss_difference against
  /// `losses`; when K == 1 it is the checked run, so its figures are the reference's),
  /// "max_relative_loss_difference" and "losses_match" to `j`.
  void add_json(nlohmann::json& j, const std::vector<double>& losses) const;
  /// The report lines: `what` ("FSDP") on `cores` cores against the checked run (with the
  /// verdict), then, when K > 1, against the one-batch run (not checked).
  std::string to_string(const std::string& what, int cores,
                        const std::vector<double>& losses) const;
};

/// Runs the references for a run of `config` whose data-parallel group has `data_group` cores:
/// train_mlp on 1 core (options.num_cores replaced by 1) with data_group x config.micro_batches
/// micro-batches, and, when that is > 1, with one. One core holds the whole model and batch, so
/// the references do not run under the N-core run's HBM limit: their arena is
/// max(options.hbm_bytes_per_core, RuntimeOptions' default 16 GiB) (`--hbm-bytes` limits the run,
/// not its reference). Throws what train_mlp throws (InvalidArgumentError when the batch does not
/// split into the micro-batches); a ResourceExhaustedError says that the reference ran out.
MlpReference run_mlp_reference(const RuntimeOptions& options, const DigitsSplit& split,
                               const MlpConfig& config, int64_t data_group);

}  // namespace vtpu
