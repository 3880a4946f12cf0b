//===- MeasuredCurves.cpp - lookups in a calibrated cluster's curves ------===//
//
// The semantics of the measured sections of a cluster file (issue 15,
// section B): between measured points the curves are interpolated, beyond
// them clamped (GEMM rates) or extended at the largest size's bus bandwidth
// (collectives). Nothing is extrapolated from a fitted model.
//
//===----------------------------------------------------------------------===//

#include "cost/CostModel.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

using namespace bm::cost;

GemmRateGrid bm::cost::makeGemmRateGrid(const std::vector<GemmPoint> &gemm) {
  GemmRateGrid grid;
  for (const GemmPoint &p : gemm) {
    grid.ms.push_back(p.m);
    grid.ns.push_back(p.n);
    grid.ks.push_back(p.k);
    grid.flopsPerSecond.push_back(p.flopsPerSecond);
  }
  for (std::vector<double> *sizes : {&grid.ms, &grid.ns, &grid.ks}) {
    llvm::sort(*sizes);
    sizes->erase(std::unique(sizes->begin(), sizes->end()), sizes->end());
  }
  return grid;
}

namespace {

/// Where x falls among ascending `sizes`, in log2: the grid points below
/// and above it and the weight of the upper one; clamped at the ends.
struct Bracket {
  size_t lower = 0, upper = 0;
  double weight = 0;
};

Bracket bracket(const std::vector<double> &sizes, double x) {
  Bracket b;
  if (x <= sizes.front())
    return b;
  if (x >= sizes.back()) {
    b.lower = b.upper = sizes.size() - 1;
    return b;
  }
  b.upper = std::upper_bound(sizes.begin(), sizes.end(), x) - sizes.begin();
  b.lower = b.upper - 1;
  b.weight = std::log2(x / sizes[b.lower]) /
             std::log2(sizes[b.upper] / sizes[b.lower]);
  return b;
}

} // namespace

double GemmRateGrid::rate(double m, double n, double k) const {
  Bracket bm = bracket(ms, m), bn = bracket(ns, n), bk = bracket(ks, k);
  double sum = 0;
  // The 8 corners of the cell, each weighted by its share in every dim.
  for (int corner = 0; corner < 8; ++corner) {
    bool hiM = corner & 4, hiN = corner & 2, hiK = corner & 1;
    double weight = (hiM ? bm.weight : 1 - bm.weight) *
                    (hiN ? bn.weight : 1 - bn.weight) *
                    (hiK ? bk.weight : 1 - bk.weight);
    if (weight == 0)
      continue;
    size_t i = hiM ? bm.upper : bm.lower, j = hiN ? bn.upper : bn.lower,
           l = hiK ? bk.upper : bk.lower;
    sum += weight * flopsPerSecond[(i * ns.size() + j) * ks.size() + l];
  }
  return sum;
}

// nccl-tests, doc/PERFORMANCE.md.
double bm::cost::busFactor(CollectiveKind kind, int ranks) {
  double n = std::max(ranks, 1);
  switch (kind) {
  case CollectiveKind::AllReduce:
    return 2 * (n - 1) / n;
  case CollectiveKind::SendRecv:
    return 1;
  case CollectiveKind::AllGather:
  case CollectiveKind::AllToAll:
  case CollectiveKind::ReduceScatter:
    return (n - 1) / n;
  }
  return 1;
}

double
bm::cost::interpolateCollectiveTime(llvm::ArrayRef<CollectivePoint> measured,
                                    double bytes) {
  const CollectivePoint &first = measured.front(), &last = measured.back();
  if (bytes <= first.bytes)
    return first.seconds;
  if (bytes >= last.bytes)
    return last.seconds + (bytes - last.bytes) *
                              busFactor(last.kind, last.ranks) /
                              last.busBandwidth;
  auto above = llvm::upper_bound(
      measured, bytes,
      [](double b, const CollectivePoint &p) { return b < p.bytes; });
  const CollectivePoint &hi = *above, &lo = *(above - 1);
  double t = std::log(bytes / lo.bytes) / std::log(hi.bytes / lo.bytes);
  return std::exp(std::log(lo.seconds) +
                  t * (std::log(hi.seconds) - std::log(lo.seconds)));
}
