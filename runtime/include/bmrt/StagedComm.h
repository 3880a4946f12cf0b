//===- StagedComm.h - host-memory communicators for device memory -*- C++ -*-===//
//
// MPI moves host memory. Ranks whose tensors live on a device the host
// cannot address (several ranks sharing one GPU before NCCL, issue 22
// section 3) reach each other through a staged communicator: every
// operation copies its send buffer to host memory, runs the host
// communicator's operation there, and copies the result back to the
// device, synchronously. Correct, not fast: nothing overlaps, and the
// asynchronous collectives complete before they return.
//
// Buffers may also be host memory (the trainer's loss and norm scalars):
// a device's copies accept host pointers (CUDA's unified addressing).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_STAGEDCOMM_H
#define BMRT_STAGEDCOMM_H

#include "bmrt/Comm.h"

#include <memory>

namespace bmrt {

/// `host` wrapped so that its buffers may be `device` memory.
std::unique_ptr<Communicator> stageThroughHost(std::unique_ptr<Communicator> host,
                                               Device &device);

} // namespace bmrt

#endif // BMRT_STAGEDCOMM_H
