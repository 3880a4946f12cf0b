//===- CudaBackend.h - the CUDA backend's parts -----------------*- C++ -*-===//
//
// Private to runtime/cuda: CudaBackend.cpp assembles these into the backend
// registered as "cuda" (bmrt/Backend.h); the kernel files reach the CUDA
// stream under a bmrt::Stream through cudaStreamOf.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_CUDABACKEND_H
#define BMRT_CUDA_CUDABACKEND_H

#include "bmrt/Backend.h"

#include <cuda_runtime_api.h>

#include <cstddef>

namespace bmrt::cuda {

/// GPUs the driver reports; 0 where there is no driver or no GPU (never
/// throws or prints: available() runs on machines without either).
int deviceCount();

/// The GPU of DeviceOptions::ordinal, or of the process's local rank.
std::unique_ptr<Device> createDevice(const Backend &backend,
                                     const DeviceOptions &options);

/// The CUDA stream of a stream made by a CUDA device; throws bmrt::Error for
/// another backend's stream.
cudaStream_t cudaStreamOf(Stream &stream);

/// Temporary device memory ordered on a stream (cudaMallocAsync): a
/// kernel's flags and partial sums. Freed, in stream order, when it goes out
/// of scope; not counted by the Device, since it is a few bytes.
class StreamBuffer {
public:
  StreamBuffer(size_t bytes, cudaStream_t stream);
  ~StreamBuffer();
  StreamBuffer(const StreamBuffer &) = delete;
  StreamBuffer &operator=(const StreamBuffer &) = delete;
  void *data() const { return pointer; }

private:
  void *pointer = nullptr;
  cudaStream_t stream;
};

/// out = a + b on one shape, F32: the `add` op's kernel
/// (ElementwiseKernels.cu), which the trainer's gradient sums share.
void addF32(cudaStream_t stream, const TensorView &a, const TensorView &b,
            const TensorView &out);

/// The trainer's own kernels (TrainerKernels.cu).
const TrainerKernels &trainerKernels();

} // namespace bmrt::cuda

namespace bmrt {
/// The backend itself (CudaBackend.cpp; core/Backend.cpp lists it).
const Backend &cudaBackend();
} // namespace bmrt

#endif // BMRT_CUDA_CUDABACKEND_H
