//===- TrainerKernels.cu - gradient sums, global norm, AdamW, SGD ---------===//
//
// The trainer's kernels outside the step program (bmrt/Backend.h): one pass
// over a flat fp32 tensor each. The per-step scalars (bias corrections) are
// computed once on the host in double, as the CPU backend does
// (runtime/cpu/OptimizerKernels.cpp), and the update formulas are its
// formulas operation for operation.
//
//===----------------------------------------------------------------------===//

#include "DeviceLoops.cuh"

#include "bmrt/Backend.h"

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

namespace bmrt::cuda {

namespace {

/// A fixed number of blocks, whatever the GPU: each thread's share of the
/// elements and the order partial sums are added in are then fixed, so the
/// result does not depend on the device (a resumed run clips as the first
/// one did).
constexpr int kSumBlocks = 512;

/// Each block's sum of x^2, in double.
__global__ void sumOfSquaresKernel(const float *x, int64_t n, double *partial) {
  __shared__ double shared[kThreads];
  double sum = 0;
  BMRT_GRID_STRIDE_LOOP(i, n) { sum += double(x[i]) * x[i]; }
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    partial[blockIdx.x] = shared[0];
}

// The updates use __fmul_rn / __fadd_rn where the CPU multiplies and adds:
// nvcc would otherwise contract a * b + c into one fused multiply-add, and
// the two backends would round differently.

/// Adam's moments and direction m^ / (sqrt(v^) + eps) for one element, as
/// the CPU's AdamMoments (AdamW and LAMB share it).
struct AdamMoments {
  float b1, b2, eps, correction1, correction2;

  __device__ float step(float gi, float &m, float &v) const {
    float mi = __fadd_rn(__fmul_rn(b1, m), __fmul_rn(1.0f - b1, gi));
    float vi =
        __fadd_rn(__fmul_rn(b2, v), __fmul_rn(__fmul_rn(1.0f - b2, gi), gi));
    m = mi;
    v = vi;
    return __fmul_rn(mi, correction1) /
           __fadd_rn(sqrtf(__fmul_rn(vi, correction2)), eps);
  }
};

/// The step's scalars: 1 - beta^t in double, since 0.999^t in float loses
/// digits the early steps' bias correction depends on.
AdamMoments adamMoments(float beta1, float beta2, float epsilon,
                        int64_t step) {
  const double t = double(step);
  return {beta1, beta2, epsilon,
          float(1.0 / (1.0 - std::pow(double(beta1), t))),
          float(1.0 / (1.0 - std::pow(double(beta2), t)))};
}

__global__ void adamwKernel(float *p, const float *g, float *m, float *v,
                            int64_t n, AdamMoments adam, float lr, float decay,
                            float gradScale) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    float update = adam.step(__fmul_rn(g[i], gradScale), m[i], v[i]);
    p[i] -= __fadd_rn(__fmul_rn(lr, update), __fmul_rn(decay, p[i]));
  }
}

/// On the first step the buffer becomes the gradient itself (PyTorch).
__global__ void sgdKernel(float *p, const float *g, float *buffer, int64_t n,
                          float momentum, float wd, float lr, float gradScale,
                          bool first) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    float gi = __fadd_rn(__fmul_rn(g[i], gradScale), __fmul_rn(wd, p[i]));
    float bi = first ? gi : __fadd_rn(__fmul_rn(momentum, buffer[i]), gi);
    buffer[i] = bi;
    p[i] -= __fmul_rn(lr, bi);
  }
}

/// LAMB's moments as adamwKernel's, then u = m^ / (sqrt(v^) + eps) + wd p.
__global__ void lambDirectionKernel(const float *p, const float *g, float *m,
                                    float *v, float *u, int64_t n,
                                    AdamMoments adam, float wd,
                                    float gradScale) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    float r = adam.step(__fmul_rn(g[i], gradScale), m[i], v[i]);
    u[i] = __fadd_rn(r, __fmul_rn(wd, p[i]));
  }
}

__global__ void axpyKernel(float alpha, const float *x, float *y, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i])); }
}

__global__ void larsKernel(float *p, const float *g, float *buffer, int64_t n,
                           float momentum, float wd, float scaledLr,
                           float gradScale) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    float d = __fadd_rn(__fmul_rn(g[i], gradScale), __fmul_rn(wd, p[i]));
    float bi = __fadd_rn(__fmul_rn(momentum, buffer[i]), __fmul_rn(scaledLr, d));
    buffer[i] = bi;
    p[i] -= bi;
  }
}

class CudaTrainerKernels final : public TrainerKernels {
public:
  void add(Stream &stream, const TensorView &a, const TensorView &b,
           const TensorView &out) const override {
    addF32(cudaStreamOf(stream), a, b, out);
  }

  /// Each tensor's kSumBlocks partial sums into one buffer, one copy to
  /// the host, then each tensor's added in order.
  std::vector<double>
  sumsOfSquares(Stream &stream,
                const std::vector<TensorView> &xs) const override {
    cudaStream_t s = cudaStreamOf(stream);
    size_t count = xs.size() * kSumBlocks;
    if (count == 0)
      return {};
    StreamBuffer partial(count * sizeof(double), s);
    auto *blocks = static_cast<double *>(partial.data());
    BMRT_CUDA_CHECK(cudaMemsetAsync(blocks, 0, count * sizeof(double), s));
    for (size_t t = 0; t < xs.size(); ++t) {
      if (xs[t].size() == 0)
        continue;
      sumOfSquaresKernel<<<kSumBlocks, kThreads, 0, s>>>(
          xs[t].f32(), xs[t].size(), blocks + t * kSumBlocks);
      BMRT_CUDA_CHECK_LAUNCH("sumOfSquaresKernel");
    }
    std::vector<double> host(count);
    BMRT_CUDA_CHECK(cudaMemcpyAsync(host.data(), blocks, count * sizeof(double),
                                    cudaMemcpyDeviceToHost, s));
    BMRT_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<double> sums(xs.size(), 0.0);
    for (size_t t = 0; t < xs.size(); ++t)
      for (size_t b = 0; b < kSumBlocks; ++b)
        sums[t] += host[t * kSumBlocks + b];
    return sums;
  }

  void adamwUpdate(Stream &stream, const TensorView &param,
                   const TensorView &grad, const TensorView &m,
                   const TensorView &v, const AdamWConfig &config, float lr,
                   int64_t step, float gradScale) const override {
    int64_t n = param.size();
    launch("adamw kernel", cudaStreamOf(stream), n, adamwKernel, param.f32(),
           grad.f32(), m.f32(), v.f32(), n,
           adamMoments(config.beta1, config.beta2, config.epsilon, step), lr,
           lr * config.weightDecay, gradScale);
  }

  void sgdUpdate(Stream &stream, const TensorView &param,
                 const TensorView &grad, const TensorView &buffer,
                 const SgdConfig &config, float lr, int64_t step,
                 float gradScale) const override {
    int64_t n = param.size();
    launch("sgd kernel", cudaStreamOf(stream), n, sgdKernel, param.f32(),
           grad.f32(), buffer.f32(), n, config.momentum, config.weightDecay, lr,
           gradScale, step == 1);
  }

  void lambDirection(Stream &stream, const TensorView &param,
                     const TensorView &grad, const TensorView &m,
                     const TensorView &v, const TensorView &direction,
                     const LambConfig &config, int64_t step,
                     float gradScale) const override {
    int64_t n = param.size();
    launch("lamb direction kernel", cudaStreamOf(stream), n,
           lambDirectionKernel, param.f32(), grad.f32(), m.f32(), v.f32(),
           direction.f32(), n,
           adamMoments(config.beta1, config.beta2, config.epsilon, step),
           config.weightDecay, gradScale);
  }

  void axpy(Stream &stream, float alpha, const TensorView &x,
            const TensorView &y) const override {
    int64_t n = y.size();
    launch("axpy kernel", cudaStreamOf(stream), n, axpyKernel, alpha, x.f32(),
           y.f32(), n);
  }

  void larsUpdate(Stream &stream, const TensorView &param,
                  const TensorView &grad, const TensorView &buffer,
                  const LarsConfig &config, float scaledLr,
                  float gradScale) const override {
    int64_t n = param.size();
    launch("lars kernel", cudaStreamOf(stream), n, larsKernel, param.f32(),
           grad.f32(), buffer.f32(), n, config.momentum, config.weightDecay,
           scaledLr, gradScale);
  }
};

} // namespace

const TrainerKernels &trainerKernels() {
  static const CudaTrainerKernels kernels;
  return kernels;
}

} // namespace bmrt::cuda
