#include "vtpu/common/data_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef VTPU_SOURCE_DIR
#define VTPU_SOURCE_DIR "."
#endif

namespace vtpu {

namespace {

namespace fs = std::filesystem;

/// <prefix>/share/vtpu for the running program <prefix>/bin/<program>, or "" when the program's
/// path is unknown (no /proc) or it does not sit in a bin/ directory.
fs::path installed_data_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.parent_path().filename() != "bin") return {};
  return exe.parent_path().parent_path() / "share" / "vtpu";
}

}  // namespace

std::vector<std::string> data_file_candidates(const std::string& name,
                                              const std::string& source_path) {
  std::vector<std::string> out;
  if (const char* dir = std::getenv("VTPU_DATA_DIR"); dir != nullptr && *dir != '\0') {
    out.push_back((fs::path(dir) / name).string());
  }
  if (const fs::path dir = installed_data_dir(); !dir.empty()) out.push_back((dir / name).string());
  out.push_back((fs::path(VTPU_SOURCE_DIR) / source_path).string());
  return out;
}

std::string find_data_file(const std::string& name, const std::string& source_path) {
  const std::vector<std::string> candidates = data_file_candidates(name, source_path);
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return path;
  }
  return candidates.front();
}

std::string data_file_lookup_note(const std::string& path, const std::string& name,
                                  const std::string& source_path) {
  const std::vector<std::string> candidates = data_file_candidates(name, source_path);
  if (std::find(candidates.begin(), candidates.end(), path) == candidates.end()) return "";
  std::string note = " (looked in ";
  for (size_t i = 0; i < candidates.size(); ++i) {
    note += (i == 0 ? "" : ", ") + candidates[i];
  }
  return note + ")";
}

std::string find_model_file(const std::string& path) {
  std::error_code ec;
  if (path.empty() || fs::exists(path, ec)) return path;
  const std::string file = fs::path(path).filename().string();
  if (file.empty()) return path;
  const std::string found = find_data_file("models/" + file, "examples/models/" + file);
  return fs::is_regular_file(found, ec) ? found : path;
}

}  // namespace vtpu
