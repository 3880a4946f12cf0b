//===- Broadcast.h - index and broadcast helpers of the kernels -*- C++ -*-===//
//
// Private to runtime/cpu. The kernels see only contiguous row-major tensors,
// so every index question reduces to a few long rows:
//  - an axis splits a shape into [outer, dim, inner];
//  - numpy broadcasting drops the output's dims of size 1 and merges
//    neighbouring dims that every operand walks contiguously (or not at
//    all). A bias add [N, C] + [C] becomes N rows of C with both operands
//    stepping by one; [N, C] * [N, 1] becomes N rows with the second operand
//    fixed; same-shape operands become one row. Within a row each operand
//    steps by 0 or 1, so the kernels' row loops vectorise.
// Long rows are cut into chunks so that OpenMP has work to share even when
// the whole tensor is one row.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CPU_BROADCAST_H
#define BMRT_CPU_BROADCAST_H

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

/// Calls fn with a value of the unsigned integer type as wide as one
/// element: data movement never looks inside an element, so one
/// instantiation per width serves every dtype.
template <typename Fn> void withElementWidth(DType dtype, Fn &&fn) {
  switch (sizeOf(dtype)) {
  case 1:
    return fn(uint8_t{});
  case 2:
    return fn(uint16_t{});
  case 4:
    return fn(uint32_t{});
  default:
    return fn(uint64_t{});
  }
}

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

/// Plans reading `operands` (each broadcastable to `out`) as `out`.
template <int N>
BroadcastPlan<N> planBroadcast(const Shape &out,
                               const std::array<const Shape *, N> &operands) {
  int64_t rank = static_cast<int64_t>(out.size());
  // Each operand's strides aligned on the right to out's dims.
  std::array<Ints, N> aligned;
  for (int k = 0; k < N; ++k) {
    const Shape &shape = *operands[k];
    int64_t shift = rank - static_cast<int64_t>(shape.size());
    aligned[k].assign(rank, 0);
    int64_t stride = 1;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (shape[d] != 1)
        aligned[k][shift + d] = stride;
      stride *= shape[d];
    }
  }
  BroadcastPlan<N> plan;
  for (int64_t d = 0; d < rank; ++d) {
    if (out[d] == 1)
      continue;
    // Dim d continues the previous merged dim when every operand's stride
    // there is its stride here times this dim's size (both contiguous, or
    // both stretched).
    bool merges = !plan.dims.empty();
    for (int k = 0; k < N && merges; ++k)
      merges = plan.strides[k].back() == aligned[k][d] * out[d];
    if (merges) {
      plan.dims.back() *= out[d];
      for (int k = 0; k < N; ++k)
        plan.strides[k].back() = aligned[k][d];
      continue;
    }
    plan.dims.push_back(out[d]);
    for (int k = 0; k < N; ++k)
      plan.strides[k].push_back(aligned[k][d]);
  }
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
