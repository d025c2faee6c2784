#include "vtpu/common/json_fields.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"

namespace vtpu {

namespace {

constexpr size_t kMaxShownChars = 80;

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// "line L, column C" of 1-based byte `byte` (nlohmann counts one past the error), or "column C"
// when the text is one line (a trace line).
std::string position_text(const std::string& text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  const std::string c = "column " + std::to_string(column);
  return text.find('\n') == std::string::npos ? c : "line " + std::to_string(line) + ", " + c;
}

// Closes the descriptor on every path out of read_bounded_text_file.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

const char* special_file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return nullptr;
}

}  // namespace

std::string json_value_text(const nlohmann::json& value) {
  std::string s = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (s.size() > kMaxShownChars) s = s.substr(0, kMaxShownChars - 3) + "...";
  return s;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& where) {
  try {
    return parse_json_unique_keys(text, where);
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidArgumentError(where + ": not valid JSON at " + position_text(text, e.byte) + ": " +
                               e.what());
  } catch (const nlohmann::json::exception& e) {
    // A number beyond a double's range (1e400) is nlohmann's out_of_range 406, not a parse_error.
    throw InvalidArgumentError(where + ": not valid JSON: " + e.what());
  }
}

std::string read_bounded_text_file(const std::string& path, uintmax_t max_bytes,
                                   const std::string& what, const std::string& max_text) {
  const std::string named = what + " '" + path + "'";
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) throw_file_open_error(what, path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_file_open_error(what, path, errno);
  if (const char* kind = special_file_kind(st.st_mode)) {
    throw InvalidArgumentError(named + " is " + kind + " (expected a file)");
  }
  const auto too_big = [&](const std::string& size) {
    return InvalidArgumentError(named + " is " + size + " bytes (expected at most " +
                                std::to_string(max_bytes) + ", " + max_text + ")");
  };
  const bool regular = S_ISREG(st.st_mode);
  if (regular && static_cast<uintmax_t>(st.st_size) > max_bytes) {
    throw too_big(std::to_string(st.st_size));
  }
  // A regular file reads blocking; a FIFO or device (`--config <(...)`, /dev/stdin) stays
  // non-blocking and is polled, so that a writer that never writes nor closes is a timeout.
  if (regular) ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  std::string text;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(kStreamIdleTimeout.count()));
      if (ready == 0) {
        throw DeadlineExceededError(named + " sent no data for " +
                                    std::to_string(kStreamIdleTimeout.count() / 1000) +
                                    " s (expected its writer to write or close it)");
      }
      continue;  // readable, hung up, or interrupted: the next read says which
    }
    if (n < 0) {
      throw InvalidArgumentError("cannot read " + named + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    if (const void* nul = std::memchr(chunk, '\0', static_cast<size_t>(n))) {
      const size_t offset =
          text.size() + static_cast<size_t>(static_cast<const char*>(nul) - chunk);
      throw InvalidArgumentError(named + " has a NUL byte at offset " + std::to_string(offset) +
                                 " (expected text)");
    }
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > max_bytes) throw too_big("more than " + std::to_string(max_bytes));
  }
  return text;
}

nlohmann::json read_json_file(const std::string& path, uintmax_t max_bytes, const std::string& what,
                              const std::string& max_text) {
  return parse_json_text(read_bounded_text_file(path, max_bytes, what, max_text),
                         what + " '" + path + "'");
}

void throw_json_error(const std::string& where, const std::string& path, const std::string& what) {
  throw InvalidArgumentError(where + ": " + (path.empty() ? "" : path + ": ") + what);
}

// ---- JsonField ----

const nlohmann::json& JsonField::json(std::string_view expected) const {
  if (value_ == nullptr) fail("missing (expected " + std::string(expected) + ")");
  return *value_;
}

void JsonField::fail_expected(std::string_view expected) const {
  fail("expected " + std::string(expected) + ", got " +
       (value_ == nullptr ? std::string("nothing") : json_value_text(*value_)));
}

void JsonField::fail(const std::string& what) const { throw_json_error(where_, path_, what); }

int64_t JsonField::integer(int64_t lo, int64_t hi) const {
  const std::string expected = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  const nlohmann::json& v = json(expected);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) fail_expected(expected);
    if (lo > 0 && u < static_cast<uint64_t>(lo)) fail_expected(expected);
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) fail_expected(expected);
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) fail_expected(expected);
  return n;
}

uint64_t JsonField::unsigned_integer(uint64_t lo, uint64_t hi) const {
  const std::string expected =
      hi == std::numeric_limits<uint64_t>::max()
          ? (lo == 0 ? std::string("a non-negative integer")
                     : "an integer >= " + std::to_string(lo))
          : "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  const nlohmann::json& v = json(expected);
  uint64_t u = 0;
  if (v.is_number_unsigned()) {
    u = v.get<uint64_t>();
  } else if (v.is_number_integer()) {  // a non-negative integer built in C++ is stored signed
    if (v.get<int64_t>() < 0) fail_expected(expected);
    u = static_cast<uint64_t>(v.get<int64_t>());
  } else {
    fail_expected(expected);
  }
  if (u < lo || u > hi) fail_expected(expected);
  return u;
}

uint64_t JsonField::bytes() const {
  static constexpr std::string_view kExpected =
      "a non-negative integer of bytes or a string like \"16G\"";
  const nlohmann::json& v = json(kExpected);
  if (v.is_string()) {
    try {
      return parse_bytes(v.get_ref<const std::string&>());
    } catch (const InvalidArgumentError&) {
      fail_expected(kExpected);
    }
  }
  if (!v.is_number()) fail_expected(kExpected);
  return unsigned_integer();
}

double JsonField::number(double lo, double hi, std::string_view expected) const {
  std::string generated = "a finite number";
  if (lo > -std::numeric_limits<double>::max()) generated += " >= " + number_text(lo);
  if (hi < std::numeric_limits<double>::max()) {
    generated = lo > -std::numeric_limits<double>::max()
                    ? "a number in [" + number_text(lo) + ", " + number_text(hi) + "]"
                    : generated + " <= " + number_text(hi);
  }
  const std::string_view shown = expected.empty() ? std::string_view(generated) : expected;
  const nlohmann::json& v = json(shown);
  if (!v.is_number()) fail_expected(shown);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) fail_expected(shown);
  return d;
}

bool JsonField::boolean() const {
  const nlohmann::json& v = json("true or false");
  if (!v.is_boolean()) fail_expected("true or false");
  return v.get<bool>();
}

const std::string& JsonField::string() const {
  const nlohmann::json& v = json("a string");
  if (!v.is_string()) fail_expected("a string");
  return v.get_ref<const std::string&>();
}

const std::string& JsonField::name(const std::vector<std::string>& names) const {
  std::vector<std::string> quoted;
  for (const std::string& n : names) quoted.push_back("\"" + n + "\"");
  const std::string expected = "one of " + join(quoted);
  const nlohmann::json& v = json(expected);
  if (!v.is_string() ||
      std::find(names.begin(), names.end(), v.get_ref<const std::string&>()) == names.end()) {
    fail_expected(expected);
  }
  return v.get_ref<const std::string&>();
}

std::vector<JsonField> JsonField::elements(size_t min_size) const {
  const std::string expected =
      min_size == 0 ? "an array" : "an array of at least " + std::to_string(min_size);
  const nlohmann::json& v = json(expected);
  if (!v.is_array() || v.size() < min_size) fail_expected(expected);
  std::vector<JsonField> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) out.emplace_back(&v[i], where_, json_index_path(path_, i));
  return out;
}

// ---- JsonObject ----

JsonObject::JsonObject(const nlohmann::json& value, std::string where, std::string path,
                       std::string_view expected)
    : object_(&value), where_(std::move(where)), path_(std::move(path)) {
  if (!value.is_object()) {
    JsonField(&value, where_, path_.empty() ? "(document)" : path_).fail_expected(expected);
  }
}

JsonObject::JsonObject(const JsonField& field, std::string_view expected)
    : JsonObject(field.json(expected), field.where(), field.path(), expected) {}

void JsonObject::allow_only(const std::set<std::string>& known) const {
  for (const auto& [key, value] : object_->items()) {
    if (!known.contains(key)) fail(key, "unknown key (expected one of: " + join(known) + ")");
  }
}

JsonField JsonObject::operator[](const std::string& key) const {
  const auto it = object_->find(key);
  return JsonField(it == object_->end() ? nullptr : &*it, where_, path_of(key));
}

JsonObject JsonObject::object(const std::string& key, std::string_view expected) const {
  return JsonObject((*this)[key], expected);
}

std::string JsonObject::path_of(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void JsonObject::fail(const std::string& key, const std::string& what) const {
  throw_json_error(where_, key.empty() ? path_ : path_of(key), what);
}

}  // namespace vtpu
