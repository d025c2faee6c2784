// The --mesh and --axes arguments shared by `vtpu reshard` and `vtpu plan`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vtpu::examples {

/// "2x2x2" -> {2, 2, 2}; "8" -> {8}. Throws InvalidArgumentError naming the text when a part is
/// not an integer in 1..4096.
std::vector<int64_t> parse_mesh_shape(const std::string& text);

/// x, y, z, w, then a4, a5, ... for n axes.
std::vector<std::string> default_axis_names(size_t n);

}  // namespace vtpu::examples
