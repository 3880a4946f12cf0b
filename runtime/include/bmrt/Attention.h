//===- Attention.h - the geometry of fused attention -------------*- C++
//-*-===//
//
// Shared by every backend's attention kernels and the program verifier:
// attention(q [..., s, d], kt [..., d, t], v [..., t, e]) -> [..., s, e]
// is softmax(scale * q kt + mask) v for each of `batch` leading indices,
// where under a causal mask query i sees keys j <= position(i): i + t - s
// by default (the last query sees every key, as in a decoder continuing a
// cached prefix), or the op's positions[i], non-decreasing (its queries'
// places among the keys, where context parallelism has split the queries
// and gathered the keys: one run of consecutive places, or two where each
// rank holds two mirrored chunks).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_ATTENTION_H
#define BMRT_ATTENTION_H

#include "bmrt/Tensor.h"

#include <algorithm>
#include <cstdint>

namespace bmrt {

struct AttentionShape {
  int64_t batch = 1; // the product of the leading dims
  int64_t s = 0, t = 0, d = 0, e = 0;
  bool causal = false;
  /// The op's positions, one per query, non-decreasing, or null. In host
  /// memory where the methods below read them (the CPU backend, the
  /// references); CUDA's kernels read them from device memory themselves.
  const int64_t *positions = nullptr;

  int64_t position(int64_t i) const {
    return positions ? positions[i] : i + t - s;
  }
  /// How many keys query i sees: a prefix of the keys, [0, visibleKeys(i)).
  int64_t visibleKeys(int64_t i) const {
    return causal ? std::clamp<int64_t>(position(i) + 1, 0, t) : t;
  }
  /// The first query that sees key j (queries from there on all see it,
  /// the positions being non-decreasing).
  int64_t firstQuery(int64_t j) const {
    if (!causal)
      return 0;
    if (!positions)
      return std::clamp<int64_t>(j - (t - s), 0, s);
    return std::lower_bound(positions, positions + s, j) - positions;
  }
};

/// The geometry of q, kt and v, which the verifier has checked (equal
/// leading dims, rank >= 2, matching inner dims).
inline AttentionShape attentionShape(const Shape &q, const Shape &kt,
                                     const Shape &v, bool causal) {
  AttentionShape a;
  size_t rank = q.size();
  for (size_t i = 0; i + 2 < rank; ++i)
    a.batch *= q[i];
  a.s = q[rank - 2];
  a.d = q[rank - 1];
  a.t = kt[rank - 1];
  a.e = v[rank - 1];
  a.causal = causal;
  return a;
}

} // namespace bmrt

#endif // BMRT_ATTENTION_H
