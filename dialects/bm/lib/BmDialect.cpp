//===- BmDialect.cpp - the bm dialect -------------------------------------===//

#include "bm/BmDialect.h"
#include "bm/BmAttrs.h"
#include "bm/BmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::bm;

#include "bm/BmDialect.cpp.inc"

void BmDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "bm/BmOps.cpp.inc"
      >();
  registerAttributes();
}

/// Checks `bm.sharding` (one #bm.sharding per result, against the result
/// types and the mesh each names) wherever it appears on an op.
LogicalResult BmDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  if (attr.getName() == kLayerAttrName ||
      attr.getName() == kBlockClassAttrName ||
      attr.getName() == kStageAttrName) {
    if (!isa<IntegerAttr>(attr.getValue()))
      return op->emitOpError()
             << "'" << attr.getName().getValue() << "' must be an integer, got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() != kShardingAttrName)
    return success();
  auto shardings = dyn_cast<ArrayAttr>(attr.getValue());
  if (!shardings)
    return op->emitOpError() << "'" << kShardingAttrName
                             << "' must be an array of #bm.sharding, got "
                             << attr.getValue();
  if (shardings.size() != op->getNumResults())
    return op->emitOpError() << "has " << shardings.size()
                             << " shardings for " << op->getNumResults()
                             << " results";
  for (auto [index, element] : llvm::enumerate(shardings)) {
    auto sharding = dyn_cast<ShardingAttr>(element);
    if (!sharding)
      return op->emitOpError() << "sharding #" << index
                               << " is not a #bm.sharding: " << element;
    auto meshOp = SymbolTable::lookupNearestSymbolFrom<MeshOp>(
        op, sharding.getMesh());
    if (!meshOp)
      return op->emitOpError() << "sharding #" << index
                               << " names unknown mesh "
                               << sharding.getMesh();
    if (failed(sharding.verifyFor(op->getResult(index).getType(),
                                  meshOp.getMesh(), [&] {
                                    return op->emitOpError()
                                           << "result #" << index << ": ";
                                  })))
      return failure();
  }
  return success();
}
