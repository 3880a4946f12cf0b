//===- CublasLt.h - row-major strided-batched GEMM on cuBLASLt ---*- C++ -*-===//
//
// Private to runtime/cuda. Every CUDA GEMM (matmul, gemm, einsum,
// convolution) is one call of `gemm` below: row-major operands as the
// kernels store them, a batch of matrices at fixed strides (0: one matrix
// shared by the whole batch). cuBLASLt is column-major; a row-major
// C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so the wrapper
// hands cuBLASLt B as its A and A as its B.
//
// F32 inputs with CUBLAS_COMPUTE_32F, never TF32: the conformance suite
// compares every kernel against the CPU (OpenBLAS sgemm) at fp32
// tolerances, which TF32's 10-bit mantissa would miss by orders of
// magnitude.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_CUBLASLT_H
#define BMRT_CUDA_CUBLASLT_H

#include "bmrt/Gemm.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace bmrt::cuda {

/// The shape of one strided batch of row-major GEMMs (bmrt/Gemm.h).
using GemmShape = bmrt::GemmShape;

/// Enqueues the GEMMs on `stream` through the calling thread's cuBLASLt
/// handle for the current device; throws bmrt::Error on any failure.
void gemm(cudaStream_t stream, const GemmShape &shape, float alpha,
          const float *a, const float *b, float beta, float *c);

} // namespace bmrt::cuda

#endif // BMRT_CUDA_CUBLASLT_H
