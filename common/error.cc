#include "vtpu/common/error.h"

#include <cerrno>
#include <cstring>

namespace vtpu {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kResourceExhausted:
      return "ResourceExhausted";
    case ErrorCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case ErrorCode::kAborted:
      return "Aborted";
    case ErrorCode::kFailedPrecondition:
      return "FailedPrecondition";
    case ErrorCode::kUnimplemented:
      return "Unimplemented";
    case ErrorCode::kInternal:
      return "Internal";
    case ErrorCode::kNotFound:
      return "NotFound";
    case ErrorCode::kPermissionDenied:
      return "PermissionDenied";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(error_code_name(code)) + ": " + message),
      code_(code),
      message_(message) {}

namespace {

// The one mapping of an I/O errno to a code, for reads and writes alike.
[[noreturn]] void throw_file_error(const std::string& message, int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      throw NotFoundError(message);
    case EACCES:
    case EPERM:
      throw PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      throw ResourceExhaustedError(message);
    default:
      throw InvalidArgumentError(message);
  }
}

}  // namespace

void throw_file_write_error(const std::string& what, const std::string& path, int err) {
  if (err == 0) err = EIO;
  throw_file_error("cannot write " + what + " to '" + path + "': " + std::strerror(err), err);
}

void throw_file_open_error(const std::string& what, const std::string& path, int err) {
  if (err == 0) err = EIO;
  throw_file_error("cannot open " + what + " '" + path + "': " + std::strerror(err), err);
}

}  // namespace vtpu
