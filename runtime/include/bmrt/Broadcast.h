//===- Broadcast.h - numpy broadcasting merged into few dims ----*- C++ -*-===//
//
// The plan every backend's broadcasting kernels share (runtime/cpu/
// Broadcast.h, runtime/cuda/DeviceLoops.cuh): numpy broadcasting of several
// operands onto one output drops the output's dims of size 1 and merges
// neighbouring dims that every operand walks alike (contiguously, or not
// at all). A bias add [N, C] + [C] becomes N rows of C with both operands
// stepping by one, whatever the model's rank; same-shape operands become
// one row. How the merged loop runs (OpenMP chunks, a CUDA grid) is the
// backend's.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_BROADCAST_H
#define BMRT_BROADCAST_H

#include "bmrt/Tensor.h"

#include <cstdint>
#include <vector>

namespace bmrt {

/// Operands broadcast onto one output, merged.
struct MergedBroadcast {
  /// Merged output dims, outermost first; empty where every dim is 1.
  std::vector<int64_t> dims;
  /// strides[k][d]: operand k's element stride along merged dim d, 0 where
  /// the operand is stretched.
  std::vector<std::vector<int64_t>> strides;
};

/// Plans reading `operands` (each broadcastable to `out`) as `out`.
MergedBroadcast mergeBroadcast(const Shape &out,
                               const std::vector<const Shape *> &operands);

} // namespace bmrt

#endif // BMRT_BROADCAST_H
