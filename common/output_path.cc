#include "vtpu/common/output_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "vtpu/common/atomic_file.h"
#include "vtpu/common/error.h"

namespace vtpu {

namespace {
// Whether paths a and b name one file: the same spelling, the same canonical path (symbolic links
// and "." resolved; the file need not exist), or, when both exist, the same inode (hard links).
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code a_error, b_error, link_error;
  const fs::path ca = fs::weakly_canonical(a, a_error);
  const fs::path cb = fs::weakly_canonical(b, b_error);
  return a == b || (!a_error && !b_error && ca == cb) || fs::equivalent(a, b, link_error);
}

// A path the system refuses to write: a full device or a permission is the run's environment
// (ResourceExhausted, PermissionDenied: exit 1), any other refusal a bad path (InvalidArgument).
[[noreturn]] void throw_unwritable(const char* flag, const std::string& path, int err) {
  const std::string message =
      std::string(flag) + " '" + path + "' cannot be written: " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) throw ResourceExhaustedError(message);
  if (err == EACCES || err == EPERM) throw PermissionDeniedError(message);
  throw InvalidArgumentError(message);
}
}  // namespace

void check_distinct_outputs(const char* flag_a, const std::string& path_a, const char* flag_b,
                            const std::string& path_b, const std::string& why) {
  if (path_a.empty() || path_b.empty()) return;
  if (same_file(path_a, path_b))
    throw InvalidArgumentError(std::string(flag_a) + " '" + path_a + "' and " + flag_b + " '" +
                               path_b + "' are the same file (" + why + "; give two paths)");
}

void check_outputs_not_inputs(const std::vector<FileOption>& outputs,
                              const std::vector<FileOption>& inputs) {
  namespace fs = std::filesystem;
  for (const FileOption& out : outputs) {
    for (const FileOption& in : inputs) {
      if (out.path.empty() || in.path.empty()) continue;
      // Only a regular input can be replaced: /dev/stdin and /dev/stdout may be one terminal.
      std::error_code in_error;
      if (fs::exists(in.path, in_error) && !fs::is_regular_file(in.path, in_error)) continue;
      if (same_file(in.path, out.path)) {
        throw InvalidArgumentError(std::string(out.flag) + " '" + out.path + "' and " + in.flag +
                                   " '" + in.path + "' are the same file (writing " + out.flag +
                                   " would replace the input; give another output path)");
      }
    }
  }
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
  if (f == nullptr) throw_unwritable(flag, path, errno);
  // A write of zero bytes changes no file, but a device that refuses every write fails it:
  // /dev/full says ENOSPC (Linux's write_full ignores the count). Without this check
  // `vtpu bench collectives --calibrate /dev/full` failed only after the whole sweep.
  const int write_err = ::write(fileno(f), "", 0) < 0 ? errno : 0;
  std::fclose(f);
  if (!existed) fs::remove(p, ec);
  if (write_err != 0) throw_unwritable(flag, path, write_err);
}

void write_output_file(const char* flag, const std::string& path, const std::string& text) {
  write_file_atomically(path, std::string(flag) + " output", text);
}

}  // namespace vtpu
