//===- Backends.h - the communication backends ------------------*- C++ -*-===//
//
// Private to runtime/comm: createWorld() picks one of these.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_COMM_BACKENDS_H
#define BMRT_COMM_BACKENDS_H

#include "bmrt/Comm.h"

namespace bmrt {

/// MPI_Init_thread (given `startTimeout` seconds, 0: forever), then
/// MPI_COMM_WORLD as the world (MpiComm.cpp).
std::unique_ptr<World> createMpiWorld(double startTimeout);
/// One rank, no MPI: collectives are copies (LocalComm.cpp).
std::unique_ptr<World> createLocalWorld();

/// The rank and the number of ranks a launcher gave this process, read
/// from its environment, for what happens before the World exists; -1
/// when there is no launcher or it does not say (Comm.cpp).
int launcherRank();
int launcherSize();

} // namespace bmrt

#endif // BMRT_COMM_BACKENDS_H
