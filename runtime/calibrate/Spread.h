//===- Spread.h - how far repeated samples of one time disagree -*- C++ -*-===//
//
// Pure functions of a list of samples, apart from the rest of
// bmrt-calibrate so that a unit test can link them alone.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CALIBRATE_SPREAD_H
#define BMRT_CALIBRATE_SPREAD_H

#include <vector>

namespace bmrt::calibrate {

/// The q-quantile (q in [0, 1]) of ascending `sorted` (not empty),
/// interpolated linearly between order statistics (numpy's default), so
/// that 3 samples still have quartiles and q = 0.5 is the usual median.
double quantile(const std::vector<double> &sorted, double q);

/// (Q3 - Q1) / median of `samples`; 0 for fewer than two samples or a
/// median of 0.
double relativeSpread(std::vector<double> samples);

} // namespace bmrt::calibrate

#endif // BMRT_CALIBRATE_SPREAD_H
