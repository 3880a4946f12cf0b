//===- DeviceComm.h - communicators over device memory ----------*- C++ -*-===//
//
// A group's communicator as the runtime's collectives use it: the World's
// host communicator (MPI, or the single-process one) where the host can
// address the device's memory (the CPU), otherwise one that moves device
// memory. On GPUs that is NCCL's (runtime/comm/NcclComm.cpp, issue 23)
// where it can run: the CUDA backend was built with nccl.h, libnccl.so.2
// loads, BMRT_NCCL is not 0, and each rank of the group has a GPU of its
// own (NCCL refuses two ranks on one). Otherwise the collectives stage
// through host memory (StagedComm.h). Every rank of the group takes the
// same choice.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_DEVICECOMM_H
#define BMRT_DEVICECOMM_H

#include "bmrt/Comm.h"

#include <memory>

namespace bmrt {

/// `host` made into a communicator over `device` memory. Collective over
/// the group: every member calls it.
std::unique_ptr<Communicator>
deviceCommunicator(std::unique_ptr<Communicator> host, Device &device);

} // namespace bmrt

#endif // BMRT_DEVICECOMM_H
