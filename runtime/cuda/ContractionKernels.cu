//===- ContractionKernels.cu - matmul, gemm, einsum and convolution -------===//
//
// Every contraction ends in one cuBLASLt call per GEMM shape (CublasLt.h),
// in the device's ContractionPrecision: fp32, or bf16 inputs with fp32
// accumulation under the plan's bf16. Either way every tensor here, the
// im2col columns and einsum's intermediates included, is fp32 in memory;
// only the GEMM's own packed copy of its operands is bf16.
//  - matmul maps numpy's broadcast batch onto one strided batch when each
//    operand's batch is whole or shared (stride 0), else onto one GEMM per
//    batch entry;
//  - einsum, as the CPU's, contracts left to right, gathering each pair of
//    operands into [batch, M, K] / [batch, K, N] (the strided walk below,
//    which also sums letters one operand holds alone and reads repeated
//    letters' diagonals) and permuting the product into the output;
//  - convolution is im2col + GEMM per group, batched over images; its input
//    gradient is the transposed GEMM then col2im (as a gather, so each
//    element's sum has a fixed order and no atomics); its weight gradient
//    lays the columns out with images inside K, so one GEMM per group sums
//    the images.
//
//===----------------------------------------------------------------------===//

#include "CublasLt.h"
#include "KernelFamilies.h"
#include "KernelSupport.cuh"

#include "bmrt/Einsum.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Gemm.h"

#include <memory>
#include <string>

namespace bmrt::cuda {
namespace {

using namespace support;
using E = Executor;

/// What the GEMMs of `e`'s device read their operands in.
ContractionPrecision precisionOf(E &e) {
  return e.device().contractionPrecision();
}

//===----------------------------------------------------------------------===//
// The strided walk: transposes, broadcasts, diagonals and sums
//===----------------------------------------------------------------------===//

/// Axes a walk may have: einsum letters beyond this are rejected.
constexpr int kMaxAxes = 16;

using einsum::Axis;

/// dst (contiguous over `kept`, in order) = sum over `summed` of src.
struct Walk {
  int keptRank = 0, summedRank = 0;
  Axis kept[kMaxAxes];
  Axis summed[kMaxAxes];
};

/// One thread per output element; sums accumulate in double, as the CPU's.
__global__ void walkKernel(const float *src, float *dst, Walk w, int64_t n,
                           int64_t sumCount) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = 0, rest = i;
    for (int d = w.keptRank - 1; d >= 0; --d) {
      base += (rest % w.kept[d].extent) * w.kept[d].stride;
      rest /= w.kept[d].extent;
    }
    if (w.summedRank == 0) {
      dst[i] = src[base];
      continue;
    }
    double sum = 0;
    for (int64_t s = 0; s < sumCount; ++s) {
      int64_t at = base, r = s;
      for (int d = w.summedRank - 1; d >= 0; --d) {
        at += (r % w.summed[d].extent) * w.summed[d].stride;
        r /= w.summed[d].extent;
      }
      sum += src[at];
    }
    dst[i] = static_cast<float>(sum);
  }
}

void runWalk(cudaStream_t stream, const float *src, float *dst,
             const std::vector<Axis> &kept, const std::vector<Axis> &summed) {
  BMRT_CHECK(kept.size() <= kMaxAxes && summed.size() <= kMaxAxes,
             "cuda strided copy of more than " + std::to_string(kMaxAxes) +
                 " axes");
  Walk w;
  int64_t n = 1, sumCount = 1;
  for (const Axis &axis : kept) {
    w.kept[w.keptRank++] = axis;
    n *= axis.extent;
  }
  for (const Axis &axis : summed) {
    w.summed[w.summedRank++] = axis;
    sumCount *= axis.extent;
  }
  if (n == 0)
    return;
  walkKernel<<<gridFor(n), kBlock, 0, stream>>>(src, dst, w, n, sumCount);
  BMRT_CUDA_CHECK_LAUNCH("a strided copy");
}

void runWalk(cudaStream_t stream, const float *src, float *dst,
             const einsum::Walk &walk) {
  runWalk(stream, src, dst, walk.kept, walk.summed);
}

/// Stream-ordered device memory for temporaries whose sizes are known only
/// as a kernel goes (einsum's chain of contractions); get() replaces what
/// it held, freed in stream order after the work already enqueued.
class DeviceBuffer {
public:
  float *get(cudaStream_t stream, int64_t elements) {
    buffer.reset();
    buffer = std::make_unique<StreamBuffer>(
        std::max<int64_t>(elements, 1) * sizeof(float), stream);
    return static_cast<float *>(buffer->data());
  }

private:
  std::unique_ptr<StreamBuffer> buffer;
};

//===----------------------------------------------------------------------===//
// matmul and gemm
//===----------------------------------------------------------------------===//

void launchMatmul(E &e, const Instr &i) {
  const TensorView &a = e.operand(i, 0), &b = e.operand(i, 1);
  const TensorView &out = e.result(i, 0);
  MatmulPlan plan = planMatmul(a.shape, b.shape, i.getInt("trans_a", 0),
                               i.getInt("trans_b", 0));
  GemmShape g = plan.gemm;
  cudaStream_t stream = cudaStreamOf(e.stream());
  ContractionPrecision precision = precisionOf(e);
  int64_t aCount = plan.aCount(), bCount = plan.bCount();
  if (plan.foldsIntoM()) {
    g.m *= aCount;
    return gemm(stream, g, 1.f, a.f32(), b.f32(), 0.f, out.f32(), precision);
  }
  int64_t count = plan.count(), cMatrix = g.m * g.n;
  // Each operand whole (its batch is out's) or shared (one matrix): one
  // strided batch.
  bool aSimple = aCount == count || aCount == 1;
  bool bSimple = bCount == count || bCount == 1;
  if (aSimple && bSimple) {
    g.batch = count;
    g.strideA = aCount == 1 ? 0 : g.m * g.k;
    g.strideB = bCount == 1 ? 0 : g.k * g.n;
    g.strideC = cMatrix;
    return gemm(stream, g, 1.f, a.f32(), b.f32(), 0.f, out.f32(), precision);
  }
  // Mixed broadcasting ([2, 1, M, K] x [1, 3, K, N]): one GEMM per entry
  // (under bf16 each packs its own operands: rare enough not to share).
  for (int64_t entry = 0; entry < count; ++entry) {
    int64_t aOffset, bOffset;
    plan.offsets(entry, aOffset, bOffset);
    gemm(stream, g, 1.f, a.f32() + aOffset, b.f32() + bOffset, 0.f,
         out.f32() + entry * cMatrix, precision);
  }
}

/// ONNX Gemm: out = alpha op(a) op(b) + beta c, c broadcast onto out first.
void launchGemm(E &e, const Instr &i) {
  const TensorView &a = e.operand(i, 0), &b = e.operand(i, 1);
  const TensorView *c = e.optionalOperand(i, 2);
  const TensorView &out = e.result(i, 0);
  float alpha = static_cast<float>(i.getFloat("alpha"));
  float beta = static_cast<float>(i.getFloat("beta"));
  GemmShape g = planGemm(a.shape, b.shape, i.getInt("trans_a", 0),
                         i.getInt("trans_b", 0));
  cudaStream_t stream = cudaStreamOf(e.stream());
  ContractionPrecision precision = precisionOf(e);
  if (!c || beta == 0.f)
    return gemm(stream, g, alpha, a.f32(), b.f32(), 0.f, out.f32(), precision);
  Ints strides = broadcastStrides(c->shape, 2);
  runWalk(stream, c->f32(), out.f32(),
          {{g.m, strides[0]}, {g.n, strides[1]}}, {});
  gemm(stream, g, alpha, a.f32(), b.f32(), beta, out.f32(), precision);
}

//===----------------------------------------------------------------------===//
// einsum
//===----------------------------------------------------------------------===//

using einsum::Extents;
using einsum::Operand;

/// `op` as the tensor with dims `order`: itself, or a walk into `storage`.
const float *prepare(cudaStream_t stream, const Operand &op,
                     const std::string &order, const Extents &extents,
                     DeviceBuffer &storage) {
  if (op.letters == order)
    return op.data;
  float *data = storage.get(stream, einsum::extentOf(order, extents));
  runWalk(stream, op.data, data, einsum::walkFor(op, order, extents));
  return data;
}

/// Contracts a and b as einsum::planPair plans, through one batched GEMM.
/// With `finalOut` the result, over `keep`, goes there; else it is left in
/// `storage` and described by the returned operand.
Operand contractPair(cudaStream_t stream, ContractionPrecision precision,
                     const Operand &a, const Operand &b,
                     const std::string &keep, const Extents &extents,
                     float *finalOut, DeviceBuffer &storage) {
  bool final = finalOut != nullptr;
  einsum::PairPlan p =
      einsum::planPair(a.letters, b.letters, keep, final, extents);
  const Operand &left = p.swap ? b : a, &right = p.swap ? a : b;
  DeviceBuffer leftBuffer, rightBuffer;
  const float *leftData =
      p.transLeft ? left.data
                  : prepare(stream, left, p.leftOrder(), extents, leftBuffer);
  const float *rightData = p.transRight ? right.data
                                        : prepare(stream, right, p.rightOrder(),
                                                  extents, rightBuffer);

  Operand result;
  result.letters = p.result();
  for (char c : result.letters)
    result.shape.push_back(extents[static_cast<unsigned char>(c)]);
  bool inPlace = final && result.letters == keep;
  DeviceBuffer product;
  float *resultData =
      inPlace ? finalOut
              : (final ? product : storage)
                    .get(stream, einsum::extentOf(result.letters, extents));
  gemm(stream, einsum::gemmOf(p, extents), 1.f, leftData, rightData, 0.f,
       resultData, precision);
  result.data = resultData;
  if (final && !inPlace)
    runWalk(stream, resultData, finalOut,
            einsum::walkFor(result, keep, extents));
  return result;
}

void launchEinsum(E &e, const Instr &i) {
  const std::string &equation = i.getString("equation");
  einsum::Equation eq = einsum::parseEquation(equation, i.operands.size());
  std::vector<TensorView> inputs;
  for (size_t k = 0; k < i.operands.size(); ++k)
    inputs.push_back(e.operand(i, k));
  Extents extents;
  std::vector<Operand> operands =
      einsum::bindOperands(equation, eq, inputs, extents);
  float *out = e.result(i, 0).f32();
  cudaStream_t stream = cudaStreamOf(e.stream());
  if (operands.size() == 1)
    return runWalk(stream, operands[0].data, out,
                   einsum::walkFor(operands[0], eq.output, extents));
  // Left to right; the running result keeps the letters the output or a
  // later input still needs. Two buffers: a step reads one, writes the other.
  DeviceBuffer running[2];
  Operand acc = operands[0];
  for (size_t k = 1; k < operands.size(); ++k) {
    bool last = k + 1 == operands.size();
    acc = contractPair(stream, precisionOf(e), acc, operands[k],
                       einsum::keptAfter(eq, k),
                       extents, last ? out : nullptr, running[k % 2]);
  }
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

/// The sizes every convolution launcher needs (bmrt/Window.h).
using Conv = ConvShape;

Conv makeConv(const Shape &x, const Shape &w, const Shape &y, const Instr &i) {
  return makeConvShape(x, w, y, i.getInts("strides"), i.getInts("pads"),
                       i.getInts("dilations"), i.getInt("group", 1));
}

/// Where col element (image n, group g, row r, position o) lives.
struct ColLayout {
  int64_t image, group, row;
};

/// col[n, g, r, o] = x[n, g, c, o * stride + tap_t] (0 in the padding),
/// r = c * K + t; for images [0, images) of x.
__global__ void im2colKernel(const float *x, float *col, Geometry geo,
                             int64_t images, int64_t groups,
                             int64_t inChannels, ColLayout layout) {
  int64_t kk = geo.kernelSize(), outSize = geo.outSize();
  int64_t rows = inChannels * kk;
  int64_t total = images * groups * rows * outSize;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       idx < total; idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = idx % outSize, rest = idx / outSize;
    int64_t r = rest % rows;
    rest /= rows;
    int64_t g = rest % groups, n = rest / groups;
    int64_t c = r / kk, t = r % kk;
    int64_t tap[3], pos[3] = {o / (geo.out[1] * geo.out[2]),
                              (o / geo.out[2]) % geo.out[1], o % geo.out[2]};
    for (int d = 2; d >= 0; --d) {
      tap[d] = t % geo.kernel[d];
      t /= geo.kernel[d];
    }
    float value = 0.f;
    bool inside = true;
    int64_t at = 0;
    for (int d = 0; d < 3; ++d) {
      int64_t p =
          pos[d] * geo.stride[d] + tap[d] * geo.dilation[d] - geo.padBegin[d];
      inside &= p >= 0 && p < geo.in[d];
      at = at * geo.in[d] + p;
    }
    if (inside)
      value = x[((n * groups + g) * inChannels + c) * geo.inSize() + at];
    col[n * layout.image + g * layout.group + r * layout.row + o] = value;
  }
}

/// The adjoint of im2col as a gather: each x element sums, in tap order,
/// the col entries that read it (layout [n, g, r, o]).
__global__ void col2imKernel(const float *col, float *x, Geometry geo,
                             int64_t images, int64_t groups,
                             int64_t inChannels) {
  int64_t kk = geo.kernelSize(), outSize = geo.outSize(), inSize = geo.inSize();
  int64_t rows = inChannels * kk;
  int64_t total = images * groups * inChannels * inSize;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       idx < total; idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = idx % inSize, plane = idx / inSize; // plane = (n, g, c)
    int64_t c = plane % inChannels, ng = plane / inChannels;
    int64_t pos[3] = {i / (geo.in[1] * geo.in[2]), (i / geo.in[2]) % geo.in[1],
                      i % geo.in[2]};
    const float *colPlane = col + ng * rows * outSize;
    float sum = 0.f;
    for (int64_t t = 0; t < kk; ++t) {
      int64_t rest = t, o = 0;
      bool hit = true;
      int64_t tap[3];
      for (int d = 2; d >= 0; --d) {
        tap[d] = rest % geo.kernel[d];
        rest /= geo.kernel[d];
      }
      for (int d = 0; d < 3 && hit; ++d) {
        int64_t q = pos[d] + geo.padBegin[d] - tap[d] * geo.dilation[d];
        hit = q >= 0 && q % geo.stride[d] == 0 && q / geo.stride[d] < geo.out[d];
        o = o * geo.out[d] + (hit ? q / geo.stride[d] : 0);
      }
      if (hit)
        sum += colPlane[(c * kk + t) * outSize + o];
    }
    x[idx] = sum;
  }
}

/// Images per im2col pass: the column buffer stays under this many bytes.
constexpr int64_t kColumnBytes = int64_t(256) << 20;

int64_t imagesPerPass(const Conv &c) {
  int64_t perImage =
      std::max<int64_t>(c.groups * c.colRows * c.geo.outSize() * 4, 1);
  return std::clamp<int64_t>(kColumnBytes / perImage, 1,
                             std::max<int64_t>(c.batch, 1));
}

void im2col(cudaStream_t stream, const float *x, float *col, const Conv &c,
            int64_t images, ColLayout layout) {
  int64_t total = images * c.groups * c.colRows * c.geo.outSize();
  if (total == 0)
    return;
  im2colKernel<<<gridFor(total), kBlock, 0, stream>>>(
      x, col, c.geo, images, c.groups, c.inChannels, layout);
  BMRT_CUDA_CHECK_LAUNCH("im2col");
}

void launchConv(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &w = e.operand(i, 1);
  const TensorView *bias = e.optionalOperand(i, 2);
  const TensorView &y = e.result(i, 0);
  Conv c = makeConv(x.shape, w.shape, y.shape, i);
  cudaStream_t stream = cudaStreamOf(e.stream());
  int64_t inSize = c.geo.inSize(), outSize = c.geo.outSize();
  if (bias) // y = bias first, so the GEMMs add onto it (beta 1).
    runWalk(stream, bias->f32(), y.f32(),
            {{c.batch, 0}, {c.groups * c.outChannels, 1}, {outSize, 0}}, {});
  int64_t pass = imagesPerPass(c);
  ColLayout layout{c.groups * c.colRows * outSize, c.colRows * outSize,
                   outSize};
  float *col = static_cast<float *>(e.scratch(pass * layout.image * 4));
  for (int64_t n0 = 0; n0 < c.batch; n0 += pass) {
    int64_t images = std::min(pass, c.batch - n0);
    im2col(stream, x.f32() + n0 * x.shape[1] * inSize, col, c, images, layout);
    for (int64_t g = 0; g < c.groups; ++g) {
      // y[n, g] [outChannels, outSize] = W_g [outChannels, colRows] col[n, g].
      GemmShape s;
      s.m = c.outChannels;
      s.n = outSize;
      s.k = c.colRows;
      s.lda = c.colRows;
      s.ldb = outSize;
      s.ldc = outSize;
      s.batch = images;
      s.strideA = 0;
      s.strideB = layout.image;
      s.strideC = y.shape[1] * outSize;
      gemm(stream, s, 1.f, w.f32() + g * c.outChannels * c.colRows,
           col + g * layout.group,
           bias ? 1.f : 0.f,
           y.f32() + (n0 * c.groups + g) * c.outChannels * outSize,
           precisionOf(e));
    }
  }
}

/// Operands dy, w; result dx.
void launchConvGradInput(E &e, const Instr &i) {
  const TensorView &dy = e.operand(i, 0), &w = e.operand(i, 1);
  const TensorView &dx = e.result(i, 0);
  Conv c = makeConv(dx.shape, w.shape, dy.shape, i);
  cudaStream_t stream = cudaStreamOf(e.stream());
  int64_t inSize = c.geo.inSize(), outSize = c.geo.outSize();
  int64_t pass = imagesPerPass(c);
  int64_t perImage = c.groups * c.colRows * outSize;
  float *dcol = static_cast<float *>(e.scratch(pass * perImage * 4));
  for (int64_t n0 = 0; n0 < c.batch; n0 += pass) {
    int64_t images = std::min(pass, c.batch - n0);
    for (int64_t g = 0; g < c.groups; ++g) {
      // dcol[n, g] [colRows, outSize] = W_g^T dy[n, g].
      GemmShape s;
      s.transA = true;
      s.m = c.colRows;
      s.n = outSize;
      s.k = c.outChannels;
      s.lda = c.colRows;
      s.ldb = outSize;
      s.ldc = outSize;
      s.batch = images;
      s.strideA = 0;
      s.strideB = dy.shape[1] * outSize;
      s.strideC = perImage;
      gemm(stream, s, 1.f, w.f32() + g * c.outChannels * c.colRows,
           dy.f32() + (n0 * c.groups + g) * c.outChannels * outSize, 0.f,
           dcol + g * c.colRows * outSize, precisionOf(e));
    }
    int64_t total = images * dx.shape[1] * inSize;
    if (total == 0)
      continue;
    col2imKernel<<<gridFor(total), kBlock, 0, stream>>>(
        dcol, dx.f32() + n0 * dx.shape[1] * inSize, c.geo, images, c.groups,
        c.inChannels);
    BMRT_CUDA_CHECK_LAUNCH("col2im");
  }
}

/// Operands dy, x; result dw. The columns are laid out [g, r, n, o] and dy
/// permuted to [g, outChannels, n, o], so that K runs over (image,
/// position) and one GEMM per pass sums the images of each group.
void launchConvGradWeight(E &e, const Instr &i) {
  const TensorView &dy = e.operand(i, 0), &x = e.operand(i, 1);
  const TensorView &dw = e.result(i, 0);
  Conv c = makeConv(x.shape, dw.shape, dy.shape, i);
  cudaStream_t stream = cudaStreamOf(e.stream());
  int64_t inSize = c.geo.inSize(), outSize = c.geo.outSize();
  if (c.batch == 0) {
    BMRT_CUDA_CHECK(cudaMemsetAsync(dw.data, 0, dw.bytes(), stream));
    return;
  }
  int64_t pass = imagesPerPass(c);
  int64_t colElements = pass * c.groups * c.colRows * outSize;
  int64_t dyElements = pass * dy.shape[1] * outSize;
  Carver carver;
  size_t colAt = carver.reserve(colElements * 4);
  size_t dyAt = carver.reserve(dyElements * 4);
  carver.allocate(e);
  float *col = carver.at<float>(colAt), *dyP = carver.at<float>(dyAt);
  for (int64_t n0 = 0; n0 < c.batch; n0 += pass) {
    int64_t images = std::min(pass, c.batch - n0);
    int64_t kLength = images * outSize;
    ColLayout layout{outSize, c.colRows * kLength, kLength};
    im2col(stream, x.f32() + n0 * x.shape[1] * inSize, col, c, images, layout);
    // dyP[g, oc, n, o] = dy[n0 + n, g, oc, o].
    runWalk(stream, dy.f32() + n0 * dy.shape[1] * outSize, dyP,
            {{c.groups, c.outChannels * outSize},
             {c.outChannels, outSize},
             {images, dy.shape[1] * outSize},
             {outSize, 1}},
            {});
    // dW_g [outChannels, colRows] (+)= dyP_g [outChannels, K] col_g^T.
    GemmShape s;
    s.transB = true;
    s.m = c.outChannels;
    s.n = c.colRows;
    s.k = kLength;
    s.lda = kLength;
    s.ldb = kLength;
    s.ldc = c.colRows;
    s.batch = c.groups;
    s.strideA = c.outChannels * kLength;
    s.strideB = c.colRows * kLength;
    s.strideC = c.outChannels * c.colRows;
    gemm(stream, s, 1.f, dyP, col, n0 == 0 ? 0.f : 1.f, dw.f32(),
         precisionOf(e));
  }
}

// Alphabetical.
const KernelTable::Entry kKernels[] = {
    {"conv", launchConv},
    {"conv_grad_input", launchConvGradInput},
    {"conv_grad_weight", launchConvGradWeight},
    {"einsum", launchEinsum},
    {"gemm", launchGemm},
    {"matmul", launchMatmul},
};

} // namespace

KernelFamily contractionKernels() {
  return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

} // namespace bmrt::cuda
