//===- ContractionKernelsTest.cpp - matmul, gemm, einsum ------------------===//
//
// Each kernel against a plain reference loop (in double) on small shapes
// that exercise its cases: broadcast batches, rank-1 operands, transposed
// reads, the batch folded into one GEMM, einsum's letter classes. Values
// are O(1) and contractions short (K <= 8), so fp32 results agree with the
// double reference to well under 1e-5; 1e-5 absolute is the tolerance.
//
//===----------------------------------------------------------------------===//

#include "KernelTestSupport.h"

#include <array>
#include <map>
#include <string>

namespace bmrt::test {
namespace {

using cpu::einsum;
using cpu::gemm;
using cpu::matmul;

constexpr double kTolerance = 1e-5;

/// The last two dims swapped (a copy), for checking transA / transB.
Owned transposeLastTwo(const Owned &x) {
  Shape shape = x.view.shape;
  size_t r = shape.size();
  std::swap(shape[r - 2], shape[r - 1]);
  Owned y(DType::F32, shape);
  int64_t rows = x.view.shape[r - 2], cols = x.view.shape[r - 1];
  int64_t batch = x.size() / (rows * cols);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        y.view.f32()[b * rows * cols + j * rows + i] =
            x.view.f32()[b * rows * cols + i * cols + j];
  return y;
}

/// numpy matmul in double, straight from the definition: rank-1 operands
/// promoted and their dim dropped, batch dims broadcast.
Owned referenceMatmul(const Owned &a, const Owned &b) {
  Shape as = a.view.shape, bs = b.view.shape;
  bool vecA = as.size() == 1, vecB = bs.size() == 1;
  if (vecA)
    as.insert(as.begin(), 1);
  if (vecB)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  size_t rank = std::max(aBatch.size(), bBatch.size());
  aBatch.insert(aBatch.begin(), rank - aBatch.size(), 1);
  bBatch.insert(bBatch.begin(), rank - bBatch.size(), 1);
  Shape batch(rank);
  for (size_t d = 0; d < rank; ++d)
    batch[d] = std::max(aBatch[d], bBatch[d]);
  Shape outShape = batch;
  if (!vecA)
    outShape.push_back(m);
  if (!vecB)
    outShape.push_back(n);
  Owned out(DType::F32, outShape);
  for (int64_t bi = 0; bi < numElements(batch); ++bi) {
    int64_t aIndex = 0, bIndex = 0, rest = bi, aStride = 1, bStride = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t coord = rest % batch[d];
      rest /= batch[d];
      aIndex += (aBatch[d] == 1 ? 0 : coord) * aStride;
      bIndex += (bBatch[d] == 1 ? 0 : coord) * bStride;
      aStride *= aBatch[d];
      bStride *= bBatch[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += double(a.view.f32()[aIndex * m * k + i * k + p]) *
                 b.view.f32()[bIndex * k * n + p * n + j];
        out.f((bi * m + i) * n + j) = static_cast<float>(sum);
      }
  }
  return out;
}

Owned runMatmul(const Owned &a, const Owned &b, Shape outShape,
                bool transA = false, bool transB = false) {
  Owned out(DType::F32, std::move(outShape));
  matmul(cpuStream(), a.view, b.view, out.view, transA, transB);
  return out;
}

/// Checks matmul(a, b) against the reference; the reference also gives the
/// output shape.
void checkMatmul(Shape aShape, Shape bShape, Shape expectedShape) {
  Owned a = randomF32(aShape, 1), b = randomF32(bShape, 2);
  Owned want = referenceMatmul(a, b);
  ASSERT_EQ(want.view.shape, expectedShape);
  expectClose(runMatmul(a, b, expectedShape), want);
}

TEST(Matmul, TwoDimensional) { checkMatmul({3, 4}, {4, 5}, {3, 5}); }

TEST(Matmul, BroadcastsBatchDims) {
  checkMatmul({2, 1, 3, 4}, {3, 4, 5}, {2, 3, 3, 5});
  checkMatmul({3, 4}, {2, 4, 5}, {2, 3, 5});
  checkMatmul({1, 3, 4}, {2, 1, 4, 5}, {2, 1, 3, 5});
}

TEST(Matmul, FoldsSharedRightOperandIntoOneGemm) {
  // [B, S, K] x [K, N] and x [1, K, N]: the batch becomes rows of M.
  checkMatmul({2, 3, 4}, {4, 5}, {2, 3, 5});
  checkMatmul({2, 3, 4}, {1, 4, 5}, {2, 3, 5});
}

TEST(Matmul, RankOneOperands) {
  checkMatmul({4}, {4, 5}, {5});
  checkMatmul({3, 4}, {4}, {3});
  checkMatmul({4}, {4}, {});
  checkMatmul({4}, {2, 4, 5}, {2, 5});
  checkMatmul({2, 3, 4}, {4}, {2, 3});
}

TEST(Matmul, TransposedReadsEqualExplicitTransposes) {
  // transA reads a stored [..., K, M]; transB b stored [..., N, K]. Covers
  // the folded path (b without batch) and the batched one.
  struct Case {
    Shape a, b, out;
    bool transA, transB;
  } cases[] = {
      {{4, 3}, {4, 5}, {3, 5}, true, false},
      {{3, 4}, {5, 4}, {3, 5}, false, true},
      {{4, 3}, {5, 4}, {3, 5}, true, true},
      {{2, 3, 4}, {5, 4}, {2, 3, 5}, false, true},
      {{2, 4, 3}, {4, 5}, {2, 3, 5}, true, false},
      {{2, 1, 4, 3}, {3, 5, 4}, {2, 3, 3, 5}, true, true},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(formatShape(c.a) + " x " + formatShape(c.b));
    Owned a = randomF32(c.a, 3), b = randomF32(c.b, 4);
    Owned aPlain = c.transA ? transposeLastTwo(a) : a;
    Owned bPlain = c.transB ? transposeLastTwo(b) : b;
    expectClose(runMatmul(a, b, c.out, c.transA, c.transB),
                runMatmul(aPlain, bPlain, c.out));
    expectClose(runMatmul(a, b, c.out, c.transA, c.transB),
                referenceMatmul(aPlain, bPlain));
  }
}

// The backward rules of matmul are matmuls with transposed reads:
// da = dy b^T, db = a^T dy. Checked against finite differences of the
// forward matmul (bilinear, so the differences are exact up to fp32
// rounding: the default tolerance holds with room to spare).
TEST(Matmul, TransposedMatmulsAreItsGradients) {
  Owned a = randomF32({2, 3, 4}, 5), b = randomF32({2, 4, 5}, 6);
  Owned dy = randomF32({2, 3, 5}, 7);
  Owned da = runMatmul(dy, b, {2, 3, 4}, false, true);
  Owned db = runMatmul(a, dy, {2, 4, 5}, true, false);
  expectGradientMatches(
      [&](const Owned &x) {
        return runMatmul(x, b, {2, 3, 5});
      },
      a, dy, da);
  expectGradientMatches(
      [&](const Owned &x) {
        return runMatmul(a, x, {2, 3, 5});
      },
      b, dy, db);
}

TEST(Matmul, SharedWeightGradientIsOneFoldedGemm) {
  // y [B, S, N] = x [B, S, K] w [K, N]: dw = x^T dy with the batch folded
  // into the contraction, i.e. a [B*S, K]^T [B*S, N] GEMM on reshaped views.
  Owned x = randomF32({2, 3, 4}, 8), w = randomF32({4, 5}, 9);
  Owned dy = randomF32({2, 3, 5}, 10);
  Owned xFlat = x, dyFlat = dy;
  xFlat.view.shape = {6, 4};
  dyFlat.view.shape = {6, 5};
  Owned dw = runMatmul(xFlat, dyFlat, {4, 5}, true, false);
  expectGradientMatches(
      [&](const Owned &v) {
        return runMatmul(x, v, {2, 3, 5});
      },
      w, dy, dw);
}

//===----------------------------------------------------------------------===//
// gemm
//===----------------------------------------------------------------------===//

/// ONNX Gemm in double; c (may be null) broadcast from the right.
Owned referenceGemm(const Owned &a, const Owned &b, const Owned *c, float alpha,
                    float beta, bool transA, bool transB) {
  int64_t m = transA ? a.view.shape[1] : a.view.shape[0];
  int64_t k = transA ? a.view.shape[0] : a.view.shape[1];
  int64_t n = transB ? b.view.shape[0] : b.view.shape[1];
  Owned out(DType::F32, {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        float av = transA ? a.view.f32()[p * m + i] : a.view.f32()[i * k + p];
        float bv = transB ? b.view.f32()[j * k + p] : b.view.f32()[p * n + j];
        sum += double(av) * bv;
      }
      double cv = 0;
      if (c) {
        Shape cs = c->view.shape;
        cs.insert(cs.begin(), 2 - cs.size(), 1);
        cv = c->view.f32()[(cs[0] == 1 ? 0 : i) * cs[1] + (cs[1] == 1 ? 0 : j)];
      }
      out.f(i * n + j) = static_cast<float>(alpha * sum + beta * cv);
    }
  return out;
}

TEST(Gemm, BroadcastsBiasAndScales) {
  Shape cShapes[] = {{}, {5}, {1, 5}, {3, 1}, {3, 5}};
  for (bool transA : {false, true})
    for (bool transB : {false, true})
      for (const Shape &cShape : cShapes) {
        SCOPED_TRACE("transA " + std::to_string(transA) + " transB " +
                     std::to_string(transB) + " c " + formatShape(cShape));
        Owned a = randomF32(transA ? Shape{4, 3} : Shape{3, 4}, 11);
        Owned b = randomF32(transB ? Shape{5, 4} : Shape{4, 5}, 12);
        Owned c = randomF32(cShape, 13);
        Owned out(DType::F32, {3, 5});
        gemm(cpuStream(), a.view, b.view, &c.view, out.view, 0.5f, 2.f, transA,
             transB);
        expectClose(out, referenceGemm(a, b, &c, 0.5f, 2.f, transA, transB));
      }
}

TEST(Gemm, WithoutBiasIgnoresWhatOutHeld) {
  Owned a = randomF32({3, 4}, 14), b = randomF32({4, 5}, 15);
  Owned out = randomF32({3, 5}, 16); // stale contents must not leak in
  gemm(cpuStream(), a.view, b.view, nullptr, out.view, 1.5f, 1.f, false, false);
  expectClose(out, referenceGemm(a, b, nullptr, 1.5f, 0.f, false, false));
}

//===----------------------------------------------------------------------===//
// einsum
//===----------------------------------------------------------------------===//

/// einsum in double by brute force: every assignment of every letter, the
/// product of the inputs added to the output. The output shape comes from
/// the letters' extents.
Owned referenceEinsum(const std::string &equation,
                      const std::vector<const Owned *> &inputs) {
  size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow),
              output = equation.substr(arrow + 2);
  std::vector<std::string> specs;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    specs.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  std::map<char, int64_t> extent;
  for (size_t i = 0; i < specs.size(); ++i)
    for (size_t d = 0; d < specs[i].size(); ++d)
      extent[specs[i][d]] = inputs[i]->view.shape[d];
  std::string letters;
  for (auto &[c, e] : extent)
    letters += c;
  Shape outShape;
  for (char c : output)
    outShape.push_back(extent[c]);
  std::vector<double> sums(numElements(outShape), 0.0);

  std::array<int64_t, 128> at{};
  auto offset = [&](const std::string &spec, const Shape &shape) {
    int64_t o = 0;
    for (size_t d = 0; d < spec.size(); ++d)
      o = o * shape[d] + at[static_cast<unsigned char>(spec[d])];
    return o;
  };
  int64_t total = 1;
  for (char c : letters)
    total *= extent[c];
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (size_t l = letters.size(); l-- > 0;) {
      at[static_cast<unsigned char>(letters[l])] = rest % extent[letters[l]];
      rest /= extent[letters[l]];
    }
    double product = 1;
    for (size_t i = 0; i < specs.size(); ++i)
      product *= inputs[i]->view.f32()[offset(specs[i], inputs[i]->view.shape)];
    sums[offset(output, outShape)] += product;
  }
  Owned out(DType::F32, outShape);
  for (int64_t k = 0; k < out.size(); ++k)
    out.f(k) = static_cast<float>(sums[k]);
  return out;
}

/// Runs einsum on random inputs of the given shapes and compares it with
/// the reference (whose shape the output takes).
void checkEinsum(const std::string &equation, std::vector<Shape> shapes,
                 double tolerance = kTolerance) {
  SCOPED_TRACE(equation);
  std::vector<Owned> inputs;
  for (size_t i = 0; i < shapes.size(); ++i)
    inputs.push_back(randomF32(shapes[i], 20 + i));
  std::vector<const Owned *> pointers;
  std::vector<TensorView> views;
  for (const Owned &in : inputs) {
    pointers.push_back(&in);
    views.push_back(in.view);
  }
  Owned want = referenceEinsum(equation, pointers);
  Owned got = randomF32(want.view.shape, 99); // stale contents
  einsum(cpuStream(), equation, views, got.view);
  expectClose(got, want, tolerance);
}

// The mixture-of-experts dispatch and combine of the models: g groups, s
// tokens, e experts, c capacity, m model width.
TEST(Einsum, ModelDispatch) {
  checkEinsum("gsec,gsm->egcm", {{2, 5, 3, 4}, {2, 5, 6}});
}

TEST(Einsum, ModelCombine) {
  checkEinsum("egcm,gsec->gsm", {{3, 2, 4, 6}, {2, 5, 3, 4}});
}

TEST(Einsum, ModelProjection) {
  checkEinsum("bsm,me->bse", {{2, 5, 6}, {6, 3}});
}

TEST(Einsum, BatchedAndTransposedOutputs) {
  checkEinsum("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}});
  checkEinsum("ik,kj->ji", {{3, 4}, {4, 5}});          // computed as b^T a^T
  checkEinsum("bik,bjk->bij", {{2, 3, 4}, {2, 5, 4}}); // transB read
  checkEinsum("bki,bkj->bij", {{2, 4, 3}, {2, 4, 5}}); // transA read
  checkEinsum("ibk,bkj->jbi", {{3, 2, 4}, {2, 4, 5}}); // permuted output
}

TEST(Einsum, OuterProductsAndFullContractions) {
  checkEinsum("i,j->ij", {{3}, {4}});
  checkEinsum("ij,ij->", {{3, 4}, {3, 4}});
  checkEinsum("ij,ij->ij", {{3, 4}, {3, 4}}); // all batch, no K
}

TEST(Einsum, SumsLettersOfOneInputFirst) {
  // j is in a only and not in the output; l in b only.
  checkEinsum("ijk,kl->i", {{3, 2, 4}, {4, 5}});
  checkEinsum("ij,kl->ik", {{3, 2}, {4, 5}});
}

TEST(Einsum, SingleInput) {
  checkEinsum("ij->ji", {{3, 4}});
  checkEinsum("ijk->ik", {{3, 2, 4}});
  checkEinsum("ijk->", {{3, 2, 4}});
  checkEinsum("ii->i", {{4, 4}});
  checkEinsum("iji->j", {{3, 2, 3}});
  checkEinsum("ijk->kij", {{2, 3, 4}});
}

TEST(Einsum, RepeatedLetterInAPairIsItsDiagonal) {
  checkEinsum("iij,jk->ik", {{3, 3, 4}, {4, 2}});
}

TEST(Einsum, ChainsContractLeftToRight) {
  checkEinsum("ij,jk,kl->il", {{3, 4}, {4, 5}, {5, 2}});
  // b is a batch letter of the first pair only because the third input
  // still needs it.
  checkEinsum("bi,bj,bk->ijk", {{4, 2}, {4, 3}, {4, 2}});
  checkEinsum("ab,bc,cd,de->ae", {{2, 3}, {3, 4}, {4, 2}, {2, 3}});
}

TEST(Einsum, ImplicitOutputIsLettersUsedOnceInOrder) {
  std::vector<Owned> in = {randomF32({3, 4}, 30), randomF32({4, 5}, 31)};
  Owned got(DType::F32, {3, 5});
  einsum(cpuStream(), "ij,jk", {in[0].view, in[1].view}, got.view);
  expectClose(got, referenceEinsum("ij,jk->ik", {&in[0], &in[1]}));
}

TEST(Einsum, LargeEnoughToRunOnManyThreads) {
  // Past the parallel thresholds of the gathers and the batched GEMM.
  // Contractions of 32 and 128 O(1) products: fp32 rounding stays below
  // 128 * 6e-8 * |partial sums| ~ 1e-4.
  checkEinsum("gsec,gsm->egcm", {{4, 32, 8, 16}, {4, 32, 64}}, 1e-4);
  checkEinsum("egcm,gsec->gsm", {{8, 4, 16, 64}, {4, 32, 8, 16}}, 1e-4);
}

} // namespace
} // namespace bmrt::test
