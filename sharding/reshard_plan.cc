#include "vtpu/sharding/reshard_plan.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/sharding/block_copy.h"

namespace vtpu {

namespace {

std::string axes_text(const std::vector<std::string>& axes) {
  if (axes.empty()) return "-";
  if (axes.size() == 1) return axes[0];
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + axes[i];
  return s + ")";
}

std::string seconds_text(double s) {
  char buf[32];
  if (s == 0) return "0";
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  } else {
    // Past a second in ms, 12 years printed as "386173677021.164 ms".
    return format_seconds(s);
  }
  return buf;
}

}  // namespace

std::string reshard_op_name(ReshardOpKind op) {
  switch (op) {
    case ReshardOpKind::kAllReduce:
      return "all_reduce";
    case ReshardOpKind::kReduceScatter:
      return "reduce_scatter";
    case ReshardOpKind::kAllGather:
      return "all_gather";
    case ReshardOpKind::kAllToAll:
      return "all_to_all";
    case ReshardOpKind::kCollectivePermute:
      return "collective_permute";
    case ReshardOpKind::kSlice:
      return "dynamic_slice";
    case ReshardOpKind::kMakePartial:
      return "make_partial";
  }
  return "?";
}

std::string ReshardStep::op_label() const {
  std::string s = reshard_op_name(op);
  if (op == ReshardOpKind::kAllReduce || op == ReshardOpKind::kReduceScatter ||
      op == ReshardOpKind::kMakePartial) {
    s += "(" + std::string(reduce_op_name(reduce_op)) + ")";
  }
  return s;
}

std::string ReshardStep::to_string() const {
  std::string s = op_label() + " over " + axes_text(axes);
  if (!replica_groups.empty()) {
    s += " (" + std::to_string(replica_groups.size()) + " groups of " +
         std::to_string(replica_groups.front().size()) + ")";
  }
  if (op == ReshardOpKind::kAllToAll) {
    s += " split dim " + std::to_string(split_dim) + ", concat dim " + std::to_string(dim);
  } else if (dim >= 0) {
    s += " on dim " + std::to_string(dim);
  }
  if (op == ReshardOpKind::kCollectivePermute) {
    s += ", " + std::to_string(pairs.size()) + " pairs";
  }
  return s + ": " + spec_before.to_string() + " -> " + spec_after.to_string();
}

uint64_t ReshardPlan::total_sent_bytes_per_core() const {
  uint64_t total = 0;
  for (const ReshardStep& s : steps) total += s.sent_bytes_per_core;
  return total;
}

double ReshardPlan::total_estimated_seconds() const {
  double total = 0;
  for (const ReshardStep& s : steps) total += s.estimated_seconds;
  return total;
}

std::string ReshardPlan::to_string(bool verbose_cost) const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "reshard f32%s on %s\n  from %s\n  to   %s\n",
                shape_text(global_shape).c_str(), source.mesh().to_string().c_str(),
                source.spec().to_string().c_str(), target.spec().to_string().c_str());
  out += line;
  // The full description of a calibrated profile is about 1,400 characters on one line: only
  // asked for.
  out += "cost model: " + (verbose_cost ? cost_model_detail : cost_model) + "\n";
  if (steps.empty()) {
    return out + (num_elements_of(global_shape) == 0
                      ? "no steps: the array has no elements (every block is empty in both "
                        "shardings, so nothing moves)\n"
                      : "no steps: the array already has the target sharding\n");
  }
  // The columns are as wide as their widest cell (at least the header's minimum width).
  // Fixed widths let long axis names ("(data,model)") and group counts ("16x4096") run into the
  // next column.
  std::vector<std::array<std::string, 9>> rows;
  rows.push_back({"step", "op", "axes", "groups", "dims", "buffer/core", "bytes sent/core",
                  "est. time", "spec after"});
  for (size_t i = 0; i < steps.size(); ++i) {
    const ReshardStep& s = steps[i];
    const std::string groups = s.replica_groups.empty()
                                   ? "local"
                                   : std::to_string(s.replica_groups.size()) + "x" +
                                         std::to_string(s.replica_groups.front().size());
    std::string dims = "-";
    if (s.op == ReshardOpKind::kAllToAll) {
      // Not "1->0", which reads as the mesh axis moving from dimension 1 to 0, where
      // P('x', None) -> P(None, 'x') moves x from 0 to 1 (each core splits its block along 1 and
      // concatenates what it receives along 0).
      dims = "split " + std::to_string(s.split_dim) + ", concat " + std::to_string(s.dim);
    } else if (s.dim >= 0) {
      dims = std::to_string(s.dim);
    } else if (s.op == ReshardOpKind::kCollectivePermute) {
      dims = std::to_string(s.pairs.size()) + " pairs";
    }
    rows.push_back({std::to_string(i + 1), s.op_label(), axes_text(s.axes), groups, dims,
                    shape_text(s.buffer_shape), std::to_string(s.sent_bytes_per_core),
                    seconds_text(s.estimated_seconds), s.spec_after.to_string()});
  }
  // Minimum widths as the table had them; right-aligned: step, bytes, time.
  std::array<size_t, 9> width = {4, 22, 9, 7, 8, 12, 14, 11, 0};
  constexpr std::array<bool, 9> right = {true,  false, false, false, false,
                                         false, true,  true,  false};
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string text;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - std::min(width[c], row[c].size()), ' ');
      if (c == 8) {
        text += row[c];  // the last column: no padding
      } else {
        text += right[c] ? pad + row[c] : row[c] + pad;
        text += c == 0 || c == 7 ? "  " : " ";
      }
    }
    out += text + "\n";
  }
  std::snprintf(line, sizeof line, "total: %s, %llu bytes sent per core, estimated %s\n",
                count_text(static_cast<long long>(steps.size()), "step").c_str(),
                static_cast<unsigned long long>(total_sent_bytes_per_core()),
                seconds_text(total_estimated_seconds()).c_str());
  return out + line;
}

nlohmann::json ReshardPlan::to_json() const {
  const auto index_or_null = [](int i) { return i >= 0 ? nlohmann::json(i) : nlohmann::json(); };
  nlohmann::json rows = nlohmann::json::array();
  for (const ReshardStep& s : steps) {
    const bool reduces = s.op == ReshardOpKind::kAllReduce ||
                         s.op == ReshardOpKind::kReduceScatter ||
                         s.op == ReshardOpKind::kMakePartial;
    nlohmann::json pairs = nlohmann::json::array();
    for (const auto& [from, to] : s.pairs) pairs.push_back({from, to});
    rows.push_back(
        {{"op", reshard_op_name(s.op)},
         {"reduce_op",
          reduces ? nlohmann::json(std::string(reduce_op_name(s.reduce_op))) : nlohmann::json()},
         {"collective", s.op != ReshardOpKind::kSlice && s.op != ReshardOpKind::kMakePartial},
         {"axes", s.axes},
         {"replica_groups",
          s.replica_groups.empty() ? nlohmann::json::array() : nlohmann::json(s.replica_groups)},
         {"dim", index_or_null(s.dim)},
         {"split_dim", index_or_null(s.split_dim)},
         {"pairs", pairs},
         {"spec_before", s.spec_before.to_string()},
         {"spec_after", s.spec_after.to_string()},
         {"buffer_shape", s.buffer_shape},
         {"buffer_bytes", s.buffer_bytes},
         {"comm_bytes_per_core", s.sent_bytes_per_core},
         {"comm_seconds", s.estimated_seconds}});
  }
  return {{"dtype", "f32"},
          {"global_shape", global_shape},
          {"mesh", {{"axes", source.mesh().axis_names()}, {"shape", source.mesh().shape()}}},
          {"from", source.spec().to_string()},
          {"to", target.spec().to_string()},
          {"cost_model", cost_model},
          {"steps", rows},
          {"comm_bytes_per_core", total_sent_bytes_per_core()},
          {"comm_seconds", total_estimated_seconds()}};
}
}  // namespace vtpu
