// Temporary files of the tests, unique per test process.
//
// ctest runs every test in a process of its own, several at once (-j), and several worktrees of
// vtpu run ctest on one machine at the same time: a fixed name in /tmp
// (vtpu_cli_mlp_emitted.json) was written and read by two runs at once. Every test file
// therefore goes in a directory of its process, <temp_directory_path()>/vtpu_test_<pid>, which is
// removed with its contents when the process exits.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace vtpu {

/// This process's directory for test files: <temp_directory_path()>/vtpu_test_<pid>, emptied and
/// created on first use, removed with its contents at exit (by the process that created it, not a
/// forked child). Thread-safe (a function-local static).
inline const std::filesystem::path& test_temp_dir() {
  struct Dir {
    pid_t owner = ::getpid();
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("vtpu_test_" + std::to_string(owner));
    Dir() {
      std::filesystem::remove_all(path);  // a stale directory of an earlier process of this pid
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ignored;
      if (::getpid() == owner) std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  return dir.path;
}

/// The path of the test file `name` (a file name, no directory) in test_temp_dir(). Creates no
/// file. Thread-safe.
inline std::string test_temp_path(const std::string& name) {
  return (test_temp_dir() / name).string();
}

}  // namespace vtpu
