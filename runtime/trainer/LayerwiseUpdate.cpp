//===- LayerwiseUpdate.cpp - LAMB and LARS over a list of tensors ---------===//

#include "LayerwiseUpdate.h"

namespace bmrt {
namespace {

/// Each tensor's squared norms of its value and of its gradient buffer,
/// over every part of the tensor: two per tensor. The sums travel as fp32
/// (communicators sum fp32): a norm's 1e-7 relative error moves the ratio
/// by as much, far below what the step's own rounding does.
std::vector<float> wholeSquares(const TrainerKernels &kernels, Stream &stream,
                                const std::vector<TensorUpdate> &tensors,
                                const WholeSums &wholeSums) {
  std::vector<TensorView> views;
  for (const TensorUpdate &t : tensors) {
    views.push_back(t.value);
    views.push_back(t.grad);
  }
  std::vector<double> local = kernels.sumsOfSquares(stream, views);
  std::vector<float> sums(local.begin(), local.end());
  if (wholeSums)
    wholeSums(sums);
  return sums;
}

} // namespace

// The direction is written over the gradient, which nothing reads after
// the update: no buffer of the parameters' size is added.
void lambStep(const TrainerKernels &kernels, Stream &stream,
              const std::vector<TensorUpdate> &tensors,
              const LambConfig &config, float lr, int64_t step, float gradScale,
              const WholeSums &wholeSums) {
  for (const TensorUpdate &t : tensors)
    kernels.lambDirection(stream, t.value, t.grad, t.first, t.second, t.grad,
                          config, step, gradScale);
  std::vector<float> sums = wholeSquares(kernels, stream, tensors, wholeSums);
  for (size_t k = 0; k < tensors.size(); ++k) {
    double ratio = lambTrustRatio(sums[2 * k], sums[2 * k + 1]);
    kernels.axpy(stream, static_cast<float>(-lr * ratio), tensors[k].grad,
                 tensors[k].value);
  }
}

void larsStep(const TrainerKernels &kernels, Stream &stream,
              const std::vector<TensorUpdate> &tensors,
              const LarsConfig &config, float lr, float gradScale,
              const WholeSums &wholeSums) {
  std::vector<float> sums = wholeSquares(kernels, stream, tensors, wholeSums);
  // The gradient's norm is of g = grad * gradScale.
  double scale2 = double(gradScale) * gradScale;
  for (size_t k = 0; k < tensors.size(); ++k) {
    double local = larsLocalRate(config, sums[2 * k], scale2 * sums[2 * k + 1]);
    const TensorUpdate &t = tensors[k];
    kernels.larsUpdate(stream, t.value, t.grad, t.first, config,
                       static_cast<float>(lr * local), gradScale);
  }
}

} // namespace bmrt
