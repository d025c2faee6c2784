// A device mesh: an n-d array of device (virtual core) ids with one name per axis, after
// jax.sharding.Mesh.
//
// Model: the mesh shape (4, 2) with axes ("x", "y") lays 8 device ids out row-major, so the
// device at coordinates (i, j) is devices()[i * 2 + j]:
//
//           y=0  y=1
//     x=0 [  0    1 ]
//     x=1 [  2    3 ]
//     x=2 [  4    5 ]
//     x=3 [  6    7 ]
//
// A mesh axis is a group of devices that a PartitionSpec can split an array dimension over (or a
// collective can run along). The ids need not be 0..n-1 nor in order: Mesh({2, 2}, {"x", "y"},
// {3, 1, 2, 0}) puts device 3 at (0, 0).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vtpu {

/// Mesh axis names are identifiers, [A-Za-z_][A-Za-z0-9_]* (ASCII letters, digits and '_', not
/// starting with a digit), as JAX's axis names are Python identifiers in practice. Strategy names
/// ("dp(data)+tp(model)"), PartitionSpecs ("P('x', None)") and plan files are built from them, so
/// a name holding '(', ')', '+', ',', a quote or a space made them ambiguous
/// (--axes "a),b" gave the candidate "dp(a))+tp(b)"). Returns "" for a valid name,
/// else the reason, naming the axis by its 0-based `index`: "axis 0 name <a)> is not an
/// identifier (expected [A-Za-z_][A-Za-z0-9_]*: ...)"; callers prefix where the name came from
/// ("mesh ", "--axes 'a),b': "). The name is abbreviated (common/strings.h). Pure. Thread-safe.
std::string check_mesh_axis_name(size_t index, std::string_view name);

/// An immutable n-d array of device ids with named axes. Thread-safe (immutable after
/// construction; copies are independent).
class Mesh {
 public:
  /// `shape[i]` is the number of devices along axis `axis_names[i]`; `device_ids` lists the ids
  /// in row-major order of the mesh coordinates. Throws InvalidArgumentError when: shape and
  /// axis_names differ in length; a shape entry is < 1; an axis name is empty, repeated or not
  /// an identifier (check_mesh_axis_name);
  /// product(shape) != device_ids.size(); an id is negative or repeated. A mesh with no axes
  /// (shape {}) holds exactly one device.
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names,
       std::vector<int> device_ids);
  /// The same with ids 0..product(shape)-1 in order. Throws as above.
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names);

  /// Devices per axis, in axis order.
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  /// Device ids in row-major order of the mesh coordinates.
  const std::vector<int>& devices() const { return devices_; }
  int num_axes() const { return static_cast<int>(shape_.size()); }
  /// Number of devices (the product of the shape).
  int64_t size() const { return static_cast<int64_t>(devices_.size()); }

  bool has_axis(std::string_view name) const;
  /// Position of axis `name` in axis_names(). Throws InvalidArgumentError naming `name` and
  /// listing the mesh's axes when the mesh has no such axis.
  int axis_index(std::string_view name) const;
  /// Number of devices along axis `name`. Throws like axis_index.
  int64_t axis_size(std::string_view name) const;

  bool contains_device(int device_id) const;
  /// Row-major position of `device_id` in devices(). Throws InvalidArgumentError if the device
  /// is not in the mesh.
  int64_t flat_index_of(int device_id) const;
  /// Coordinates of `device_id`, one per axis. Throws like flat_index_of.
  std::vector<int64_t> coords_of(int device_id) const;
  /// The device at `coords` (one per axis, each in [0, axis size)). Throws
  /// InvalidArgumentError for the wrong number of coordinates or one out of range.
  int device_at(const std::vector<int64_t>& coords) const;

  /// Replica groups over the axes at `axis_positions` (positions in axis_names(), major first):
  /// the devices that differ only in their coordinates on those axes. Each group lists its
  /// devices row-major over `axis_positions` in the given order, so a device's rank in its group
  /// is its shard index over those axes (JAX's flattening of P(('x', 'y'))). Groups come in
  /// row-major order of the other axes. No positions: one group per device. Throws
  /// InvalidArgumentError for a position out of range or repeated.
  std::vector<std::vector<int>> replica_groups(const std::vector<int>& axis_positions) const;
  /// The same by axis names. Throws like axis_index for an unknown name.
  std::vector<std::vector<int>> replica_groups(const std::vector<std::string>& axes) const;

  /// "Mesh(x=4, y=2)"; ids are appended when they are not 0..n-1 in order:
  /// "Mesh(x=2, y=2; devices=[3, 1, 2, 0])".
  std::string to_string() const;

  /// Same shape, axis names and device order.
  friend bool operator==(const Mesh& a, const Mesh& b) {
    return a.shape_ == b.shape_ && a.axis_names_ == b.axis_names_ && a.devices_ == b.devices_;
  }

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
  std::vector<int> devices_;
  std::unordered_map<int, int64_t> flat_index_;  // device id -> position in devices_
};

}  // namespace vtpu
