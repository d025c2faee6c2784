// main() of the distributed tests: joins the MPI job before GoogleTest runs, so that every
// process runs the same tests in the same order (tests/distributed/run_mpi.sh starts them).
#include <gtest/gtest.h>

#include "vtpu/distributed/distributed.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  vtpu::distributed::initialize();
  const int rc = RUN_ALL_TESTS();
  vtpu::distributed::shutdown();
  return rc;
}
