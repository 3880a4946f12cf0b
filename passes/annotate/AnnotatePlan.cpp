//===- AnnotatePlan.cpp - write a plan into bm IR -------------------------===//

#include "passes/annotate/AnnotatePlan.h"

#include "bm/BmOps.h"
#include "passes/Passes.h"
#include "passes/plan/PlanOutput.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;

namespace bm::plan {

static constexpr llvm::StringLiteral kMeshName = "mesh";
static constexpr llvm::StringLiteral kStageAttrName = "bm.stage";

static Attribute toShardingAttr(Builder &b, const TensorSharding &tensor) {
  SmallVector<Attribute> dims;
  for (const std::vector<std::string> &axes : tensor.dims) {
    SmallVector<Attribute> names;
    for (const std::string &axis : axes)
      names.push_back(b.getStringAttr(axis));
    dims.push_back(b.getArrayAttr(names));
  }
  SmallVector<Attribute> partial;
  for (const std::string &axis : tensor.partialAxes)
    partial.push_back(b.getStringAttr(axis));
  return mlir::bm::ShardingAttr::get(
      b.getContext(), FlatSymbolRefAttr::get(b.getContext(), kMeshName),
      b.getArrayAttr(dims), b.getArrayAttr(partial));
}

/// Pipeline stage of each layer, from the plan's layers per (virtual)
/// stage; virtual stage k runs on device stage k % pp.
static std::vector<int> stageOfLayers(const Plan &plan) {
  std::vector<int> stages;
  int pp = std::max(1, plan.config.pp);
  for (auto [virtualStage, count] : llvm::enumerate(plan.layersPerStage))
    stages.insert(stages.end(), count, static_cast<int>(virtualStage) % pp);
  return stages;
}

llvm::Error annotatePlan(ModuleOp module, func::FuncOp func,
                         const Plan &plan) {
  Builder b(module.getContext());
  Block &body = func.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);

  // First op of each layer, to place each instance's ops.
  DenseMap<int64_t, int64_t> firstOfLayer;
  auto layerOf = [&](Operation *op) -> int64_t {
    auto attr =
        op->getAttrOfType<IntegerAttr>(mlir::bm::BmDialect::kLayerAttrName);
    return attr ? attr.getInt() : -1;
  };
  for (auto [i, op] : llvm::enumerate(ops))
    if (int64_t layer = layerOf(op); layer >= 0)
      firstOfLayer.try_emplace(layer, static_cast<int64_t>(i));

  // Which OpSharding each op takes: the op itself, or the same position in
  // its block class's representative instance.
  DenseMap<int64_t, const OpSharding *> direct;
  DenseMap<std::pair<int64_t, int64_t>, const OpSharding *> byClassPosition;
  for (const BlockSharding &block : plan.blocks)
    for (const OpSharding &op : block.ops) {
      if (op.op < 0 || op.op >= static_cast<int>(ops.size()))
        return llvm::createStringError(
            "the plan names op " + std::to_string(op.op) +
            " but the model has " + std::to_string(ops.size()) +
            " ops: it was made for another model");
      if (block.blockClass < 0) {
        direct[op.op] = &op;
        continue;
      }
      int64_t layer = layerOf(ops[op.op]);
      if (layer < 0)
        return llvm::createStringError(
            "the plan puts op " + std::to_string(op.op) + " in block class " +
            std::to_string(block.blockClass) +
            " but it is in no layer of this model");
      byClassPosition[{block.blockClass, op.op - firstOfLayer[layer]}] = &op;
    }

  std::vector<int> stages = stageOfLayers(plan);
  int lastStage = std::max(1, plan.config.pp) - 1;
  bool seenLayer = false;
  for (auto [i, op] : llvm::enumerate(ops)) {
    int64_t layer = layerOf(op);
    const OpSharding *sharding = nullptr;
    if (layer < 0) {
      sharding = direct.lookup(static_cast<int64_t>(i));
    } else {
      auto cls = op->getAttrOfType<IntegerAttr>(
          mlir::bm::BmDialect::kBlockClassAttrName);
      sharding = byClassPosition.lookup(
          {cls.getInt(), static_cast<int64_t>(i) - firstOfLayer[layer]});
    }
    if (sharding) {
      if (sharding->results.size() != op->getNumResults())
        return llvm::createStringError(
            "the plan gives " + std::to_string(sharding->results.size()) +
            " result shardings to op " + std::to_string(i) + " (" +
            op->getName().getStringRef().str() + ") which has " +
            std::to_string(op->getNumResults()));
      SmallVector<Attribute> results;
      for (const TensorSharding &result : sharding->results)
        results.push_back(toShardingAttr(b, result));
      op->setAttr(mlir::bm::BmDialect::kShardingAttrName,
                  b.getArrayAttr(results));
    }
    int stage = 0;
    if (layer >= 0) {
      seenLayer = true;
      stage = layer < static_cast<int64_t>(stages.size()) ? stages[layer]
                                                          : lastStage;
    } else if (seenLayer) {
      stage = lastStage;
    }
    op->setAttr(kStageAttrName, b.getI64IntegerAttr(stage));
  }

  // The mesh goes first in the module, replacing an earlier one.
  for (auto mesh : llvm::make_early_inc_range(module.getOps<mlir::bm::MeshOp>()))
    if (mesh.getSymName() == kMeshName)
      mesh.erase();
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  SmallVector<StringAttr> names = {b.getStringAttr(kDataAxis),
                                   b.getStringAttr(kTensorAxis),
                                   b.getStringAttr(kPipelineAxis)};
  SmallVector<int64_t> sizes = {plan.config.dp, plan.config.tp,
                                plan.config.pp};
  mlir::bm::MeshOp::create(
      builder, module.getLoc(), kMeshName,
      mlir::bm::MeshAttr::get(module.getContext(), names, sizes));
  return llvm::Error::success();
}

} // namespace bm::plan

namespace mlir::bm {
#define GEN_PASS_DEF_BMANNOTATEPASS
#include "passes/Passes.h.inc"

namespace {
struct AnnotatePass : impl::BmAnnotatePassBase<AnnotatePass> {
  using BmAnnotatePassBase::BmAnnotatePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError() << message;
      signalPassFailure();
    };
    auto buffer = llvm::MemoryBuffer::getFile(planFile);
    if (!buffer)
      return fail("cannot read plan '" + planFile +
                  "': " + buffer.getError().message());
    llvm::Expected<::bm::plan::Plan> plan =
        ::bm::plan::parsePlanJson((*buffer)->getBuffer());
    if (!plan)
      return fail("plan '" + planFile + "': " + toString(plan.takeError()));
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func)
      return fail("the module has no func.func @main to annotate");
    if (llvm::Error err = ::bm::plan::annotatePlan(module, func, *plan))
      return fail(toString(std::move(err)));
  }
};
} // namespace
} // namespace mlir::bm
