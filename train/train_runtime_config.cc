#include "vtpu/train/train_runtime_config.h"

#include <algorithm>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"

namespace vtpu {

TrainRuntimeConfig TrainRuntimeConfig::load(const std::string& path) {
  TrainRuntimeConfig c;
  c.path = path;
  if (path.empty()) return c;
  c.options = RuntimeOptions::load_json_file(path, &c.keys);
  if (c.sets("num_cores")) c.file_num_cores = c.options.num_cores;
  return c;
}

bool TrainRuntimeConfig::sets(const std::string& key) const {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

CLI::Option* add_runtime_config_option(CLI::App& app, std::string& path, const std::string& rules) {
  return app
      .add_option(
          "--config", path,
          "RuntimeOptions JSON file (keys as docs/TRAINING.md, \"Runtime options\"; " + rules + ")")
      ->check(CLI::Validator(
          [](const std::string& p) {
            return p.empty() ? std::string("expected a file path, got an empty string")
                             : std::string();
          },
          "PATH", "non-empty path"));
}

void TrainRuntimeConfig::check_mesh_cores(int64_t mesh_cores, const std::string& mesh,
                                          std::optional<int> cores_flag) const {
  if (cores_flag || !file_num_cores || *file_num_cores == mesh_cores) return;
  throw InvalidArgumentError("num_cores " + std::to_string(*file_num_cores) + " in --config " +
                             path + " does not match " + mesh + " (" +
                             count_text(mesh_cores, "core") + "; expected num_cores " +
                             std::to_string(mesh_cores) + ", or num_cores left out of the file)");
}

void TrainRuntimeConfig::check_plan_mesh_cores(const TrainPlan& plan,
                                               std::optional<int> cores_flag) const {
  check_mesh_cores(plan.num_cores(),
                   "the mesh " + plan.describe_mesh() + " of plan '" + plan.path + "'", cores_flag);
}

void TrainRuntimeConfig::check_memory_events(bool written, const std::string& command) const {
  if (written || !options.record_memory_events) return;
  throw InvalidArgumentError(
      "record_memory_events is true in --config " + path + ", but " + command +
      " writes no memory event log (expected record_memory_events false or left out; `vtpu "
      "train mlp --memory-events FILE` records and writes one)");
}

}  // namespace vtpu
