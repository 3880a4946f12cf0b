//===- ContractionKernels.cpp - matmul, gemm and einsum through OpenBLAS --===//
//
// Every contraction ends in cblas_sgemm. matmul maps numpy's broadcast batch
// onto a loop of GEMMs (or one GEMM when the batch folds into M); einsum
// gathers each pair of operands into [batch, M, K] / [batch, K, N] (skipping
// the copy when an operand is already laid out that way) and runs the same
// batched GEMM.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Einsum.h"
#include "bmrt/Error.h"
#include "bmrt/Gemm.h"
#include "runtime/cpu/Kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>

namespace bmrt::cpu {
namespace {

/// Elements a loop must touch before it forks an OpenMP team: below this
/// the fork costs more than the copy.
constexpr int64_t kParallelWork = 1 << 15;

/// OpenBLAS (interface/gemm.c) runs a GEMM with m * n * k below
/// SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD = 65536 * 4 on the calling
/// thread. A batch of such GEMMs is worth spreading over OpenMP threads
/// ourselves; bigger ones are threaded by OpenBLAS and must not be nested
/// inside our threads (that would oversubscribe the cores).
constexpr int64_t kBlasSingleThreadWork = 65536 * 4;

blasint toBlas(int64_t value) {
  BMRT_CHECK(value <= INT_MAX, "GEMM dimension " + std::to_string(value) +
                                   " exceeds OpenBLAS's 32-bit indices");
  return static_cast<blasint>(value);
}

void sgemm(const GemmShape &g, float alpha, const float *a, const float *b,
           float beta, float *c) {
  if (g.m == 0 || g.n == 0)
    return;
  if (g.k == 0) {
    // An empty contraction: BLAS would reject lda = 0; the product is 0.
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        float &cij = c[i * g.ldc + j];
        cij = beta == 0.f ? 0.f : beta * cij;
      }
    return;
  }
  // BLAS wants every leading dimension >= 1 even where it is never stepped.
  auto ld = [](int64_t v) { return toBlas(std::max<int64_t>(v, 1)); };
  cblas_sgemm(CblasRowMajor, g.transA ? CblasTrans : CblasNoTrans,
              g.transB ? CblasTrans : CblasNoTrans, toBlas(g.m), toBlas(g.n),
              toBlas(g.k), alpha, a, ld(g.lda), b, ld(g.ldb), beta, c,
              ld(g.ldc));
}

/// Runs `count` GEMMs of one shape; `offsets(i, aOff, bOff, cOff)` places
/// the i-th. Small GEMMs run side by side on OpenMP threads (each then stays
/// on its own thread inside OpenBLAS); large ones run in turn, each threaded
/// by OpenBLAS.
template <typename Offsets>
void gemmBatch(const GemmShape &g, int64_t count, const float *a,
               const float *b, float *c, Offsets offsets) {
  bool spread = count > 1 && g.work() < kBlasSingleThreadWork &&
                count * g.work() >= kParallelWork && !omp_in_parallel();
#pragma omp parallel for if (spread) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    int64_t aOff, bOff, cOff;
    offsets(i, aOff, bOff, cOff);
    sgemm(g, 1.f, a + aOff, b + bOff, 0.f, c + cOff);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

void matmul(Stream &, const TensorView &a, const TensorView &b,
            const TensorView &out, bool transA, bool transB) {
  MatmulPlan plan = planMatmul(a.shape, b.shape, transA, transB);
  const GemmShape &g = plan.gemm;
  const float *aData = a.f32(), *bData = b.f32();
  float *cData = out.f32();
  // One large GEMM where the batch folds into M (what OpenBLAS does best).
  if (plan.foldsIntoM()) {
    GemmShape folded = g;
    folded.m = g.m * plan.aCount();
    sgemm(folded, 1.f, aData, bData, 0.f, cData);
    return;
  }
  int64_t cMatrix = g.m * g.n;
  gemmBatch(g, plan.count(), aData, bData, cData,
            [&](int64_t i, int64_t &aOff, int64_t &bOff, int64_t &cOff) {
              plan.offsets(i, aOff, bOff);
              cOff = i * cMatrix;
            });
}

//===----------------------------------------------------------------------===//
// gemm
//===----------------------------------------------------------------------===//

void gemm(Stream &, const TensorView &a, const TensorView &b,
          const TensorView *c, const TensorView &out, float alpha, float beta,
          bool transA, bool transB) {
  GemmShape g = planGemm(a.shape, b.shape, transA, transB);
  float *o = out.f32();
  if (!c || beta == 0.f) {
    sgemm(g, alpha, a.f32(), b.f32(), 0.f, o);
    return;
  }
  // Spread c over out (ONNX's unidirectional broadcast), then let the GEMM
  // add alpha op(a) op(b) to beta times it.
  std::vector<int64_t> strides = broadcastStrides(c->shape, 2);
  const float *cData = c->f32();
#pragma omp parallel for if (g.m * g.n >= kParallelWork) schedule(static)
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j)
      o[i * g.n + j] = cData[i * strides[0] + j * strides[1]];
  sgemm(g, alpha, a.f32(), b.f32(), beta, o);
}

//===----------------------------------------------------------------------===//
// einsum
//===----------------------------------------------------------------------===//

namespace {

using einsum::Axis;
using einsum::Extents;
using einsum::Operand;
using einsum::Walk;

/// dst (contiguous, dims `kept` in order) = the sum over `summed` of src.
/// A transpose when nothing is summed; a diagonal when an axis' stride is
/// the sum of two source dims' strides. Sums accumulate in double.
void gatherSum(const float *src, float *dst, const Walk &walk) {
  const std::vector<Axis> &kept = walk.kept, &summed = walk.summed;
  Axis inner = kept.empty() ? Axis{1, 0} : kept.back();
  size_t outerRank = kept.empty() ? 0 : kept.size() - 1;
  int64_t outer = 1;
  for (size_t d = 0; d < outerRank; ++d)
    outer *= kept[d].extent;
  int64_t sumCount = 1;
  for (const Axis &axis : summed)
    sumCount *= axis.extent;
  int64_t work = outer * inner.extent * sumCount;

#pragma omp parallel for if (work >= kParallelWork) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t base = 0, rest = o;
    for (size_t d = outerRank; d-- > 0;) {
      base += (rest % kept[d].extent) * kept[d].stride;
      rest /= kept[d].extent;
    }
    float *row = dst + o * inner.extent;
    if (summed.empty()) {
      for (int64_t j = 0; j < inner.extent; ++j)
        row[j] = src[base + j * inner.stride];
      continue;
    }
    // Walk the summed space with an odometer: letters are a-zA-Z, so at
    // most 52 summed axes.
    std::array<int64_t, 52> index;
    for (int64_t j = 0; j < inner.extent; ++j) {
      index.fill(0);
      int64_t at = base + j * inner.stride;
      double sum = 0;
      for (int64_t s = 0; s < sumCount; ++s) {
        sum += src[at];
        for (size_t d = summed.size(); d-- > 0;) {
          at += summed[d].stride;
          if (++index[d] < summed[d].extent)
            break;
          at -= summed[d].extent * summed[d].stride;
          index[d] = 0;
        }
      }
      row[j] = static_cast<float>(sum);
    }
  }
}

/// Makes `op` the tensor with dims `order`: itself when it already is, else
/// a gather into `storage`.
const float *prepare(const Operand &op, const std::string &order,
                     const Extents &extents, std::vector<float> &storage) {
  if (op.letters == order)
    return op.data;
  storage.resize(einsum::extentOf(order, extents));
  gatherSum(op.data, storage.data(), einsum::walkFor(op, order, extents));
  return storage.data();
}

/// The result of contracting a pair: `letters` of `data` (in `storage`
/// unless written straight to the kernel's output).
struct Contracted {
  Operand operand;
  std::vector<float> storage;
};

/// Contracts a and b into a tensor over the letters in `keep` that they
/// hold (einsum::planPair). With `finalOut`, the result is the einsum's
/// output with letters `keep` and goes there.
void contractPair(const Operand &a, const Operand &b, const std::string &keep,
                  const Extents &extents, float *finalOut, Contracted &result) {
  bool final = finalOut != nullptr;
  einsum::PairPlan p =
      einsum::planPair(a.letters, b.letters, keep, final, extents);
  const Operand &left = p.swap ? b : a, &right = p.swap ? a : b;
  GemmShape g = einsum::gemmOf(p, extents);
  std::vector<float> leftStorage, rightStorage;
  const float *leftData =
      p.transLeft ? left.data
                  : prepare(left, p.leftOrder(), extents, leftStorage);
  const float *rightData =
      p.transRight ? right.data
                   : prepare(right, p.rightOrder(), extents, rightStorage);

  std::string resultLetters = p.result();
  bool inPlace = final && resultLetters == keep;
  float *resultData = finalOut;
  if (!inPlace) {
    result.storage.resize(einsum::extentOf(resultLetters, extents));
    resultData = result.storage.data();
  }
  gemmBatch(g, g.batch, leftData, rightData, resultData,
            [&](int64_t i, int64_t &aOff, int64_t &bOff, int64_t &cOff) {
              aOff = i * g.strideA;
              bOff = i * g.strideB;
              cOff = i * g.strideC;
            });

  result.operand.letters = resultLetters;
  result.operand.shape.clear();
  for (char c : resultLetters)
    result.operand.shape.push_back(extents[static_cast<unsigned char>(c)]);
  result.operand.data = resultData;
  // The output interleaves the groups: one more permuting copy.
  if (final && !inPlace)
    gatherSum(resultData, finalOut,
              einsum::walkFor(result.operand, keep, extents));
}

} // namespace

void einsum(Stream &, const std::string &equation,
            const std::vector<TensorView> &inputs, const TensorView &out) {
  einsum::Equation eq = einsum::parseEquation(equation, inputs.size());
  Extents extents;
  std::vector<Operand> operands =
      einsum::bindOperands(equation, eq, inputs, extents);

  // Transpose, diagonal and sums: one strided walk.
  if (operands.size() == 1)
    return gatherSum(operands[0].data, out.f32(),
                     einsum::walkFor(operands[0], eq.output, extents));

  // Left to right: the running result keeps the letters the output or a
  // later input still needs.
  Contracted running[2];
  Operand acc = operands[0];
  for (size_t i = 1; i < operands.size(); ++i) {
    bool last = i + 1 == operands.size();
    Contracted &next = running[i % 2];
    contractPair(acc, operands[i], einsum::keptAfter(eq, i), extents,
                 last ? out.f32() : nullptr, next);
    acc = next.operand;
  }
}

} // namespace bmrt::cpu
