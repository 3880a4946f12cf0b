//===- HostDevice.h - code that compiles for the host and a GPU -*- C++ -*-===//
//
// For the few shared helpers (bmrt/Window.h, bmrt/ElementwiseOps.h) that
// CUDA kernels call as well as host code: __host__ __device__ under nvcc,
// nothing for the host compiler.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_HOSTDEVICE_H
#define BMRT_HOSTDEVICE_H

#if defined(__CUDACC__)
#define BMRT_HOST_DEVICE __host__ __device__
#else
#define BMRT_HOST_DEVICE
#endif

#endif // BMRT_HOSTDEVICE_H
