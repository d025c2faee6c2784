#include "vtpu/common/json_fields.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "tests/temp_path.h"

namespace vtpu {
namespace {

using Json = nlohmann::json;

// The code and message of what `f` throws; fails the test if it throws nothing or no vtpu::Error.
struct Thrown {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};
Thrown thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.message()};
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

// Checks that `f` throws InvalidArgument naming every one of `values`.
void expect_invalid(const std::function<void()>& f, std::initializer_list<std::string> values) {
  const Thrown t = thrown(f);
  EXPECT_EQ(t.code, ErrorCode::kInvalidArgument) << t.message;
  for (const std::string& v : values) EXPECT_NE(t.message.find(v), std::string::npos) << t.message;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = test_temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(JsonFieldsTest, TypedFieldsReadTheirValues) {
  const Json j = Json::parse(
      R"({"n": 3, "u": 18446744073709551615, "f": 4.0, "b": "16K", "x": 0.5, "ok": true,
          "s": "bfc", "a": [1, 2]})");
  const JsonObject r(j, "doc");
  EXPECT_EQ(r["n"].integer(1, 10), 3);
  EXPECT_EQ(r["u"].unsigned_integer(), UINT64_MAX);
  expect_invalid([&] { r["f"].integer(0, 10); }, {"f", "4.0"});  // counts are written as integers
  EXPECT_EQ(r["b"].bytes(), 16u * 1024);
  EXPECT_EQ(r["n"].bytes(), 3u);
  EXPECT_DOUBLE_EQ(r["x"].number(0.0, 1.0), 0.5);
  EXPECT_TRUE(r["ok"].boolean());
  EXPECT_EQ(r["s"].name({"bfc", "tlsf"}), "bfc");
  const std::vector<JsonField> a = r["a"].elements(2);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].integer(0, 5), 2);
  EXPECT_EQ(a[1].path(), "a[1]");
  EXPECT_FALSE(r["missing"].present());
  EXPECT_TRUE(r.has("n"));
}

TEST(JsonFieldsTest, WrongTypeAndOutOfRangeNameThePathAndTheValue) {
  const Json k = Json::parse(R"({"n": 2000, "half": 2.5, "neg": -1, "t": "yes", "s": 7,
                                 "e": "best", "inner": {"deep": [1, "x"]}})");
  const JsonObject r(k, "doc");
  expect_invalid([&] { r["n"].integer(1, 1024); }, {"doc", "n", "2000", "1..1024"});
  expect_invalid([&] { r["half"].integer(0, 10); }, {"half", "2.5"});
  expect_invalid([&] { r["neg"].unsigned_integer(); }, {"neg", "-1"});
  expect_invalid([&] { r["neg"].bytes(); }, {"neg", "-1"});
  expect_invalid([&] { r["t"].boolean(); }, {"t", "\"yes\""});
  expect_invalid([&] { r["t"].bytes(); }, {"t", "\"yes\""});
  expect_invalid([&] { r["s"].string(); }, {"s", "7"});
  expect_invalid([&] { r["e"].name({"bfc", "tlsf"}); }, {"e", "\"best\"", "\"bfc\"", "\"tlsf\""});
  expect_invalid([&] { r["neg"].number(0.0, 1.0); }, {"neg", "-1"});
  expect_invalid([&] { r.object("inner")["deep"].elements()[1].integer(0, 9); },
                 {"inner.deep[1]", "\"x\""});
  expect_invalid([&] { r["n"].elements(); }, {"n", "2000"});
  expect_invalid([&] { r.object("n"); }, {"n", "2000"});
  expect_invalid([&] { JsonObject(Json::array(), "doc"); }, {"doc", "[]"});
  // A missing required field names the key and what was expected.
  expect_invalid([&] { r["absent"].integer(1, 4); }, {"absent", "1..4"});
}

TEST(JsonFieldsTest, UnknownKeyIsRefusedNamingTheKey) {
  const Json j = {{"num_cores", 2}, {"num_corez", 4}};
  expect_invalid([&] { JsonObject(j, "doc").allow_only({"num_cores"}); }, {"num_corez"});
  const Json nested = {{"inner", {{"typo", 1}}}};
  expect_invalid([&] { JsonObject(nested, "doc").object("inner").allow_only({"ok"}); },
                 {"inner.typo"});
}

TEST(JsonFieldsTest, DuplicateKeyIsRefusedAtAnyDepth) {
  expect_invalid([] { parse_json_text(R"({"a": 1, "b": 2, "a": 3})", "doc"); }, {"doc", "'a'"});
  expect_invalid([] { parse_json_text(R"({"x": {"k": 1, "k": 1}})", "doc"); }, {"'k'"});
  // The same key in two different objects is fine.
  EXPECT_NO_THROW(parse_json_text(R"({"x": {"k": 1}, "y": {"k": 2}, "k": 3})", "doc"));
}

TEST(JsonFieldsTest, InvalidJsonAndDeepNestingAreInvalidArgument) {
  expect_invalid([] { parse_json_text("{\n  \"a\": 1,,\n}", "doc"); }, {"doc", "line 2"});
  expect_invalid([] { parse_json_text(R"({"a": 1e400})", "doc"); }, {"doc"});
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  expect_invalid([&] { parse_json_text(deep, "doc"); }, {"doc", "64"});
}

TEST(JsonFieldsTest, FileReadsAreBounded) {
  const std::string ok = write_file("json_fields_ok.json", R"({"a": 1})");
  EXPECT_EQ(read_json_file(ok, 1024, "test file", "1 KiB")["a"], 1);

  const std::string big = write_file("json_fields_big.json", std::string(2048, ' ') + "{}");
  expect_invalid([&] { read_json_file(big, 1024, "test file", "1 KiB"); }, {big, "2050", "1024"});

  const std::string nul = write_file("json_fields_nul.json", std::string("{}\0\0", 4));
  expect_invalid([&] { read_json_file(nul, 1024, "test file", "1 KiB"); }, {nul, "offset 2"});

  const std::string dir = test_temp_path("json_fields_dir");
  std::filesystem::create_directories(dir);
  expect_invalid([&] { read_json_file(dir, 1024, "test file", "1 KiB"); }, {dir, "directory"});

  // A FIFO with no writer: opening it must not wait forever; it reads as empty.
  const std::string fifo = test_temp_path("json_fields_fifo");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_invalid([&] { read_json_file(fifo, 1024, "test file", "1 KiB"); }, {fifo});
  std::filesystem::remove(fifo);

  // An endless device is cut off, here at its first NUL byte.
  expect_invalid([] { read_bounded_text_file("/dev/zero", 1024, "test file", "1 KiB"); },
                 {"/dev/zero"});
}

// A FIFO whose writer never stops (an endless stream, as `--config <(yes)`) is cut off at the
// limit; before, the reader grew without bound (2 GB in 11 s). One whose writer writes a
// document and closes reads as a file.
TEST(JsonFieldsTest, AFifoIsReadUpToTheLimit) {
  std::signal(SIGPIPE, SIG_IGN);  // the writer sees EPIPE once the reader has stopped
  const std::string fifo = test_temp_path("json_fields_endless_fifo");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // O_RDWR opens without waiting for a reader; non-blocking, the writer can be told to stop.
  const int writer_fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(writer_fd, 0);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    const std::string chunk(4096, ' ');
    while (!done.load()) {
      if (::write(writer_fd, chunk.data(), chunk.size()) < 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const Thrown t = thrown([&] { read_json_file(fifo, 100000, "test file", "100 KB"); });
  done = true;
  writer.join();
  ::close(writer_fd);
  EXPECT_EQ(t.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(t.message.find(fifo), std::string::npos) << t.message;
  EXPECT_NE(t.message.find("100000"), std::string::npos) << t.message;

  // A pipe whose writer wrote a document and closed, as `--config <(echo ...)` passes
  // /dev/fd/63: read whole.
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  ASSERT_EQ(::write(ends[1], R"({"a": 2})", 8), 8);
  ::close(ends[1]);
  const nlohmann::json j =
      read_json_file("/proc/self/fd/" + std::to_string(ends[0]), 1024, "test file", "1 KiB");
  ::close(ends[0]);
  EXPECT_EQ(j["a"], 2);
  std::filesystem::remove(fifo);
}

TEST(JsonFieldsTest, MissingFileIsNotFound) {
  const Thrown t =
      thrown([] { read_json_file("/nonexistent/x.json", 1024, "test file", "1 KiB"); });
  EXPECT_EQ(t.code, ErrorCode::kNotFound);
  EXPECT_NE(t.message.find("/nonexistent/x.json"), std::string::npos) << t.message;
}

// Root reads any file whatever its mode, so the check drops to an unprivileged user in a child
// process when the test runs as root.
TEST(JsonFieldsTest, UnreadableFileIsPermissionDeniedNotNotFound) {
  const std::string path = write_file("json_fields_unreadable.json", "{}");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  const auto code_of_read = [&] {
    return thrown([&] { read_json_file(path, 1024, "test file", "1 KiB"); }).code;
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(code_of_read(), ErrorCode::kPermissionDenied);
    return;
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    try {
      read_json_file(path, 1024, "test file", "1 KiB");
    } catch (const Error& e) {
      ::_exit(e.code() == ErrorCode::kPermissionDenied ? 0 : 1);
    }
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "cannot drop root privileges here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: another error code, 2: nothing thrown";
}

}  // namespace
}  // namespace vtpu
