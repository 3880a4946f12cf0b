//===- AttentionKernels.cpp - fused attention through OpenBLAS ------------===//
//
// The CPU's attention is the numerical reference for every backend: per
// leading index the scores are one cblas_sgemm into a scratch [s, t] block,
// masked and normalised row by row as bm.softmax does, then one more GEMM
// with v. The scratch lives only for that index, so the step never holds
// the scores as a tensor. The gradient recomputes them the same way.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Attention.h"
#include "bmrt/Error.h"
#include "runtime/cpu/Kernels.h"

#include <cblas.h>
#include <omp.h>

#include <climits>
#include <cmath>
#include <limits>
#include <vector>

namespace bmrt::cpu {
namespace {

blasint blasDim(int64_t value) {
  BMRT_CHECK(value <= INT_MAX, "attention dimension " + std::to_string(value) +
                                   " exceeds OpenBLAS's 32-bit indices");
  return static_cast<blasint>(std::max<int64_t>(value, 1));
}

/// c [m, n] = alpha * op(a) op(b), row-major; op transposes where asked.
/// lda, ldb are the stored row lengths of a and b.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float *c) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::fill(c, c + m * n, 0.f);
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, blasDim(m), blasDim(n),
              blasDim(k), alpha, a, blasDim(lda), b, blasDim(ldb), 0.f, c,
              blasDim(n));
}

/// One leading index's operands.
struct Slice {
  const float *q, *kt, *v;
};

/// p [s, t] = softmax over each query's visible keys of scale * q kt, 0 at
/// keys it does not see (and a query that sees none is all 0).
void probabilities(const AttentionShape &a, const Slice &x, float scale,
                   float *p) {
  gemm(false, false, a.s, a.t, a.d, scale, x.q, a.d, x.kt, a.t, p);
  for (int64_t i = 0; i < a.s; ++i) {
    float *row = p + i * a.t;
    int64_t n = a.visibleKeys(i);
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j)
      max = std::max(max, row[j]);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    for (int64_t j = 0; j < n; ++j)
      row[j] /= sum;
    std::fill(row + n, row + a.t, 0.f);
  }
}

Slice sliceAt(const AttentionShape &a, const TensorView &q,
              const TensorView &kt, const TensorView &v, int64_t b) {
  return {q.f32() + b * a.s * a.d, kt.f32() + b * a.d * a.t,
          v.f32() + b * a.t * a.e};
}

/// Leading indices run side by side unless one is big enough for OpenBLAS
/// to thread its GEMMs (nesting would oversubscribe the cores).
bool spreadOverThreads(const AttentionShape &a) {
  constexpr int64_t kBlasSingleThreadWork = 65536 * 4;
  return a.batch > 1 &&
         a.s * a.t * std::max(a.d, a.e) < kBlasSingleThreadWork &&
         !omp_in_parallel();
}

/// The geometry, with the queries where `positions` places them (which
/// must not decrease: each query's keys are a prefix of the next one's).
AttentionShape placed(const TensorView &q, const TensorView &kt,
                      const TensorView &v, bool causal,
                      const TensorView *positions) {
  AttentionShape a = attentionShape(q.shape, kt.shape, v.shape, causal);
  if (!positions)
    return a;
  a.positions = positions->i64();
  BMRT_CHECK(std::is_sorted(a.positions, a.positions + a.s),
             "attention: the queries' positions decrease");
  return a;
}

} // namespace

void attention(Stream &, const TensorView &q, const TensorView &kt,
               const TensorView &v, const TensorView &out, float scale,
               bool causal, const TensorView *positions) {
  AttentionShape a = placed(q, kt, v, causal, positions);
#pragma omp parallel for if (spreadOverThreads(a)) schedule(static)
  for (int64_t b = 0; b < a.batch; ++b) {
    std::vector<float> p(a.s * a.t);
    Slice x = sliceAt(a, q, kt, v, b);
    probabilities(a, x, scale, p.data());
    gemm(false, false, a.s, a.e, a.t, 1.f, p.data(), a.t, x.v, a.e,
         out.f32() + b * a.s * a.e);
  }
}

void attentionGrad(Stream &, const TensorView &q, const TensorView &kt,
                   const TensorView &v, const TensorView &,
                   const TensorView &dout, const TensorView &dq,
                   const TensorView &dkt, const TensorView &dv, float scale,
                   bool causal, const TensorView *positions) {
  AttentionShape a = placed(q, kt, v, causal, positions);
#pragma omp parallel for if (spreadOverThreads(a)) schedule(static)
  for (int64_t b = 0; b < a.batch; ++b) {
    std::vector<float> p(a.s * a.t), dp(a.s * a.t);
    Slice x = sliceAt(a, q, kt, v, b);
    const float *dy = dout.f32() + b * a.s * a.e;
    probabilities(a, x, scale, p.data());
    // dv = p^T dy; dp = dy v^T.
    gemm(true, false, a.t, a.e, a.s, 1.f, p.data(), a.t, dy, a.e,
         dv.f32() + b * a.t * a.e);
    gemm(false, true, a.s, a.t, a.e, 1.f, dy, a.e, x.v, a.e, dp.data());
    // ds = p * (dp - sum_j p dp), the softmax's gradient (as softmax_grad);
    // masked keys have p = 0 and so ds = 0.
    for (int64_t i = 0; i < a.s; ++i) {
      float *pRow = p.data() + i * a.t, *dRow = dp.data() + i * a.t;
      float dot = 0;
      for (int64_t j = 0; j < a.t; ++j)
        dot += pRow[j] * dRow[j];
      for (int64_t j = 0; j < a.t; ++j)
        dRow[j] = pRow[j] * (dRow[j] - dot);
    }
    // dq = scale ds kt^T; dkt = scale q^T ds.
    gemm(false, true, a.s, a.d, a.t, scale, dp.data(), a.t, x.kt, a.t,
         dq.f32() + b * a.s * a.d);
    gemm(true, false, a.d, a.t, a.s, scale, x.q, a.d, dp.data(), a.t,
         dkt.f32() + b * a.d * a.t);
  }
}

} // namespace bmrt::cpu
