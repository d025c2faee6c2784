// One candidate strategy of the auto-sharding planner (planner/auto_planner.h): given a role per
// mesh axis, the per-layer costs (compute, communication and HBM per core) and the two dynamic
// programs over the layer chain, the fastest plan within the HBM limit and the smallest plan in
// HBM. plan_auto_sharding enumerates the strategies and ranks what this fills in.
#pragma once

#include <cstdint>
#include <vector>

#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/cost_model.h"
#include "vtpu/planner/model_graph.h"

namespace vtpu::planner_dp {

/// Prices candidate `c`, whose roles (one per axis of `mesh_shape`) and name are set: sets
/// c.infeasible_reason (empty when it can run), c.infeasible_by_constraints and c.feasible, and
/// when feasible its layers, times, bytes per core, fit under `hbm_limit_bytes` and smallest HBM.
/// `cost` is priced for the mesh's cores. Throws InvalidArgumentError when a byte count reaches
/// 2^63. Pure; thread-safe.
void plan_strategy(const ModelGraph& model, const CostModel& cost,
                   const std::vector<int64_t>& mesh_shape, const PlanConstraints& constraints,
                   uint64_t hbm_limit_bytes, PlanCandidate& c);

}  // namespace vtpu::planner_dp
