// Plan files (vtpu plan --emit; vtpu train --plan, --estimate-from): load_train_plan. A plan may
// name a hardware profile that does not exist (NotFound) or a file it may not read.
#include "fuzz/fuzz_input.h"
#include "vtpu/planner/plan_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vtpu::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  vtpu::fuzz::refuse_cleanly(
      [&] {
        const vtpu::TrainPlan plan = vtpu::load_train_plan(path);
        plan.num_cores();
        plan.mesh();
        plan.describe_strategy();
        plan.describe_mesh();
      },
      {vtpu::ErrorCode::kInvalidArgument, vtpu::ErrorCode::kNotFound,
       vtpu::ErrorCode::kPermissionDenied});
  return 0;
}
