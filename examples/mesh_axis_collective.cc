// Collectives over one axis of a device mesh, as JAX's psum(x, 'y') and all_gather(x, 'x') inside
// shard_map: the mesh names the groups (Mesh::replica_groups), and each group gets its own
// Communicator (Communicator::for_groups). The groups of one axis run at the same time.
//
// Mesh (x=2, y=4) over cores 0..7, row-major:   x=0: 0 1 2 3
//                                               x=1: 4 5 6 7
// psum over 'y' sums each row; all_gather over 'x' stacks each column.
#include <vtpu/collectives/communicator.h>
#include <vtpu/runtime/runtime.h>
#include <vtpu/sharding/mesh.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

/// The communicator of `groups` that holds `core`.
vtpu::Communicator& group_of(const std::vector<std::unique_ptr<vtpu::Communicator>>& comms,
                             int core) {
  for (const auto& c : comms) {
    if (std::ranges::find(c->group(), core) != c->group().end()) return *c;
  }
  throw std::logic_error("core " + std::to_string(core) + " is in no group");
}

}  // namespace

int main() {
  vtpu::RuntimeOptions options;
  options.num_cores = 8;
  options.hbm_bytes_per_core = uint64_t{64} << 20;
  vtpu::Runtime runtime(options);
  const vtpu::Mesh mesh({2, 4}, {"x", "y"});

  const auto y_groups = mesh.replica_groups(std::vector<std::string>{"y"});  // {0..3}, {4..7}
  const auto x_groups = mesh.replica_groups(std::vector<std::string>{"x"});  // {0,4}, ..., {3,7}
  auto y_comms = vtpu::Communicator::for_groups(runtime, y_groups);
  auto x_comms = vtpu::Communicator::for_groups(runtime, x_groups);

  std::vector<float> row_sum(options.num_cores);
  std::vector<std::vector<float>> column(options.num_cores);
  runtime.run_spmd([&](vtpu::CoreContext& ctx) {
    const int core = ctx.core_id();
    // psum over 'y': every core of a row ends with the sum of the row's core ids.
    float value = static_cast<float>(core);
    group_of(y_comms, core).all_reduce<float>(ctx, std::span<float>(&value, 1));
    row_sum[core] = value;
    // all_gather over 'x': every core of a column gets [id at x=0, id at x=1].
    const float mine = static_cast<float>(core);
    const int64_t shape[] = {1};
    column[core].resize(mesh.axis_size("x"));
    group_of(x_comms, core)
        .all_gather<float>(ctx, std::span<const float>(&mine, 1), column[core], shape, 0,
                           /*tiled=*/true);
  });

  int failures = 0;
  for (int core = 0; core < options.num_cores; ++core) {
    const std::vector<int64_t> c = mesh.coords_of(core);
    const float want_sum = c[0] == 0 ? 0 + 1 + 2 + 3 : 4 + 5 + 6 + 7;
    const std::vector<float> want_column = {float(c[1]), float(c[1] + 4)};
    const bool ok = row_sum[core] == want_sum && column[core] == want_column;
    failures += ok ? 0 : 1;
    std::printf("core %d (x=%lld, y=%lld): psum over y = %g, all_gather over x = [%g, %g]%s\n",
                core, static_cast<long long>(c[0]), static_cast<long long>(c[1]), row_sum[core],
                column[core][0], column[core][1], ok ? "" : "  WRONG");
  }
  return failures == 0 ? 0 : 1;
}
