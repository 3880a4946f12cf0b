//===- Calibrate.h - bmrt-calibrate: measuring this machine -----*- C++ -*-===//
//
// bmrt-calibrate times the runtime's own kernels and communicator (the code
// the trainer runs, so the planner's numbers are the trainer's) and writes
// what it measured as JSON (format "bmrt-calibration-1", issue 15); `bmc
// calibrate` turns that into a cluster file for `--cluster`.
//
// Under mpirun every rank measures at once, loading the machine as training
// does; rank 0 writes. A time is the median over repetitions on each rank,
// then the maximum over ranks: the slowest rank sets the pace of a step.
// Each time comes with its spread over the repetitions (Timing::spread), so
// that a reader can tell a steady measurement from a noisy one (issue 24).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CALIBRATE_CALIBRATE_H
#define BMRT_CALIBRATE_CALIBRATE_H

#include "bmrt/Comm.h"
#include "bmrt/Device.h"
#include "bmrt/Tensor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bmrt::calibrate {

struct Options {
  std::string output;  // empty: stdout
  bool quick = false;  // a small grid and small sizes, for tests
  int threads = 1;     // per rank
  int64_t maxBytes = 0; // largest collective; 0: the mode's default
  std::string device = "cpu"; // the backend measured
};

/// The options, or nullopt after printing --help. Throws bmrt::Error on a
/// bad flag.
std::optional<Options> parseOptions(const std::vector<std::string> &args);

/// Device memory for `count` floats, zero-filled, freed with the object.
class Buffer {
public:
  Buffer(Device &device, int64_t count);
  ~Buffer();
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  float *data() const { return pointer; }
  /// The buffer's first numElements(shape) floats as a tensor.
  TensorView view(const Shape &shape) const;

private:
  Device &device;
  float *pointer;
  size_t bytes;
};

/// A measured time and how much its repetitions disagreed.
struct Timing {
  /// Seconds of one call: the median sample on each rank, the maximum over
  /// ranks.
  double seconds = 0;
  /// The relative interquartile range of the samples (relativeSpread in
  /// Spread.h), the largest over ranks.
  double spread = 0;
};

/// What every measurement needs: the ranks, the device, the flags, and a
/// clock that times a function on every rank at once.
class Bench {
public:
  /// `targetSeconds`: how long the repetitions of one measurement last.
  Bench(Communicator &world, Device &device, const Options &options,
        double targetSeconds);

  Communicator &world() { return comm; }
  Device &device() { return dev; }
  Stream &stream() { return dev.computeStream(); }
  const Options &options() const { return opts; }

  /// The time of one call of `run`, with its spread: a first call (warm-up)
  /// times it roughly; then samples of enough calls to outlast the clock's
  /// noise, each after a barrier, until about targetSeconds; the median
  /// sample on each rank and the samples' spread, each the maximum over
  /// ranks.
  Timing measure(const std::function<void()> &run);
  /// measure(run).seconds, where the spread is not reported.
  double time(const std::function<void()> &run) { return measure(run).seconds; }
  /// The largest `value` of any rank (every rank gets it).
  double maxOverRanks(double value);
  /// Progress on stderr, from rank 0 only.
  void progress(const std::string &line) const;

private:
  double sample(const std::function<void()> &run, int64_t calls);

  Communicator &comm;
  Device &dev;
  const Options &opts;
  double target;
};

/// Bytes a copy must move to stream from memory rather than from caches.
int64_t streamBytes(const Options &options);
/// Floats per buffer of the memory-bound kernels' measurements.
int64_t kernelFloats(const Options &options);

/// One kind of measurement, added to the calibration's JSON object.
void measureGemm(Bench &bench, nlohmann::ordered_json &out);
void measureMemory(Bench &bench, nlohmann::ordered_json &out);
void measureKernels(Bench &bench, nlohmann::ordered_json &out);
/// What offloading the optimizer to the host costs: "host_link_gbps",
/// "host_optimizer_gbps" and "host_memory_gib" (HostRates.cpp).
void measureHost(Bench &bench, nlohmann::ordered_json &out);
/// Only for more than one rank.
void measureCollectives(Bench &bench, nlohmann::ordered_json &out);
/// Only for more than one rank.
void measureOverlap(Bench &bench, nlohmann::ordered_json &out);

/// "date", "machine", "versions" (collective: every rank calls it).
void describeMachine(Communicator &world, Stream &stream,
                     nlohmann::ordered_json &out);

/// formatRate(3.1e9, "B") is "3.1 GB/s".
std::string formatRate(double perSecond, const char *unit);

} // namespace bmrt::calibrate

#endif // BMRT_CALIBRATE_CALIBRATE_H
