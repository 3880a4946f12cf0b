//===- CasesAttention.cpp - fused attention, forward and backward ---------===//
//
// q, kt (the keys transposed) and v uniform in [-1, 1], scale 1 / sqrt(d).
// The shapes reach the CUDA kernels' edges (AttentionKernels.cu: tiles of
// 64 queries and 64 keys, head dims padded to 64 or 128): odd sizes far
// below a tile, s != t under the causal mask both ways (t < s leaves the
// first queries without a key: zero rows and zero gradients), 130 queries
// and keys (three tiles, the last of 2), head dims of 128 and d != e,
// rank 2 (one leading index) and 128 leading indices.
//
// Tolerance kReduction (Tolerance.h). Each score is a sum of d <= 128
// products of magnitude <= 1, scaled by 1 / sqrt(d): the orders differ
// by about d eps rms / sqrt(d) ~= 1e-6 at most. Each output and gradient
// element is a sum over t <= 130 keys (or s queries) whose terms are
// weighted by softmax probabilities that sum to 1 per query, so the sum of
// the terms' magnitudes stays below ~5 (a key seen by every query of a
// causal tile collects sum_i 1 / i) and random rounding of sums in
// different orders (the CPU's BLAS blocks, the kernels' tiles and online
// softmax, which normalises at the end) gives about sqrt(n) eps
// sum |terms| ~= 11 * 6e-8 * 5 = 3.4e-6, under atol 1e-5. The gradients'
// rowsum D is the CPU's sum_j p dp and the kernel's dout . out: equal in
// exact arithmetic because `result` is the true forward output, computed
// here in double.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include "bmrt/Attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

namespace bmrt::conformance {
namespace {

/// One case's sizes: leading dims, then q [s, d], kt [d, t], v [t, e];
/// with `positions`, each query's place among the keys (a
/// context-parallel rank's share of the queries against every key).
struct Sizes {
  Shape lead;
  int64_t s, t, d, e;
  bool causal;
  std::vector<int64_t> positions = {};

  Shape with(int64_t rows, int64_t cols) const {
    Shape shape = lead;
    shape.insert(shape.end(), {rows, cols});
    return shape;
  }
  AttentionShape geometry() const {
    AttentionShape a =
        attentionShape(with(s, d), with(d, t), with(t, e), causal);
    if (!positions.empty())
      a.positions = positions.data();
    return a;
  }
  HostTensor positionsOperand() const {
    return ints(DType::I64, {s}, positions);
  }
  double scale() const { return 1 / std::sqrt(static_cast<double>(d)); }
};

/// Runs of consecutive places: (first, count) each.
std::vector<int64_t>
places(std::initializer_list<std::pair<int64_t, int64_t>> runs) {
  std::vector<int64_t> all;
  for (auto [first, count] : runs)
    for (int64_t i = 0; i < count; ++i)
      all.push_back(first + i);
  return all;
}

/// The operands q, kt, v of `z`, seeded from `seed`.
std::vector<HostTensor> operands(const Sizes &z, uint32_t seed) {
  return {uniform(z.with(z.s, z.d), seed), uniform(z.with(z.d, z.t), seed + 1),
          uniform(z.with(z.t, z.e), seed + 2)};
}

/// The forward in double: softmax over each query's visible keys of
/// scale q kt, times v; a query that sees no key gets zeros.
HostTensor reference(const Sizes &z, const std::vector<HostTensor> &x) {
  AttentionShape a = z.geometry();
  std::vector<float> out(a.batch * a.s * a.e, 0.f);
  std::vector<double> p(a.t);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.s; ++i) {
      int64_t n = a.visibleKeys(i);
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < a.d; ++k)
          dot += x[0].at((b * a.s + i) * a.d + k) *
                 x[1].at((b * a.d + k) * a.t + j);
        p[j] = z.scale() * dot;
        max = std::max(max, p[j]);
      }
      for (int64_t j = 0; j < n; ++j)
        sum += p[j] = std::exp(p[j] - max);
      for (int64_t c = 0; c < a.e; ++c) {
        double y = 0;
        for (int64_t j = 0; j < n; ++j)
          y += p[j] / sum * x[2].at((b * a.t + j) * a.e + c);
        out[(b * a.s + i) * a.e + c] = static_cast<float>(y);
      }
    }
  return floats(z.with(z.s, z.e), out);
}

Case attention(const std::string &name, const Sizes &z, uint32_t seed) {
  Build b(name, "attention");
  for (HostTensor &x : operands(z, seed))
    b.in(std::move(x));
  if (!z.positions.empty())
    b.in(z.positionsOperand());
  b.out(z.with(z.s, z.e)).f("scale", z.scale()).tol(kReduction);
  if (z.causal)
    b.i("causal", 1);
  return b;
}

/// Operands q, kt, v, the true forward result and a random result_grad.
Case attentionGrad(const std::string &name, const Sizes &z, uint32_t seed) {
  Build b(name, "attention_grad");
  std::vector<HostTensor> x = operands(z, seed);
  HostTensor result = reference(z, x);
  for (HostTensor &operand : x)
    b.in(std::move(operand));
  b.in(result).in(uniform(z.with(z.s, z.e), seed + 3));
  if (!z.positions.empty())
    b.in(z.positionsOperand());
  b.out(z.with(z.s, z.d)).out(z.with(z.d, z.t)).out(z.with(z.t, z.e));
  b.f("scale", z.scale()).tol(kReduction);
  if (z.causal)
    b.i("causal", 1);
  return b;
}

// Invariants, checked on the CPU's results (Runner.h). Each compares sums
// of at most ~20 terms of magnitude <= 1: 1e-5 leaves a wide margin.

/// Causal with t = s: query 0 sees key 0 alone, so row 0 of each leading
/// index is v's row 0.
void firstRowIsFirstValue(const std::vector<HostTensor> &operands,
                          const std::vector<HostTensor> &results) {
  const HostTensor &v = operands[2], &out = results[0];
  int64_t s = out.shape[out.shape.size() - 2], e = out.shape.back();
  int64_t t = v.shape[v.shape.size() - 2];
  for (int64_t b = 0; b < out.size() / (s * e); ++b)
    for (int64_t c = 0; c < e; ++c)
      EXPECT_NEAR(out.at(b * s * e + c), v.at(b * t * e + c), 1e-6)
          << "leading index " << b << " column " << c;
}

/// Causal with t < s: the first s - t queries see no key: zero rows (of
/// the output, or of dq).
void keylessRowsAreZero(const std::vector<HostTensor> &operands,
                        const std::vector<HostTensor> &results) {
  const HostTensor &q = operands[0], &kt = operands[1], &rows = results[0];
  int64_t s = q.shape[q.shape.size() - 2], t = kt.shape.back();
  int64_t width = rows.shape.back();
  for (int64_t b = 0; b < rows.size() / (s * width); ++b)
    for (int64_t i = 0; i < s - t; ++i)
      for (int64_t c = 0; c < width; ++c)
        EXPECT_EQ(rows.at((b * s + i) * width + c), 0.0)
            << "leading index " << b << " query " << i;
}

/// Every query of the case sees a key. Then dv's rows sum to dout's (each
/// query's probabilities sum to 1), and kt_grad's rows sum to 0 over the
/// keys (softmax ignores a shift of a query's scores, so its score
/// gradients sum to 0).
void gradientSums(const std::vector<HostTensor> &operands,
                  const std::vector<HostTensor> &results) {
  const HostTensor &dout = operands[4], &dkt = results[1], &dv = results[2];
  int64_t s = dout.shape[dout.shape.size() - 2], e = dout.shape.back();
  int64_t t = dv.shape[dv.shape.size() - 2],
          d = dkt.shape[dkt.shape.size() - 2];
  for (int64_t b = 0; b < dv.size() / (t * e); ++b) {
    for (int64_t c = 0; c < e; ++c) {
      double keys = 0, queries = 0;
      for (int64_t j = 0; j < t; ++j)
        keys += dv.at((b * t + j) * e + c);
      for (int64_t i = 0; i < s; ++i)
        queries += dout.at((b * s + i) * e + c);
      EXPECT_NEAR(keys, queries, 1e-5) << "leading index " << b << " dv " << c;
    }
    for (int64_t k = 0; k < d; ++k) {
      double sum = 0;
      for (int64_t j = 0; j < t; ++j)
        sum += dkt.at((b * d + k) * t + j);
      EXPECT_NEAR(sum, 0.0, 1e-5) << "leading index " << b << " dkt " << k;
    }
  }
}

} // namespace

std::vector<Case> attentionCases() {
  // Batch 2, 3 heads, 5 queries and keys, head dim 4.
  const Sizes odd{{2, 3}, 5, 5, 4, 4, false};
  const Sizes oddCausal{{2, 3}, 5, 5, 4, 4, true};
  // The first 4 queries see no key; d != e.
  const Sizes fewerKeys{{2}, 7, 3, 4, 6, true};
  // A cached prefix: query 0 sees 5 keys.
  const Sizes moreKeys{{2}, 3, 7, 6, 4, true};
  // Three tiles each way, the last of 2 rows.
  const Sizes tiles{{1, 2}, 130, 130, 64, 64, true};
  // The 128 kernels: one leading index; d != e across the 64 boundary.
  const Sizes wide{{}, 70, 90, 128, 128, false};
  const Sizes wideMixed{{1}, 66, 65, 40, 100, true};
  // 128 leading indices of one tile each.
  const Sizes heads{{8, 16}, 9, 9, 8, 8, true};
  // Context parallelism's share of the queries against every key: 5
  // queries at keys 4..8 of 12; 70 queries at 35..104 of 140 (tiles that
  // straddle the offset and keys past the last query); a rank's two
  // mirrored chunks (the balanced layout): 6 queries at 0..2 and 9..11 of
  // 12, 70 at 0..34 and 105..139 of 140.
  const Sizes placed{{2, 3}, 5, 12, 4, 4, true, places({{4, 5}})};
  const Sizes placedTiles{{1, 2}, 70, 140, 64, 64, true, places({{35, 70}})};
  const Sizes mirrored{{2, 3}, 6, 12, 4, 4, true, places({{0, 3}, {9, 3}})};
  const Sizes mirroredTiles{
      {1, 2}, 70, 140, 64, 64, true, places({{0, 35}, {105, 35}})};
  std::vector<Case> cases = {
      attention("attention", odd, 901),
      attention("attention_causal", oddCausal, 905),
      attention("attention_causal_fewer_keys", fewerKeys, 909),
      attention("attention_causal_more_keys", moreKeys, 913),
      attention("attention_causal_tiles", tiles, 917),
      attention("attention_head_dim_128", wide, 921),
      attention("attention_causal_mixed_head_dims", wideMixed, 925),
      attention("attention_causal_many_heads", heads, 929),
      attentionGrad("attention_grad", odd, 931),
      attentionGrad("attention_grad_causal", oddCausal, 935),
      attentionGrad("attention_grad_causal_fewer_keys", fewerKeys, 939),
      attentionGrad("attention_grad_causal_more_keys", moreKeys, 943),
      attentionGrad("attention_grad_causal_tiles", tiles, 947),
      attentionGrad("attention_grad_head_dim_128", wide, 951),
      attentionGrad("attention_grad_causal_mixed_head_dims", wideMixed, 955),
      attentionGrad("attention_grad_causal_many_heads", heads, 959),
      attention("attention_causal_positions", placed, 961),
      attention("attention_causal_positions_tiles", placedTiles, 965),
      attentionGrad("attention_grad_causal_positions", placed, 969),
      attentionGrad("attention_grad_causal_positions_tiles", placedTiles, 973),
      attention("attention_causal_mirrored", mirrored, 977),
      attention("attention_causal_mirrored_tiles", mirroredTiles, 981),
      attentionGrad("attention_grad_causal_mirrored", mirrored, 985),
      attentionGrad("attention_grad_causal_mirrored_tiles", mirroredTiles, 989),
  };
  for (Case &c : cases) {
    if (c.name == "attention_causal")
      c.invariant = firstRowIsFirstValue;
    if (c.name == "attention_causal_fewer_keys" ||
        c.name == "attention_grad_causal_fewer_keys")
      c.invariant = keylessRowsAreZero;
    if (c.name == "attention_grad_causal")
      c.invariant = gradientSums;
  }
  return cases;
}

} // namespace bmrt::conformance
