#include "examples/output_path.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/error.h"

namespace vtpu::examples {

void check_distinct_outputs(const char* flag_a, const std::string& path_a, const char* flag_b,
                            const std::string& path_b, const std::string& why) {
  if (path_a.empty() || path_b.empty()) return;
  namespace fs = std::filesystem;
  std::error_code a_error, b_error, link_error;
  const fs::path a = fs::weakly_canonical(path_a, a_error);
  const fs::path b = fs::weakly_canonical(path_b, b_error);
  const bool same = path_a == path_b || (!a_error && !b_error && a == b) ||
                    fs::equivalent(path_a, path_b, link_error);  // hard links
  if (same)
    throw InvalidArgumentError(std::string(flag_a) + " '" + path_a + "' and " + flag_b + " '" +
                               path_b + "' are the same file (" + why + "; give two paths)");
}

void check_output_path(const char* flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    throw InvalidArgumentError(std::string(flag) + " '" + path +
                               "' is a directory; expected a file path");
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    throw InvalidArgumentError(std::string(flag) + " '" + path + "': directory '" + dir.string() +
                               "' does not exist");
  }
  // The only reliable check that the file can be written (permissions, read-only or special
  // file systems such as /proc, even for root): open it. An existing file is opened for append
  // (not truncated); a new one is created and removed again.
  const bool existed = fs::exists(p, ec);
  std::FILE* f = std::fopen(path.c_str(), existed ? "a" : "w");
  if (f == nullptr) {
    const int err = errno;
    throw InvalidArgumentError(std::string(flag) + " '" + path +
                               "' cannot be written: " + std::strerror(err));
  }
  // A write of zero bytes changes no file, but a device that refuses every write fails it:
  // /dev/full says ENOSPC (Linux's write_full ignores the count). Regression (session 12 review):
  // `vtpu bench collectives --calibrate /dev/full` failed only after the whole sweep.
  const int write_err = ::write(fileno(f), "", 0) < 0 ? errno : 0;
  std::fclose(f);
  if (!existed) fs::remove(p, ec);
  if (write_err != 0) {
    throw InvalidArgumentError(std::string(flag) + " '" + path +
                               "' cannot be written: " + std::strerror(write_err));
  }
}

void write_output_file(const char* flag, const std::string& path, const std::string& text) {
  const auto fail = [&](int err) {
    return InvalidArgumentError(std::string(flag) + " '" + path +
                                "' cannot be written: " + std::strerror(err));
  };
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw fail(errno);
  const size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const int write_err = errno;
  // fclose flushes the stdio buffer: a full device reports ENOSPC here, not in fwrite.
  if (written != text.size()) {
    std::fclose(f);
    throw fail(write_err);
  }
  if (std::fclose(f) != 0) throw fail(errno);
}

}  // namespace vtpu::examples
