#include "vtpu/memory/trace.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <ostream>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "vtpu/common/atomic_file.h"
#include "vtpu/common/error.h"
#include "vtpu/common/json_fields.h"

namespace vtpu {

namespace {

constexpr int kFormatVersion = 1;
using Json = nlohmann::json;

std::string number_text(double v) {
  Json j = v;
  return j.dump();
}

std::optional<TraceOp> parse_op(std::string_view name) {
  if (name == "alloc") return TraceOp::kAlloc;
  if (name == "free") return TraceOp::kFree;
  if (name == "oom") return TraceOp::kOom;
  if (name == "defragment") return TraceOp::kDefragment;
  return std::nullopt;
}

// Problems with the values of one event taken alone; empty when there are none. The reader and
// the writer share this, so both enforce exactly the same rules.
std::string value_problem(const TraceEvent& e) {
  if (!std::isfinite(e.t_us) || e.t_us < 0)
    return "t_us is " + number_text(e.t_us) + " (expected a finite number >= 0)";
  if (e.core < 0) return "core is " + std::to_string(e.core) + " (expected an integer >= 0)";
  switch (e.op) {
    case TraceOp::kAlloc:
    case TraceOp::kOom:
      if (e.bytes == 0) return "bytes is 0 (expected an integer >= 1)";
      if (e.bytes_moved != 0 || e.buffers_moved != 0 || e.duration_us != 0.0)
        return std::string(trace_op_name(e.op)) + " event carries defragment fields";
      return {};
    case TraceOp::kFree:
      if (e.bytes != 0 || !e.label.empty() || e.bytes_moved != 0 || e.buffers_moved != 0 ||
          e.duration_us != 0.0)
        return "free event carries fields other than id";
      return {};
    case TraceOp::kDefragment:
      if (!std::isfinite(e.duration_us) || e.duration_us < 0)
        return "duration_us is " + number_text(e.duration_us) + " (expected a finite number >= 0)";
      if (e.id != 0 || e.bytes != 0 || !e.label.empty())
        return "defragment event carries id, bytes or label";
      return {};
  }
  return "op " + std::to_string(static_cast<int>(e.op)) +
         " is not one of alloc, free, oom, defragment";
}

// `where` names the header in messages: "<trace>:1", or "trace header" for a writer's.
void check_header(const Json& header, const std::string& where) {
  const JsonObject h(header, where);
  h["format"].name({"vtpu-trace"});
  const JsonField version = h["version"];
  if (const Json& v = version.json("the integer 1"); !v.is_number_integer() || v != kFormatVersion)
    version.fail_expected("the integer " + std::to_string(kFormatVersion) +
                          " (the only version this reader knows)");
}

}  // namespace

// The rules that need the events before: live ids per core and per-core time order.
class TraceChecker {
 public:
  // Empty when `e` may follow the events applied so far.
  std::string problem(const TraceEvent& e) const {
    if (std::string p = value_problem(e); !p.empty()) return p;
    auto it = cores_.find(e.core);
    if (it == cores_.end()) {
      if (e.op == TraceOp::kFree)
        return "free of id " + std::to_string(e.id) + ", which is not live on core " +
               std::to_string(e.core);
      if (e.op == TraceOp::kDefragment && e.buffers_moved > 0)
        return "defragment moved " + std::to_string(e.buffers_moved) + " buffers but core " +
               std::to_string(e.core) + " has none live";
      return {};
    }
    const CoreState& c = it->second;
    if (e.t_us < c.last_t_us)
      return "t_us " + number_text(e.t_us) + " is earlier than the previous event on core " +
             std::to_string(e.core) + " (" + number_text(c.last_t_us) +
             "; expected non-decreasing time per core)";
    switch (e.op) {
      case TraceOp::kAlloc:
      case TraceOp::kOom:
        if (c.live.contains(e.id))
          return std::string(trace_op_name(e.op)) + " of id " + std::to_string(e.id) +
                 ", which is already live on core " + std::to_string(e.core);
        break;
      case TraceOp::kFree:
        if (!c.live.contains(e.id))
          return "free of id " + std::to_string(e.id) + ", which is not live on core " +
                 std::to_string(e.core);
        break;
      case TraceOp::kDefragment:
        if (e.buffers_moved > c.live.size())
          return "defragment moved " + std::to_string(e.buffers_moved) + " buffers but core " +
                 std::to_string(e.core) + " has only " + std::to_string(c.live.size()) + " live";
        break;
    }
    return {};
  }

  // Records `e`, which problem() accepted.
  void apply(const TraceEvent& e) {
    CoreState& c = cores_[e.core];
    c.last_t_us = e.t_us;
    if (e.op == TraceOp::kAlloc) c.live.insert(e.id);
    if (e.op == TraceOp::kFree) c.live.erase(e.id);
    ++num_events_;
  }

  uint64_t num_events() const { return num_events_; }

 private:
  struct CoreState {
    double last_t_us = 0.0;
    std::unordered_set<uint64_t> live;
  };
  std::unordered_map<int, CoreState> cores_;
  uint64_t num_events_ = 0;
};

std::string_view trace_op_name(TraceOp op) {
  switch (op) {
    case TraceOp::kAlloc:
      return "alloc";
    case TraceOp::kFree:
      return "free";
    case TraceOp::kOom:
      return "oom";
    case TraceOp::kDefragment:
      return "defragment";
  }
  return "unknown";
}

Json default_trace_header() { return Json{{"format", "vtpu-trace"}, {"version", kFormatVersion}}; }

namespace {

// The keys an event of `op` may carry.
const std::set<std::string>& allowed_keys(TraceOp op) {
  static const std::set<std::string> kAlloc = {"t_us", "core", "op", "id", "bytes", "label"};
  static const std::set<std::string> kFree = {"t_us", "core", "op", "id"};
  static const std::set<std::string> kDefragment = {"t_us",        "core",          "op",
                                                    "bytes_moved", "buffers_moved", "duration_us"};
  switch (op) {
    case TraceOp::kAlloc:
    case TraceOp::kOom:
      return kAlloc;
    case TraceOp::kFree:
      return kFree;
    case TraceOp::kDefragment:
      return kDefragment;
  }
  return kFree;
}

// Parses one event object; `where` is "name:line". Throws InvalidArgumentError.
TraceEvent parse_event(const Json& j, const std::string& where) {
  const JsonObject r(j, where);
  TraceEvent e;
  e.op = *parse_op(r["op"].name({"alloc", "free", "oom", "defragment"}));
  r.allow_only(allowed_keys(e.op));
  e.t_us = r["t_us"].number(0.0, std::numeric_limits<double>::max(), "a finite number >= 0");
  if (r.has("core")) e.core = static_cast<int>(r["core"].integer(0, INT_MAX));
  switch (e.op) {
    case TraceOp::kAlloc:
    case TraceOp::kOom:
      e.id = r["id"].unsigned_integer();
      e.bytes = r["bytes"].unsigned_integer(1);
      if (r.has("label")) e.label = r["label"].string();
      break;
    case TraceOp::kFree:
      e.id = r["id"].unsigned_integer();
      break;
    case TraceOp::kDefragment:
      e.bytes_moved = r["bytes_moved"].unsigned_integer();
      e.buffers_moved = r["buffers_moved"].unsigned_integer();
      e.duration_us =
          r["duration_us"].number(0.0, std::numeric_limits<double>::max(), "a finite number >= 0");
      break;
  }
  return e;
}

// Reads one line (without its '\n') into `line`, like std::getline, but stops after
// kMaxTraceLineBytes + 1 bytes: returns kTooLong then, without reading the rest of the line, so a
// multi-gigabyte line (a corrupt or binary file) costs at most the cap in memory and time.
enum class LineRead { kLine, kEnd, kTooLong };
LineRead read_capped_line(std::streambuf& in, std::string& line) {
  line.clear();
  bool any = false;
  for (;;) {
    const int c = in.sbumpc();
    if (c == std::char_traits<char>::eof()) return any ? LineRead::kLine : LineRead::kEnd;
    any = true;
    if (c == '\n') return LineRead::kLine;
    if (line.size() == kMaxTraceLineBytes) return LineRead::kTooLong;
    line.push_back(static_cast<char>(c));
  }
}

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

Trace read_trace(std::istream& in, const std::string& name) {
  Trace trace;
  trace.header = default_trace_header();
  TraceChecker checker;
  std::string line;
  uint64_t line_number = 0;
  bool seen_content = false;
  std::streambuf* buf = in.rdbuf();
  if (buf == nullptr || !in.good())
    throw InvalidArgumentError(name + ": the stream cannot be read (no buffer, or already failed)");
  for (;;) {
    LineRead got = LineRead::kEnd;
    try {
      got = read_capped_line(*buf, line);
    } catch (const std::exception& e) {  // a streambuf may throw on a read error
      throw InvalidArgumentError(name + ": read error after line " + std::to_string(line_number) +
                                 " (" + e.what() + ")");
    }
    if (got == LineRead::kEnd) break;
    ++line_number;
    const std::string where = name + ":" + std::to_string(line_number) + ": ";
    if (got == LineRead::kTooLong)
      throw InvalidArgumentError(where + "line longer than " + std::to_string(kMaxTraceLineBytes) +
                                 " bytes (kMaxTraceLineBytes, 1 MiB: the longest line a trace may "
                                 "have; the rest of the line was not read)");
    // A gzip-compressed trace would read as "NUL byte at column 9"; say what the file is.
    if (line_number == 1 && line.size() >= 2 && static_cast<unsigned char>(line[0]) == 0x1f &&
        static_cast<unsigned char>(line[1]) == 0x8b)
      throw InvalidArgumentError(
          where +
          "the file looks gzip-compressed (it starts with gzip's magic bytes 1f 8b), and "
          "a trace is plain JSON Lines text: decompress it first (gunzip, or pass "
          "<(zcat " +
          name + ") in its place)");
    // nlohmann::json stops at a NUL as at the end of input, so `{...}\0garbage` would parse as
    // `{...}`; a NUL is never valid in JSON text, so it is an error wherever it is.
    if (const size_t nul = line.find('\0'); nul != std::string::npos)
      throw InvalidArgumentError(where + "NUL byte at column " + std::to_string(nul + 1) +
                                 " (a trace line is JSON text, which never contains a NUL byte)");
    if (is_blank(line)) continue;
    const std::string at = name + ":" + std::to_string(line_number);
    Json j = parse_json_text(line, at);
    if (!j.is_object())
      throw InvalidArgumentError(at + ": expected a JSON object, got " + json_value_text(j));
    if (!seen_content && j.contains("format")) {
      check_header(j, at);
      trace.header = std::move(j);
      seen_content = true;
      continue;
    }
    if (j.contains("format"))
      throw InvalidArgumentError(where +
                                 "a header object (with \"format\") is only allowed as the first "
                                 "line");
    seen_content = true;
    TraceEvent e = parse_event(j, at);
    if (std::string p = checker.problem(e); !p.empty()) throw InvalidArgumentError(where + p);
    checker.apply(e);
    trace.events.push_back(std::move(e));
  }
  in.setstate(std::ios::eofbit);
  return trace;
}

Trace read_trace(const std::string& path) {
  // Not read_bounded_text_file: a trace may be gigabytes, streamed line by line, and may come
  // from a pipe (<(zcat t.jsonl.gz)).
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw InvalidArgumentError("trace file '" + path +
                               "' is a directory (expected a JSON Lines file)");
  errno = 0;
  std::ifstream in(path);
  if (!in) throw_file_open_error("trace file", path, errno);
  return read_trace(in, path);
}

void validate_trace_events(std::span<const TraceEvent> events, const std::string& name) {
  TraceChecker checker;
  for (size_t i = 0; i < events.size(); ++i) {
    if (std::string p = checker.problem(events[i]); !p.empty())
      throw InvalidArgumentError(name + ": event " + std::to_string(i) + ": " + p);
    checker.apply(events[i]);
  }
}

std::string to_json_line(const TraceEvent& e) {
  if (std::string p = value_problem(e); !p.empty())
    throw InvalidArgumentError("cannot write trace event: " + p);
  nlohmann::ordered_json j;
  j["t_us"] = e.t_us;
  j["core"] = e.core;
  j["op"] = trace_op_name(e.op);
  switch (e.op) {
    case TraceOp::kAlloc:
    case TraceOp::kOom:
      j["id"] = e.id;
      j["bytes"] = e.bytes;
      if (!e.label.empty()) j["label"] = e.label;
      break;
    case TraceOp::kFree:
      j["id"] = e.id;
      break;
    case TraceOp::kDefragment:
      j["bytes_moved"] = e.bytes_moved;
      j["buffers_moved"] = e.buffers_moved;
      j["duration_us"] = e.duration_us;
      break;
  }
  // Invalid UTF-8 in a label is replaced (U+FFFD) rather than thrown mid-trace.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

TraceWriter::TraceWriter(std::ostream& out, Json header)
    : out_(&out), name_("trace stream"), checker_(std::make_unique<TraceChecker>()) {
  write_header(header);
}

TraceWriter::TraceWriter(const std::string& path, Json header)
    : name_("'" + path + "'"), path_(path), checker_(std::make_unique<TraceChecker>()) {
  check_header(header, "trace header");  // before creating the temporary
  file_ = std::make_unique<AtomicFile>(path, "the trace");
  write_header(header);
}

void TraceWriter::fail(const std::string& what, int err) const {
  // A file that cannot take the bytes (a full disk, /dev/full) is an I/O error naming the
  // system's reason, as the memory profile's, not an internal error.
  if (!path_.empty()) throw_file_write_error(what, path_, err);
  throw InternalError("writing " + what + " to " + name_ + " failed");
}

void TraceWriter::write_line(const std::string& line, const std::string& what) {
  if (file_) {
    // Batched: one write(2) per line would dominate a log of millions of events.
    constexpr size_t kBatchBytes = size_t{1} << 20;
    pending_ += line;
    pending_ += '\n';
    if (pending_.size() >= kBatchBytes) flush();
    return;
  }
  errno = 0;
  *out_ << line << '\n';
  if (!*out_) fail(what, errno);
}

void TraceWriter::write_header(const Json& header) {
  check_header(header, "trace header");
  write_line(header.dump(-1, ' ', false, Json::error_handler_t::replace), "the trace header");
}

TraceWriter::~TraceWriter() = default;

void TraceWriter::write(const TraceEvent& event) {
  if (std::string p = checker_->problem(event); !p.empty())
    throw InvalidArgumentError("cannot write event " + std::to_string(checker_->num_events()) +
                               " to " + name_ + ": " + p);
  write_line(to_json_line(event), "trace event " + std::to_string(checker_->num_events()));
  checker_->apply(event);
}

void TraceWriter::flush() {
  if (file_) {
    file_->write(pending_);
    pending_.clear();
    return;
  }
  errno = 0;
  out_->flush();
  if (!*out_) fail("the trace", errno);
}

void TraceWriter::close() {
  flush();
  if (file_) file_->commit();
}

uint64_t TraceWriter::num_events() const { return checker_->num_events(); }

}  // namespace vtpu
