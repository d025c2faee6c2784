#include "common/error.h"

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
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(error_code_name(code)) + ": " + message),
      code_(code),
      message_(message) {}

}  // namespace vtpu
