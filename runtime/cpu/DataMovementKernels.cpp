//===- DataMovementKernels.cpp - transpose, gather, concat, slice, ... ----===//
//
// Kernels that move elements without looking inside them work on any dtype
// through one instantiation per element width (Broadcast.h's
// withElementWidth). Whole rows move with memcpy wherever the layout allows;
// transposes that reorder the innermost dim go through cache-sized tiles.
//
//===----------------------------------------------------------------------===//

#include "Broadcast.h"

#include "bmrt/Error.h"
#include "bmrt/Transpose.h"
#include "runtime/cpu/Kernels.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

namespace bmrt::cpu {

using namespace detail;

namespace {

/// An element's bytes at `index` of a tensor's storage.
char *bytesAt(const TensorView &t, int64_t index) {
  return static_cast<char *>(t.data) + index * sizeOf(t.dtype);
}

//===----------------------------------------------------------------------===//
// Transpose
//===----------------------------------------------------------------------===//

/// Each output row (the last output dim) is a contiguous run of the input.
template <typename E>
void transposeRows(const E *in, E *out, const Ints &outDims,
                   const Ints &inStrideOfOut) {
  int64_t rank = static_cast<int64_t>(outDims.size());
  int64_t length = outDims.back();
  int64_t rows = numElements(outDims) / length;
#pragma omp parallel for schedule(static) if (rows * length > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (int64_t d = rank - 2, rest = r; d >= 0; --d) {
      offset += (rest % outDims[d]) * inStrideOfOut[d];
      rest /= outDims[d];
    }
    std::memcpy(out + r * length, in + offset, length * sizeof(E));
  }
}

/// The input's contiguous dim lands at output dim p, not last: copy through
/// kTile x kTile tiles of (output dim p, output's last dim), so that the
/// strided side of the copy reuses each cache line it touches kTile times.
template <typename E>
void transposeTiled(const E *in, E *out, const Ints &outDims,
                    const Ints &inStrideOfOut, int64_t p) {
  constexpr int64_t kTile = 32;
  int64_t rank = static_cast<int64_t>(outDims.size());
  Ints outStrides = contiguousStrides(outDims);
  // The other output dims index batches of independent 2-D transposes.
  Ints batchDims, batchIn, batchOut;
  for (int64_t d = 0; d < rank - 1; ++d)
    if (d != p) {
      batchDims.push_back(outDims[d]);
      batchIn.push_back(inStrideOfOut[d]);
      batchOut.push_back(outStrides[d]);
    }
  int64_t rowsP = outDims[p], cols = outDims[rank - 1];
  int64_t outStrideP = outStrides[p], inStrideCol = inStrideOfOut[rank - 1];
  int64_t tilesP = (rowsP + kTile - 1) / kTile;
  int64_t tilesCol = (cols + kTile - 1) / kTile;
  int64_t batches = numElements(batchDims);
  int64_t tasks = batches * tilesP * tilesCol;
  int64_t nb = static_cast<int64_t>(batchDims.size());
#pragma omp parallel for schedule(static) if (batches * rowsP * cols >         \
                                              kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t tileCol = t % tilesCol, tileP = (t / tilesCol) % tilesP;
    int64_t batch = t / (tilesCol * tilesP);
    int64_t inBase = 0, outBase = 0;
    for (int64_t d = nb - 1, rest = batch; d >= 0; --d) {
      int64_t i = rest % batchDims[d];
      rest /= batchDims[d];
      inBase += i * batchIn[d];
      outBase += i * batchOut[d];
    }
    int64_t i0 = tileP * kTile, i1 = std::min(rowsP, i0 + kTile);
    int64_t j0 = tileCol * kTile, j1 = std::min(cols, j0 + kTile);
    for (int64_t i = i0; i < i1; ++i) {
      E *to = out + outBase + i * outStrideP;
      const E *from = in + inBase + i;
      for (int64_t j = j0; j < j1; ++j)
        to[j] = from[j * inStrideCol];
    }
  }
}

template <typename E>
void transposeTyped(const TensorView &x, const TensorView &y,
                    const Ints &perm) {
  if (x.size() == 0)
    return;
  TransposePlan plan = simplifyTranspose(x.shape, perm);
  int64_t rank = plan.rank();
  const E *in = static_cast<const E *>(x.data);
  E *out = static_cast<E *>(y.data);
  // Nothing moves relative to anything else: the bytes are already right.
  if (rank <= 1) {
    std::memcpy(out, in, x.bytes());
    return;
  }
  const Ints &outDims = plan.outDims, &inStrideOfOut = plan.inStrideOfOut;
  if (plan.perm.back() == rank - 1)
    return transposeRows(in, out, outDims, inStrideOfOut);
  int64_t p = std::find(plan.perm.begin(), plan.perm.end(), rank - 1) -
              plan.perm.begin();
  transposeTiled(in, out, outDims, inStrideOfOut, p);
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

/// Marks an index another rank's shard of the table holds.
constexpr int64_t kNotHere = -1;

/// The indices as positions in this rank's `dim` entries of the table
/// (kNotHere where another rank holds them), checked against the whole
/// table here on one thread so that a bad one throws (naming `op`) before
/// any parallel work.
Ints gatherPositions(const char *op, const TensorView &indices, int64_t dim,
                     TableShard shard = {}) {
  int64_t total = shard.total < 0 ? dim : shard.total;
  Ints positions(indices.size());
  auto load = [&](const auto *values) {
    for (int64_t k = 0; k < indices.size(); ++k) {
      int64_t value = static_cast<int64_t>(values[k]);
      int64_t position = value < 0 ? value + total : value;
      if (position < 0 || position >= total)
        BMRT_FAIL(std::string(op) + " index " + std::to_string(value) +
                  " is out of range for a dim of size " +
                  std::to_string(total));
      position -= shard.first;
      positions[k] = position >= 0 && position < dim ? position : kNotHere;
    }
  };
  switch (indices.dtype) {
  case DType::I64:
    load(indices.i64());
    break;
  case DType::I32:
    load(indices.i32());
    break;
  default:
    BMRT_FAIL(std::string(op) + " indices must be i64 or i32, not " +
              nameOf(indices.dtype));
  }
  return positions;
}

/// Gathers single elements (axis is the last dim): one typed load each,
/// not a memcpy call.
template <typename E>
void gatherSingles(const TensorView &data, const Ints &positions,
                   const TensorView &out, const AxisSplit &s) {
  const E *in = static_cast<const E *>(data.data);
  E *to = static_cast<E *>(out.data);
  int64_t count = static_cast<int64_t>(positions.size());
  int64_t total = s.outer * count;
#pragma omp parallel for schedule(static) if (total > kParallelGrain)
  for (int64_t t = 0; t < total; ++t) {
    int64_t position = positions[t % count];
    to[t] = position == kNotHere ? E{} : in[(t / count) * s.dim + position];
  }
}

/// Tasks of a kernel that adds (or otherwise combines) into a tensor at
/// indices that may repeat: each task owns one outer slice and one block of
/// the inner elements (columns), which no other task's updates can reach.
/// So no atomics are needed, and each element combines its updates in a
/// fixed order: the result does not depend on the thread count. Where the
/// outer slices are fewer than the threads (an embedding's gradient has
/// one), the columns are split too, in blocks of 16 or more.
struct ColumnBlocks {
  int64_t blocks, length;

  ColumnBlocks(int64_t outer, int64_t inner) {
    int64_t threads = omp_get_max_threads();
    outer = std::max<int64_t>(outer, 1);
    blocks = std::clamp<int64_t>((threads + outer - 1) / outer, 1,
                                 std::max<int64_t>((inner + 15) / 16, 1));
    length = (inner + blocks - 1) / blocks;
  }
  /// The columns [first, last) of task t (which owns outer slice t /
  /// blocks); empty where the last blocks run past `inner`.
  void columns(int64_t t, int64_t inner, int64_t &first, int64_t &last) const {
    first = (t % blocks) * length;
    last = std::min(inner, first + length);
  }
};

} // namespace

void transpose(Stream &, const TensorView &x, const TensorView &y,
               const Ints &perm) {
  withElementWidth(x.dtype, [&](auto element) {
    transposeTyped<decltype(element)>(x, y, perm);
  });
}

void gather(Stream &, const TensorView &data, const TensorView &indices,
            const TensorView &out, int64_t axis, TableShard shard) {
  AxisSplit s = splitAt(data.shape, axis);
  Ints positions = gatherPositions("gather", indices, s.dim, shard);
  if (s.inner == 1)
    return withElementWidth(data.dtype, [&](auto element) {
      gatherSingles<decltype(element)>(data, positions, out, s);
    });
  int64_t count = static_cast<int64_t>(positions.size());
  int64_t tasks = s.outer * count;
  size_t rowBytes = s.inner * sizeOf(data.dtype);
#pragma omp parallel for schedule(static) if (tasks * s.inner > kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t o = t / count, position = positions[t % count];
    if (position == kNotHere)
      std::memset(bytesAt(out, t * s.inner), 0, rowBytes);
    else
      std::memcpy(bytesAt(out, t * s.inner),
                  bytesAt(data, (o * s.dim + position) * s.inner), rowBytes);
  }
}

void gatherGrad(Stream &, const TensorView &dy, const TensorView &indices,
                const TensorView &ddata, int64_t axis, TableShard shard) {
  AxisSplit s = splitAt(ddata.shape, axis);
  Ints positions = gatherPositions("gather", indices, s.dim, shard);
  if (ddata.size() == 0)
    return;
  int64_t count = static_cast<int64_t>(positions.size());
  ColumnBlocks b(s.outer, s.inner);
  int64_t tasks = s.outer * b.blocks;
  const float *g = dy.f32();
  float *dd = ddata.f32();
  int64_t work = s.outer * std::max(count, s.dim) * s.inner;
#pragma omp parallel for schedule(static) if (work > kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t o = t / b.blocks, j0, j1;
    b.columns(t, s.inner, j0, j1);
    if (j0 >= j1)
      continue;
    for (int64_t d = 0; d < s.dim; ++d)
      std::fill(dd + (o * s.dim + d) * s.inner + j0,
                dd + (o * s.dim + d) * s.inner + j1, 0.f);
    for (int64_t n = 0; n < count; ++n) {
      if (positions[n] == kNotHere)
        continue;
      const float *from = g + (o * count + n) * s.inner;
      float *to = dd + (o * s.dim + positions[n]) * s.inner;
      for (int64_t j = j0; j < j1; ++j)
        to[j] += from[j];
    }
  }
}

//===----------------------------------------------------------------------===//
// Gather and scatter of elements
//===----------------------------------------------------------------------===//

namespace {

/// Where gather_elements and scatter_elements find the data element of each
/// index. The indices are seen as [outer, count, inner] around the axis;
/// index (o, k, i), at position p of the axis, names data's element
///
///   outerOffset[o] + p * stride + innerOffset[i]
///
/// (stride: data's at the axis). The indices' other dims may be smaller
/// than data's (torch.gather's rule), so no row length converts between
/// them: the offsets of the outer and inner indices are tabulated, once.
struct ElementsWalk {
  int64_t outer, count, inner, stride;
  Ints outerOffset, innerOffset;

  ElementsWalk(const Shape &data, const Shape &indices, int64_t axis);
};

/// data's element offset of each index, in row-major order, of the dims
/// [first, last) of the indices' shape.
Ints offsetsOf(const Shape &indices, const Ints &dataStrides, int64_t first,
               int64_t last) {
  Ints offsets{0};
  for (int64_t d = first; d < last; ++d) {
    Ints next;
    next.reserve(offsets.size() * indices[d]);
    for (int64_t base : offsets)
      for (int64_t j = 0; j < indices[d]; ++j)
        next.push_back(base + j * dataStrides[d]);
    offsets = std::move(next);
  }
  return offsets;
}

ElementsWalk::ElementsWalk(const Shape &data, const Shape &indices,
                           int64_t axis) {
  Ints strides = contiguousStrides(data);
  int64_t rank = static_cast<int64_t>(indices.size());
  outerOffset = offsetsOf(indices, strides, 0, axis);
  innerOffset = offsetsOf(indices, strides, axis + 1, rank);
  outer = static_cast<int64_t>(outerOffset.size());
  count = indices[axis];
  inner = static_cast<int64_t>(innerOffset.size());
  stride = strides[axis];
}

template <typename E>
void gatherElementsTyped(const TensorView &data, const Ints &positions,
                         const TensorView &out, const ElementsWalk &w) {
  const E *in = static_cast<const E *>(data.data);
  E *to = static_cast<E *>(out.data);
  int64_t rows = w.outer * w.count;
#pragma omp parallel for schedule(static) if (out.size() > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const E *from = in + w.outerOffset[r / w.count];
    const int64_t *p = positions.data() + r * w.inner;
    E *row = to + r * w.inner;
    for (int64_t i = 0; i < w.inner; ++i)
      row[i] = from[p[i] * w.stride + w.innerOffset[i]];
  }
}

/// out[target of (o, k, i)] = combine(itself, updates[o, k, i]). Distinct
/// (o, i) name distinct elements of out whatever the positions, so tasks
/// that own an outer slice and a block of inner indices (ColumnBlocks)
/// never meet, and each element sees its updates in the order of k.
template <typename T, typename Combine>
void scatterTyped(const TensorView &updates, const Ints &positions,
                  const TensorView &out, const ElementsWalk &w,
                  Combine combine) {
  const T *from = static_cast<const T *>(updates.data);
  T *to = static_cast<T *>(out.data);
  ColumnBlocks b(w.outer, w.inner);
  int64_t tasks = w.outer * b.blocks;
#pragma omp parallel for schedule(static) if (updates.size() > kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t o = t / b.blocks, i0, i1;
    b.columns(t, w.inner, i0, i1);
    T *base = to + w.outerOffset[o];
    for (int64_t k = 0; k < w.count; ++k) {
      int64_t row = (o * w.count + k) * w.inner;
      for (int64_t i = i0; i < i1; ++i) {
        T &target = base[positions[row + i] * w.stride + w.innerOffset[i]];
        target = combine(target, from[row + i]);
      }
    }
  }
}

/// The combining reductions work on F32, I64 and I32 elements.
template <ScatterReduction R>
void scatterCombining(const TensorView &updates, const Ints &positions,
                      const TensorView &out, const ElementsWalk &w) {
  auto run = [&](auto element) {
    using T = decltype(element);
    scatterTyped<T>(updates, positions, out, w, combineScatter<R, T>);
  };
  switch (out.dtype) {
  case DType::F32:
    return run(float{});
  case DType::I64:
    return run(int64_t{});
  case DType::I32:
    return run(int32_t{});
  case DType::Bool:
    break;
  }
  BMRT_FAIL(std::string("scatter_elements with reduction '") + nameOf(R) +
            "' does not take " + nameOf(out.dtype) + " data");
}

} // namespace

void gatherElements(Stream &, const TensorView &data, const TensorView &indices,
                    const TensorView &out, int64_t axis) {
  Ints positions =
      gatherPositions("gather_elements", indices, data.shape[axis]);
  ElementsWalk w(data.shape, indices.shape, axis);
  withElementWidth(data.dtype, [&](auto element) {
    gatherElementsTyped<decltype(element)>(data, positions, out, w);
  });
}

void scatterElements(Stream &stream, const TensorView &data,
                     const TensorView &indices, const TensorView &updates,
                     const TensorView &out, int64_t axis,
                     ScatterReduction reduction) {
  Ints positions =
      gatherPositions("scatter_elements", indices, data.shape[axis]);
  ElementsWalk w(data.shape, indices.shape, axis);
  copy(stream, data, out);
  if (indices.size() == 0)
    return;
  switch (reduction) {
  case ScatterReduction::Add:
    return scatterCombining<ScatterReduction::Add>(updates, positions, out, w);
  case ScatterReduction::Max:
    return scatterCombining<ScatterReduction::Max>(updates, positions, out, w);
  case ScatterReduction::Min:
    return scatterCombining<ScatterReduction::Min>(updates, positions, out, w);
  case ScatterReduction::Mul:
    return scatterCombining<ScatterReduction::Mul>(updates, positions, out, w);
  case ScatterReduction::None:
    break;
  }
  // Repeated indices: the last update in row-major order wins (ONNX leaves
  // it unspecified).
  withElementWidth(data.dtype, [&](auto element) {
    using E = decltype(element);
    scatterTyped<E>(updates, positions, out, w,
                    [](E, E update) { return update; });
  });
}

//===----------------------------------------------------------------------===//
// Concat and split
//===----------------------------------------------------------------------===//

namespace {

/// Concat and split move the same bytes in opposite directions: `whole` is
/// the concatenation of `parts` along `axis`.
void joinOrSplit(const TensorView &whole, const std::vector<TensorView> &parts,
                 int64_t axis, bool join) {
  AxisSplit s = splitAt(whole.shape, axis);
  size_t element = sizeOf(whole.dtype);
  int64_t k = static_cast<int64_t>(parts.size());
  // Per part: its bytes per outer index, and where they sit in whole's.
  std::vector<size_t> partBytes(k), partOffset(k);
  size_t wholeRow = 0;
  for (int64_t i = 0; i < k; ++i) {
    partOffset[i] = wholeRow;
    partBytes[i] = parts[i].shape[axis] * s.inner * element;
    wholeRow += partBytes[i];
  }
  int64_t tasks = s.outer * k;
  char *base = static_cast<char *>(whole.data);
#pragma omp parallel for schedule(static) if (whole.size() > kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t o = t / k, i = t % k;
    char *slot = base + o * wholeRow + partOffset[i];
    char *part = static_cast<char *>(parts[i].data) + o * partBytes[i];
    if (join)
      std::memcpy(slot, part, partBytes[i]);
    else
      std::memcpy(part, slot, partBytes[i]);
  }
}

} // namespace

void concat(Stream &, const std::vector<TensorView> &inputs,
            const TensorView &out, int64_t axis) {
  joinOrSplit(out, inputs, axis, /*join=*/true);
}

void split(Stream &, const TensorView &x,
           const std::vector<TensorView> &outputs, int64_t axis) {
  joinOrSplit(x, outputs, axis, /*join=*/false);
}

//===----------------------------------------------------------------------===//
// Slice and expand
//===----------------------------------------------------------------------===//

namespace {

/// Moves between the strided window big[starts + i * strides] and the
/// contiguous `small` (slice: into small; sliceGrad: into big).
template <typename E>
void sliceWindow(const TensorView &big, const TensorView &small,
                 const Ints &starts, const Ints &strides, bool intoBig) {
  E *b = static_cast<E *>(big.data);
  E *s = static_cast<E *>(small.data);
  int64_t rank = big.rank();
  if (small.size() == 0)
    return;
  if (rank == 0) {
    if (intoBig)
      *b = *s;
    else
      *s = *b;
    return;
  }
  Ints bigStrides = contiguousStrides(big.shape);
  int64_t base = 0;
  for (int64_t d = 0; d < rank; ++d)
    base += starts[d] * bigStrides[d];
  int64_t length = small.shape.back(), step = strides.back();
  int64_t rows = small.size() / length;
#pragma omp parallel for schedule(static) if (small.size() > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = base;
    for (int64_t d = rank - 2, rest = r; d >= 0; --d) {
      offset += (rest % small.shape[d]) * strides[d] * bigStrides[d];
      rest /= small.shape[d];
    }
    E *window = b + offset;
    E *row = s + r * length;
    if (step == 1)
      std::memcpy(intoBig ? window : row, intoBig ? row : window,
                  length * sizeof(E));
    else if (intoBig)
      for (int64_t j = 0; j < length; ++j)
        window[j * step] = row[j];
    else
      for (int64_t j = 0; j < length; ++j)
        row[j] = window[j * step];
  }
}

template <typename E>
void expandTyped(const TensorView &x, const TensorView &y) {
  BroadcastPlan<1> plan = planBroadcast<1>(y.shape, {&x.shape});
  const E *in = static_cast<const E *>(x.data);
  E *out = static_cast<E *>(y.data);
  bool steps = plan.steps(0);
  forEachPiece(plan, [&](int64_t o, const std::array<int64_t, 1> &offsets,
                         int64_t count) {
    if (steps)
      std::memcpy(out + o, in + offsets[0], count * sizeof(E));
    else
      std::fill_n(out + o, count, in[offsets[0]]);
  });
}

} // namespace

void slice(Stream &, const TensorView &x, const TensorView &y,
           const Ints &starts, const Ints &strides) {
  withElementWidth(x.dtype, [&](auto element) {
    sliceWindow<decltype(element)>(x, y, starts, strides, /*intoBig=*/false);
  });
}

void sliceGrad(Stream &stream, const TensorView &dy, const TensorView &dx,
               const Ints &starts, const Ints &strides) {
  fill(stream, dx, 0.0);
  withElementWidth(dx.dtype, [&](auto element) {
    sliceWindow<decltype(element)>(dx, dy, starts, strides, /*intoBig=*/true);
  });
}

void expand(Stream &, const TensorView &x, const TensorView &y) {
  withElementWidth(x.dtype,
                   [&](auto element) { expandTyped<decltype(element)>(x, y); });
}

//===----------------------------------------------------------------------===//
// Trilu, iota, one-hot
//===----------------------------------------------------------------------===//

namespace {

template <typename E>
void triluTyped(const TensorView &x, const TensorView &y, int64_t k,
                bool upper) {
  int64_t rank = x.rank();
  int64_t m = x.shape[rank - 2], n = x.shape[rank - 1];
  if (x.size() == 0)
    return;
  int64_t rows = x.size() / n;
  // A diagonal beyond the matrix keeps all or nothing; clamping k first
  // keeps i + k from overflowing.
  k = std::clamp(k, -(m + 1), n + 1);
  const E *in = static_cast<const E *>(x.data);
  E *out = static_cast<E *>(y.data);
#pragma omp parallel for schedule(static) if (x.size() > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = r % m;
    // Row i keeps columns [first, end).
    int64_t first = upper ? std::clamp(i + k, int64_t(0), n) : 0;
    int64_t end = upper ? n : std::clamp(i + k + 1, int64_t(0), n);
    const E *from = in + r * n;
    E *to = out + r * n;
    std::fill(to, to + first, E(0));
    if (end > first)
      std::memcpy(to + first, from + first, (end - first) * sizeof(E));
    std::fill(to + std::max(first, end), to + n, E(0));
  }
}

/// `value` as a T: Bool is value != 0.
template <typename T> T valueAs(double value) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return value != 0;
  else
    return static_cast<T>(value);
}

/// Each index as a position in [0, depth), or -1 (a row of off_value) for
/// one outside [-depth, depth).
Ints oneHotPositions(const TensorView &indices, int64_t depth) {
  Ints positions(indices.size());
  auto load = [&](const auto *values) {
    for (int64_t k = 0; k < indices.size(); ++k) {
      // Float indices truncate, as ONNX casts them.
      int64_t v = static_cast<int64_t>(values[k]);
      positions[k] = v < -depth || v >= depth ? -1 : (v < 0 ? v + depth : v);
    }
  };
  switch (indices.dtype) {
  case DType::I64:
    load(indices.i64());
    break;
  case DType::I32:
    load(indices.i32());
    break;
  case DType::F32:
    load(indices.f32());
    break;
  case DType::Bool:
    load(indices.boolean());
    break;
  }
  return positions;
}

template <typename T>
void oneHotTyped(const Ints &positions, const TensorView &out, int64_t depth,
                 int64_t inner, double onValue, double offValue) {
  T on = valueAs<T>(onValue), off = valueAs<T>(offValue);
  T *to = static_cast<T *>(out.data);
  int64_t rows = out.size() / std::max<int64_t>(inner, 1);
  // Output row (o, d) holds, for each inner position i, whether index
  // (o, i) is d: written in output order, one pass.
#pragma omp parallel for schedule(static) if (out.size() > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t o = r / depth, d = r % depth;
    const int64_t *p = positions.data() + o * inner;
    T *row = to + r * inner;
    for (int64_t i = 0; i < inner; ++i)
      row[i] = p[i] == d ? on : off;
  }
}

} // namespace

void trilu(Stream &, const TensorView &x, const TensorView &y, int64_t k,
           bool upper) {
  BMRT_CHECK(x.rank() >= 2, "trilu needs a tensor of rank 2 or more, not " +
                                formatShape(x.shape));
  withElementWidth(x.dtype, [&](auto element) {
    triluTyped<decltype(element)>(x, y, k, upper);
  });
}

void iota(Stream &, const TensorView &out, double start, double delta) {
  auto run = [&](auto *to, auto at) {
    forEachChunk(out.size(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        to[i] = at(i);
    });
  };
  switch (out.dtype) {
  case DType::F32:
    // In double, so that start + i * delta rounds once.
    return run(out.f32(),
               [&](int64_t i) { return float(start + double(i) * delta); });
  case DType::I64: {
    // Integer arithmetic: exact for every i.
    int64_t s = static_cast<int64_t>(start), d = static_cast<int64_t>(delta);
    return run(out.i64(), [=](int64_t i) { return s + i * d; });
  }
  case DType::I32: {
    int64_t s = static_cast<int64_t>(start), d = static_cast<int64_t>(delta);
    return run(out.i32(), [=](int64_t i) { return int32_t(s + i * d); });
  }
  case DType::Bool:
    break;
  }
  BMRT_FAIL(std::string("iota cannot fill ") + nameOf(out.dtype));
}

void oneHot(Stream &, const TensorView &indices, const TensorView &out,
            int64_t depth, int64_t axis, double onValue, double offValue) {
  Ints positions = oneHotPositions(indices, depth);
  // Indices [outer..., inner...] split at axis; out is [outer, depth, inner].
  int64_t inner = 1;
  for (int64_t d = axis; d < indices.rank(); ++d)
    inner *= indices.shape[d];
  if (out.size() == 0)
    return;
  switch (out.dtype) {
  case DType::F32:
    return oneHotTyped<float>(positions, out, depth, inner, onValue, offValue);
  case DType::I64:
    return oneHotTyped<int64_t>(positions, out, depth, inner, onValue,
                                offValue);
  case DType::I32:
    return oneHotTyped<int32_t>(positions, out, depth, inner, onValue,
                                offValue);
  case DType::Bool:
    return oneHotTyped<uint8_t>(positions, out, depth, inner, onValue,
                                offValue);
  }
}

} // namespace bmrt::cpu
