//===- Gemm.h - the GEMM shapes of matmul and gemm --------------*- C++ -*-===//
//
// Shared by the backends' contraction kernels (runtime/cpu/
// ContractionKernels.cpp on OpenBLAS, runtime/cuda/ContractionKernels.cu on
// cuBLASLt): how numpy's matmul and ONNX's Gemm map onto row-major GEMMs,
// so that both backends multiply the same matrices. Running the GEMMs is
// each backend's own business.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_GEMM_H
#define BMRT_GEMM_H

#include "bmrt/Tensor.h"

#include <cstdint>
#include <vector>

namespace bmrt {

/// One row-major GEMM shape, repeated `batch` times:
/// C_i[m, n] = alpha op(A_i) op(B_i) + beta C_i, op(A) [m, k], op(B) [k, n],
/// leading dims as stored, X_i = X + i * strideX (elements; 0: one matrix
/// shared by the whole batch).
struct GemmShape {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0;

  int64_t work() const { return m * n * k; }
};

/// Row-major strides of `shape` right-aligned to `rank` dims, 0 where the
/// dim is 1 (broadcast) or missing.
std::vector<int64_t> broadcastStrides(const Shape &shape, size_t rank);

/// numpy matmul of a [..., M, K] by b [..., K, N], batch dims broadcast; a
/// rank-1 a is a row [1, K], a rank-1 b a column [K, 1], neither transposed.
struct MatmulPlan {
  GemmShape gemm;                          // one matrix product (batch 1)
  Shape aBatch, bBatch;                    // each operand's batch dims
  Shape batch;                             // out's batch dims, broadcast
  std::vector<int64_t> aStrides, bStrides; // in matrices, 0 where broadcast

  int64_t aCount() const { return numElements(aBatch); }
  int64_t bCount() const { return numElements(bBatch); }
  int64_t count() const { return numElements(batch); }
  /// b shared and a stored [batch, M, K]: the batch is more rows of M.
  bool foldsIntoM() const { return bCount() == 1 && !gemm.transA; }
  /// Where out's batch entry `entry` reads a and b, in elements.
  void offsets(int64_t entry, int64_t &aOffset, int64_t &bOffset) const;
};

MatmulPlan planMatmul(const Shape &a, const Shape &b, bool transA, bool transB);

/// ONNX Gemm on 2-D a and b: out = alpha op(a) op(b) + beta c.
GemmShape planGemm(const Shape &a, const Shape &b, bool transA, bool transB);

} // namespace bmrt

#endif // BMRT_GEMM_H
