#include "vtpu/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string_view>

#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"

namespace vtpu {

namespace {

void require_finite_nonnegative(double v, const char* what) {
  if (!(v >= 0) || !std::isfinite(v)) {
    throw InvalidArgumentError(std::string(what) + " is " + format_text("%g", v) +
                               " (expected a finite number >= 0)");
  }
}

const char* fit_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kCollectivePermute:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    default:
      return "all_gather";
  }
}

/// The (n-1)/n-style factor of the formula for B, and the bytes one core sends per byte of B.
double formula_factor(CollectiveKind kind, double n) {
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce:
      return (n - 1) / n;
    case CollectiveKind::kAllToAll:
      return (n - 1) / (n * n);
    case CollectiveKind::kCollectivePermute:
    default:
      return 1.0;
  }
}

/// The rate of a GEMM (m, k) x (k, n) from a table measured at every (m, k, n) in sizes^3
/// (KernelRates' layout: index (i_m S + i_k) S + i_n): trilinear interpolation of log(rate) in
/// (log2 m, log2 k, log2 n), each coordinate clamped to [sizes.front(), sizes.back()]. `sizes`
/// strictly increasing and non-empty, `rates` of sizes.size()^3 entries > 0 (validated profile).
double interpolate_gemm_rate(const std::vector<int64_t>& sizes, const std::vector<double>& rates,
                             double m, double k, double n) {
  const size_t S = sizes.size();
  // Per coordinate: the grid cell [i, i + 1] holding log2(x) (clamped) and the weight of i + 1.
  const auto cell = [&](double x, size_t* i, double* w) {
    const double lo = static_cast<double>(sizes.front());
    const double hi = static_cast<double>(sizes.back());
    const double lx = std::log2(std::clamp(x, lo, hi));
    *i = 0;
    while (*i + 2 < S && std::log2(static_cast<double>(sizes[*i + 1])) <= lx) ++*i;
    if (S == 1) {
      *w = 0;
      return;
    }
    const double a = std::log2(static_cast<double>(sizes[*i]));
    const double b = std::log2(static_cast<double>(sizes[*i + 1]));
    *w = std::clamp((lx - a) / (b - a), 0.0, 1.0);
  };
  size_t im = 0, ik = 0, in = 0;
  double wm = 0, wk = 0, wn = 0;
  cell(m, &im, &wm);
  cell(k, &ik, &wk);
  cell(n, &in, &wn);
  double log_rate = 0;
  for (int dm = 0; dm < 2; ++dm) {
    for (int dk = 0; dk < 2; ++dk) {
      for (int dn = 0; dn < 2; ++dn) {
        const double w = (dm ? wm : 1 - wm) * (dk ? wk : 1 - wk) * (dn ? wn : 1 - wn);
        if (w == 0) continue;
        const size_t idx = ((im + dm) * S + (ik + dk)) * S + (in + dn);
        log_rate += w * std::log(rates[idx]);
      }
    }
  }
  return std::exp(log_rate);
}

}  // namespace

CostModel::CostModel(HardwareProfile profile) : profile_(std::move(profile)) {
  profile_.validate();
}

CostModel CostModel::uniform(double alpha_seconds, double beta_seconds_per_byte,
                             double all_to_all_factor) {
  require_finite_nonnegative(alpha_seconds, "alpha");
  require_finite_nonnegative(beta_seconds_per_byte, "beta");
  require_finite_nonnegative(all_to_all_factor, "all-to-all factor");
  CostModel m = this_machine();
  m.uniform_ = true;
  m.uniform_alpha_ = alpha_seconds;
  m.uniform_beta_ = beta_seconds_per_byte;
  m.uniform_factor_ = all_to_all_factor;
  return m;
}

const CostModel& CostModel::this_machine() {
  static const CostModel kModel(HardwareProfile::get("this_machine"));
  return kModel;
}

CostModel CostModel::for_cores(int num_cores) const {
  if (num_cores < 0) {
    throw InvalidArgumentError("cost model: num_cores is " + std::to_string(num_cores) +
                               " (expected >= 1, or 0 to unset)");
  }
  CostModel m = *this;
  m.concurrent_cores_ = num_cores;
  return m;
}

double CostModel::oversubscription_at(int num_cores) const {
  const int cpus = profile_.host_cpus;
  if (cpus <= 0 || num_cores <= cpus) return 1.0;
  return static_cast<double>(num_cores) / cpus;
}

bool CostModel::fits_in_cache(double working_set_bytes) const {
  if (profile_.cache_bytes == 0) return false;
  const int cpus = profile_.host_cpus;
  const int n = concurrent_cores_;
  const double sharers = cpus > 0 && n > cpus ? std::ceil(static_cast<double>(n) / cpus) : 1.0;
  return working_set_bytes * sharers <= static_cast<double>(profile_.cache_bytes);
}

bool CostModel::fits_in_last_level_cache(double working_set_bytes) const {
  if (profile_.llc_bytes == 0 || fits_in_cache(working_set_bytes)) return false;
  const double sharers = std::max(1, concurrent_cores_);
  return std::max(working_set_bytes, step_footprint_bytes_) * sharers <=
         static_cast<double>(profile_.llc_bytes);
}

CostModel CostModel::with_step_footprint(double bytes_per_core) const {
  if (!(bytes_per_core >= 0) || !std::isfinite(bytes_per_core)) {
    throw InvalidArgumentError("cost model: step footprint is " + std::to_string(bytes_per_core) +
                               " bytes per core (expected a finite value >= 0)");
  }
  CostModel m = *this;
  m.step_footprint_bytes_ = bytes_per_core;
  return m;
}

int CostModel::torus_rank() const {
  const std::string& t = profile_.topology;
  if (t == "torus_3d") return 3;
  if (t == "torus_2d") return 2;
  if (t == "ring") return 1;
  return 0;
}

int CostModel::torus_dims_used(const std::vector<int>& mesh_axis_positions) const {
  const int rank = torus_rank();
  std::set<int> dims;
  for (int p : mesh_axis_positions) dims.insert(std::min(p, rank - 1));
  return static_cast<int>(dims.size());
}

bool CostModel::is_measured_spike(const std::vector<std::pair<double, double>>& m, size_t i) {
  const size_t n = m.size();
  if (n < 3 || i >= n) return false;
  if (i == 0) return m[0].second > kSpikeFactor * m[1].second;
  if (i == n - 1) {  // the last size may grow with its bytes: allow for their ratio
    return m[i].second > kSpikeFactor * m[i - 1].second * (m[i].first / m[i - 1].first);
  }
  return m[i].second > kSpikeFactor * std::max(m[i - 1].second, m[i + 1].second);
}

double CostModel::measured_seconds(const CollectiveFit& fit, double bytes, double beta_factor) {
  // Priced through the curve's monotone non-decreasing envelope, the running maximum over sizes,
  // of the points that are not spikes (header): a point below an earlier, smaller size's time is
  // lifted to that time, and a spike is left out.
  const auto& m = fit.measured;
  size_t first = 0;
  while (first + 1 < m.size() && is_measured_spike(m, first)) ++first;
  if (bytes <= m[first].first) return m[first].second;
  double envelope = m[first].second;  // the running maximum up to the current point
  double at = m[first].first;         // the size of the last point taken
  for (size_t i = first + 1; i < m.size(); ++i) {
    if (is_measured_spike(m, i)) continue;
    const double next = std::max(envelope, m[i].second);
    if (bytes < m[i].first) {
      const double w = (bytes - at) / (m[i].first - at);
      return envelope + w * (next - envelope);
    }
    envelope = next;
    at = m[i].first;
  }
  return envelope + fit.beta_seconds_per_byte * beta_factor * (bytes - at);
}

const CollectiveFit* CostModel::calibrated_fit(const std::string& op, int64_t n) const {
  if (uniform_) return nullptr;
  const auto it = profile_.collectives.find(op);
  if (it == profile_.collectives.end() || it->second.empty()) return nullptr;
  // The fit of group size n, else the nearest group size in log n; a tie (n halfway in log
  // between two calibrated sizes) goes to the larger size (header).
  const double log_n = std::log2(static_cast<double>(std::max<int64_t>(n, 1)));
  const CollectiveFit* best = nullptr;
  double best_distance = 0;
  for (const CollectiveFit& f : it->second) {
    const double d = std::abs(std::log2(static_cast<double>(f.group_size)) - log_n);
    if (best == nullptr || d < best_distance ||
        (d == best_distance && f.group_size > best->group_size)) {
      best = &f;
      best_distance = d;
    }
  }
  return best;
}

double CostModel::all_to_all_factor(int64_t n) const {
  if (uniform_) return uniform_factor_;
  if (n < 2) return 1.0;
  if (const CollectiveFit* a2a = calibrated_fit("all_to_all", n)) {
    // c relative to the all-gather's beta as priced: its fit for n, else the links over one torus
    // dimension (a profile may calibrate the all-to-all alone).
    const CollectiveFit* ag = calibrated_fit("all_gather", n);
    const double link = profile_.link_bytes_per_second;
    const double ag_beta = ag != nullptr ? ag->beta_seconds_per_byte
                           : link > 0    ? 1.0 / ((torus_rank() == 0 ? 1.0 : 2.0) * link)
                                         : 0.0;
    // Each beta is scaled by s(N) / s(its group size): the ratio as priced.
    const double scale =
        concurrent_cores_ > 0 && ag != nullptr
            ? oversubscription_at(ag->group_size) / oversubscription_at(a2a->group_size)
            : 1.0;
    return ag_beta > 0 ? scale * a2a->beta_seconds_per_byte / ag_beta : 1.0;
  }
  if (torus_rank() == 0) return 1.0;
  const double nn = static_cast<double>(n);
  return std::floor(nn * nn / 4) / (nn - 1);
}

CollectiveCost CostModel::collective(CollectiveKind kind, double bytes,
                                     const std::vector<int>& mesh_axis_positions,
                                     const std::vector<int64_t>& axis_sizes) const {
  if (mesh_axis_positions.size() != axis_sizes.size()) {
    throw InvalidArgumentError("cost model: " + std::to_string(mesh_axis_positions.size()) +
                               " mesh axis positions but " + std::to_string(axis_sizes.size()) +
                               " axis sizes (expected one size per axis)");
  }
  int64_t n = 1;
  for (int64_t s : axis_sizes) {
    if (s < 1) {
      throw InvalidArgumentError("cost model: axis size " + std::to_string(s) + " (expected >= 1)");
    }
    n *= s;
  }
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kCollectivePermute:
      break;
    default:
      throw UnimplementedError("cost model: no formula for " + std::string(collective_name(kind)) +
                               " (expected all_gather, reduce_scatter, all_reduce, all_to_all or "
                               "collective_permute)");
  }
  CollectiveCost c;
  if (n <= 1 || bytes <= 0) return c;
  // Only axes of size > 1 span devices: a size-1 axis maps to no torus dimension (its ring has
  // one chip and no links), so it neither adds links nor an all-to-all phase.
  std::vector<int> positions;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < axis_sizes.size(); ++i) {
    if (axis_sizes[i] > 1) {
      positions.push_back(mesh_axis_positions[i]);
      sizes.push_back(axis_sizes[i]);
    }
  }
  const double nd = static_cast<double>(n);
  c.sent_bytes_per_core =
      formula_factor(kind, nd) * bytes * (kind == CollectiveKind::kAllReduce ? 2 : 1);
  const auto finish = [&](double alpha, double beta, double factor) {
    c.alpha_seconds = alpha;
    c.beta_seconds_per_byte = beta;
    c.factor = factor;
    const double one = alpha + beta * formula_factor(kind, nd) * bytes * factor;
    c.seconds = kind == CollectiveKind::kAllReduce ? 2 * one : one;
    return c;
  };
  if (uniform_) {
    return finish(uniform_alpha_, uniform_beta_,
                  kind == CollectiveKind::kAllToAll ? uniform_factor_ : 1.0);
  }
  // A permute sends each device's block to one peer, whatever the group: it is priced as the
  // exchange of a group of 2 (the header), not by the fit of its whole group.
  const int64_t fit_n = kind == CollectiveKind::kCollectivePermute ? 2 : n;
  if (const CollectiveFit* fit = calibrated_fit(fit_name(kind), fit_n)) {
    const CollectiveFit& f = *fit;
    // The fit ran with group_size cores busy; this program keeps concurrent_cores_ busy (header).
    const double scale = concurrent_cores_ > 0 ? oversubscription_at(concurrent_cores_) /
                                                     oversubscription_at(f.group_size)
                                               : 1.0;
    finish(scale * f.alpha_seconds, scale * f.beta_seconds_per_byte, 1.0);
    if (!f.measured.empty()) {  // the measured curve (header)
      const bool permute = kind == CollectiveKind::kCollectivePermute;
      const double reps = kind == CollectiveKind::kAllReduce ? 2 : 1;
      const double table_bytes = permute ? 2 * bytes : bytes;
      const double beyond_factor = permute ? 0.5 : formula_factor(kind, nd);
      c.seconds = scale * measured_seconds(f, table_bytes, reps * beyond_factor);
      c.alpha_seconds = scale * measured_seconds(f, 0, 0) / reps;  // the first trusted time
      c.measured = true;
    }
    return c;
  }
  const double link = profile_.link_bytes_per_second;
  const double hop = profile_.link_latency_seconds;
  if (!(link > 0)) {
    throw InvalidArgumentError("hardware profile '" + profile_.name +
                               "' has no link_bytes_per_second and no calibrated " +
                               fit_name(kind) + " (expected one of them to price collectives)");
  }
  const int rank = torus_rank();
  if (kind == CollectiveKind::kCollectivePermute) return finish(hop, 1.0 / link, 1.0);
  if (rank == 0) {  // shared memory: one copy engine per core, time-shared (header)
    const double s = oversubscription();
    return finish(s * hop * (nd - 1), s / link, 1.0);
  }
  if (kind == CollectiveKind::kAllToAll && rank > 1 && sizes.size() > 1) {
    // Dimension-ordered: one all-to-all phase per torus dimension, each over that dimension's
    // ring with the whole per-core buffer (B_i = n_i * B / n).
    std::map<int, int64_t> per_dim;  // torus dimension -> devices along it in the group
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t& s = per_dim.try_emplace(std::min(positions[i], rank - 1), 1).first->second;
      s *= sizes[i];
    }
    double seconds = 0, alpha = 0;
    for (const auto& [dim, ni] : per_dim) {
      if (ni < 2) continue;
      const double nid = static_cast<double>(ni);
      const double bi = bytes * nid / nd;
      alpha += hop * (nid - 1);
      seconds += hop * (nid - 1) +
                 (1.0 / (2 * link)) * (nid - 1) / (nid * nid) * bi * all_to_all_factor(ni);
    }
    c.alpha_seconds = alpha;
    c.beta_seconds_per_byte = 1.0 / (2 * link);
    c.factor = (seconds - alpha) / (c.beta_seconds_per_byte * formula_factor(kind, nd) * bytes);
    c.seconds = seconds;
    return c;
  }
  const int dims = rank == 1 ? 1 : torus_dims_used(positions);
  const double beta = 1.0 / (2.0 * dims * link);
  return finish(hop * (nd - 1), beta,
                kind == CollectiveKind::kAllToAll ? all_to_all_factor(n) : 1.0);
}

double CostModel::peak_flops_per_core(const std::string& dtype) const {
  return profile_.peak_flops(dtype) / profile_.cores_per_chip;
}

uint64_t CostModel::hbm_bytes_per_core() const {
  return profile_.hbm_bytes / static_cast<uint64_t>(profile_.cores_per_chip);
}

double CostModel::hbm_bytes_per_second_per_core() const {
  return profile_.hbm_bytes_per_second / profile_.cores_per_chip;
}

double CostModel::compute_seconds(double flops, const std::string& dtype) const {
  return flops / peak_flops_per_core(dtype) * oversubscription();
}

double CostModel::hbm_seconds(double bytes) const {
  return bytes / hbm_bytes_per_second_per_core() * oversubscription();
}

double CostModel::memory_seconds(double bytes, double working_set_bytes) const {
  if (fits_in_cache(working_set_bytes)) {
    return bytes / profile_.cache_bytes_per_second * oversubscription();
  }
  if (fits_in_last_level_cache(working_set_bytes)) {
    return bytes / profile_.llc_bytes_per_second * oversubscription();
  }
  return hbm_seconds(bytes);
}

double CostModel::gemm_flops_per_second(double m, double k, double n, const std::string& dtype,
                                        double working_set_bytes) const {
  const KernelRates& r = profile_.kernels;
  if (uniform_ || r.gemm_sizes.empty() || dtype != "f32") return peak_flops_per_core(dtype);
  const bool warm =
      !r.gemm_warm_flops_per_second.empty() &&
      (fits_in_cache(working_set_bytes) || fits_in_last_level_cache(working_set_bytes));
  return interpolate_gemm_rate(
             r.gemm_sizes, warm ? r.gemm_warm_flops_per_second : r.gemm_flops_per_second, m, k, n) /
         profile_.cores_per_chip;
}

double CostModel::gemm_seconds(double m, double k, double n, const std::string& dtype, double count,
                               double working_set_bytes) const {
  if (m <= 0 || k <= 0 || n <= 0 || count <= 0) return 0.0;
  return count * 2 * m * k * n / gemm_flops_per_second(m, k, n, dtype, working_set_bytes) *
         oversubscription();
}

double CostModel::elementwise_seconds(const std::string& kernel, double elements) const {
  const auto it = profile_.kernels.elementwise_per_second.find(kernel);
  if (it == profile_.kernels.elementwise_per_second.end()) {
    throw FailedPreconditionError("hardware profile '" + profile_.name +
                                  "' has no kernels.elementwise_per_second." + kernel +
                                  " (expected a profile measured by `vtpu bench hardware`)");
  }
  if (elements <= 0) return 0.0;
  return elements / (it->second / profile_.cores_per_chip) * oversubscription();
}

double CostModel::row_seconds(const std::string& kernel, double rows, double length) const {
  const auto it = profile_.kernels.row_kernels.find(kernel);
  if (it == profile_.kernels.row_kernels.end()) {
    throw FailedPreconditionError("hardware profile '" + profile_.name +
                                  "' has no kernels.row_kernels." + kernel +
                                  " (expected a profile measured by `vtpu bench hardware`)");
  }
  if (rows <= 0 || length <= 0) return 0.0;
  return rows * (it->second.seconds_per_row + it->second.seconds_per_element * length) *
         profile_.cores_per_chip * oversubscription();
}

double CostModel::op_seconds(double flops, double hbm_bytes, const std::string& dtype) const {
  return std::max(compute_seconds(flops, dtype), hbm_seconds(hbm_bytes));
}

double CostModel::op_seconds(double flops, double traffic_bytes, double working_set_bytes,
                             const std::string& dtype) const {
  return std::max(compute_seconds(flops, dtype), memory_seconds(traffic_bytes, working_set_bytes));
}

std::string CostModel::measured_sizes_text(const CollectiveFit& fit) {
  if (fit.measured.empty()) return {};
  return count_text(static_cast<long long>(fit.measured.size()), "size") + " " +
         format_bytes(static_cast<uint64_t>(fit.measured.front().first)) + ".." +
         format_bytes(static_cast<uint64_t>(fit.measured.back().first));
}

std::string CostModel::describe_host() const {
  const HardwareProfile& p = profile_;
  if (p.host_cpus <= 0 || uniform_) return {};
  char line[160];
  if (concurrent_cores_ > 0) {
    std::snprintf(line, sizeof line, "; %s on %s: work x %.3g",
                  count_text(concurrent_cores_, "virtual core").c_str(),
                  count_text(p.host_cpus, "host CPU").c_str(), oversubscription());
  } else {
    std::snprintf(line, sizeof line, "; %s (core count unset: no oversubscription)",
                  count_text(p.host_cpus, "host CPU").c_str());
  }
  return line;
}

std::string CostModel::summary(bool with_compute) const {
  std::string s = describe_links(/*fits=*/false) + describe_host();
  if (with_compute && has_kernel_rates()) s += "; compute: measured kernel rates";
  return s;
}

std::string CostModel::without_label(std::string line) {
  constexpr std::string_view kLabel = "cost model: ";
  if (line.starts_with(kLabel)) line.erase(0, kLabel.size());
  return line;
}

std::string CostModel::describe(bool with_compute) const {
  std::string s = describe_links() + describe_host();
  const HardwareProfile& p = profile_;
  char line[256];
  if (with_compute && has_kernel_rates()) {
    const KernelRates& k = p.kernels;
    std::snprintf(
        line, sizeof line,
        "; compute per kernel: measured GEMM rates %s..%s (m, k, n)%s, transcendentals %.3g/s, "
        "elementwise %.3g/s, layer norm / softmax / cross-entropy rows",
        std::to_string(k.gemm_sizes.front()).c_str(), std::to_string(k.gemm_sizes.back()).c_str(),
        k.gemm_warm_flops_per_second.empty() ? "" : " (warm when the working set fits the cache)",
        k.elementwise_per_second.at("transcendental"), k.elementwise_per_second.at("pass"));
    s += line;
  }
  if (with_compute && p.cache_bytes > 0 && !uniform_) {
    std::snprintf(line, sizeof line, "; working sets <= %s per CPU at %.3g B/s (cache)",
                  format_bytes(p.cache_bytes).c_str(), p.cache_bytes_per_second);
    s += line;
    if (p.llc_bytes > 0) {
      std::snprintf(line, sizeof line, ", <= %s over all cores at %.3g B/s (last-level cache)",
                    format_bytes(p.llc_bytes).c_str(), p.llc_bytes_per_second);
      s += line;
    }
  }
  return s;
}

std::string CostModel::describe_links(bool list_fits) const {
  char line[512];
  if (uniform_) {
    std::snprintf(line, sizeof line,
                  "cost model: alpha %.3g s, beta %.3g s/B (%.3g GB/s), all-to-all factor %g",
                  uniform_alpha_, uniform_beta_, uniform_beta_ > 0 ? 1e-9 / uniform_beta_ : 0.0,
                  uniform_factor_);
    return line;
  }
  if (torus_rank() == 0) {
    std::snprintf(line, sizeof line, "%s (%s): alpha %.3g s per step, beta 1/link = %.3g s/B",
                  profile_.name.c_str(), profile_.topology.c_str(), profile_.link_latency_seconds,
                  profile_.link_bytes_per_second > 0 ? 1.0 / profile_.link_bytes_per_second : 0.0);
  } else {
    std::snprintf(line, sizeof line,
                  "%s (%s): alpha %.3g s per ring step, link %.3g B/s one way, "
                  "beta 1/(2 k link) over k torus dimensions",
                  profile_.name.c_str(), profile_.topology.c_str(), profile_.link_latency_seconds,
                  profile_.link_bytes_per_second);
  }
  const std::string links = line;
  if (profile_.collectives.empty()) return "cost model: " + links;
  // A profile may calibrate only some collectives; the others are priced from the links,
  // and the line says which.
  std::string s = "cost model: " + profile_.name + " (calibrated";
  std::vector<std::string> from_links;
  // summary(): runs of collectives calibrated on the same core counts, "all_gather,
  // reduce_scatter on 2, 4, 8 cores".
  std::vector<std::pair<std::string, std::string>> ops_on_cores;
  for (const char* op : {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"}) {
    const auto it = profile_.collectives.find(op);
    if (it == profile_.collectives.end()) {
      from_links.push_back(op);
      continue;
    }
    std::vector<CollectiveFit> sorted = it->second;
    std::ranges::sort(sorted, {}, &CollectiveFit::group_size);
    if (!list_fits) {
      std::string cores;
      for (const CollectiveFit& f : sorted) {
        cores += (cores.empty() ? "" : ", ") + std::to_string(f.group_size);
      }
      cores += " cores";  // group_size >= 2
      if (!ops_on_cores.empty() && ops_on_cores.back().second == cores) {
        ops_on_cores.back().first += std::string(", ") + op;
      } else {
        ops_on_cores.emplace_back(op, cores);
      }
      continue;
    }
    s += std::string("; ") + op;
    for (size_t i = 0; i < sorted.size(); ++i) {
      std::snprintf(line, sizeof line, "%s alpha %.3g s, beta %.3g s/B on %d cores",
                    i > 0 ? "," : "", sorted[i].alpha_seconds, sorted[i].beta_seconds_per_byte,
                    sorted[i].group_size);
      s += line;
      if (!sorted[i].measured.empty()) {
        s += " (measured curve, " + measured_sizes_text(sorted[i]) + ")";
      }
    }
  }
  for (size_t i = 0; i < ops_on_cores.size(); ++i) {
    s += (i > 0 ? "; " : " ") + ops_on_cores[i].first + " on " + ops_on_cores[i].second;
  }
  s += ")";
  if (!from_links.empty()) {
    s += "; not calibrated, priced from the links: ";
    for (size_t i = 0; i < from_links.size(); ++i) s += (i > 0 ? ", " : "") + from_links[i];
    if (list_fits) s += " (" + links + ")";
  }
  return s;
}

}  // namespace vtpu
