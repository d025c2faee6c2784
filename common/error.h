// vtpu's single error policy: every failure is an exception derived from vtpu::Error and carries a
// canonical code, after absl::StatusCode. Messages name the offending value and what was expected.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace vtpu {

/// Canonical error codes (a subset of absl::StatusCode with the same meanings).
enum class ErrorCode {
  kInvalidArgument,     // the caller passed a bad value (shape, size, option, file content)
  kResourceExhausted,   // out of HBM (or another bounded resource)
  kDeadlineExceeded,    // a wait ran past its timeout
  kAborted,             // another participant failed; this operation was abandoned
  kFailedPrecondition,  // the system is not in a state where the call makes sense
  kUnimplemented,       // a backend does not support the operation
  kInternal,            // an invariant broke: a bug in vtpu
  kNotFound,            // a named file or entity does not exist
  kPermissionDenied,    // the caller may not read or write a file that exists
};

/// "InvalidArgument", "ResourceExhausted", ... as absl prints them.
std::string_view error_code_name(ErrorCode code);

/// Base of every exception vtpu throws. what() is "<CodeName>: <message>". Thread-compatible.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }
  /// The message without the "<CodeName>: " prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

#define VTPU_DEFINE_ERROR(Name, Code)                                              \
  class Name : public Error {                                                      \
   public:                                                                         \
    explicit Name(const std::string& message) : Error(ErrorCode::Code, message) {} \
  }

VTPU_DEFINE_ERROR(InvalidArgumentError, kInvalidArgument);
VTPU_DEFINE_ERROR(ResourceExhaustedError, kResourceExhausted);
VTPU_DEFINE_ERROR(DeadlineExceededError, kDeadlineExceeded);
VTPU_DEFINE_ERROR(AbortedError, kAborted);
VTPU_DEFINE_ERROR(FailedPreconditionError, kFailedPrecondition);
VTPU_DEFINE_ERROR(UnimplementedError, kUnimplemented);
VTPU_DEFINE_ERROR(InternalError, kInternal);
VTPU_DEFINE_ERROR(NotFoundError, kNotFound);
VTPU_DEFINE_ERROR(PermissionDeniedError, kPermissionDenied);

#undef VTPU_DEFINE_ERROR

/// Throws the error of a failed write of `what` (e.g. "the memory profile") to the file `path`
/// with errno `err` (0 is taken as EIO): "cannot write <what> to '<path>': <strerror(err)>", as
/// NotFoundError (ENOENT, ENOTDIR), PermissionDeniedError (EACCES, EPERM), ResourceExhaustedError
/// (ENOSPC, EDQUOT, EFBIG: a full disk, /dev/full) or else InvalidArgumentError. An I/O failure is
/// never InternalError, which is kept for vtpu's own bugs. Thread-safe.
[[noreturn]] void throw_file_write_error(const std::string& what, const std::string& path, int err);

/// Throws the error of a failed open of `what` (e.g. "trace file") at `path` for reading with
/// errno `err` (0 is taken as EIO): "cannot open <what> '<path>': <strerror(err)>", with the
/// codes of throw_file_write_error: a file that exists but may not be read is PermissionDenied,
/// never NotFound. Thread-safe.
[[noreturn]] void throw_file_open_error(const std::string& what, const std::string& path, int err);

}  // namespace vtpu
