// test_temp_dir / test_temp_path (tests/temp_path.h): one directory of test files per process.
#include "tests/temp_path.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace vtpu {
namespace {

// Regression: tests wrote fixed names in /tmp (vtpu_cli_mlp_emitted.json), so two ctest runs from
// different worktrees read each other's files.
TEST(TempPathTest, FilesGoInADirectoryNamedAfterTheProcess) {
  const std::filesystem::path want =
      std::filesystem::temp_directory_path() / ("vtpu_test_" + std::to_string(::getpid()));
  EXPECT_EQ(test_temp_dir(), want);
  EXPECT_TRUE(std::filesystem::is_directory(want));
  EXPECT_EQ(test_temp_path("a.json"), (want / "a.json").string());
  EXPECT_EQ(&test_temp_dir(), &test_temp_dir());  // created once
  std::ofstream(test_temp_path("a.json")) << "{}";
  EXPECT_EQ(std::filesystem::file_size(test_temp_path("a.json")), 2u);
}

}  // namespace
}  // namespace vtpu
