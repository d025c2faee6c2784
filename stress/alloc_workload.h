// Seeded synthetic allocation workloads for benchmarks and tests, as vtpu trace events.
//
// Randomness: std::mt19937_64, whose output sequence the C++ standard fixes, transformed by our
// own code. The std::*_distribution classes are not used, because their output is
// implementation-defined (libstdc++, libc++ and MSVC give different numbers for the same engine
// state). Every transform here uses integer arithmetic or IEEE-754 double +, -, *, / and floor in
// a fixed order (alloc_workload.cc is compiled with -ffp-contract=off so no FMA changes a
// rounding), and no libm call but the exact floor and ldexp, so a seed gives the same sizes with
// any compiler and library.
//
// Size distributions, all in bytes:
//   uniform    every integer in [min_bytes, max_bytes] equally likely.
//   lognormal  round(median_bytes * exp(sigma * Z)), clamped to [min_bytes, max_bytes], where Z
//              is the Irwin-Hall approximation of a standard normal: the sum of 12 independent
//              uniforms on [0, 1) minus 6 (mean 0, variance 1, tails cut at +-6; its CDF is within
//              0.0024 of the normal's everywhere, P(|Z| < 1) = 0.6785 against 0.6827). exp() is
//              our own exp2 series.
//   bimodal    many small activations and a few large weights: with probability large_fraction
//              uniform in [large_min_bytes, large_max_bytes], else uniform in
//              [small_min_bytes, small_max_bytes].
//
// Steady state (the allocator benchmark's workload): allocate L buffers, then K times free a
// live buffer chosen uniformly at random and allocate a new one of a fresh random size, so that
// exactly L buffers stay live. This isolates the per-pair cost at a given live count.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "vtpu/common/units.h"
#include "vtpu/memory/trace.h"

namespace vtpu {

enum class SizeDistribution { kUniform, kLogNormal, kBimodal };

/// "uniform", "lognormal", "bimodal".
std::string_view size_distribution_name(SizeDistribution d);
/// Inverse of size_distribution_name. Throws InvalidArgumentError naming the text and listing the
/// known names.
SizeDistribution parse_size_distribution(std::string_view name);

/// Parameters of every distribution; `distribution` picks which block is used. Sizes in bytes.
/// Plain data, thread-compatible.
struct SizeOptions {
  SizeDistribution distribution = SizeDistribution::kLogNormal;
  struct Uniform {
    uint64_t min_bytes = 256;        // >= 1
    uint64_t max_bytes = 64 * kKiB;  // >= min_bytes
  } uniform;
  struct LogNormal {
    double median_bytes = 16 * kKiB;  // exp(mu); > 0
    double sigma = 1.5;               // standard deviation of ln(size); in [0, 20]
    uint64_t min_bytes = 256;         // clamp, >= 1
    uint64_t max_bytes = 64 * kMiB;   // clamp, >= min_bytes
  } lognormal;
  struct Bimodal {
    double large_fraction = 0.01;  // probability of a large size, in [0, 1]
    uint64_t small_min_bytes = 256;
    uint64_t small_max_bytes = 64 * kKiB;
    uint64_t large_min_bytes = 1 * kMiB;
    uint64_t large_max_bytes = 8 * kMiB;
  } bimodal;

  /// Throws InvalidArgumentError naming the first field out of range (the active distribution's
  /// fields only).
  void validate() const;
};

/// One line for reports, e.g. "lognormal sizes (median 16384 B, sigma 1.5, clamped to [256,
/// 67108864] B)": the active distribution and its parameters.
std::string describe_sizes(const SizeOptions& options);

/// Draws sizes from one distribution. Immutable after construction: thread-safe for const use,
/// each thread with its own engine.
class SizeSampler {
 public:
  /// Throws InvalidArgumentError when options.validate() does.
  explicit SizeSampler(const SizeOptions& options);
  /// One size in bytes (>= 1). Consumes a number of engine outputs that depends on the
  /// distribution (uniform: 1 or more; lognormal: 6; bimodal: 2 or more).
  uint64_t sample(std::mt19937_64& rng) const;
  const SizeOptions& options() const { return options_; }

 private:
  SizeOptions options_;
  uint64_t large_threshold_ = 0;  // bimodal: large when (rng() >> 11) < this
};

/// Uniform integer in [lo, hi] (lo <= hi) by rejection, unbiased and the same on every platform.
/// Thread-safe for distinct engines.
uint64_t uniform_uint64(std::mt19937_64& rng, uint64_t lo, uint64_t hi);

/// `count` sizes in bytes from `options` with engine std::mt19937_64(seed). Throws
/// InvalidArgumentError for invalid options. Thread-safe.
std::vector<uint64_t> sample_sizes(const SizeOptions& options, size_t count, uint64_t seed);

/// Parameters of make_steady_state_workload. Plain data, thread-compatible.
struct SteadyStateOptions {
  uint64_t live_buffers = 1000;  // L: buffers live after the fill, >= 1
  uint64_t pairs = 100000;       // K: free+alloc pairs after the fill
  /// W: 0 frees a uniformly chosen live buffer (every buffer equally likely: the worst case for
  /// caches). W in 1..L frees a uniformly chosen one of the W "hot" buffers, the most recently
  /// allocated, while the first L-W stay live throughout, like weights and optimizer state
  /// beside a step's activations.
  uint64_t hot_buffers = 0;
  SizeOptions sizes;  // sizes of every allocation
  int core = 0;       // core of every event, >= 0
  uint64_t seed = 1;  // engine seed
};

/// Limit on L + 2K events, so a typo cannot ask for terabytes of events.
inline constexpr uint64_t kMaxWorkloadEvents = uint64_t{1} << 27;

/// The steady-state workload: events 0..L-1 allocate ids 0..L-1; then pair k (0-based) is event
/// L+2k, a free of a uniformly chosen live id (of the hot ones if W > 0), and event L+2k+1, an
/// alloc of id L+k. t_us is the event index (synthetic, 1 us apart); labels are empty. Same
/// options, same events. Throws InvalidArgumentError for L = 0, W > L, a negative core, more than
/// kMaxWorkloadEvents events, or invalid sizes. Thread-safe.
std::vector<TraceEvent> make_steady_state_workload(const SteadyStateOptions& options);

}  // namespace vtpu
