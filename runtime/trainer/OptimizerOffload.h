//===- OptimizerOffload.h - the optimizer step on the host -----*- C++ -*-===//
//
// ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale
// Model Training", section 4): the optimizer state and an fp32 copy of
// every range this rank updates live in host memory, and the optimizer
// step runs on the host's cores. Each step the device's gradient ranges
// are copied down, the host steps its copies, and the updated parameter
// ranges are copied back up.
//
// Two ways to run it, both priced by bmc's planner (passes/plan/
// StepCoster.cpp, offloadExposed):
// - behind the next forward (stepBehind), for the optimizers whose update
//   of a range reads that range alone (AdamW, SGD): a worker thread takes
//   the ranges in the order the next forward first reads them, copies each
//   one's gradient down, steps it and copies it up, each copy on a stream
//   of its own, while the trainer goes on; the first reader of each
//   parameter, and the first writer of its gradient, waits (awaitUpTo) for
//   its range only. The forward thus starts once the first range has
//   landed, and the rest of the host's work runs behind it. ZeRO-Offload
//   copies the gradients down during the backward and overlaps the host's
//   step only by delaying the update a step (its DPU); here all three
//   phases run behind the forward and the losses stay those of a run
//   without offload.
// - one after another (copyDown, the step, copyUp), for LAMB and LARS,
//   whose trust ratios sum norms over the ranks holding a tensor's other
//   parts: collectives that belong on the trainer's thread.
//
// The host's parameter and gradient copies are page-locked for the device
// where it can (Device::pinHostMemory: CUDA's cudaHostRegister), so that
// the copies run at the link's rate without staging.
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
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace bmrt {

class OptimizerOffload {
public:
  /// Offloads from `device`; the host step runs on `threads` threads.
  OptimizerOffload(Device &device, int threads);
  /// Waits for a step still running behind (its error, if any, dropped).
  ~OptimizerOffload();
  OptimizerOffload(const OptimizerOffload &) = delete;
  OptimizerOffload &operator=(const OptimizerOffload &) = delete;

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
  /// A step still running behind must have settled.
  const std::vector<TensorUpdate> &
  copyDown(const std::vector<TensorUpdate> &ranges, Stream &stream);
  /// Copies the host's stepped parameters back into `ranges` on `stream`,
  /// once the host step has run; returns when they have landed.
  void copyUp(const std::vector<TensorUpdate> &ranges, Stream &stream);

  /// Steps range k's host copy on the host's stream.
  using RangeStep = std::function<void(const TensorUpdate &copy)>;
  /// Called on the trainer's thread for each range k once it has landed.
  using Landed = std::function<void(size_t k)>;
  /// Hands the worker thread (started on the first call, kept for the
  /// run) `ranges` in `order` (a permutation of them), each to be copied
  /// down once the work on `stream` so far has run, stepped, and copied up
  /// as soon as it is stepped; returns at once. The ranges' gradients and
  /// parameters must not be written, nor their parameters read, until
  /// awaitUpTo has seen them land.
  void stepBehind(const std::vector<TensorUpdate> &ranges, Stream &stream,
                  std::vector<size_t> order, RangeStep step, Landed landed);
  /// Blocks until the ranges at positions [0, position] of the order have
  /// landed, orders `stream` after their copies and calls `landed` for
  /// each not reported before. Returns at once when no step is behind;
  /// rethrows the worker's error.
  void awaitUpTo(size_t position, Stream &stream);
  /// Every range of a step behind (before the next copy down, a
  /// checkpoint, the end of training).
  void settle(Stream &stream);

  /// Seconds since the last take of the copies down, the host step, the
  /// copies up and the trainer's waits for them ("copy_down", "host_step",
  /// "copy_up", "wait"), as the plan items them. Behind the forward, the
  /// three phases count when the step they ran behind has waited for them
  /// all.
  std::map<std::string, double> takeTimes();
  /// The device's parameters changed (a resume loaded them): the next
  /// copyDown reads them again.
  void parametersChanged() { stale = true; }

private:
  void checkHeld(const std::vector<TensorUpdate> &ranges) const;
  TensorView hostCopy(const TensorView &like, MemoryKind kind);
  void copyRangeDown(size_t k, const TensorUpdate &range, bool parameters,
                     Stream &stream);
  void copyRangeUp(size_t k, const TensorUpdate &range, Stream &stream);
  /// A step handed to the worker.
  struct Job {
    std::vector<TensorUpdate> ranges;
    bool readParameters = false;
    RangeStep step;
  };
  void workerLoop();
  struct Phases;
  void runBehind(const Job &job, Phases &spent);
  /// Waits until the worker has finished the step behind; takes its times
  /// and rethrows its error.
  void finishStep();

  Device &device;
  std::unique_ptr<Device> hostDevice;
  /// Per range, in the order the trainer updates them: the host's fp32
  /// parameter, its gradient, and the (host) moments.
  std::vector<TensorUpdate> copies;
  /// The copies the device page-locked (pinHostMemory), unpinned at the end.
  std::vector<void *> pinned;
  bool stale = true;
  /// When the last copy down ended, and the seconds of each phase.
  std::chrono::steady_clock::time_point downEnded;
  std::map<std::string, double> times;

  /// A step behind the forward: the worker, the device streams its copies
  /// down and up run on, the event the copies down wait for, one event per
  /// range's copy up, the order and what landing calls; whether a step is
  /// behind (the trainer's thread only).
  std::thread worker;
  bool behind = false;
  std::unique_ptr<Stream> downStream, upStream;
  std::unique_ptr<Event> gradientsWritten;
  std::vector<std::unique_ptr<Event>> upEvents;
  std::vector<size_t> order;
  Landed landed;
  /// Positions the trainer has seen land (the trainer's thread only).
  size_t reported = 0;
  /// Guarded by `mutex`: the step handed over, whether the worker is to
  /// end, positions it has copied up, whether it has finished the step,
  /// its error, and its seconds in each phase.
  struct Phases {
    double down = 0, step = 0, up = 0;
  };
  std::mutex mutex;
  std::condition_variable handed, progressed;
  std::optional<Job> job;
  bool ending = false;
  size_t done = 0;
  bool finished = false;
  std::exception_ptr error;
  Phases workerSpent;
};

} // namespace bmrt

#endif // BMRT_TRAINER_OPTIMIZEROFFLOAD_H
