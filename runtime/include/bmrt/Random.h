//===- Random.h - splitmix64, the runtime's counter-based hash --*- C++ -*-===//
//
// The synthetic data (trainer/Data.cpp) and the weights made at load time
// (core/Init.cpp) draw from splitmix64 used as a counter-based generator:
// every value is a function of a key and a counter alone, so it is the same
// on every machine and in any order. Steele, Lea and Flood 2014, "Fast
// splittable pseudorandom number generators".
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_RANDOM_H
#define BMRT_RANDOM_H

#include <cstdint>

namespace bmrt {

/// splitmix64's increment (2^64 / the golden ratio).
inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ULL;

/// splitmix64's output function: a bijective 64-bit mix, also a good hash
/// of a counter.
inline uint64_t splitMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

} // namespace bmrt

#endif // BMRT_RANDOM_H
