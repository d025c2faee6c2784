// The vtpu trace format: allocation events as JSON Lines, one object per line.
//
//   {"format": "vtpu-trace", "version": 1, "source": "..."}              optional header, line 1
//   {"t_us": 12.5, "core": 0, "op": "alloc", "id": 17, "bytes": 4096, "label": "layer3/grad"}
//   {"t_us": 19.0, "core": 0, "op": "free", "id": 17}
//   {"t_us": 20.0, "core": 0, "op": "oom", "id": 18, "bytes": 1073741824, "label": "big"}
//   {"t_us": 21.0, "core": 0, "op": "defragment", "bytes_moved": 65536, "buffers_moved": 3,
//    "duration_us": 40.5}
//
// An alloc makes `id` live on its core and a free ends it; ids are per core, and an id may be
// reused once it has been freed. An oom is an alloc that failed (the id does not become live); a
// defragment records that an arena moved live buffers. Replay skips (and counts) oom and
// defragment events. The rules a reader enforces, in the order it checks them:
//
//   - a line is at most kMaxTraceLineBytes (1 MiB) long, not counting its '\n'; a longer line is
//     an error naming its line number and the limit, and is not read past the limit;
//   - a NUL byte anywhere in a line is an error (JSON text never holds one; a parser that stops
//     at it would accept `{...}\0garbage`);
//   - every non-blank line is one JSON object, nested at most 64 levels deep; blank lines (only
//     spaces, tabs, '\r') are skipped but still counted in line numbers; duplicate keys in one
//     object are an error;
//   - line 1 may be a header: an object with a "format" key. "format" must be "vtpu-trace" and
//     "version" the integer 1; other header keys are kept as they are. No header: Trace::header
//     is {"format": "vtpu-trace", "version": 1};
//   - "op" is required and one of alloc, free, oom, defragment; every other key must belong to
//     that op (a typo such as "byte" is an error, not an ignored field);
//   - "t_us": required, a finite number >= 0, never smaller than the previous event's t_us on the
//     same core (each core's log is in time order; cores may interleave in any order, since
//     per-core logs can be merged without sorting);
//   - "core": optional (default 0), an integer in [0, 2^31);
//   - "id" (alloc, free, oom) and "bytes" (alloc, oom): integers; bytes >= 1; ids < 2^64;
//     a value written as 4096.0 or 1e3 is rejected as non-integer;
//   - "label" (alloc, oom): optional string;
//   - "bytes_moved", "buffers_moved" (integers >= 0) and "duration_us" (finite >= 0):
//     defragment, all required; buffers_moved may not exceed the buffers live on that core;
//   - alloc and oom: the id must not be live on that core; free: the id must be live there.
//
// Buffers still live at the end of a trace are allowed (parameters usually are).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vtpu {

/// The longest line a trace reader accepts, in bytes, not counting the '\n' (1 MiB). A real
/// event line is under 200 bytes; the cap bounds the memory and time a corrupt file can cost.
inline constexpr size_t kMaxTraceLineBytes = size_t{1} << 20;

class TraceChecker;  // trace.cc: the rules that need the events before (live ids, time order)

/// What a trace event records.
enum class TraceOp { kAlloc, kFree, kOom, kDefragment };

/// "alloc", "free", "oom", "defragment".
std::string_view trace_op_name(TraceOp op);

/// One line of a trace. Fields that do not belong to `op` are left at their defaults (and a
/// writer refuses an event where they are not). Plain data, thread-compatible.
struct TraceEvent {
  double t_us = 0.0;  // microseconds since the start of the trace
  int core = 0;       // core whose arena saw the event
  TraceOp op = TraceOp::kAlloc;
  uint64_t id = 0;             // alloc, free, oom: buffer id, unique among the core's live buffers
  uint64_t bytes = 0;          // alloc, oom: requested bytes (>= 1)
  std::string label;           // alloc, oom: optional
  uint64_t bytes_moved = 0;    // defragment: bytes copied
  uint64_t buffers_moved = 0;  // defragment: live buffers that changed offset
  double duration_us = 0.0;    // defragment: wall time of the pass, microseconds

  bool operator==(const TraceEvent&) const = default;
};

/// A whole trace: the header object (always holding "format" and "version") and the events in
/// file order. Plain data, thread-compatible.
struct Trace {
  nlohmann::json header;
  std::vector<TraceEvent> events;
};

/// The header a writer puts on line 1 by default: {"format": "vtpu-trace", "version": 1}.
nlohmann::json default_trace_header();

/// Reads and validates a trace file. Throws NotFoundError when the file cannot be opened and
/// InvalidArgumentError naming the file, the line number and the offending value for the first
/// line that breaks a rule of the format (see the top of this header). Never returns a partial
/// trace. Thread-safe (no shared state).
Trace read_trace(const std::string& path);
/// The same for a stream; `name` stands in for the file name in messages.
Trace read_trace(std::istream& in, const std::string& name);

/// Checks a sequence of events against the rules of the format, as read_trace does (the events
/// are numbered from 0 in the message, after `name`). Throws InvalidArgumentError. Thread-safe.
void validate_trace_events(std::span<const TraceEvent> events, const std::string& name);

/// One event as a compact JSON line without the trailing newline, keys in the order
/// t_us, core, op, id, bytes, label (omitted when empty), bytes_moved, buffers_moved, duration_us
/// (only the keys of its op). Does not check the live-id and time-order rules (those need the
/// events before it); throws InvalidArgumentError for a value no reader would accept (bytes 0 on
/// an alloc, a negative or non-finite time, a negative core, an unknown op).
std::string to_json_line(const TraceEvent& event);

/// Writes a trace: the header line at construction, then one line per write(). Every event is
/// validated against the events written before it, so a TraceWriter never produces a file that
/// read_trace rejects; a rejected event throws InvalidArgumentError and writes nothing.
/// Thread-compatible: callers serialise write().
class AtomicFile;

class TraceWriter {
 public:
  /// Writes to `out` (not owned; must outlive the writer). Throws InvalidArgumentError when
  /// `header` is not an object with "format": "vtpu-trace" and "version": 1.
  explicit TraceWriter(std::ostream& out, nlohmann::json header = default_trace_header());
  /// Writes `path` atomically (common/atomic_file.h): nothing replaces the file until close(),
  /// and a writer destroyed without close() (an error on the way) leaves the old file as it was.
  /// Throws the I/O errors of throw_file_write_error (common/error.h) naming the path:
  /// NotFoundError for a missing directory, PermissionDeniedError, ...
  explicit TraceWriter(const std::string& path, nlohmann::json header = default_trace_header());
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  /// Appends one event. Throws InvalidArgumentError (nothing written) for an event the format
  /// forbids here. When the stream fails: for a path, the I/O error of throw_file_write_error
  /// (common/error.h; ResourceExhaustedError for a full device), for a stream InternalError.
  void write(const TraceEvent& event);
  /// Flushes the stream (to a path: into its temporary). Throws as write() when it has failed.
  void flush();
  /// flush(), and for a path puts the file in place. Throws as write().
  void close();
  /// Events written so far.
  uint64_t num_events() const;

 private:
  void write_header(const nlohmann::json& header);
  /// Throws the error of a failed write of `what` with errno `err` (see write()).
  [[noreturn]] void fail(const std::string& what, int err) const;

  void write_line(const std::string& line, const std::string& what);

  std::unique_ptr<AtomicFile> file_;  // set when writing to a path
  std::string pending_;               // lines for file_ not yet written to it
  std::ostream* out_ = nullptr;       // set when writing to a stream
  std::string name_;
  std::string path_;  // the file, when writing to a path
  std::unique_ptr<TraceChecker> checker_;
};

}  // namespace vtpu
