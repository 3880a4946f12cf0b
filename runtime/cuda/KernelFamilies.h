//===- KernelFamilies.h - the CUDA kernel table, by family ------*- C++ -*-===//
//
// Private to runtime/cuda. Each kernel file contributes one family: an
// alphabetical array of launchers (bmrt/Backend.h's KernelTable::Entry).
// CudaBackend.cpp merges the families into the backend's one table (and
// stops at start-up on an op two families name), so that each kernel file
// keeps its own list beside its launchers.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_KERNELFAMILIES_H
#define BMRT_CUDA_KERNELFAMILIES_H

#include "bmrt/Backend.h"

#include <cstddef>

namespace bmrt::cuda {

struct KernelFamily {
  const KernelTable::Entry *entries;
  size_t count;
};

/// Alphabetical.
KernelFamily attentionKernels();    // AttentionKernels.cu
KernelFamily contractionKernels();  // ContractionKernels.cu
KernelFamily dataMovementKernels(); // DataMovementKernels.cu
KernelFamily elementwiseKernels();  // ElementwiseKernels.cu
KernelFamily normKernels();         // NormKernels.cu
KernelFamily reductionKernels();    // ReductionKernels.cu

} // namespace bmrt::cuda

#endif // BMRT_CUDA_KERNELFAMILIES_H
