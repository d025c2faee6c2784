#include "vtpu/train/mlp_reference.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"

namespace vtpu {

MlpRun run_mlp(const RuntimeOptions& options, const DigitsSplit& split, MlpConfig config,
               const std::function<void(int64_t, double)>& on_step,
               std::shared_ptr<ProcessGroup> processes) {
  Runtime runtime(options,
                  processes ? std::move(processes) : std::make_shared<SingleProcessGroup>());
  MlpRun run;
  // train_mlp allocates every buffer once, so after the last step core 0 holds its peak.
  config.at_peak = [&run](Runtime& rt) {
    run.peak = hbm_breakdown(rt.core(0).hbm().chunk_records());
  };
  config.log_every = on_step ? 1 : 0;
  run.result = train_mlp(runtime, split, config, on_step);
  return run;
}

const std::vector<double>& MlpReference::one_batch_losses() const {
  return one_batch ? one_batch->result.losses : checked.result.losses;
}

double MlpReference::difference(const std::vector<double>& losses) const {
  return max_relative_difference(losses, checked.result.losses);
}

bool MlpReference::matches(const std::vector<double>& losses) const {
  return difference(losses) <= kMlpLossTolerance;
}

void MlpReference::add_json(nlohmann::json& j, const std::vector<double>& losses) const {
  j["reference"] = {{"num_cores", 1},
                    {"micro_batches", micro_batches},
                    {"hbm_bytes_limit", checked.result.hbm[0].bytes_limit},
                    {"losses", checked.result.losses},
                    {"median_step_seconds", 1e-3 * checked.result.median_step_ms},
                    {"peak_hbm_core0", checked.peak},
                    {"peak_bytes_in_use_core0", checked.result.hbm[0].peak_bytes_in_use}};
  j["one_batch_reference"] = {
      {"num_cores", 1},
      {"micro_batches", 1},
      {"losses", one_batch_losses()},
      {"median_step_seconds",
       1e-3 * (one_batch ? one_batch->result.median_step_ms : checked.result.median_step_ms)},
      {"max_relative_loss_difference", max_relative_difference(losses, one_batch_losses())}};
  j["max_relative_loss_difference"] = difference(losses);
  j["losses_match"] = matches(losses);
}

std::string MlpReference::to_string(const std::string& what, int cores,
                                    const std::vector<double>& losses) const {
  const double diff = difference(losses);
  char against[160];
  if (micro_batches > 1) {
    std::snprintf(against, sizeof against,
                  "with %lld micro-batches (same process, the data-parallel group's f32 gradient "
                  "additions in the same order)",
                  static_cast<long long>(micro_batches));
  } else {
    std::snprintf(against, sizeof against, "in one batch (same process)");
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "losses: %s on %s vs train mlp on 1 core %s: max relative difference %.3g "
                "over %s (tolerance %g): %s\n",
                what.c_str(), count_text(cores, "core").c_str(), against, diff,
                count_text(static_cast<long long>(losses.size()), "step").c_str(),
                kMlpLossTolerance, diff <= kMlpLossTolerance ? "ok" : "MISMATCH");
  std::string s = buf;
  if (one_batch) {
    std::snprintf(buf, sizeof buf,
                  "        vs train mlp on 1 core in one batch (one GEMM over all rows: other f32 "
                  "rounding, not checked): max relative difference %.3g\n",
                  max_relative_difference(losses, one_batch->result.losses));
    s += buf;
  }
  return s;
}

MlpReference run_mlp_reference(const RuntimeOptions& options, const DigitsSplit& split,
                               const MlpConfig& config, int64_t data_group) {
  RuntimeOptions one = options;
  one.num_cores = 1;
  // The reference holds the whole model and batch on one core, so a --hbm-bytes that the sharded
  // run fits (a tp(x) core holds 1/8 of the activations) may not hold it: it gets its own arena,
  // at least the default 16 GiB.
  one.hbm_bytes_per_core =
      std::max(options.hbm_bytes_per_core, RuntimeOptions{}.hbm_bytes_per_core);
  MlpReference ref;
  ref.micro_batches = data_group * config.micro_batches;
  MlpConfig checked = config;
  checked.micro_batches = ref.micro_batches;
  auto run_reference = [&](const MlpConfig& c) {
    try {
      return run_mlp(one, split, c);
    } catch (const ResourceExhaustedError& e) {
      throw ResourceExhaustedError(
          "the 1-core reference run (train mlp on 1 core with " + std::to_string(c.micro_batches) +
          " micro-batches, " + format_bytes(one.hbm_bytes_per_core) +
          " of HBM: the larger of --hbm-bytes and 16 GiB) ran out of HBM: " + e.message());
    }
  };
  ref.checked = run_reference(checked);
  if (ref.micro_batches > 1) {
    MlpConfig one_batch = config;
    one_batch.micro_batches = 1;
    ref.one_batch = run_reference(one_batch);
  }
  return ref;
}

}  // namespace vtpu
