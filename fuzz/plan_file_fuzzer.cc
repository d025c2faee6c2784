// Plan files (vtpu plan --emit; vtpu train --plan, --estimate-from): load_train_plan, then the
// checks each trainer makes of the plan it is given (model, strategy, layout). A plan may name a
// hardware profile that does not exist (NotFound), and a trainer may not run its strategy
// (Unimplemented).
#include "fuzz/fuzz_input.h"
#include "vtpu/planner/plan_file.h"
#include "vtpu/planner/trainer_plans.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vtpu::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  const auto plan =
      vtpu::fuzz::accept_or_refuse([&] { return vtpu::load_train_plan(path); },
                                   {vtpu::ErrorCode::kInvalidArgument, vtpu::ErrorCode::kNotFound,
                                    vtpu::ErrorCode::kPermissionDenied});
  if (!plan) return 0;
  plan->num_cores();
  plan->mesh();
  plan->describe_strategy();
  plan->describe_mesh();
  const std::initializer_list<vtpu::ErrorCode> refused = {vtpu::ErrorCode::kInvalidArgument,
                                                          vtpu::ErrorCode::kUnimplemented};
  vtpu::fuzz::refuse_cleanly([&] { vtpu::mlp_plan_model(*plan); }, refused);
  vtpu::fuzz::refuse_cleanly([&] { vtpu::transformer_plan_model(*plan); }, refused);
  vtpu::fuzz::refuse_cleanly([&] { vtpu::mlp_plan_mode(*plan, true); }, refused);
  vtpu::fuzz::refuse_cleanly([&] { vtpu::check_mlp_estimate_plan(*plan); }, refused);
  vtpu::fuzz::refuse_cleanly([&] { vtpu::plan_data_tensor_layout(*plan, "fuzz"); }, refused);
  return 0;
}
