// Typed reads of JSON fields with vtpu's error messages, shared by the loaders of runtime options
// and hardware profiles, and JSON parsing that rejects repeated keys (hardware profiles, and
// model files in sharding/model_graph.cc). Internal to vtpu (.cc files include it; public headers
// do not).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

/// nlohmann::json::parse of `input` (text or a stream) that also rejects a key given twice in one
/// object, which nlohmann resolves silently to the last value. Throws InvalidArgumentError
/// "<context>: repeats the key '<key>' in one object (expected each key once)"; invalid JSON
/// throws nlohmann's parse_error as json::parse does.
template <typename Input>
nlohmann::json parse_json_unique_keys(Input&& input, const std::string& context) {
  std::vector<std::set<std::string>> keys;  // keys seen, one set per open object
  const nlohmann::json::parser_callback_t check =
      [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::object_start) keys.emplace_back();
        if (event == nlohmann::json::parse_event_t::object_end) keys.pop_back();
        if (event == nlohmann::json::parse_event_t::key &&
            !keys.back().insert(parsed.get<std::string>()).second) {
          throw InvalidArgumentError(context + ": repeats the key '" + parsed.get<std::string>() +
                                     "' in one object (expected each key once)");
        }
        return true;
      };
  return nlohmann::json::parse(std::forward<Input>(input), check);
}

}  // namespace vtpu
