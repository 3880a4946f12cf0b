//===- ContextLayout.h - the mirrored order of a split sequence -*- C++ -*-===//
//
// Context parallelism with mirrored chunks (Megatron-Core's load balancing
// of causal attention): a sequence of S positions is cut into 2 cp chunks
// and rank r holds chunks r and 2cp - 1 - r, so that each rank's queries
// see as many keys as any other's. bmc lays the whole sequence out in that
// order, rank by rank, so that each rank's share is one block: the feeder
// writes the inputs and labels in it, and bm-annotate reorders every table
// of positions (position ids, rotary tables, masks, attention positions)
// alike and puts the gathered keys back in natural order. One definition
// for both.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CONTEXTLAYOUT_H
#define BMRT_CONTEXTLAYOUT_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bmrt {

/// order[p]: the natural position at place p of the mirrored layout of
/// `length` positions over `cp` ranks (length divisible by 2 cp).
inline std::vector<int64_t> mirroredOrder(int64_t length, int64_t cp) {
  const int64_t chunk = length / (2 * cp);
  std::vector<int64_t> order;
  order.reserve(length);
  for (int64_t rank = 0; rank < cp; ++rank)
    for (int64_t c : {rank, 2 * cp - 1 - rank})
      for (int64_t i = 0; i < chunk; ++i)
        order.push_back(c * chunk + i);
  return order;
}

/// The inverse: inverse[natural position] = its place in the layout.
inline std::vector<int64_t> inverseOrder(const std::vector<int64_t> &order) {
  std::vector<int64_t> inverse(order.size());
  for (std::size_t p = 0; p < order.size(); ++p)
    inverse[order[p]] = static_cast<int64_t>(p);
  return inverse;
}

} // namespace bmrt

#endif // BMRT_CONTEXTLAYOUT_H
