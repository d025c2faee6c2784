#include "vtpu/sharding/named_sharding.h"

#include <algorithm>
#include <map>
#include <utility>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"

namespace vtpu {

namespace {
constexpr int64_t kMaxDimension = int64_t{1} << 62;
}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec, ShardingMode mode)
    : mesh_(std::move(mesh)), spec_(std::move(spec)), mode_(mode) {
  std::map<std::string, size_t> first_dim;  // axis name -> first entry naming it
  std::vector<bool> named(static_cast<size_t>(mesh_.num_axes()), false);
  dim_axes_.resize(spec_.size());
  const size_t kUnreduced = spec_.size();  // first_dim value for the unreduced set
  auto where = [&](size_t d) {
    return d == kUnreduced ? std::string("unreduced") : "entry " + std::to_string(d);
  };
  for (size_t d = 0; d <= spec_.size(); ++d) {
    const std::vector<std::string>& names =
        d == kUnreduced ? spec_.unreduced() : spec_.entries()[d];
    for (const std::string& name : names) {
      if (!mesh_.has_axis(name)) {
        std::string known;
        for (const std::string& a : mesh_.axis_names()) {
          known += (known.empty() ? "'" : ", '") + a + "'";
        }
        throw InvalidArgumentError(
            "PartitionSpec " + abbreviate(spec_.to_string()) + " names axis '" + abbreviate(name) +
            "' in " + where(d) + ", which " + abbreviate(mesh_.to_string()) +
            " does not have (mesh axes: " + (known.empty() ? "none" : abbreviate(known)) + ")");
      }
      auto [it, inserted] = first_dim.emplace(name, d);
      if (!inserted) {
        throw InvalidArgumentError(
            "PartitionSpec " + abbreviate(spec_.to_string()) + " uses mesh axis '" +
            abbreviate(name) + "' twice (in " +
            (it->second == d ? where(d)
             : d < kUnreduced
                 ? "entries " + std::to_string(it->second) + " and " + std::to_string(d)
                 : where(it->second) + " and " + where(d)) +
            "); each mesh axis may shard at most one dimension, once, or be unreduced");
      }
      const int a = mesh_.axis_index(name);
      named[static_cast<size_t>(a)] = true;
      if (d < kUnreduced) dim_axes_[d].push_back(a);
    }
  }
  for (int a = 0; a < mesh_.num_axes(); ++a) {
    const std::vector<std::string>& u = spec_.unreduced();
    const bool unreduced =
        std::find(u.begin(), u.end(), mesh_.axis_names()[static_cast<size_t>(a)]) != u.end();
    if (unreduced) {
      partial_axes_.push_back(a);
    } else if (!named[static_cast<size_t>(a)]) {
      unnamed_axes_.push_back(a);
    }
  }
}

const std::vector<int>& NamedSharding::dim_axis_indices(int dim) const {
  static const std::vector<int> kNone;
  if (dim < 0) {
    throw InvalidArgumentError("dimension " + std::to_string(dim) + " is negative (expected >= 0)");
  }
  return static_cast<size_t>(dim) < dim_axes_.size() ? dim_axes_[static_cast<size_t>(dim)] : kNone;
}

int64_t NamedSharding::num_partials() const {
  int64_t n = 1;
  for (int a : partial_axes_) n *= mesh_.shape()[static_cast<size_t>(a)];
  return n;
}

int64_t NamedSharding::partial_index(int device) const {
  const std::vector<int64_t> coords = mesh_.coords_of(device);
  int64_t id = 0;
  for (int a : partial_axes_) {
    id = id * mesh_.shape()[static_cast<size_t>(a)] + coords[static_cast<size_t>(a)];
  }
  return id;
}

int64_t NamedSharding::num_shards(int dim) const {
  if (dim < 0) {
    throw InvalidArgumentError("dimension " + std::to_string(dim) + " is negative (expected >= 0)");
  }
  if (static_cast<size_t>(dim) >= dim_axes_.size()) return 1;
  int64_t n = 1;
  for (int a : dim_axes_[static_cast<size_t>(dim)]) n *= mesh_.shape()[static_cast<size_t>(a)];
  return n;
}

void NamedSharding::check_rank(const std::vector<int64_t>& global_shape) const {
  if (spec_.size() > global_shape.size()) {
    throw InvalidArgumentError(
        "PartitionSpec " + abbreviate(spec_.to_string()) + " has " + std::to_string(spec_.size()) +
        " entries but the array of shape " + shape_text(global_shape) + " has rank " +
        std::to_string(global_shape.size()) + " (expected at most one entry per dimension)");
  }
  for (size_t d = 0; d < global_shape.size(); ++d) {
    if (global_shape[d] < 0) {
      throw InvalidArgumentError("dimension " + std::to_string(d) + " of shape " +
                                 shape_text(global_shape) + " is negative (expected >= 0)");
    }
    // Regression: dimensions near INT64_MAX overflowed the ceil division and the index ranges.
    if (global_shape[d] > kMaxDimension) {
      throw InvalidArgumentError("dimension " + std::to_string(d) + " of shape " +
                                 shape_text(global_shape) + " is " +
                                 std::to_string(global_shape[d]) + " (expected at most 2^62)");
    }
  }
}

void NamedSharding::check_shape(const std::vector<int64_t>& global_shape) const {
  check_rank(global_shape);
  if (mode_ == ShardingMode::kStrict) {
    for (size_t d = 0; d < global_shape.size(); ++d) {
      const int64_t n = num_shards(static_cast<int>(d));
      if (global_shape[d] % n != 0) {
        throw InvalidArgumentError(
            "strict sharding " + abbreviate(spec_.to_string()) + " splits dimension " +
            std::to_string(d) + " of shape " + shape_text(global_shape) + " into " +
            std::to_string(n) + " shards, but its size " + std::to_string(global_shape[d]) +
            " is not divisible by " + std::to_string(n) + " (expected a multiple of " +
            std::to_string(n) + "; use ShardingMode::kPadded for uneven shards)");
      }
    }
  }
}

bool NamedSharding::is_even(const std::vector<int64_t>& global_shape) const {
  check_rank(global_shape);
  for (size_t d = 0; d < global_shape.size(); ++d) {
    if (global_shape[d] % num_shards(static_cast<int>(d)) != 0) return false;
  }
  return true;
}

std::vector<int64_t> NamedSharding::shard_shape(const std::vector<int64_t>& global_shape) const {
  check_shape(global_shape);
  std::vector<int64_t> shape(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    const int64_t n = num_shards(static_cast<int>(d));
    shape[d] = global_shape[d] / n + (global_shape[d] % n != 0);
  }
  return shape;
}

int64_t NamedSharding::shard_index(int device, int dim) const {
  const int64_t n = num_shards(dim);  // checks dim >= 0
  const std::vector<int64_t> coords = mesh_.coords_of(device);
  if (n == 1) return 0;
  int64_t index = 0;
  for (int a : dim_axes_[static_cast<size_t>(dim)]) {
    index = index * mesh_.shape()[static_cast<size_t>(a)] + coords[static_cast<size_t>(a)];
  }
  return index;
}

std::vector<IndexRange> NamedSharding::index_ranges(
    int device, const std::vector<int64_t>& global_shape) const {
  const std::vector<int64_t> chunk = shard_shape(global_shape);  // checks the shape
  std::vector<IndexRange> ranges(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    const int64_t i = shard_index(device, static_cast<int>(d));
    const int64_t dim = global_shape[d];
    const int64_t start = std::min(i * chunk[d], dim);
    ranges[d] = IndexRange{start, std::min(start + chunk[d], dim)};
  }
  if (global_shape.empty()) mesh_.flat_index_of(device);  // a scalar still needs a mesh device
  return ranges;
}

std::vector<int64_t> NamedSharding::local_shape(int device,
                                                const std::vector<int64_t>& global_shape) const {
  const std::vector<IndexRange> ranges = index_ranges(device, global_shape);
  std::vector<int64_t> shape(ranges.size());
  for (size_t d = 0; d < ranges.size(); ++d) shape[d] = ranges[d].size();
  return shape;
}

int64_t NamedSharding::replica_id(int device) const {
  const std::vector<int64_t> coords = mesh_.coords_of(device);
  int64_t id = 0;
  for (int a : unnamed_axes_) {
    id = id * mesh_.shape()[static_cast<size_t>(a)] + coords[static_cast<size_t>(a)];
  }
  return id;
}

int64_t NamedSharding::num_replicas() const {
  int64_t n = 1;
  for (int a : unnamed_axes_) n *= mesh_.shape()[static_cast<size_t>(a)];
  return n;
}

bool NamedSharding::is_fully_replicated() const {
  return !is_partial() && num_replicas() == mesh_.size();
}

std::string NamedSharding::to_string() const {
  return "NamedSharding(mesh=" + mesh_.to_string() + ", spec=" + spec_.to_string() +
         (mode_ == ShardingMode::kStrict ? ", strict" : "") + ")";
}

}  // namespace vtpu
