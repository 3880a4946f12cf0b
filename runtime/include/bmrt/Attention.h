//===- Attention.h - the geometry of fused attention -------------*- C++
//-*-===//
//
// Shared by every backend's attention kernels and the program verifier:
// attention(q [..., s, d], kt [..., d, t], v [..., t, e]) -> [..., s, e]
// is softmax(scale * q kt + mask) v for each of `batch` leading indices,
// where under a causal mask query i sees keys j <= i + offset: offset
// t - s by default (the last query sees every key, as in a decoder
// continuing a cached prefix), or the first of the op's positions (its
// queries' consecutive places among the keys, where context parallelism
// has split the queries and gathered the keys).
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
  /// The place of query 0 among the keys (see above); t - s unless the
  /// op's positions say otherwise.
  int64_t offset = t - s;
  /// Where a device kernel reads the offset instead (the op's positions,
  /// in device memory), or null: kernels launched before the positions
  /// are known on the host read their first element themselves.
  const int64_t *positions = nullptr;

  /// How many keys query i sees: a prefix of the keys, [0, visibleKeys(i)).
  int64_t visibleKeys(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + offset + 1, 0, t) : t;
  }
  /// The first query that sees key j (queries from there on all see it).
  int64_t firstQuery(int64_t j) const {
    return causal ? std::clamp<int64_t>(j - offset, 0, s) : 0;
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
  a.offset = a.t - a.s;
  return a;
}

} // namespace bmrt

#endif // BMRT_ATTENTION_H
