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
  const float b1 = config.beta1, b2 = config.beta2, eps = config.epsilon;
  const float decay = lr * config.weightDecay;
  // 1 - beta^t in double: beta2^t is 0.999^t, whose float power loses
  // digits the bias correction of early steps depends on.
  const double t = double(step);
  const float correction1 = float(1.0 / (1.0 - std::pow(double(b1), t)));
  const float correction2 = float(1.0 / (1.0 - std::pow(double(b2), t)));
#pragma omp parallel for simd if (n >= kParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * gradScale;
    float mi = b1 * mm[i] + (1.0f - b1) * gi;
    float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    float update = (mi * correction1) / (std::sqrt(vi * correction2) + eps);
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

void setThreads(int threads) {
  threads = std::max(threads, 1);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

} // namespace bmrt::cpu
