//===- InsertReshards.cpp - the plan's operand shardings made explicit ----===//
//
// Every operand of an op that the plan gives operand shardings
// (`bm.operand_sharding`, written by bm-annotate) is read through a
// bm.reshard to that sharding: where the producer's sharding differs, the
// reshard is the plan's forward collective; either way autodiff gives the
// edge a bm.reshard_grad, the plan's backward collective (the gradient goes
// back to the sharding its producer needs). Reshards that change nothing
// vanish in bm-partition.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMINSERTRESHARDSPASS
#include "passes/Passes.h.inc"

namespace {

/// The reshard joins the layer, block class and stage of the op it feeds,
/// so outlining keeps it in the layer's function.
void copyPlacement(Operation *from, Operation *to) {
  for (StringRef name : BmDialect::placementAttrNames())
    if (Attribute attr = from->getAttr(name))
      to->setAttr(name, attr);
}

struct InsertReshardsPass
    : impl::BmInsertReshardsPassBase<InsertReshardsPass> {
  void runOnOperation() override {
    SmallVector<Operation *> planned;
    getOperation().walk([&](Operation *op) {
      if (op->hasAttr(BmDialect::kOperandShardingAttrName))
        planned.push_back(op);
    });
    for (Operation *op : planned) {
      auto wanted =
          op->getAttrOfType<ArrayAttr>(BmDialect::kOperandShardingAttrName);
      OpBuilder b(op);
      for (OpOperand &operand : op->getOpOperands()) {
        auto reshard = ReshardOp::create(
            b, op->getLoc(), operand.get(),
            cast<ShardingAttr>(wanted[operand.getOperandNumber()]));
        copyPlacement(op, reshard);
        operand.set(reshard);
      }
    }
  }
};

} // namespace
} // namespace mlir::bm
