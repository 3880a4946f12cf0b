//===- LrSchedule.cpp - warm-up + cosine learning rate, gradient clipping -===//

#include "LrSchedule.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace bmrt {
namespace {

/// "0.0006", "1e-05": rates as a user typed them, not std::to_string's
/// fixed six decimals.
std::string formatRate(float rate) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", double(rate));
  return text;
}

} // namespace

LrSchedule::LrSchedule(float peak, int64_t warmup, int64_t totalSteps,
                       std::optional<float> minimum)
    : peakLr(peak), minLr(minimum ? *minimum : peak / 10.0f),
      warmupSteps(warmup), total(totalSteps) {
  BMRT_CHECK(peak >= 0 && std::isfinite(peak),
             "the learning rate must be a finite number >= 0, not " +
                 formatRate(peak));
  BMRT_CHECK(minLr >= 0 && minLr <= peak,
             "the minimum learning rate " + formatRate(minLr) +
                 " must lie in [0, " + formatRate(peak) + "]");
  BMRT_CHECK(warmup >= 0,
             "the warm-up must be >= 0 steps, not " + std::to_string(warmup));
  BMRT_CHECK(totalSteps >= 0, "the number of steps must be >= 0, not " +
                                  std::to_string(totalSteps));
}

float LrSchedule::learningRate(int64_t step) const {
  if (step <= warmupSteps)
    return float(double(peakLr) * double(std::max<int64_t>(step, 0)) /
                 double(warmupSteps));
  // No decay phase (the run ends within the warm-up): stay at the peak.
  if (total <= warmupSteps)
    return peakLr;
  double progress =
      std::min(1.0, double(step - warmupSteps) / double(total - warmupSteps));
  const double pi = 3.14159265358979323846;
  double cosine = 0.5 * (1.0 + std::cos(pi * progress));
  return float(double(minLr) + (double(peakLr) - double(minLr)) * cosine);
}

double clipScale(double norm, double maxNorm) {
  if (maxNorm <= 0 || !(norm > maxNorm))
    return 1.0;
  return maxNorm / (norm + 1e-6);
}

double clipScaleFromSumOfSquares(double sumOfSquares, double maxNorm) {
  return clipScale(std::sqrt(sumOfSquares), maxNorm);
}

} // namespace bmrt
