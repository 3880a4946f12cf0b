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

#include <cuda_runtime.h>

#include <cstdint>

namespace bmrt::cuda {

/// One row-major GEMM shape, repeated `batch` times:
/// C_i[m, n] = alpha op(A_i) op(B_i) + beta C_i, op(A) [m, k], op(B) [k, n],
/// leading dims as stored, X_i = X + i * strideX (elements).
struct GemmShape {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0;
};

/// Enqueues the GEMMs on `stream` through the calling thread's cuBLASLt
/// handle for the current device; throws bmrt::Error on any failure.
void gemm(cudaStream_t stream, const GemmShape &shape, float alpha,
          const float *a, const float *b, float beta, float *c);

} // namespace bmrt::cuda

#endif // BMRT_CUDA_CUBLASLT_H
