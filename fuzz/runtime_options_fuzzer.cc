// The runtime options file (--config): RuntimeOptions::load_json_file. An accepted file must
// survive its own to_json (what a Python caller or a plan records), read back unchanged.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "vtpu/runtime/runtime_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vtpu::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  std::vector<std::string> keys;
  const auto options = vtpu::fuzz::accept_or_refuse(
      [&] { return vtpu::RuntimeOptions::load_json_file(path, &keys); });
  if (!options) return 0;
  const nlohmann::json j = options->to_json();
  vtpu::fuzz::check(vtpu::RuntimeOptions::from_json(j).to_json() == j,
                    "from_json(to_json()) changed the options");
  return 0;
}
