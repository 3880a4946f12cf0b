//===- Optimizer.h - the optimizers' hyperparameters -----------*- C++ -*-===//
//
// What every backend's optimizer kernels (Backend.h: TrainerKernels) take.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_OPTIMIZER_H
#define BMRT_OPTIMIZER_H

#include <string>

namespace bmrt {

/// The optimizers the trainer runs, as trainer.json and the plan name them.
enum class OptimizerKind { AdamW, Sgd, Lamb, Lars };

/// "adamw", "sgd", "lamb", "lars" into `kind`; false for anything else.
bool parseOptimizer(const std::string &name, OptimizerKind &kind);
const char *nameOf(OptimizerKind kind);
/// AdamW and LAMB keep two moments per element, SGD and LARS one buffer.
bool hasSecondMoment(OptimizerKind kind);

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

/// LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning:
/// Training BERT in 76 minutes", Algorithm 2), per tensor, with
/// g = grad * gradScale:
///   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
///   u = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p
///   p -= lr * (|p| / |u|) * u      (the ratio is 1 where |p| or |u| is 0)
/// |.| is the L2 norm of the whole tensor; phi is the identity.
struct LambConfig {
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-6f, weightDecay = 0.01f;
};

/// LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of
/// Convolutional Networks", Algorithm 1), per tensor, with
/// g = grad * gradScale:
///   local = trust * |p| / (|g| + wd * |p|)   (1 where |p| or |g| is 0)
///   buf = momentum * buf + lr * local * (g + wd * p);  p -= buf
struct LarsConfig {
  float momentum = 0.9f, weightDecay = 1e-4f, trustCoefficient = 1e-3f;
};

/// LAMB's trust ratio |p| / |u| from the squared norms.
double lambTrustRatio(double paramSquares, double updateSquares);
/// LARS's local learning rate from the squared norms of p and of the
/// scaled gradient g.
double larsLocalRate(const LarsConfig &config, double paramSquares,
                     double gradSquares);

} // namespace bmrt

#endif // BMRT_OPTIMIZER_H
