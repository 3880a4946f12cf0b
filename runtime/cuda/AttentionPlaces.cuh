//===- AttentionPlaces.cuh - where attention's queries sit -------*- CUDA -*-===//
//
// Private to the fused attention kernels (AttentionKernels.cu,
// AttentionMma.cu): the device side of bmrt/Attention.h's firstQuery, for
// queries placed among the keys by an op's positions (context parallelism)
// or by the default alignment.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_ATTENTIONPLACES_CUH
#define BMRT_CUDA_ATTENTIONPLACES_CUH

#include <cstdint>

namespace bmrt::cuda {

/// The first of `s` queries that sees key `key` under a causal mask: the
/// first whose place is at least `key`, of `t` keys. Places are
/// `positions` (device memory, non-decreasing; a binary search) or, where
/// that is null, query i's i + t - s.
__device__ inline int firstPlacedAt(const int64_t *positions, int s, int t,
                                    int key) {
  if (!positions)
    return max(0, min(s, key - (t - s)));
  int low = 0, high = s;
  while (low < high) {
    int middle = (low + high) / 2;
    if (positions[middle] < key)
      low = middle + 1;
    else
      high = middle;
  }
  return low;
}

} // namespace bmrt::cuda

#endif // BMRT_CUDA_ATTENTIONPLACES_CUH
