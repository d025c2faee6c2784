#include "examples/mesh_arg.h"

#include <stdexcept>

#include "common/error.h"

namespace vtpu::examples {

std::vector<int64_t> parse_mesh_shape(const std::string& text) {
  std::vector<int64_t> dims;
  size_t pos = 0;
  while (true) {
    const size_t x = text.find('x', pos);
    const std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || v < 1 || v > 4096) {
      throw InvalidArgumentError("--mesh '" + text +
                                 "' is not a mesh shape (expected sizes >= 1 joined by 'x', "
                                 "e.g. 2x4)");
    }
    dims.push_back(v);
    if (x == std::string::npos) return dims;
    pos = x + 1;
  }
}

std::vector<std::string> default_axis_names(size_t n) {
  static const char* kNames[] = {"x", "y", "z", "w"};
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(i < 4 ? kNames[i] : "a" + std::to_string(i));
  return out;
}

}  // namespace vtpu::examples
