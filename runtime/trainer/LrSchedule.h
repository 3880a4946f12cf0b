//===- LrSchedule.h - warm-up + cosine rate, clipping -----------*- C++ -*-===//
//
// The learning-rate schedule of GPT-style training (Megatron-LM's
// --lr-decay-style cosine): the rate climbs linearly from 0 to its peak over
// the warm-up steps, then follows half a cosine down to a floor, reached at
// the last step and kept after it. And the factor global-norm clipping
// scales every gradient by.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_LRSCHEDULE_H
#define BMRT_TRAINER_LRSCHEDULE_H

#include <cstdint>
#include <optional>

namespace bmrt {

class LrSchedule {
public:
  /// A constant rate of 0 (a placeholder until the options are known).
  LrSchedule() = default;
  /// `peak` after `warmup` steps, decaying to `minLr` (peak / 10 when not
  /// given, Megatron-LM's convention) at step `totalSteps`. Throws
  /// bmrt::Error on negative rates or counts.
  LrSchedule(float peak, int64_t warmup, int64_t totalSteps,
             std::optional<float> minLr = std::nullopt);

  /// The rate of step `step`, counting from 1: peak * step / warmup during
  /// the warm-up, then minLr + (peak - minLr) (1 + cos(pi * progress)) / 2
  /// with progress = (step - warmup) / (totalSteps - warmup), clamped to 1.
  float learningRate(int64_t step) const;

  float peak() const { return peakLr; }
  float minimum() const { return minLr; }
  int64_t warmup() const { return warmupSteps; }
  int64_t totalSteps() const { return total; }

private:
  float peakLr = 0, minLr = 0;
  int64_t warmupSteps = 0, total = 0;
};

/// The factor that brings gradients of global L2 norm `norm` down to
/// `maxNorm`: 1 when norm <= maxNorm, else maxNorm / (norm + 1e-6) (the
/// epsilon of PyTorch's clip_grad_norm_). maxNorm <= 0 turns clipping off
/// (Megatron-LM's --clip-grad 0).
double clipScale(double norm, double maxNorm);
/// The same from the sum of squares of every gradient element (the sum of
/// the backend's sumOfSquares over the gradients).
double clipScaleFromSumOfSquares(double sumOfSquares, double maxNorm);

} // namespace bmrt

#endif // BMRT_TRAINER_LRSCHEDULE_H
