//===- NormKernels.cpp - layer, RMS and batch normalisation ---------------===//
//
// layerNorm and rmsNorm treat x as rows (the dims before `axis`) of `cols`
// elements (the dims from `axis` on) and run one OpenMP thread per chunk of
// rows. Row statistics accumulate in double, the variance in a second pass
// over the row, so a large mean does not cancel a small variance.
//
// Their scale and bias broadcast onto the normalised block numpy-style; the
// kernels spread them to `cols` values once per call, so the row loops are
// plain vector loops, and sum the gradients back into the parameters' shapes
// after the parallel loop (per-thread partial sums: no atomics, and a fixed
// order per thread count).
//
//===----------------------------------------------------------------------===//

#include "bmrt/NormRows.h"
#include "runtime/cpu/Kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace bmrt::cpu {
namespace {

/// Elements a loop must touch before it forks an OpenMP team.
constexpr int64_t kParallelWork = 1 << 15;

bool parallelRows(const NormRows &r) {
  return r.rows > 1 && r.rows * r.cols >= kParallelWork;
}

/// For each element of the block (row-major), the element of a parameter
/// of shape `param` broadcast onto it: numpy's rules, right-aligned, a dim
/// of size 1 (or a missing one) repeating. Leading parameter dims beyond the
/// block's rank must be 1 and are ignored.
std::vector<int64_t> broadcastIndex(const Shape &block, const Shape &param) {
  size_t rank = block.size();
  std::vector<int64_t> strides = paramStrides(block, param);
  int64_t cols = numElements(block);
  std::vector<int64_t> index(cols);
  for (int64_t j = 0; j < cols; ++j) {
    int64_t at = 0, rest = j;
    for (size_t d = rank; d-- > 0;) {
      at += (rest % block[d]) * strides[d];
      rest /= block[d];
    }
    index[j] = at;
  }
  return index;
}

/// The parameter's value at each element of the block (`fallback` where
/// there is no parameter: the optional bias).
std::vector<float> spread(const TensorView *param,
                          const std::vector<int64_t> &index, float fallback) {
  std::vector<float> values(index.size(), fallback);
  if (param)
    for (size_t j = 0; j < index.size(); ++j)
      values[j] = param->f32()[index[j]];
  return values;
}

/// The gradient of a broadcast parameter: the per-thread, per-element
/// partial sums added up and folded into the parameter's shape.
/// Thread t's sums are the `cols` doubles at partials + t * stride.
void foldInto(const double *partials, int threads, int64_t cols, int64_t stride,
              const std::vector<int64_t> &index, const TensorView &dparam) {
  std::vector<double> sums(dparam.size(), 0.0);
  for (int t = 0; t < threads; ++t) {
    const double *part = partials + t * stride;
    for (int64_t j = 0; j < cols; ++j)
      sums[index[j]] += part[j];
  }
  for (int64_t i = 0; i < dparam.size(); ++i)
    dparam.f32()[i] = static_cast<float>(sums[i]);
}

/// A row's mean and 1 / sqrt(variance + epsilon), the variance biased (as
/// ONNX), both in double and in two passes.
struct Moments {
  double mean, rstd;
};

Moments momentsOf(const float *x, int64_t n, float epsilon) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j)
    sum += x[j];
  double mean = n ? sum / n : 0.0;
  double squares = 0;
  for (int64_t j = 0; j < n; ++j) {
    double d = x[j] - mean;
    squares += d * d;
  }
  double variance = n ? squares / n : 0.0;
  return {mean, 1.0 / std::sqrt(variance + epsilon)};
}

/// 1 / sqrt(mean(x^2) + epsilon) of a row.
double rmsInverse(const float *x, int64_t n, float epsilon) {
  double squares = 0;
  for (int64_t j = 0; j < n; ++j)
    squares += double(x[j]) * x[j];
  return 1.0 / std::sqrt((n ? squares / n : 0.0) + epsilon);
}

/// Threads for a loop over rows that keeps per-thread partial sums.
int threadsFor(bool parallel) { return parallel ? omp_get_max_threads() : 1; }

} // namespace

//===----------------------------------------------------------------------===//
// Layer normalisation
//===----------------------------------------------------------------------===//

void layerNorm(Stream &, const TensorView &x, const TensorView &scale,
               const TensorView *bias, const TensorView &y, int64_t axis,
               float epsilon) {
  NormRows r = normRows(x.shape, axis);
  std::vector<float> s =
      spread(&scale, broadcastIndex(r.block, scale.shape), 1.f);
  std::vector<float> b =
      spread(bias, broadcastIndex(r.block, bias ? bias->shape : Shape{}), 0.f);
#pragma omp parallel for if (parallelRows(r)) schedule(static)
  for (int64_t row = 0; row < r.rows; ++row) {
    const float *xr = x.f32() + row * r.cols;
    float *yr = y.f32() + row * r.cols;
    // x - mean in double: rounding the mean to fp32 would cost up to half
    // an ulp of the mean, large against a small spread around a large mean.
    Moments m = momentsOf(xr, r.cols, epsilon);
    for (int64_t j = 0; j < r.cols; ++j)
      yr[j] = static_cast<float>((xr[j] - m.mean) * m.rstd * s[j] + b[j]);
  }
}

/// With xhat = (x - mean) * rstd and g = dy * scale:
///   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
///   dscale = sum over rows of dy * xhat, dbias = sum over rows of dy
/// (then summed over whatever the parameter broadcasts).
void layerNormGrad(Stream &, const TensorView &x, const TensorView &scale,
                   const TensorView &dy, const TensorView &dx,
                   const TensorView &dscale, const TensorView *dbias,
                   int64_t axis, float epsilon) {
  NormRows r = normRows(x.shape, axis);
  std::vector<int64_t> scaleIndex = broadcastIndex(r.block, scale.shape);
  std::vector<float> s = spread(&scale, scaleIndex, 1.f);
  bool parallel = parallelRows(r);
  int threads = threadsFor(parallel);
  // Per thread: dscale's partial sums, then dbias's.
  int64_t stride = r.cols * 2;
  std::vector<double> partials(threads * stride, 0.0);
#pragma omp parallel num_threads(threads) if (parallel)
  {
    double *dsPart = partials.data() + omp_get_thread_num() * stride;
    double *dbPart = dsPart + r.cols;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < r.rows; ++row) {
      const float *xr = x.f32() + row * r.cols;
      const float *dyr = dy.f32() + row * r.cols;
      float *dxr = dx.f32() + row * r.cols;
      Moments m = momentsOf(xr, r.cols, epsilon);
      double sumG = 0, sumGXhat = 0;
      for (int64_t j = 0; j < r.cols; ++j) {
        double xhat = (xr[j] - m.mean) * m.rstd;
        double g = double(dyr[j]) * s[j];
        sumG += g;
        sumGXhat += g * xhat;
        dsPart[j] += dyr[j] * xhat;
        dbPart[j] += dyr[j];
      }
      double meanG = sumG / r.cols, meanGXhat = sumGXhat / r.cols;
      for (int64_t j = 0; j < r.cols; ++j) {
        double xhat = (xr[j] - m.mean) * m.rstd;
        double g = double(dyr[j]) * s[j];
        dxr[j] = static_cast<float>(m.rstd * (g - meanG - xhat * meanGXhat));
      }
    }
  }
  foldInto(partials.data(), threads, r.cols, stride, scaleIndex, dscale);
  // dbias' shape is the bias', which need not be the scale's.
  if (dbias)
    foldInto(partials.data() + r.cols, threads, r.cols, stride,
             broadcastIndex(r.block, dbias->shape), *dbias);
}

//===----------------------------------------------------------------------===//
// RMS normalisation
//===----------------------------------------------------------------------===//

void rmsNorm(Stream &, const TensorView &x, const TensorView &scale,
             const TensorView &y, int64_t axis, float epsilon) {
  NormRows r = normRows(x.shape, axis);
  std::vector<float> s =
      spread(&scale, broadcastIndex(r.block, scale.shape), 1.f);
#pragma omp parallel for if (parallelRows(r)) schedule(static)
  for (int64_t row = 0; row < r.rows; ++row) {
    const float *xr = x.f32() + row * r.cols;
    float *yr = y.f32() + row * r.cols;
    float inv = static_cast<float>(rmsInverse(xr, r.cols, epsilon));
    for (int64_t j = 0; j < r.cols; ++j)
      yr[j] = xr[j] * inv * s[j];
  }
}

/// With r = 1 / sqrt(mean(x^2) + eps) and g = dy * scale:
///   dx = r * g - x * r^3 * mean(g * x),  dscale = sum over rows of dy x r.
void rmsNormGrad(Stream &, const TensorView &x, const TensorView &scale,
                 const TensorView &dy, const TensorView &dx,
                 const TensorView &dscale, int64_t axis, float epsilon) {
  NormRows r = normRows(x.shape, axis);
  std::vector<int64_t> scaleIndex = broadcastIndex(r.block, scale.shape);
  std::vector<float> s = spread(&scale, scaleIndex, 1.f);
  bool parallel = parallelRows(r);
  int threads = threadsFor(parallel);
  std::vector<double> partials(threads * r.cols, 0.0);
#pragma omp parallel num_threads(threads) if (parallel)
  {
    double *dsPart = partials.data() + omp_get_thread_num() * r.cols;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < r.rows; ++row) {
      const float *xr = x.f32() + row * r.cols;
      const float *dyr = dy.f32() + row * r.cols;
      float *dxr = dx.f32() + row * r.cols;
      double inv = rmsInverse(xr, r.cols, epsilon);
      double dot = 0;
      for (int64_t j = 0; j < r.cols; ++j) {
        dot += double(dyr[j]) * s[j] * xr[j];
        dsPart[j] += double(dyr[j]) * xr[j] * inv;
      }
      double coefficient = inv * inv * inv * dot / r.cols;
      for (int64_t j = 0; j < r.cols; ++j)
        dxr[j] = static_cast<float>(inv * dyr[j] * s[j] - xr[j] * coefficient);
    }
  }
  foldInto(partials.data(), threads, r.cols, r.cols, scaleIndex, dscale);
}

//===----------------------------------------------------------------------===//
// Batch normalisation (inference form)
//===----------------------------------------------------------------------===//

namespace {

double inverseStd(const TensorView &variance, int64_t c, float epsilon) {
  return 1.0 / std::sqrt(double(variance.f32()[c]) + epsilon);
}

} // namespace

void batchNorm(Stream &, const TensorView &x, const TensorView &scale,
               const TensorView &bias, const TensorView &mean,
               const TensorView &variance, const TensorView &y, float epsilon) {
  NormPlanes p = normPlanes(x.shape);
  int64_t planes = p.images * p.channels;
#pragma omp parallel for if (x.size() >= kParallelWork) schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    int64_t c = plane % p.channels;
    // y = x * a + b with the per-channel constants folded once.
    double a = scale.f32()[c] * inverseStd(variance, c, epsilon);
    float fa = static_cast<float>(a);
    float fb = static_cast<float>(bias.f32()[c] - mean.f32()[c] * a);
    const float *xp = x.f32() + plane * p.positions;
    float *yp = y.f32() + plane * p.positions;
    for (int64_t i = 0; i < p.positions; ++i)
      yp[i] = xp[i] * fa + fb;
  }
}

/// mean and variance are constants: dx = dy * scale * istd,
/// dscale = sum dy (x - mean) istd, dbias = sum dy, sums over images and
/// positions. One thread per channel owns that channel's sums.
void batchNormGrad(Stream &, const TensorView &x, const TensorView &scale,
                   const TensorView &mean, const TensorView &variance,
                   const TensorView &dy, const TensorView &dx,
                   const TensorView &dscale, const TensorView &dbias,
                   float epsilon) {
  NormPlanes p = normPlanes(x.shape);
  bool parallel = p.channels > 1 && x.size() >= kParallelWork;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t c = 0; c < p.channels; ++c) {
    double istd = inverseStd(variance, c, epsilon);
    float dxScale = static_cast<float>(scale.f32()[c] * istd);
    double mu = mean.f32()[c];
    double sumDy = 0, sumDyXhat = 0;
    for (int64_t n = 0; n < p.images; ++n) {
      int64_t offset = (n * p.channels + c) * p.positions;
      const float *xp = x.f32() + offset;
      const float *dyp = dy.f32() + offset;
      float *dxp = dx.f32() + offset;
      for (int64_t i = 0; i < p.positions; ++i) {
        dxp[i] = dyp[i] * dxScale;
        sumDy += dyp[i];
        sumDyXhat += dyp[i] * (xp[i] - mu);
      }
    }
    dscale.f32()[c] = static_cast<float>(sumDyXhat * istd);
    dbias.f32()[c] = static_cast<float>(sumDy);
  }
}

} // namespace bmrt::cpu
