//===- StepReport.h - what each step prints and logs -------------*- C++ -*-===//
//
// One line per step on the terminal, and the same as one JSON line in the
// log, with memory split by the planner's kinds so that a run can be put
// beside its plan's prediction.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_STEPREPORT_H
#define BMRT_TRAINER_STEPREPORT_H

#include "LrSchedule.h"
#include "TrainerOptions.h"

#include "bmrt/Device.h"
#include "bmrt/Optimizer.h"

#include <array>
#include <cstdio>
#include <map>
#include <string>

namespace bmrt {

struct StepReport {
  int64_t step = 0, steps = 0;
  double loss = 0, gradNorm = 0, seconds = 0;
  float lr = 0;
  int64_t items = 0;
  const char *itemName = "samples";
  /// This process's rank, and the seconds its collectives took per group
  /// of mesh axes ("tp", "dp+tp"); the rest of the step is compute.
  int rank = 0;
  std::map<std::string, double> communication;
  /// Seconds waiting for the pipeline's other stages (0 without one).
  double bubble = 0;
  /// Seconds from the first gradient bucket's start to the end of the last
  /// wait: the span the data-parallel reduction overlapped the backward
  /// (0 when it did not). The time blocked in it is in `communication`.
  double overlapWindow = 0;
  std::array<size_t, kNumMemoryKinds> peakBytes{};
  size_t peakTotal = 0;
  /// With the optimizer offloaded: the host memory it holds at most, and
  /// the seconds of its phases (OptimizerOffload::takeTimes); else empty.
  size_t hostPeakTotal = 0;
  std::map<std::string, double> offload;

  /// "step   10/200 ( 5%) | loss 5.8123 | ...", unless options.quiet.
  void print(const TrainerOptions &options, std::FILE *out) const;
  /// The same as one JSON object on one line.
  std::string json() const;
};

/// The JSON lines of --log, appended: each line written and flushed, any
/// failure (a full disk, an I/O error) one error naming the file, so that a
/// run never ends with success and a short log.
class StepLog {
public:
  /// Opens `path` to append; throws bmrt::Error if it cannot.
  explicit StepLog(const std::string &path);
  ~StepLog();
  StepLog(const StepLog &) = delete;
  StepLog &operator=(const StepLog &) = delete;

  /// Appends `line` and a newline, flushed to the kernel.
  void write(const std::string &line);
  /// Closes the file, throwing if the last bytes could not be written.
  void close();

private:
  [[noreturn]] void fail(int error) const;
  std::string path;
  std::FILE *file = nullptr;
};

/// The optimizer's settings and the learning-rate schedule, from the
/// trainer's flags and the plan's optimizer ("adamw" or "sgd").
struct Hyperparameters {
  AdamWConfig adamw;
  SgdConfig sgd;
  LambConfig lamb;
  LarsConfig lars;
  LrSchedule schedule;

  static Hyperparameters from(const TrainerOptions &options,
                              const std::string &optimizer);
  /// "adamw (lr 3e-04, warm-up 20, cosine to 3e-05, weight decay 0.01,
  /// clip 1)".
  std::string describe(const std::string &optimizer) const;
  float clip = 1.0f;
};

} // namespace bmrt

#endif // BMRT_TRAINER_STEPREPORT_H
