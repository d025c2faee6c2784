// Hardware profiles (--hardware PATH.json, a runtime option's hardware_profile, profiles/):
// HardwareProfile::load_json_file. An accepted profile must read back from its to_json, and the
// cost model that vtpu plan and vtpu reshard build from it must price collectives and compute.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "vtpu/collectives/types.h"
#include "vtpu/planner/cost_model.h"
#include "vtpu/runtime/hardware_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vtpu::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  const auto profile =
      vtpu::fuzz::accept_or_refuse([&] { return vtpu::HardwareProfile::load_json_file(path); });
  if (!profile) return 0;
  const nlohmann::json j = profile->to_json();
  vtpu::fuzz::check(vtpu::HardwareProfile::from_json(j).to_json() == j,
                    "from_json(to_json()) changed the profile");
  const vtpu::CostModel cost = vtpu::CostModel(*profile).for_cores(4);
  cost.describe();
  for (vtpu::CollectiveKind kind :
       {vtpu::CollectiveKind::kAllReduce, vtpu::CollectiveKind::kAllGather,
        vtpu::CollectiveKind::kReduceScatter, vtpu::CollectiveKind::kAllToAll}) {
    for (double bytes : {8.0, 1e6, 1e12}) cost.collective(kind, bytes, {0, 1}, {2, 2});
  }
  // A profile need not list both dtypes; peak_flops refuses the one it lacks.
  for (const char* dtype : {"f32", "bf16"}) {
    vtpu::fuzz::refuse_cleanly([&] { cost.op_seconds(1e12, 1e9, dtype); });
  }
  return 0;
}
