// Tests of common/atomic_file.h: a file is replaced whole or not at all, and no temporary is
// left behind by a failed, abandoned or killed write.
#include "vtpu/common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "tests/temp_path.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_plain(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The names in `dir` (a temporary left behind would be one more).
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = test_temp_dir() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// What `fn` throws: its code, or nullopt if it throws nothing.
template <typename Fn>
std::optional<ErrorCode> code_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return std::nullopt;
}

TEST(AtomicFileTest, CommitReplacesTheFileKeepingItsMode) {
  const fs::path dir = fresh_dir("commit");
  const std::string path = (dir / "out.json").string();
  write_plain(path, "old\n");
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  {
    AtomicFile f(path, "the test output");
    f.write("new ");
    f.write("text\n");
    EXPECT_EQ(read_file(path), "old\n");  // nothing visible before commit()
    f.commit();
  }
  EXPECT_EQ(read_file(path), "new text\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"out.json"});
}

// A new file appears only at commit(), whole.
TEST(AtomicFileTest, ANewFileAppearsOnlyAtCommit) {
  const fs::path dir = fresh_dir("new_file");
  const std::string path = (dir / "new.json").string();
  AtomicFile f(path, "the test output");
  f.write(std::string(100000, 'x'));
  EXPECT_FALSE(fs::exists(path));
  f.commit();
  EXPECT_EQ(fs::file_size(path), 100000u);
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"new.json"});
}

// A writer abandoned before commit() (an error elsewhere) changes nothing.
TEST(AtomicFileTest, WithoutCommitNothingChanges) {
  const fs::path dir = fresh_dir("abandoned");
  const std::string old_path = (dir / "old.json").string();
  write_plain(old_path, "old\n");
  {
    AtomicFile f(old_path, "the test output");
    f.write("partial");
  }
  {
    AtomicFile f((dir / "never.json").string(), "the test output");
    f.write("partial");
  }
  EXPECT_EQ(read_file(old_path), "old\n");
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"old.json"});
}

// A write that fails midway (the file size limit: write(2) fails with EFBIG part way through, as
// a full disk fails with ENOSPC) leaves the old file intact and no temporary; the error is
// ResourceExhausted naming the path.
TEST(AtomicFileTest, AWriteFailingMidwayKeepsTheOldFile) {
  const fs::path dir = fresh_dir("failed_midway");
  const std::string path = (dir / "profile.pb.gz").string();
  const std::string old_text(3000, 'o');
  write_plain(path, old_text);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // write() fails with EFBIG instead
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  std::optional<ErrorCode> code;
  try {
    AtomicFile f(path, "the test output");
    f.write(std::string(3000, 'a'));  // fits
    f.write(std::string(3000, 'b'));  // crosses the limit
    f.commit();
  } catch (const Error& e) {
    code = e.code();
    message = e.message();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(code, ErrorCode::kResourceExhausted);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(read_file(path), old_text);
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"profile.pb.gz"});
}

// A process killed midway (SIGKILL: no handler, no destructor runs) leaves the old file and no
// temporary: the temporary has no name until commit().
TEST(AtomicFileTest, AKilledWriteLeavesNoTemporary) {
  const fs::path dir = fresh_dir("killed");
  const std::string path = (dir / "snapshot.json").string();
  write_plain(path, "old\n");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicFile f(path, "the test output");
    f.write(std::string(1 << 20, 'n'));
    ::raise(SIGKILL);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(read_file(path), "old\n");
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"snapshot.json"});
}

TEST(AtomicFileTest, ErrorsCarryTheCodeOfTheirCause) {
  const fs::path dir = fresh_dir("errors");
  EXPECT_EQ(code_of([&] { AtomicFile((dir / "missing" / "x.json").string(), "t"); }),
            ErrorCode::kNotFound);
  EXPECT_EQ(code_of([&] { AtomicFile(dir.string(), "t"); }), ErrorCode::kInvalidArgument);
  if (fs::exists("/dev/full")) {  // a device is written in place; the full device says ENOSPC
    EXPECT_EQ(code_of([] { write_file_atomically("/dev/full", "t", "bytes"); }),
              ErrorCode::kResourceExhausted);
  }
  EXPECT_EQ(names_in(dir), std::vector<std::string>{});
}

// Another user's directory: PermissionDenied, never NotFound. Run in a child that drops root
// (root passes every permission check), when the test runs as root; otherwise as this user.
TEST(AtomicFileTest, APermissionErrorIsPermissionDenied) {
  const fs::path dir = fresh_dir("no_permission");
  ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  ::chmod(test_temp_dir().c_str(), 0755);
  const std::string path = (dir / "out.json").string();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    const std::optional<ErrorCode> code = code_of([&] { write_file_atomically(path, "t", "x"); });
    ::_exit(code == ErrorCode::kPermissionDenied ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: another code; 3: could not drop root";
  ::chmod(dir.c_str(), 0755);
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace vtpu
