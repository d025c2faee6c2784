// The desync check's error, shared by the Communicator's two source files (internal).
#pragma once

#include <string_view>

#include "vtpu/common/error.h"

namespace vtpu::detail {

/// How a desync's message begins, followed by the group (remote_desync_sequence looks for it).
inline constexpr std::string_view kDesyncMarker = "collective mismatch in group ";

/// Told apart from other InvalidArgumentErrors so that the group's abort remembers its cause.
class DesyncError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};

}  // namespace vtpu::detail
