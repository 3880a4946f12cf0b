//===- CreateWorld.cpp - picking a communication backend ------------------===//

#include "Backends.h"

#include "bmrt/Error.h"

#include <cstdlib>
#include <string>

namespace bmrt {

/// Whether a parallel launcher started this process: each sets its own
/// variables (Open MPI's mpirun, PMIx and PMI as used by srun and MPICH's
/// Hydra, and Slurm for a step of several tasks).
static bool startedByLauncher() {
  for (const char *name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name))
      return true;
  const char *tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  return tasks && std::atoi(tasks) > 1;
}

std::unique_ptr<World> createWorld(double startTimeout) {
  const char *forced = std::getenv("BMRT_COMM");
  std::string backend =
      forced && *forced ? forced : (startedByLauncher() ? "mpi" : "local");
  if (backend == "mpi") {
#ifdef BMRT_NO_MPI
    // A runtime-only build without MPI (BMRT_MPI=OFF): one rank only.
    BMRT_FAIL("this bmrt was built without MPI (BMRT_MPI=OFF) and runs one "
              "rank only: rebuild with MPI to launch several ranks" +
              std::string(forced && *forced ? " (BMRT_COMM=mpi)" : ""));
#else
    return createMpiWorld(startTimeout);
#endif
  }
  if (backend == "local")
    return createLocalWorld();
  BMRT_FAIL("BMRT_COMM is '" + backend + "'; expected 'mpi' or 'local'");
}

} // namespace bmrt
