// Tests of common/output_path.h: the atomic replacement of write_output_file and the check that
// an output does not name an input.
#include "vtpu/common/output_path.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/expect_error.h"
#include "tests/temp_path.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The files of `dir` whose names start with `prefix` (a temporary left behind would be one).
int count_files(const std::filesystem::path& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().starts_with(prefix)) ++n;
  return n;
}

// The old file is replaced, not rewritten: a reader that opened it before keeps reading the old
// text (truncating in place would hand it the new text, or nothing), and the permission bits stay.
TEST(OutputPathTest, WriteOutputFileReplacesTheFileAtomically) {
  const std::filesystem::path dir = test_temp_dir() / "atomic_replace";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  write_file(path, "old text\n");
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  std::ifstream reader(path, std::ios::binary);
  ASSERT_TRUE(reader.is_open());
  write_output_file("--emit", path, "new text, longer than the old\n");
  EXPECT_EQ(read_file(path), "new text, longer than the old\n");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(reader), {}), "old text\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(count_files(dir, ".plan.json.vtpu-"), 0);  // no temporary left
  // Through a symbolic link: the file it points to is replaced, the link stays a link.
  const std::string link = (dir / "link.json").string();
  std::filesystem::create_symlink(path, link);
  write_output_file("--emit", link, "via the link\n");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(read_file(path), "via the link\n");
  // A new file is created.
  const std::string fresh = (dir / "fresh.json").string();
  write_output_file("--emit", fresh, "fresh\n");
  EXPECT_EQ(read_file(fresh), "fresh\n");
}

// A write that fails (here: the file size limit, EFBIG, as a full disk fails with ENOSPC) leaves
// the old file as it was and no temporary. Before the fix the file was truncated first: the old
// text was lost and a partial new one left.
TEST(OutputPathTest, AFailedWriteKeepsTheOldFile) {
  const std::filesystem::path dir = test_temp_dir() / "failed_write";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "profile.json").string();
  const std::string old_text(100, 'o');
  write_file(path, old_text);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // write() fails with EFBIG instead
  rlimit small = saved;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_output_file("--calibrate", path, std::string(5000, 'n'));
  } catch (const ResourceExhaustedError& e) {
    message = e.message();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("--calibrate"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(read_file(path), old_text);
  EXPECT_EQ(count_files(dir, ".profile.json.vtpu-"), 0);
}

TEST(OutputPathTest, AnOutputMayNotNameAnInput) {
  const std::filesystem::path dir = test_temp_dir() / "outputs_inputs";
  std::filesystem::create_directories(dir);
  const std::string data = (dir / "data.csv").string();
  write_file(data, "1,2\n");
  const std::string other = (dir / "other.json").string();
  // Distinct files, absent options and absent outputs pass.
  EXPECT_NO_THROW(check_outputs_not_inputs({{"--json", other}, {"--html", ""}},
                                           {{"--data", data}, {"--config", ""}}));
  try {
    check_outputs_not_inputs({{"--json", other}, {"--memory-snapshot", data}},
                             {{"--config", ""}, {"--data", data}});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.message(), "--memory-snapshot '" + data + "' and --data '" + data +
                               "' are the same file (writing --memory-snapshot would replace the "
                               "input; give another output path)");
  }
  // A hard link is the same file under another name.
  const std::string hard = (dir / "hard.csv").string();
  std::filesystem::create_hard_link(data, hard);
  EXPECT_THROW(check_outputs_not_inputs({{"--emit", hard}}, {{"--data", data}}),
               InvalidArgumentError);
  // A file that does not exist yet: compared by its path.
  const std::string absent = (dir / "absent.json").string();
  EXPECT_THROW(check_outputs_not_inputs({{"--emit", (dir / "." / "absent.json").string()}},
                                        {{"the model file", absent}}),
               InvalidArgumentError);
}

// A bad path is the user's (InvalidArgument: a usage error); a full device is the run's
// environment (ResourceExhausted), as a failed write of the same file would be.
TEST(CheckOutputPath, NamesTheFlagAndThePathWithTheCodeOfTheProblem) {
  using testing::expect_error;
  const std::string dir = test_temp_dir().string();
  expect_error(ErrorCode::kInvalidArgument, [&] { check_output_path("--emit", dir); },
               {"--emit", "'" + dir + "'"});
  expect_error(ErrorCode::kInvalidArgument,
               [&] { check_output_path("--emit", "/nonexistent-dir/p.json"); },
               {"--emit", "'/nonexistent-dir'"});
  if (std::filesystem::exists("/dev/full")) {
    expect_error(ErrorCode::kResourceExhausted,
                 [&] { check_output_path("--calibrate", "/dev/full"); },
                 {"--calibrate", "'/dev/full'"});
  }
  const std::string fresh = test_temp_path("vtpu_check_output_fresh.json");
  std::filesystem::remove(fresh);
  EXPECT_NO_THROW(check_output_path("--emit", fresh));
  EXPECT_FALSE(std::filesystem::exists(fresh));  // the probe removes the file it created
}

}  // namespace
}  // namespace vtpu
