// Typed reads of JSON fields with vtpu's error messages, shared by the loaders of runtime options
// and hardware profiles. Internal to vtpu::runtime (its .cc files include it; public headers do
// not).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "common/units.h"

namespace vtpu {

/// A byte size: a non-negative integer or a string such as "16G" (parse_bytes). Throws
/// InvalidArgumentError "<context> '<key>' is <value> (expected ...)".
inline uint64_t json_bytes_field(const nlohmann::json& j, const char* key, const char* context) {
  const nlohmann::json& v = j.at(key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  // A non-negative integer built in C++ (nlohmann::json{{"k", 4096}}) is stored as signed.
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(v.get<int64_t>());
  }
  if (v.is_string()) return parse_bytes(v.get<std::string>());
  throw InvalidArgumentError(
      std::string(context) + " '" + key + "' is " + v.dump() +
      " (expected a non-negative integer of bytes or a string like \"16G\")");
}

}  // namespace vtpu
