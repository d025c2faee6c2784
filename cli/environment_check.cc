#include "vtpu/cli/environment_check.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime_options.h"

namespace vtpu {

void check_environment_variables() {
  // The runtime options' own readers: one definition of a valid value.
  (void)RuntimeOptions::collective_timeout_from_env();
  (void)RuntimeOptions::default_pin_threads();
  // A data directory that does not exist would only show as "cannot open digits data file"
  // naming another path, once the lookup falls through to the next candidate.
  if (const char* dir = std::getenv("VTPU_DATA_DIR"); dir != nullptr && *dir != '\0') {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      throw InvalidArgumentError("VTPU_DATA_DIR is '" + std::string(dir) +
                                 "' (expected a directory, or VTPU_DATA_DIR unset)");
    }
  }
}

}  // namespace vtpu
