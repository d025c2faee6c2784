// The --mesh and --axes arguments shared by `vtpu reshard` and `vtpu plan`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vtpu {

/// Devices of a mesh that a command plans without running (`vtpu reshard --explain`, `vtpu plan`;
/// a 256 x 256 reshard plan takes about a second) and that a run starts as virtual cores
/// (RuntimeOptions' num_cores limit; also what `vtpu plan --emit` writes, since `vtpu train` runs
/// the plan).
inline constexpr int64_t kMaxPlanDevices = 65536;
inline constexpr int64_t kMaxRunDevices = 1024;

/// "2x2x2" -> {2, 2, 2}; "8" -> {8}. Each part is decimal digits only (no sign, no whitespace)
/// with a value in 1..4096. Throws InvalidArgumentError naming the text otherwise.
std::vector<int64_t> parse_mesh_shape(const std::string& text);

/// Throws InvalidArgumentError "--mesh TEXT has N devices (expected at most LIMIT<why>)" when the
/// product of `shape` (from parse_mesh_shape(text)) exceeds `limit`; N is the exact product up
/// to 2^62 and "more than 2^62" beyond (never overflows).
void check_mesh_devices(const std::string& text, const std::vector<int64_t>& shape, int64_t limit,
                        const std::string& why);

/// The mesh's axis names: `axes_text` split at commas ("x,y"), or `defaults` when it is empty.
/// Throws InvalidArgumentError naming --axes for an empty name (",y", "x,,y", "x,"), a name that
/// is not an identifier ("a),b": sharding/mesh.h, check_mesh_axis_name), a repeated name ("a,a")
/// or a count other than shape's rank (naming --mesh too).
std::vector<std::string> mesh_axis_names(const std::string& axes_text, const std::string& mesh_text,
                                         const std::vector<int64_t>& shape,
                                         std::vector<std::string> defaults);

/// x, y, z, w, then a4, a5, ... for n axes.
std::vector<std::string> default_axis_names(size_t n);

}  // namespace vtpu
