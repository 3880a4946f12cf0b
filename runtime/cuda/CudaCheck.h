//===- CudaCheck.h - CUDA API errors as bmrt::Error -------------*- C++ -*-===//
//
// Private to runtime/cuda. Every CUDA runtime call goes through
// BMRT_CUDA_CHECK, so a failure reaches the user as one line naming the call
// and CUDA's own words for it (bmrt/Error.h), raised where the call is.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_CUDACHECK_H
#define BMRT_CUDA_CUDACHECK_H

#include "bmrt/Error.h"

#include <cuda_runtime_api.h>

#include <string>

namespace bmrt::cuda {

inline void checkCuda(cudaError_t status, const char *call, const char *file,
                      int line) {
  if (status == cudaSuccess)
    return;
  // Clears the error a failed launch leaves behind (sticky errors stay).
  (void)cudaGetLastError();
  throw Error(std::string(call) + " failed: " + cudaGetErrorString(status),
              file, line);
}

} // namespace bmrt::cuda

/// Throws bmrt::Error naming CALL unless it returns cudaSuccess.
#define BMRT_CUDA_CHECK(call)                                                  \
  ::bmrt::cuda::checkCuda((call), #call, __FILE__, __LINE__)

/// After a kernel launch (KERNEL, a string literal, names it): a bad
/// configuration shows up here. Errors while the kernel runs surface at the
/// next synchronisation.
#define BMRT_CUDA_CHECK_LAUNCH(kernel)                                         \
  ::bmrt::cuda::checkCuda(cudaGetLastError(), "launch of " kernel, __FILE__,   \
                          __LINE__)

#endif // BMRT_CUDA_CUDACHECK_H
