#include "vtpu/train/adam.h"

#include <cmath>
#include <string>
#include <utility>

#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"

namespace vtpu {

void AdamOptions::validate() const {
  for (auto [name, v] : {std::pair{"beta1", beta1}, {"beta2", beta2}, {"adam eps", eps}}) {
    if (!(v > 0.0f) || !std::isfinite(v)) {
      throw InvalidArgumentError(std::string(name) + " is " +
                                 format_text("%g", static_cast<double>(v)) +
                                 " (expected a finite value > 0)");
    }
  }
  if (beta1 >= 1.0f || beta2 >= 1.0f) {
    throw InvalidArgumentError(
        "Adam betas are " +
        format_text("%g, %g", static_cast<double>(beta1), static_cast<double>(beta2)) +
        " (expected each < 1)");
  }
}

void adam_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                 std::span<float> v, int64_t t, float learning_rate, const AdamOptions& options) {
  const size_t n = params.size();
  if (grads.size() != n || m.size() != n || v.size() != n) {
    throw InvalidArgumentError("Adam spans differ in size: params " + std::to_string(n) +
                               ", grads " + std::to_string(grads.size()) + ", m " +
                               std::to_string(m.size()) + ", v " + std::to_string(v.size()));
  }
  if (t < 1) throw InvalidArgumentError("Adam step " + std::to_string(t) + " (expected >= 1)");
  const float b1 = options.beta1, b2 = options.beta2;
  const float c1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b1), t));
  const float c2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b2), t));
  const float lr = learning_rate;
  // GCC vectorises this loop (AVX: 8 floats per vsqrtps and vdivps) only because adam.cc is
  // compiled with -fno-math-errno (train/CMakeLists.txt): std::sqrt may otherwise set errno,
  // and the loop then ran at about 3.3 ns per element (400 us for the transformer's 120704
  // parameters; bench/micro/optimizer_bench.cc compares the two). -ffp-contract=off keeps the
  // vector body and the scalar remainder to the same correctly rounded multiplies, adds, divisions
  // and square roots, so an element's result does not depend on where its shard starts
  // (AdamTest.ShardedUpdateIsBitIdenticalToTheWholeUpdate). Eigen's array sqrt is not used: with
  // EIGEN_FAST_MATH it is an approximation whose last bits differ from the scalar remainder's.
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    params[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + options.eps);
  }
}

}  // namespace vtpu
