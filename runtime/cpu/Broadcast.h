//===- Broadcast.h - index and broadcast helpers of the kernels -*- C++ -*-===//
//
// Private to runtime/cpu. The kernels see only contiguous row-major tensors,
// so every index question reduces to a few long rows:
//  - an axis splits a shape into [outer, dim, inner];
//  - numpy broadcasting is merged into rows (bmrt/Broadcast.h, shared with
//    the CUDA backend): [N, C] * [N, 1] becomes N rows with the second
//    operand fixed. Within a row each operand steps by 0 or 1, so the
//    kernels' row loops vectorise.
// Long rows are cut into chunks so that OpenMP has work to share even when
// the whole tensor is one row.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CPU_BROADCAST_H
#define BMRT_CPU_BROADCAST_H

#include "bmrt/Broadcast.h"
#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace bmrt::cpu::detail {

/// Loops over fewer elements than this stay on one thread: starting an
/// OpenMP team costs a few microseconds, more than a small tensor's loop.
inline constexpr int64_t kParallelGrain = int64_t(1) << 15;

/// The elements one parallel task of an elementwise loop covers: long enough
/// to amortise the task's index arithmetic, short enough to balance.
inline constexpr int64_t kChunk = int64_t(1) << 14;

using bmrt::contiguousStrides;
using bmrt::AxisSplit;
using bmrt::splitAt;

using bmrt::withElementWidth;

/// Numpy broadcasting of N operands to one output, merged into rows.
template <int N> struct BroadcastPlan {
  /// Merged output dims, outermost first; never empty (a scalar is [1]).
  Ints dims;
  /// strides[k][d]: operand k's element stride along merged dim d, 0 where
  /// the operand is stretched.
  std::array<Ints, N> strides;

  int64_t rowLength() const { return dims.back(); }
  int64_t rows() const {
    int64_t n = 1;
    for (size_t d = 0; d + 1 < dims.size(); ++d)
      n *= dims[d];
    return n;
  }
  /// Whether operand k steps by one along a row (else it stays put).
  bool steps(int k) const { return strides[k].back() != 0; }
  /// Each operand's element offset at the start of `row`.
  std::array<int64_t, N> rowStart(int64_t row) const {
    std::array<int64_t, N> offsets{};
    for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) {
      int64_t i = row % dims[d];
      row /= dims[d];
      for (int k = 0; k < N; ++k)
        offsets[k] += i * strides[k][d];
    }
    return offsets;
  }
};

/// Plans reading `operands` (each broadcastable to `out`) as `out`: the
/// shared merge, a scalar as one row of one element.
template <int N>
BroadcastPlan<N> planBroadcast(const Shape &out,
                               const std::array<const Shape *, N> &operands) {
  MergedBroadcast merged =
      mergeBroadcast(out, {operands.begin(), operands.end()});
  BroadcastPlan<N> plan;
  plan.dims = std::move(merged.dims);
  for (int k = 0; k < N; ++k)
    plan.strides[k] = std::move(merged.strides[k]);
  if (plan.dims.empty()) {
    plan.dims.push_back(1);
    for (int k = 0; k < N; ++k)
      plan.strides[k].push_back(0);
  }
  return plan;
}

/// Calls body(outOffset, offsets, count) for consecutive pieces of the
/// output's rows, on every thread when the output is large: the piece is
/// out[outOffset, outOffset + count), and operand k's elements start at
/// offsets[k] and step by plan.steps(k).
template <int N, typename Body>
void forEachPiece(const BroadcastPlan<N> &plan, Body &&body) {
  int64_t length = plan.rowLength(), rows = plan.rows();
  int64_t piecesPerRow = std::max<int64_t>(1, (length + kChunk - 1) / kChunk);
  int64_t pieces = rows * piecesPerRow;
  std::array<int64_t, N> steps;
  for (int k = 0; k < N; ++k)
    steps[k] = plan.steps(k) ? 1 : 0;
#pragma omp parallel for schedule(static) if (rows * length > kParallelGrain)
  for (int64_t p = 0; p < pieces; ++p) {
    int64_t row = p / piecesPerRow;
    int64_t begin = (p % piecesPerRow) * kChunk;
    int64_t count = std::min(kChunk, length - begin);
    std::array<int64_t, N> offsets = plan.rowStart(row);
    for (int k = 0; k < N; ++k)
      offsets[k] += begin * steps[k];
    body(row * length + begin, offsets, count);
  }
}

/// Runs body(begin, end) over [0, n) in chunks, on every thread when n is
/// large: the contiguous loops of unary kernels, casts and fills.
template <typename Body> void forEachChunk(int64_t n, Body &&body) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c)
    body(c * kChunk, std::min(n, (c + 1) * kChunk));
}

} // namespace bmrt::cpu::detail

#endif // BMRT_CPU_BROADCAST_H
