//===- DataMovementKernels.cu - transpose, gather, concat, slice, ... -----===//
//
// Kernels that move elements without looking inside them work on any dtype
// through one instantiation per element width (withElementWidth). Concat
// and split are strided copies (cudaMemcpy2D, through the Device); the rest
// are one thread per output element, the source offset computed from
// merged dims and strides planned on the host (scatters: one thread per
// update, combining with atomics where targets may repeat). Semantics are
// the CPU backend's (runtime/cpu/DataMovementKernels.cpp). The collectives
// are every backend's (runtime/program/CollectiveKernels.h).
//
//===----------------------------------------------------------------------===//

#include "DeviceLoops.cuh"
#include "KernelFamilies.h"
#include "runtime/program/CollectiveKernels.h"

#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/ScatterReduction.h"
#include "bmrt/Transpose.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

namespace bmrt::cuda {
namespace {

using E = Executor;
using Ints = std::vector<int64_t>;

/// A row-major walk over `dims` reading another buffer at `strides`.
StridedIndex stridedIndex(const char *op, const Ints &dims, const Ints &strides,
                          int64_t base = 0) {
  checkRank(op, static_cast<int64_t>(dims.size()));
  StridedIndex index;
  index.rank = static_cast<int>(dims.size());
  index.base = base;
  int64_t elements = 1;
  for (int d = 0; d < index.rank; ++d) {
    index.dims[d] = dims[d];
    index.strides[d] = strides[d];
    elements *= dims[d];
  }
  index.narrow = elements <= int64_t(UINT32_MAX);
  return index;
}

/// out[i] = in[index.offset(i)].
template <typename W>
__global__ void gatherStridedKernel(const W *in, W *out, StridedIndex index,
                                    int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { out[i] = in[index.offset(i)]; }
}

/// out[index.offset(i)] = in[i].
template <typename W>
__global__ void scatterStridedKernel(const W *in, W *out, StridedIndex index,
                                     int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { out[index.offset(i)] = in[i]; }
}

//===----------------------------------------------------------------------===//
// Transpose
//===----------------------------------------------------------------------===//

// A shared-memory tiled kernel would serve transposes of the innermost dim
// better (the reads here are strided); this one is the correct baseline.
void launchTranspose(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  if (x.size() == 0)
    return;
  TransposePlan plan = simplifyTranspose(x.shape, i.getInts("permutation"));
  // Nothing moves relative to anything else: the bytes are already right.
  if (plan.rank() <= 1)
    return e.device().copyOnDevice(y.data, x.data, x.bytes(), e.stream());
  StridedIndex index =
      stridedIndex("transpose", plan.outDims, plan.inStrideOfOut);
  withElementWidth(x.dtype, [&](auto element) {
    using W = decltype(element);
    launch("transpose kernel", streamOf(e), y.size(), gatherStridedKernel<W>,
           static_cast<const W *>(x.data), static_cast<W *>(y.data), index,
           y.size());
  });
}

//===----------------------------------------------------------------------===//
// Gather and its gradient
//===----------------------------------------------------------------------===//

/// data seen as [outer, dim, inner] around the axis; `count` indices; this
/// rank holds entries [first, first + dim) of `total` (TableShard).
struct GatherShape {
  int64_t outer, dim, inner, count, first, total;
};

GatherShape gatherShapeOf(const Shape &data, int64_t axis,
                          const TensorView &indices, TableShard shard) {
  AxisSplit s = splitAt(data, axis);
  return {s.outer,        s.dim,       s.inner,
          indices.size(), shard.first, shard.total < 0 ? s.dim : shard.total};
}

/// An index's position in this rank's entries, or -1 where another rank
/// holds it or it is out of range (which checkIndicesKernel reports).
template <typename I>
__device__ int64_t positionOf(I index, const GatherShape &s) {
  int64_t value = static_cast<int64_t>(index);
  int64_t position = (value < 0 ? value + s.total : value) - s.first;
  bool inTable = value >= -s.total && value < s.total;
  return inTable && position >= 0 && position < s.dim ? position : -1;
}

/// firstBad = the lowest k whose index is outside [-total, total).
template <typename I>
__global__ void checkIndicesKernel(const I *indices, int64_t count,
                                   int64_t total,
                                   unsigned long long *firstBad) {
  BMRT_GRID_STRIDE_LOOP(k, count) {
    int64_t value = static_cast<int64_t>(indices[k]);
    if (value < -total || value >= total)
      atomicMin(firstBad, static_cast<unsigned long long>(k));
  }
}

template <typename W, typename I>
__global__ void gatherKernel(const W *data, const I *indices, W *out,
                             GatherShape s, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t j = i % s.inner, t = i / s.inner;
    int64_t o = t / s.count, k = t % s.count;
    int64_t position = positionOf(indices[k], s);
    out[i] = position < 0 ? W{} : data[(o * s.dim + position) * s.inner + j];
  }
}

/// Repeated indices accumulate with atomicAdd, so their sum's order varies
/// from run to run and differs from the CPU's fixed order: results agree
/// with the CPU to fp32 rounding, not bit for bit.
template <typename I>
__global__ void gatherGradKernel(const float *dy, const I *indices,
                                 float *ddata, GatherShape s, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t j = i % s.inner, t = i / s.inner;
    int64_t o = t / s.count, k = t % s.count;
    int64_t position = positionOf(indices[k], s);
    if (position >= 0)
      atomicAdd(&ddata[(o * s.dim + position) * s.inner + j], dy[i]);
  }
}

/// Runs `kernels(indices)` (the gather's kernels, with the indices typed)
/// with a check of every index against the whole table. A kernel cannot
/// throw: the check leaves the first bad index's position in device memory,
/// and the host waits for it and throws the CPU's error (naming `op`).
template <typename Kernels>
void withCheckedIndices(const char *op, cudaStream_t stream,
                        const TensorView &indices, int64_t total,
                        Kernels &&kernels) {
  if (indices.dtype != DType::I64 && indices.dtype != DType::I32)
    BMRT_FAIL(std::string(op) + " indices must be i64 or i32, not " +
              nameOf(indices.dtype));
  StreamBuffer flag(sizeof(unsigned long long), stream);
  auto *firstBad = static_cast<unsigned long long *>(flag.data());
  BMRT_CUDA_CHECK(cudaMemsetAsync(firstBad, 0xff, sizeof(*firstBad), stream));
  auto run = [&](const auto *typed) {
    launch("gather index check", stream, indices.size(),
           checkIndicesKernel<
               std::remove_cv_t<std::remove_pointer_t<decltype(typed)>>>,
           typed, indices.size(), total, firstBad);
    kernels(typed);
  };
  if (indices.dtype == DType::I64)
    run(static_cast<const int64_t *>(indices.data));
  else
    run(static_cast<const int32_t *>(indices.data));
  unsigned long long k = 0;
  BMRT_CUDA_CHECK(
      cudaMemcpyAsync(&k, firstBad, sizeof(k), cudaMemcpyDeviceToHost, stream));
  BMRT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (k == ~0ull)
    return;
  int64_t value = 0;
  size_t width = sizeOf(indices.dtype);
  const char *at = static_cast<const char *>(indices.data) + k * width;
  if (indices.dtype == DType::I64) {
    BMRT_CUDA_CHECK(cudaMemcpy(&value, at, width, cudaMemcpyDeviceToHost));
  } else {
    int32_t narrow = 0;
    BMRT_CUDA_CHECK(cudaMemcpy(&narrow, at, width, cudaMemcpyDeviceToHost));
    value = narrow;
  }
  BMRT_FAIL(std::string(op) + " index " + std::to_string(value) +
            " is out of range for a dim of size " + std::to_string(total));
}

void gather(E &e, const Instr &i, TableShard shard) {
  const TensorView &data = e.operand(i, 0), &indices = e.operand(i, 1),
                   &out = e.result(i, 0);
  GatherShape s = gatherShapeOf(data.shape, i.getInt("axis"), indices, shard);
  cudaStream_t stream = streamOf(e);
  withCheckedIndices(
      "gather", stream, indices, s.total, [&](const auto *typed) {
        using I = std::remove_cv_t<std::remove_pointer_t<decltype(typed)>>;
        withElementWidth(data.dtype, [&](auto element) {
          using W = decltype(element);
          launch("gather kernel", stream, out.size(), gatherKernel<W, I>,
                 static_cast<const W *>(data.data), typed,
                 static_cast<W *>(out.data), s, out.size());
        });
      });
}

void launchGather(E &e, const Instr &i) { gather(e, i, {}); }

void launchShardGather(E &e, const Instr &i) {
  gather(e, i, tableShardOf(e, i));
}

/// ddata = 0, then ddata[index] += dy for each gathered slice (F32).
void launchGatherGrad(E &e, const Instr &i) {
  const TensorView &dy = e.operand(i, 0), &indices = e.operand(i, 1),
                   &ddata = e.result(i, 0);
  BMRT_CHECK(dy.dtype == DType::F32, std::string("gather_grad does not take ") +
                                         nameOf(dy.dtype) + " operands");
  GatherShape s = gatherShapeOf(ddata.shape, i.getInt("axis"), indices, {});
  cudaStream_t stream = streamOf(e);
  e.device().fillBytes(ddata.data, 0, ddata.bytes(), e.stream());
  withCheckedIndices(
      "gather", stream, indices, s.total, [&](const auto *typed) {
        using I = std::remove_cv_t<std::remove_pointer_t<decltype(typed)>>;
        if (ddata.size() == 0)
          return;
        launch("gather_grad kernel", stream, dy.size(), gatherGradKernel<I>,
               dy.f32(), typed, ddata.f32(), s, dy.size());
      });
}

//===----------------------------------------------------------------------===//
// Gather and scatter of elements
//===----------------------------------------------------------------------===//

/// Where gather_elements and scatter_elements find index i's element of
/// data: walk.offset(i) + position * stride, the position being the index
/// made positive (-1 out of range). The walk runs over the indices' shape
/// with data's strides, 0 at the axis (whose coordinate the index gives):
/// the indices' other dims may be smaller than data's.
struct ElementsIndex {
  StridedIndex walk;
  int64_t stride, dim;

  __device__ int64_t offset(int64_t i, int64_t position) const {
    return walk.offset(i) + position * stride;
  }
};

/// Dims of size 1 are dropped, and a dim merges into the one before where
/// that one's stride steps over it whole (the indices then span data's dim
/// there), so that a walk of any rank fits StridedIndex's kMaxRank.
ElementsIndex elementsIndexOf(const char *op, const Shape &data,
                              const Shape &indices, int64_t axis) {
  Ints strides = contiguousStrides(data);
  Ints dims, steps;
  for (int64_t d = 0; d < static_cast<int64_t>(indices.size()); ++d) {
    int64_t step = d == axis ? 0 : strides[d];
    if (indices[d] == 1)
      continue;
    if (!dims.empty() && steps.back() == indices[d] * step) {
      dims.back() *= indices[d];
      steps.back() = step;
    } else {
      dims.push_back(indices[d]);
      steps.push_back(step);
    }
  }
  return {stridedIndex(op, dims, steps), strides[axis], data[axis]};
}

/// An index as a position along data's axis of size dim, or -1 out of
/// range (which checkIndicesKernel reports).
template <typename I> __device__ int64_t positionIn(I index, int64_t dim) {
  int64_t value = static_cast<int64_t>(index);
  if (value < -dim || value >= dim)
    return -1;
  return value < 0 ? value + dim : value;
}

template <typename W, typename I>
__global__ void gatherElementsKernel(const W *data, const I *indices, W *out,
                                     ElementsIndex s, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t position = positionIn(indices[i], s.dim);
    out[i] = position < 0 ? W{} : data[s.offset(i, position)];
  }
}

void launchGatherElements(E &e, const Instr &i) {
  const TensorView &data = e.operand(i, 0), &indices = e.operand(i, 1),
                   &out = e.result(i, 0);
  int64_t axis = i.getInt("axis");
  ElementsIndex s =
      elementsIndexOf("gather_elements", data.shape, indices.shape, axis);
  cudaStream_t stream = streamOf(e);
  withCheckedIndices(
      "gather_elements", stream, indices, s.dim, [&](const auto *typed) {
        using I = std::remove_cv_t<std::remove_pointer_t<decltype(typed)>>;
        withElementWidth(data.dtype, [&](auto element) {
          using W = decltype(element);
          launch("gather_elements kernel", stream, out.size(),
                 gatherElementsKernel<W, I>, static_cast<const W *>(data.data),
                 typed, static_cast<W *>(out.data), s, out.size());
        });
      });
}

/// The bits of a 4- or 8-byte element, as atomicCAS takes them.
template <typename T>
using BitsOf =
    std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;

template <typename T> __device__ BitsOf<T> bitsOf(T value) {
  if constexpr (std::is_same_v<T, float>)
    return __float_as_uint(value);
  else
    return static_cast<BitsOf<T>>(value);
}

template <typename T> __device__ T fromBits(BitsOf<T> bits) {
  if constexpr (std::is_same_v<T, float>)
    return __uint_as_float(bits);
  else
    return static_cast<T>(bits);
}

/// *target = combineScatter<R>(*target, update) by compare-and-swap: CUDA
/// has no atomic multiply, nor a max or min of floats. The combination is
/// bmrt/ScatterReduction.h's, so NaNs and overflow come out as on the CPU.
template <ScatterReduction R, typename T>
__device__ void casCombine(T *target, T update) {
  auto *bits = reinterpret_cast<BitsOf<T> *>(target);
  BitsOf<T> old = *bits, assumed;
  do {
    assumed = old;
    BitsOf<T> next = bitsOf(combineScatter<R>(fromBits<T>(assumed), update));
    // Nothing to write (max or min kept the target): no contention either.
    if (next == assumed)
      return;
    old = atomicCAS(bits, assumed, next);
  } while (old != assumed);
}

/// *target = combineScatter<R>(*target, update), atomically: the hardware's
/// atomics where they compute the same (adds, integer max and min; wrapped
/// two's-complement adds are the CPU's unsigned ones), else casCombine.
template <ScatterReduction R, typename T>
__device__ void atomicCombine(T *target, T update) {
  constexpr bool kInt64 = std::is_same_v<T, int64_t>;
  if constexpr (R == ScatterReduction::Add && kInt64)
    atomicAdd(reinterpret_cast<unsigned long long *>(target),
              static_cast<unsigned long long>(update));
  else if constexpr (R == ScatterReduction::Add)
    atomicAdd(target, update);
  else if constexpr (R == ScatterReduction::Max && kInt64)
    atomicMax(reinterpret_cast<long long *>(target),
              static_cast<long long>(update));
  else if constexpr (R == ScatterReduction::Max && std::is_integral_v<T>)
    atomicMax(target, update);
  else if constexpr (R == ScatterReduction::Min && kInt64)
    atomicMin(reinterpret_cast<long long *>(target),
              static_cast<long long>(update));
  else if constexpr (R == ScatterReduction::Min && std::is_integral_v<T>)
    atomicMin(target, update);
  else
    casCombine<R>(target, update);
}

/// reduction none: a plain store. Of repeated targets one update wins,
/// which one depends on the schedule (ONNX leaves it unspecified; the
/// CPU keeps the last).
template <typename W, typename I>
__global__ void scatterElementsKernel(const W *updates, const I *indices,
                                      W *out, ElementsIndex s, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t position = positionIn(indices[i], s.dim);
    if (position >= 0)
      out[s.offset(i, position)] = updates[i];
  }
}

/// Repeated targets combine atomically, in an order that varies from run
/// to run: f32 add and mul agree with the CPU's fixed order to fp32
/// rounding, not bit for bit; max, min and integers are exact.
template <ScatterReduction R, typename T, typename I>
__global__ void scatterCombineKernel(const T *updates, const I *indices, T *out,
                                     ElementsIndex s, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t position = positionIn(indices[i], s.dim);
    if (position >= 0)
      atomicCombine<R>(&out[s.offset(i, position)], updates[i]);
  }
}

/// The updates combined into out by R, on F32, I64 or I32 elements.
template <ScatterReduction R, typename I>
void scatterCombining(cudaStream_t stream, const TensorView &updates,
                      const I *indices, const TensorView &out,
                      const ElementsIndex &s) {
  auto run = [&](auto *to) {
    using T = std::remove_pointer_t<decltype(to)>;
    launch("scatter_elements kernel", stream, updates.size(),
           scatterCombineKernel<R, T, I>, static_cast<const T *>(updates.data),
           indices, to, s, updates.size());
  };
  switch (out.dtype) {
  case DType::F32:
    return run(out.f32());
  case DType::I64:
    return run(out.i64());
  case DType::I32:
    return run(out.i32());
  case DType::Bool: // refused by launchScatterElements
    break;
  }
}

template <typename I>
void scatterElements(cudaStream_t stream, const TensorView &updates,
                     const I *indices, const TensorView &out,
                     const ElementsIndex &s, ScatterReduction reduction) {
  switch (reduction) {
  case ScatterReduction::Add:
    return scatterCombining<ScatterReduction::Add>(stream, updates, indices,
                                                   out, s);
  case ScatterReduction::Max:
    return scatterCombining<ScatterReduction::Max>(stream, updates, indices,
                                                   out, s);
  case ScatterReduction::Min:
    return scatterCombining<ScatterReduction::Min>(stream, updates, indices,
                                                   out, s);
  case ScatterReduction::Mul:
    return scatterCombining<ScatterReduction::Mul>(stream, updates, indices,
                                                   out, s);
  case ScatterReduction::None:
    break;
  }
  withElementWidth(out.dtype, [&](auto element) {
    using W = decltype(element);
    launch("scatter_elements kernel", stream, updates.size(),
           scatterElementsKernel<W, I>, static_cast<const W *>(updates.data),
           indices, static_cast<W *>(out.data), s, updates.size());
  });
}

/// out = data, then the updates written or combined at the indices.
void launchScatterElements(E &e, const Instr &i) {
  const TensorView &data = e.operand(i, 0), &indices = e.operand(i, 1),
                   &updates = e.operand(i, 2), &out = e.result(i, 0);
  ScatterReduction reduction = scatterReductionOf(i);
  // Refused before anything is enqueued: the kernels have no bool atomics.
  if (reduction != ScatterReduction::None && data.dtype == DType::Bool)
    BMRT_FAIL(std::string("scatter_elements with reduction '") +
              nameOf(reduction) + "' does not take " + nameOf(data.dtype) +
              " data");
  ElementsIndex s = elementsIndexOf("scatter_elements", data.shape,
                                    indices.shape, i.getInt("axis"));
  cudaStream_t stream = streamOf(e);
  if (out.data != data.data)
    e.device().copyOnDevice(out.data, data.data, data.bytes(), e.stream());
  withCheckedIndices(
      "scatter_elements", stream, indices, s.dim, [&](const auto *typed) {
        scatterElements(stream, updates, typed, out, s, reduction);
      });
}

//===----------------------------------------------------------------------===//
// Concat and split
//===----------------------------------------------------------------------===//

/// `whole` is the concatenation of `parts` along `axis`: seen as [outer,
/// row] bytes, each part is a column block of the rows, one strided copy.
void joinOrSplit(E &e, const TensorView &whole,
                 const std::vector<TensorView> &parts, int64_t axis,
                 bool join) {
  AxisSplit s = splitAt(whole.shape, axis);
  size_t element = sizeOf(whole.dtype);
  size_t wholeRow = s.dim * s.inner * element;
  size_t offset = 0;
  char *base = static_cast<char *>(whole.data);
  for (const TensorView &part : parts) {
    size_t partRow = part.shape[axis] * s.inner * element;
    if (join)
      e.device().copyStrided(base + offset, wholeRow, part.data, partRow,
                             partRow, s.outer, e.stream());
    else
      e.device().copyStrided(part.data, partRow, base + offset, wholeRow,
                             partRow, s.outer, e.stream());
    offset += partRow;
  }
}

void launchConcat(E &e, const Instr &i) {
  std::vector<TensorView> inputs;
  for (size_t k = 0; k < i.operands.size(); ++k)
    inputs.push_back(e.operand(i, k));
  joinOrSplit(e, e.result(i, 0), inputs, i.getInt("axis"), /*join=*/true);
}

void launchSplit(E &e, const Instr &i) {
  std::vector<TensorView> outputs;
  for (size_t k = 0; k < i.results.size(); ++k)
    outputs.push_back(e.result(i, k));
  joinOrSplit(e, e.operand(i, 0), outputs, i.getInt("axis"), /*join=*/false);
}

//===----------------------------------------------------------------------===//
// Slice and expand
//===----------------------------------------------------------------------===//

/// The window big[starts + i * strides] as a walk over small's shape.
StridedIndex sliceWindow(const char *op, const TensorView &big,
                         const TensorView &small, const Ints &starts,
                         const Ints &strides) {
  Ints bigStrides = contiguousStrides(big.shape);
  Ints steps(big.rank());
  int64_t base = 0;
  for (int64_t d = 0; d < big.rank(); ++d) {
    base += starts[d] * bigStrides[d];
    steps[d] = strides[d] * bigStrides[d];
  }
  return stridedIndex(op, small.shape, steps, base);
}

void launchSlice(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  StridedIndex window =
      sliceWindow("slice", x, y, i.getInts("starts"), i.getInts("strides"));
  withElementWidth(x.dtype, [&](auto element) {
    using W = decltype(element);
    launch("slice kernel", streamOf(e), y.size(), gatherStridedKernel<W>,
           static_cast<const W *>(x.data), static_cast<W *>(y.data), window,
           y.size());
  });
}

/// dx = 0 except dx[starts + i * strides] = dy[i] (strides > 0: the window
/// never writes one element twice).
void launchSliceGrad(E &e, const Instr &i) {
  const TensorView &dy = e.operand(i, 0), &dx = e.result(i, 0);
  StridedIndex window = sliceWindow("slice_grad", dx, dy, i.getInts("starts"),
                                    i.getInts("strides"));
  e.device().fillBytes(dx.data, 0, dx.bytes(), e.stream());
  withElementWidth(dx.dtype, [&](auto element) {
    using W = decltype(element);
    launch("slice_grad kernel", streamOf(e), dy.size(), scatterStridedKernel<W>,
           static_cast<const W *>(dy.data), static_cast<W *>(dx.data), window,
           dy.size());
  });
}

template <typename W>
__global__ void expandKernel(Broadcast<1> plan, const W *in, W *out,
                             int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t at[1];
    plan.offsets(i, at);
    out[i] = in[at[0]];
  }
}

/// Broadcasts x to y's shape (numpy rules).
void launchExpand(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  Broadcast<1> plan = planBroadcast<1>("expand", y.shape, {&x.shape});
  withElementWidth(x.dtype, [&](auto element) {
    using W = decltype(element);
    launch("expand kernel", streamOf(e), y.size(), expandKernel<W>, plan,
           static_cast<const W *>(x.data), static_cast<W *>(y.data), y.size());
  });
}

//===----------------------------------------------------------------------===//
// Trilu, iota, one-hot
//===----------------------------------------------------------------------===//

/// Keeps j - i >= k (upper) or j - i <= k (lower) of each [m, n] matrix.
template <typename W>
__global__ void triluKernel(const W *x, W *y, int64_t m, int64_t n, int64_t k,
                            bool upper, int64_t total) {
  BMRT_GRID_STRIDE_LOOP(t, total) {
    int64_t j = t % n, i = (t / n) % m;
    bool keep = upper ? j - i >= k : j - i <= k;
    y[t] = keep ? x[t] : W(0);
  }
}

void launchTrilu(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  BMRT_CHECK(x.rank() >= 2, "trilu needs a tensor of rank 2 or more, not " +
                                formatShape(x.shape));
  int64_t m = x.shape[x.rank() - 2], n = x.shape[x.rank() - 1];
  // A diagonal beyond the matrix keeps all or nothing; clamping k keeps
  // j - i - k from overflowing.
  int64_t k = std::clamp<int64_t>(i.getInt("k", 0), -(m + 1), n + 1);
  bool upper = i.getInt("upper", 1);
  withElementWidth(x.dtype, [&](auto element) {
    using W = decltype(element);
    launch("trilu kernel", streamOf(e), x.size(), triluKernel<W>,
           static_cast<const W *>(x.data), static_cast<W *>(y.data), m, n, k,
           upper, x.size());
  });
}

/// F32: start + i * delta in double, so that it rounds once (as the CPU).
__global__ void iotaF32Kernel(float *out, double start, double delta,
                              int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { out[i] = float(start + double(i) * delta); }
}

/// Integers: exact integer arithmetic for every i.
template <typename T>
__global__ void iotaIntKernel(T *out, int64_t start, int64_t delta, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { out[i] = T(start + i * delta); }
}

void launchIota(E &e, const Instr &i) {
  const TensorView &out = e.result(i, 0);
  double start = i.getFloat("start"), delta = i.getFloat("delta");
  cudaStream_t stream = streamOf(e);
  int64_t n = out.size();
  auto s = static_cast<int64_t>(start), d = static_cast<int64_t>(delta);
  switch (out.dtype) {
  case DType::F32:
    return launch("iota kernel", stream, n, iotaF32Kernel, out.f32(), start,
                  delta, n);
  case DType::I64:
    return launch("iota kernel", stream, n, iotaIntKernel<int64_t>, out.i64(),
                  s, d, n);
  case DType::I32:
    return launch("iota kernel", stream, n, iotaIntKernel<int32_t>, out.i32(),
                  s, d, n);
  case DType::Bool:
    break;
  }
  BMRT_FAIL(std::string("iota cannot fill ") + nameOf(out.dtype));
}

/// out [outer, depth, inner] from indices [outer, inner]: on where the
/// index (negative counts from depth, floats truncate) is the depth
/// position, off elsewhere, and off for an index outside [-depth, depth).
template <typename I, typename T>
__global__ void oneHotKernel(const I *indices, T *out, int64_t depth,
                             int64_t inner, T on, T off, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(t, n) {
    int64_t r = t / inner, j = t % inner;
    int64_t o = r / depth, d = r % depth;
    int64_t v = static_cast<int64_t>(indices[o * inner + j]);
    int64_t position = v < -depth || v >= depth ? -1 : (v < 0 ? v + depth : v);
    out[t] = position == d ? on : off;
  }
}

/// `value` as a T: Bool is value != 0.
template <typename T> T valueAs(double value) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return value != 0;
  else
    return static_cast<T>(value);
}

template <typename I>
void oneHotFrom(cudaStream_t stream, const I *indices, const TensorView &out,
                int64_t depth, int64_t inner, double on, double off) {
  auto run = [&](auto *to) {
    using T = std::remove_pointer_t<decltype(to)>;
    launch("one_hot kernel", stream, out.size(), oneHotKernel<I, T>, indices,
           to, depth, inner, valueAs<T>(on), valueAs<T>(off), out.size());
  };
  switch (out.dtype) {
  case DType::F32:
    return run(out.f32());
  case DType::I64:
    return run(out.i64());
  case DType::I32:
    return run(out.i32());
  case DType::Bool:
    return run(out.boolean());
  }
}

void launchOneHot(E &e, const Instr &i) {
  const TensorView &indices = e.operand(i, 0), &out = e.result(i, 0);
  int64_t depth = i.getInt("depth"), axis = i.getInt("axis");
  double on = i.getFloat("on_value"), off = i.getFloat("off_value");
  int64_t inner = 1;
  for (int64_t d = axis; d < indices.rank(); ++d)
    inner *= indices.shape[d];
  if (out.size() == 0)
    return;
  cudaStream_t stream = streamOf(e);
  switch (indices.dtype) {
  case DType::F32:
    return oneHotFrom(stream, indices.f32(), out, depth, inner, on, off);
  case DType::I64:
    return oneHotFrom(stream, indices.i64(), out, depth, inner, on, off);
  case DType::I32:
    return oneHotFrom(stream, indices.i32(), out, depth, inner, on, off);
  case DType::Bool:
    return oneHotFrom(stream, indices.boolean(), out, depth, inner, on, off);
  }
}

// Alphabetical.
const KernelTable::Entry kKernels[] = {
    {"all_gather", launchAllGather},
    {"all_reduce", launchAllReduce},
    {"all_to_all", launchAllToAll},
    {"concat", launchConcat},
    {"expand", launchExpand},
    {"gather", launchGather},
    {"gather_elements", launchGatherElements},
    {"gather_grad", launchGatherGrad},
    {"iota", launchIota},
    {"one_hot", launchOneHot},
    {"reduce_scatter", launchReduceScatter},
    {"scatter_elements", launchScatterElements},
    {"shard_gather", launchShardGather},
    {"shard_slice", launchShardSlice},
    {"slice", launchSlice},
    {"slice_grad", launchSliceGrad},
    {"split", launchSplit},
    {"transpose", launchTranspose},
    {"trilu", launchTrilu},
};

} // namespace

KernelFamily dataMovementKernels() {
  return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

} // namespace bmrt::cuda
