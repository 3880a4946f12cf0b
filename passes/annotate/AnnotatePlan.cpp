//===- AnnotatePlan.cpp - write a plan into bm IR -------------------------===//

#include "passes/annotate/AnnotatePlan.h"

#include "bm/BmOps.h"
#include "passes/Passes.h"
#include "passes/plan/PlanOutput.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;

namespace bm::plan {

static constexpr llvm::StringLiteral kMeshName = "mesh";
static constexpr llvm::StringLiteral kStageAttrName = "bm.stage";


/// With expert parallelism the data-parallel ranks are a [dp/ep, ep] grid
/// (ep innermost, Plan.h): the plan's "dp" then means both axes, except in
/// a tensor that the plan splits over "ep" itself (the experts' dim), where
/// the batch is split over the outer "dp" only.
static Attribute toShardingAttr(Builder &b, const TensorSharding &tensor,
                                bool expertParallel) {
  bool usesExpertAxis = false;
  for (const std::vector<std::string> &axes : tensor.dims)
    usesExpertAxis |= llvm::is_contained(axes, kExpertAxis);
  SmallVector<Attribute> dims;
  for (const std::vector<std::string> &axes : tensor.dims) {
    SmallVector<Attribute> names;
    for (const std::string &axis : axes) {
      names.push_back(b.getStringAttr(axis));
      if (expertParallel && !usesExpertAxis && axis == kDataAxis)
        names.push_back(b.getStringAttr(kExpertAxis));
    }
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

/// Moves the data-parallel axes (dp, ep) of `tensor` from dimension `from`
/// to `to` (dropping them when `to` is -1).
static TensorSharding moveBatchAxes(TensorSharding tensor, int from, int to) {
  if (from < 0 || from >= static_cast<int>(tensor.dims.size()) ||
      to >= static_cast<int>(tensor.dims.size()))
    return tensor;
  std::vector<std::string> moved, kept;
  for (const std::string &axis : tensor.dims[from])
    (axis == kDataAxis || axis == kExpertAxis ? moved : kept).push_back(axis);
  tensor.dims[from] = kept;
  if (to >= 0)
    tensor.dims[to].insert(tensor.dims[to].begin(), moved.begin(), moved.end());
  return tensor;
}

llvm::Error annotatePlan(ModuleOp module, func::FuncOp func, const Plan &plan,
                         const ModelGraph *planned,
                         const ModelGraph *annotated) {
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

  const bool expertParallel = plan.config.ep > 1;
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
      for (auto [r, result] : llvm::enumerate(sharding->results)) {
        TensorSharding tensor = result;
        if (planned && annotated && i < planned->ops.size() &&
            i < annotated->ops.size() &&
            r < planned->ops[i].results.size() &&
            r < annotated->ops[i].results.size()) {
          int from = planned->values[planned->ops[i].results[r]].batchDim;
          int to = annotated->values[annotated->ops[i].results[r]].batchDim;
          if (from != to)
            tensor = moveBatchAxes(tensor, from, to);
        }
        results.push_back(toShardingAttr(b, tensor, expertParallel));
      }
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
  SmallVector<StringAttr> names = {b.getStringAttr(kDataAxis)};
  SmallVector<int64_t> sizes = {plan.config.dp};
  if (expertParallel) {
    sizes.back() = plan.config.dp / plan.config.ep;
    names.push_back(b.getStringAttr(kExpertAxis));
    sizes.push_back(plan.config.ep);
  }
  names.append({b.getStringAttr(kTensorAxis), b.getStringAttr(kPipelineAxis)});
  sizes.append({plan.config.tp, plan.config.pp});
  mlir::bm::MeshOp::create(
      builder, module.getLoc(), kMeshName,
      mlir::bm::MeshAttr::get(module.getContext(), names, sizes));

  // The shardings must hold against the mesh and the shapes; a plan made
  // for other shapes (another --seq, say) fails here, not downstream.
  std::string diagnostic;
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return success();
  });
  if (failed(verify(module)))
    return llvm::createStringError("the annotated model does not verify: " +
                                   diagnostic);
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
