//===- Annotate.cpp - write a plan into bm IR (bm-annotate) ---------------===//

#include "passes/annotate/Annotate.h"

#include "passes/annotate/ContextLayout.h"

#include "bm/BmOps.h"
#include "bm/FirstDiagnostic.h"
#include "passes/Passes.h"
#include "passes/plan/PlanOutput.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <map>

using namespace mlir;

namespace bm::plan {

static constexpr llvm::StringLiteral kMeshName = "mesh";

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

/// Virtual pipeline stage of each layer, from the plan's layers per
/// (virtual) stage; virtual stage k runs on device stage k % pp.
static std::vector<int> stageOfLayers(const Plan &plan) {
  std::vector<int> stages;
  for (auto [virtualStage, count] : llvm::enumerate(plan.layersPerStage))
    stages.insert(stages.end(), count, static_cast<int>(virtualStage));
  return stages;
}

/// Moves the data-parallel axes (dp, ep, tp2) of `tensor` from dimension `from`
/// to `to` (dropping them when `to` is -1).
static TensorSharding moveBatchAxes(TensorSharding tensor, int from, int to) {
  if (from < 0 || from >= static_cast<int>(tensor.dims.size()) ||
      to >= static_cast<int>(tensor.dims.size()))
    return tensor;
  std::vector<std::string> moved, kept;
  for (const std::string &axis : tensor.dims[from])
    (axis == kDataAxis || axis == kExpertAxis || axis == kTensor2Axis ? moved
                                                                      : kept)
        .push_back(axis);
  tensor.dims[from] = kept;
  if (to >= 0)
    tensor.dims[to].insert(tensor.dims[to].begin(), moved.begin(), moved.end());
  return tensor;
}

/// Data parallel on `batchDim` where dp divides it (and over tp2 too where
/// dp x tp2 does, as planned ops split their samples), else replicated.
static TensorSharding dataParallelSharding(RankedTensorType type, int batchDim,
                                           int dp, int tp2) {
  TensorSharding tensor;
  tensor.dims.assign(type.getRank(), {});
  if (batchDim < 0 || type.getDimSize(batchDim) % dp != 0)
    return tensor;
  tensor.dims[batchDim] = {kDataAxis};
  if (tp2 > 1 && type.getDimSize(batchDim) % (dp * tp2) == 0)
    tensor.dims[batchDim].push_back(kTensor2Axis);
  return tensor;
}

/// The layer and block class (-1 outside layers) and the op name of each op
/// of the model a plan was searched on.
struct PlannedOps {
  std::vector<int64_t> layer, blockClass;
  std::vector<std::string> opName;
};

static PlannedOps plannedOpsOf(const ModelGraph &graph) {
  PlannedOps ops;
  for (const OpInfo &op : graph.ops) {
    ops.layer.push_back(op.layer);
    ops.blockClass.push_back(op.layer >= 0 ? graph.layerClass[op.layer] : -1);
    ops.opName.push_back(op.opName);
  }
  return ops;
}

static PlannedOps plannedOpsOf(ArrayRef<Operation *> ops) {
  PlannedOps planned;
  for (Operation *op : ops) {
    auto layer =
        op->getAttrOfType<IntegerAttr>(mlir::bm::BmDialect::kLayerAttrName);
    auto cls = op->getAttrOfType<IntegerAttr>(
        mlir::bm::BmDialect::kBlockClassAttrName);
    planned.layer.push_back(layer ? layer.getInt() : -1);
    planned.blockClass.push_back(layer && cls ? cls.getInt() : -1);
    planned.opName.push_back(op->getName().getStringRef().str());
  }
  return planned;
}

/// The OpSharding the plan gives each planned op: its own, or, in a layer,
/// the one at the same position of its block class's searched instance.
static llvm::Expected<std::vector<const OpSharding *>>
resolvePlan(const Plan &plan, const PlannedOps &ops) {
  const int64_t numOps = static_cast<int64_t>(ops.layer.size());
  DenseMap<int64_t, int64_t> firstOfLayer;
  for (int64_t i = 0; i < numOps; ++i)
    if (ops.layer[i] >= 0)
      firstOfLayer.try_emplace(ops.layer[i], i);
  std::vector<const OpSharding *> resolved(numOps, nullptr);
  DenseMap<std::pair<int64_t, int64_t>, const OpSharding *> byClassPosition;
  for (const BlockSharding &block : plan.blocks)
    for (const OpSharding &op : block.ops) {
      if (op.op < 0 || op.op >= numOps)
        return llvm::createStringError(
            "the plan names op " + std::to_string(op.op) +
            " but the model has " + std::to_string(numOps) +
            " ops: it was made for another model");
      if (ops.opName[op.op] != op.opName)
        return llvm::createStringError(
            "the plan's op " + std::to_string(op.op) + " is " + op.opName +
            " ('" + op.label + "') but the model's is " + ops.opName[op.op] +
            ": it was made for another model");
      if (block.blockClass < 0) {
        resolved[op.op] = &op;
        continue;
      }
      int64_t layer = ops.layer[op.op];
      if (layer < 0)
        return llvm::createStringError(
            "the plan puts op " + std::to_string(op.op) + " in block class " +
            std::to_string(block.blockClass) +
            " but it is in no layer of this model");
      byClassPosition[{block.blockClass, op.op - firstOfLayer[layer]}] = &op;
    }
  for (int64_t i = 0; i < numOps; ++i)
    if (ops.layer[i] >= 0)
      resolved[i] = byClassPosition.lookup(
          {ops.blockClass[i], i - firstOfLayer[ops.layer[i]]});
  return resolved;
}

/// The (virtual) pipeline stage of each planned op: its layer's stage; ops
/// before the first layer on stage 0, after the last on the last stage,
/// and ops between two layers (interludes) with the layer before them.
static std::vector<int> stagesOf(const Plan &plan, const PlannedOps &ops) {
  std::vector<int> layerStage = stageOfLayers(plan);
  const int lastStage =
      std::max<int>(plan.config.pp, plan.layersPerStage.size()) - 1;
  const int64_t lastLayer =
      ops.layer.empty() ? -1
                        : *std::max_element(ops.layer.begin(), ops.layer.end());
  auto stageOf = [&](int64_t layer) {
    return layer < static_cast<int64_t>(layerStage.size()) ? layerStage[layer]
                                                           : lastStage;
  };
  std::vector<int> stages;
  int64_t previousLayer = -1;
  for (int64_t layer : ops.layer) {
    if (layer >= 0) {
      previousLayer = layer;
      stages.push_back(stageOf(layer));
    } else if (previousLayer < 0) {
      stages.push_back(0);
    } else {
      stages.push_back(previousLayer == lastLayer ? lastStage
                                                  : stageOf(previousLayer));
    }
  }
  return stages;
}

static const std::vector<int> &resultsOf(const OpInfo &op) {
  return op.results;
}
static const std::vector<int> &operandsOf(const OpInfo &op) {
  return op.operands;
}

/// Each argument of `func` is stored in the sharding its first planned
/// reader asks for (a parameter: its owner's; the tokens: split over dp),
/// so that reader needs no reshard.
static void annotateArguments(func::FuncOp func) {
  MLIRContext *context = func.getContext();
  llvm::DenseSet<unsigned> done;
  func.walk([&](Operation *op) {
    auto operands = op->getAttrOfType<ArrayAttr>(
        mlir::bm::BmDialect::kOperandShardingAttrName);
    if (!operands)
      return;
    for (OpOperand &use : op->getOpOperands()) {
      auto arg = dyn_cast<BlockArgument>(use.get());
      if (!arg || !done.insert(arg.getArgNumber()).second)
        continue;
      auto wanted =
          cast<mlir::bm::ShardingAttr>(operands[use.getOperandNumber()]);
      func.setArgAttr(arg.getArgNumber(),
                      mlir::bm::BmDialect::kShardingAttrName,
                      mlir::bm::ShardingAttr::get(context, wanted.getMesh(),
                                                  wanted.getDims(),
                                                  ArrayAttr::get(context, {})));
    }
  });
}

/// 2-D tensor parallelism stores each parameter split over tp2 too, along
/// the dimension tensor2Dim picks (the planner prices the same one): its
/// readers, which want it whole along that dimension, then gather it (the
/// partitioner's reshards: SUMMA's broadcasts along the grid's rows, as
/// one all-gather) and its gradient is reduce-scattered back.
static void splitParameterRows(func::FuncOp func, int tp2) {
  MLIRContext *context = func.getContext();
  for (BlockArgument arg : func.getArguments()) {
    unsigned index = arg.getArgNumber();
    auto kind = func.getArgAttrOfType<StringAttr>(
        index, mlir::bm::BmDialect::kParamKindAttrName);
    auto stored = func.getArgAttrOfType<mlir::bm::ShardingAttr>(
        index, mlir::bm::BmDialect::kShardingAttrName);
    if (!kind || kind.getValue() != mlir::bm::BmDialect::kKindParameter ||
        !stored)
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<Attribute> dims(stored.getDims().begin(),
                                stored.getDims().end());
    int tpDim = -1;
    for (auto [d, axes] : llvm::enumerate(dims))
      for (Attribute axis : cast<ArrayAttr>(axes))
        if (cast<StringAttr>(axis).getValue() == kTensorAxis)
          tpDim = static_cast<int>(d);
    const int rows = tensor2Dim(
        std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
        tpDim, tp2);
    if (rows < 0 || !cast<ArrayAttr>(dims[rows]).empty())
      continue;
    dims[rows] =
        ArrayAttr::get(context, {StringAttr::get(context, kTensor2Axis)});
    func.setArgAttr(index, mlir::bm::BmDialect::kShardingAttrName,
                    mlir::bm::ShardingAttr::get(context, stored.getMesh(),
                                                ArrayAttr::get(context, dims),
                                                stored.getPartial()));
  }
}

/// Where each annotated op comes from in the planned model: the op made
/// from the same ONNX node, counting several ops of one node in order.
/// Host-side folding can differ between batch sizes (a mask folds at batch
/// 2 but not at 512), so op indices do not line up; node names do. -1 for
/// an op the planned model folded away.
static std::vector<int64_t> matchByNode(const ModelGraph &planned,
                                        const ModelGraph &annotated) {
  std::map<std::pair<std::string, std::string>, std::vector<int64_t>> byNode;
  for (auto [i, op] : llvm::enumerate(planned.ops))
    byNode[{op.label, op.opName}].push_back(static_cast<int64_t>(i));
  std::map<std::pair<std::string, std::string>, size_t> seen;
  std::vector<int64_t> match;
  for (const OpInfo &op : annotated.ops) {
    auto key = std::make_pair(op.label, op.opName);
    size_t k = seen[key]++;
    auto it = byNode.find(key);
    match.push_back(!op.label.empty() && it != byNode.end() &&
                            k < it->second.size()
                        ? it->second[k]
                        : -1);
  }
  return match;
}

namespace {

/// Sets one op's result and operand shardings from the plan: the planned
/// op's, with the batch axes moved where the annotated model keeps its
/// batch (see matchByNode), or data parallelism alone for ops the plan does
/// not list.
class ShardingWriter {
public:
  ShardingWriter(Builder &b, const Plan &plan, const ModelGraph *planned,
                 const ModelGraph *annotated)
      : b_(b), plan_(plan), planned_(planned), annotated_(annotated),
        byNode_(planned && annotated), expertParallel_(plan.config.ep > 1) {}

  /// Op `i` of the function, planned as op `from` with `sharding` (null
  /// when the plan does not list it).
  llvm::Error write(Operation *op, size_t i, int64_t from,
                    const OpSharding *sharding) const {
    if (!sharding) {
      writeDataParallel(op, i);
      return llvm::Error::success();
    }
    if (sharding->results.size() != op->getNumResults())
      return llvm::createStringError(
          "the plan gives " + std::to_string(sharding->results.size()) +
          " result shardings to op " + std::to_string(i) + " (" +
          op->getName().getStringRef().str() + ") which has " +
          std::to_string(op->getNumResults()));
    SmallVector<Attribute> results;
    for (auto [r, result] : llvm::enumerate(sharding->results))
      results.push_back(toAttr(result, resultsOf, from, i, r));
    SmallVector<Attribute> operands;
    if (sharding->operands.size() == op->getNumOperands())
      for (auto [k, operand] : llvm::enumerate(sharding->operands))
        operands.push_back(toAttr(operand, operandsOf, from, i, k));
    if (!operands.empty())
      op->setAttr(mlir::bm::BmDialect::kOperandShardingAttrName,
                  b_.getArrayAttr(operands));
    op->setAttr(mlir::bm::BmDialect::kShardingAttrName,
                b_.getArrayAttr(results));
    return llvm::Error::success();
  }

private:
  // An op the planned model folded on the host (or the plan does not
  // list).
  void writeDataParallel(Operation *op, size_t i) const {
    SmallVector<Attribute> results;
    for (auto [r, result] : llvm::enumerate(op->getResults())) {
      int batchDim =
          byNode_ ? annotated_->values[annotated_->ops[i].results[r]].batchDim
                  : -1;
      results.push_back(toShardingAttr(
          b_,
          dataParallelSharding(cast<RankedTensorType>(result.getType()),
                               batchDim, plan_.config.dp, plan_.config.tp2),
          expertParallel_));
    }
    op->setAttr(mlir::bm::BmDialect::kShardingAttrName,
                b_.getArrayAttr(results));
  }

  /// `tensor`, the k-th of `valuesOf` of planned op `from`, as the
  /// attribute of annotated op `i`.
  template <typename ValuesOf>
  Attribute toAttr(TensorSharding tensor, ValuesOf valuesOf, int64_t from,
                   size_t i, size_t k) const {
    if (byNode_) {
      const std::vector<int> &was = valuesOf(planned_->ops[from]);
      const std::vector<int> &is = valuesOf(annotated_->ops[i]);
      if (k < was.size() && k < is.size()) {
        int wasDim = planned_->values[was[k]].batchDim;
        int isDim = annotated_->values[is[k]].batchDim;
        if (wasDim != isDim)
          tensor = moveBatchAxes(tensor, wasDim, isDim);
      }
    }
    return toShardingAttr(b_, tensor, expertParallel_);
  }

  Builder &b_;
  const Plan &plan_;
  const ModelGraph *planned_, *annotated_;
  const bool byNode_, expertParallel_;
};

} // namespace

/// The plan's mesh first in the module, replacing an earlier one.
static void setMesh(ModuleOp module, const Plan &plan) {
  Builder b(module.getContext());
  for (auto mesh :
       llvm::make_early_inc_range(module.getOps<mlir::bm::MeshOp>()))
    if (mesh.getSymName() == kMeshName)
      mesh.erase();
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  SmallVector<StringAttr> names = {b.getStringAttr(kDataAxis)};
  SmallVector<int64_t> sizes = {plan.config.dp};
  if (plan.config.ep > 1) {
    sizes.back() = plan.config.dp / plan.config.ep;
    names.push_back(b.getStringAttr(kExpertAxis));
    sizes.push_back(plan.config.ep);
  }
  if (plan.config.cp > 1) {
    names.push_back(b.getStringAttr(kContextAxis));
    sizes.push_back(plan.config.cp);
  }
  if (plan.config.tp2 > 1) {
    names.push_back(b.getStringAttr(kTensor2Axis));
    sizes.push_back(plan.config.tp2);
  }
  names.append({b.getStringAttr(kTensorAxis), b.getStringAttr(kPipelineAxis)});
  sizes.append({plan.config.tp, plan.config.pp});
  mlir::bm::MeshOp::create(
      builder, module.getLoc(), kMeshName,
      mlir::bm::MeshAttr::get(module.getContext(), names, sizes));
}

llvm::Error annotatePlan(ModuleOp module, func::FuncOp func, const Plan &plan,
                         const ModelGraph *planned,
                         const ModelGraph *annotated) {
  Builder b(module.getContext());
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front().without_terminator())
    ops.push_back(&op);
  const bool byNode = planned && annotated;
  if (byNode && annotated->ops.size() != ops.size())
    return llvm::createStringError("the annotated model's graph has " +
                                   std::to_string(annotated->ops.size()) +
                                   " ops but its function " +
                                   std::to_string(ops.size()));

  PlannedOps plannedOps = byNode ? plannedOpsOf(*planned) : plannedOpsOf(ops);
  llvm::Expected<std::vector<const OpSharding *>> resolved =
      resolvePlan(plan, plannedOps);
  if (!resolved)
    return resolved.takeError();
  std::vector<int> stages = stagesOf(plan, plannedOps);
  std::vector<int64_t> source;
  if (byNode)
    source = matchByNode(*planned, *annotated);
  else
    for (size_t i = 0; i < ops.size(); ++i)
      source.push_back(static_cast<int64_t>(i));

  ShardingWriter writer(b, plan, planned, annotated);
  int previousStage = 0;
  for (auto [i, op] : llvm::enumerate(ops)) {
    int64_t from = source[i];
    const OpSharding *sharding = from >= 0 ? (*resolved)[from] : nullptr;
    if (llvm::Error error = writer.write(op, i, from, sharding))
      return error;
    int stage = from >= 0 ? stages[from] : previousStage;
    previousStage = stage;
    // The pipeline device of the op's virtual stage, as the schedule lays
    // virtual stages out (round the devices, or in a V).
    int device = plan.config.pp > 1
                     ? bmrt::rankOfStage(bmrt::layoutOf(plan.config.schedule),
                                         plan.config.pp, stage)
                     : 0;
    op->setAttr(mlir::bm::BmDialect::kStageAttrName,
                b.getI64IntegerAttr(device));
    if (plan.config.chunks > 1)
      op->setAttr(mlir::bm::BmDialect::kVirtualStageAttrName,
                  b.getI64IntegerAttr(stage));
  }
  annotateArguments(func);
  if (plan.config.tp2 > 1)
    splitParameterRows(func, plan.config.tp2);
  if (plan.config.cp > 1)
    placeContextQueries(func);
  if (plan.config.cp > 1 && plan.config.cpMirrored)
    layOutMirroredContext(func, plan.config.cp);
  setMesh(module, plan);

  // The shardings must hold against the mesh and the shapes; a plan made
  // for other shapes (another --seq, say) fails here, not downstream.
  mlir::bm::FirstDiagnostic diagnostic(module.getContext());
  if (failed(verify(module)))
    return llvm::createStringError("the annotated model does not verify: " +
                                   diagnostic.message());
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
