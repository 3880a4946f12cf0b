//===- OptimizerKernels.cpp - global norm, AdamW, SGD, threads ------------===//
//
// The optimizer's kernels run once per parameter tensor per step and touch
// every element once, so they are bandwidth-bound loops over flat fp32
// arrays: one OpenMP parallel loop each, with the per-step scalars (bias
// corrections, decay factors) computed once on the host in double.
//
// sumOfSquares adds fixed-size chunks in a fixed order, so its result does
// not depend on the thread count: a run resumed with other --threads clips
// its gradients exactly as the original run would have.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace bmrt::cpu {
namespace {

/// Below this many elements a loop runs on one thread: waking the team
/// costs more than the loop.
constexpr int64_t kParallelElements = 1 << 15;
/// The chunk of sumOfSquares whose partial sum one thread computes.
constexpr int64_t kChunk = 1 << 14;

double chunkSumOfSquares(const float *x, int64_t n) {
  // Four accumulators let consecutive adds overlap.
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += double(x[i]) * x[i];
    a1 += double(x[i + 1]) * x[i + 1];
    a2 += double(x[i + 2]) * x[i + 2];
    a3 += double(x[i + 3]) * x[i + 3];
  }
  for (; i < n; ++i)
    a0 += double(x[i]) * x[i];
  return (a0 + a1) + (a2 + a3);
}

/// Adam's bias-corrected moments and step direction m^ / (sqrt(v^) + eps)
/// for one element, with the scalars of the step. AdamW and LAMB share it.
struct AdamMoments {
  float b1, b2, eps, correction1, correction2;

  AdamMoments(float beta1, float beta2, float epsilon, int64_t step)
      : b1(beta1), b2(beta2), eps(epsilon) {
    // 1 - beta^t in double: beta2^t is 0.999^t, whose float power loses
    // digits the bias correction of early steps depends on.
    const double t = double(step);
    correction1 = float(1.0 / (1.0 - std::pow(double(b1), t)));
    correction2 = float(1.0 / (1.0 - std::pow(double(b2), t)));
  }
  /// Updates m and v with g; returns the direction.
  float step(float gi, float &m, float &v) const {
    float mi = b1 * m + (1.0f - b1) * gi;
    float vi = b2 * v + (1.0f - b2) * gi * gi;
    m = mi;
    v = vi;
    return (mi * correction1) / (std::sqrt(vi * correction2) + eps);
  }
};

} // namespace

double sumOfSquares(Stream &stream, const TensorView &x) {
  stream.synchronize();
  const float *data = x.f32();
  int64_t n = x.size();
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for if (n >= kParallelElements) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = c * kChunk;
    partial[c] = chunkSumOfSquares(data + begin, std::min(kChunk, n - begin));
  }
  double sum = 0;
  for (double p : partial)
    sum += p;
  return sum;
}

void adamwUpdate(Stream &, const TensorView &param, const TensorView &grad,
                 const TensorView &m, const TensorView &v,
                 const AdamWConfig &config, float lr, int64_t step,
                 float gradScale) {
  float *p = param.f32(), *mm = m.f32(), *vv = v.f32();
  const float *g = grad.f32();
  int64_t n = param.size();
  const float decay = lr * config.weightDecay;
  const AdamMoments adam(config.beta1, config.beta2, config.epsilon, step);
#pragma omp parallel for simd if (n >= kParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float update = adam.step(g[i] * gradScale, mm[i], vv[i]);
    p[i] -= lr * update + decay * p[i];
  }
}

void sgdUpdate(Stream &, const TensorView &param, const TensorView &grad,
               const TensorView &buffer, const SgdConfig &config, float lr,
               int64_t step, float gradScale) {
  float *p = param.f32(), *buf = buffer.f32();
  const float *g = grad.f32();
  int64_t n = param.size();
  const float wd = config.weightDecay;
  const float momentum = config.momentum;
  // On the first step the buffer becomes the gradient itself (PyTorch), not
  // momentum * buffer + g: the buffer need not start zeroed.
  const bool first = step == 1;
#pragma omp parallel for simd if (n >= kParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * gradScale + wd * p[i];
    float bi = first ? gi : momentum * buf[i] + gi;
    buf[i] = bi;
    p[i] -= lr * bi;
  }
}

// LAMB's moments and direction round as AdamW's do (the same expressions);
// the norms and the step come after, once the trainer has every shard's
// sums.
void lambDirection(Stream &, const TensorView &param, const TensorView &grad,
                   const TensorView &m, const TensorView &v,
                   const TensorView &direction, const LambConfig &config,
                   int64_t step, float gradScale) {
  const float *p = param.f32(), *g = grad.f32();
  float *mm = m.f32(), *vv = v.f32(), *u = direction.f32();
  int64_t n = param.size();
  const float wd = config.weightDecay;
  const AdamMoments adam(config.beta1, config.beta2, config.epsilon, step);
#pragma omp parallel for simd if (n >= kParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    u[i] = adam.step(g[i] * gradScale, mm[i], vv[i]) + wd * p[i];
}

void axpy(Stream &, float alpha, const TensorView &x, const TensorView &y) {
  const float *xx = x.f32();
  float *yy = y.f32();
  int64_t n = y.size();
#pragma omp parallel for simd if (n >= kParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    yy[i] += alpha * xx[i];
}

void larsUpdate(Stream &, const TensorView &param, const TensorView &grad,
                const TensorView &buffer, const LarsConfig &config,
                float scaledLr, float gradScale) {
  float *p = param.f32(), *buf = buffer.f32();
  const float *g = grad.f32();
  int64_t n = param.size();
  const float wd = config.weightDecay, momentum = config.momentum;
#pragma omp parallel for simd if (n >= kParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float bi = momentum * buf[i] + scaledLr * (g[i] * gradScale + wd * p[i]);
    buf[i] = bi;
    p[i] -= bi;
  }
}

void setThreads(int threads) {
  threads = std::max(threads, 1);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

void setThreadsOfCallingThread(int threads) {
  omp_set_num_threads(std::max(threads, 1));
}

} // namespace bmrt::cpu
