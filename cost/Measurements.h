//===- Measurements.h - a cluster from what bmrt-calibrate measured -*- C++ -*-===//
//
// `bmc calibrate` runs the runtime's `bmrt-calibrate` on the ranks it is
// given; that tool times the runtime's own kernels and communicator and
// writes JSON ("format": "bmrt-calibration-1"). This turns that JSON into
// the cluster description the planner reads (DESIGN.md section 4,
// "Calibration"): the flat analytic keys fitted from the measurements, and
// the measured curves that replace them where the cost model has a curve.
//
//===----------------------------------------------------------------------===//

#ifndef BM_COST_MEASUREMENTS_H
#define BM_COST_MEASUREMENTS_H

#include "cost/Cluster.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace bm::cost {

/// The cluster that `bmrt-calibrate`'s JSON `text` describes; `source`
/// names it in error messages. One rank per device: `gpus_per_node` is the
/// ranks each host ran.
llvm::Expected<Cluster> clusterFromMeasurements(llvm::StringRef text,
                                                llvm::StringRef source);

} // namespace bm::cost

#endif // BM_COST_MEASUREMENTS_H
