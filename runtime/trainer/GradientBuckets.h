//===- GradientBuckets.h - gradient reduction during the backward -*- C++ -*-===//
//
// Data-parallel gradient reduction overlapped with the backward pass, as
// PyTorch DDP's buckets and Megatron-LM's --overlap-grad-reduce do it.
// Parameters are grouped into buckets in the order the step program makes
// their gradients final (the last instruction writing each gradient slot),
// each bucket filled to a threshold (4 MiB by default) and a parameter
// larger than that a bucket of its own. While the backward runs, the
// executor's instruction hook starts a bucket's collective (all-reduce, or
// under ZeRO 2 and 3 reduce-scatter over dp) as soon as its last gradient
// is written, and between instructions tests every bucket in flight once:
// with one thread per rank that is what lets MPI progress them. finish()
// waits for all of them before the norm and the optimizer step.
//
// The sums are the blocking path's (Parallel::reduceGradient) on the same
// data, through a flat copy per bucket: all-reduce buckets are the
// gradients back to back; reduce-scatter buckets hold dp blocks, block r
// the r-th padded chunk of every gradient, so that each rank receives its
// chunk of each, as reduceGradient's padded reduce-scatter gives it.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_GRADIENTBUCKETS_H
#define BMRT_TRAINER_GRADIENTBUCKETS_H

#include "Parallel.h"

#include "bmrt/Comm.h"
#include "bmrt/Executor.h"

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace bmrt {

class GradientBuckets {
public:
  /// What a parameter's gradient is reduced with (Parallel::singleReduction).
  using ReductionOf = std::function<GradientReduction(const ParamSlot &)>;
  /// Adds seconds this rank was blocked communicating in a group.
  using TimeSink = std::function<void(const std::string &group, double)>;

  /// Buckets for the trained parameters of `params` on `stage`, run by
  /// `executor`, whose reduction is one collective; buffers from `device`
  /// (workspace). `params` must not move while this lives.
  GradientBuckets(std::vector<ParamSlot> &params, int stage,
                  Executor &executor, Device &device, size_t thresholdBytes,
                  ReductionOf reductionOf, TimeSink addTime);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets &) = delete;
  GradientBuckets &operator=(const GradientBuckets &) = delete;

  bool empty() const { return buckets.empty(); }
  size_t size() const { return buckets.size(); }
  /// Whether `p`'s gradient is reduced here rather than by the trainer.
  bool covers(const ParamSlot &p) const { return covered.count(&p) > 0; }

  /// Makes the executor's next run (or backward, in a pipeline) reduce
  /// every bucket through its instruction hook. Without ZeRO 2 and 3 this
  /// is the step's last micro-batch: a bucket first adds the gradient to
  /// the micro-batch sum where there is one and reduces that. Under ZeRO 2
  /// and 3 every micro-batch is reduce-scattered; `startsSum`: this one's
  /// shard starts the sum instead of adding to it.
  void arm(bool startsSum);
  /// The hook: starts the buckets final after instruction `index`, then
  /// tests each in flight once.
  void afterInstruction(size_t index);
  /// Waits for every bucket and writes the sums where the optimizer reads
  /// them (the gradient or its sum; under ZeRO 2 and 3 the shard's sum).
  void finish();

  /// Per bucket, the instruction after which the last armed run started it.
  std::vector<size_t> startedAfter() const;
  /// Per bucket, the instruction after which its gradients are final.
  std::vector<size_t> finalAfter() const;
  /// Seconds from the first bucket's start to the end of the last wait,
  /// summed over the runs since the last call.
  double takeOverlapWindow();

private:
  struct Bucket {
    std::vector<ParamSlot *> params;
    /// Where each gradient (all-reduce) or each one's chunk (reduce-scatter)
    /// starts in a block.
    std::vector<size_t> offsets;
    GradientReduction reduction;
    DType dtype = DType::F32;
    /// Elements of one block: the gradients', or their chunks'.
    size_t count = 0;
    size_t gradientBytes = 0;
    size_t finalAfter = 0, startedAfter = 0;
    /// The collective's send buffer (dp blocks when scattering), then a
    /// reduce-scatter's result.
    void *buffer = nullptr;
    size_t bufferBytes = 0;
    PendingCollective pending;
  };

  void build(std::vector<ParamSlot> &params, int stage, size_t thresholdBytes,
             const ReductionOf &reductionOf);
  void allocate(Bucket &bucket);
  void start(Bucket &bucket, size_t index);
  void pack(Bucket &bucket);
  void unpack(Bucket &bucket);
  static void *result(const Bucket &bucket);
  template <typename F> void timed(const Bucket &bucket, F call);

  Executor &executor;
  Device &device;
  const TrainerKernels &kernels() const { return device.backend().trainer; }
  /// Copies `from`'s bytes to `to` (one size) on the executor's stream.
  void copyView(const TensorView &from, const TensorView &to) {
    device.copyOnDevice(to.data, from.data, from.bytes(), executor.stream());
  }
  TimeSink addTime;
  std::vector<Bucket> buckets;
  std::set<const ParamSlot *> covered;
  bool armed = false, startsSum = false;
  size_t next = 0;
  std::chrono::steady_clock::time_point windowBegin;
  double window = 0;
};

} // namespace bmrt

#endif // BMRT_TRAINER_GRADIENTBUCKETS_H
