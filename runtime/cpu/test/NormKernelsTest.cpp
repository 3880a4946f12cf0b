//===- NormKernelsTest.cpp - layer, RMS and batch normalisation -----------===//
//
// Forward kernels against reference loops in double, including parameters
// that broadcast onto part of the normalised block and a row whose mean
// dwarfs its spread; every gradient (dx and each parameter's) against
// central finite differences; the multi-threaded paths (per-thread partial
// sums of the parameter gradients) against the same formulas in double.
//
// Tolerances: forward outputs are O(1) and computed from double statistics,
// so 1e-5 absolute. The normalisations are smooth; with h = 1e-2, unit-scale
// inputs and rows of >= 4 elements (standard deviation >~ 0.3), central
// differences are off by h^2/6 * |f'''| <~ 1e-3 relative at worst, inside
// the default 2e-3. batchNorm is affine in x, scale and bias: differences
// exact up to fp32 rounding.
//
//===----------------------------------------------------------------------===//

#include "KernelTestSupport.h"

namespace bmrt::test {
namespace {

constexpr double kTolerance = 1e-5;

/// The element of a parameter of shape `param` that numpy broadcasting puts
/// at element j of a block of shape `block` (right-aligned).
int64_t broadcastAt(int64_t j, const Shape &block, const Shape &param) {
  int64_t at = 0, stride = 1;
  for (size_t i = 0; i < block.size(); ++i) {
    int64_t coord = j % block[block.size() - 1 - i];
    j /= block[block.size() - 1 - i];
    if (i < param.size()) {
      int64_t extent = param[param.size() - 1 - i];
      at += (extent == 1 ? 0 : coord) * stride;
      stride *= extent;
    }
  }
  return at;
}

struct NormCase {
  Shape x;
  int64_t axis;
  Shape scale, bias; // bias empty: none
};

/// rows x cols of x split at the axis, and the normalised block's shape.
void splitRows(const NormCase &c, int64_t &rows, int64_t &cols, Shape &block) {
  block.assign(c.x.begin() + c.axis, c.x.end());
  cols = numElements(block);
  rows = numElements(c.x) / cols;
}

Owned referenceLayerNorm(const NormCase &c, const Owned &x, const Owned &scale,
                         const Owned *bias, float epsilon) {
  int64_t rows, cols;
  Shape block;
  splitRows(c, rows, cols, block);
  Owned y(DType::F32, c.x);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.view.f32() + r * cols;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j)
      mean += xr[j];
    mean /= cols;
    for (int64_t j = 0; j < cols; ++j)
      var += (xr[j] - mean) * (xr[j] - mean);
    var /= cols;
    for (int64_t j = 0; j < cols; ++j) {
      double v = (xr[j] - mean) / std::sqrt(var + epsilon) *
                 scale.view.f32()[broadcastAt(j, block, scale.view.shape)];
      if (bias)
        v += bias->view.f32()[broadcastAt(j, block, bias->view.shape)];
      y.f(r * cols + j) = static_cast<float>(v);
    }
  }
  return y;
}

Owned runLayerNorm(const NormCase &c, const Owned &x, const Owned &scale,
                   const Owned *bias, float epsilon) {
  Owned y = randomF32(c.x, 90);
  cpu::layerNorm(cpuStream(), x.view, scale.view, bias ? &bias->view : nullptr,
                 y.view, c.axis, epsilon);
  return y;
}

std::vector<NormCase> layerNormCases() {
  return {
      {{2, 3, 8}, 2, {8}, {8}},
      {{2, 3, 4}, 1, {3, 4}, {4}},   // bias broadcast over the block's dim 0
      {{2, 3, 4}, 1, {4}, {3, 1}},   // scale and bias broadcast differently
      {{2, 3, 4}, 1, {1, 3, 4}, {}}, // a leading 1; no bias
      {{3, 5}, 0, {3, 5}, {5}},      // one row: the whole tensor
  };
}

std::string describe(const NormCase &c) {
  return "x " + formatShape(c.x) + " axis " + std::to_string(c.axis) +
         " scale " + formatShape(c.scale) + " bias " + formatShape(c.bias);
}

TEST(LayerNorm, MatchesReference) {
  for (const NormCase &c : layerNormCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 1), scale = randomF32(c.scale, 2, 0.5f, 1.5f);
    Owned bias = randomF32(c.bias, 3);
    const Owned *b = c.bias.empty() ? nullptr : &bias;
    expectClose(runLayerNorm(c, x, scale, b, 1e-5f),
                referenceLayerNorm(c, x, scale, b, 1e-5f));
  }
}

TEST(LayerNorm, StableForALargeMean) {
  // Mean 1000, spread 0.5: E[x^2] - E[x]^2 in fp32 would lose every digit
  // (1e6 with an ulp of 0.06 against a variance of 0.08). The
  // reference works in double from the same fp32 inputs; 1e-4 allows for
  // fp32 outputs of values up to ~2.
  NormCase c{{4, 64}, 1, {64}, {}};
  Owned x = randomF32(c.x, 4, 999.5f, 1000.5f);
  Owned scale = randomF32(c.scale, 5, 0.5f, 1.5f);
  expectClose(runLayerNorm(c, x, scale, nullptr, 1e-5f),
              referenceLayerNorm(c, x, scale, nullptr, 1e-5f), 1e-4);
}

TEST(LayerNorm, GradsMatchFiniteDifferences) {
  const float eps = 1e-5f;
  for (const NormCase &c : layerNormCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 6), scale = randomF32(c.scale, 7, 0.5f, 1.5f);
    Owned bias = randomF32(c.bias, 8);
    bool hasBias = !c.bias.empty();
    const Owned *b = hasBias ? &bias : nullptr;
    Owned dy = randomF32(c.x, 9);
    Owned dx = randomF32(c.x, 10), dscale = randomF32(c.scale, 11);
    Owned dbias = randomF32(c.bias, 12);
    cpu::layerNormGrad(cpuStream(), x.view, scale.view, dy.view, dx.view,
                       dscale.view, hasBias ? &dbias.view : nullptr, c.axis,
                       eps);
    expectGradientMatches(
        [&](const Owned &v) { return runLayerNorm(c, v, scale, b, eps); }, x,
        dy, dx);
    expectGradientMatches(
        [&](const Owned &v) { return runLayerNorm(c, x, v, b, eps); }, scale,
        dy, dscale);
    if (hasBias)
      expectGradientMatches(
          [&](const Owned &v) { return runLayerNorm(c, x, scale, &v, eps); },
          bias, dy, dbias);
  }
}

/// The textbook layer-norm gradients in double, for shapes too large for
/// finite differences.
void referenceLayerNormGrad(const NormCase &c, const Owned &x,
                            const Owned &scale, const Owned &dy, float epsilon,
                            Owned &dx, Owned &dscale, Owned &dbias) {
  int64_t rows, cols;
  Shape block;
  splitRows(c, rows, cols, block);
  std::vector<double> ds(dscale.size(), 0.0), db(dbias.size(), 0.0);
  std::vector<double> xhat(cols), g(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.view.f32() + r * cols, *dyr = dy.view.f32() + r * cols;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j)
      mean += xr[j] / double(cols);
    for (int64_t j = 0; j < cols; ++j)
      var += (xr[j] - mean) * (xr[j] - mean) / cols;
    double rstd = 1 / std::sqrt(var + epsilon), meanG = 0, meanGX = 0;
    for (int64_t j = 0; j < cols; ++j) {
      xhat[j] = (xr[j] - mean) * rstd;
      g[j] = dyr[j] *
             double(scale.view.f32()[broadcastAt(j, block, scale.view.shape)]);
      meanG += g[j] / cols;
      meanGX += g[j] * xhat[j] / cols;
      ds[broadcastAt(j, block, dscale.view.shape)] += dyr[j] * xhat[j];
      db[broadcastAt(j, block, dbias.view.shape)] += dyr[j];
    }
    for (int64_t j = 0; j < cols; ++j)
      dx.f(r * cols + j) =
          static_cast<float>(rstd * (g[j] - meanG - xhat[j] * meanGX));
  }
  for (int64_t k = 0; k < dscale.size(); ++k)
    dscale.f(k) = static_cast<float>(ds[k]);
  for (int64_t k = 0; k < dbias.size(); ++k)
    dbias.f(k) = static_cast<float>(db[k]);
}

TEST(LayerNorm, ManyThreadsSumParameterGradsOnce) {
  // 96 rows of 512: past the parallel threshold, so each thread keeps its
  // own partial dscale / dbias. dscale and dbias sum 96 O(1) terms: 1e-4.
  NormCase c{{96, 2, 256}, 1, {256}, {2, 256}};
  Owned x = randomF32(c.x, 13), scale = randomF32(c.scale, 14, 0.5f, 1.5f);
  Owned dy = randomF32(c.x, 15);
  Owned dx(DType::F32, c.x), dscale(DType::F32, c.scale);
  Owned dbias(DType::F32, c.bias);
  cpu::layerNormGrad(cpuStream(), x.view, scale.view, dy.view, dx.view,
                     dscale.view, &dbias.view, c.axis, 1e-5f);
  Owned wantDx(DType::F32, c.x), wantDscale(DType::F32, c.scale);
  Owned wantDbias(DType::F32, c.bias);
  referenceLayerNormGrad(c, x, scale, dy, 1e-5f, wantDx, wantDscale, wantDbias);
  expectClose(dx, wantDx, 1e-4);
  expectClose(dscale, wantDscale, 1e-4);
  expectClose(dbias, wantDbias, 1e-4);
}

//===----------------------------------------------------------------------===//
// RMS normalisation
//===----------------------------------------------------------------------===//

Owned referenceRmsNorm(const NormCase &c, const Owned &x, const Owned &scale,
                       float epsilon) {
  int64_t rows, cols;
  Shape block;
  splitRows(c, rows, cols, block);
  Owned y(DType::F32, c.x);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.view.f32() + r * cols;
    double squares = 0;
    for (int64_t j = 0; j < cols; ++j)
      squares += double(xr[j]) * xr[j];
    double inv = 1 / std::sqrt(squares / cols + epsilon);
    for (int64_t j = 0; j < cols; ++j)
      y.f(r * cols + j) = static_cast<float>(
          xr[j] * inv *
          scale.view.f32()[broadcastAt(j, block, scale.view.shape)]);
  }
  return y;
}

Owned runRmsNorm(const NormCase &c, const Owned &x, const Owned &scale,
                 float epsilon) {
  Owned y = randomF32(c.x, 91);
  cpu::rmsNorm(cpuStream(), x.view, scale.view, y.view, c.axis, epsilon);
  return y;
}

std::vector<NormCase> rmsNormCases() {
  return {
      {{2, 3, 8}, 2, {8}, {}},
      {{2, 3, 4}, 1, {4}, {}},
      {{2, 3, 4}, 1, {3, 4}, {}},
  };
}

TEST(RmsNorm, MatchesReference) {
  for (const NormCase &c : rmsNormCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 20), scale = randomF32(c.scale, 21, 0.5f, 1.5f);
    expectClose(runRmsNorm(c, x, scale, 1e-6f),
                referenceRmsNorm(c, x, scale, 1e-6f));
  }
}

TEST(RmsNorm, GradsMatchFiniteDifferences) {
  const float eps = 1e-6f;
  for (const NormCase &c : rmsNormCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 22), scale = randomF32(c.scale, 23, 0.5f, 1.5f);
    Owned dy = randomF32(c.x, 24);
    Owned dx = randomF32(c.x, 25), dscale = randomF32(c.scale, 26);
    cpu::rmsNormGrad(cpuStream(), x.view, scale.view, dy.view, dx.view,
                     dscale.view, c.axis, eps);
    expectGradientMatches(
        [&](const Owned &v) { return runRmsNorm(c, v, scale, eps); }, x, dy,
        dx);
    expectGradientMatches(
        [&](const Owned &v) { return runRmsNorm(c, x, v, eps); }, scale, dy,
        dscale);
  }
}

TEST(RmsNorm, ManyThreadsSumScaleGradOnce) {
  // Checked against rmsNormGrad's formula in double; the finite-difference
  // test above checks the formula.
  NormCase c{{128, 512}, 1, {512}, {}};
  const float eps = 1e-6f;
  Owned x = randomF32(c.x, 27), scale = randomF32(c.scale, 28, 0.5f, 1.5f);
  Owned dy = randomF32(c.x, 29);
  Owned dx(DType::F32, c.x), dscale(DType::F32, c.scale);
  cpu::rmsNormGrad(cpuStream(), x.view, scale.view, dy.view, dx.view,
                   dscale.view, c.axis, eps);
  std::vector<double> ds(512, 0.0);
  for (int64_t r = 0; r < 128; ++r) {
    const float *xr = x.view.f32() + r * 512, *dyr = dy.view.f32() + r * 512;
    double squares = 0, dot = 0;
    for (int64_t j = 0; j < 512; ++j) {
      squares += double(xr[j]) * xr[j];
      dot += double(dyr[j]) * scale.view.f32()[j] * xr[j];
    }
    double inv = 1 / std::sqrt(squares / 512 + eps);
    for (int64_t j = 0; j < 512; ++j) {
      double want = inv * dyr[j] * scale.view.f32()[j] -
                    xr[j] * inv * inv * inv * dot / 512;
      EXPECT_NEAR(dx.view.f32()[r * 512 + j], want, 1e-4);
      ds[j] += double(dyr[j]) * xr[j] * inv;
    }
  }
  for (int64_t j = 0; j < 512; ++j)
    EXPECT_NEAR(dscale.view.f32()[j], ds[j], 1e-4);
}

//===----------------------------------------------------------------------===//
// Batch normalisation
//===----------------------------------------------------------------------===//

/// scale, bias, mean and a positive variance, [C].
struct BatchNormParams {
  Owned scale, bias, mean, variance;
  explicit BatchNormParams(int64_t channels)
      : scale(randomF32({channels}, 30, 0.5f, 1.5f)),
        bias(randomF32({channels}, 31)), mean(randomF32({channels}, 32)),
        variance(randomF32({channels}, 33, 0.5f, 1.5f)) {}
};

Owned referenceBatchNorm(const Owned &x, const BatchNormParams &p,
                         float epsilon) {
  Owned y(DType::F32, x.view.shape);
  int64_t channels = x.view.shape[1];
  int64_t positions = x.size() / (x.view.shape[0] * channels);
  for (int64_t k = 0; k < x.size(); ++k) {
    int64_t c = (k / positions) % channels;
    double v = (x.view.f32()[k] - double(p.mean.view.f32()[c])) /
                   std::sqrt(double(p.variance.view.f32()[c]) + epsilon) *
                   p.scale.view.f32()[c] +
               p.bias.view.f32()[c];
    y.f(k) = static_cast<float>(v);
  }
  return y;
}

Owned runBatchNorm(const Owned &x, const Owned &scale, const Owned &bias,
                   const BatchNormParams &p, float epsilon) {
  Owned y = randomF32(x.view.shape, 92);
  cpu::batchNorm(cpuStream(), x.view, scale.view, bias.view, p.mean.view,
                 p.variance.view, y.view, epsilon);
  return y;
}

TEST(BatchNorm, MatchesReference) {
  for (Shape shape :
       {Shape{2, 3, 4, 5}, Shape{4, 3}, Shape{2, 3, 7}, Shape{8, 16, 16, 16}}) {
    SCOPED_TRACE(formatShape(shape));
    Owned x = randomF32(shape, 34);
    BatchNormParams p(shape[1]);
    expectClose(runBatchNorm(x, p.scale, p.bias, p, 1e-5f),
                referenceBatchNorm(x, p, 1e-5f));
  }
}

TEST(BatchNorm, GradsMatchFiniteDifferences) {
  const float eps = 1e-5f;
  for (Shape shape : {Shape{2, 3, 4, 5}, Shape{4, 3}, Shape{2, 3, 7}}) {
    SCOPED_TRACE(formatShape(shape));
    Owned x = randomF32(shape, 35), dy = randomF32(shape, 36);
    BatchNormParams p(shape[1]);
    Owned dx = randomF32(shape, 37), dscale = randomF32({shape[1]}, 38);
    Owned dbias = randomF32({shape[1]}, 39);
    cpu::batchNormGrad(cpuStream(), x.view, p.scale.view, p.mean.view,
                       p.variance.view, dy.view, dx.view, dscale.view,
                       dbias.view, eps);
    expectGradientMatches(
        [&](const Owned &v) {
          return runBatchNorm(v, p.scale, p.bias, p, eps);
        },
        x, dy, dx);
    expectGradientMatches(
        [&](const Owned &v) { return runBatchNorm(x, v, p.bias, p, eps); },
        p.scale, dy, dscale);
    expectGradientMatches(
        [&](const Owned &v) { return runBatchNorm(x, p.scale, v, p, eps); },
        p.bias, dy, dbias);
  }
}

TEST(BatchNorm, ManyThreadsGradMatchesFormula) {
  // One thread per channel: each owns its dscale / dbias sums (1e-3: sums of
  // 512 O(1) terms in fp32 inputs, accumulated in double).
  Shape shape{8, 16, 8, 8};
  const float eps = 1e-5f;
  Owned x = randomF32(shape, 40), dy = randomF32(shape, 41);
  BatchNormParams p(16);
  Owned dx(DType::F32, shape), dscale(DType::F32, {16}),
      dbias(DType::F32, {16});
  cpu::batchNormGrad(cpuStream(), x.view, p.scale.view, p.mean.view,
                     p.variance.view, dy.view, dx.view, dscale.view, dbias.view,
                     eps);
  std::vector<double> ds(16, 0.0), db(16, 0.0);
  for (int64_t k = 0; k < x.size(); ++k) {
    int64_t c = (k / 64) % 16;
    double istd = 1 / std::sqrt(double(p.variance.view.f32()[c]) + eps);
    EXPECT_NEAR(dx.view.f32()[k],
                dy.view.f32()[k] * p.scale.view.f32()[c] * istd, 1e-5);
    ds[c] += dy.view.f32()[k] *
             (x.view.f32()[k] - double(p.mean.view.f32()[c])) * istd;
    db[c] += dy.view.f32()[k];
  }
  for (int64_t c = 0; c < 16; ++c) {
    EXPECT_NEAR(dscale.view.f32()[c], ds[c], 1e-3);
    EXPECT_NEAR(dbias.view.f32()[c], db[c], 1e-3);
  }
}

} // namespace
} // namespace bmrt::test
