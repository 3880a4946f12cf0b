//===- Transpose.h - a transpose simplified to fewer dims -------*- C++ -*-===//
//
// Shared by the backends' transpose kernels (runtime/cpu/
// DataMovementKernels.cpp, runtime/cuda/DataMovementKernels.cu): size-1
// dims dropped, and input dims that stay adjacent and in order in the
// output merged into one. [B, T, H, D] -> [B, H, T, D] stays 4-D, but
// [B, T, H, D] -> [B, T, D, H] becomes a batched 2-D transpose
// [B*T, H, D] -> [B*T, D, H].
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRANSPOSE_H
#define BMRT_TRANSPOSE_H

#include "bmrt/Tensor.h"

#include <cstdint>
#include <vector>

namespace bmrt {

struct TransposePlan {
  std::vector<int64_t> inDims; // the merged input dims
  std::vector<int64_t> perm;   // output dim i is merged input dim perm[i]
  /// The output's merged dims, and the input stride of each: the gather
  /// out[i] = in[sum(index_d * inStrideOfOut[d])].
  std::vector<int64_t> outDims, inStrideOfOut;

  int64_t rank() const { return static_cast<int64_t>(perm.size()); }
};

/// Simplifies the transpose of a tensor of shape `in` by `perm` (output dim
/// i is input dim perm[i]).
TransposePlan simplifyTranspose(const Shape &in,
                                const std::vector<int64_t> &perm);

} // namespace bmrt

#endif // BMRT_TRANSPOSE_H
