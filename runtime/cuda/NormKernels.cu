//===- NormKernels.cu - softmax, normalisations and cross-entropy ---------===//
//
// One block per row (a line along the op's axis, or a normalised block),
// each thread folding a strided part of the row and the block merging by
// warp shuffles (KernelSupport.cuh), in fp32. The CPU sums in double, so
// results differ from the reference by the rounding of fp32 partial sums:
// a few ulps times log2 of the row length.
//
// Parameter gradients (layer / RMS norm's dscale and dbias) are column
// sums over the rows in two passes (ColumnChunks: each chunk of rows sums
// its columns in order, then the chunks are added in order), then folded
// into the parameter's shape where it broadcasts. No atomics, so every run
// gives the same bits. (One pass with a thread per column walking all the
// rows had 1024 threads for 8192 rows of GPT-2 medium: 3.4 ms on an H200,
// 70 times what the bytes need.)
//
// Cross-entropy labels are checked on the device: -100 rows count for
// nothing, any other label outside the classes sets a flag that the
// launcher reads back and throws as the CPU does.
//
//===----------------------------------------------------------------------===//

#include "KernelFamilies.h"
#include "KernelSupport.cuh"

#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/NormRows.h"
#include "runtime/program/CollectiveKernels.h"

#include <cfloat>
#include <climits>

namespace bmrt::cuda {
namespace {

using namespace support;
using E = Executor;

/// Max that skips NaN, as the CPU's std::max over a row does (a NaN then
/// poisons the sum instead).
struct FMaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

//===----------------------------------------------------------------------===//
// Softmax along any axis: one block per line
//===----------------------------------------------------------------------===//

enum class SoftmaxKind { Softmax, LogSoftmax, SoftmaxGrad, LogSoftmaxGrad };

/// Line t of [outer, n, inner] starts at base(t) and steps by `inner`.
/// Forward: a = x, out = y. Backward: a = y, b = dy, out = dx.
template <SoftmaxKind Kind>
__global__ void softmaxKernel(const float *a, const float *b, float *out,
                              int64_t n, int64_t inner) {
  int64_t t = blockIdx.x;
  int64_t base = (t / inner) * n * inner + t % inner;
  a += base;
  out += base;
  if (b)
    b += base;
  if constexpr (Kind == SoftmaxKind::Softmax ||
                Kind == SoftmaxKind::LogSoftmax) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      m = fmaxf(m, a[j * inner]);
    m = blockReduce(m, FMaxOp(), -INFINITY);
    float sum = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      sum += expf(a[j * inner] - m);
    sum = blockReduce(sum, SumOp(), 0.f);
    if constexpr (Kind == SoftmaxKind::Softmax) {
      float scale = 1.f / sum;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        out[j * inner] = expf(a[j * inner] - m) * scale;
    } else {
      float logSum = logf(sum);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        out[j * inner] = (a[j * inner] - m) - logSum;
    }
  } else if constexpr (Kind == SoftmaxKind::SoftmaxGrad) {
    // dx = y * (dy - sum(dy * y)).
    float dot = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dot += b[j * inner] * a[j * inner];
    dot = blockReduce(dot, SumOp(), 0.f);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      out[j * inner] = a[j * inner] * (b[j * inner] - dot);
  } else {
    // dx = dy - exp(y) * sum(dy).
    float total = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      total += b[j * inner];
    total = blockReduce(total, SumOp(), 0.f);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      out[j * inner] = b[j * inner] - expf(a[j * inner]) * total;
  }
}

template <SoftmaxKind Kind> void launchSoftmaxKind(E &e, const Instr &i) {
  const TensorView &a = e.operand(i, 0);
  const float *b = Kind == SoftmaxKind::SoftmaxGrad ||
                           Kind == SoftmaxKind::LogSoftmaxGrad
                       ? e.operand(i, 1).f32()
                       : nullptr;
  AxisSplit s = splitAt(a.shape, i.getInt("axis"));
  int64_t lines = s.outer * s.inner;
  if (lines == 0 || s.dim == 0)
    return;
  BMRT_CHECK(lines <= INT_MAX, "softmax over " + std::to_string(lines) +
                                   " lines exceeds one cuda grid");
  softmaxKernel<Kind><<<static_cast<unsigned>(lines), kBlock, 0,
                        cudaStreamOf(e.stream())>>>(
      a.f32(), b, e.result(i, 0).f32(), s.dim, s.inner);
  BMRT_CUDA_CHECK_LAUNCH("softmax");
}

//===----------------------------------------------------------------------===//
// Layer and RMS normalisation
//===----------------------------------------------------------------------===//

/// Where a parameter broadcast onto the normalised block (numpy's rules,
/// right-aligned) is read for the block's element j.
struct ParamMap {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  bool identity = true;
  int64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};

  __host__ __device__ int64_t operator()(int64_t j) const {
    if (identity)
      return j;
    int64_t at = 0;
    for (int d = rank - 1; d >= 0; --d) {
      at += (j % dims[d]) * strides[d];
      j /= dims[d];
    }
    return at;
  }
};

ParamMap paramMap(const Shape &block, const Shape &param) {
  ParamMap map;
  size_t rank = block.size();
  BMRT_CHECK(rank <= ParamMap::kMaxRank,
             "cuda normalisation over " + std::to_string(rank) +
                 " dims (at most 8)");
  map.rank = static_cast<int>(rank);
  Ints strides = paramStrides(block, param);
  for (size_t d = 0; d < rank; ++d) {
    map.dims[d] = block[d];
    map.strides[d] = strides[d];
  }
  map.identity = numElements(param) == numElements(block) &&
                 numElements(block) > 0;
  return map;
}

unsigned rowGrid(const NormRows &r, const char *op) {
  BMRT_CHECK(r.rows <= INT_MAX, std::string(op) + " over " +
                                    std::to_string(r.rows) +
                                    " rows exceeds one cuda grid");
  return static_cast<unsigned>(r.rows);
}

/// The row's mean and 1 / sqrt(biased variance + eps), in two passes.
__device__ void rowMoments(const float *x, int64_t n, float epsilon,
                           float &mean, float &rstd) {
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    sum += x[j];
  mean = blockReduce(sum, SumOp(), 0.f) / n;
  float squares = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float d = x[j] - mean;
    squares += d * d;
  }
  rstd = rsqrtf(blockReduce(squares, SumOp(), 0.f) / n + epsilon);
}

__device__ float rowRmsInverse(const float *x, int64_t n, float epsilon) {
  float squares = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    squares += x[j] * x[j];
  return rsqrtf(blockReduce(squares, SumOp(), 0.f) / n + epsilon);
}

__global__ void layerNormKernel(const float *x, const float *scale,
                                const float *bias, float *y, int64_t cols,
                                ParamMap scaleMap, ParamMap biasMap,
                                float epsilon) {
  x += blockIdx.x * cols;
  y += blockIdx.x * cols;
  float mean, rstd;
  rowMoments(x, cols, epsilon, mean, rstd);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float b = bias ? bias[biasMap(j)] : 0.f;
    y[j] = (x[j] - mean) * rstd * scale[scaleMap(j)] + b;
  }
}

/// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy scale; also keeps
/// each row's mean and rstd for the column sums.
__global__ void layerNormGradKernel(const float *x, const float *scale,
                                    const float *dy, float *dx, float *stats,
                                    int64_t rows, int64_t cols,
                                    ParamMap scaleMap, float epsilon) {
  int64_t row = blockIdx.x;
  x += row * cols;
  dy += row * cols;
  dx += row * cols;
  float mean, rstd;
  rowMoments(x, cols, epsilon, mean, rstd);
  float sumG = 0.f, sumGXhat = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float g = dy[j] * scale[scaleMap(j)];
    sumG += g;
    sumGXhat += g * (x[j] - mean) * rstd;
  }
  float meanG = blockReduce(sumG, SumOp(), 0.f) / cols;
  float meanGXhat = blockReduce(sumGXhat, SumOp(), 0.f) / cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float xhat = (x[j] - mean) * rstd;
    float g = dy[j] * scale[scaleMap(j)];
    dx[j] = rstd * (g - meanG - xhat * meanGXhat);
  }
  if (threadIdx.x == 0) {
    stats[row] = mean;
    stats[rows + row] = rstd;
  }
}

/// Per chunk c and column j: partial[c][j] = sum over the chunk's rows of
/// dy xhat (xhat from the row's stats: (x - mean) rstd, or x rstd when
/// `centred` is false), and partial[chunks + c][j] = sum of dy (when
/// `biasToo`).
__global__ void columnPartialsKernel(const float *x, const float *dy,
                                     const float *stats, float *partial,
                                     int64_t rows, int64_t cols, bool centred,
                                     bool biasToo, ColumnChunks plan) {
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t chunk = blockIdx.y, chunks = plan.chunks;
  if (j >= cols)
    return;
  int64_t first, last;
  plan.rowsOfBlock(rows, first, last);
  float ds = 0.f, db = 0.f;
  for (int64_t r = first; r < last; ++r) {
    float g = dy[r * cols + j];
    float mean = centred ? stats[r] : 0.f;
    ds += g * (x[r * cols + j] - mean) * stats[rows + r];
    db += g;
  }
  partial[chunk * cols + j] = ds;
  if (biasToo)
    partial[(chunks + chunk) * cols + j] = db;
}

/// columns[s][j] = sum over chunks, in order, of partial[s][chunk][j].
__global__ void addChunksKernel(const float *partial, float *columns,
                                int64_t chunks, int64_t cols, int64_t sums) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       t < sums * cols; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t sum = t / cols, j = t % cols;
    const float *p = partial + sum * chunks * cols + j;
    float total = 0.f;
    for (int64_t c = 0; c < chunks; ++c)
      total += p[c * cols];
    columns[t] = total;
  }
}

/// dparam[p] = sum of the column sums of the block elements reading p.
__global__ void foldKernel(const float *columns, float *dparam, int64_t cols,
                           int64_t size, ParamMap map) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < size;
       p += int64_t(gridDim.x) * blockDim.x) {
    if (map.identity) {
      dparam[p] = columns[p];
      continue;
    }
    float sum = 0.f;
    for (int64_t j = 0; j < cols; ++j)
      if (map(j) == p)
        sum += columns[j];
    dparam[p] = sum;
  }
}

void fold(cudaStream_t stream, const float *columns, const NormRows &r,
          const TensorView &dparam) {
  int64_t size = dparam.size();
  if (size == 0)
    return;
  foldKernel<<<gridFor(size), kBlock, 0, stream>>>(
      columns, dparam.f32(), r.cols, size, paramMap(r.block, dparam.shape));
  BMRT_CUDA_CHECK_LAUNCH("a parameter gradient fold");
}

float epsilonOf(const Instr &i) {
  return static_cast<float>(i.getFloat("epsilon"));
}

/// A norm gradient's scratch: each row's two statistics (mean and rstd),
/// `sums` column sums per column (dscale, and dbias where asked), and the
/// first pass's partial sums of those per chunk of rows.
struct GradScratch {
  float *stats, *columns, *partial;
};

GradScratch gradScratch(E &e, const NormRows &r, int64_t sums) {
  Carver carver;
  size_t statsAt = carver.reserve(2 * r.rows * sizeof(float));
  size_t columnsAt = carver.reserve(sums * r.cols * sizeof(float));
  size_t partialAt = carver.reserve(sums * ColumnChunks(r.rows).chunks *
                                    r.cols * sizeof(float));
  carver.allocate(e);
  return {carver.at<float>(statsAt), carver.at<float>(columnsAt),
          carver.at<float>(partialAt)};
}

/// The column sums of a norm gradient (dscale's, and dbias's where `sums`
/// is 2) into scratch.columns, from the rows' stats.
void columnSums(cudaStream_t stream, const float *x, const float *dy,
                const GradScratch &scratch, const NormRows &r, int64_t sums,
                bool centred) {
  if (r.cols == 0)
    return;
  ColumnChunks plan(r.rows);
  if (plan.chunks == 0) { // no rows: every sum is 0
    BMRT_CUDA_CHECK(cudaMemsetAsync(scratch.columns, 0,
                                    sums * r.cols * sizeof(float), stream));
    return;
  }
  columnPartialsKernel<<<plan.grid(r.cols), kBlock, 0, stream>>>(
      x, dy, scratch.stats, scratch.partial, r.rows, r.cols, centred,
      sums == 2, plan);
  BMRT_CUDA_CHECK_LAUNCH("a norm gradient's column sums (chunks)");
  addChunksKernel<<<gridFor(sums * r.cols), kBlock, 0, stream>>>(
      scratch.partial, scratch.columns, plan.chunks, r.cols, sums);
  BMRT_CUDA_CHECK_LAUNCH("a norm gradient's column sums");
}

void launchLayerNorm(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &scale = e.operand(i, 1);
  const TensorView *bias = e.optionalOperand(i, 2);
  NormRows r = normRows(x.shape, i.getInt("axis"));
  if (r.rows == 0 || r.cols == 0)
    return;
  layerNormKernel<<<rowGrid(r, "layer_norm"), kBlock, 0,
                    cudaStreamOf(e.stream())>>>(
      x.f32(), scale.f32(), bias ? bias->f32() : nullptr,
      e.result(i, 0).f32(), r.cols, paramMap(r.block, scale.shape),
      paramMap(r.block, bias ? bias->shape : Shape{}), epsilonOf(i));
  BMRT_CUDA_CHECK_LAUNCH("layer_norm");
}

/// Operands x, scale, dy; results dx, dscale and (optional) dbias.
void launchLayerNormGrad(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &scale = e.operand(i, 1);
  const TensorView &dy = e.operand(i, 2);
  const TensorView &dx = e.result(i, 0), &dscale = e.result(i, 1);
  const TensorView *dbias = i.results.size() > 2 ? &e.result(i, 2) : nullptr;
  NormRows r = normRows(x.shape, i.getInt("axis"));
  cudaStream_t stream = cudaStreamOf(e.stream());
  GradScratch scratch = gradScratch(e, r, /*sums=*/2);
  if (r.rows > 0 && r.cols > 0) {
    layerNormGradKernel<<<rowGrid(r, "layer_norm_grad"), kBlock, 0, stream>>>(
        x.f32(), scale.f32(), dy.f32(), dx.f32(), scratch.stats, r.rows,
        r.cols, paramMap(r.block, scale.shape), epsilonOf(i));
    BMRT_CUDA_CHECK_LAUNCH("layer_norm_grad");
  }
  columnSums(stream, x.f32(), dy.f32(), scratch, r, /*sums=*/2,
             /*centred=*/true);
  fold(stream, scratch.columns, r, dscale);
  if (dbias)
    fold(stream, scratch.columns + r.cols, r, *dbias);
}

__global__ void rmsNormKernel(const float *x, const float *scale, float *y,
                              int64_t cols, ParamMap scaleMap, float epsilon) {
  x += blockIdx.x * cols;
  y += blockIdx.x * cols;
  float inv = rowRmsInverse(x, cols, epsilon);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    y[j] = x[j] * inv * scale[scaleMap(j)];
}

/// dx = r g - x r^3 mean(g x), g = dy scale, r = 1 / rms; keeps r per row
/// (stats[rows + row], the mean slot unused) for the column sums.
__global__ void rmsNormGradKernel(const float *x, const float *scale,
                                  const float *dy, float *dx, float *stats,
                                  int64_t rows, int64_t cols,
                                  ParamMap scaleMap, float epsilon) {
  int64_t row = blockIdx.x;
  x += row * cols;
  dy += row * cols;
  dx += row * cols;
  float inv = rowRmsInverse(x, cols, epsilon);
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    dot += dy[j] * scale[scaleMap(j)] * x[j];
  dot = blockReduce(dot, SumOp(), 0.f);
  float coefficient = inv * inv * inv * dot / cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    dx[j] = inv * dy[j] * scale[scaleMap(j)] - x[j] * coefficient;
  if (threadIdx.x == 0)
    stats[rows + row] = inv;
}

void launchRmsNorm(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &scale = e.operand(i, 1);
  NormRows r = normRows(x.shape, i.getInt("axis"));
  if (r.rows == 0 || r.cols == 0)
    return;
  rmsNormKernel<<<rowGrid(r, "rms_norm"), kBlock, 0,
                  cudaStreamOf(e.stream())>>>(
      x.f32(), scale.f32(), e.result(i, 0).f32(), r.cols,
      paramMap(r.block, scale.shape), epsilonOf(i));
  BMRT_CUDA_CHECK_LAUNCH("rms_norm");
}

/// Operands x, scale, dy; results dx, dscale.
void launchRmsNormGrad(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &scale = e.operand(i, 1);
  const TensorView &dy = e.operand(i, 2);
  NormRows r = normRows(x.shape, i.getInt("axis"));
  cudaStream_t stream = cudaStreamOf(e.stream());
  GradScratch scratch = gradScratch(e, r, /*sums=*/1);
  if (r.rows > 0 && r.cols > 0) {
    rmsNormGradKernel<<<rowGrid(r, "rms_norm_grad"), kBlock, 0, stream>>>(
        x.f32(), scale.f32(), dy.f32(), e.result(i, 0).f32(), scratch.stats,
        r.rows, r.cols, paramMap(r.block, scale.shape), epsilonOf(i));
    BMRT_CUDA_CHECK_LAUNCH("rms_norm_grad");
  }
  columnSums(stream, x.f32(), dy.f32(), scratch, r, /*sums=*/1,
             /*centred=*/false);
  fold(stream, scratch.columns, r, e.result(i, 1));
}

//===----------------------------------------------------------------------===//
// Batch normalisation (inference form), NC[spatial]
//===----------------------------------------------------------------------===//

__global__ void batchNormKernel(const float *x, const float *scale,
                                const float *bias, const float *mean,
                                const float *variance, float *y, int64_t n,
                                int64_t channels, int64_t positions,
                                float epsilon) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = (i / positions) % channels;
    float a = scale[c] * rsqrtf(variance[c] + epsilon);
    y[i] = x[i] * a + (bias[c] - mean[c] * a);
  }
}

void launchBatchNorm(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0);
  NormPlanes p = normPlanes(x.shape);
  if (x.size() == 0)
    return;
  batchNormKernel<<<gridFor(x.size()), kBlock, 0, cudaStreamOf(e.stream())>>>(
      x.f32(), e.operand(i, 1).f32(), e.operand(i, 2).f32(),
      e.operand(i, 3).f32(), e.operand(i, 4).f32(), e.result(i, 0).f32(),
      x.size(), p.channels, p.positions, epsilonOf(i));
  BMRT_CUDA_CHECK_LAUNCH("batch_norm");
}

/// One block per channel: dx = dy scale istd, dscale = sum dy (x - mean)
/// istd, dbias = sum dy.
__global__ void batchNormGradKernel(const float *x, const float *scale,
                                    const float *mean, const float *variance,
                                    const float *dy, float *dx, float *dscale,
                                    float *dbias, NormPlanes p, float epsilon) {
  int64_t c = blockIdx.x;
  float istd = rsqrtf(variance[c] + epsilon);
  float dxScale = scale[c] * istd, mu = mean[c];
  float sumDy = 0.f, sumDyXhat = 0.f;
  int64_t count = p.images * p.positions;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    int64_t n = k / p.positions, i = k % p.positions;
    int64_t at = (n * p.channels + c) * p.positions + i;
    dx[at] = dy[at] * dxScale;
    sumDy += dy[at];
    sumDyXhat += dy[at] * (x[at] - mu);
  }
  sumDy = blockReduce(sumDy, SumOp(), 0.f);
  sumDyXhat = blockReduce(sumDyXhat, SumOp(), 0.f);
  if (threadIdx.x == 0) {
    dscale[c] = sumDyXhat * istd;
    dbias[c] = sumDy;
  }
}

/// Operands x, scale, mean, variance, dy; results dx, dscale, dbias.
void launchBatchNormGrad(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0);
  NormPlanes p = normPlanes(x.shape);
  if (p.channels == 0)
    return;
  batchNormGradKernel<<<static_cast<unsigned>(p.channels), kBlock, 0,
                        cudaStreamOf(e.stream())>>>(
      x.f32(), e.operand(i, 1).f32(), e.operand(i, 2).f32(),
      e.operand(i, 3).f32(), e.operand(i, 4).f32(), e.result(i, 0).f32(),
      e.result(i, 1).f32(), e.result(i, 2).f32(), p, epsilonOf(i));
  BMRT_CUDA_CHECK_LAUNCH("batch_norm_grad");
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

/// One block: checks every label against [0, classes) (flagging the first
/// offender) and counts the rows not ignored into *counted.
__global__ void checkLabelsKernel(Labels labels, int64_t rows, int64_t classes,
                                  LabelFlag *flag, float *counted) {
  float count = 0.f;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    int64_t label = labels[i];
    if (label == kIgnoredLabel)
      continue;
    if (label < 0 || label >= classes)
      reportLabel(flag, label);
    count += 1.f;
  }
  count = blockReduce(count, SumOp(), 0.f);
  if (threadIdx.x == 0)
    *counted = count;
}

/// Per row: max, sum of exp(x - max) (a block's reductions).
__device__ void rowLogSumExpParts(const float *row, int64_t n, float &m,
                                  float &sum) {
  m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    m = fmaxf(m, row[j]);
  m = blockReduce(m, FMaxOp(), -INFINITY);
  sum = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    sum += expf(row[j] - m);
  sum = blockReduce(sum, SumOp(), 0.f);
}


/// Per row: -log softmax(x)[label] (0 for ignored or bad labels).
__global__ void rowLossKernel(const float *logits, Labels labels,
                              int64_t classes, float *rowLoss) {
  int64_t i = blockIdx.x;
  int64_t label = labels[i];
  bool counted = label >= 0 && label < classes;
  const float *row = logits + i * classes;
  float m, sum;
  rowLogSumExpParts(row, classes, m, sum);
  if (threadIdx.x == 0)
    rowLoss[i] = counted ? logf(sum) + m - row[label] : 0.f;
}

/// One block: *loss = sum(values) / *counted (0 with nothing counted).
__global__ void meanLossKernel(const float *values, int64_t rows,
                               const float *counted, float *loss) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x)
    sum += values[i];
  sum = blockReduce(sum, SumOp(), 0.0);
  if (threadIdx.x == 0)
    *loss = *counted > 0.f ? static_cast<float>(sum / *counted) : 0.f;
}

/// Scratch of the loss launchers: the flag, the count, per-row values.
struct LossScratch {
  LabelFlag *flag;
  float *counted;
  float *rowValues;
};

LossScratch lossScratch(E &e, int64_t rows, cudaStream_t stream) {
  Carver carver;
  size_t flagAt = carver.reserve(sizeof(LabelFlag));
  size_t countedAt = carver.reserve(sizeof(float));
  size_t rowsAt = carver.reserve(std::max<int64_t>(rows, 1) * sizeof(float));
  carver.allocate(e);
  LossScratch s{carver.at<LabelFlag>(flagAt), carver.at<float>(countedAt),
                carver.at<float>(rowsAt)};
  BMRT_CUDA_CHECK(cudaMemsetAsync(s.flag, 0, sizeof(LabelFlag), stream));
  return s;
}

void checkLabels(cudaStream_t stream, Labels labels, int64_t rows,
                 int64_t classes, const LossScratch &s) {
  checkLabelsKernel<<<1, 1024, 0, stream>>>(labels, rows, classes, s.flag,
                                            s.counted);
  BMRT_CUDA_CHECK_LAUNCH("the cross-entropy label check");
}

unsigned lossGrid(int64_t rows) {
  BMRT_CHECK(rows <= INT_MAX, "cross-entropy over " + std::to_string(rows) +
                                  " rows exceeds one cuda grid");
  return static_cast<unsigned>(rows);
}

void launchCrossEntropy(E &e, const Instr &i) {
  const TensorView &logits = e.operand(i, 0);
  Labels labels = labelsOf(e.operand(i, 1));
  int64_t rows = logits.shape[0], classes = logits.shape[1];
  cudaStream_t stream = cudaStreamOf(e.stream());
  LossScratch s = lossScratch(e, rows, stream);
  checkLabels(stream, labels, rows, classes, s);
  if (rows > 0) {
    rowLossKernel<<<lossGrid(rows), kBlock, 0, stream>>>(logits.f32(), labels,
                                                         classes, s.rowValues);
    BMRT_CUDA_CHECK_LAUNCH("cross_entropy");
  }
  meanLossKernel<<<1, 1024, 0, stream>>>(s.rowValues, rows, s.counted,
                                         e.result(i, 0).f32());
  BMRT_CUDA_CHECK_LAUNCH("cross_entropy's mean");
  throwIfBadLabel(stream, s.flag, classes);
}

/// dlogits = dloss (softmax(x) - onehot(label)) / counted, for this rank's
/// classes [offset, offset + local) of a row whose log-sum-exp is `lse`
/// (from `stats` when given, else the row's own).
__global__ void crossEntropyGradKernel(const float *logits, Labels labels,
                                       const float *stats, int64_t ranks,
                                       int64_t rows, const float *dloss,
                                       const float *counted, int64_t offset,
                                       int64_t local, int64_t classes,
                                       float *dlogits) {
  int64_t i = blockIdx.x;
  int64_t label = labels[i];
  const float *row = logits + i * local;
  float *out = dlogits + i * local;
  if (label == kIgnoredLabel || label < 0 || label >= classes) {
    for (int64_t j = threadIdx.x; j < local; j += blockDim.x)
      out[j] = 0.f;
    return;
  }
  float lse;
  if (stats) {
    // The ranks' maxima and sums merged at the largest max.
    float top = -INFINITY;
    for (int64_t r = 0; r < ranks; ++r)
      top = fmaxf(top, stats[(3 * r) * rows + i]);
    float sum = 0.f;
    for (int64_t r = 0; r < ranks; ++r)
      sum += stats[(3 * r + 1) * rows + i] *
             expf(stats[(3 * r) * rows + i] - top);
    lse = top + logf(sum);
  } else {
    float m, sum;
    rowLogSumExpParts(row, local, m, sum);
    lse = m + logf(sum);
  }
  float scale = *counted > 0.f ? *dloss / *counted : 0.f;
  int64_t mine = label - offset;
  for (int64_t j = threadIdx.x; j < local; j += blockDim.x)
    out[j] = expf(row[j] - lse) * scale - (j == mine ? scale : 0.f);
}

void launchCrossEntropyGrad(E &e, const Instr &i) {
  const TensorView &logits = e.operand(i, 0);
  Labels labels = labelsOf(e.operand(i, 1));
  int64_t rows = logits.shape[0], classes = logits.shape[1];
  cudaStream_t stream = cudaStreamOf(e.stream());
  LossScratch s = lossScratch(e, rows, stream);
  checkLabels(stream, labels, rows, classes, s);
  if (rows > 0) {
    crossEntropyGradKernel<<<lossGrid(rows), kBlock, 0, stream>>>(
        logits.f32(), labels, nullptr, 0, rows, e.operand(i, 2).f32(),
        s.counted, 0, classes, classes, e.result(i, 0).f32());
    BMRT_CUDA_CHECK_LAUNCH("cross_entropy_grad");
  }
  throwIfBadLabel(stream, s.flag, classes);
}

/// stats [3, rows]: max, sum of exp(x - max), the label's logit if this
/// rank holds its class (else 0).
__global__ void crossEntropyStatsKernel(const float *logits, Labels labels,
                                        int64_t rows, int64_t local,
                                        int64_t offset, float *stats) {
  int64_t i = blockIdx.x;
  const float *row = logits + i * local;
  float m, sum;
  rowLogSumExpParts(row, local, m, sum);
  if (threadIdx.x == 0) {
    int64_t mine = labels[i] - offset;
    stats[i] = m;
    stats[rows + i] = sum;
    stats[2 * rows + i] = mine >= 0 && mine < local ? row[mine] : 0.f;
  }
}

void launchCrossEntropyStats(E &e, const Instr &i) {
  const TensorView &logits = e.operand(i, 0);
  Labels labels = labelsOf(e.operand(i, 1));
  ClassSplit split = classSplitOf(e, i);
  int64_t rows = logits.shape[0], local = logits.shape[1];
  cudaStream_t stream = cudaStreamOf(e.stream());
  LossScratch s = lossScratch(e, rows, stream);
  checkLabels(stream, labels, rows, split.classes, s);
  if (rows > 0) {
    crossEntropyStatsKernel<<<lossGrid(rows), kBlock, 0, stream>>>(
        logits.f32(), labels, rows, local, split.offset, e.result(i, 0).f32());
    BMRT_CUDA_CHECK_LAUNCH("cross_entropy_stats");
  }
  throwIfBadLabel(stream, s.flag, split.classes);
}

/// Per row: the merged log-sum-exp minus the label's logit (the sum of the
/// ranks' picked logits); 0 for ignored rows.
__global__ void lossFromStatsKernel(const float *stats, Labels labels,
                                    int64_t ranks, int64_t rows,
                                    float *rowLoss) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (labels[i] == kIgnoredLabel) {
      rowLoss[i] = 0.f;
      continue;
    }
    double top = -INFINITY, picked = 0;
    for (int64_t r = 0; r < ranks; ++r)
      top = fmax(top, double(stats[(3 * r) * rows + i]));
    double sum = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      sum += double(stats[(3 * r + 1) * rows + i]) *
             exp(double(stats[(3 * r) * rows + i]) - top);
      picked += stats[(3 * r + 2) * rows + i];
    }
    rowLoss[i] = static_cast<float>(top + log(sum) - picked);
  }
}

void launchCrossEntropyFromStats(E &e, const Instr &i) {
  const TensorView &stats = e.operand(i, 0);
  Labels labels = labelsOf(e.operand(i, 1));
  int64_t rows = e.operand(i, 1).shape[0], ranks = stats.shape[0] / 3;
  cudaStream_t stream = cudaStreamOf(e.stream());
  LossScratch s = lossScratch(e, rows, stream);
  // As the CPU's: only negative labels other than -100 are out of range.
  checkLabels(stream, labels, rows, INT64_MAX, s);
  if (rows > 0) {
    lossFromStatsKernel<<<gridFor(rows), kBlock, 0, stream>>>(
        stats.f32(), labels, ranks, rows, s.rowValues);
    BMRT_CUDA_CHECK_LAUNCH("cross_entropy_from_stats");
  }
  meanLossKernel<<<1, 1024, 0, stream>>>(s.rowValues, rows, s.counted,
                                         e.result(i, 0).f32());
  BMRT_CUDA_CHECK_LAUNCH("cross_entropy_from_stats' mean");
  throwIfBadLabel(stream, s.flag, INT64_MAX);
}

/// Operands logits, labels, stats, dloss; result dlogits.
void launchCrossEntropyGradFromStats(E &e, const Instr &i) {
  const TensorView &logits = e.operand(i, 0);
  Labels labels = labelsOf(e.operand(i, 1));
  const TensorView &stats = e.operand(i, 2);
  ClassSplit split = classSplitOf(e, i);
  int64_t rows = logits.shape[0], local = logits.shape[1];
  cudaStream_t stream = cudaStreamOf(e.stream());
  LossScratch s = lossScratch(e, rows, stream);
  checkLabels(stream, labels, rows, split.classes, s);
  if (rows > 0) {
    crossEntropyGradKernel<<<lossGrid(rows), kBlock, 0, stream>>>(
        logits.f32(), labels, stats.f32(), stats.shape[0] / 3, rows,
        e.operand(i, 3).f32(), s.counted, split.offset, local, split.classes,
        e.result(i, 0).f32());
    BMRT_CUDA_CHECK_LAUNCH("cross_entropy_grad_from_stats");
  }
  throwIfBadLabel(stream, s.flag, split.classes);
}

// Alphabetical.
const KernelTable::Entry kKernels[] = {
    {"batch_norm", launchBatchNorm},
    {"batch_norm_grad", launchBatchNormGrad},
    {"cross_entropy", launchCrossEntropy},
    {"cross_entropy_from_stats", launchCrossEntropyFromStats},
    {"cross_entropy_grad", launchCrossEntropyGrad},
    {"cross_entropy_grad_from_stats", launchCrossEntropyGradFromStats},
    {"cross_entropy_stats", launchCrossEntropyStats},
    {"layer_norm", launchLayerNorm},
    {"layer_norm_grad", launchLayerNormGrad},
    {"log_softmax", launchSoftmaxKind<SoftmaxKind::LogSoftmax>},
    {"log_softmax_grad", launchSoftmaxKind<SoftmaxKind::LogSoftmaxGrad>},
    {"rms_norm", launchRmsNorm},
    {"rms_norm_grad", launchRmsNormGrad},
    {"softmax", launchSoftmaxKind<SoftmaxKind::Softmax>},
    {"softmax_grad", launchSoftmaxKind<SoftmaxKind::SoftmaxGrad>},
};

} // namespace

KernelFamily normKernels() {
  return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

} // namespace bmrt::cuda
