//===- Bench.cpp - median times over repetitions, all ranks at once -------===//
//
// Every rank runs the same number of samples (fixed from the slowest rank's
// warm-up), each after a barrier, so that the ranks load the machine
// together as the ranks of a training step do.
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"
#include "Spread.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace bmrt::calibrate {
namespace {

/// A sample runs at least this long, so that the clock's resolution and
/// the skew of the barrier's exit across ranks (microseconds) stay below a
/// percent of it.
constexpr double kMinSampleSeconds = 1e-3;
/// Enough samples for a median that ignores a preempted one; few enough
/// that the largest GEMMs of the grid stay affordable.
constexpr int64_t kMinSamples = 3;
constexpr int64_t kMaxSamples = 100;

} // namespace

Buffer::Buffer(Device &device, int64_t count)
    : device(device), bytes(static_cast<size_t>(count) * sizeof(float)) {
  pointer = static_cast<float *>(device.allocate(bytes, MemoryKind::Workspace));
}

Buffer::~Buffer() { device.deallocate(pointer, bytes, MemoryKind::Workspace); }

TensorView Buffer::view(const Shape &shape) const {
  return TensorView{pointer, DType::F32, shape};
}

Bench::Bench(Communicator &world, Device &device, const Options &options,
             double targetSeconds)
    : comm(world), dev(device), opts(options), target(targetSeconds) {}

double Bench::sample(const std::function<void()> &run, int64_t calls) {
  stream().synchronize();
  comm.barrier();
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i)
    run();
  stream().synchronize();
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(calls);
}

Timing Bench::measure(const std::function<void()> &run) {
  // The warm-up (caches, page faults, the BLAS library's buffers) also
  // tells how long a call takes, roughly (it is slower than the rest).
  double first = std::max(maxOverRanks(sample(run, 1)), 1e-9);
  int64_t calls = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(kMinSampleSeconds / first)));
  int64_t samples = std::clamp<int64_t>(
      std::llround(target / (first * static_cast<double>(calls))),
      kMinSamples, kMaxSamples);
  std::vector<double> seconds;
  for (int64_t i = 0; i < samples; ++i)
    seconds.push_back(sample(run, calls));
  std::sort(seconds.begin(), seconds.end());
  double median = quantile(seconds, 0.5);
  double spread = relativeSpread(seconds);
  return {maxOverRanks(median), maxOverRanks(spread)};
}

double Bench::maxOverRanks(double value) {
  // Communicators sum, not maximise: gather every rank's value (8 bytes
  // moved as one I64 element) and take the largest.
  std::vector<double> all(comm.size());
  comm.allGather(&value, all.data(), 1, DType::I64, stream());
  return *std::max_element(all.begin(), all.end());
}

void Bench::progress(const std::string &line) const {
  if (comm.rank() != 0)
    return;
  std::fprintf(stderr, "calibrate: %s\n", line.c_str());
  std::fflush(stderr);
}

} // namespace bmrt::calibrate
