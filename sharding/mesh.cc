#include "vtpu/sharding/mesh.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"

namespace vtpu {

namespace {

std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

std::vector<int> iota_ids(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 1) return {};  // the main constructor reports the bad entry
    if (__builtin_mul_overflow(n, s, &n) || n > (int64_t{1} << 30)) {
      throw InvalidArgumentError("mesh shape (" + join_ints(shape) +
                                 ") has more than 2^30 devices (expected at most 2^30)");
    }
  }
  std::vector<int> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

}  // namespace

std::string check_mesh_axis_name(size_t index, std::string_view name) {
  const auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  bool ok = !name.empty() && (letter(name[0]) || name[0] == '_');
  for (size_t i = 1; ok && i < name.size(); ++i) {
    ok = letter(name[i]) || digit(name[i]) || name[i] == '_';
  }
  if (ok) return {};
  return "axis " + std::to_string(index) + " name <" + abbreviate(name) +
         "> is not an identifier (expected [A-Za-z_][A-Za-z0-9_]*: ASCII letters, digits and '_', "
         "not starting with a digit, as strategy names and PartitionSpecs are built from axis "
         "names)";
}

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names,
           std::vector<int> device_ids)
    : shape_(std::move(shape)),
      axis_names_(std::move(axis_names)),
      devices_(std::move(device_ids)) {
  if (shape_.size() != axis_names_.size()) {
    throw InvalidArgumentError("mesh shape (" + join_ints(shape_) + ") has " +
                               std::to_string(shape_.size()) + " axes but " +
                               std::to_string(axis_names_.size()) +
                               " axis names were given (expected one name per axis)");
  }
  std::set<std::string_view> names;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] < 1) {
      throw InvalidArgumentError("mesh axis " + std::to_string(i) + " ('" + axis_names_[i] +
                                 "') has size " + std::to_string(shape_[i]) + " (expected >= 1)");
    }
    if (axis_names_[i].empty()) {
      throw InvalidArgumentError("mesh axis " + std::to_string(i) +
                                 " has an empty name (expected a non-empty name)");
    }
    // Regression: an axis named with a quote character was
    // accepted, but no PartitionSpec can name it, so the axis could only ever replicate; and
    // '(', ')', '+' and spaces made strategy names ambiguous. Identifiers only.
    if (const std::string problem = check_mesh_axis_name(i, axis_names_[i]); !problem.empty()) {
      throw InvalidArgumentError("mesh " + problem);
    }
    if (!names.insert(axis_names_[i]).second) {
      throw InvalidArgumentError("mesh axis name '" + axis_names_[i] +
                                 "' is used twice (expected unique axis names)");
    }
  }
  int64_t product = 1;
  bool overflow = false;
  for (int64_t s : shape_) overflow = overflow || __builtin_mul_overflow(product, s, &product);
  if (overflow || product != static_cast<int64_t>(devices_.size())) {
    throw InvalidArgumentError("mesh shape (" + join_ints(shape_) + ") needs " +
                               (overflow ? "more than 2^63" : std::to_string(product)) +
                               " devices but " + std::to_string(devices_.size()) +
                               " device ids were given (expected one id per mesh position)");
  }
  flat_index_.reserve(devices_.size());
  for (size_t i = 0; i < devices_.size(); ++i) {
    const int id = devices_[i];
    if (id < 0) {
      throw InvalidArgumentError("mesh device id " + std::to_string(id) + " at position " +
                                 std::to_string(i) + " is negative (expected ids >= 0)");
    }
    if (!flat_index_.emplace(id, static_cast<int64_t>(i)).second) {
      throw InvalidArgumentError("mesh device id " + std::to_string(id) +
                                 " is listed twice (expected unique ids)");
    }
  }
}

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names)
    : Mesh(shape, std::move(axis_names), iota_ids(shape)) {}

bool Mesh::has_axis(std::string_view name) const {
  for (const std::string& a : axis_names_) {
    if (a == name) return true;
  }
  return false;
}

int Mesh::axis_index(std::string_view name) const {
  for (size_t i = 0; i < axis_names_.size(); ++i) {
    if (axis_names_[i] == name) return static_cast<int>(i);
  }
  std::string known;
  for (const std::string& a : axis_names_) known += (known.empty() ? "'" : ", '") + a + "'";
  throw InvalidArgumentError("unknown mesh axis '" + std::string(name) + "' (" + to_string() +
                             " has axes: " + (known.empty() ? "none" : known) + ")");
}

int64_t Mesh::axis_size(std::string_view name) const {
  return shape_[static_cast<size_t>(axis_index(name))];
}

bool Mesh::contains_device(int device_id) const { return flat_index_.contains(device_id); }

int64_t Mesh::flat_index_of(int device_id) const {
  auto it = flat_index_.find(device_id);
  if (it == flat_index_.end()) {
    throw InvalidArgumentError("device " + std::to_string(device_id) + " is not in " + to_string());
  }
  return it->second;
}

std::vector<int64_t> Mesh::coords_of(int device_id) const {
  int64_t flat = flat_index_of(device_id);
  std::vector<int64_t> coords(shape_.size());
  for (size_t i = shape_.size(); i-- > 0;) {
    coords[i] = flat % shape_[i];
    flat /= shape_[i];
  }
  return coords;
}

int Mesh::device_at(const std::vector<int64_t>& coords) const {
  if (coords.size() != shape_.size()) {
    throw InvalidArgumentError("device_at got " + std::to_string(coords.size()) + " coordinates (" +
                               join_ints(coords) + ") but " + to_string() + " has " +
                               std::to_string(shape_.size()) + " axes");
  }
  int64_t flat = 0;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= shape_[i]) {
      throw InvalidArgumentError("coordinate " + std::to_string(coords[i]) + " on mesh axis '" +
                                 axis_names_[i] + "' is out of range (expected 0.." +
                                 std::to_string(shape_[i] - 1) + ")");
    }
    flat = flat * shape_[i] + coords[i];
  }
  return devices_[static_cast<size_t>(flat)];
}

std::vector<std::vector<int>> Mesh::replica_groups(const std::vector<int>& axis_positions) const {
  std::vector<int> others;
  for (int a = 0; a < num_axes(); ++a) {
    const auto n = std::count(axis_positions.begin(), axis_positions.end(), a);
    if (n > 1) {
      throw InvalidArgumentError("replica groups over mesh axis '" + axis_names_[size_t(a)] +
                                 "' named " + std::to_string(n) + " times (expected once)");
    }
    if (n == 0) others.push_back(a);
  }
  for (int a : axis_positions) {
    if (a < 0 || a >= num_axes()) {
      throw InvalidArgumentError("replica groups over mesh axis position " + std::to_string(a) +
                                 " of " + to_string() + " (expected 0.." +
                                 std::to_string(num_axes() - 1) + ")");
    }
  }
  auto count = [&](const std::vector<int>& list) {
    int64_t n = 1;
    for (int a : list) n *= shape_[static_cast<size_t>(a)];
    return n;
  };
  // Fills coords[list[...]] with the row-major digits of `index` over `list`.
  std::vector<int64_t> coords(shape_.size(), 0);
  auto place = [&](const std::vector<int>& list, int64_t index) {
    for (size_t i = list.size(); i-- > 0;) {
      const int64_t size = shape_[static_cast<size_t>(list[i])];
      coords[static_cast<size_t>(list[i])] = index % size;
      index /= size;
    }
  };
  std::vector<std::vector<int>> groups;
  for (int64_t g = 0; g < count(others); ++g) {
    place(others, g);
    std::vector<int> group;
    for (int64_t r = 0; r < count(axis_positions); ++r) {
      place(axis_positions, r);
      group.push_back(device_at(coords));
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<std::vector<int>> Mesh::replica_groups(const std::vector<std::string>& axes) const {
  std::vector<int> positions;
  for (const std::string& a : axes) positions.push_back(axis_index(a));
  return replica_groups(positions);
}

std::string Mesh::to_string() const {
  std::string s = "Mesh(";
  for (size_t i = 0; i < shape_.size(); ++i) {
    s += (i ? ", " : "") + axis_names_[i] + "=" + std::to_string(shape_[i]);
  }
  bool in_order = true;
  for (size_t i = 0; i < devices_.size(); ++i) in_order = in_order && devices_[i] == int(i);
  if (!in_order) {
    s += "; devices=[";
    for (size_t i = 0; i < devices_.size(); ++i) {
      s += (i ? ", " : "") + std::to_string(devices_[i]);
    }
    s += "]";
  }
  return s + ")";
}

}  // namespace vtpu
