#include "vtpu/stress/alloc_workload.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {

constexpr double kLog2E = 1.4426950408889634074;  // log2(e)
constexpr double kLn2 = 0.69314718055994530942;   // ln(2)
constexpr double kTwoPow53 = 9007199254740992.0;  // 2^53

// 2^y from +, *, / and the exact floor/ldexp, so that it rounds the same way everywhere. The
// Taylor series of e^(f ln 2) for f in [0, 1) to degree 17 leaves a remainder below 1e-18,
// under one ulp of the result.
double exp2_portable(double y) {
  const double n = std::floor(y);
  const double x = (y - n) * kLn2;
  double sum = 1.0;
  double term = 1.0;
  for (int k = 1; k <= 17; ++k) {
    term = term * x / k;
    sum += term;
  }
  return std::ldexp(sum, static_cast<int>(n));
}

// Irwin-Hall: the sum of 12 uniforms on [0, 1) minus 6, from six 64-bit outputs split into
// twelve 32-bit halves. The integer sum is < 12 * 2^32 < 2^36, so the result is exact.
double standard_normal_approx(std::mt19937_64& rng) {
  uint64_t sum = 0;
  for (int i = 0; i < 6; ++i) {
    const uint64_t x = rng();
    sum += (x >> 32) + (x & 0xffffffffu);
  }
  return std::ldexp(static_cast<double>(sum), -32) - 6.0;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgumentError("size distribution: " + what);
}

void check_range(const char* lo_name, uint64_t lo, const char* hi_name, uint64_t hi) {
  require(lo >= 1, std::string(lo_name) + " is 0 (expected >= 1 byte)");
  require(lo <= hi, std::string(lo_name) + " " + std::to_string(lo) + " exceeds " + hi_name + " " +
                        std::to_string(hi));
}

}  // namespace

std::string_view size_distribution_name(SizeDistribution d) {
  switch (d) {
    case SizeDistribution::kUniform:
      return "uniform";
    case SizeDistribution::kLogNormal:
      return "lognormal";
    case SizeDistribution::kBimodal:
      return "bimodal";
  }
  return "unknown";
}

SizeDistribution parse_size_distribution(std::string_view name) {
  for (SizeDistribution d :
       {SizeDistribution::kUniform, SizeDistribution::kLogNormal, SizeDistribution::kBimodal}) {
    if (name == size_distribution_name(d)) return d;
  }
  throw InvalidArgumentError("unknown size distribution '" + std::string(name) +
                             "' (expected one of: uniform, lognormal, bimodal)");
}

void SizeOptions::validate() const {
  switch (distribution) {
    case SizeDistribution::kUniform:
      check_range("uniform.min_bytes", uniform.min_bytes, "uniform.max_bytes", uniform.max_bytes);
      return;
    case SizeDistribution::kLogNormal:
      require(std::isfinite(lognormal.median_bytes) && lognormal.median_bytes > 0,
              "lognormal.median_bytes must be a finite number > 0");
      require(std::isfinite(lognormal.sigma) && lognormal.sigma >= 0 && lognormal.sigma <= 20,
              "lognormal.sigma must be in [0, 20]");
      check_range("lognormal.min_bytes", lognormal.min_bytes, "lognormal.max_bytes",
                  lognormal.max_bytes);
      return;
    case SizeDistribution::kBimodal:
      require(bimodal.large_fraction >= 0 && bimodal.large_fraction <= 1,
              "bimodal.large_fraction must be in [0, 1]");
      check_range("bimodal.small_min_bytes", bimodal.small_min_bytes, "bimodal.small_max_bytes",
                  bimodal.small_max_bytes);
      check_range("bimodal.large_min_bytes", bimodal.large_min_bytes, "bimodal.large_max_bytes",
                  bimodal.large_max_bytes);
      return;
  }
  require(false, "unknown distribution " + std::to_string(static_cast<int>(distribution)));
}

std::string describe_sizes(const SizeOptions& o) {
  char buf[256];
  switch (o.distribution) {
    case SizeDistribution::kUniform:
      std::snprintf(buf, sizeof buf, "uniform sizes in [%llu, %llu] B",
                    static_cast<unsigned long long>(o.uniform.min_bytes),
                    static_cast<unsigned long long>(o.uniform.max_bytes));
      break;
    case SizeDistribution::kLogNormal:
      std::snprintf(buf, sizeof buf,
                    "lognormal sizes (median %.0f B, sigma %g, clamped to [%llu, %llu] B)",
                    o.lognormal.median_bytes, o.lognormal.sigma,
                    static_cast<unsigned long long>(o.lognormal.min_bytes),
                    static_cast<unsigned long long>(o.lognormal.max_bytes));
      break;
    case SizeDistribution::kBimodal:
      std::snprintf(buf, sizeof buf,
                    "bimodal sizes (%g%% uniform in [%llu, %llu] B, the rest in [%llu, %llu] B)",
                    o.bimodal.large_fraction * 100,
                    static_cast<unsigned long long>(o.bimodal.large_min_bytes),
                    static_cast<unsigned long long>(o.bimodal.large_max_bytes),
                    static_cast<unsigned long long>(o.bimodal.small_min_bytes),
                    static_cast<unsigned long long>(o.bimodal.small_max_bytes));
      break;
    default:
      return "unknown sizes";
  }
  return buf;
}

uint64_t uniform_uint64(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  const uint64_t span = hi - lo + 1;  // 0 means all 2^64 values
  if (span == 0) return rng();
  // Reject the lowest (2^64 mod span) outputs, so that every residue is equally likely.
  const uint64_t threshold = (0 - span) % span;
  uint64_t x;
  do {
    x = rng();
  } while (x < threshold);
  return lo + x % span;
}

SizeSampler::SizeSampler(const SizeOptions& options) : options_(options) {
  options_.validate();
  // (rng() >> 11) is uniform on [0, 2^53); below large_fraction * 2^53 with that probability.
  large_threshold_ = static_cast<uint64_t>(options_.bimodal.large_fraction * kTwoPow53);
}

uint64_t SizeSampler::sample(std::mt19937_64& rng) const {
  switch (options_.distribution) {
    case SizeDistribution::kUniform:
      return uniform_uint64(rng, options_.uniform.min_bytes, options_.uniform.max_bytes);
    case SizeDistribution::kLogNormal: {
      const auto& o = options_.lognormal;
      const double z = standard_normal_approx(rng);
      const double v = o.median_bytes * exp2_portable(o.sigma * z * kLog2E);
      if (!(v >= static_cast<double>(o.min_bytes))) return o.min_bytes;
      if (v >= static_cast<double>(o.max_bytes)) return o.max_bytes;
      const auto rounded = static_cast<uint64_t>(std::floor(v + 0.5));
      return rounded < o.min_bytes ? o.min_bytes : (rounded > o.max_bytes ? o.max_bytes : rounded);
    }
    case SizeDistribution::kBimodal: {
      const auto& o = options_.bimodal;
      if ((rng() >> 11) < large_threshold_)
        return uniform_uint64(rng, o.large_min_bytes, o.large_max_bytes);
      return uniform_uint64(rng, o.small_min_bytes, o.small_max_bytes);
    }
  }
  return 1;
}

std::vector<uint64_t> sample_sizes(const SizeOptions& options, size_t count, uint64_t seed) {
  const SizeSampler sampler(options);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out(count);
  for (uint64_t& s : out) s = sampler.sample(rng);
  return out;
}

std::vector<TraceEvent> make_steady_state_workload(const SteadyStateOptions& options) {
  const uint64_t live = options.live_buffers;
  if (live == 0)
    throw InvalidArgumentError("steady-state workload with 0 live buffers (expected >= 1)");
  if (options.core < 0)
    throw InvalidArgumentError("steady-state workload on core " + std::to_string(options.core) +
                               " (expected >= 0)");
  if (live > kMaxWorkloadEvents || options.pairs > (kMaxWorkloadEvents - live) / 2)
    throw InvalidArgumentError("steady-state workload of " + std::to_string(live) +
                               " live buffers and " + std::to_string(options.pairs) +
                               " pairs exceeds " + std::to_string(kMaxWorkloadEvents) + " events");
  if (options.hot_buffers > live)
    throw InvalidArgumentError("steady-state workload with " + std::to_string(options.hot_buffers) +
                               " hot buffers among " + std::to_string(live) +
                               " live (expected 0..live)");
  const SizeSampler sampler(options.sizes);
  std::mt19937_64 rng(options.seed);
  std::vector<TraceEvent> events;
  events.reserve(live + 2 * options.pairs);
  auto push = [&](TraceOp op, uint64_t id, uint64_t bytes) {
    TraceEvent e;
    e.t_us = static_cast<double>(events.size());
    e.core = options.core;
    e.op = op;
    e.id = id;
    e.bytes = bytes;
    events.push_back(std::move(e));
  };
  std::vector<uint64_t> slots(live);  // the live ids, in no particular order
  for (uint64_t i = 0; i < live; ++i) {
    slots[i] = i;
    push(TraceOp::kAlloc, i, sampler.sample(rng));
  }
  // Victims come from slots [first, live): all of them, or the W hot ones (the last W filled).
  const uint64_t first = options.hot_buffers == 0 ? 0 : live - options.hot_buffers;
  for (uint64_t k = 0; k < options.pairs; ++k) {
    const uint64_t victim = uniform_uint64(rng, first, live - 1);
    push(TraceOp::kFree, slots[victim], 0);
    slots[victim] = live + k;
    push(TraceOp::kAlloc, live + k, sampler.sample(rng));
  }
  return events;
}

}  // namespace vtpu
