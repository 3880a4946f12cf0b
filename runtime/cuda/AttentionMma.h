//===- AttentionMma.h - fused attention on bf16 tensor cores ----*- C++ -*-===//
//
// Private to runtime/cuda: the path AttentionKernels.cu takes under the
// plan's bf16 (ContractionPrecision::Bf16), where every GEMM of the backend
// rounds its operands to bf16 and accumulates in fp32. Here the four
// products of attention (q kt, p v and, in the backward, those of dp, dv,
// dk and dq) run as mma.sync m16n8k16 bf16 instructions with fp32
// accumulators, FlashAttention-2's loop orders (Dao 2023, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning"): the
// probabilities stay in registers between the two products of a tile and
// never reach memory. Tensors stay fp32 in memory; tiles are rounded to
// bf16 as they are staged into shared memory.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_ATTENTIONMMA_H
#define BMRT_CUDA_ATTENTIONMMA_H

#include "bmrt/Attention.h"

#include <cuda_runtime.h>

namespace bmrt::cuda {

/// Whether the tensor-core kernels take this geometry: head dims d = e of
/// 64 or 128 (what GPT-2, Llama and most exports use), sizes whose indices
/// fit in 32 bits.
bool attentionMmaSupports(const AttentionShape &a);

/// out [batch, s, e] = attention(q, kt, v); all fp32 in memory.
void attentionForwardMma(cudaStream_t stream, const AttentionShape &a,
                         const float *q, const float *kt, const float *v,
                         float *out, float scale);

/// dq, dkt (kt's layout) and dv of attention. `scratch` holds 2 * batch * s
/// floats: each query's log-sum-exp and its rowsum(dout * out).
void attentionBackwardMma(cudaStream_t stream, const AttentionShape &a,
                          const float *q, const float *kt, const float *v,
                          const float *out, const float *dout, float *dq,
                          float *dkt, float *dv, float scale, float *scratch);

} // namespace bmrt::cuda

#endif // BMRT_CUDA_ATTENTIONMMA_H
