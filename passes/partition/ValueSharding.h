//===- ValueSharding.h - a value's sharding while partitioning --*- C++ -*-===//
//
// The partitioner's working form of #bm.sharding: for each dim the mesh
// axes splitting it (major to minor), and the axes over which the value is
// a partial sum. Plain data, so that propagation and the choice of
// collectives are easy to follow and to test.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PASSES_PARTITION_VALUESHARDING_H
#define BM_PASSES_PARTITION_VALUESHARDING_H

#include "bm/BmAttrs.h"

#include "mlir/IR/BuiltinTypes.h"

#include <string>
#include <vector>

namespace mlir::bm {

using AxisList = std::vector<std::string>;

struct ValueSharding {
  std::vector<AxisList> dims;
  AxisList partial;

  static ValueSharding replicated(int64_t rank);
  static ValueSharding fromAttr(ShardingAttr attr);
  ShardingAttr toAttr(MLIRContext *context, FlatSymbolRefAttr mesh) const;

  /// The same split with no partial axes: what the gradient of this value
  /// looks like (the gradient of a partial sum is whole on every device).
  ValueSharding withoutPartial() const;
  bool isPartial() const { return !partial.empty(); }
  bool operator==(const ValueSharding &other) const {
    return dims == other.dims && partial == other.partial;
  }
  bool operator!=(const ValueSharding &other) const {
    return !(*this == other);
  }
  /// "[{dp}, {}, {tp}] partial={tp}", for messages.
  std::string str() const;
};

/// The number of devices along `axes` of `mesh`.
int64_t groupSize(MeshAttr mesh, const AxisList &axes);

/// The shape each device holds of `global` under `sharding`.
RankedTensorType localType(RankedTensorType global,
                           const ValueSharding &sharding, MeshAttr mesh);

} // namespace mlir::bm

#endif // BM_PASSES_PARTITION_VALUESHARDING_H
