#include "vtpu/sharding/data_tensor_layout.h"

#include <algorithm>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"

namespace vtpu {

std::string DataTensorLayout::to_string() const {
  return std::to_string(data) + "x" + std::to_string(tensor);
}

std::string DataTensorLayout::describe() const {
  const auto axes = [](const std::vector<std::string>& a) {
    if (a.empty()) return std::string();
    return (a.size() == 1 ? " (mesh axis " : " (mesh axes ") + join(a, ",") + ")";
  };
  return "data-parallel group " + std::to_string(data) + axes(data_axes) + " x tensor group " +
         std::to_string(tensor) + axes(tensor_axes);
}

DataTensorLayout DataTensorLayout::grid(int64_t data, int64_t tensor) {
  if (data < 1 || tensor < 1) {
    throw InvalidArgumentError("data x tensor layout " + std::to_string(data) + "x" +
                               std::to_string(tensor) + " (expected both sizes >= 1)");
  }
  return from_mesh(Mesh({data, tensor}, {"data", "model"}), {"data"}, {"model"});
}

DataTensorLayout DataTensorLayout::from_mesh(const Mesh& mesh,
                                             const std::vector<std::string>& data_axes,
                                             const std::vector<std::string>& tensor_axes) {
  for (const std::string& a : data_axes) {
    mesh.axis_index(a);  // an unknown axis throws, naming the mesh's axes
    if (std::find(tensor_axes.begin(), tensor_axes.end(), a) != tensor_axes.end()) {
      throw InvalidArgumentError("mesh axis '" + a +
                                 "' is both a data and a tensor axis (expected one role)");
    }
  }
  for (size_t i = 0; i < mesh.axis_names().size(); ++i) {
    const std::string& a = mesh.axis_names()[i];
    const bool used = std::find(data_axes.begin(), data_axes.end(), a) != data_axes.end() ||
                      std::find(tensor_axes.begin(), tensor_axes.end(), a) != tensor_axes.end();
    if (!used && mesh.shape()[i] > 1) {
      throw InvalidArgumentError("mesh axis '" + a + "' of size " +
                                 std::to_string(mesh.shape()[i]) +
                                 " has no role (expected it among the data or tensor axes)");
    }
  }
  const int64_t n = mesh.size();
  for (int64_t i = 0; i < n; ++i) {
    if (mesh.devices()[static_cast<size_t>(i)] != i) {
      throw InvalidArgumentError(mesh.to_string() + " does not number its devices 0..n-1");
    }
  }
  DataTensorLayout l;
  l.data_groups = mesh.replica_groups(data_axes);
  l.tensor_groups = mesh.replica_groups(tensor_axes);
  l.data_axes = data_axes;
  l.tensor_axes = tensor_axes;
  l.data = static_cast<int64_t>(l.data_groups.front().size());
  l.tensor = static_cast<int64_t>(l.tensor_groups.front().size());
  const auto per_core = std::vector<int>(static_cast<size_t>(n), -1);
  l.data_rank = l.tensor_rank = l.data_group = l.tensor_group = per_core;
  for (size_t g = 0; g < l.data_groups.size(); ++g) {
    for (size_t r = 0; r < l.data_groups[g].size(); ++r) {
      const auto c = static_cast<size_t>(l.data_groups[g][r]);
      l.data_rank[c] = static_cast<int>(r);
      l.data_group[c] = static_cast<int>(g);
    }
  }
  for (size_t g = 0; g < l.tensor_groups.size(); ++g) {
    for (size_t r = 0; r < l.tensor_groups[g].size(); ++r) {
      const auto c = static_cast<size_t>(l.tensor_groups[g][r]);
      l.tensor_rank[c] = static_cast<int>(r);
      l.tensor_group[c] = static_cast<int>(g);
    }
  }
  return l;
}

std::string describe_group_all_reduce(const CollectiveStats& stats, int64_t group_size,
                                      const std::string& per_step) {
  if (group_size == 1) return "none (a group of 1 core)";
  return std::to_string(stats.num_collectives) + " calls (" + per_step + "), " +
         format_bytes(stats.bytes);
}

}  // namespace vtpu
