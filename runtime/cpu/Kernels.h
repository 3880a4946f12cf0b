//===- Kernels.h - the CPU kernels of every bm op, forward and backward -*- C++ -*-===//
//
// One function per kernel, on local (per-rank) shapes. Conventions:
//  - Every tensor is a contiguous row-major TensorView; outputs are
//    allocated by the caller with the right shape and dtype and need not be
//    zeroed (a kernel writes every element of its outputs).
//  - Semantics are ONNX's (and numpy's broadcasting: operands aligned on the
//    right, dims of size 1 stretched). Axes are non-negative (the importer
//    normalised them).
//  - Work is enqueued on `stream`; on the CPU it runs before the call
//    returns. GEMMs go to OpenBLAS (cblas_sgemm); elementwise and reduction
//    kernels use every OpenMP thread.
//  - Inputs that the program cannot rule out at compile time (a gather index
//    out of range, a label outside the classes) throw bmrt::Error naming the
//    value and the bound; shapes are checked when a program is loaded, not
//    here.
//
// The backward kernels are the ones autodiff's rules emit where composing
// forward kernels would cost extra passes over memory (normalisations,
// softmax, convolution, pooling, scatter) or extra ops (elementwise
// derivatives).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_KERNELS_H
#define BMRT_KERNELS_H

#include "bmrt/Device.h"
#include "bmrt/ElementwiseOps.h"
#include "bmrt/Optimizer.h"
#include "bmrt/ScatterReduction.h"
#include "bmrt/Sharding.h"
#include "bmrt/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace bmrt::cpu {

using Ints = std::vector<int64_t>;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// The op names are shared with the other backends (bmrt/ElementwiseOps.h).
using bmrt::BinaryOp;
using bmrt::UnaryOp;

/// y = op(x); x and y have one shape and dtype.
void unary(Stream &stream, UnaryOp op, const TensorView &x,
           const TensorView &y);
/// dx = dy * op'(x), F32, one shape; not for Not. Abs' and Relu' at 0 are 0.
void unaryGrad(Stream &stream, UnaryOp op, const TensorView &x,
               const TensorView &dy, const TensorView &dx);

/// out = a op b with broadcasting. Arithmetic on F32 or I64 (a, b and out
/// share the dtype); comparisons take F32 or I64 and write Bool.
void binary(Stream &stream, BinaryOp op, const TensorView &a,
            const TensorView &b, const TensorView &out);

/// out = condition ? a : b, broadcasting all three; any dtype for a, b, out.
void where(Stream &stream, const TensorView &condition, const TensorView &a,
           const TensorView &b, const TensorView &out);
/// Converts every element (float -> int truncates toward zero, as
/// static_cast; to Bool is != 0).
void cast(Stream &stream, const TensorView &x, const TensorView &y);
/// Copies the bytes of x to y (same element count and dtype): reshape,
/// squeeze, unsqueeze and flatten.
void copy(Stream &stream, const TensorView &x, const TensorView &y);
/// Sets every element of y to `value` (converted to y's dtype).
void fill(Stream &stream, const TensorView &y, double value);

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

/// numpy matmul: a [..., M, K], b [..., K, N] -> out [..., M, N], batch dims
/// broadcast; a rank-1 a is [K] (no M in out), a rank-1 b is [K] (no N).
/// transA / transB read a as [..., K, M] / b as [..., N, K] (rank >= 2).
void matmul(Stream &stream, const TensorView &a, const TensorView &b,
            const TensorView &out, bool transA = false, bool transB = false);
/// ONNX Gemm on 2-D tensors: out = alpha op(a) op(b) + beta c, c (optional,
/// may be null) broadcast to out.
void gemm(Stream &stream, const TensorView &a, const TensorView &b,
          const TensorView *c, const TensorView &out, float alpha, float beta,
          bool transA, bool transB);
/// Einstein summation without ellipsis ("gsec,gsm->egcm"), F32, one or more
/// inputs; contracts pairs through batched GEMMs.
void einsum(Stream &stream, const std::string &equation,
            const std::vector<TensorView> &inputs, const TensorView &out);

/// ONNX Conv, NC[spatial] (1-D, 2-D or 3-D), grouped; pads are
/// [begin..., end...]; bias [C_out] may be null. Through im2col and GEMM.
void conv(Stream &stream, const TensorView &x, const TensorView &w,
          const TensorView *bias, const TensorView &y, const Ints &strides,
          const Ints &pads, const Ints &dilations, int64_t group);
/// dx of conv (x's shape from dx).
void convGradInput(Stream &stream, const TensorView &dy, const TensorView &w,
                   const TensorView &dx, const Ints &strides, const Ints &pads,
                   const Ints &dilations, int64_t group);
/// dw of conv (w's shape from dw).
void convGradWeight(Stream &stream, const TensorView &dy, const TensorView &x,
                    const TensorView &dw, const Ints &strides, const Ints &pads,
                    const Ints &dilations, int64_t group);

//===----------------------------------------------------------------------===//
// Fused attention (bmrt/Attention.h)
//===----------------------------------------------------------------------===//

/// out = softmax(scale * q kt + causal mask) v per leading index; the
/// scores live in a per-thread scratch row block, never in a tensor.
/// `positions` (i64 [s], non-decreasing) places the queries among the keys.
void attention(Stream &stream, const TensorView &q, const TensorView &kt,
               const TensorView &v, const TensorView &out, float scale,
               bool causal, const TensorView *positions = nullptr);
/// dq, dkt and dv of attention, recomputing the probabilities from q and kt.
void attentionGrad(Stream &stream, const TensorView &q, const TensorView &kt,
                   const TensorView &v, const TensorView &out,
                   const TensorView &dout, const TensorView &dq,
                   const TensorView &dkt, const TensorView &dv, float scale,
                   bool causal, const TensorView *positions = nullptr);

//===----------------------------------------------------------------------===//
// Softmax and normalisation
//===----------------------------------------------------------------------===//

void softmax(Stream &stream, const TensorView &x, const TensorView &y,
             int64_t axis);
void logSoftmax(Stream &stream, const TensorView &x, const TensorView &y,
                int64_t axis);
/// dx = y * (dy - sum_axis(dy * y)), from the softmax's output y.
void softmaxGrad(Stream &stream, const TensorView &y, const TensorView &dy,
                 const TensorView &dx, int64_t axis);
/// dx = dy - exp(y) * sum_axis(dy), from the log-softmax's output y.
void logSoftmaxGrad(Stream &stream, const TensorView &y, const TensorView &dy,
                    const TensorView &dx, int64_t axis);

/// ONNX LayerNormalization: normalises over x's dims [axis, rank); scale
/// and bias (bias may be null) broadcast to those dims, numpy-style.
void layerNorm(Stream &stream, const TensorView &x, const TensorView &scale,
               const TensorView *bias, const TensorView &y, int64_t axis,
               float epsilon);
/// dx, dscale (scale's shape: summed over what it broadcasts) and dbias (may
/// be null); mean and variance are recomputed from x.
void layerNormGrad(Stream &stream, const TensorView &x, const TensorView &scale,
                   const TensorView &dy, const TensorView &dx,
                   const TensorView &dscale, const TensorView *dbias,
                   int64_t axis, float epsilon);
/// y = x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale.
void rmsNorm(Stream &stream, const TensorView &x, const TensorView &scale,
             const TensorView &y, int64_t axis, float epsilon);
void rmsNormGrad(Stream &stream, const TensorView &x, const TensorView &scale,
                 const TensorView &dy, const TensorView &dx,
                 const TensorView &dscale, int64_t axis, float epsilon);
/// ONNX BatchNormalization in inference form (the given mean and variance,
/// [C]), NC[spatial]: y = (x - mean) / sqrt(var + eps) * scale + bias.
void batchNorm(Stream &stream, const TensorView &x, const TensorView &scale,
               const TensorView &bias, const TensorView &mean,
               const TensorView &variance, const TensorView &y, float epsilon);
/// dx, dscale, dbias of batchNorm (mean and variance are constants).
void batchNormGrad(Stream &stream, const TensorView &x, const TensorView &scale,
                   const TensorView &mean, const TensorView &variance,
                   const TensorView &dy, const TensorView &dx,
                   const TensorView &dscale, const TensorView &dbias,
                   float epsilon);

//===----------------------------------------------------------------------===//
// Reductions, scans, selection
//===----------------------------------------------------------------------===//

enum class ReduceOp { Max, Mean, Sum };
/// Reduces x over `axes` (sorted, distinct); y holds x's shape without them
/// or with them as 1 (the same elements in the same order). F32 or I64.
void reduce(Stream &stream, ReduceOp op, const TensorView &x,
            const TensorView &y, const Ints &axes);
/// ONNX CumSum along `axis`. F32 or I64.
void cumsum(Stream &stream, const TensorView &x, const TensorView &y,
            int64_t axis, bool exclusive, bool reverse);
/// ONNX TopK: the k largest (or smallest) along `axis`, sorted, ties to the
/// lower index; indices are I64.
void topK(Stream &stream, const TensorView &x, const TensorView &values,
          const TensorView &indices, int64_t k, int64_t axis, bool largest);
/// ONNX OneHot: out has a new dim of size depth at `axis`; negative
/// indices count from depth; an index outside [-depth, depth) gives a row
/// of off_value (as ONNX says).
void oneHot(Stream &stream, const TensorView &indices, const TensorView &out,
            int64_t depth, int64_t axis, double onValue, double offValue);
/// out[i] = start + i * delta (1-D, F32 or I64).
void iota(Stream &stream, const TensorView &out, double start, double delta);
/// ONNX Trilu on the last two dims: keeps j - i >= k (upper) or j - i <= k
/// (lower), zeroes the rest.
void trilu(Stream &stream, const TensorView &x, const TensorView &y, int64_t k,
           bool upper);

//===----------------------------------------------------------------------===//
// Data movement (any dtype)
//===----------------------------------------------------------------------===//

/// y dim i is x dim perm[i].
void transpose(Stream &stream, const TensorView &x, const TensorView &y,
               const Ints &perm);
/// ONNX Gather along `axis`; negative indices count from the end; an index
/// out of range throws bmrt::Error.
void gather(Stream &stream, const TensorView &data, const TensorView &indices,
            const TensorView &out, int64_t axis, TableShard shard = {});
/// The gradient of gather: ddata = 0, then ddata[index] += dy for each
/// gathered slice (F32; repeated indices accumulate).
void gatherGrad(Stream &stream, const TensorView &dy, const TensorView &indices,
                const TensorView &ddata, int64_t axis, TableShard shard = {});
/// ONNX GatherElements (torch.gather): out has the indices' shape (data's
/// rank, each dim but `axis` at most data's) and out[p] = data[p with its
/// `axis` coordinate replaced by indices[p]]. Negative indices count from
/// the end; one out of range throws bmrt::Error.
void gatherElements(Stream &stream, const TensorView &data,
                    const TensorView &indices, const TensorView &out,
                    int64_t axis);
/// ONNX ScatterElements (torch.scatter_reduce): out = data, then for each
/// position p of indices (and updates, of the same shape), the element of
/// out at p with its `axis` coordinate replaced by indices[p] becomes
/// updates[p] (None; of repeated targets the last in row-major order wins)
/// or is combined with it (bmrt/ScatterReduction.h: F32, I64 or I32 only).
/// Indices as gatherElements'.
void scatterElements(Stream &stream, const TensorView &data,
                     const TensorView &indices, const TensorView &updates,
                     const TensorView &out, int64_t axis,
                     ScatterReduction reduction);
void concat(Stream &stream, const std::vector<TensorView> &inputs,
            const TensorView &out, int64_t axis);
void split(Stream &stream, const TensorView &x,
           const std::vector<TensorView> &outputs, int64_t axis);
/// y[i...] = x[starts + i * strides] (strides > 0; y's shape gives the
/// counts).
void slice(Stream &stream, const TensorView &x, const TensorView &y,
           const Ints &starts, const Ints &strides);
/// The gradient of slice: dx = 0 except dx[starts + i * strides] = dy[i].
void sliceGrad(Stream &stream, const TensorView &dy, const TensorView &dx,
               const Ints &starts, const Ints &strides);
/// Broadcasts x to y's shape (numpy rules).
void expand(Stream &stream, const TensorView &x, const TensorView &y);

//===----------------------------------------------------------------------===//
// Pooling, NC[spatial]; pads are [begin..., end...]
//===----------------------------------------------------------------------===//

void maxPool(Stream &stream, const TensorView &x, const TensorView &y,
             const Ints &kernel, const Ints &strides, const Ints &pads);
/// dy flows to the first maximum of each window.
void maxPoolGrad(Stream &stream, const TensorView &x, const TensorView &dy,
                 const TensorView &dx, const Ints &kernel, const Ints &strides,
                 const Ints &pads);
/// Averages over the window's elements inside the input (padding is not
/// counted: ONNX's count_include_pad = 0).
void avgPool(Stream &stream, const TensorView &x, const TensorView &y,
             const Ints &kernel, const Ints &strides, const Ints &pads);
void avgPoolGrad(Stream &stream, const TensorView &dy, const TensorView &dx,
                 const Ints &kernel, const Ints &strides, const Ints &pads);

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

/// Mean softmax cross-entropy: logits [N, C] F32, labels [N] I64 ->
/// loss (scalar F32). Labels equal to -100 are ignored (PyTorch's
/// ignore_index); any other label outside [0, C) throws bmrt::Error. With
/// every label ignored the loss is 0.
void crossEntropy(Stream &stream, const TensorView &logits,
                  const TensorView &labels, const TensorView &loss);
/// dlogits = dloss * (softmax(logits) - onehot(labels)) / counted rows.
void crossEntropyGrad(Stream &stream, const TensorView &logits,
                      const TensorView &labels, const TensorView &dloss,
                      const TensorView &dlogits);

/// The vocabulary-parallel loss, for logits split along their classes over
/// a group of ranks: this rank holds classes [offset, offset + C) of
/// `classes` in logits [N, C].
/// stats [3, N]: per row the max of its logits, the sum of exp(x - max),
/// and the label's logit (0 where another rank holds the label's class).
/// Labels outside [0, classes) other than -100 throw bmrt::Error.
void crossEntropyStats(Stream &stream, const TensorView &logits,
                       const TensorView &labels, int64_t offset,
                       int64_t classes, const TensorView &stats);
/// The mean cross-entropy from every rank's statistics [3 x ranks, N]
/// (rank r's three rows at 3r): the log-sum-exp merged over the ranks
/// minus the label's logit, averaged over the rows not labelled -100.
void crossEntropyFromStats(Stream &stream, const TensorView &stats,
                           const TensorView &labels, const TensorView &loss);
/// This rank's classes of dloss * (softmax(logits) - onehot(labels)) / rows
/// counted, the softmax's denominator merged from every rank's statistics.
void crossEntropyGradFromStats(Stream &stream, const TensorView &logits,
                               const TensorView &labels,
                               const TensorView &stats,
                               const TensorView &dloss, int64_t offset,
                               int64_t classes, const TensorView &dlogits);

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// Returns sum(x^2) (F32 x, accumulated in double), synchronising the
/// stream: global-norm clipping needs it on the host.
double sumOfSquares(Stream &stream, const TensorView &x);

/// One AdamW step (bmrt/Optimizer.h).
void adamwUpdate(Stream &stream, const TensorView &param,
                 const TensorView &grad, const TensorView &m,
                 const TensorView &v, const AdamWConfig &config, float lr,
                 int64_t step, float gradScale);

/// One SGD step (bmrt/Optimizer.h).
void sgdUpdate(Stream &stream, const TensorView &param, const TensorView &grad,
               const TensorView &buffer, const SgdConfig &config, float lr,
               int64_t step, float gradScale);

/// LAMB's first phase, y += alpha x and LARS's step (bmrt/Backend.h:
/// TrainerKernels).
void lambDirection(Stream &stream, const TensorView &param,
                   const TensorView &grad, const TensorView &m,
                   const TensorView &v, const TensorView &direction,
                   const LambConfig &config, int64_t step, float gradScale);
void axpy(Stream &stream, float alpha, const TensorView &x,
          const TensorView &y);
void larsUpdate(Stream &stream, const TensorView &param, const TensorView &grad,
                const TensorView &buffer, const LarsConfig &config,
                float scaledLr, float gradScale);

/// Sets the threads the kernels use (OpenMP and OpenBLAS).
void setThreads(int threads);
/// Sets the OpenMP threads of the calling thread's kernels only (a thread
/// other than the main one; OpenBLAS's count is the process's).
void setThreadsOfCallingThread(int threads);

} // namespace bmrt::cpu

#endif // BMRT_KERNELS_H
