#include "examples/output_path.h"

#include <filesystem>
#include <system_error>

#include "common/error.h"

namespace vtpu::examples {

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
}

}  // namespace vtpu::examples
