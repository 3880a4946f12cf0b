//===- Broadcast.cpp - numpy broadcasting merged into few dims ------------===//

#include "bmrt/Broadcast.h"

namespace bmrt {
namespace {

/// `shape`'s row-major strides aligned on the right to `rank` dims, 0 where
/// it is stretched (a dim of 1, or a missing one).
std::vector<int64_t> alignedStrides(const Shape &shape, int64_t rank) {
  int64_t shift = rank - static_cast<int64_t>(shape.size());
  std::vector<int64_t> aligned(rank, 0);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] != 1)
      aligned[shift + d] = stride;
    stride *= shape[d];
  }
  return aligned;
}

} // namespace

MergedBroadcast mergeBroadcast(const Shape &out,
                               const std::vector<const Shape *> &operands) {
  int64_t rank = static_cast<int64_t>(out.size());
  size_t n = operands.size();
  std::vector<std::vector<int64_t>> aligned;
  for (const Shape *shape : operands)
    aligned.push_back(alignedStrides(*shape, rank));
  MergedBroadcast plan;
  plan.strides.resize(n);
  for (int64_t d = 0; d < rank; ++d) {
    if (out[d] == 1)
      continue;
    // Dim d continues the previous merged dim when every operand's stride
    // there is its stride here times this dim's size (both contiguous, or
    // both stretched).
    bool merges = !plan.dims.empty();
    for (size_t k = 0; k < n && merges; ++k)
      merges = plan.strides[k].back() == aligned[k][d] * out[d];
    if (merges) {
      plan.dims.back() *= out[d];
      for (size_t k = 0; k < n; ++k)
        plan.strides[k].back() = aligned[k][d];
      continue;
    }
    plan.dims.push_back(out[d]);
    for (size_t k = 0; k < n; ++k)
      plan.strides[k].push_back(aligned[k][d]);
  }
  return plan;
}

} // namespace bmrt
