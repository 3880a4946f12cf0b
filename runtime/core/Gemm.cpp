//===- Gemm.cpp - the GEMM shapes of matmul and gemm ----------------------===//

#include "bmrt/Gemm.h"

#include <algorithm>

namespace bmrt {
namespace {

/// The dims of `batch` right-aligned to `rank`, 1 where missing.
int64_t alignedDim(const Shape &batch, size_t rank, size_t d) {
  return d + batch.size() >= rank ? batch[d + batch.size() - rank] : 1;
}

/// a's side of the product: M, K and lda; its batch dims.
void planA(const Shape &a, bool transA, GemmShape &g, Shape &batch) {
  if (a.size() == 1) {
    g.transA = false;
    g.m = 1;
    g.k = a[0];
    g.lda = g.k;
    return;
  }
  batch.assign(a.begin(), a.end() - 2);
  int64_t rows = a[a.size() - 2], cols = a[a.size() - 1];
  g.transA = transA;
  g.m = transA ? cols : rows;
  g.k = transA ? rows : cols;
  g.lda = cols;
}

/// b's side of the product: N and ldb; its batch dims.
void planB(const Shape &b, bool transB, GemmShape &g, Shape &batch) {
  if (b.size() == 1) {
    g.transB = false;
    g.n = 1;
    g.ldb = 1;
    return;
  }
  batch.assign(b.begin(), b.end() - 2);
  int64_t rows = b[b.size() - 2], cols = b[b.size() - 1];
  g.transB = transB;
  g.n = transB ? rows : cols;
  g.ldb = cols;
}

} // namespace

std::vector<int64_t> broadcastStrides(const Shape &shape, size_t rank) {
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    size_t dim = shape.size() - 1 - i, at = rank - 1 - i;
    strides[at] = shape[dim] == 1 ? 0 : stride;
    stride *= shape[dim];
  }
  return strides;
}

void MatmulPlan::offsets(int64_t entry, int64_t &aOffset,
                         int64_t &bOffset) const {
  int64_t aIndex = 0, bIndex = 0, rest = entry;
  for (size_t d = batch.size(); d-- > 0;) {
    int64_t coord = rest % batch[d];
    rest /= batch[d];
    aIndex += coord * aStrides[d];
    bIndex += coord * bStrides[d];
  }
  aOffset = aIndex * gemm.m * gemm.k;
  bOffset = bIndex * gemm.k * gemm.n;
}

MatmulPlan planMatmul(const Shape &a, const Shape &b, bool transA,
                      bool transB) {
  MatmulPlan p;
  planA(a, transA, p.gemm, p.aBatch);
  planB(b, transB, p.gemm, p.bBatch);
  p.gemm.ldc = p.gemm.n;
  size_t rank = std::max(p.aBatch.size(), p.bBatch.size());
  p.batch.assign(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    int64_t da = alignedDim(p.aBatch, rank, d);
    int64_t db = alignedDim(p.bBatch, rank, d);
    p.batch[d] = da == 1 ? db : da;
  }
  p.aStrides = broadcastStrides(p.aBatch, rank);
  p.bStrides = broadcastStrides(p.bBatch, rank);
  return p;
}

GemmShape planGemm(const Shape &a, const Shape &b, bool transA, bool transB) {
  GemmShape g;
  g.transA = transA;
  g.transB = transB;
  g.m = transA ? a[1] : a[0];
  g.k = transA ? a[0] : a[1];
  g.n = transB ? b[0] : b[1];
  g.lda = a[1];
  g.ldb = b[1];
  g.ldc = g.n;
  return g;
}

} // namespace bmrt
