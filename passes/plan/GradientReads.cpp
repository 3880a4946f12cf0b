//===- GradientReads.cpp - what an op's gradient rule reads ---------------===//

#include "passes/plan/GradientReads.h"

#include "bm/BmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <memory>
#include <mutex>

using namespace mlir;

namespace bm::plan {

/// The forward values (as operand / result positions of `op`) each op built
/// into `block` reads, directly or through the ops before it in the block.
static llvm::DenseMap<Operation *, std::vector<bool>>
readsOfBuiltOps(Operation &op, Block &block) {
  const size_t n = op.getNumOperands(), width = n + op.getNumResults();
  llvm::DenseMap<Value, size_t> position;
  for (auto [i, v] : llvm::enumerate(op.getOperands()))
    position.try_emplace(v, i);
  for (auto [r, v] : llvm::enumerate(op.getResults()))
    position.try_emplace(v, n + r);
  llvm::DenseMap<Operation *, std::vector<bool>> reads;
  for (Operation &built : block) {
    std::vector<bool> mine(width, false);
    for (Value used : built.getOperands()) {
      if (auto it = position.find(used); it != position.end())
        mine[it->second] = true;
      else if (Operation *def = used.getDefiningOp();
               def && def->getBlock() == &block)
        for (size_t k = 0; k < width; ++k)
          mine[k] = mine[k] || reads[def][k];
    }
    reads[&built] = std::move(mine);
  }
  return reads;
}

/// Builds `op`'s gradients into a scratch block (the result gradients are
/// its arguments) and reads off what each operand's gradient needs.
static GradientReads buildAndRead(Operation &op) {
  const size_t n = op.getNumOperands(), width = n + op.getNumResults();
  auto block = std::make_unique<Block>();
  SmallVector<Value> dys;
  for (Value result : op.getResults())
    dys.push_back(block->addArgument(result.getType(), op.getLoc()));
  OpBuilder builder(op.getContext());
  builder.setInsertionPointToStart(block.get());
  SmallVector<Value> dxs;
  LogicalResult built = failure();
  {
    // A missing rule reports an error on the op: the planner does not
    // differentiate through it, so that is no error here.
    ScopedDiagnosticHandler quiet(op.getContext(),
                                  [](Diagnostic &) { return success(); });
    auto rule = dyn_cast<mlir::bm::GradientOpInterface>(op);
    built = rule ? rule.buildGradients(builder, dys, dxs)
                 : mlir::bm::buildGradientsFromRegistry(&op, builder, dys, dxs);
  }
  GradientReads out;
  if (succeeded(built)) {
    auto reads = readsOfBuiltOps(op, *block);
    out.assign(n, std::vector<bool>(width, false));
    for (size_t j = 0; j < n && j < dxs.size(); ++j) {
      if (!dxs[j])
        continue;
      if (Operation *def = dxs[j].getDefiningOp(); def && reads.count(def))
        out[j] = reads[def];
    }
  }
  // Erase what was built, last first, so that no use of a forward value
  // remains.
  while (!block->empty()) {
    Operation &last = block->back();
    last.dropAllUses();
    last.erase();
  }
  return out;
}

/// Rules read by position: ops of one name with the same arity and the same
/// float operands build the same reads, so each kind is built once.
static std::string kindOf(Operation &op) {
  std::string key = op.getName().getStringRef().str();
  key += "/" + std::to_string(op.getNumOperands()) + "/" +
         std::to_string(op.getNumResults()) + "/";
  for (Value v : op.getOperands())
    key += isa<FloatType>(getElementTypeOrSelf(v.getType())) ? 'f' : 'i';
  return key;
}

GradientReads gradientReadsOf(Operation &op) {
  static std::mutex mutex;
  static llvm::StringMap<GradientReads> cache;
  std::string key = kindOf(op);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end())
      return it->second;
  }
  GradientReads reads = buildAndRead(op);
  std::lock_guard<std::mutex> lock(mutex);
  cache.try_emplace(key, reads);
  return reads;
}

} // namespace bm::plan
