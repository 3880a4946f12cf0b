//===- Attention.h - the geometry of fused attention -------------*- C++
//-*-===//
//
// Shared by every backend's attention kernels and the program verifier:
// attention(q [..., s, d], kt [..., d, t], v [..., t, e]) -> [..., s, e]
// is softmax(scale * q kt + mask) v for each of `batch` leading indices,
// where under a causal mask query i sees keys j <= i + (t - s) (the last
// query sees every key, as in a decoder continuing a cached prefix).
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

  /// How many keys query i sees: a prefix of the keys, [0, visibleKeys(i)).
  int64_t visibleKeys(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + t - s + 1, 0, t) : t;
  }
  /// The first query that sees key j (queries from there on all see it).
  int64_t firstQuery(int64_t j) const {
    return causal ? std::clamp<int64_t>(j - (t - s), 0, s) : 0;
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
