// The end-of-step bookkeeping every example trainer shares: the divergence check, and on the
// first core of each process (core 0 in one process) the step's wall time, its loss and the
// caller's log callback.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"

namespace vtpu {

/// Throws FailedPreconditionError when `loss` is not finite ("training diverged at step S: loss
/// is L (try a smaller learning rate)"). On the recording core (`records`: the process's first,
/// Runtime::first_local_core(); the loss is global, so every process records the same) stores
/// the seconds since `t0` and `loss` at index `step` of `step_seconds` and `losses` (both sized
/// to the step count), and calls `on_log(step, loss)` every `log_every` steps (0: never) and at
/// the last step. Thread-safety: only the recording core writes the vectors.
inline void finish_step(bool records, int64_t step, int64_t steps, int64_t log_every, double loss,
                        std::chrono::steady_clock::time_point t0, std::vector<double>& step_seconds,
                        std::vector<double>& losses,
                        const std::function<void(int64_t, double)>& on_log) {
  if (!std::isfinite(loss)) {
    throw FailedPreconditionError("training diverged at step " + std::to_string(step) +
                                  ": loss is " + format_text("%g", loss) +
                                  " (try a smaller learning rate)");
  }
  if (!records) return;
  step_seconds[static_cast<size_t>(step)] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  losses[static_cast<size_t>(step)] = loss;
  if (on_log && log_every > 0 && (step % log_every == 0 || step == steps - 1)) on_log(step, loss);
}

}  // namespace vtpu
