//===- LayerwiseUpdate.h - LAMB and LARS over a list of tensors -*- C++ -*-===//
//
// LAMB and LARS scale each tensor's step by norms of the whole tensor. A
// rank holds parts of tensors (tensor parallelism's shards, ZeRO's dp
// ranges), so a step runs in phases: this rank's squared norms, their sums
// over the ranks holding the other parts (the caller's `wholeSums`; none
// on one device), then the per-tensor steps. The trainer and
// bmrt-optimizer-check both run these.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_LAYERWISEUPDATE_H
#define BMRT_TRAINER_LAYERWISEUPDATE_H

#include "bmrt/Backend.h"

#include <functional>
#include <vector>

namespace bmrt {

/// This rank's part of one tensor and its optimizer state; the gradient
/// buffer is overwritten (LAMB's direction).
struct TensorUpdate {
  TensorView value, grad, first, second;
};

/// Turns this rank's sums (two per tensor, in order) into sums over every
/// part of each tensor.
using WholeSums = std::function<void(std::vector<float> &sums)>;

void lambStep(const TrainerKernels &kernels, Stream &stream,
              const std::vector<TensorUpdate> &tensors,
              const LambConfig &config, float lr, int64_t step, float gradScale,
              const WholeSums &wholeSums);

void larsStep(const TrainerKernels &kernels, Stream &stream,
              const std::vector<TensorUpdate> &tensors,
              const LarsConfig &config, float lr, float gradScale,
              const WholeSums &wholeSums);

} // namespace bmrt

#endif // BMRT_TRAINER_LAYERWISEUPDATE_H
