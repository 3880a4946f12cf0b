//===- Format.h - sizes as people read them ---------------------*- C++ -*-===//
//
// One spelling of a byte count for every printer: the planner's text and
// HTML reports and the calibrator's progress lines. Header-only, so that the
// planner, which links no runtime library but the schedules, can use it.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_FORMAT_H
#define BMRT_FORMAT_H

#include <cstdio>
#include <string>

namespace bmrt {

/// How many digits formatBytes gives the number in its unit.
enum class BytesDigits {
  /// Two decimals in GiB, one in KiB and MiB, none in B ("66.27 GiB",
  /// "4.8 MiB"): estimates, which plans print in aligned columns.
  Fixed,
  /// As many as the value needs, up to six significant ("1 KiB",
  /// "1.5 MiB"): exact sizes, such as the buffers calibration times.
  Shortest,
};

/// `bytes` in the largest of B, KiB, MiB and GiB it reaches.
inline std::string formatBytes(double bytes,
                               BytesDigits digits = BytesDigits::Fixed) {
  static const char *const kUnits[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  static const int kFixedDecimals[] = {0, 1, 1, 2};
  // Room for any finite double in fixed notation (up to 309 digits).
  char text[400];
  if (digits == BytesDigits::Fixed)
    std::snprintf(text, sizeof text, "%.*f %s", kFixedDecimals[unit], bytes,
                  kUnits[unit]);
  else
    std::snprintf(text, sizeof text, "%g %s", bytes, kUnits[unit]);
  return text;
}

} // namespace bmrt

#endif // BMRT_FORMAT_H
