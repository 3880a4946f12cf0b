//===- Nccl.h - NCCL's communicators, where they can run --------*- C++ -*-===//
//
// Private to runtime/comm: DeviceComm.cpp asks for an NCCL communicator;
// NcclComm.cpp (built with the CUDA backend where nccl.h is found) makes
// one.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_COMM_NCCL_H
#define BMRT_COMM_NCCL_H

#include "bmrt/Comm.h"

#include <memory>

namespace bmrt {

/// An NCCL communicator over the ranks of `host`, bootstrapped through it
/// (the unique id) and keeping it for barriers and host-memory buffers;
/// null, leaving `host` alone, where NCCL cannot run this group (see
/// DeviceComm.h). Collective over the group.
std::unique_ptr<Communicator>
ncclCommunicator(std::unique_ptr<Communicator> &host, Device &device);

} // namespace bmrt

#endif // BMRT_COMM_NCCL_H
