#include "vtpu/sharding/mesh_arg.h"

#include <algorithm>
#include <cstddef>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/sharding/mesh.h"

namespace vtpu {

namespace {

constexpr int64_t kMaxMeshSize = 4096;

}  // namespace

// Regression: std::stoll skipped leading whitespace and took a
// sign, so --mesh " 2x 2" and --mesh +2x2 were accepted. Only digits are now.
std::vector<int64_t> parse_mesh_shape(const std::string& text) {
  std::vector<int64_t> dims;
  size_t pos = 0;
  while (true) {
    const size_t x = text.find('x', pos);
    const std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    int64_t v = 0;
    bool ok = !part.empty() && part.size() <= 4;
    for (char ch : part) {
      ok = ok && ch >= '0' && ch <= '9';
      if (ok) v = v * 10 + (ch - '0');
    }
    if (!ok || v < 1 || v > kMaxMeshSize) {
      throw InvalidArgumentError(
          "--mesh '" + abbreviate(text) + "' is not a mesh shape (expected sizes 1.." +
          std::to_string(kMaxMeshSize) + " in decimal digits joined by 'x', e.g. 2x4)");
    }
    dims.push_back(v);
    if (x == std::string::npos) return dims;
    pos = x + 1;
  }
}

void check_mesh_devices(const std::string& text, const std::vector<int64_t>& shape, int64_t limit,
                        const std::string& why) {
  // The exact count up to 2^62; past it, "more than 2^62" (each size is in 1..4096, so the
  // check before each product keeps it below 2^63), so that --mesh 4096x32 says 131072, not "more
  // than 4096".
  constexpr int64_t kCountLimit = int64_t{1} << 62;
  int64_t devices = 1;
  bool more = false;
  for (size_t i = 0; i < shape.size() && !more; ++i) {
    more = devices > kCountLimit / shape[i];
    if (!more) devices *= shape[i];
  }
  if (more || devices > limit) {
    throw InvalidArgumentError("--mesh " + abbreviate(text) + " has " +
                               (more ? std::string("more than 2^62") : std::to_string(devices)) +
                               " devices (expected at most " + std::to_string(limit) + why + ")");
  }
}

std::vector<std::string> mesh_axis_names(const std::string& axes_text, const std::string& mesh_text,
                                         const std::vector<int64_t>& shape,
                                         std::vector<std::string> defaults) {
  std::vector<std::string> axes;
  if (axes_text.empty()) {
    axes = std::move(defaults);
  } else {
    // Regression: CLI11's delimiter dropped empty names, so
    // --axes ",y" said "names 1 axes" instead of naming the empty one.
    size_t pos = 0;
    while (true) {
      const size_t comma = axes_text.find(',', pos);
      const size_t end = comma == std::string::npos ? axes_text.size() : comma;
      if (end == pos) {
        throw InvalidArgumentError("--axes '" + abbreviate(axes_text) +
                                   "' has an empty name for axis " + std::to_string(axes.size()) +
                                   " (expected comma-separated, non-empty mesh axis names)");
      }
      axes.push_back(axes_text.substr(pos, end - pos));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    // "a),b" gave the candidate "dp(a))+tp(b)".
    if (const std::string problem = check_mesh_axis_name(i, axes[i]); !problem.empty()) {
      throw InvalidArgumentError("--axes '" + abbreviate(axes_text) + "': " + problem);
    }
    if (std::find(axes.begin(), axes.begin() + static_cast<std::ptrdiff_t>(i), axes[i]) !=
        axes.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw InvalidArgumentError("--axes '" + abbreviate(axes_text) + "' names '" +
                                 abbreviate(axes[i]) + "' twice (expected unique mesh axis names)");
    }
  }
  if (axes.size() != shape.size()) {
    throw InvalidArgumentError("--axes names " + std::to_string(axes.size()) + " axes but --mesh " +
                               abbreviate(mesh_text) + " has " + std::to_string(shape.size()) +
                               " (expected one name per axis)");
  }
  return axes;
}

std::vector<std::string> default_axis_names(size_t n) {
  static const char* kNames[] = {"x", "y", "z", "w"};
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(i < 4 ? kNames[i] : "a" + std::to_string(i));
  return out;
}

}  // namespace vtpu
