// distributed.h without MPI: one process; an MPI launcher is refused rather than ignored, since
// each of its processes would otherwise run the whole job alone.
#include <cstdlib>

#include "vtpu/common/error.h"
#include "vtpu/distributed/distributed.h"

namespace vtpu::distributed {

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

bool built_with_mpi() { return false; }

std::shared_ptr<ProcessGroup> initialize() {
  if (launched_by_mpi()) {
    throw FailedPreconditionError(
        "started by an MPI launcher but vtpu was built without MPI (expected a build that found "
        "MPI: install libopenmpi-dev with scripts/install-deps.sh and rebuild)");
  }
  static const auto group = std::make_shared<SingleProcessGroup>();
  return group;
}

std::unique_ptr<Runtime> make_runtime(RuntimeOptions options) {
  return std::make_unique<Runtime>(std::move(options), initialize());
}

int process_index() { return 0; }
int process_count() { return 1; }
void shutdown() {}
void abort_job(int exit_code) { std::exit(exit_code); }

}  // namespace vtpu::distributed
