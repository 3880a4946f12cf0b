//===- Backends.h - the communication backends ------------------*- C++ -*-===//
//
// Private to runtime/comm: createWorld() picks one of these.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_COMM_BACKENDS_H
#define BMRT_COMM_BACKENDS_H

#include "bmrt/Comm.h"

namespace bmrt {

/// MPI_Init_thread, then MPI_COMM_WORLD as the world (MpiComm.cpp).
std::unique_ptr<World> createMpiWorld();
/// One rank, no MPI: collectives are copies (LocalComm.cpp).
std::unique_ptr<World> createLocalWorld();

} // namespace bmrt

#endif // BMRT_COMM_BACKENDS_H
