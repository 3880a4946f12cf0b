//===- Transpose.cpp - a transpose simplified to fewer dims ---------------===//

#include "bmrt/Transpose.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace bmrt {
namespace {

using Run = std::pair<int64_t, int64_t>;

/// Runs of consecutive input dims that are not 1, in output order:
/// [first, last].
std::vector<Run> runsOf(const Shape &in, const std::vector<int64_t> &perm) {
  std::vector<Run> runs;
  for (int64_t d : perm) {
    if (in[d] == 1)
      continue;
    if (!runs.empty() && runs.back().second + 1 == d)
      runs.back().second = d;
    else
      runs.push_back({d, d});
  }
  return runs;
}

/// Where the merged input dims land in the output.
void placeOutput(TransposePlan &plan) {
  Shape inStrides = contiguousStrides(plan.inDims);
  int64_t rank = plan.rank();
  plan.outDims.resize(rank);
  plan.inStrideOfOut.resize(rank);
  for (int64_t d = 0; d < rank; ++d) {
    plan.outDims[d] = plan.inDims[plan.perm[d]];
    plan.inStrideOfOut[d] = inStrides[plan.perm[d]];
  }
}

} // namespace

TransposePlan simplifyTranspose(const Shape &in,
                                const std::vector<int64_t> &perm) {
  std::vector<Run> runs = runsOf(in, perm);
  // Number the runs in input order; the runs partition the non-1 dims.
  std::vector<size_t> byInput(runs.size());
  std::iota(byInput.begin(), byInput.end(), 0);
  std::sort(byInput.begin(), byInput.end(),
            [&](size_t a, size_t b) { return runs[a].first < runs[b].first; });
  TransposePlan plan;
  plan.perm.resize(runs.size());
  for (size_t merged = 0; merged < byInput.size(); ++merged) {
    auto [first, last] = runs[byInput[merged]];
    int64_t size = 1;
    for (int64_t d = first; d <= last; ++d)
      size *= in[d];
    plan.inDims.push_back(size);
    plan.perm[byInput[merged]] = static_cast<int64_t>(merged);
  }
  placeOutput(plan);
  return plan;
}

} // namespace bmrt
