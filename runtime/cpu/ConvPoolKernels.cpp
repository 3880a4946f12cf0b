//===- ConvPoolKernels.cpp - convolution and pooling, NC[spatial] ---------===//
//
// Convolution is im2col + cblas_sgemm per (image, group): the column matrix
// [C/group * kernel, output positions] turns the convolution into
// W_g [C_out/group, C/group * kernel] x col. Its gradients are the
// transposed GEMMs: dcol = W_g^T dy (then col2im scatters dcol back onto
// dx) and dW_g = sum over images of dy col^T.
//
// 1-D and 2-D problems are padded to 3-D with leading spatial dims of size
// 1 (kernel 1, stride 1, no padding), so one set of loops serves all three.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Window.h"
#include "runtime/cpu/Kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <limits>

namespace bmrt::cpu {
namespace {

/// Elements a loop must touch before it forks an OpenMP team.
constexpr int64_t kParallelWork = 1 << 15;

/// OpenBLAS runs a GEMM with m * n * k below 65536 * 4 on the calling
/// thread (interface/gemm.c); tasks with such GEMMs are spread over OpenMP
/// threads, bigger ones run in turn and OpenBLAS threads each.
constexpr int64_t kBlasSingleThreadWork = 65536 * 4;

constexpr int kSpatial = Geometry::kSpatial;
using Dims = std::array<int64_t, kSpatial>;

/// Along one dim, the output positions [lo, hi) whose input position
/// o * stride + offset lies inside [0, in); offset = tap * dilation - pad.
void validRange(int64_t in, int64_t out, int64_t stride, int64_t offset,
                int64_t &lo, int64_t &hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  hi = in - 1 - offset < 0 ? 0 : (in - 1 - offset) / stride + 1;
  lo = std::min(lo, out);
  hi = std::max(std::min(hi, out), lo);
}

/// The kernel tap `t` (row-major over the kernel) as per-dim offsets.
Dims tapOffsets(const Geometry &g, int64_t t) {
  Dims offsets;
  for (int d = kSpatial; d-- > 0;) {
    offsets[d] = (t % g.kernel[d]) * g.dilation[d] - g.padBegin[d];
    t /= g.kernel[d];
  }
  return offsets;
}

/// col[c * K + t, o] = x[c, o * stride + tap_t] (0 in the padding), for
/// `channels` planes of x; K is the kernel size, o the output position.
void im2col(const float *x, int64_t channels, const Geometry &g, float *col) {
  int64_t kk = g.kernelSize(), rows = channels * kk, outSize = g.outSize();
  bool parallel = rows * outSize >= kParallelWork && !omp_in_parallel();
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float *plane = x + (r / kk) * g.inSize();
    Dims off = tapOffsets(g, r % kk);
    Dims lo, hi;
    for (int d = 0; d < kSpatial; ++d)
      validRange(g.in[d], g.out[d], g.stride[d], off[d], lo[d], hi[d]);
    float *dst = col + r * outSize;
    std::fill(dst, dst + outSize, 0.f);
    for (int64_t od = lo[0]; od < hi[0]; ++od) {
      int64_t id = od * g.stride[0] + off[0];
      for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
        int64_t ih = oh * g.stride[1] + off[1];
        // off[2] may be negative: index from the plane, whose bounds the
        // valid range keeps.
        int64_t src = (id * g.in[1] + ih) * g.in[2] + off[2];
        float *out = dst + (od * g.out[1] + oh) * g.out[2];
        for (int64_t ow = lo[2]; ow < hi[2]; ++ow)
          out[ow] = plane[src + ow * g.stride[2]];
      }
    }
  }
}

/// The adjoint of im2col: x[c, i] = sum of col entries that read i.
/// Parallel over channels, each of which owns its plane of x.
void col2im(const float *col, int64_t channels, const Geometry &g, float *x) {
  int64_t kk = g.kernelSize(), outSize = g.outSize(), inSize = g.inSize();
  bool parallel = channels > 1 && channels * kk * outSize >= kParallelWork &&
                  !omp_in_parallel();
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    float *plane = x + c * inSize;
    std::fill(plane, plane + inSize, 0.f);
    for (int64_t t = 0; t < kk; ++t) {
      Dims off = tapOffsets(g, t);
      Dims lo, hi;
      for (int d = 0; d < kSpatial; ++d)
        validRange(g.in[d], g.out[d], g.stride[d], off[d], lo[d], hi[d]);
      const float *src = col + (c * kk + t) * outSize;
      for (int64_t od = lo[0]; od < hi[0]; ++od) {
        int64_t id = od * g.stride[0] + off[0];
        for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
          int64_t ih = oh * g.stride[1] + off[1];
          int64_t dst = (id * g.in[1] + ih) * g.in[2] + off[2];
          const float *row = src + (od * g.out[1] + oh) * g.out[2];
          for (int64_t ow = lo[2]; ow < hi[2]; ++ow)
            plane[dst + ow * g.stride[2]] += row[ow];
        }
      }
    }
  }
}

blasint toBlas(int64_t value) {
  BMRT_CHECK(value <= INT_MAX, "GEMM dimension " + std::to_string(value) +
                                   " exceeds OpenBLAS's 32-bit indices");
  return static_cast<blasint>(std::max<int64_t>(value, 1));
}

/// Row-major c[m, n] = op(a) op(b) + beta c, leading dims as stored.
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
           float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, toBlas(m), toBlas(n),
              toBlas(k), 1.f, a, toBlas(lda), b, toBlas(ldb), beta, c,
              toBlas(ldc));
}

/// The sizes every convolution kernel needs (bmrt/Window.h), and whether
/// the column matrix is x itself.
struct Conv : ConvShape {
  /// A 1x1 kernel, stride 1, no padding: the column matrix is x itself.
  bool pointwise;

  int64_t gemmWork() const { return outChannels * colRows * geo.outSize(); }
  int64_t colSize() const { return pointwise ? 0 : colRows * geo.outSize(); }
};

Conv makeConv(const Shape &x, const Shape &w, const Shape &y,
              const Ints &strides, const Ints &pads, const Ints &dilations,
              int64_t group) {
  Conv c;
  static_cast<ConvShape &>(c) =
      makeConvShape(x, w, y, strides, pads, dilations, group);
  c.pointwise = c.geo.kernelSize() == 1 &&
                std::equal(c.geo.in, c.geo.in + kSpatial, c.geo.out);
  for (int d = 0; d < kSpatial; ++d)
    c.pointwise &= c.geo.stride[d] == 1 && c.geo.padBegin[d] == 0;
  return c;
}

/// Runs task(i, scratch) for i in [0, count), scratch being `scratchSize`
/// floats private to the thread. Tasks whose GEMM OpenBLAS would run on one
/// thread anyway go side by side on OpenMP threads; bigger ones run in turn.
template <typename Task>
void runTasks(int64_t count, int64_t gemmWork, int64_t scratchSize, Task task) {
  bool spread = count > 1 && gemmWork < kBlasSingleThreadWork &&
                count * gemmWork >= kParallelWork && !omp_in_parallel();
  int threads =
      spread ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), count))
             : 1;
  std::vector<float> scratch(threads * scratchSize);
#pragma omp parallel for num_threads(threads) if (spread) schedule(static)
  for (int64_t i = 0; i < count; ++i)
    task(i, scratch.data() + omp_get_thread_num() * scratchSize);
}

} // namespace

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

void conv(Stream &, const TensorView &x, const TensorView &w,
          const TensorView *bias, const TensorView &y, const Ints &strides,
          const Ints &pads, const Ints &dilations, int64_t group) {
  Conv c = makeConv(x.shape, w.shape, y.shape, strides, pads, dilations, group);
  int64_t inSize = c.geo.inSize(), outSize = c.geo.outSize();
  const float *biasData = bias ? bias->f32() : nullptr;
  runTasks(c.batch * c.groups, c.gemmWork(), c.colSize(),
           [&](int64_t task, float *scratch) {
             int64_t n = task / c.groups, g = task % c.groups;
             const float *xg =
                 x.f32() + (n * c.groups + g) * c.inChannels * inSize;
             const float *col = xg;
             if (!c.pointwise) {
               im2col(xg, c.inChannels, c.geo, scratch);
               col = scratch;
             }
             const float *wg = w.f32() + g * c.outChannels * c.colRows;
             float *yg = y.f32() + (n * c.groups + g) * c.outChannels * outSize;
             // The bias goes in first so the GEMM adds onto it (beta = 1)
             // rather than a second pass over y.
             if (biasData)
               for (int64_t o = 0; o < c.outChannels; ++o)
                 std::fill(yg + o * outSize, yg + (o + 1) * outSize,
                           biasData[g * c.outChannels + o]);
             sgemm(false, false, c.outChannels, outSize, c.colRows, wg,
                   c.colRows, col, outSize, biasData ? 1.f : 0.f, yg, outSize);
           });
}

void convGradInput(Stream &, const TensorView &dy, const TensorView &w,
                   const TensorView &dx, const Ints &strides, const Ints &pads,
                   const Ints &dilations, int64_t group) {
  Conv c =
      makeConv(dx.shape, w.shape, dy.shape, strides, pads, dilations, group);
  int64_t inSize = c.geo.inSize(), outSize = c.geo.outSize();
  // Each (image, group) writes its own channels of dx: no races.
  runTasks(c.batch * c.groups, c.gemmWork(), c.colSize(),
           [&](int64_t task, float *scratch) {
             int64_t n = task / c.groups, g = task % c.groups;
             const float *wg = w.f32() + g * c.outChannels * c.colRows;
             const float *dyg =
                 dy.f32() + (n * c.groups + g) * c.outChannels * outSize;
             float *dxg = dx.f32() + (n * c.groups + g) * c.inChannels * inSize;
             // dcol [colRows, outSize] = W_g^T dy_g; pointwise, it is dx_g.
             float *dcol = c.pointwise ? dxg : scratch;
             sgemm(true, false, c.colRows, outSize, c.outChannels, wg,
                   c.colRows, dyg, outSize, 0.f, dcol, outSize);
             if (!c.pointwise)
               col2im(dcol, c.inChannels, c.geo, dxg);
           });
}

void convGradWeight(Stream &, const TensorView &dy, const TensorView &x,
                    const TensorView &dw, const Ints &strides, const Ints &pads,
                    const Ints &dilations, int64_t group) {
  Conv c =
      makeConv(x.shape, dw.shape, dy.shape, strides, pads, dilations, group);
  int64_t inSize = c.geo.inSize(), outSize = c.geo.outSize();
  if (c.batch == 0) {
    std::fill(dw.f32(), dw.f32() + dw.size(), 0.f);
    return;
  }
  // One task per group (each owns its slice of dw), summing the images in
  // turn: dW_g += dy_g col^T.
  runTasks(c.groups, c.gemmWork() * c.batch, c.colSize(),
           [&](int64_t g, float *scratch) {
             float *dwg = dw.f32() + g * c.outChannels * c.colRows;
             for (int64_t n = 0; n < c.batch; ++n) {
               const float *xg =
                   x.f32() + (n * c.groups + g) * c.inChannels * inSize;
               const float *col = xg;
               if (!c.pointwise) {
                 im2col(xg, c.inChannels, c.geo, scratch);
                 col = scratch;
               }
               const float *dyg =
                   dy.f32() + (n * c.groups + g) * c.outChannels * outSize;
               sgemm(false, true, c.outChannels, c.colRows, outSize, dyg,
                     outSize, col, outSize, n == 0 ? 0.f : 1.f, dwg, c.colRows);
             }
           });
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

namespace {

/// The part of one output position's window inside the input: per dim,
/// [begin, end). Padding is simply outside it.
struct Window {
  Dims begin, end;
  int64_t count() const {
    return (end[0] - begin[0]) * (end[1] - begin[1]) * (end[2] - begin[2]);
  }
};

Window windowAt(const Geometry &g, const Dims &o) {
  Window w;
  for (int d = 0; d < kSpatial; ++d) {
    int64_t start = o[d] * g.stride[d] - g.padBegin[d];
    w.begin[d] = std::max<int64_t>(start, 0);
    w.end[d] = std::max(w.begin[d], std::min(start + g.kernel[d], g.in[d]));
  }
  return w;
}

/// Calls visit(outIndex, window) for every output position of a plane.
template <typename Visit> void forEachWindow(const Geometry &g, Visit visit) {
  Dims o;
  int64_t index = 0;
  for (o[0] = 0; o[0] < g.out[0]; ++o[0])
    for (o[1] = 0; o[1] < g.out[1]; ++o[1])
      for (o[2] = 0; o[2] < g.out[2]; ++o[2])
        visit(index++, windowAt(g, o));
}

/// Calls visit(inIndex) for every input position of a window, row-major.
template <typename Visit>
void forEachInWindow(const Geometry &g, const Window &w, Visit visit) {
  for (int64_t i0 = w.begin[0]; i0 < w.end[0]; ++i0)
    for (int64_t i1 = w.begin[1]; i1 < w.end[1]; ++i1) {
      int64_t row = (i0 * g.in[1] + i1) * g.in[2];
      for (int64_t i2 = w.begin[2]; i2 < w.end[2]; ++i2)
        visit(row + i2);
    }
}

/// The pool's geometry, and how many (image, channel) planes it covers.
Geometry poolGeometry(const Shape &in, const Shape &out, const Ints &kernel,
                      const Ints &strides, const Ints &pads, int64_t &planes) {
  planes = in[0] * in[1];
  return makeGeometry(in, out, kernel, strides, pads, {});
}

/// The index of the first maximum of a window (-1 when it is empty).
int64_t argmaxOf(const Geometry &g, const Window &w, const float *plane) {
  int64_t best = -1;
  float bestValue = -std::numeric_limits<float>::infinity();
  forEachInWindow(g, w, [&](int64_t i) {
    // Strictly greater: ties keep the first, as the header says; a NaN is
    // taken only if nothing else was.
    if (best < 0 || plane[i] > bestValue) {
      best = i;
      bestValue = plane[i];
    }
  });
  return best;
}

} // namespace

void maxPool(Stream &, const TensorView &x, const TensorView &y,
             const Ints &kernel, const Ints &strides, const Ints &pads) {
  int64_t planes;
  Geometry g = poolGeometry(x.shape, y.shape, kernel, strides, pads, planes);
  int64_t work = planes * g.outSize() * g.kernelSize();
#pragma omp parallel for if (work >= kParallelWork) schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float *in = x.f32() + p * g.inSize();
    float *out = y.f32() + p * g.outSize();
    forEachWindow(g, [&](int64_t o, const Window &w) {
      int64_t at = argmaxOf(g, w, in);
      // A window wholly in the padding (impossible with ONNX's pad <
      // kernel) yields 0 rather than -inf, which would poison training.
      out[o] = at < 0 ? 0.f : in[at];
    });
  }
}

void maxPoolGrad(Stream &, const TensorView &x, const TensorView &dy,
                 const TensorView &dx, const Ints &kernel, const Ints &strides,
                 const Ints &pads) {
  int64_t planes;
  Geometry g = poolGeometry(x.shape, dy.shape, kernel, strides, pads, planes);
  int64_t work = planes * g.outSize() * g.kernelSize();
  // Each plane owns its plane of dx, so overlapping windows add without
  // races.
#pragma omp parallel for if (work >= kParallelWork) schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float *in = x.f32() + p * g.inSize();
    const float *grad = dy.f32() + p * g.outSize();
    float *dIn = dx.f32() + p * g.inSize();
    std::fill(dIn, dIn + g.inSize(), 0.f);
    forEachWindow(g, [&](int64_t o, const Window &w) {
      int64_t at = argmaxOf(g, w, in);
      if (at >= 0)
        dIn[at] += grad[o];
    });
  }
}

void avgPool(Stream &, const TensorView &x, const TensorView &y,
             const Ints &kernel, const Ints &strides, const Ints &pads) {
  int64_t planes;
  Geometry g = poolGeometry(x.shape, y.shape, kernel, strides, pads, planes);
  int64_t work = planes * g.outSize() * g.kernelSize();
#pragma omp parallel for if (work >= kParallelWork) schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float *in = x.f32() + p * g.inSize();
    float *out = y.f32() + p * g.outSize();
    forEachWindow(g, [&](int64_t o, const Window &w) {
      float sum = 0.f;
      forEachInWindow(g, w, [&](int64_t i) { sum += in[i]; });
      int64_t count = w.count();
      out[o] = count ? sum / static_cast<float>(count) : 0.f;
    });
  }
}

void avgPoolGrad(Stream &, const TensorView &dy, const TensorView &dx,
                 const Ints &kernel, const Ints &strides, const Ints &pads) {
  int64_t planes;
  Geometry g = poolGeometry(dx.shape, dy.shape, kernel, strides, pads, planes);
  int64_t work = planes * g.outSize() * g.kernelSize();
#pragma omp parallel for if (work >= kParallelWork) schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float *grad = dy.f32() + p * g.outSize();
    float *dIn = dx.f32() + p * g.inSize();
    std::fill(dIn, dIn + g.inSize(), 0.f);
    forEachWindow(g, [&](int64_t o, const Window &w) {
      int64_t count = w.count();
      if (count == 0)
        return;
      float share = grad[o] / static_cast<float>(count);
      forEachInWindow(g, w, [&](int64_t i) { dIn[i] += share; });
    });
  }
}

} // namespace bmrt::cpu
