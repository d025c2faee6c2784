// vtpu's one JSON reading layer: bounded file reads, parsing that refuses repeated keys and deep
// nesting, and typed reads of fields that refuse unknown keys. Every reader of a JSON file
// (runtime options, hardware profiles, model and plan files, traces, stress reports) goes through
// it, so that one kind of mistake reads the same wherever it is made:
//
//   <where>: <path>: expected <expectation>, got <value>     a value of the wrong type or range
//   <where>: <path>: missing (expected <expectation>)        a required key is absent
//   <where>: <path>: unknown key (expected one of: a, b)     a key the format does not have
//   <where>: repeats the key '<key>' in one object (expected each key once)
//
// `where` names the document ("runtime options file 'vtpu.json'"), `path` the value inside it
// ("collectives.all_gather[1].group_size"). All of these are InvalidArgumentError; a file that
// cannot be opened is NotFoundError or PermissionDeniedError. Internal to vtpu: .cc files include
// it, public headers do not.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vtpu/common/error.h"

namespace vtpu {

/// The deepest nesting a document may have: vtpu's formats stay under ten levels, and quoting a
/// deeper value in a message (a recursive dump) could overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

/// `value` for a message: compact, ASCII, invalid UTF-8 replaced, cut to about 80 characters.
std::string json_value_text(const nlohmann::json& value);

/// nlohmann::json::parse of `input` (text or a stream) that also refuses a key given twice in one
/// object (nlohmann would keep the last value silently) and nesting deeper than kMaxJsonDepth.
/// Throws InvalidArgumentError "<where>: repeats the key '<key>' in one object (expected each
/// key once)"; invalid JSON throws nlohmann's exceptions, as json::parse does.
template <typename Input>
nlohmann::json parse_json_unique_keys(Input&& input, const std::string& where) {
  std::vector<std::set<std::string>> keys;  // keys seen, one set per open object
  const nlohmann::json::parser_callback_t check =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth > kMaxJsonDepth) {
          throw InvalidArgumentError(where + ": JSON nested deeper than " +
                                     std::to_string(kMaxJsonDepth) + " levels");
        }
        if (event == nlohmann::json::parse_event_t::object_start) keys.emplace_back();
        if (event == nlohmann::json::parse_event_t::object_end) keys.pop_back();
        if (event == nlohmann::json::parse_event_t::key &&
            !keys.back().insert(parsed.get<std::string>()).second) {
          throw InvalidArgumentError(where + ": repeats the key '" + parsed.get<std::string>() +
                                     "' in one object (expected each key once)");
        }
        return true;
      };
  return nlohmann::json::parse(std::forward<Input>(input), check);
}

/// parse_json_unique_keys of `text`, with nlohmann's errors turned into InvalidArgumentError
/// "<where>: not valid JSON at line L, column C: <detail>" (the column alone for one-line text).
nlohmann::json parse_json_text(const std::string& text, const std::string& where);

/// How long read_bounded_text_file waits for a FIFO or device to send more bytes.
inline constexpr std::chrono::milliseconds kStreamIdleTimeout{60000};

/// The text of the file `path`, at most `max_bytes` bytes; `what` names it in messages ("model
/// file"), `max_text` gives the limit in words ("16 MiB"). Refuses a directory or socket and a
/// NUL byte anywhere, and reads at most max_bytes + 64 KiB of anything, so an endless device
/// (/dev/zero) or FIFO is cut off; a FIFO (`--config <(...)`) is read until its writer closes
/// it, and one that sends nothing for kStreamIdleTimeout is DeadlineExceededError. Throws
/// NotFoundError or PermissionDeniedError "cannot open <what> '<path>': <reason>", and
/// InvalidArgumentError "<what> '<path>' is a directory (expected a file)", "... is N bytes
/// (expected at most M, <max_text>)", "... has a NUL byte at offset N (expected text)".
/// Thread-safe.
std::string read_bounded_text_file(const std::string& path, uintmax_t max_bytes,
                                   const std::string& what, const std::string& max_text);

/// read_bounded_text_file and parse_json_text together; `where` is "<what> '<path>'".
nlohmann::json read_json_file(const std::string& path, uintmax_t max_bytes, const std::string& what,
                              const std::string& max_text);

/// Throws InvalidArgumentError "<where>: <path>: <what>" (or "<where>: <what>" for an empty
/// path). The one place the layer's messages are put together.
[[noreturn]] void throw_json_error(const std::string& where, const std::string& path,
                                   const std::string& what);

/// One value of a document, present or missing, read as a type it must have. Each read throws
/// InvalidArgumentError naming `where`, the path, the expectation and the value. Borrows the
/// value: the document must outlive the field. Thread-compatible.
class JsonField {
 public:
  /// A missing value when `value` is null (the pointer, not a JSON null).
  JsonField(const nlohmann::json* value, std::string where, std::string path)
      : value_(value), where_(std::move(where)), path_(std::move(path)) {}

  bool present() const { return value_ != nullptr; }
  const std::string& path() const { return path_; }
  const std::string& where() const { return where_; }
  /// The raw value; "missing (expected <expected>)" if absent.
  const nlohmann::json& json(std::string_view expected) const;

  /// An integer in [lo, hi], written as one: 2.5, 4.0 and 1e3 are refused (a format that counts
  /// takes whole numbers only, and a fraction is never rounded away).
  int64_t integer(int64_t lo, int64_t hi) const;
  uint64_t unsigned_integer(uint64_t lo = 0,
                            uint64_t hi = std::numeric_limits<uint64_t>::max()) const;
  /// A byte count: a non-negative integer or a string such as "16G" (parse_bytes).
  uint64_t bytes() const;
  /// A finite number in [lo, hi]; `expected` replaces the generated expectation when given.
  double number(double lo = -std::numeric_limits<double>::max(),
                double hi = std::numeric_limits<double>::max(),
                std::string_view expected = {}) const;
  bool boolean() const;
  const std::string& string() const;
  /// A string that is one of `names`.
  const std::string& name(const std::vector<std::string>& names) const;
  /// An array of at least `min_size` elements; its elements, each with its path "<path>[i]".
  std::vector<JsonField> elements(size_t min_size = 0) const;

  /// "<where>: <path>: expected <expected>, got <value>".
  [[noreturn]] void fail_expected(std::string_view expected) const;
  /// "<where>: <path>: <what>".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  const nlohmann::json* value_;
  std::string where_;
  std::string path_;
};

/// A JSON object of a document, read key by key. Borrows the object. Thread-compatible.
class JsonObject {
 public:
  /// Throws "<where>: <path>: expected <expected>, got <value>" unless `value` is an object
  /// (the path "(document)" when empty).
  JsonObject(const nlohmann::json& value, std::string where, std::string path = {},
             std::string_view expected = "a JSON object");
  /// The object `field` holds.
  explicit JsonObject(const JsonField& field, std::string_view expected = "a JSON object");

  const nlohmann::json& json() const { return *object_; }
  const std::string& where() const { return where_; }
  const std::string& path() const { return path_; }

  /// Refuses any key not in `known`: "<path>.<key>: unknown key (expected one of: ...)".
  void allow_only(const std::set<std::string>& known) const;
  bool has(const std::string& key) const { return object_->contains(key); }
  /// The field `key`, missing or not.
  JsonField operator[](const std::string& key) const;
  /// The object at `key`.
  JsonObject object(const std::string& key, std::string_view expected = "an object") const;
  /// "<path>.<key>" (or `key` at the top).
  std::string path_of(const std::string& key) const;
  /// Throws "<where>: <path>[.key]: <what>".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json* object_;
  std::string where_;
  std::string path_;
};

/// The path of element `i` of the array at `path`: "<path>[i]".
inline std::string json_index_path(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

}  // namespace vtpu
