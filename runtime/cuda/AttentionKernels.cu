//===- AttentionKernels.cu - fused attention, forward and backward --------===//
//
// FlashAttention (Dao et al. 2022; the backward's loop order from
// FlashAttention-2, Dao 2023) in fp32 on CUDA cores: the [s, t] scores
// never reach global memory. Per leading index (bmrt/Attention.h):
//  - attentionForwardKernel: a block per tile of 64 queries walks the key
//    tiles its queries see (a causal block stops at the last key its last
//    query sees), keeping each row's running max and sum and rescaling its
//    output accumulator (the online softmax). It writes only the output.
//  - the backward recomputes: the same kernel in its statistics mode
//    writes each query's log-sum-exp L and D = rowsum(dout * out) into
//    scratch [batch, s]; attentionKeyGradKernel, a block per tile of 64
//    keys, walks the query tiles that see them and keeps dK and dV in
//    registers; attentionQueryGradKernel, a block per query tile, walks the
//    visible key tiles and keeps dQ. Every element is summed by one thread
//    in a fixed order: no atomics, the same bits every run.
//
// Each block has 256 threads as 16 x 16 (ty, tx). A thread owns 4 x 4
// elements of a 64 x 64 score tile, so every shared-memory float4 it reads
// feeds 4 or 16 FMAs, and 4 x HD/16 elements of the [64, HD] accumulator
// (HD, the head dim rounded up to 64 or 128, is a template argument: its
// loops unroll). Operands are staged in shared memory in their global
// layouts (but k as [key][head dim] for dq) by cp.async, 16 bytes a copy
// where rows are 16-byte aligned, else 4: coalesced, and the next tile
// loads during this tile's math; zeros beyond the tensor's edges. Which
// rows and columns a thread owns is chosen so that its float4 reads are
// broadcasts (the 2 rows of a warp) or 16 consecutive rows of a padded
// stride (HD + 4 floats: 8 threads fill the 32 banks), never a conflict.
//
// Under the plan's bf16 the launchers hand the geometries it takes to the
// tensor-core kernels (AttentionMma.cu) instead.
//
// The CPU reference (runtime/cpu/AttentionKernels.cpp) sums in BLAS order
// and normalises before the second GEMM; this sums by tiles and
// normalises at the end: the results differ by fp32 rounding.
//
//===----------------------------------------------------------------------===//

#include "AttentionMma.h"
#include "AttentionPlaces.cuh"
#include "KernelFamilies.h"
#include "KernelSupport.cuh"

#include "bmrt/Attention.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

namespace bmrt::cuda {
namespace {

using namespace support;
using E = Executor;

/// Queries and keys per tile, threads per block.
constexpr int kRows = 64;
constexpr int kKeys = 64;
constexpr int kThreads = 256;
/// Floats added to a shared row whose float4 reads run down 16 rows.
constexpr int kPad = 4;
/// The largest head dim (d or e) the kernels take.
constexpr int kMaxHeadDim = 128;

//===----------------------------------------------------------------------===//
// Geometry and staging
//===----------------------------------------------------------------------===//

/// One leading index's sizes (each checked to fit 32-bit offsets).
struct Dims {
  int s, t, d, e;
  bool causal;
  float scale;
  /// AttentionShape::positions (device memory, or null).
  const int64_t *positions;

  /// AttentionShape::position: query i's place among the keys.
  __device__ int position(int i) const {
    return positions ? static_cast<int>(positions[i]) : i + t - s;
  }
  /// AttentionShape::visibleKeys: query i sees keys [0, visibleKeys(i)).
  __device__ int visibleKeys(int i) const {
    return causal ? min(max(position(i) + 1, 0), t) : t;
  }
  /// AttentionShape::firstQuery: the first query that sees key j.
  __device__ int firstQuery(int j) const {
    return causal ? firstPlacedAt(positions, s, t, j) : 0;
  }
  /// Whether query i (a row of the tensor) sees key j.
  __device__ bool sees(int i, int j) const {
    return i < s && j < visibleKeys(i);
  }
};

/// Copies 4 bytes global -> shared without a register (sm_80's cp.async):
/// the copy runs while the block computes, until waitCopies.
__device__ void copyAsync(float *to, const float *from) {
  unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared),
               "l"(from)
               : "memory");
}
/// Copies `bytes` (4 to 16) global -> shared and zeroes the rest of the 16
/// (cp.async's src-size); both addresses 16-byte aligned.
__device__ void copyAsync16(float *to, const float *from, int bytes) {
  unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared),
               "l"(from), "r"(bytes)
               : "memory");
}
/// Closes the group of copies issued since the last commit.
__device__ void commitCopies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Waits until at most `Pending` groups are in flight (the latest ones).
/// The block must synchronise after it before reading other threads'.
template <int Pending> __device__ void waitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

/// to[r * stride + c] = from[r * ld + c] for the tile's R x C elements,
/// 0 where r >= rows or c >= cols (past the tensor's edge), so that tail
/// tiles and head dims below HD add nothing (and no stale NaN).
template <int R, int C>
__device__ void stageTile(float *to, int stride, const float *from, int ld,
                          int rows, int cols) {
  // 16 bytes a copy where every row starts 16-byte aligned (the usual head
  // dims and sequence lengths): a quarter of the instructions.
  if (ld % 4 == 0 && (reinterpret_cast<uintptr_t>(from) & 15) == 0) {
#pragma unroll 1 // unrolled, the dK / dV kernel spills at 128 registers
    for (int at = threadIdx.x; at < R * C / 4; at += kThreads) {
      int r = at / (C / 4), c = at % (C / 4) * 4;
      float *slot = to + r * stride + c;
      if (r < rows && c < cols)
        copyAsync16(slot, from + r * ld + c, min(cols - c, 4) * 4);
      else
        *reinterpret_cast<float4 *>(slot) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    return;
  }
  for (int at = threadIdx.x; at < R * C; at += kThreads) {
    int r = at / C, c = at % C;
    float *slot = to + r * stride + c;
    if (r < rows && c < cols)
      copyAsync(slot, from + r * ld + c);
    else
      *slot = 0.f;
  }
}

/// As stageTile, transposed on the way: to[c * stride + r] = from[r * ld
/// + c] (reads stay coalesced along c).
template <int R, int C>
__device__ void stageTileTransposed(float *to, int stride, const float *from,
                                    int ld, int rows, int cols) {
  for (int at = threadIdx.x; at < R * C; at += kThreads) {
    int r = at / C, c = at % C;
    float *slot = to + c * stride + r;
    if (r < rows && c < cols)
      copyAsync(slot, from + r * ld + c);
    else
      *slot = 0.f;
  }
}

/// to[r] = from[r] for r < n of the tile's kRows, 0 beyond.
__device__ void stageRows(float *to, const float *from, int n) {
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    if (r < n)
      copyAsync(to + r, from + r);
    else
      to[r] = 0.f;
  }
}

__device__ float4 load4(const float *at) {
  return *reinterpret_cast<const float4 *>(at);
}
__device__ float lane(const float4 &v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

//===----------------------------------------------------------------------===//
// Tile products (each thread's 4 x 4 or 4 x HD/16 share)
//===----------------------------------------------------------------------===//

/// acc[a][b] += sum_k rows[(ty*4 + a) * HD'][k] * cols[k * kKeys + tx*4 + b]:
/// rows row-major with stride HD + kPad (a broadcast read), cols k-major
/// with stride kKeys (kt's own layout; 16 consecutive float4).
template <int HD>
__device__ void productRowsByColumns(const float *rows, const float *cols,
                                     int tx, int ty, float (&acc)[4][4]) {
  const float *row = rows + ty * 4 * (HD + kPad);
#pragma unroll 4
  for (int k = 0; k < HD; k += 4) {
    float4 x[4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
      x[a] = load4(row + a * (HD + kPad) + k);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      float4 y = load4(cols + (k + kk) * kKeys + tx * 4);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        float xa = lane(x[a], kk);
        acc[a][0] += xa * y.x;
        acc[a][1] += xa * y.y;
        acc[a][2] += xa * y.z;
        acc[a][3] += xa * y.w;
      }
    }
  }
}

/// acc[a][b] += sum_k left[(ty*4 + a) row][k] * right[(tx + 16 b) row][k]:
/// both row-major with stride HD + kPad, reduced along their rows (a
/// broadcast read on the left, 16 consecutive rows on the right).
template <int HD>
__device__ void productRowsByRows(const float *left, const float *right, int tx,
                                  int ty, float (&acc)[4][4]) {
  const float *l = left + ty * 4 * (HD + kPad);
  const float *r = right + tx * (HD + kPad);
#pragma unroll 4
  for (int k = 0; k < HD; k += 4) {
    float4 x[4], y[4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
      x[a] = load4(l + a * (HD + kPad) + k);
#pragma unroll
    for (int b = 0; b < 4; ++b)
      y[b] = load4(r + b * 16 * (HD + kPad) + k);
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        acc[a][b] += x[a].x * y[b].x;
        acc[a][b] += x[a].y * y[b].y;
        acc[a][b] += x[a].z * y[b].z;
        acc[a][b] += x[a].w * y[b].w;
      }
  }
}

/// acc[a][c] += sum_j weights[j * wStride + ty*4 + a] * values[j * vStride +
/// column c]: the thread's 4 rows of weights^T values, where weights is
/// stored [n, 4 * 16] with the thread's rows contiguous (a broadcast read)
/// and the thread's HD/16 columns of values are tx*4 + 64 chunk + 0..3 (16
/// consecutive float4 per row).
template <int HD>
__device__ void accumulateWeighted(const float *weights, int wStride,
                                   const float *values, int vStride, int n,
                                   int tx, int ty, float (&acc)[4][HD / 16]) {
  const float *w = weights + ty * 4;
  const float *v = values + tx * 4;
#pragma unroll 4
  for (int j = 0; j < n; ++j) {
    float4 p = load4(w + j * wStride);
#pragma unroll
    for (int chunk = 0; chunk < HD / 64; ++chunk) {
      float4 y = load4(v + j * vStride + chunk * 64);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        float pa = lane(p, a);
        acc[a][chunk * 4 + 0] += pa * y.x;
        acc[a][chunk * 4 + 1] += pa * y.y;
        acc[a][chunk * 4 + 2] += pa * y.z;
        acc[a][chunk * 4 + 3] += pa * y.w;
      }
    }
  }
}

/// The head-dim column of a thread's accumulator slot c (accumulateWeighted).
__device__ int columnOf(int tx, int c) { return (c / 4) * 64 + tx * 4 + c % 4; }

/// The sum over the 16 lanes (tx) that share a row.
__device__ float rowSum16(float v) {
  for (int offset = 8; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ float rowMax16(float v) {
  for (int offset = 8; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

//===----------------------------------------------------------------------===//
// Forward, and the backward's statistics
//===----------------------------------------------------------------------===//

/// The shared-memory floats of attentionForwardKernel.
template <int HD, bool Stats> constexpr int forwardFloats() {
  int qs = kRows * (HD + kPad), kts = HD * kKeys;
  int vs = kKeys * HD, ps = kRows * (kKeys + kPad);
  return Stats ? qs + kts : qs + kts + vs + ps;
}

/// One key tile of the online softmax for the thread's rows: scores `sc`
/// (scaled, masked to -inf) become probabilities against the updated
/// running max `m`; the thread's share of the running sum `l` and of the
/// output `o` are rescaled to it. A row that has seen no key keeps max
/// -inf and uses 0 as its reference, so exp never sees -inf - -inf.
template <int HD>
__device__ void onlineSoftmax(float (&sc)[4][4], float (&m)[4], float (&l)[4],
                              float (&o)[4][HD / 16]) {
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    float top = fmaxf(fmaxf(sc[a][0], sc[a][1]), fmaxf(sc[a][2], sc[a][3]));
    float next = fmaxf(m[a], rowMax16(top));
    float ref = next == -INFINITY ? 0.f : next;
    float rescale = expf(m[a] - ref);
    float sum = 0.f;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      sc[a][b] = expf(sc[a][b] - ref);
      sum += sc[a][b];
    }
    l[a] = l[a] * rescale + sum;
    m[a] = next;
#pragma unroll
    for (int c = 0; c < HD / 16; ++c)
      o[a][c] *= rescale;
  }
}

/// Grid (batch, query tiles): the query tiles in reverse, so that the
/// causal blocks with the most keys start first. Forward (Stats false):
/// out = softmax(scale q kt + mask) v. Stats: lse[i] = log sum_j exp(scale
/// q_i k_j) over the visible keys (-inf where none) and delta[i] = dout_i .
/// out_i, for the backward.
template <int HD, bool Stats>
__global__ void __launch_bounds__(kThreads, HD <= 64 ? 2 : 1)
    attentionForwardKernel(Dims g, const float *q, const float *kt,
                           const float *v, float *out, const float *dout,
                           float *lse, float *delta) {
  extern __shared__ float4 sharedRaw[];
  float *qs = reinterpret_cast<float *>(sharedRaw);
  float *kts = qs + kRows * (HD + kPad);
  float *vs = kts + HD * kKeys;
  float *ps = vs + kKeys * HD;
  int b = blockIdx.x, i0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  q += size_t(b) * g.s * g.d;
  kt += size_t(b) * g.d * g.t;
  v += size_t(b) * g.t * g.e;
  size_t rowsAt = size_t(b) * g.s;
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  // The keys the tile's last query sees: the later key tiles are all
  // masked and skipped.
  int keys = g.visibleKeys(min(i0 + kRows, g.s) - 1);

  float m[4], l[4], o[4][HD / 16];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    m[a] = -INFINITY;
    l[a] = 0.f;
#pragma unroll
    for (int c = 0; c < HD / 16; ++c)
      o[a][c] = 0.f;
  }
  if (keys > 0) { // uniform over the block
    // Copy groups in flight: [q, kt tile][v tile]; the kt tile's next one
    // loads during this one's softmax and P v, the v tile's next one
    // during the next scores.
    stageTile<kRows, HD>(qs, HD + kPad, q + size_t(i0) * g.d, g.d, g.s - i0,
                         g.d);
    stageTile<HD, kKeys>(kts, kKeys, kt, g.t, g.d, g.t);
    commitCopies();
    if constexpr (!Stats) {
      stageTile<kKeys, HD>(vs, HD, v, g.e, g.t, g.e);
      commitCopies();
    }
    for (int j0 = 0; j0 < keys; j0 += kKeys) {
      bool more = j0 + kKeys < keys;
      if constexpr (Stats)
        waitCopies<0>();
      else
        waitCopies<1>();
      __syncthreads();
      float sc[4][4] = {};
      productRowsByColumns<HD>(qs, kts, tx, ty, sc);
      __syncthreads(); // every thread is done with kts
      if (more)
        stageTile<HD, kKeys>(kts, kKeys, kt + j0 + kKeys, g.t, g.d,
                             g.t - j0 - kKeys);
      commitCopies();
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          sc[a][c] = g.sees(i0 + ty * 4 + a, j0 + tx * 4 + c)
                         ? sc[a][c] * g.scale
                         : -INFINITY;
      onlineSoftmax<HD>(sc, m, l, o);
      if constexpr (!Stats) {
#pragma unroll
        for (int a = 0; a < 4; ++a)
          *reinterpret_cast<float4 *>(ps + (ty * 4 + a) * (kKeys + kPad) +
                                      tx * 4) =
              make_float4(sc[a][0], sc[a][1], sc[a][2], sc[a][3]);
        waitCopies<1>(); // this v tile (the next kt tile may still load)
        __syncthreads();
        // o[a][c] += sum_j p[a][j] v[j][c], p read as [j][a] column slices.
        const float *p = ps + ty * 4 * (kKeys + kPad);
        const float *vRow = vs + tx * 4;
#pragma unroll 4
        for (int j = 0; j < kKeys; j += 4) {
          float4 pa[4];
#pragma unroll
          for (int a = 0; a < 4; ++a)
            pa[a] = load4(p + a * (kKeys + kPad) + j);
#pragma unroll
          for (int jj = 0; jj < 4; ++jj)
#pragma unroll
            for (int chunk = 0; chunk < HD / 64; ++chunk) {
              float4 y = load4(vRow + (j + jj) * HD + chunk * 64);
#pragma unroll
              for (int a = 0; a < 4; ++a) {
                float w = lane(pa[a], jj);
                o[a][chunk * 4 + 0] += w * y.x;
                o[a][chunk * 4 + 1] += w * y.y;
                o[a][chunk * 4 + 2] += w * y.z;
                o[a][chunk * 4 + 3] += w * y.w;
              }
            }
        }
        __syncthreads(); // every thread is done with vs and ps
        if (more)
          stageTile<kKeys, HD>(vs, HD, v + size_t(j0 + kKeys) * g.e, g.e,
                               g.t - j0 - kKeys, g.e);
        commitCopies();
      }
    }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
    l[a] = rowSum16(l[a]); // each lane summed its own columns
  if constexpr (Stats) {
    const float *dy = dout + size_t(b) * g.s * g.e;
    const float *y = out + size_t(b) * g.s * g.e;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      int i = i0 + ty * 4 + a;
      float dot = 0.f;
      if (i < g.s)
        for (int c = tx; c < g.e; c += 16)
          dot += dy[size_t(i) * g.e + c] * y[size_t(i) * g.e + c];
      dot = rowSum16(dot);
      if (i < g.s && tx == 0) {
        lse[rowsAt + i] = l[a] > 0.f ? m[a] + logf(l[a]) : -INFINITY;
        delta[rowsAt + i] = dot;
      }
    }
  } else {
    out += size_t(b) * g.s * g.e;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      int i = i0 + ty * 4 + a;
      if (i >= g.s)
        continue;
      float inv = l[a] > 0.f ? 1.f / l[a] : 0.f; // no key: a row of zeros
#pragma unroll
      for (int c = 0; c < HD / 16; ++c)
        if (columnOf(tx, c) < g.e)
          out[size_t(i) * g.e + columnOf(tx, c)] = o[a][c] * inv;
    }
  }
}

//===----------------------------------------------------------------------===//
// Backward: dK and dV per key tile
//===----------------------------------------------------------------------===//

template <int HD> constexpr int keyGradFloats() {
  int kts = HD * kKeys, vs = kKeys * (HD + kPad);
  int qs = kRows * (HD + kPad), dos = kRows * (HD + kPad);
  int pts = kRows * (kKeys + kPad);
  return kts + vs + qs + dos + 2 * pts + 2 * kRows;
}

/// p = exp(scale s - L_i) and ds = p (dp - D_i) of the thread's 4 x 4
/// pairs, in place in sc and dp; 0 where the query does not see the key.
/// `query(a, b)`, `key(a, b)` and `row(a, b)` (the query's slot in lse and
/// delta) place the pairs.
template <typename Query, typename Key, typename Row>
__device__ void probabilitiesAndScoreGrads(const Dims &g, float (&sc)[4][4],
                                           float (&dp)[4][4], const float *ls,
                                           const float *ds, Query query,
                                           Key key, Row row) {
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      bool seen = g.sees(query(a, b), key(a, b));
      float p = seen ? expf(sc[a][b] * g.scale - ls[row(a, b)]) : 0.f;
      sc[a][b] = p;
      dp[a][b] = p * (dp[a][b] - ds[row(a, b)]);
    }
}

/// Grid (batch, key tiles). A thread owns keys j0 + ty*4 + a and, per
/// query tile, queries i0 + tx + 16 b; it accumulates dV and dK for its 4
/// keys over the query tiles that see them, from the first query of the
/// tile's first key on (FlashAttention-2's outer loop over keys).
template <int HD>
__global__ void __launch_bounds__(kThreads, HD <= 64 ? 2 : 1)
    attentionKeyGradKernel(Dims g, const float *q, const float *kt,
                           const float *v, const float *dout, const float *lse,
                           const float *delta, float *dkt, float *dv) {
  extern __shared__ float4 sharedRaw[];
  constexpr int kStride = HD + kPad, kPStride = kKeys + kPad;
  float *kts = reinterpret_cast<float *>(sharedRaw); // [HD][kKeys]
  float *vs = kts + HD * kKeys;                      // [kKeys][kStride]
  float *qs = vs + kKeys * kStride;                  // [kRows][kStride]
  float *dos = qs + kRows * kStride;                 // [kRows][kStride]
  float *pts = dos + kRows * kStride;                // [kRows][kPStride]
  float *dsts = pts + kRows * kPStride;              // [kRows][kPStride]
  float *ls = dsts + kRows * kPStride;               // [kRows]
  float *deltas = ls + kRows;                        // [kRows]
  int b = blockIdx.x, j0 = blockIdx.y * kKeys;
  q += size_t(b) * g.s * g.d;
  kt += size_t(b) * g.d * g.t;
  v += size_t(b) * g.t * g.e;
  dout += size_t(b) * g.s * g.e;
  lse += size_t(b) * g.s;
  delta += size_t(b) * g.s;
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int first = g.firstQuery(j0) / kRows * kRows;

  float dV[4][HD / 16] = {}, dK[4][HD / 16] = {};
  // Copy groups in flight: [kt, v, dout, lse, delta][q]. The next dout
  // tile loads during this dK, the next q tile during the next dP.
  stageTile<HD, kKeys>(kts, kKeys, kt + j0, g.t, g.d, g.t - j0);
  stageTile<kKeys, HD>(vs, kStride, v + size_t(j0) * g.e, g.e, g.t - j0, g.e);
  auto stageGradRows = [&](int i0) {
    stageTile<kRows, HD>(dos, kStride, dout + size_t(i0) * g.e, g.e, g.s - i0,
                         g.e);
    stageRows(ls, lse + i0, g.s - i0);
    stageRows(deltas, delta + i0, g.s - i0);
    commitCopies();
  };
  auto stageQueries = [&](int i0) {
    stageTile<kRows, HD>(qs, kStride, q + size_t(i0) * g.d, g.d, g.s - i0, g.d);
    commitCopies();
  };
  stageGradRows(first);
  stageQueries(first);
  for (int i0 = first; i0 < g.s; i0 += kRows) {
    bool more = i0 + kRows < g.s;
    waitCopies<1>();
    __syncthreads();
    float dp[4][4] = {}, sc[4][4] = {};
    productRowsByRows<HD>(vs, dos, tx, ty, dp); // dp[key][query] = v . dout
    waitCopies<0>();
    __syncthreads();
    // sc[a][b] = k_(ty*4+a) . q_(tx+16b): kt's columns against q's rows.
    {
      const float *qRow = qs + tx * kStride;
#pragma unroll 4
      for (int k = 0; k < HD; k += 4) {
        float4 x[4];
#pragma unroll
        for (int bb = 0; bb < 4; ++bb)
          x[bb] = load4(qRow + bb * 16 * kStride + k);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          float4 y = load4(kts + (k + kk) * kKeys + ty * 4);
#pragma unroll
          for (int bb = 0; bb < 4; ++bb) {
            float xb = lane(x[bb], kk);
            sc[0][bb] += y.x * xb;
            sc[1][bb] += y.y * xb;
            sc[2][bb] += y.z * xb;
            sc[3][bb] += y.w * xb;
          }
        }
      }
    }
    probabilitiesAndScoreGrads(
        g, sc, dp, ls, deltas, [&](int, int bb) { return i0 + tx + 16 * bb; },
        [&](int a, int) { return j0 + ty * 4 + a; },
        [&](int, int bb) { return tx + 16 * bb; });
    // Stored [query][key]: the thread's 4 keys are contiguous.
#pragma unroll
    for (int bb = 0; bb < 4; ++bb) {
      int at = (tx + 16 * bb) * kPStride + ty * 4;
      *reinterpret_cast<float4 *>(pts + at) =
          make_float4(sc[0][bb], sc[1][bb], sc[2][bb], sc[3][bb]);
      *reinterpret_cast<float4 *>(dsts + at) =
          make_float4(dp[0][bb], dp[1][bb], dp[2][bb], dp[3][bb]);
    }
    __syncthreads();
    accumulateWeighted<HD>(pts, kPStride, dos, kStride, kRows, tx, ty, dV);
    __syncthreads(); // every thread is done with dos, ls and deltas
    if (more)
      stageGradRows(i0 + kRows);
    accumulateWeighted<HD>(dsts, kPStride, qs, kStride, kRows, tx, ty, dK);
    __syncthreads(); // every thread is done with qs (and pts, dsts)
    if (more)
      stageQueries(i0 + kRows);
  }

  dv += size_t(b) * g.t * g.e;
  dkt += size_t(b) * g.d * g.t;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    int j = j0 + ty * 4 + a;
    if (j >= g.t)
      continue;
#pragma unroll
    for (int c = 0; c < HD / 16; ++c) {
      int col = columnOf(tx, c);
      if (col < g.e)
        dv[size_t(j) * g.e + col] = dV[a][c];
      if (col < g.d)
        dkt[size_t(col) * g.t + j] = g.scale * dK[a][c];
    }
  }
}

//===----------------------------------------------------------------------===//
// Backward: dQ per query tile
//===----------------------------------------------------------------------===//

template <int HD> constexpr int queryGradFloats() {
  int rows = kRows * (HD + kPad);
  return 4 * rows + kKeys * (kRows + kPad) + 2 * kRows;
}

/// Grid (batch, query tiles), in reverse as the forward's. A thread owns
/// queries i0 + ty*4 + a and, per key tile, keys j0 + tx + 16 b; it
/// accumulates dQ for its 4 queries over the key tiles they see.
template <int HD>
__global__ void __launch_bounds__(kThreads, HD <= 64 ? 2 : 1)
    attentionQueryGradKernel(Dims g, const float *q, const float *kt,
                             const float *v, const float *dout,
                             const float *lse, const float *delta, float *dq) {
  extern __shared__ float4 sharedRaw[];
  constexpr int kStride = HD + kPad, kDsStride = kRows + kPad;
  float *qs = reinterpret_cast<float *>(sharedRaw); // [kRows][kStride]
  float *dos = qs + kRows * kStride;                // [kRows][kStride]
  float *ks = dos + kRows * kStride;                // [kKeys][kStride]
  float *vs = ks + kKeys * kStride;                 // [kKeys][kStride]
  float *dsts = vs + kKeys * kStride;               // [kKeys][kDsStride]
  float *ls = dsts + kKeys * kDsStride;             // [kRows]
  float *deltas = ls + kRows;                       // [kRows]
  int b = blockIdx.x, i0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  q += size_t(b) * g.s * g.d;
  kt += size_t(b) * g.d * g.t;
  v += size_t(b) * g.t * g.e;
  dout += size_t(b) * g.s * g.e;
  lse += size_t(b) * g.s;
  delta += size_t(b) * g.s;
  dq += size_t(b) * g.s * g.d;
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int keys = g.visibleKeys(min(i0 + kRows, g.s) - 1);

  float dQ[4][HD / 16] = {};
  if (keys > 0) { // uniform over the block
    // Copy groups in flight: [q, dout, lse, delta, v tile][k tile]. The
    // next v tile loads during this dQ, the next k tile during the next dP.
    stageTile<kRows, HD>(qs, kStride, q + size_t(i0) * g.d, g.d, g.s - i0, g.d);
    stageTile<kRows, HD>(dos, kStride, dout + size_t(i0) * g.e, g.e, g.s - i0,
                         g.e);
    stageRows(ls, lse + i0, g.s - i0);
    stageRows(deltas, delta + i0, g.s - i0);
    stageTile<kKeys, HD>(vs, kStride, v, g.e, g.t, g.e);
    commitCopies();
    // k [key][head dim], from kt [head dim][key].
    stageTileTransposed<HD, kKeys>(ks, kStride, kt, g.t, g.d, g.t);
    commitCopies();
    for (int j0 = 0; j0 < keys; j0 += kKeys) {
      bool more = j0 + kKeys < keys;
      waitCopies<1>();
      __syncthreads();
      float dp[4][4] = {}, sc[4][4] = {};
      productRowsByRows<HD>(dos, vs, tx, ty, dp); // dp[query][key]
      waitCopies<0>();
      __syncthreads();
      productRowsByRows<HD>(qs, ks, tx, ty, sc);
      probabilitiesAndScoreGrads(
          g, sc, dp, ls, deltas, [&](int a, int) { return i0 + ty * 4 + a; },
          [&](int, int bb) { return j0 + tx + 16 * bb; },
          [&](int a, int) { return ty * 4 + a; });
      // Stored [key][query]: the thread's 4 queries are contiguous.
#pragma unroll
      for (int bb = 0; bb < 4; ++bb)
        *reinterpret_cast<float4 *>(dsts + (tx + 16 * bb) * kDsStride +
                                    ty * 4) =
            make_float4(dp[0][bb], dp[1][bb], dp[2][bb], dp[3][bb]);
      __syncthreads(); // dsts is complete; every thread is done with vs
      if (more)
        stageTile<kKeys, HD>(vs, kStride, v + size_t(j0 + kKeys) * g.e, g.e,
                             g.t - j0 - kKeys, g.e);
      commitCopies();
      accumulateWeighted<HD>(dsts, kDsStride, ks, kStride, kKeys, tx, ty, dQ);
      __syncthreads(); // every thread is done with ks and dsts
      if (more)
        stageTileTransposed<HD, kKeys>(ks, kStride, kt + j0 + kKeys, g.t, g.d,
                                       g.t - j0 - kKeys);
      commitCopies();
    }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    int i = i0 + ty * 4 + a;
    if (i >= g.s)
      continue;
#pragma unroll
    for (int c = 0; c < HD / 16; ++c)
      if (columnOf(tx, c) < g.d)
        dq[size_t(i) * g.d + columnOf(tx, c)] = g.scale * dQ[a][c];
  }
}

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

/// The sizes of one leading index, checked against the kernels' limits:
/// head dims up to kMaxHeadDim, 32-bit offsets inside one index, grids.
Dims dimsOf(const AttentionShape &a, float scale, const std::string &op) {
  BMRT_CHECK(a.d <= kMaxHeadDim && a.e <= kMaxHeadDim,
             "cuda " + op + ": head dims d = " + std::to_string(a.d) +
                 " and e = " + std::to_string(a.e) + " exceed " +
                 std::to_string(kMaxHeadDim));
  int64_t longest = std::max(a.s, a.t) * kMaxHeadDim;
  BMRT_CHECK(longest <= INT_MAX && a.batch <= INT_MAX &&
                 ceilDiv(std::max(a.s, a.t), kRows) <= 65535,
             "cuda " + op + " over " + std::to_string(a.batch) + " x " +
                 std::to_string(a.s) + " queries x " + std::to_string(a.t) +
                 " keys exceeds its 32-bit offsets or one cuda grid");
  return {static_cast<int>(a.s),
          static_cast<int>(a.t),
          static_cast<int>(a.d),
          static_cast<int>(a.e),
          a.causal,
          scale,
          a.positions};
}

/// Launches `kernel` with `floats` of dynamic shared memory (above the
/// default 48 KB, which needs the attribute).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, int floats, cudaStream_t stream,
            Args... args) {
  size_t bytes = floats * sizeof(float);
  BMRT_CUDA_CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<grid, kThreads, bytes, stream>>>(args...);
}

/// Grid of the kernels over tiles of `n`, per leading index.
dim3 tileGrid(const AttentionShape &a, int64_t n) {
  return dim3(static_cast<unsigned>(a.batch),
              static_cast<unsigned>(ceilDiv(n, kRows)));
}

/// out [batch, s, e] = attention (every size non-zero but d possibly 0).
template <int HD>
void forward(cudaStream_t stream, const AttentionShape &a, const Dims &g,
             const float *q, const float *kt, const float *v, float *out) {
  launch(attentionForwardKernel<HD, false>, tileGrid(a, a.s),
         forwardFloats<HD, false>(), stream, g, q, kt, v, out,
         static_cast<const float *>(nullptr), static_cast<float *>(nullptr),
         static_cast<float *>(nullptr));
  BMRT_CUDA_CHECK_LAUNCH("attention");
}

/// The three backward kernels; lse and delta are [batch, s] scratch.
template <int HD>
void backward(cudaStream_t stream, const AttentionShape &a, const Dims &g,
              const float *q, const float *kt, const float *v, const float *out,
              const float *dout, float *lse, float *delta, float *dq,
              float *dkt, float *dv) {
  launch(attentionForwardKernel<HD, true>, tileGrid(a, a.s),
         forwardFloats<HD, true>(), stream, g, q, kt, v,
         const_cast<float *>(out), dout, lse, delta);
  BMRT_CUDA_CHECK_LAUNCH("attention_grad's statistics");
  launch(attentionKeyGradKernel<HD>, tileGrid(a, a.t), keyGradFloats<HD>(),
         stream, g, q, kt, v, dout, static_cast<const float *>(lse),
         static_cast<const float *>(delta), dkt, dv);
  BMRT_CUDA_CHECK_LAUNCH("attention_grad's dk and dv");
  launch(attentionQueryGradKernel<HD>, tileGrid(a, a.s), queryGradFloats<HD>(),
         stream, g, q, kt, v, dout, static_cast<const float *>(lse),
         static_cast<const float *>(delta), dq);
  BMRT_CUDA_CHECK_LAUNCH("attention_grad's dq");
}

/// The attention of q, kt, v into out on `stream` (device pointers).
void attentionForward(cudaStream_t stream, const AttentionShape &a, float scale,
                      const float *q, const float *kt, const float *v,
                      float *out) {
  Dims g = dimsOf(a, scale, "attention");
  if (a.batch == 0 || a.s == 0 || a.e == 0)
    return; // an empty result
  if (std::max(a.d, a.e) <= 64)
    forward<64>(stream, a, g, q, kt, v, out);
  else
    forward<128>(stream, a, g, q, kt, v, out);
}

/// The floats of attentionBackward's scratch: lse and delta.
int64_t backwardScratchFloats(const AttentionShape &a) {
  return 2 * std::max<int64_t>(a.batch * a.s, 1);
}

/// dq, dkt, dv of attention on `stream`; `scratch` holds
/// backwardScratchFloats(a) floats.
void attentionBackward(cudaStream_t stream, const AttentionShape &a,
                       float scale, const float *q, const float *kt,
                       const float *v, const float *out, const float *dout,
                       float *dq, float *dkt, float *dv, float *scratch) {
  Dims g = dimsOf(a, scale, "attention_grad");
  if (a.batch == 0)
    return;
  if (a.s == 0 || a.t == 0) { // no pairs: every gradient is 0
    float *grads[] = {dq, dkt, dv};
    int64_t sizes[] = {a.s * a.d, a.d * a.t, a.t * a.e};
    for (int r = 0; r < 3; ++r)
      if (sizes[r] > 0)
        BMRT_CUDA_CHECK(cudaMemsetAsync(
            grads[r], 0, a.batch * sizes[r] * sizeof(float), stream));
    return;
  }
  float *lse = scratch, *delta = scratch + a.batch * a.s;
  if (std::max(a.d, a.e) <= 64)
    backward<64>(stream, a, g, q, kt, v, out, dout, lse, delta, dq, dkt, dv);
  else
    backward<128>(stream, a, g, q, kt, v, out, dout, lse, delta, dq, dkt, dv);
}

/// The geometry of instruction `i`, whose operand `positionsAt` holds the
/// queries' positions where it is present.
AttentionShape shapeOf(E &e, const Instr &i, size_t positionsAt) {
  AttentionShape a =
      attentionShape(e.operand(i, 0).shape, e.operand(i, 1).shape,
                     e.operand(i, 2).shape, i.getInt("causal", 0) != 0);
  if (const TensorView *positions = e.optionalOperand(i, positionsAt))
    a.positions = positions->i64();
  return a;
}

float scaleOf(const Instr &i) {
  return static_cast<float>(i.getFloat("scale"));
}

/// Under the plan's bf16 (every GEMM of the device with bf16 inputs) the
/// geometries the tensor-core kernels take run there (AttentionMma.h); the
/// rest, and fp32, run the fp32 kernels above.
bool onTensorCores(E &e, const AttentionShape &a) {
  return e.device().contractionPrecision() == ContractionPrecision::BF16 &&
         attentionMmaSupports(a);
}

void launchAttention(E &e, const Instr &i) {
  AttentionShape a = shapeOf(e, i, 3);
  const float *q = e.operand(i, 0).f32(), *kt = e.operand(i, 1).f32(),
              *v = e.operand(i, 2).f32();
  if (onTensorCores(e, a))
    return attentionForwardMma(cudaStreamOf(e.stream()), a, q, kt, v,
                               e.result(i, 0).f32(), scaleOf(i));
  attentionForward(cudaStreamOf(e.stream()), a, scaleOf(i), q, kt, v,
                   e.result(i, 0).f32());
}

/// Operands q, kt, v, result, result_grad[, positions]; results dq, dkt,
/// dv.
void launchAttentionGrad(E &e, const Instr &i) {
  AttentionShape a = shapeOf(e, i, 5);
  Carver carver;
  size_t scratchAt = carver.reserve(backwardScratchFloats(a) * sizeof(float));
  carver.allocate(e);
  if (onTensorCores(e, a))
    return attentionBackwardMma(
        cudaStreamOf(e.stream()), a, e.operand(i, 0).f32(),
        e.operand(i, 1).f32(), e.operand(i, 2).f32(), e.operand(i, 3).f32(),
        e.operand(i, 4).f32(), e.result(i, 0).f32(), e.result(i, 1).f32(),
        e.result(i, 2).f32(), scaleOf(i), carver.at<float>(scratchAt));
  attentionBackward(
      cudaStreamOf(e.stream()), a, scaleOf(i), e.operand(i, 0).f32(),
      e.operand(i, 1).f32(), e.operand(i, 2).f32(), e.operand(i, 3).f32(),
      e.operand(i, 4).f32(), e.result(i, 0).f32(), e.result(i, 1).f32(),
      e.result(i, 2).f32(), carver.at<float>(scratchAt));
}

// Alphabetical.
const KernelTable::Entry kKernels[] = {
    {"attention", launchAttention},
    {"attention_grad", launchAttentionGrad},
};

} // namespace

KernelFamily attentionKernels() {
  return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

} // namespace bmrt::cuda
