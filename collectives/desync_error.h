// The desync check's error, shared by the Communicator's source files (internal).
#pragma once

#include <string>
#include <string_view>

#include "vtpu/collectives/types.h"
#include "vtpu/common/error.h"

namespace vtpu::detail {

/// How a desync's message begins, followed by the group (remote_desync_sequence looks for it).
inline constexpr std::string_view kDesyncMarker = "collective mismatch in group ";

/// Told apart from other InvalidArgumentErrors so that the group's abort remembers its cause.
class DesyncError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};

/// The text of a desync found by core `core` (whose fingerprint `mine` comes first, so that its
/// sequence is the first after the group) against core `other`'s `theirs`; `group` is the
/// group's "{a,b,...}".
inline std::string desync_message(const std::string& group, int core, const Fingerprint& mine,
                                  int other, const Fingerprint& theirs) {
  return std::string(kDesyncMarker) + group + ": core " + std::to_string(core) + " called " +
         mine.to_string() + " but core " + std::to_string(other) + " called " + theirs.to_string() +
         " (every core in the group must call the same collectives with the same type, shape, "
         "parameters and op, in the same order)";
}

}  // namespace vtpu::detail
