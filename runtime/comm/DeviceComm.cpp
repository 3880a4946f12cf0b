//===- DeviceComm.cpp - communicators over device memory ------------------===//

#include "bmrt/DeviceComm.h"

#include "bmrt/StagedComm.h"

#ifdef BMRT_HAVE_NCCL
#include "Nccl.h"
#endif

namespace bmrt {

std::unique_ptr<Communicator>
deviceCommunicator(std::unique_ptr<Communicator> host, Device &device) {
  if (device.hostAccessible())
    return host;
#ifdef BMRT_HAVE_NCCL
  if (std::unique_ptr<Communicator> nccl = ncclCommunicator(host, device))
    return nccl;
#endif
  return stageThroughHost(std::move(host), device);
}

} // namespace bmrt
