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

/// Checks an array of #bm.sharding, one per value of `values` (an op's
/// results or operands), against the values' types and the mesh it names.
static LogicalResult verifyShardings(Operation *op, NamedAttribute attr,
                                     ValueRange values, StringRef what) {
  auto shardings = dyn_cast<ArrayAttr>(attr.getValue());
  if (!shardings)
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' must be an array of #bm.sharding, got "
                             << attr.getValue();
  if (shardings.size() != values.size())
    return op->emitOpError() << "has " << shardings.size() << " " << what
                             << " shardings for " << values.size() << " "
                             << what << "s";
  for (auto [index, element] : llvm::enumerate(shardings)) {
    auto sharding = dyn_cast<ShardingAttr>(element);
    if (!sharding)
      return op->emitOpError() << what << " sharding #" << index
                               << " is not a #bm.sharding: " << element;
    auto meshOp = SymbolTable::lookupNearestSymbolFrom<MeshOp>(
        op, sharding.getMesh());
    if (!meshOp)
      return op->emitOpError() << what << " sharding #" << index
                               << " names unknown mesh "
                               << sharding.getMesh();
    if (failed(sharding.verifyFor(values[index].getType(), meshOp.getMesh(),
                                  [&] {
                                    return op->emitOpError()
                                           << what << " #" << index << ": ";
                                  })))
      return failure();
  }
  return success();
}

/// Checks `bm.sharding` (one #bm.sharding per result) and
/// `bm.operand_sharding` (one per operand) wherever they appear on an op.
LogicalResult BmDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  if (attr.getName() == kLayerAttrName ||
      attr.getName() == kBlockClassAttrName ||
      attr.getName() == kStageAttrName ||
      attr.getName() == kVirtualStageAttrName) {
    if (!isa<IntegerAttr>(attr.getValue()))
      return op->emitOpError()
             << "'" << attr.getName().getValue() << "' must be an integer, got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() == kShardingAttrName)
    return verifyShardings(op, attr, op->getResults(), "result");
  if (attr.getName() == kOperandShardingAttrName)
    return verifyShardings(op, attr, op->getOperands(), "operand");
  return success();
}
