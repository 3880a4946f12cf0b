//===- ReductionKernels.cu - reduce, cumsum, top-k and pooling ------------===//
//
// Simple, deterministic kernels: one warp per reduced output (lanes stride
// over the reduced elements, merged by shuffles), one thread per scanned or
// selected line, one thread per pooled output, and the pools' gradients as
// gathers (each input element sums the windows that read it, in output
// order, as the CPU's loop adds them) so that nothing needs atomics.
// F32 sums accumulate in double, as the CPU's.
//
//===----------------------------------------------------------------------===//

#include "KernelFamilies.h"
#include "KernelSupport.cuh"

#include "bmrt/Error.h"
#include "bmrt/Executor.h"

#include <climits>
#include <limits>
#include <type_traits>

namespace bmrt::cuda {
namespace {

using namespace support;
using E = Executor;

enum class ReduceKind { Max, Mean, Sum };

//===----------------------------------------------------------------------===//
// Reduce
//===----------------------------------------------------------------------===//

constexpr int kMaxDims = 16;

/// x's dims split into kept and reduced ones (neighbours of one kind
/// merged), with their strides in x.
struct ReducePlan {
  int keptRank = 0, reducedRank = 0;
  int64_t keptDims[kMaxDims], keptStrides[kMaxDims];
  int64_t reducedDims[kMaxDims], reducedStrides[kMaxDims];
  int64_t outputs = 1, count = 1;
};

ReducePlan planReduce(const Shape &shape, const Ints &axes) {
  Shape dims;
  std::vector<bool> reduced;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (shape[d] == 1)
      continue;
    bool isReduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!dims.empty() && reduced.back() == isReduced) {
      dims.back() *= shape[d];
      continue;
    }
    dims.push_back(shape[d]);
    reduced.push_back(isReduced);
  }
  Ints strides = contiguousStrides(dims);
  ReducePlan p;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (reduced[d]) {
      p.reducedDims[p.reducedRank] = dims[d];
      p.reducedStrides[p.reducedRank++] = strides[d];
      p.count *= dims[d];
    } else {
      p.keptDims[p.keptRank] = dims[d];
      p.keptStrides[p.keptRank++] = strides[d];
      p.outputs *= dims[d];
    }
  }
  return p;
}

template <typename T, ReduceKind Kind> struct Fold {
  using Acc = std::conditional_t<Kind != ReduceKind::Max &&
                                     std::is_same_v<T, float>,
                                 double, T>;
  __device__ static Acc identity() {
    if constexpr (Kind != ReduceKind::Max)
      return Acc(0);
    else if constexpr (std::is_same_v<T, float>)
      return -INFINITY;
    else
      return std::numeric_limits<T>::lowest();
  }
  __device__ static Acc merge(Acc a, Acc b) {
    if constexpr (Kind != ReduceKind::Max)
      return a + b;
    else
      return MaxOp()(a, b);
  }
  __device__ static T finish(Acc a, int64_t count) {
    if constexpr (Kind == ReduceKind::Mean) {
      if constexpr (std::is_same_v<T, float>)
        return static_cast<T>(a / static_cast<Acc>(count));
      else
        return count ? static_cast<T>(a / count) : T(0);
    } else {
      return static_cast<T>(a);
    }
  }
};

/// One warp per output element.
template <typename T, ReduceKind Kind>
__global__ void reduceKernel(const T *x, T *y, ReducePlan p) {
  using F = Fold<T, Kind>;
  int64_t warps = (int64_t(gridDim.x) * blockDim.x) / kWarp;
  int lane = threadIdx.x % kWarp;
  for (int64_t k = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
       k < p.outputs; k += warps) {
    int64_t base = 0, rest = k;
    for (int d = p.keptRank - 1; d >= 0; --d) {
      base += (rest % p.keptDims[d]) * p.keptStrides[d];
      rest /= p.keptDims[d];
    }
    typename F::Acc acc = F::identity();
    for (int64_t m = lane; m < p.count; m += kWarp) {
      int64_t at = base, r = m;
      for (int d = p.reducedRank - 1; d >= 0; --d) {
        at += (r % p.reducedDims[d]) * p.reducedStrides[d];
        r /= p.reducedDims[d];
      }
      acc = F::merge(acc, typename F::Acc(x[at]));
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      acc = F::merge(acc, __shfl_xor_sync(0xffffffffu, acc, offset));
    if (lane == 0)
      y[k] = F::finish(acc, p.count);
  }
}

/// x as [rows, cols] reduced over its rows (a bias gradient: [b, s, h]
/// over b and s): partial[chunk][j] folds column j over the chunk's rows,
/// in order; threads of a warp read neighbouring columns.
template <typename T, ReduceKind Kind>
__global__ void columnPartialsKernel(const T *x,
                                     typename Fold<T, Kind>::Acc *partial,
                                     int64_t rows, int64_t cols,
                                     ColumnChunks plan) {
  using F = Fold<T, Kind>;
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols)
    return;
  int64_t first, last;
  plan.rowsOfBlock(rows, first, last);
  typename F::Acc acc = F::identity();
  for (int64_t r = first; r < last; ++r)
    acc = F::merge(acc, typename F::Acc(x[r * cols + j]));
  partial[blockIdx.y * cols + j] = acc;
}

/// y[j] = the chunks' partials of column j folded in order.
template <typename T, ReduceKind Kind>
__global__ void columnFinishKernel(const typename Fold<T, Kind>::Acc *partial,
                                   T *y, int64_t chunks, int64_t cols,
                                   int64_t count) {
  using F = Fold<T, Kind>;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < cols;
       j += int64_t(gridDim.x) * blockDim.x) {
    typename F::Acc acc = F::identity();
    for (int64_t c = 0; c < chunks; ++c)
      acc = F::merge(acc, partial[c * cols + j]);
    y[j] = F::finish(acc, count);
  }
}

/// Whether `p` reduces the leading dims of a row-major [rows, cols] (the
/// kept dims innermost): a warp per output would then read a column with
/// a stride of `cols`, 20 times slower on GPT-2's bias gradients.
bool reducesLeadingRows(const ReducePlan &p) {
  return p.keptRank == 1 && p.reducedRank == 1 && p.keptStrides[0] == 1;
}

template <typename T, ReduceKind Kind>
void reduceTyped(E &e, cudaStream_t stream, const TensorView &x,
                 const TensorView &y, const Ints &axes) {
  BMRT_CHECK(x.rank() <= kMaxDims, "cuda reduce of rank " +
                                       std::to_string(x.rank()) +
                                       " (at most 16)");
  ReducePlan p = planReduce(x.shape, axes);
  if (y.size() == 0)
    return;
  if (reducesLeadingRows(p)) {
    using Acc = typename Fold<T, Kind>::Acc;
    int64_t rows = p.count, cols = p.outputs;
    ColumnChunks plan(rows);
    auto *partial =
        static_cast<Acc *>(e.scratch(plan.chunks * cols * sizeof(Acc)));
    if (plan.chunks > 0) { // no rows: the finish writes the identity's
      columnPartialsKernel<T, Kind><<<plan.grid(cols), kBlock, 0, stream>>>(
          static_cast<const T *>(x.data), partial, rows, cols, plan);
      BMRT_CUDA_CHECK_LAUNCH("reduce (column partials)");
    }
    columnFinishKernel<T, Kind><<<gridFor(cols), kBlock, 0, stream>>>(
        partial, static_cast<T *>(y.data), plan.chunks, cols, p.count);
    BMRT_CUDA_CHECK_LAUNCH("reduce (columns)");
    return;
  }
  reduceKernel<T, Kind><<<gridFor(p.outputs * kWarp), kBlock, 0, stream>>>(
      static_cast<const T *>(x.data), static_cast<T *>(y.data), p);
  BMRT_CUDA_CHECK_LAUNCH("reduce");
}

template <ReduceKind Kind>
void reduce(E &e, const TensorView &x, const TensorView &y, const Ints &axes) {
  cudaStream_t stream = cudaStreamOf(e.stream());
  if (x.dtype == DType::F32)
    return reduceTyped<float, Kind>(e, stream, x, y, axes);
  if (x.dtype == DType::I64)
    return reduceTyped<int64_t, Kind>(e, stream, x, y, axes);
  if (x.dtype == DType::I32)
    return reduceTyped<int32_t, Kind>(e, stream, x, y, axes);
  BMRT_FAIL(std::string("cuda reduce does not take ") + nameOf(x.dtype));
}

template <ReduceKind Kind> void launchReduce(E &e, const Instr &i) {
  reduce<Kind>(e, e.operand(i, 0), e.result(i, 0), i.getInts("axes"));
}

void launchGlobalAvgPool(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0);
  Ints spatial;
  for (int64_t d = 2; d < x.rank(); ++d)
    spatial.push_back(d);
  reduce<ReduceKind::Mean>(e, x, e.result(i, 0), spatial);
}

//===----------------------------------------------------------------------===//
// Cumsum and top-k: one thread per line of [outer, dim, inner]
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void cumsumKernel(const T *x, T *y, AxisSplit s, bool exclusive,
                             bool reverse) {
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  int64_t lines = s.outer * s.inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < lines;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (t / s.inner) * s.dim * s.inner + t % s.inner;
    Acc sum = 0;
    for (int64_t step = 0; step < s.dim; ++step) {
      int64_t at = base + (reverse ? s.dim - 1 - step : step) * s.inner;
      T v = x[at];
      if (exclusive) {
        y[at] = static_cast<T>(sum);
        sum += v;
      } else {
        sum += v;
        y[at] = static_cast<T>(sum);
      }
    }
  }
}

template <typename T>
void cumsumTyped(cudaStream_t stream, const TensorView &x, const TensorView &y,
                 AxisSplit s, bool exclusive, bool reverse) {
  cumsumKernel<T><<<gridFor(s.outer * s.inner), kBlock, 0, stream>>>(
      static_cast<const T *>(x.data), static_cast<T *>(y.data), s, exclusive,
      reverse);
  BMRT_CUDA_CHECK_LAUNCH("cumsum");
}

void launchCumsum(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  AxisSplit s = splitAt(x.shape, i.getInt("axis"));
  bool exclusive = i.getInt("exclusive", 0), reverse = i.getInt("reverse", 0);
  if (x.size() == 0)
    return;
  cudaStream_t stream = cudaStreamOf(e.stream());
  if (x.dtype == DType::F32)
    return cumsumTyped<float>(stream, x, y, s, exclusive, reverse);
  if (x.dtype == DType::I64)
    return cumsumTyped<int64_t>(stream, x, y, s, exclusive, reverse);
  if (x.dtype == DType::I32)
    return cumsumTyped<int32_t>(stream, x, y, s, exclusive, reverse);
  BMRT_FAIL(std::string("cuda cumsum does not take ") + nameOf(x.dtype));
}

/// Whether a sorts before b: NaN counts as the largest value (the CPU's
/// ranksBefore), ties go to the lower index.
template <typename T>
__device__ bool before(T a, int64_t ia, T b, int64_t ib, bool largest) {
  if constexpr (std::is_same_v<T, float>) {
    bool aNan = a != a, bNan = b != b;
    if (aNan || bNan) {
      if (aNan != bNan)
        return largest ? aNan : bNan;
      return ia < ib;
    }
  }
  if (a != b)
    return largest ? a > b : a < b;
  return ia < ib;
}

/// k rounds of selection per line: each takes the first element (in top-k
/// order) after the previous round's.
template <typename T>
__global__ void topKKernel(const T *x, T *values, int64_t *indices,
                           AxisSplit s, int64_t k, bool largest) {
  int64_t lines = s.outer * s.inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < lines;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = t / s.inner, j = t % s.inner;
    const T *line = x + o * s.dim * s.inner + j;
    int64_t first = o * k * s.inner + j;
    int64_t previous = -1;
    for (int64_t r = 0; r < k; ++r) {
      int64_t best = -1;
      for (int64_t c = 0; c < s.dim; ++c) {
        if (previous >= 0 &&
            !before(line[previous * s.inner], previous, line[c * s.inner], c,
                    largest))
          continue;
        if (best < 0 ||
            before(line[c * s.inner], c, line[best * s.inner], best, largest))
          best = c;
      }
      values[first + r * s.inner] = line[best * s.inner];
      indices[first + r * s.inner] = best;
      previous = best;
    }
  }
}

template <typename T>
void topKTyped(cudaStream_t stream, const TensorView &x, const TensorView &v,
               const TensorView &idx, AxisSplit s, int64_t k, bool largest) {
  topKKernel<T><<<gridFor(s.outer * s.inner), kBlock, 0, stream>>>(
      static_cast<const T *>(x.data), static_cast<T *>(v.data), idx.i64(), s,
      k, largest);
  BMRT_CUDA_CHECK_LAUNCH("top_k");
}

void launchTopK(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0);
  int64_t k = i.getInt("k"), axis = i.getInt("axis");
  bool largest = i.getInt("largest", 1);
  BMRT_CHECK(k >= 0 && k <= x.shape[axis], "top_k of " + std::to_string(k) +
                                               " from a dim of size " +
                                               std::to_string(x.shape[axis]));
  AxisSplit s = splitAt(x.shape, axis);
  if (k == 0 || s.outer * s.inner == 0)
    return;
  cudaStream_t stream = cudaStreamOf(e.stream());
  if (x.dtype == DType::F32)
    return topKTyped<float>(stream, x, e.result(i, 0), e.result(i, 1), s, k,
                            largest);
  if (x.dtype == DType::I64)
    return topKTyped<int64_t>(stream, x, e.result(i, 0), e.result(i, 1), s, k,
                              largest);
  if (x.dtype == DType::I32)
    return topKTyped<int32_t>(stream, x, e.result(i, 0), e.result(i, 1), s, k,
                              largest);
  BMRT_FAIL(std::string("cuda top_k does not take ") + nameOf(x.dtype));
}

//===----------------------------------------------------------------------===//
// Pooling, NC[spatial]
//===----------------------------------------------------------------------===//

/// The part of an output position's window inside the input, per dim.
struct Window {
  int64_t begin[3], end[3];
  __device__ int64_t count() const {
    return (end[0] - begin[0]) * (end[1] - begin[1]) * (end[2] - begin[2]);
  }
};

__device__ Window windowAt(const Geometry &g, int64_t o) {
  int64_t pos[3] = {o / (g.out[1] * g.out[2]), (o / g.out[2]) % g.out[1],
                    o % g.out[2]};
  Window w;
  for (int d = 0; d < 3; ++d) {
    int64_t start = pos[d] * g.stride[d] - g.padBegin[d];
    w.begin[d] = start > 0 ? start : 0;
    int64_t end = start + g.kernel[d] < g.in[d] ? start + g.kernel[d] : g.in[d];
    w.end[d] = end > w.begin[d] ? end : w.begin[d];
  }
  return w;
}

/// The first maximum of the window (-1 when empty), as the CPU's argmaxOf.
__device__ int64_t argmaxOf(const Geometry &g, const Window &w,
                            const float *plane) {
  int64_t best = -1;
  float bestValue = -INFINITY;
  for (int64_t i0 = w.begin[0]; i0 < w.end[0]; ++i0)
    for (int64_t i1 = w.begin[1]; i1 < w.end[1]; ++i1)
      for (int64_t i2 = w.begin[2]; i2 < w.end[2]; ++i2) {
        int64_t i = (i0 * g.in[1] + i1) * g.in[2] + i2;
        if (best < 0 || plane[i] > bestValue) {
          best = i;
          bestValue = plane[i];
        }
      }
  return best;
}

template <bool Max>
__global__ void poolKernel(const float *x, float *y, Geometry g,
                           int64_t planes) {
  int64_t total = planes * g.outSize();
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = t / g.outSize(), o = t % g.outSize();
    const float *plane = x + p * g.inSize();
    Window w = windowAt(g, o);
    if constexpr (Max) {
      int64_t at = argmaxOf(g, w, plane);
      y[t] = at < 0 ? 0.f : plane[at];
    } else {
      float sum = 0.f;
      for (int64_t i0 = w.begin[0]; i0 < w.end[0]; ++i0)
        for (int64_t i1 = w.begin[1]; i1 < w.end[1]; ++i1)
          for (int64_t i2 = w.begin[2]; i2 < w.end[2]; ++i2)
            sum += plane[(i0 * g.in[1] + i1) * g.in[2] + i2];
      int64_t count = w.count();
      y[t] = count ? sum / static_cast<float>(count) : 0.f;
    }
  }
}

/// dx[i] = the sum, over the output positions whose window holds i (in
/// output order), of dy (max: where i is the window's first maximum; avg:
/// divided by the window's count).
template <bool Max>
__global__ void poolGradKernel(const float *x, const float *dy, float *dx,
                               Geometry g, int64_t planes) {
  int64_t total = planes * g.inSize();
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = t / g.inSize(), i = t % g.inSize();
    int64_t pos[3] = {i / (g.in[1] * g.in[2]), (i / g.in[2]) % g.in[1],
                      i % g.in[2]};
    // Per dim, the output positions whose window (start o * stride - pad,
    // kernel long) covers pos.
    int64_t lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      int64_t top = pos[d] + g.padBegin[d];
      int64_t first = top - g.kernel[d] + 1;
      lo[d] = first <= 0 ? 0 : (first + g.stride[d] - 1) / g.stride[d];
      hi[d] = top / g.stride[d] + 1;
      hi[d] = hi[d] < g.out[d] ? hi[d] : g.out[d];
    }
    const float *plane = Max ? x + p * g.inSize() : nullptr;
    const float *grad = dy + p * g.outSize();
    float sum = 0.f;
    for (int64_t o0 = lo[0]; o0 < hi[0]; ++o0)
      for (int64_t o1 = lo[1]; o1 < hi[1]; ++o1)
        for (int64_t o2 = lo[2]; o2 < hi[2]; ++o2) {
          int64_t o = (o0 * g.out[1] + o1) * g.out[2] + o2;
          Window w = windowAt(g, o);
          if constexpr (Max) {
            if (argmaxOf(g, w, plane) == i)
              sum += grad[o];
          } else {
            int64_t count = w.count();
            if (count)
              sum += grad[o] / static_cast<float>(count);
          }
        }
    dx[t] = sum;
  }
}

Geometry poolGeometry(const Shape &in, const Shape &out, const Instr &i) {
  return makeGeometry(in, out, i.getInts("kernel_shape"), i.getInts("strides"),
                      i.getInts("pads"), {});
}

template <bool Max> void launchPool(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  Geometry g = poolGeometry(x.shape, y.shape, i);
  int64_t planes = x.shape[0] * x.shape[1];
  if (y.size() == 0)
    return;
  poolKernel<Max><<<gridFor(y.size()), kBlock, 0, cudaStreamOf(e.stream())>>>(
      x.f32(), y.f32(), g, planes);
  BMRT_CUDA_CHECK_LAUNCH("a pool");
}

/// Operands x, dy; result dx.
void launchMaxPoolGrad(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &dy = e.operand(i, 1);
  const TensorView &dx = e.result(i, 0);
  Geometry g = poolGeometry(x.shape, dy.shape, i);
  if (dx.size() == 0)
    return;
  poolGradKernel<true><<<gridFor(dx.size()), kBlock, 0,
                         cudaStreamOf(e.stream())>>>(
      x.f32(), dy.f32(), dx.f32(), g, x.shape[0] * x.shape[1]);
  BMRT_CUDA_CHECK_LAUNCH("max_pool_grad");
}

/// Operand dy; result dx.
void launchAvgPoolGrad(E &e, const Instr &i) {
  const TensorView &dy = e.operand(i, 0), &dx = e.result(i, 0);
  Geometry g = poolGeometry(dx.shape, dy.shape, i);
  if (dx.size() == 0)
    return;
  poolGradKernel<false><<<gridFor(dx.size()), kBlock, 0,
                          cudaStreamOf(e.stream())>>>(
      nullptr, dy.f32(), dx.f32(), g, dx.shape[0] * dx.shape[1]);
  BMRT_CUDA_CHECK_LAUNCH("avg_pool_grad");
}

// Alphabetical.
const KernelTable::Entry kKernels[] = {
    {"avg_pool", launchPool<false>},
    {"avg_pool_grad", launchAvgPoolGrad},
    {"cumsum", launchCumsum},
    {"global_avg_pool", launchGlobalAvgPool},
    {"max_pool", launchPool<true>},
    {"max_pool_grad", launchMaxPoolGrad},
    {"reduce_max", launchReduce<ReduceKind::Max>},
    {"reduce_mean", launchReduce<ReduceKind::Mean>},
    {"reduce_sum", launchReduce<ReduceKind::Sum>},
    {"top_k", launchTopK},
};

} // namespace

KernelFamily reductionKernels() {
  return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

} // namespace bmrt::cuda
