// One mesh over several processes and hosts, on MPI: jax.distributed.initialize for vtpu.
//
//   mpirun -np 2 vtpu train mlp --cores 8      # 2 processes x 4 cores, one mesh of 8
//
// initialize() joins the MPI job when the process was started by an MPI launcher (mpirun,
// mpiexec, srun) and returns the group of its processes; a Runtime made with it hosts this
// process's share of the global cores (runtime/process_group.h), and its communicators move
// messages between processes over MPI (mpi_transport.h). Without a launcher, initialize()
// returns a SingleProcessGroup and vtpu runs as in one process. docs/DISTRIBUTED.md has the how-to.
#pragma once

#include <memory>
#include <string>

#include "vtpu/runtime/process_group.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu::distributed {

/// True when an MPI launcher started this process (its environment names a rank: OpenMPI's
/// OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, MPICH/Hydra's PMI_SIZE). Thread-safe.
bool launched_by_mpi();

/// True when vtpu was built with MPI (find_package(MPI) found it).
bool built_with_mpi();

/// Joins the MPI job (MPI_Init_thread with MPI_THREAD_MULTIPLE) the first time, then returns the
/// same group. Without a launcher: a SingleProcessGroup. Throws FailedPreconditionError when
/// launched by MPI but built without it, or when the MPI library lacks MPI_THREAD_MULTIPLE.
/// Call from the main thread before making a Runtime.
std::shared_ptr<ProcessGroup> initialize();

/// A Runtime over every process of initialize()'s group: options.num_cores is the global count
/// (a multiple of the process count).
std::unique_ptr<Runtime> make_runtime(RuntimeOptions options);

/// This process's index and the process count (0 and 1 before initialize() or without MPI).
int process_index();
int process_count();

/// Leaves the MPI job (MPI_Finalize) after every process got here. No-op without MPI. Called at
/// exit by initialize()'s registration too; explicit calls make the order clear.
void shutdown();

/// Ends the whole job after a failure this process already reported (MPI_Abort with
/// `exit_code`), so that no process waits for this one; without MPI, std::exit(exit_code).
[[noreturn]] void abort_job(int exit_code);

}  // namespace vtpu::distributed
