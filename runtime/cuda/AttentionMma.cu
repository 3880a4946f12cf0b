//===- AttentionMma.cu - fused attention on bf16 tensor cores -------------===//
//
// Four warps per block, each owning 16 rows of the block's tile, as in
// FlashAttention-2 (Dao 2023):
//  - forward: a block takes 64 queries and walks the key tiles they see,
//    S = Q K^T and O += P V on mma.sync m16n8k16 with the online softmax in
//    between; P goes from the first product's accumulators into the second
//    product's operand registers (the accumulator and operand fragments
//    line up row for row), so the scores never leave registers. With
//    kStats the same walk writes each query's log-sum-exp for the
//    backward instead of the output;
//  - backward, keys: a block takes 64 keys and walks the query tiles that
//    see them, recomputing P^T and dP^T to sum dV += P^T dO and
//    dK += dS^T Q in registers;
//  - backward, queries: a block takes 64 queries and walks their key tiles
//    to sum dQ += dS K. Two kernels instead of FlashAttention-2's atomic
//    dQ: every element is summed in one order, the same bits every run.
// Shared-memory tiles are bf16, each row padded by 8 elements so that the
// 32-bit fragment loads of a warp fall in 32 different banks.
//
//===----------------------------------------------------------------------===//

#include "AttentionMma.h"
#include "AttentionPlaces.cuh"
#include "CudaCheck.h"

#include "bmrt/Error.h"

#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

namespace bmrt::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 128; // four warps
constexpr int kRowsPerWarp = 16;
constexpr int kTile = 64; // queries (forward, dq) or keys (dk, dv) a block owns
constexpr int kWalk = 64; // keys per step of the forward and dq walks
constexpr int kWalkQ = 32; // queries per step of the dk, dv walk (registers)
constexpr int kPad = 8;

//===----------------------------------------------------------------------===//
// Fragments
//===----------------------------------------------------------------------===//

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi); // lo in the low half
  return *reinterpret_cast<uint32_t *>(&pair);
}

__device__ __forceinline__ uint32_t pairAt(const bf16 *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

/// c += a b for one m16n8k16 tile: a 16 x 16 (row fragment), b 16 x 8
/// (column fragment), c 16 x 8 fp32. PTX ISA, "Matrix Fragments for
/// mma.m16n8k16": with g = lane / 4 and q = lane % 4, a[0..3] hold rows g,
/// g + 8, g, g + 8 at columns (2q, 2q + 1), (2q, 2q + 1), (2q + 8, 2q + 9),
/// (2q + 8, 2q + 9); b0 and b1 rows (2q, 2q + 1) and (2q + 8, 2q + 9) of
/// column g; c[0..1] row g and c[2..3] row g + 8, columns 2q and 2q + 1.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// c += a B where B's column n, rows k..k+15, is the 16 elements at
/// tile[(n0 + n) * ld + k0 ...]: a tile stored with B's columns as rows.
__device__ __forceinline__ void mmaColumns(float (&c)[4],
                                           const uint32_t (&a)[4],
                                           const bf16 *tile, int ld, int n0,
                                           int k0, int g, int q) {
  const bf16 *column = tile + (n0 + g) * ld + k0 + 2 * q;
  mma(c, a, pairAt(column), pairAt(column + 8));
}

/// The row fragment of rows r0.., columns k0.. of a row-major tile.
__device__ __forceinline__ void rowFragment(uint32_t (&a)[4], const bf16 *tile,
                                            int ld, int r0, int k0, int g,
                                            int q) {
  const bf16 *top = tile + (r0 + g) * ld + k0 + 2 * q;
  const bf16 *bottom = top + 8 * ld;
  a[0] = pairAt(top);
  a[1] = pairAt(bottom);
  a[2] = pairAt(top + 8);
  a[3] = pairAt(bottom + 8);
}

/// The row fragment of k-step kk of a product whose left operand is the
/// accumulators acc (rows of this warp, 8 columns per tile): tiles 2kk and
/// 2kk + 1 hold exactly the fragment's elements.
template <int N>
__device__ __forceinline__ void
accumulatorFragment(uint32_t (&a)[4], const float (&acc)[N][4], int kk) {
  a[0] = pack(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = pack(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

/// Stages a rows x cols region of an fp32 tensor into a bf16 tile:
/// tile[r * ld + c] = src[r * rowStride + c * colStride], zero where r >=
/// validRows or c >= validCols. Consecutive threads take consecutive
/// elements along the unit stride, so the reads coalesce.
__device__ void stage(bf16 *tile, int ld, const float *src, int64_t rowStride,
                      int64_t colStride, int rows, int cols, int validRows,
                      int validCols) {
  for (int i = threadIdx.x; i < rows * cols; i += kThreads) {
    int r = colStride == 1 ? i / cols : i % rows;
    int c = colStride == 1 ? i % cols : i / rows;
    float x = r < validRows && c < validCols
                  ? src[r * rowStride + c * colStride]
                  : 0.f;
    tile[r * ld + c] = __float2bfloat16(x);
  }
}

/// The sum or max of a value over the four lanes that share a row.
__device__ __forceinline__ float quadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float quadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/// What a kernel needs of the geometry (bmrt/Attention.h), in 32 bits.
struct Geometry {
  int s, t;
  bool causal;
  float scale;
  /// AttentionShape::positions (device memory, or null).
  const int64_t *positions;

  /// AttentionShape::position: a query's place among the keys.
  __device__ int position(int query) const {
    return positions ? static_cast<int>(positions[query]) : query + t - s;
  }
  __device__ bool hidden(int query, int key) const {
    return query >= s || key >= t || (causal && key > position(query));
  }
  /// The keys the queries [q0, q0 + n) see between them: [0, keyEnd)
  /// (the last one's, positions not decreasing).
  __device__ int keyEnd(int q0, int n) const {
    if (!causal)
      return t;
    int last = min(q0 + n, s) - 1;
    return max(0, min(t, position(last) + 1));
  }
  /// The first query that sees key k0 (bmrt/Attention.h's firstQuery).
  __device__ int firstQuery(int k0) const {
    return causal ? firstPlacedAt(positions, s, t, k0) : 0;
  }
};

//===----------------------------------------------------------------------===//
// Forward (and the backward's log-sum-exp)
//===----------------------------------------------------------------------===//

template <int D, bool kStats>
__global__ void __launch_bounds__(kThreads)
    forwardKernel(const float *q, const float *kt, const float *v, float *out,
                  float *lse, Geometry geo) {
  constexpr int LD = D + kPad, LDV = kWalk + kPad;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16 *Qs = reinterpret_cast<bf16 *>(shared); // [kTile][LD]
  bf16 *Ks = Qs + kTile * LD;                  // [kWalk][LD]: keys x d
  bf16 *Vt = Ks + kWalk * LD;                  // [D][LDV]: e x keys
  const int b = blockIdx.x, q0 = blockIdx.y * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, qd = lane % 4;
  const int s = geo.s, t = geo.t;
  q += int64_t(b) * s * D;
  kt += int64_t(b) * D * t;
  v += int64_t(b) * t * D;

  stage(Qs, LD, q + int64_t(q0) * D, D, 1, kTile, D, s - q0, D);
  __syncthreads();
  uint32_t qa[D / 16][4];
  for (int ks = 0; ks < D / 16; ++ks)
    rowFragment(qa[ks], Qs, LD, warp * kRowsPerWarp, ks * 16, g, qd);

  const int rows[2] = {q0 + warp * kRowsPerWarp + g,
                       q0 + warp * kRowsPerWarp + g + 8};
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int keyEnd = geo.keyEnd(q0, kTile);
  for (int k0 = 0; k0 < keyEnd; k0 += kWalk) {
    __syncthreads(); // the last tile's readers are done
    stage(Ks, LD, kt + k0, 1, t, kWalk, D, t - k0, D);
    if (!kStats)
      stage(Vt, LDV, v + int64_t(k0) * D, 1, D, D, kWalk, D, t - k0);
    __syncthreads();
    float sc[kWalk / 8][4] = {};
    for (int nt = 0; nt < kWalk / 8; ++nt)
      for (int ks = 0; ks < D / 16; ++ks)
        mmaColumns(sc[nt], qa[ks], Ks, LD, nt * 8, ks * 16, g, qd);
    // Scale and mask; each row's max over this tile and the ones before.
    float mx[2] = {m[0], m[1]};
    for (int nt = 0; nt < kWalk / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        int key = k0 + nt * 8 + 2 * qd + (e & 1);
        float x =
            geo.hidden(rows[e / 2], key) ? -INFINITY : sc[nt][e] * geo.scale;
        sc[nt][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    float alpha[2], base[2], rowSum[2] = {0.f, 0.f};
    for (int r = 0; r < 2; ++r) {
      mx[r] = quadMax(mx[r]);
      // A row that has seen no key yet keeps a base of 0 (no inf - inf).
      base[r] = mx[r] == -INFINITY ? 0.f : mx[r];
      alpha[r] = expf(m[r] - base[r]);
      m[r] = mx[r];
    }
    for (int nt = 0; nt < kWalk / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        sc[nt][e] = expf(sc[nt][e] - base[e / 2]);
        rowSum[e / 2] += sc[nt][e];
      }
    for (int r = 0; r < 2; ++r)
      l[r] = l[r] * alpha[r] + rowSum[r];
    if constexpr (!kStats) {
      for (int ne = 0; ne < D / 8; ++ne)
        for (int e = 0; e < 4; ++e)
          o[ne][e] *= alpha[e / 2];
      for (int kk = 0; kk < kWalk / 16; ++kk) {
        uint32_t pa[4];
        accumulatorFragment(pa, sc, kk);
        for (int ne = 0; ne < D / 8; ++ne)
          mmaColumns(o[ne], pa, Vt, LDV, ne * 8, kk * 16, g, qd);
      }
    }
  }
  for (int r = 0; r < 2; ++r) {
    l[r] = quadSum(l[r]);
    if (rows[r] >= s)
      continue;
    if (kStats) {
      // A query that sees no key: +inf, so that exp(s - lse) = 0.
      if (qd == 0)
        lse[int64_t(b) * s + rows[r]] = l[r] > 0 ? m[r] + logf(l[r]) : INFINITY;
      continue;
    }
    float inverse = l[r] > 0 ? 1.f / l[r] : 0.f;
    float *row = out + (int64_t(b) * s + rows[r]) * D;
    for (int ne = 0; ne < D / 8; ++ne) {
      int col = ne * 8 + 2 * qd;
      row[col] = o[ne][2 * r] * inverse;
      row[col + 1] = o[ne][2 * r + 1] * inverse;
    }
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// delta[row] = sum_c dout[row, c] * out[row, c] (= rowsum(P * dP)), a warp
/// per row, fp32.
__global__ void deltaKernel(const float *out, const float *dout, float *delta,
                            int64_t rows, int cols) {
  int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  float sum = 0;
  for (int c = lane; c < cols; c += 32)
    sum += out[row * cols + c] * dout[row * cols + c];
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0)
    delta[row] = sum;
}

/// The row fragments of one warp's 16 rows of a tensor read straight from
/// memory: element (row, c) at src[row * rowStride + c * colStride], zero
/// past `rows`.
template <int D>
__device__ void globalFragments(uint32_t (&a)[D / 16][4], const float *src,
                                int64_t rowStride, int64_t colStride, int row0,
                                int rows, int g, int qd) {
  auto at = [&](int row, int c) {
    return row < rows ? src[row * rowStride + c * colStride] : 0.f;
  };
  int top = row0 + g, bottom = row0 + g + 8;
  for (int ks = 0; ks < D / 16; ++ks) {
    int c = ks * 16 + 2 * qd;
    a[ks][0] = pack(at(top, c), at(top, c + 1));
    a[ks][1] = pack(at(bottom, c), at(bottom, c + 1));
    a[ks][2] = pack(at(top, c + 8), at(top, c + 9));
    a[ks][3] = pack(at(bottom, c + 8), at(bottom, c + 9));
  }
}

/// dV and dK of 64 keys, walking the query tiles that see them.
template <int D>
__global__ void __launch_bounds__(kThreads)
    keysKernel(const float *q, const float *kt, const float *v,
               const float *dout, const float *lse, const float *delta,
               float *dkt, float *dv, Geometry geo) {
  constexpr int LD = D + kPad, LDQ = kWalkQ + kPad;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16 *Qs = reinterpret_cast<bf16 *>(shared);          // [kWalkQ][LD]
  bf16 *Qt = Qs + kWalkQ * LD;                          // [D][LDQ]
  bf16 *dOs = Qt + D * LDQ;                             // [kWalkQ][LD]
  bf16 *dOt = dOs + kWalkQ * LD;                        // [D][LDQ]
  float *Ls = reinterpret_cast<float *>(dOt + D * LDQ); // [kWalkQ]
  float *Ds = Ls + kWalkQ;                              // [kWalkQ]
  const int b = blockIdx.x, k0 = blockIdx.y * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, qd = lane % 4;
  const int s = geo.s, t = geo.t;
  q += int64_t(b) * s * D;
  kt += int64_t(b) * D * t;
  v += int64_t(b) * t * D;
  dout += int64_t(b) * s * D;
  lse += int64_t(b) * s;
  delta += int64_t(b) * s;

  const int keys[2] = {k0 + warp * kRowsPerWarp + g,
                       k0 + warp * kRowsPerWarp + g + 8};
  uint32_t ka[D / 16][4], va[D / 16][4];
  globalFragments<D>(ka, kt, 1, t, k0 + warp * kRowsPerWarp, t, g, qd);
  globalFragments<D>(va, v, D, 1, k0 + warp * kRowsPerWarp, t, g, qd);
  float dvAcc[D / 8][4] = {}, dkAcc[D / 8][4] = {};
  const int first = geo.firstQuery(k0) / kWalkQ * kWalkQ;
  for (int q0 = first; q0 < s; q0 += kWalkQ) {
    __syncthreads();
    stage(Qs, LD, q + int64_t(q0) * D, D, 1, kWalkQ, D, s - q0, D);
    stage(Qt, LDQ, q + int64_t(q0) * D, 1, D, D, kWalkQ, D, s - q0);
    stage(dOs, LD, dout + int64_t(q0) * D, D, 1, kWalkQ, D, s - q0, D);
    stage(dOt, LDQ, dout + int64_t(q0) * D, 1, D, D, kWalkQ, D, s - q0);
    for (int i = threadIdx.x; i < kWalkQ; i += kThreads) {
      Ls[i] = q0 + i < s ? lse[q0 + i] : INFINITY;
      Ds[i] = q0 + i < s ? delta[q0 + i] : 0.f;
    }
    __syncthreads();
    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys.
    float st[kWalkQ / 8][4] = {}, dpt[kWalkQ / 8][4] = {};
    for (int nt = 0; nt < kWalkQ / 8; ++nt)
      for (int ks = 0; ks < D / 16; ++ks) {
        mmaColumns(st[nt], ka[ks], Qs, LD, nt * 8, ks * 16, g, qd);
        mmaColumns(dpt[nt], va[ks], dOs, LD, nt * 8, ks * 16, g, qd);
      }
    // P^T, then dS^T = P^T (dP^T - delta) in dpt.
    for (int nt = 0; nt < kWalkQ / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        int i = nt * 8 + 2 * qd + (e & 1);
        float p = geo.hidden(q0 + i, keys[e / 2])
                      ? 0.f
                      : expf(st[nt][e] * geo.scale - Ls[i]);
        st[nt][e] = p;
        dpt[nt][e] = p * (dpt[nt][e] - Ds[i]);
      }
    for (int kk = 0; kk < kWalkQ / 16; ++kk) {
      uint32_t pa[4], da[4];
      accumulatorFragment(pa, st, kk);
      accumulatorFragment(da, dpt, kk);
      for (int ne = 0; ne < D / 8; ++ne) {
        mmaColumns(dvAcc[ne], pa, dOt, LDQ, ne * 8, kk * 16, g, qd);
        mmaColumns(dkAcc[ne], da, Qt, LDQ, ne * 8, kk * 16, g, qd);
      }
    }
  }
  // dv [key, e] row-major; dk goes to kt's layout, [d, key].
  dv += int64_t(b) * t * D;
  dkt += int64_t(b) * D * t;
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= t)
      continue;
    for (int ne = 0; ne < D / 8; ++ne)
      for (int h = 0; h < 2; ++h) {
        int col = ne * 8 + 2 * qd + h;
        dv[int64_t(keys[r]) * D + col] = dvAcc[ne][2 * r + h];
        dkt[int64_t(col) * t + keys[r]] = geo.scale * dkAcc[ne][2 * r + h];
      }
  }
}

/// dQ of 64 queries, walking the key tiles they see.
template <int D>
__global__ void __launch_bounds__(kThreads)
    queriesKernel(const float *q, const float *kt, const float *v,
                  const float *dout, const float *lse, const float *delta,
                  float *dq, Geometry geo) {
  constexpr int LD = D + kPad, LDK = kWalk + kPad;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16 *Ks = reinterpret_cast<bf16 *>(shared); // [kWalk][LD]: keys x d
  bf16 *Kt = Ks + kWalk * LD;                  // [D][LDK]: d x keys
  bf16 *Vs = Kt + D * LDK;                     // [kWalk][LD]: keys x e
  const int b = blockIdx.x, q0 = blockIdx.y * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, qd = lane % 4;
  const int s = geo.s, t = geo.t;
  q += int64_t(b) * s * D;
  kt += int64_t(b) * D * t;
  v += int64_t(b) * t * D;
  dout += int64_t(b) * s * D;

  const int rows[2] = {q0 + warp * kRowsPerWarp + g,
                       q0 + warp * kRowsPerWarp + g + 8};
  uint32_t qa[D / 16][4], doa[D / 16][4];
  globalFragments<D>(qa, q, D, 1, q0 + warp * kRowsPerWarp, s, g, qd);
  globalFragments<D>(doa, dout, D, 1, q0 + warp * kRowsPerWarp, s, g, qd);
  float L[2], Dl[2];
  for (int r = 0; r < 2; ++r) {
    L[r] = rows[r] < s ? lse[int64_t(b) * s + rows[r]] : INFINITY;
    Dl[r] = rows[r] < s ? delta[int64_t(b) * s + rows[r]] : 0.f;
  }
  float dqAcc[D / 8][4] = {};
  const int keyEnd = geo.keyEnd(q0, kTile);
  for (int k0 = 0; k0 < keyEnd; k0 += kWalk) {
    __syncthreads();
    stage(Ks, LD, kt + k0, 1, t, kWalk, D, t - k0, D);
    stage(Kt, LDK, kt + k0, t, 1, D, kWalk, D, t - k0);
    stage(Vs, LD, v + int64_t(k0) * D, D, 1, kWalk, D, t - k0, D);
    __syncthreads();
    float sc[kWalk / 8][4] = {}, dp[kWalk / 8][4] = {};
    for (int nt = 0; nt < kWalk / 8; ++nt)
      for (int ks = 0; ks < D / 16; ++ks) {
        mmaColumns(sc[nt], qa[ks], Ks, LD, nt * 8, ks * 16, g, qd);
        mmaColumns(dp[nt], doa[ks], Vs, LD, nt * 8, ks * 16, g, qd);
      }
    // dS = P (dP - delta), in sc.
    for (int nt = 0; nt < kWalk / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        int key = k0 + nt * 8 + 2 * qd + (e & 1);
        float p = geo.hidden(rows[e / 2], key)
                      ? 0.f
                      : expf(sc[nt][e] * geo.scale - L[e / 2]);
        sc[nt][e] = p * (dp[nt][e] - Dl[e / 2]);
      }
    for (int kk = 0; kk < kWalk / 16; ++kk) {
      uint32_t da[4];
      accumulatorFragment(da, sc, kk);
      for (int ne = 0; ne < D / 8; ++ne)
        mmaColumns(dqAcc[ne], da, Kt, LDK, ne * 8, kk * 16, g, qd);
    }
  }
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= s)
      continue;
    float *row = dq + (int64_t(b) * s + rows[r]) * D;
    for (int ne = 0; ne < D / 8; ++ne) {
      int col = ne * 8 + 2 * qd;
      row[col] = geo.scale * dqAcc[ne][2 * r];
      row[col + 1] = geo.scale * dqAcc[ne][2 * r + 1];
    }
  }
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

template <int D> constexpr size_t forwardShared() {
  return sizeof(bf16) * ((kTile + kWalk) * (D + kPad) + D * (kWalk + kPad));
}
template <int D> constexpr size_t keysShared() {
  return sizeof(bf16) * 2 * (kWalkQ * (D + kPad) + D * (kWalkQ + kPad)) +
         sizeof(float) * 2 * kWalkQ;
}
template <int D> constexpr size_t queriesShared() {
  return sizeof(bf16) * (2 * kWalk * (D + kPad) + D * (kWalk + kPad));
}

/// Lets `kernel` take `bytes` of dynamic shared memory (past the default
/// 48 KB), once per kernel.
template <typename Kernel> void allowShared(Kernel kernel, size_t bytes) {
  BMRT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)));
}

dim3 gridOf(const AttentionShape &a, int64_t rows) {
  return dim3(static_cast<unsigned>(a.batch),
              static_cast<unsigned>((rows + kTile - 1) / kTile));
}

Geometry geometryOf(const AttentionShape &a, float scale) {
  return {static_cast<int>(a.s), static_cast<int>(a.t), a.causal, scale,
          a.positions};
}

template <int D>
void forward(cudaStream_t stream, const AttentionShape &a, const float *q,
             const float *kt, const float *v, float *out, float scale) {
  static const bool allowed =
      (allowShared(forwardKernel<D, false>, forwardShared<D>()),
       allowShared(forwardKernel<D, true>, forwardShared<D>()), true);
  (void)allowed;
  forwardKernel<D, false>
      <<<gridOf(a, a.s), kThreads, forwardShared<D>(), stream>>>(
          q, kt, v, out, nullptr, geometryOf(a, scale));
  BMRT_CUDA_CHECK_LAUNCH("attention (tensor cores)");
}

template <int D>
void backward(cudaStream_t stream, const AttentionShape &a, const float *q,
              const float *kt, const float *v, const float *out,
              const float *dout, float *dq, float *dkt, float *dv, float scale,
              float *scratch) {
  static const bool allowed =
      (allowShared(forwardKernel<D, true>, forwardShared<D>()),
       allowShared(keysKernel<D>, keysShared<D>()),
       allowShared(queriesKernel<D>, queriesShared<D>()), true);
  (void)allowed;
  float *lse = scratch, *delta = scratch + a.batch * a.s;
  Geometry geo = geometryOf(a, scale);
  int64_t rows = a.batch * a.s;
  deltaKernel<<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0,
                stream>>>(out, dout, delta, rows, static_cast<int>(a.e));
  BMRT_CUDA_CHECK_LAUNCH("attention_grad (row sums)");
  forwardKernel<D, true>
      <<<gridOf(a, a.s), kThreads, forwardShared<D>(), stream>>>(
          q, kt, v, nullptr, lse, geo);
  BMRT_CUDA_CHECK_LAUNCH("attention_grad (log-sum-exp)");
  keysKernel<D><<<gridOf(a, a.t), kThreads, keysShared<D>(), stream>>>(
      q, kt, v, dout, lse, delta, dkt, dv, geo);
  BMRT_CUDA_CHECK_LAUNCH("attention_grad (keys)");
  queriesKernel<D><<<gridOf(a, a.s), kThreads, queriesShared<D>(), stream>>>(
      q, kt, v, dout, lse, delta, dq, geo);
  BMRT_CUDA_CHECK_LAUNCH("attention_grad (queries)");
}

} // namespace

bool attentionMmaSupports(const AttentionShape &a) {
  bool headDim = a.d == a.e && (a.d == 64 || a.d == 128);
  // Grid x holds the batch, y the tiles; offsets inside a kernel are
  // 64-bit, sizes 32-bit.
  return headDim && a.s > 0 && a.t > 0 && a.batch > 0 && a.batch <= INT_MAX &&
         a.s <= INT_MAX / 2 && a.t <= INT_MAX / 2 &&
         (a.s + kTile - 1) / kTile <= 65535 &&
         (a.t + kTile - 1) / kTile <= 65535;
}

void attentionForwardMma(cudaStream_t stream, const AttentionShape &a,
                         const float *q, const float *kt, const float *v,
                         float *out, float scale) {
  BMRT_CHECK(attentionMmaSupports(a), "attention: the tensor-core kernels do "
                                      "not take this geometry");
  if (a.d == 64)
    forward<64>(stream, a, q, kt, v, out, scale);
  else
    forward<128>(stream, a, q, kt, v, out, scale);
}

void attentionBackwardMma(cudaStream_t stream, const AttentionShape &a,
                          const float *q, const float *kt, const float *v,
                          const float *out, const float *dout, float *dq,
                          float *dkt, float *dv, float scale, float *scratch) {
  BMRT_CHECK(attentionMmaSupports(a), "attention_grad: the tensor-core "
                                      "kernels do not take this geometry");
  if (a.d == 64)
    backward<64>(stream, a, q, kt, v, out, dout, dq, dkt, dv, scale, scratch);
  else
    backward<128>(stream, a, q, kt, v, out, dout, dq, dkt, dv, scale, scratch);
}

} // namespace bmrt::cuda
