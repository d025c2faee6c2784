// What the fuzz targets share: the input as a file, since the readers take a path as the CLI
// passes one, and the rule that a reader refuses bad input only with the error codes it documents.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>

#include "vtpu/common/error.h"

namespace vtpu::fuzz {

/// One in-memory file (memfd) rewritten with each input. Its path /proc/self/fd/N opens as a
/// regular file with its own offset, as the user's file would; no disk, nothing left behind.
/// Thread-compatible.
class InputFile {
 public:
  InputFile() : fd_(::memfd_create("vtpu_fuzz_input", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { ::close(fd_); }

  /// Replaces the file's contents with `data` and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) fail("ftruncate");
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) fail("pwrite");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }
  int fd_;
  std::string path_;
};

/// Runs `read` and returns what it returns, or nullopt when it refused the input cleanly: threw a
/// vtpu::Error with one of `allowed` codes. Another code aborts, so that libFuzzer reports it
/// with the input; any other exception escapes (std::terminate prints it and aborts): a reader
/// must not leak a library's exception. What a caller checks of an accepted input runs outside,
/// so that an error there is never taken for a refusal.
template <typename Read>
auto accept_or_refuse(Read&& read,
                      std::initializer_list<ErrorCode> allowed = {ErrorCode::kInvalidArgument})
    -> std::optional<std::invoke_result_t<Read>> {
  try {
    return read();
  } catch (const Error& e) {
    for (ErrorCode code : allowed) {
      if (e.code() == code) return std::nullopt;
    }
    std::fprintf(stderr, "unexpected error code: %s\n", e.what());
    std::abort();
  }
}

/// accept_or_refuse for a call whose result is not needed.
template <typename Read>
void refuse_cleanly(Read&& read,
                    std::initializer_list<ErrorCode> allowed = {ErrorCode::kInvalidArgument}) {
  accept_or_refuse(
      [&] {
        read();
        return true;
      },
      allowed);
}

/// Aborts with `what` when `ok` is false: an invariant of a reader that held for this input broke.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "check failed: %s\n", what);
    std::abort();
  }
}

}  // namespace vtpu::fuzz
