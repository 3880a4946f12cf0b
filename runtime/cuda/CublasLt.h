//===- CublasLt.h - row-major strided-batched GEMM on cuBLASLt ---*- C++ -*-===//
//
// Private to runtime/cuda. Every CUDA GEMM (matmul, gemm, einsum,
// convolution) is one call of `gemm` below: row-major operands as the
// kernels store them, a batch of matrices at fixed strides (0: one matrix
// shared by the whole batch). cuBLASLt is column-major; a row-major
// C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so the wrapper
// hands cuBLASLt B as its A and A as its B.
//
// Operands and results are fp32 in memory, always. What the GEMM reads
// them in is the device's ContractionPrecision (bmrt/Device.h):
//  - F32: fp32 inputs with CUBLAS_COMPUTE_32F, never TF32: the conformance
//    suite compares every kernel against the CPU (OpenBLAS sgemm) at fp32
//    tolerances, which TF32's 10-bit mantissa would miss by orders of
//    magnitude.
//  - BF16 (the plan's bf16): A and B are rounded to bf16 (round to nearest
//    even, __float2bfloat16_rn) into a stream-ordered temporary, packed
//    densely with rows padded to 16 bytes, and cuBLASLt multiplies them
//    with A/B CUDA_R_16BF, C/D CUDA_R_32F, CUBLAS_COMPUTE_32F and fp32
//    alpha/beta (a combination of cuBLASLt's supported-types table): bf16
//    tensor cores, fp32 accumulation, an fp32 result. The bf16 copies live
//    for the call only; nothing bf16 outlives it.
//  - F16 is refused (the device is never created with it: it needs loss
//    scaling, which the trainer does not have yet).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_CUBLASLT_H
#define BMRT_CUDA_CUBLASLT_H

#include "bmrt/Device.h"
#include "bmrt/Gemm.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace bmrt::cuda {

/// The shape of one strided batch of row-major GEMMs (bmrt/Gemm.h).
using GemmShape = bmrt::GemmShape;

/// Enqueues the GEMMs on `stream` through the calling thread's cuBLASLt
/// handle for the current device, reading a and b in `precision`; throws
/// bmrt::Error on any failure.
void gemm(cudaStream_t stream, const GemmShape &shape, float alpha,
          const float *a, const float *b, float beta, float *c,
          ContractionPrecision precision);

/// One operand of a GEMM as stored: `batch` matrices of rows x cols, row
/// i of matrix j at data + j * stride + i * ld (stride 0: one matrix).
struct StoredMatrix {
  const float *data;
  int64_t batch, stride, rows, cols, ld;
};

/// Copies `m` into `out` as bf16 (round to nearest even), densely: matrix
/// j's row i at out + j * rows * outLd + i * outLd, outLd >= cols.
/// (Bf16Pack.cu; private to CublasLt.cpp.)
void packBf16(cudaStream_t stream, const StoredMatrix &m, void *out,
              int64_t outLd);

} // namespace bmrt::cuda

#endif // BMRT_CUDA_CUBLASLT_H
