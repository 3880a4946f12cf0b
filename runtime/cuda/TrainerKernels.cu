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

__global__ void adamwKernel(float *p, const float *g, float *m, float *v,
                            int64_t n, float b1, float b2, float eps, float lr,
                            float decay, float correction1, float correction2,
                            float gradScale) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    float gi = __fmul_rn(g[i], gradScale);
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1.0f - b1, gi));
    float vi =
        __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1.0f - b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float update = __fmul_rn(mi, correction1) /
                   __fadd_rn(sqrtf(__fmul_rn(vi, correction2)), eps);
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

class CudaTrainerKernels final : public TrainerKernels {
public:
  void add(Stream &stream, const TensorView &a, const TensorView &b,
           const TensorView &out) const override {
    addF32(cudaStreamOf(stream), a, b, out);
  }

  /// Each tensor's kSumBlocks partial sums into one buffer, one copy to
  /// the host, then added tensor by tensor in order.
  double sumOfSquares(Stream &stream,
                      const std::vector<TensorView> &xs) const override {
    cudaStream_t s = cudaStreamOf(stream);
    size_t count = xs.size() * kSumBlocks;
    if (count == 0)
      return 0;
    StreamBuffer partial(count * sizeof(double), s);
    auto *sums = static_cast<double *>(partial.data());
    BMRT_CUDA_CHECK(cudaMemsetAsync(sums, 0, count * sizeof(double), s));
    for (size_t t = 0; t < xs.size(); ++t) {
      if (xs[t].size() == 0)
        continue;
      sumOfSquaresKernel<<<kSumBlocks, kThreads, 0, s>>>(
          xs[t].f32(), xs[t].size(), sums + t * kSumBlocks);
      BMRT_CUDA_CHECK_LAUNCH("sumOfSquaresKernel");
    }
    std::vector<double> host(count);
    BMRT_CUDA_CHECK(cudaMemcpyAsync(host.data(), sums, count * sizeof(double),
                                    cudaMemcpyDeviceToHost, s));
    BMRT_CUDA_CHECK(cudaStreamSynchronize(s));
    double sum = 0;
    for (size_t t = 0; t < xs.size(); ++t) {
      double tensor = 0;
      for (size_t b = 0; b < kSumBlocks; ++b)
        tensor += host[t * kSumBlocks + b];
      sum += tensor;
    }
    return sum;
  }

  void adamwUpdate(Stream &stream, const TensorView &param,
                   const TensorView &grad, const TensorView &m,
                   const TensorView &v, const AdamWConfig &config, float lr,
                   int64_t step, float gradScale) const override {
    // 1 - beta^t in double: 0.999^t in float loses digits the early steps'
    // bias correction depends on.
    const double t = double(step);
    const float correction1 =
        float(1.0 / (1.0 - std::pow(double(config.beta1), t)));
    const float correction2 =
        float(1.0 / (1.0 - std::pow(double(config.beta2), t)));
    int64_t n = param.size();
    launch("adamw kernel", cudaStreamOf(stream), n, adamwKernel, param.f32(),
           grad.f32(), m.f32(), v.f32(), n, config.beta1, config.beta2,
           config.epsilon, lr, lr * config.weightDecay, correction1,
           correction2, gradScale);
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
};

} // namespace

const TrainerKernels &trainerKernels() {
  static const CudaTrainerKernels kernels;
  return kernels;
}

} // namespace bmrt::cuda
