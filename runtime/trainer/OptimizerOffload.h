//===- OptimizerOffload.h - the optimizer step on the host -----*- C++ -*-===//
//
// ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale
// Model Training", section 4): the optimizer state and an fp32 copy of
// every range this rank updates live in host memory, and the optimizer
// step runs on the host's cores. Each step the device's gradient ranges
// are copied down, the host steps its copies, and the updated parameter
// ranges are copied back up; the three phases run one after another, which
// is what bmc's planner prices (passes/plan/StepCoster.cpp).
//
// The host is a device of the CPU backend, so that the host step runs the
// CPU backend's optimizer kernels; on the CPU backend this is the same code
// path with host memory on both sides, and its losses are the ones of a run
// without offload, bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_OPTIMIZEROFFLOAD_H
#define BMRT_TRAINER_OPTIMIZEROFFLOAD_H

#include "LayerwiseUpdate.h"

#include "bmrt/Backend.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace bmrt {

class OptimizerOffload {
public:
  /// Offloads from `device`; the host step runs on `threads` threads.
  OptimizerOffload(Device &device, int threads);

  /// The host: where the optimizer state is allocated and stepped.
  Device &host() { return *hostDevice; }
  Stream &hostStream() { return hostDevice->computeStream(); }
  const TrainerKernels &hostKernels() const {
    return hostDevice->backend().trainer;
  }

  /// Allocates the host's copies of the device ranges `ranges` (whose
  /// moments are already host memory), in the order every step passes them.
  void hold(const std::vector<TensorUpdate> &ranges);
  /// The host's copies of `ranges`: the gradients copied down on `stream`
  /// (the device's), and the parameters too when the host's are stale.
  const std::vector<TensorUpdate> &
  copyDown(const std::vector<TensorUpdate> &ranges, Stream &stream);
  /// Copies the host's stepped parameters back into `ranges` on `stream`,
  /// once the host step has run; returns when they have landed.
  void copyUp(const std::vector<TensorUpdate> &ranges, Stream &stream);
  /// Seconds since the last take of the copies down, the host step and the
  /// copies up ("copy_down", "host_step", "copy_up"), as the plan items
  /// them.
  std::map<std::string, double> takeTimes();
  /// The device's parameters changed (a resume loaded them): the next
  /// copyDown reads them again.
  void parametersChanged() { stale = true; }

private:
  void checkHeld(const std::vector<TensorUpdate> &ranges) const;
  TensorView hostCopy(const TensorView &like, MemoryKind kind);

  Device &device;
  std::unique_ptr<Device> hostDevice;
  /// Per range, in the order the trainer updates them: the host's fp32
  /// parameter, its gradient, and the (host) moments.
  std::vector<TensorUpdate> copies;
  bool stale = true;
  /// When the last copy down ended, and the seconds of each phase.
  std::chrono::steady_clock::time_point downEnded;
  std::map<std::string, double> times;
};

} // namespace bmrt

#endif // BMRT_TRAINER_OPTIMIZEROFFLOAD_H
