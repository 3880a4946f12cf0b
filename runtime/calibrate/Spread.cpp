//===- Spread.cpp - how far repeated samples of one time disagree ---------===//

#include "Spread.h"

#include <algorithm>
#include <cmath>

namespace bmrt::calibrate {

double quantile(const std::vector<double> &sorted, double q) {
  double at = q * static_cast<double>(sorted.size() - 1);
  size_t below = static_cast<size_t>(std::floor(at));
  size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] +
         (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

double relativeSpread(std::vector<double> samples) {
  // The interquartile range, not (max - min): the reported time is the
  // median, which ignores a lone preempted sample, so the spread should
  // too; it tells how far the bulk of the samples, those the median stands
  // for, disagree. Relative to the median, so that a microsecond kernel
  // and a second-long GEMM compare.
  if (samples.size() < 2)
    return 0;
  std::sort(samples.begin(), samples.end());
  double middle = quantile(samples, 0.5);
  if (middle <= 0)
    return 0;
  return (quantile(samples, 0.75) - quantile(samples, 0.25)) / middle;
}

} // namespace bmrt::calibrate
