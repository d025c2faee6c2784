// Tests for memory/trace.h: every rule of the format rejected with the file name, line number and
// offending value; writer -> reader round trips; and the three real PyTorch traces, whose alloc
// counts and peak live bytes (from data/traces/README.md) are recomputed here from the
// events.
#include "vtpu/memory/trace.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_path.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

Trace read_text(const std::string& text, const std::string& name = "t.jsonl") {
  std::istringstream in(text);
  return read_trace(in, name);
}

// Expects read_trace of `text` to throw InvalidArgumentError whose message contains every needle.
void expect_rejected(const std::string& text, const std::vector<std::string>& needles) {
  try {
    read_text(text);
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const InvalidArgumentError& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "missing '" << needle << "' in: " << e.what() << "\ninput:\n"
          << text;
  }
}

constexpr char kHeader[] = R"({"format": "vtpu-trace", "version": 1})"
                           "\n";

TEST(TraceTest, ReadsAllOpsWithDefaults) {
  const Trace t = read_text(
      std::string(R"({"format": "vtpu-trace", "version": 1, "source": "unit test", "n": [1, 2]})") +
      "\n" +
      R"({"t_us": 12.5, "core": 0, "op": "alloc", "id": 17, "bytes": 4096, "label": "layer3/grad"}
{"t_us": 13, "op": "alloc", "id": 18, "bytes": 1}
{"t_us": 14, "core": 1, "op": "oom", "id": 5, "bytes": 1073741824, "label": "big"}
{"t_us": 15, "core": 0, "op": "defragment", "bytes_moved": 4096, "buffers_moved": 1, "duration_us": 2.5}
{"t_us": 19.0, "core": 0, "op": "free", "id": 17}
)");
  EXPECT_EQ(t.header["source"], "unit test");  // extra header fields are kept
  EXPECT_EQ(t.header["n"], nlohmann::json({1, 2}));
  ASSERT_EQ(t.events.size(), 5u);
  const TraceEvent& a = t.events[0];
  EXPECT_EQ(a.t_us, 12.5);
  EXPECT_EQ(a.core, 0);
  EXPECT_EQ(a.op, TraceOp::kAlloc);
  EXPECT_EQ(a.id, 17u);
  EXPECT_EQ(a.bytes, 4096u);
  EXPECT_EQ(a.label, "layer3/grad");
  EXPECT_EQ(t.events[1].core, 0);  // default
  EXPECT_EQ(t.events[1].label, "");
  EXPECT_EQ(t.events[2].op, TraceOp::kOom);
  EXPECT_EQ(t.events[2].core, 1);
  EXPECT_EQ(t.events[2].bytes, uint64_t{1} << 30);
  EXPECT_EQ(t.events[3].op, TraceOp::kDefragment);
  EXPECT_EQ(t.events[3].bytes_moved, 4096u);
  EXPECT_EQ(t.events[3].buffers_moved, 1u);
  EXPECT_EQ(t.events[3].duration_us, 2.5);
  EXPECT_EQ(t.events[4].op, TraceOp::kFree);
  EXPECT_EQ(t.events[4].id, 17u);
}

TEST(TraceTest, HeaderIsOptionalAndDefaulted) {
  const Trace t = read_text(R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8})");
  EXPECT_EQ(t.header, default_trace_header());
  EXPECT_EQ(t.events.size(), 1u);
  EXPECT_EQ(read_text("").events.size(), 0u);
  EXPECT_EQ(read_text(kHeader).events.size(), 0u);
}

TEST(TraceTest, BlankLinesAreSkippedButCounted) {
  const std::string text = std::string("\n") + kHeader + "  \t\r\n" +
                           R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8})" + "\n\n" +
                           R"({"t_us": 1, "op": "free", "id": 1})" + "\n";
  expect_rejected(text, {"t.jsonl:6:", "free of id 1"});  // line 6 despite three blank lines
  const Trace t = read_text(std::string("\n") + kHeader + "\n" +
                            R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8})" + "\r\n\n");
  EXPECT_EQ(t.header, default_trace_header());  // leading blank lines: still the first line
  EXPECT_EQ(t.events.size(), 1u);
}

TEST(TraceTest, IdsMayBeReusedAfterFreeAndArePerCore) {
  const Trace t = read_text(R"({"t_us": 0, "op": "alloc", "id": 1, "bytes": 8}
{"t_us": 0, "core": 1, "op": "alloc", "id": 1, "bytes": 8}
{"t_us": 1, "op": "free", "id": 1}
{"t_us": 1, "op": "alloc", "id": 1, "bytes": 16}
{"t_us": 0.5, "core": 1, "op": "free", "id": 1}
)");
  EXPECT_EQ(t.events.size(), 5u);  // core 1's clock is separate from core 0's
}

TEST(TraceTest, RejectsMalformedLines) {
  expect_rejected(R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8)",
                  {"t.jsonl:1:", "not valid JSON"});
  expect_rejected(std::string(kHeader) + "[1, 2]\n",
                  {"t.jsonl:2:", "expected a JSON object", "[1,2]"});
  expect_rejected("17\n", {"t.jsonl:1:", "expected a JSON object", "17"});
  expect_rejected(R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8, "id": 1})",
                  {"t.jsonl:1:", "'id'"});
}

// A gzip'd trace was reported as "NUL byte at column 9" (the gzip header's
// ninth byte); the magic bytes 1f 8b on line 1 say what the file is and how to read it.
TEST(TraceTest, NamesAGzipCompressedFile) {
  using namespace std::string_literals;
  // The first 10 bytes of `gzip -c` output (magic, deflate, no flags, mtime 0, unix) and some data.
  const std::string gz = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\x56\n\x01"s;
  expect_rejected(
      gz, {"t.jsonl:1: the file looks gzip-compressed", "magic bytes 1f 8b", "<(zcat t.jsonl)"});
  // Not on a later line: there the bytes are a malformed line like any other.
  expect_rejected(kHeader + "\x1f\x8b\n"s, {"t.jsonl:2:"});
  try {
    read_text(kHeader + "\x1f\x8b\n"s);
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.message().find("gzip"), std::string::npos) << e.message();
  }
}

// nlohmann::json stops at a NUL as at the end of input, so a valid
// object followed by a NUL byte and garbage was accepted as the object alone.
TEST(TraceTest, RejectsANulByteAnywhereInALine) {
  const std::string event = R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8})";  // 47 bytes
  ASSERT_EQ(event.size(), 47u);
  using namespace std::string_literals;
  expect_rejected(kHeader + event + "\0garbage\n"s, {"t.jsonl:2:", "NUL byte at column 48"});
  expect_rejected(kHeader + event + "\0\n"s, {"t.jsonl:2:", "NUL byte at column 48"});
  expect_rejected("\0"s + event + "\n", {"t.jsonl:1:", "NUL byte at column 1"});
  expect_rejected("\n\0\n"s, {"t.jsonl:2:", "NUL byte at column 1"});  // not a blank line
  expect_rejected(
      R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8, "label": "a)"s + "\0"s + R"(b"})" + "\n",
      {"t.jsonl:1:", "NUL byte at column 60"});
  // The JSON escape \u0000 is six characters of text, not a NUL byte: a label may hold it.
  const Trace t =
      read_text(R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8, "label": "a\u0000b"})"
                "\n");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].label, "a\0b"s);
}

// Serves `bytes` bytes of 'x' (then end of input), 4 KiB at a time, and counts what it served.
class EndlessLineBuf : public std::streambuf {
 public:
  explicit EndlessLineBuf(uint64_t bytes) : left_(bytes) {}
  uint64_t served() const { return served_; }

 protected:
  int_type underflow() override {
    if (left_ == 0) return traits_type::eof();
    const auto n = static_cast<size_t>(std::min<uint64_t>(left_, chunk_.size()));
    std::fill(chunk_.begin(), chunk_.end(), 'x');
    setg(chunk_.data(), chunk_.data(), chunk_.data() + n);
    left_ -= n;
    served_ += n;
    return traits_type::to_int_type(chunk_[0]);
  }

 private:
  std::array<char, 4096> chunk_{};
  uint64_t left_;
  uint64_t served_ = 0;
};

// A line had no length cap, so a multi-gigabyte line was read whole
// before any check. Now a line may hold kMaxTraceLineBytes bytes (not counting '\n'), and one
// byte more is an error naming the line and the limit, read no further than the cap.
TEST(TraceTest, RejectsLinesLongerThanTheCapWithoutReadingThem) {
  ASSERT_EQ(kMaxTraceLineBytes, 1048576u);
  const std::string event = R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8})";
  const std::string at_cap = event + std::string(kMaxTraceLineBytes - event.size(), ' ');
  EXPECT_EQ(read_text(kHeader + at_cap + "\n").events.size(), 1u);
  EXPECT_EQ(read_text(kHeader + at_cap).events.size(), 1u);  // no final newline
  expect_rejected(kHeader + at_cap + " \n",
                  {"t.jsonl:2:", "line longer than 1048576 bytes", "1 MiB"});
  EndlessLineBuf endless(uint64_t{64} << 20);  // one 64 MiB line
  std::istream in(&endless);
  try {
    read_trace(in, "endless");
    ADD_FAILURE() << "a 64 MiB line was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("endless:1: line longer than 1048576 bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LE(endless.served(), kMaxTraceLineBytes + 4096);  // stopped at the cap (+ one chunk)
}

TEST(TraceTest, RejectsBadHeaders) {
  expect_rejected(R"({"format": "pprof", "version": 1})",
                  {"t.jsonl:1:", "\"pprof\"", "vtpu-trace"});
  expect_rejected(R"({"format": "vtpu-trace", "version": 2})", {"t.jsonl:1:", "version", "2"});
  expect_rejected(R"({"format": "vtpu-trace"})", {"t.jsonl:1:", "version", "missing"});
  expect_rejected(R"({"format": "vtpu-trace", "version": "1"})", {"t.jsonl:1:", "\"1\""});
  expect_rejected(std::string(kHeader) + kHeader, {"t.jsonl:2:", "only allowed as the first line"});
}

TEST(TraceTest, RejectsMissingAndIllTypedFields) {
  const std::string h = kHeader;
  expect_rejected(h + R"({"t_us": 0, "id": 0, "bytes": 8})", {"t.jsonl:2:", "op: missing"});
  expect_rejected(h + R"({"t_us": 0, "op": 3, "id": 0, "bytes": 8})",
                  {"t.jsonl:2:", "op:", "got 3"});
  expect_rejected(h + R"({"t_us": 0, "op": "malloc", "id": 0, "bytes": 8})",
                  {"t.jsonl:2:", "op:", "\"malloc\""});
  expect_rejected(h + R"({"op": "alloc", "id": 0, "bytes": 8})", {"t.jsonl:2:", "t_us: missing"});
  expect_rejected(h + R"({"t_us": "0", "op": "alloc", "id": 0, "bytes": 8})",
                  {"t_us:", "got \"0\""});
  expect_rejected(h + R"({"t_us": -1.5, "op": "alloc", "id": 0, "bytes": 8})",
                  {"t_us:", "got -1.5"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "bytes": 8})", {"id: missing"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 0})", {"bytes: missing"});
  expect_rejected(h + R"({"t_us": 0, "op": "free"})", {"id: missing"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8, "label": 7})",
                  {"label:", "got 7"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 8, "byte": 8})",
                  {"t.jsonl:2:", "byte: unknown key"});
  expect_rejected(h + R"({"t_us": 0, "op": "oom", "id": 0, "bytes": 8, "label": "x", "x": 1})",
                  {"x: unknown key"});
  expect_rejected(h + R"({"t_us": 0, "op": "free", "id": 0, "bytes": 8})", {"bytes: unknown key"});
  expect_rejected(h + R"({"t_us": 0, "op": "defragment", "bytes_moved": 0, "buffers_moved": 0})",
                  {"duration_us: missing"});
  expect_rejected(
      h + R"({"t_us": 0, "op": "defragment", "bytes_moved": -1, "buffers_moved": 0, "duration_us": 1})",
      {"bytes_moved:", "got -1"});
}

TEST(TraceTest, RejectsNegativeAndNonIntegerNumbers) {
  const std::string h = kHeader;
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": -4096})",
                  {"t.jsonl:2:", "bytes:", "got -4096"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 4096.0})",
                  {"bytes:", "got 4096.0"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 1e3})",
                  {"bytes:", "got 1000.0"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 0, "bytes": 0})", {"bytes:", "got 0"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": -3, "bytes": 8})", {"id:", "got -3"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 2.5, "bytes": 8})", {"id:", "got 2.5"});
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": 18446744073709551616, "bytes": 8})",
                  {"id:", "got 1.8446744073709552e+19"});  // 2^64 does not fit
  expect_rejected(h + R"({"t_us": 0, "op": "alloc", "id": "7", "bytes": 8})", {"id:", "got \"7\""});
  // The largest id is fine.
  EXPECT_EQ(read_text(R"({"t_us": 0, "op": "alloc", "id": 18446744073709551615, "bytes": 8})")
                .events[0]
                .id,
            ~uint64_t{0});
}

TEST(TraceTest, RejectsBadCores) {
  const std::string h = kHeader;
  expect_rejected(h + R"({"t_us": 0, "core": -1, "op": "alloc", "id": 0, "bytes": 8})",
                  {"t.jsonl:2:", "core:", "got -1"});
  expect_rejected(h + R"({"t_us": 0, "core": 1.5, "op": "alloc", "id": 0, "bytes": 8})",
                  {"core:", "got 1.5"});
  expect_rejected(h + R"({"t_us": 0, "core": 2147483648, "op": "alloc", "id": 0, "bytes": 8})",
                  {"core:", "got 2147483648"});
}

TEST(TraceTest, RejectsLiveSetViolations) {
  const std::string h = kHeader;
  const std::string a = R"({"t_us": 0, "op": "alloc", "id": 17, "bytes": 8})"
                        "\n";
  expect_rejected(h + R"({"t_us": 0, "op": "free", "id": 17})",
                  {"t.jsonl:2:", "free of id 17", "not live on core 0"});
  expect_rejected(h + a + a, {"t.jsonl:3:", "alloc of id 17", "already live on core 0"});
  expect_rejected(h + a + R"({"t_us": 1, "op": "free", "id": 17})" + "\n" +
                      R"({"t_us": 2, "op": "free", "id": 17})",
                  {"t.jsonl:4:", "free of id 17"});  // double free
  expect_rejected(h + a + R"({"t_us": 1, "core": 1, "op": "free", "id": 17})",
                  {"t.jsonl:3:", "not live on core 1"});  // ids are per core
  expect_rejected(h + a + R"({"t_us": 1, "op": "oom", "id": 17, "bytes": 8})",
                  {"t.jsonl:3:", "oom of id 17", "already live"});
  expect_rejected(
      h + a +
          R"({"t_us": 1, "op": "defragment", "bytes_moved": 8, "buffers_moved": 2, "duration_us": 1})",
      {"t.jsonl:3:", "moved 2 buffers", "only 1 live"});
  // An oom does not make its id live.
  expect_rejected(h + R"({"t_us": 0, "op": "oom", "id": 3, "bytes": 8})" + "\n" +
                      R"({"t_us": 1, "op": "free", "id": 3})",
                  {"t.jsonl:3:", "free of id 3"});
}

TEST(TraceTest, RejectsTimeGoingBackwardsOnOneCore) {
  const std::string h = kHeader;
  expect_rejected(h + R"({"t_us": 5, "op": "alloc", "id": 0, "bytes": 8})" + "\n" +
                      R"({"t_us": 4.5, "op": "alloc", "id": 1, "bytes": 8})",
                  {"t.jsonl:3:", "t_us 4.5 is earlier", "core 0", "(5"});
  // Equal times are fine; another core may be behind.
  EXPECT_EQ(read_text(R"({"t_us": 5, "op": "alloc", "id": 0, "bytes": 8}
{"t_us": 5, "op": "alloc", "id": 1, "bytes": 8}
{"t_us": 1, "core": 3, "op": "alloc", "id": 0, "bytes": 8})")
                .events.size(),
            3u);
}

// A named pipe is read like a file, once from the
// start, so a trace can be streamed in; the writer here opens the FIFO from another thread.
TEST(TraceTest, ReadsANamedPipe) {
  const std::string path = test_temp_path("vtpu_trace_test_fifo.jsonl");
  std::filesystem::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  std::thread writer([&] {
    std::ofstream out(path);  // blocks until the reader opens the FIFO
    out << kHeader << R"({"t_us": 0, "op": "alloc", "id": 1, "bytes": 4096})"
        << "\n"
        << R"({"t_us": 1, "op": "free", "id": 1})"
        << "\n";
  });
  const Trace t = read_trace(path);
  writer.join();
  std::filesystem::remove(path);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].bytes, 4096u);
  EXPECT_EQ(t.events[1].op, TraceOp::kFree);
}

TEST(TraceTest, MissingFileIsNotFound) {
  EXPECT_THROW(read_trace("/nonexistent/trace.jsonl"), NotFoundError);
}

TEST(TraceTest, ErrorNamesTheFile) {
  const std::string path = test_temp_path("vtpu_bad_trace.jsonl");
  std::ofstream(path) << kHeader << R"({"t_us": 0, "op": "free", "id": 9})"
                      << "\n";
  try {
    read_trace(path);
    FAIL() << "accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2:"), std::string::npos) << e.what();
  }
}

std::vector<TraceEvent> sample_events() {
  std::vector<TraceEvent> events;
  auto add = [&](double t, int core, TraceOp op, uint64_t id, uint64_t bytes, std::string label) {
    TraceEvent e;
    e.t_us = t;
    e.core = core;
    e.op = op;
    e.id = id;
    e.bytes = bytes;
    e.label = std::move(label);
    events.push_back(e);
  };
  add(0.0, 0, TraceOp::kAlloc, 17, 4096, "layer3/grad");
  add(0.1, 0, TraceOp::kAlloc, ~uint64_t{0}, uint64_t{1} << 40, "quote \" and \\ and \xc3\xa9");
  add(0.30000000000000004, 2, TraceOp::kAlloc, 17, 1, "");
  add(1e-300, 1, TraceOp::kOom, 5, 999, "too big");
  TraceEvent d;
  d.t_us = 12345.678901234567;
  d.core = 0;
  d.op = TraceOp::kDefragment;
  d.bytes_moved = 4096;
  d.buffers_moved = 2;
  d.duration_us = 3.25;
  events.push_back(d);
  add(12346, 0, TraceOp::kFree, 17, 0, "");
  add(12346, 2, TraceOp::kFree, 17, 0, "");
  return events;
}

TEST(TraceTest, WriterReaderRoundTripIsExact) {
  nlohmann::json header = default_trace_header();
  header["source"] = "round trip";
  std::ostringstream out;
  {
    TraceWriter w(out, header);
    for (const TraceEvent& e : sample_events()) w.write(e);
    EXPECT_EQ(w.num_events(), sample_events().size());
  }
  std::istringstream in(out.str());
  const Trace t = read_trace(in, "round trip");
  EXPECT_EQ(t.header, header);
  EXPECT_EQ(t.events, sample_events());  // doubles included, bit for bit
}

TEST(TraceTest, WriterToFileRoundTrip) {
  const std::string path = test_temp_path("vtpu_trace_rt.jsonl");
  {
    TraceWriter w(path);
    for (const TraceEvent& e : sample_events()) w.write(e);
    w.close();
  }
  EXPECT_EQ(read_trace(path).events, sample_events());
  EXPECT_THROW(TraceWriter("/nonexistent/dir/x.jsonl"), NotFoundError);
}

// The trace file is replaced at close(): a writer abandoned on the way (an error before
// close()) leaves the old file whole. It used to truncate the file at construction.
TEST(TraceTest, WriterWithoutCloseKeepsTheOldFile) {
  const std::string path = test_temp_path("vtpu_trace_abandoned.jsonl");
  std::ofstream(path) << "old\n";
  {
    TraceWriter w(path);
    for (const TraceEvent& e : sample_events()) w.write(e);
    w.flush();
  }
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "old\n");
}

// A trace file on a full device was "Internal: writing event 116 to
// '/dev/full' failed"; it is an I/O error with the system's reason, as the memory profile's.
TEST(TraceTest, WriterToAFullDeviceIsResourceExhausted) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  try {
    TraceWriter w("/dev/full");
    for (const TraceEvent& e : sample_events()) w.write(e);  // into the stream's buffer
    w.flush();
    ADD_FAILURE() << "writing to /dev/full succeeded";
  } catch (const ResourceExhaustedError& e) {
    EXPECT_EQ(e.message(), "cannot write the trace to '/dev/full': No space left on device");
  }
}

TEST(TraceTest, JsonLineKeyOrderAndOmissions) {
  TraceEvent e;
  e.t_us = 12.5;
  e.op = TraceOp::kAlloc;
  e.id = 17;
  e.bytes = 4096;
  e.label = "layer3/grad";
  EXPECT_EQ(to_json_line(e),
            R"({"t_us":12.5,"core":0,"op":"alloc","id":17,"bytes":4096,"label":"layer3/grad"})");
  e.label.clear();
  EXPECT_EQ(to_json_line(e), R"({"t_us":12.5,"core":0,"op":"alloc","id":17,"bytes":4096})");
  TraceEvent f;
  f.t_us = 19.0;
  f.op = TraceOp::kFree;
  f.id = 17;
  EXPECT_EQ(to_json_line(f), R"({"t_us":19.0,"core":0,"op":"free","id":17})");
}

TEST(TraceTest, WriterRefusesWhatAReaderWouldReject) {
  std::ostringstream out;
  TraceWriter w(out);
  const size_t header_size = out.str().size();
  TraceEvent free17;
  free17.op = TraceOp::kFree;
  free17.id = 17;
  EXPECT_THROW(w.write(free17), InvalidArgumentError);  // not live
  TraceEvent zero;
  zero.bytes = 0;
  EXPECT_THROW(w.write(zero), InvalidArgumentError);
  TraceEvent late;
  late.bytes = 8;
  late.t_us = 5;
  w.write(late);
  TraceEvent early = late;
  early.id = 1;
  early.t_us = 4;
  EXPECT_THROW(w.write(early), InvalidArgumentError);
  TraceEvent negative_core = late;
  negative_core.id = 2;
  negative_core.core = -1;
  EXPECT_THROW(w.write(negative_core), InvalidArgumentError);
  TraceEvent nan_time = late;
  nan_time.id = 3;
  nan_time.t_us = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(w.write(nan_time), InvalidArgumentError);
  TraceEvent free_with_bytes = late;
  free_with_bytes.op = TraceOp::kFree;
  free_with_bytes.id = 0;
  EXPECT_THROW(w.write(free_with_bytes), InvalidArgumentError);
  EXPECT_EQ(w.num_events(), 1u);
  // Only the accepted event was written after the header.
  const std::string written = out.str().substr(header_size);
  EXPECT_EQ(std::count(written.begin(), written.end(), '\n'), 1);
  EXPECT_THROW(TraceWriter(out, nlohmann::json{{"format", "other"}}), InvalidArgumentError);
}

TEST(TraceTest, ValidateEventsNamesTheEventIndex) {
  std::vector<TraceEvent> events = sample_events();
  validate_trace_events(events, "sample");
  events.push_back(events.back());  // a second free of the same id
  try {
    validate_trace_events(events, "sample");
    FAIL() << "accepted a double free";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("sample: event 7: free of id 17"), std::string::npos)
        << e.what();
  }
}

// The real traces: counts and peak live bytes from data/traces/README.md. Peak live
// bytes is recomputed here from the raw JSON lines, independently of the reader's validation.
struct RealTrace {
  const char* file;
  uint64_t allocs;
  uint64_t peak_live_bytes;
};

// Readable in the CTest name (gtest would print the struct's bytes, the file name's pointer
// included, which changed the name with every build).
void PrintTo(const RealTrace& t, std::ostream* os) { *os << t.file; }

class RealTraceTest : public ::testing::TestWithParam<RealTrace> {};

TEST_P(RealTraceTest, CountsAndPeakMatchTheReadme) {
  const std::string path = std::string(VTPU_TRACE_DIR) + "/" + GetParam().file;
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "real traces not found at " << path;
  }
  const Trace t = read_trace(path);
  EXPECT_EQ(t.header["format"], "vtpu-trace");
  EXPECT_TRUE(t.header.contains("source"));
  uint64_t allocs = 0, frees = 0, live = 0, peak = 0;
  std::map<uint64_t, uint64_t> sizes;  // id -> bytes, live only
  for (const TraceEvent& e : t.events) {
    EXPECT_EQ(e.core, 0);
    if (e.op == TraceOp::kAlloc) {
      ++allocs;
      sizes[e.id] = e.bytes;
      live += e.bytes;
      peak = std::max(peak, live);
    } else if (e.op == TraceOp::kFree) {
      ++frees;
      live -= sizes.at(e.id);
      sizes.erase(e.id);
    }
  }
  EXPECT_EQ(allocs, GetParam().allocs);
  EXPECT_EQ(peak, GetParam().peak_live_bytes);
  EXPECT_LE(frees, allocs);

  // The same from the raw lines with nlohmann alone, so a reader bug cannot hide in both.
  std::ifstream in(path);
  std::string line;
  uint64_t raw_allocs = 0, raw_live = 0, raw_peak = 0;
  std::map<uint64_t, uint64_t> raw_sizes;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("op")) continue;
    if (j["op"] == "alloc") {
      ++raw_allocs;
      raw_sizes[j["id"].get<uint64_t>()] = j["bytes"].get<uint64_t>();
      raw_live += j["bytes"].get<uint64_t>();
      raw_peak = std::max(raw_peak, raw_live);
    } else if (j["op"] == "free") {
      raw_live -= raw_sizes.at(j["id"].get<uint64_t>());
    }
  }
  EXPECT_EQ(raw_allocs, GetParam().allocs);
  EXPECT_EQ(raw_peak, GetParam().peak_live_bytes);

  // Round trip of a real trace through the writer.
  std::ostringstream out;
  {
    TraceWriter w(out, t.header);
    for (const TraceEvent& e : t.events) w.write(e);
  }
  std::istringstream back(out.str());
  const Trace again = read_trace(back, "rewritten");
  EXPECT_EQ(again.header, t.header);
  EXPECT_EQ(again.events, t.events);
}

INSTANTIATE_TEST_SUITE_P(SharedTraces, RealTraceTest,
                         ::testing::Values(RealTrace{"pytorch_mlp_train.jsonl", 4012, 920064},
                                           RealTrace{"pytorch_cnn_train.jsonl", 11116, 41094944},
                                           RealTrace{"pytorch_transformer_train.jsonl", 11889,
                                                     161507712}),
                         [](const ::testing::TestParamInfo<RealTrace>& info) {
                           std::string name = info.param.file;
                           name = name.substr(0, name.find('.'));
                           std::erase_if(name, [](char c) { return c == '_'; });
                           return name;
                         });

// The message of the InvalidArgumentError read_trace throws for `text` ("accepted" if none).
std::string trace_error_message(const std::string& text) {
  std::istringstream in(text);
  try {
    read_trace(in, "t.jsonl");
    return "accepted";
  } catch (const InvalidArgumentError& e) {
    return e.message();
  }
}

// Every reader error is an InvalidArgumentError naming the line. Regressions: a number too large
// for a double escaped as nlohmann's out_of_range 406 without the line, and a deeply nested line
// overflowed the stack while its value was quoted in the message.
TEST(TraceTest, ReaderErrorsNameTheLineAndNeverCrash) {
  const std::string ok = "{\"t_us\":0,\"op\":\"alloc\",\"id\":1,\"bytes\":1}\n";
  EXPECT_EQ(trace_error_message(ok + "{\"t_us\":1e400,\"op\":\"free\",\"id\":1}\n")
                .rfind("t.jsonl:2: ", 0),
            0u);
  EXPECT_EQ(trace_error_message("\n{\"t_us\":0,\"op\":\"alloc\",\"id\":1,\"bytes\":1e400}\n")
                .rfind("t.jsonl:2: ", 0),
            0u);
  const std::string deep = std::string(200000, '[') + std::string(200000, ']') + "\n";
  EXPECT_EQ(trace_error_message(ok + deep).rfind("t.jsonl:2: ", 0), 0u);
  const std::string deep_label =
      "{\"t_us\":0,\"op\":\"alloc\",\"id\":1,\"bytes\":1,\"label\":" + std::string(200000, '[') +
      std::string(200000, ']') + "}\n";
  EXPECT_EQ(trace_error_message(deep_label).rfind("t.jsonl:1: ", 0), 0u);
  const std::string deep_header =
      "{\"format\":\"vtpu-trace\",\"version\":1,\"x\":" + std::string(100, '[') +
      std::string(100, ']') + "}\n";
  EXPECT_EQ(trace_error_message(deep_header).rfind("t.jsonl:1: ", 0), 0u);
  EXPECT_EQ(
      trace_error_message(std::string("{\"t_us\":0,\"op\":\"al\0loc\",\"id\":1,\"bytes\":1}\n", 42))
          .rfind("t.jsonl:1: ", 0),
      0u);
  EXPECT_EQ(trace_error_message(ok + ok).rfind("t.jsonl:2: ", 0), 0u);  // id reused while live
  EXPECT_EQ(
      trace_error_message(ok + "{\"t_us\":0,\"op\":\"free\",\"id\":2}\n").rfind("t.jsonl:2: ", 0),
      0u);
  // Still accepted: extreme but valid values, and a UTF-8 BOM.
  EXPECT_EQ(
      trace_error_message("\xef\xbb\xbf{\"t_us\":0,\"op\":\"alloc\",\"id\":18446744073709551615,"
                          "\"bytes\":18446744073709551615,\"label\":\"\\u0000\xe6\x97\xa5\"}\n"),
      "accepted");
}

// Extreme times, ids, sizes and a label with a NUL round-trip through the writer and reader; a
// NaN time is an InvalidArgumentError.
TEST(TraceTest, WriterRoundTripsExtremes) {
  constexpr uint64_t kMax = ~uint64_t{0};
  std::ostringstream out;
  TraceWriter w(out);
  TraceEvent a;
  a.t_us = 1e300;
  a.id = kMax;
  a.bytes = kMax;
  a.label = std::string("a\0b", 3);
  w.write(a);
  TraceEvent f;
  f.t_us = 1e300;
  f.op = TraceOp::kFree;
  f.id = kMax;
  w.write(f);
  TraceEvent d;
  d.t_us = std::numeric_limits<double>::denorm_min();
  d.core = std::numeric_limits<int>::max();
  d.op = TraceOp::kDefragment;
  d.duration_us = 1e-310;
  w.write(d);
  TraceEvent bad;
  bad.t_us = std::nan("");
  EXPECT_THROW(w.write(bad), InvalidArgumentError);
  std::istringstream in(out.str());
  const Trace t = read_trace(in, "rt");
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0], a);
  EXPECT_EQ(t.events[1], f);
  EXPECT_EQ(t.events[2], d);
}

}  // namespace
}  // namespace vtpu
