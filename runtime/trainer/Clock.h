//===- Clock.h - the trainer's wall-clock timings ---------------*- C++ -*-===//
//
// Private to runtime/trainer: the pipeline's waits, the gradient buckets'
// windows and the offloaded optimizer's phases are timed alike.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_CLOCK_H
#define BMRT_TRAINER_CLOCK_H

#include <chrono>

namespace bmrt {

/// Seconds from `begin` to now.
inline double secondsSince(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
      .count();
}

} // namespace bmrt

#endif // BMRT_TRAINER_CLOCK_H
