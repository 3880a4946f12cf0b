//===- ReductionKernels.cpp - reduce, scans, top-k, softmax, cross-entropy ===//
//
// Every kernel sees its input as [outer, dim, inner] around the axis it
// works along (reduce merges its axes into that form when it can). Rows
// along a last axis (inner = 1) are contiguous and get loops the compiler
// vectorises; other axes walk columns in blocks so that each load still
// touches neighbouring memory.
//
// fp32 sums that feed a loss or a normaliser accumulate in double: a
// vocabulary-wide or batch-wide float sum loses digits that training
// notices, and the extra cost is small next to exp().
//
//===----------------------------------------------------------------------===//

#include "Broadcast.h"

#include "bmrt/Error.h"
#include "runtime/cpu/Kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

namespace bmrt::cpu {

using namespace detail;

namespace {

//===----------------------------------------------------------------------===//
// Reduce
//===----------------------------------------------------------------------===//

/// How one ReduceOp folds elements of type T: the accumulator type, its
/// identity, folding an element, merging two partial results, and the
/// final value from the accumulator and the number of elements folded.
template <typename T, ReduceOp Op> struct Fold {
  using Acc =
      std::conditional_t<Op != ReduceOp::Max && std::is_same_v<T, float>,
                         double, T>;
  static Acc identity() {
    if constexpr (Op != ReduceOp::Max)
      return Acc(0);
    else if constexpr (std::is_floating_point_v<T>)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  static Acc merge(Acc a, Acc b) {
    if constexpr (Op != ReduceOp::Max)
      return a + b;
    else
      // numpy's max: a NaN anywhere makes the result NaN.
      return (b > a || b != b) ? b : a;
  }
  static Acc add(Acc a, T v) { return merge(a, Acc(v)); }
  static T finish(Acc a, int64_t count) {
    // The mean of nothing is NaN for floats (0 / 0) and 0 for integers,
    // whose division by zero would trap.
    if constexpr (Op == ReduceOp::Mean)
      return count || std::is_floating_point_v<Acc>
                 ? static_cast<T>(a / static_cast<Acc>(count))
                 : T(0);
    else
      return static_cast<T>(a);
  }
};

/// The fold of n contiguous elements, through four independent
/// accumulators so that consecutive adds do not wait on each other.
template <typename F, typename T>
typename F::Acc foldRow(const T *x, int64_t n) {
  using Acc = typename F::Acc;
  Acc a0 = F::identity(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 = F::add(a0, x[i]);
    a1 = F::add(a1, x[i + 1]);
    a2 = F::add(a2, x[i + 2]);
    a3 = F::add(a3, x[i + 3]);
  }
  for (; i < n; ++i)
    a0 = F::add(a0, x[i]);
  return F::merge(F::merge(a0, a1), F::merge(a2, a3));
}

/// x as [outer, r, 1] reduced over r. A few long rows (a full reduction)
/// are cut into parts so that every thread helps.
template <typename F, typename T>
void reduceRows(const T *x, T *y, int64_t outer, int64_t r) {
  using Acc = typename F::Acc;
  int64_t threads = omp_get_max_threads();
  int64_t parts = 1;
  if (outer < threads && outer * r > kParallelGrain)
    parts = std::min((threads + outer - 1) / outer, (r + kChunk - 1) / kChunk);
  int64_t partLength = (r + parts - 1) / parts;
  std::vector<Acc> partial(outer * parts);
#pragma omp parallel for schedule(static) if (outer * r > kParallelGrain)
  for (int64_t t = 0; t < outer * parts; ++t) {
    int64_t o = t / parts;
    int64_t begin = std::min(r, (t % parts) * partLength);
    int64_t end = std::min(r, begin + partLength);
    partial[t] = foldRow<F>(x + o * r + begin, end - begin);
  }
  for (int64_t o = 0; o < outer; ++o) {
    Acc acc = partial[o * parts];
    for (int64_t q = 1; q < parts; ++q)
      acc = F::merge(acc, partial[o * parts + q]);
    y[o] = F::finish(acc, r);
  }
}

/// x as [outer, r, inner] reduced over r, inner > 1 (a bias gradient:
/// [rows, features] summed over rows). Tasks own blocks of columns; when
/// those are too few for the threads, r is cut into parts as well.
template <typename F, typename T>
void reduceColumns(const T *x, T *y, int64_t outer, int64_t r, int64_t inner) {
  using Acc = typename F::Acc;
  constexpr int64_t kMaxBlock = 256;
  int64_t threads = omp_get_max_threads();
  // Enough blocks for every thread, and for a single outer slice (the
  // common bias gradient) a multiple of the threads, so none idles.
  int64_t blocks = std::max((inner + kMaxBlock - 1) / kMaxBlock,
                            (threads + outer - 1) / outer);
  if (outer == 1)
    blocks = (blocks + threads - 1) / threads * threads;
  int64_t block =
      std::min(inner, std::max<int64_t>(16, (inner + blocks - 1) / blocks));
  blocks = (inner + block - 1) / block;
  int64_t total = outer * r * inner;
  int64_t parts = 1;
  if (outer * blocks < threads && total > kParallelGrain)
    parts =
        std::clamp<int64_t>((threads + outer * blocks - 1) / (outer * blocks),
                            1, std::max<int64_t>(1, r / 64));
  int64_t partLength = (r + parts - 1) / parts;
  int64_t tasks = outer * blocks * parts;
  std::vector<Acc> partial(parts > 1 ? tasks * block : 0);
#pragma omp parallel for schedule(static) if (total > kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t q = t % parts, b = (t / parts) % blocks, o = t / (parts * blocks);
    int64_t j0 = b * block, width = std::min(block, inner - j0);
    int64_t begin = std::min(r, q * partLength);
    int64_t end = std::min(r, begin + partLength);
    Acc acc[kMaxBlock];
    std::fill_n(acc, width, F::identity());
    for (int64_t i = begin; i < end; ++i) {
      const T *row = x + (o * r + i) * inner + j0;
      for (int64_t j = 0; j < width; ++j)
        acc[j] = F::add(acc[j], row[j]);
    }
    if (parts == 1) {
      for (int64_t j = 0; j < width; ++j)
        y[o * inner + j0 + j] = F::finish(acc[j], r);
    } else {
      std::copy_n(acc, width, partial.data() + t * block);
    }
  }
  if (parts == 1)
    return;
  for (int64_t t = 0; t < outer * blocks; ++t) {
    int64_t o = t / blocks, j0 = (t % blocks) * block;
    int64_t width = std::min(block, inner - j0);
    for (int64_t j = 0; j < width; ++j) {
      Acc acc = partial[t * parts * block + j];
      for (int64_t q = 1; q < parts; ++q)
        acc = F::merge(acc, partial[(t * parts + q) * block + j]);
      y[o * inner + j0 + j] = F::finish(acc, r);
    }
  }
}

/// Any other pattern of axes: each output element folds the reduced
/// elements at precomputed offsets from its own base.
template <typename F, typename T>
void reduceGeneral(const T *x, T *y, const Shape &shape,
                   const std::vector<bool> &reduced) {
  Ints strides = contiguousStrides(shape);
  Ints keptDims, keptStrides, reducedDims, reducedStrides;
  for (size_t d = 0; d < shape.size(); ++d) {
    (reduced[d] ? reducedDims : keptDims).push_back(shape[d]);
    (reduced[d] ? reducedStrides : keptStrides).push_back(strides[d]);
  }
  int64_t count = numElements(reducedDims);
  Ints offsets(count);
  for (int64_t m = 0; m < count; ++m) {
    int64_t offset = 0;
    for (int64_t d = static_cast<int64_t>(reducedDims.size()) - 1, rest = m;
         d >= 0; --d) {
      offset += (rest % reducedDims[d]) * reducedStrides[d];
      rest /= reducedDims[d];
    }
    offsets[m] = offset;
  }
  int64_t outputs = numElements(keptDims);
#pragma omp parallel for schedule(static) if (outputs * count > kParallelGrain)
  for (int64_t k = 0; k < outputs; ++k) {
    int64_t base = 0;
    for (int64_t d = static_cast<int64_t>(keptDims.size()) - 1, rest = k;
         d >= 0; --d) {
      base += (rest % keptDims[d]) * keptStrides[d];
      rest /= keptDims[d];
    }
    typename F::Acc acc = F::identity();
    for (int64_t m = 0; m < count; ++m)
      acc = F::add(acc, x[base + offsets[m]]);
    y[k] = F::finish(acc, count);
  }
}

template <typename T, ReduceOp Op>
void reduceTyped(const TensorView &x, const TensorView &y, const Ints &axes) {
  using F = Fold<T, Op>;
  if (y.size() == 0)
    return;
  const T *in = static_cast<const T *>(x.data);
  T *out = static_cast<T *>(y.data);
  // Drop dims of size 1 (reducing them changes nothing) and merge
  // neighbouring dims that are both reduced or both kept.
  Shape dims;
  std::vector<bool> reduced;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (x.shape[d] == 1)
      continue;
    bool isReduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!dims.empty() && reduced.back() == isReduced) {
      dims.back() *= x.shape[d];
      continue;
    }
    dims.push_back(x.shape[d]);
    reduced.push_back(isReduced);
  }
  size_t groups = dims.size();
  // [..kept] only: every output folds one element.
  if (std::find(reduced.begin(), reduced.end(), true) == reduced.end()) {
    for (int64_t k = 0; k < x.size(); ++k)
      out[k] = F::finish(F::add(F::identity(), in[k]), 1);
    return;
  }
  // Patterns [r], [outer, r], [r, inner], [outer, r, inner].
  bool leadingKept = !reduced[0];
  size_t middle = leadingKept ? 1 : 0;
  if (groups <= middle + 2) {
    int64_t outer = leadingKept ? dims[0] : 1;
    int64_t r = dims[middle];
    int64_t inner = middle + 1 < groups ? dims[middle + 1] : 1;
    if (inner == 1)
      return reduceRows<F>(in, out, outer, r);
    return reduceColumns<F>(in, out, outer, r, inner);
  }
  reduceGeneral<F>(in, out, dims, reduced);
}

template <typename T>
void reduceDispatch(ReduceOp op, const TensorView &x, const TensorView &y,
                    const Ints &axes) {
  switch (op) {
  case ReduceOp::Max:
    return reduceTyped<T, ReduceOp::Max>(x, y, axes);
  case ReduceOp::Mean:
    return reduceTyped<T, ReduceOp::Mean>(x, y, axes);
  case ReduceOp::Sum:
    return reduceTyped<T, ReduceOp::Sum>(x, y, axes);
  }
}

//===----------------------------------------------------------------------===//
// Cumsum and top-k
//===----------------------------------------------------------------------===//

/// Scans [outer, n, inner] along n: tasks own blocks of columns and keep
/// their running sums on the stack, so x and y may be the same memory.
template <typename T>
void cumsumTyped(const TensorView &x, const TensorView &y, int64_t axis,
                 bool exclusive, bool reverse) {
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  constexpr int64_t kMaxBlock = 256;
  AxisSplit s = splitAt(x.shape, axis);
  if (x.size() == 0)
    return;
  const T *in = static_cast<const T *>(x.data);
  T *out = static_cast<T *>(y.data);
  int64_t block = std::min(s.inner, kMaxBlock);
  int64_t blocks = (s.inner + block - 1) / block;
#pragma omp parallel for schedule(static) if (x.size() > kParallelGrain)
  for (int64_t t = 0; t < s.outer * blocks; ++t) {
    int64_t o = t / blocks, j0 = (t % blocks) * block;
    int64_t width = std::min(block, s.inner - j0);
    Acc sum[kMaxBlock] = {};
    for (int64_t step = 0; step < s.dim; ++step) {
      int64_t i = reverse ? s.dim - 1 - step : step;
      int64_t at = (o * s.dim + i) * s.inner + j0;
      for (int64_t j = 0; j < width; ++j) {
        T v = in[at + j];
        if (exclusive) {
          out[at + j] = static_cast<T>(sum[j]);
          sum[j] += v;
        } else {
          sum[j] += v;
          out[at + j] = static_cast<T>(sum[j]);
        }
      }
    }
  }
}

/// Whether a sorts before b in top-k order. NaN counts as the largest
/// value (as in numpy's sort), which also keeps the order strict-weak.
template <typename T> bool ranksBefore(T a, T b, bool largest) {
  if constexpr (std::is_floating_point_v<T>) {
    bool aNan = std::isnan(a), bNan = std::isnan(b);
    if (aNan || bNan)
      return largest ? aNan && !bNan : bNan && !aNan;
  }
  return largest ? a > b : a < b;
}

template <typename T>
void topKTyped(const TensorView &x, const TensorView &values,
               const TensorView &indices, int64_t k, int64_t axis,
               bool largest) {
  AxisSplit s = splitAt(x.shape, axis);
  const T *in = static_cast<const T *>(x.data);
  T *outValues = static_cast<T *>(values.data);
  int64_t *outIndices = indices.i64();
  int64_t lines = s.outer * s.inner;
#pragma omp parallel if (x.size() > kParallelGrain)
  {
    // One scratch order per thread, not per line.
    std::vector<int64_t> order(s.dim);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < lines; ++t) {
      int64_t o = t / s.inner, j = t % s.inner;
      const T *line = in + o * s.dim * s.inner + j;
      std::iota(order.begin(), order.end(), 0);
      // Ties go to the lower index: the order is total.
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) {
                          T va = line[a * s.inner], vb = line[b * s.inner];
                          if (ranksBefore(va, vb, largest))
                            return true;
                          if (ranksBefore(vb, va, largest))
                            return false;
                          return a < b;
                        });
      int64_t first = o * k * s.inner + j;
      for (int64_t r = 0; r < k; ++r) {
        outValues[first + r * s.inner] = line[order[r] * s.inner];
        outIndices[first + r * s.inner] = order[r];
      }
    }
  }
}

} // namespace

void reduce(Stream &, ReduceOp op, const TensorView &x, const TensorView &y,
            const Ints &axes) {
  switch (x.dtype) {
  case DType::F32:
    return reduceDispatch<float>(op, x, y, axes);
  case DType::I64:
    return reduceDispatch<int64_t>(op, x, y, axes);
  case DType::I32:
    return reduceDispatch<int32_t>(op, x, y, axes);
  case DType::Bool:
    break;
  }
  BMRT_FAIL(std::string("reduce does not take ") + nameOf(x.dtype));
}

void cumsum(Stream &, const TensorView &x, const TensorView &y, int64_t axis,
            bool exclusive, bool reverse) {
  switch (x.dtype) {
  case DType::F32:
    return cumsumTyped<float>(x, y, axis, exclusive, reverse);
  case DType::I64:
    return cumsumTyped<int64_t>(x, y, axis, exclusive, reverse);
  case DType::I32:
    return cumsumTyped<int32_t>(x, y, axis, exclusive, reverse);
  case DType::Bool:
    break;
  }
  BMRT_FAIL(std::string("cumsum does not take ") + nameOf(x.dtype));
}

void topK(Stream &, const TensorView &x, const TensorView &values,
          const TensorView &indices, int64_t k, int64_t axis, bool largest) {
  BMRT_CHECK(k >= 0 && k <= x.shape[axis], "top_k of " + std::to_string(k) +
                                               " from a dim of size " +
                                               std::to_string(x.shape[axis]));
  switch (x.dtype) {
  case DType::F32:
    return topKTyped<float>(x, values, indices, k, axis, largest);
  case DType::I64:
    return topKTyped<int64_t>(x, values, indices, k, axis, largest);
  case DType::I32:
    return topKTyped<int32_t>(x, values, indices, k, axis, largest);
  case DType::Bool:
    break;
  }
  BMRT_FAIL(std::string("top_k does not take ") + nameOf(x.dtype));
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

namespace {

/// One line of n elements at stride `stride` (Unit: stride 1, so that the
/// compiler sees contiguous loops).
template <bool Unit> struct Line {
  int64_t stride;
  int64_t at(int64_t i) const { return Unit ? i : i * stride; }
};

/// The line's maximum; NaN is skipped here and poisons the sum instead.
/// Four running maxima, so that each compare waits on the one four
/// elements back, not the previous.
template <bool Unit> float lineMax(const float *x, int64_t n, Line<Unit> line) {
  float m0 = -std::numeric_limits<float>::infinity(), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    m0 = std::max(m0, x[line.at(i)]);
    m1 = std::max(m1, x[line.at(i + 1)]);
    m2 = std::max(m2, x[line.at(i + 2)]);
    m3 = std::max(m3, x[line.at(i + 3)]);
  }
  for (; i < n; ++i)
    m0 = std::max(m0, x[line.at(i)]);
  return std::max(std::max(m0, m1), std::max(m2, m3));
}

/// sum(term(offset of i)) over the line in double, through four
/// independent accumulators: one chain of dependent double adds would cost
/// as much as the exp() feeding it.
template <bool Unit, typename Term>
double sumLine(int64_t n, Line<Unit> line, Term term) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += term(line.at(i));
    s1 += term(line.at(i + 1));
    s2 += term(line.at(i + 2));
    s3 += term(line.at(i + 3));
  }
  for (; i < n; ++i)
    s0 += term(line.at(i));
  return (s0 + s1) + (s2 + s3);
}

/// Softmax (or log-softmax) of one line, shifted by the line's maximum so
/// that exp never overflows.
template <bool Unit>
void softmaxLine(const float *x, float *y, int64_t n, Line<Unit> line,
                 bool log) {
  // m by value in the lambdas below: a captured reference would keep it
  // in memory, and every loop here reads it.
  const float m = lineMax(x, n, line);
  if (log) {
    double sum =
        sumLine(n, line, [x, m](int64_t at) { return std::exp(x[at] - m); });
    float logSum = static_cast<float>(std::log(sum));
    for (int64_t i = 0; i < n; ++i)
      y[line.at(i)] = (x[line.at(i)] - m) - logSum;
    return;
  }
  // exp into y first, then sum y: the sum's adds then overlap each other
  // instead of each waiting on an exp.
  for (int64_t i = 0; i < n; ++i)
    y[line.at(i)] = std::exp(x[line.at(i)] - m);
  double sum = sumLine(n, line, [&](int64_t at) { return y[at]; });
  float scale = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i)
    y[line.at(i)] *= scale;
}

/// dx = y * (dy - sum(dy * y)).
template <bool Unit>
void softmaxGradLine(const float *y, const float *dy, float *dx, int64_t n,
                     Line<Unit> line) {
  float dot = static_cast<float>(
      sumLine(n, line, [&](int64_t at) { return double(dy[at]) * y[at]; }));
  for (int64_t i = 0; i < n; ++i)
    dx[line.at(i)] = y[line.at(i)] * (dy[line.at(i)] - dot);
}

/// dx = dy - exp(y) * sum(dy).
template <bool Unit>
void logSoftmaxGradLine(const float *y, const float *dy, float *dx, int64_t n,
                        Line<Unit> line) {
  float t =
      static_cast<float>(sumLine(n, line, [&](int64_t at) { return dy[at]; }));
  for (int64_t i = 0; i < n; ++i)
    dx[line.at(i)] = dy[line.at(i)] - std::exp(y[line.at(i)]) * t;
}

/// Runs body(offset, line) for every line along `axis` of `shape`, in
/// parallel when large; contiguous lines (the last axis) get Line<true>.
template <typename Body>
void forEachLine(const Shape &shape, int64_t axis, Body &&body) {
  AxisSplit s = splitAt(shape, axis);
  int64_t lines = s.outer * s.inner;
  bool parallel = lines * s.dim > kParallelGrain;
  if (s.inner == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < lines; ++t)
      body(t * s.dim, s.dim, Line<true>{1});
    return;
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < lines; ++t)
    body((t / s.inner) * s.dim * s.inner + t % s.inner, s.dim,
         Line<false>{s.inner});
}

} // namespace

void softmax(Stream &, const TensorView &x, const TensorView &y, int64_t axis) {
  const float *in = x.f32();
  float *out = y.f32();
  forEachLine(x.shape, axis, [&](int64_t at, int64_t n, auto line) {
    softmaxLine(in + at, out + at, n, line, /*log=*/false);
  });
}

void logSoftmax(Stream &, const TensorView &x, const TensorView &y,
                int64_t axis) {
  const float *in = x.f32();
  float *out = y.f32();
  forEachLine(x.shape, axis, [&](int64_t at, int64_t n, auto line) {
    softmaxLine(in + at, out + at, n, line, /*log=*/true);
  });
}

void softmaxGrad(Stream &, const TensorView &y, const TensorView &dy,
                 const TensorView &dx, int64_t axis) {
  const float *py = y.f32(), *pdy = dy.f32();
  float *pdx = dx.f32();
  forEachLine(y.shape, axis, [&](int64_t at, int64_t n, auto line) {
    softmaxGradLine(py + at, pdy + at, pdx + at, n, line);
  });
}

void logSoftmaxGrad(Stream &, const TensorView &y, const TensorView &dy,
                    const TensorView &dx, int64_t axis) {
  const float *py = y.f32(), *pdy = dy.f32();
  float *pdx = dx.f32();
  forEachLine(y.shape, axis, [&](int64_t at, int64_t n, auto line) {
    logSoftmaxGradLine(py + at, pdy + at, pdx + at, n, line);
  });
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

namespace {

/// PyTorch's ignore_index: rows with this label count for nothing.
constexpr int64_t kIgnoredLabel = -100;

/// The labels, checked on one thread (so a bad one throws before any
/// parallel work), and how many rows they count.
Ints checkedLabels(const TensorView &labels, int64_t classes,
                   int64_t &counted) {
  Ints result(labels.size());
  auto load = [&](const auto *values) {
    for (int64_t i = 0; i < labels.size(); ++i)
      result[i] = static_cast<int64_t>(values[i]);
  };
  if (labels.dtype == DType::I32)
    load(labels.i32());
  else if (labels.dtype == DType::I64)
    load(labels.i64());
  else
    BMRT_FAIL(std::string("cross-entropy labels must be i64, not ") +
              nameOf(labels.dtype));
  counted = 0;
  for (int64_t label : result) {
    if (label == kIgnoredLabel)
      continue;
    if (label < 0 || label >= classes)
      BMRT_FAIL("label " + std::to_string(label) + " is out of range for " +
                std::to_string(classes) + " classes");
    ++counted;
  }
  return result;
}

} // namespace

void crossEntropy(Stream &, const TensorView &logits, const TensorView &labels,
                  const TensorView &loss) {
  int64_t rows = logits.shape[0], classes = logits.shape[1];
  int64_t counted = 0;
  Ints label = checkedLabels(labels, classes, counted);
  const float *x = logits.f32();
  double total = 0;
  // -log softmax(x)[label] = log(sum(exp(x - max))) + max - x[label].
#pragma omp parallel for schedule(static) reduction(+ : total)                 \
    if (rows * classes > kParallelGrain)
  for (int64_t i = 0; i < rows; ++i) {
    if (label[i] == kIgnoredLabel)
      continue;
    const float *row = x + i * classes;
    const float m = lineMax(row, classes, Line<true>{1});
    double sum = sumLine(classes, Line<true>{1},
                         [row, m](int64_t j) { return std::exp(row[j] - m); });
    total += std::log(sum) + double(m) - double(row[label[i]]);
  }
  loss.f32()[0] = counted ? static_cast<float>(total / counted) : 0.f;
}

void crossEntropyGrad(Stream &, const TensorView &logits,
                      const TensorView &labels, const TensorView &dloss,
                      const TensorView &dlogits) {
  int64_t rows = logits.shape[0], classes = logits.shape[1];
  int64_t counted = 0;
  Ints label = checkedLabels(labels, classes, counted);
  const float *x = logits.f32();
  float *dx = dlogits.f32();
  float scale = counted ? dloss.f32()[0] / static_cast<float>(counted) : 0.f;
#pragma omp parallel for schedule(static) if (rows * classes > kParallelGrain)
  for (int64_t i = 0; i < rows; ++i) {
    float *out = dx + i * classes;
    if (label[i] == kIgnoredLabel) {
      std::fill_n(out, classes, 0.f);
      continue;
    }
    softmaxLine(x + i * classes, out, classes, Line<true>{1}, /*log=*/false);
    for (int64_t j = 0; j < classes; ++j)
      out[j] *= scale;
    out[label[i]] -= scale;
  }
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

namespace {

/// Row i's log-sum-exp over every rank's classes: the ranks' maxima and
/// sums of exp(x - max) merged at the largest max (the online softmax's
/// merge, Milakov & Gimelshein 2018), in double.
double mergedLogSumExp(const float *stats, int64_t ranks, int64_t rows,
                       int64_t i) {
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < ranks; ++r)
    top = std::max(top, double(stats[(3 * r) * rows + i]));
  double sum = 0;
  for (int64_t r = 0; r < ranks; ++r)
    sum += double(stats[(3 * r + 1) * rows + i]) *
           std::exp(double(stats[(3 * r) * rows + i]) - top);
  return top + std::log(sum);
}

} // namespace

void crossEntropyStats(Stream &, const TensorView &logits,
                       const TensorView &labels, int64_t offset,
                       int64_t classes, const TensorView &stats) {
  int64_t rows = logits.shape[0], local = logits.shape[1];
  int64_t counted = 0;
  Ints label = checkedLabels(labels, classes, counted);
  const float *x = logits.f32();
  float *max = stats.f32(), *sum = max + rows, *picked = sum + rows;
#pragma omp parallel for schedule(static) if (rows * local > kParallelGrain)
  for (int64_t i = 0; i < rows; ++i) {
    const float *row = x + i * local;
    const float m = lineMax(row, local, Line<true>{1});
    max[i] = m;
    sum[i] = static_cast<float>(sumLine(
        local, Line<true>{1}, [row, m](int64_t j) { return std::exp(row[j] - m); }));
    int64_t mine = label[i] - offset;
    picked[i] = mine >= 0 && mine < local ? row[mine] : 0.f;
  }
}

void crossEntropyFromStats(Stream &, const TensorView &stats,
                           const TensorView &labels, const TensorView &loss) {
  int64_t rows = labels.shape[0], ranks = stats.shape[0] / 3;
  int64_t counted = 0;
  Ints label = checkedLabels(labels, INT64_MAX, counted);
  const float *s = stats.f32();
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (label[i] == kIgnoredLabel)
      continue;
    double picked = 0;
    for (int64_t r = 0; r < ranks; ++r)
      picked += s[(3 * r + 2) * rows + i];
    total += mergedLogSumExp(s, ranks, rows, i) - picked;
  }
  loss.f32()[0] = counted ? static_cast<float>(total / counted) : 0.f;
}

void crossEntropyGradFromStats(Stream &, const TensorView &logits,
                               const TensorView &labels,
                               const TensorView &stats,
                               const TensorView &dloss, int64_t offset,
                               int64_t classes, const TensorView &dlogits) {
  int64_t rows = logits.shape[0], local = logits.shape[1];
  int64_t ranks = stats.shape[0] / 3;
  int64_t counted = 0;
  Ints label = checkedLabels(labels, classes, counted);
  const float *x = logits.f32(), *s = stats.f32();
  float *dx = dlogits.f32();
  float scale = counted ? dloss.f32()[0] / static_cast<float>(counted) : 0.f;
#pragma omp parallel for schedule(static) if (rows * local > kParallelGrain)
  for (int64_t i = 0; i < rows; ++i) {
    float *out = dx + i * local;
    if (label[i] == kIgnoredLabel) {
      std::fill_n(out, local, 0.f);
      continue;
    }
    const float lse = static_cast<float>(mergedLogSumExp(s, ranks, rows, i));
    const float *row = x + i * local;
    for (int64_t j = 0; j < local; ++j)
      out[j] = std::exp(row[j] - lse) * scale;
    int64_t mine = label[i] - offset;
    if (mine >= 0 && mine < local)
      out[mine] -= scale;
  }
}

} // namespace bmrt::cpu
