// vtpu.data_file: the files vtpu ships (digits, fortunes, allocation traces, model files), found
// as the C++ programs find them (common/data_dir.h), so that a Python script reads the same file
// from the build tree, an installed prefix or $VTPU_DATA_DIR without a path argument.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "py_common.h"
#include "vtpu/common/data_dir.h"
#include "vtpu/common/error.h"

namespace vtpu::python {
namespace {

namespace fs = std::filesystem;

// The place of a shipped file in the source tree: model files live in examples/models/, the
// rest (datasets, traces/) in data/, as the top-level CMakeLists.txt installs them.
std::string source_path_of(const std::string& name) {
  return name.rfind("models/", 0) == 0 ? "examples/" + name : "data/" + name;
}

// <prefix>/share/vtpu for a package installed as <prefix>/lib/pythonX.Y/*-packages/vtpu: the
// interpreter need not live in <prefix>/bin, so /proc/self/exe alone would miss it.
std::string installed_share_dir() {
  auto file = py::module_::import("vtpu._vtpu").attr("__file__").cast<std::string>();
  const fs::path lib = fs::path(file).parent_path().parent_path().parent_path().parent_path();
  if (lib.filename() != "lib") return "";
  return (lib.parent_path() / "share" / "vtpu").string();
}

std::string data_file(const std::string& name) {
  if (name.empty() || fs::path(name).is_absolute()) {
    throw InvalidArgumentError("data_file: name '" + name +
                               "' (expected a relative name such as 'digits.csv.gz')");
  }
  const std::string source_path = source_path_of(name);
  std::vector<std::string> candidates = data_file_candidates(name, source_path);
  if (const std::string share = installed_share_dir(); !share.empty()) {
    const char* env = std::getenv("VTPU_DATA_DIR");  // $VTPU_DATA_DIR stays first
    const bool has_env = env != nullptr && *env != '\0';
    candidates.insert(candidates.begin() + (has_env ? 1 : 0), (fs::path(share) / name).string());
  }
  std::string tried;
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return path;
    tried += (tried.empty() ? "" : ", ") + path;
  }
  throw NotFoundError("data file '" + name + "' not found (looked in " + tried +
                      "; scripts/fetch-data.sh fetches the datasets)");
}

}  // namespace

void register_data(py::module_& m) {
  m.def("data_file", &data_file, py::arg("name"),
        "data_file(name) -> str\n\n"
        "The path of a file vtpu ships: 'digits.csv.gz', 'fortunes.txt', 'traces/<file>.jsonl',\n"
        "'models/<file>.json'. Looks in $VTPU_DATA_DIR, the installed prefix's share/vtpu and\n"
        "the source tree, as the vtpu programs do. Raises vtpu.NotFoundError (a\n"
        "FileNotFoundError) naming the places tried.");
}

}  // namespace vtpu::python
