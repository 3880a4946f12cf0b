//===- Optimizer.h - the optimizers' hyperparameters -----------*- C++ -*-===//
//
// What every backend's optimizer kernels (Backend.h: TrainerKernels) take.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_OPTIMIZER_H
#define BMRT_OPTIMIZER_H

namespace bmrt {

/// AdamW (Loshchilov & Hutter 2019, decoupled weight decay), one step on
/// one fp32 tensor; g = grad * gradScale (the clipping factor):
///   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
///   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
/// The step t counts from 1.
struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weightDecay = 0.01f;
};

/// SGD with momentum (PyTorch's form): g = grad * gradScale + wd * p;
/// buf = momentum * buf + g (buf = g on step 1); p -= lr * buf.
struct SgdConfig {
  float momentum = 0.9f, weightDecay = 0.0f;
};

} // namespace bmrt

#endif // BMRT_OPTIMIZER_H
