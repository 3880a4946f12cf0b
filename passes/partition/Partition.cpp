//===- Partition.cpp - phase 6: one device's share of the training step ---===//
//
// Walks @train_step in order, giving every value a sharding:
//  - arguments keep the one annotation gave them (`bm.sharding`);
//  - bm.reshard and bm.reshard_grad become collectives (Reshard.cpp);
//  - a cross-entropy of logits split along their classes becomes the
//    vocabulary-parallel loss (VocabParallelLoss.cpp);
//  - every other op takes its factors' mesh axes from its operands through
//    its sharding rule (GSPMD-style propagation), resharding an operand
//    that disagrees; the planned forward ops read their operands through
//    bm.reshard, so this reproduces the plan's choice, and their backward
//    ops inherit it.
// Then every type becomes the shape one device holds.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"
#include "passes/partition/Propagate.h"
#include "passes/plan/Plan.h"
#include "passes/partition/Reshard.h"
#include "passes/partition/VocabParallelLoss.h"

#include "mlir/IR/Builders.h"

#include <map>
#include <optional>

namespace mlir::bm {
#define GEN_PASS_DEF_BMPARTITIONPASS
#include "passes/Passes.h.inc"

namespace {

class Partitioner {
public:
  Partitioner(func::FuncOp step, MeshOp mesh) : step(step), b(step) {
    state.mesh = mesh.getMesh();
    state.meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  }

  LogicalResult run() {
    shardArguments();
    SmallVector<Operation *> ops;
    for (Operation &op : step.getBody().front())
      ops.push_back(&op);
    for (Operation *op : ops) {
      inBackward |= op->hasAttr(BmDialect::kGradientSeedAttrName);
      if (failed(visitPlaced(op)))
        return failure();
    }
    localizeTypes();
    return success();
  }

private:
  /// Parameters are stored as their first planned reader wants them;
  /// data (tokens, labels, images) is split by replicas and by context
  /// parallelism's shares of the sequence only: each rank reads its share
  /// whole, and a reader that wants them split further
  /// slices them.
  void shardArguments() {
    MLIRContext *context = step.getContext();
    for (BlockArgument arg : step.getArguments()) {
      unsigned index = arg.getArgNumber();
      auto attr =
          step.getArgAttrOfType<ShardingAttr>(index, BmDialect::kShardingAttrName);
      ValueSharding sharding =
          attr ? ValueSharding::fromAttr(attr)
               : ValueSharding::replicated(
                     cast<RankedTensorType>(arg.getType()).getRank());
      auto kind = step.getArgAttrOfType<StringAttr>(
          index, BmDialect::kParamKindAttrName);
      if (!kind || kind.getValue() != BmDialect::kKindParameter)
        for (AxisList &axes : sharding.dims)
          llvm::erase_if(axes, [](const std::string &axis) {
            return axis != ::bm::plan::kDataAxis &&
                   axis != ::bm::plan::kExpertAxis &&
                   axis != ::bm::plan::kContextAxis &&
                   axis != ::bm::plan::kTensor2Axis;
          });
      else if (std::optional<ValueSharding> table = tableLayout(arg))
        sharding = keepingRows(*table, sharding);
      state.of[arg] = sharding;
      step.setArgAttr(index, BmDialect::kShardingAttrName,
                      sharding.toAttr(context, state.meshRef));
    }
  }

  /// `layout` with the tp2 split of `annotated` (2-D tensor parallelism's
  /// rows, bm-annotate's splitParameterRows) where that dimension is free.
  static ValueSharding keepingRows(ValueSharding layout,
                                   const ValueSharding &annotated) {
    for (size_t d = 0; d < annotated.dims.size(); ++d)
      if (llvm::is_contained(annotated.dims[d], ::bm::plan::kTensor2Axis) &&
          d < layout.dims.size() && layout.dims[d].empty())
        layout.dims[d] = {::bm::plan::kTensor2Axis};
    return layout;
  }

  /// The gather that reads `reshard`'s result as its table, if that is
  /// the result's one reader.
  static GatherOp gatherOfTable(ReshardOp reshard) {
    if (!reshard->hasOneUse())
      return {};
    OpOperand &use = *reshard->getUses().begin();
    auto gather = dyn_cast<GatherOp>(use.getOwner());
    return gather && use.getOperandNumber() == 0 ? gather : GatherOp();
  }

  /// A table that a gather reads and other planned ops read too (an
  /// embedding tied to the LM head) is stored as the others want it where
  /// that splits the gathered dim: the gather reads any such split in
  /// place (the vocabulary-parallel embedding), where the others' layout
  /// would otherwise be moved to and from the gather's every step.
  std::optional<ValueSharding> tableLayout(BlockArgument param) {
    GatherOp gather;
    std::optional<ValueSharding> other;
    for (Operation *user : param.getUsers()) {
      auto reshard = dyn_cast<ReshardOp>(user);
      if (!reshard)
        continue;
      if (GatherOp reader = gatherOfTable(reshard))
        gather = reader;
      else if (!other)
        other = ValueSharding::fromAttr(reshard.getSharding());
    }
    if (!gather || !other || other->isPartial() ||
        other->dims[gather.getAxis()].empty())
      return std::nullopt;
    return other;
  }

  /// Whether `reshard` moves a table split along its gathered dim to a
  /// gather that could read it in place, and moving the table costs more
  /// than reducing the gather's partial result would.
  bool gatherReadsInPlace(ReshardOp reshard) {
    GatherOp gather = gatherOfTable(reshard);
    if (!gather)
      return false;
    const ValueSharding &table = state[reshard.getInput()];
    auto bytes = [](Value v) {
      auto type = cast<RankedTensorType>(v.getType());
      return type.getNumElements() * type.getElementTypeBitWidth();
    };
    const AxisList &rows = table.dims[gather.getAxis()];
    return !table.isPartial() && !rows.empty() &&
           !splitsIndices(gather, rows) &&
           bytes(reshard.getInput()) > bytes(gather.getResult());
  }

  /// Whether the plan splits `gather`'s indices over one of `axes`: then a
  /// table's rows split over it cannot be read in place (each rank looks up
  /// other samples than its peers, in rows they hold; 2-D tensor
  /// parallelism's tp2 splits both).
  static bool splitsIndices(GatherOp gather, const AxisList &axes) {
    auto operands =
        gather->getAttrOfType<ArrayAttr>(BmDialect::kOperandShardingAttrName);
    if (!operands || operands.size() < 2)
      return false;
    ValueSharding planned =
        ValueSharding::fromAttr(cast<ShardingAttr>(operands[1]));
    return llvm::any_of(planned.dims, [&](const AxisList &dim) {
      return llvm::any_of(dim, [&](const std::string &axis) {
        return llvm::is_contained(axes, axis);
      });
    });
  }

  /// Collectives and scalings made for an op join its layer and block
  /// class (codegen keeps them in the layer's function) and its pipeline
  /// stage.
  LogicalResult visitPlaced(Operation *op) {
    SmallVector<NamedAttribute> placement;
    for (StringRef name : BmDialect::placementAttrNames())
      if (Attribute attr = op->getAttr(name))
        placement.push_back(NamedAttribute(name, attr));
    Operation *before = op->getPrevNode(), *after = op->getNextNode();
    if (failed(visit(op)))
      return failure();
    Block &body = step.getBody().front();
    for (Operation *made = before ? before->getNextNode() : &body.front();
         made && made != after; made = made->getNextNode())
      for (NamedAttribute attr : placement)
        made->setAttr(attr.getName(), attr.getValue());
    return success();
  }

  LogicalResult visit(Operation *op) {
    b.setInsertionPoint(op);
    if (auto reshard = dyn_cast<ReshardOp>(op))
      return replaceBy(op, lowerReshard(reshard));
    if (auto grad = dyn_cast<ReshardGradOp>(op))
      return replaceBy(op, reshardValue(b, op->getLoc(), grad.getResultGrad(),
                                        gradientSharding(grad), state));
    if (auto ret = dyn_cast<func::ReturnOp>(op))
      return shardResults(ret);
    if (vocabParallelLoss.appliesTo(op))
      return vocabParallelLoss.rewrite(op, b);
    return propagateThrough(op, b, state);
  }

  /// A planned operand's reshard: every reader of a value that wants it in
  /// the same sharding, in the same layer and stage, reads one copy (the
  /// embedding read by the first norm and by the residual add is moved
  /// once, as the plan counts it).
  FailureOr<Value> lowerReshard(ReshardOp reshard) {
    if (gatherReadsInPlace(reshard))
      return reshard.getInput();
    ValueSharding to = ValueSharding::fromAttr(reshard.getSharding());
    std::string key = to.str();
    for (StringRef name : BmDialect::placementAttrNames())
      if (Attribute attr = reshard->getAttr(name))
        key += " " + name.str() + "=" +
               std::to_string(cast<IntegerAttr>(attr).getInt());
    // A weight's tp2 shards read again in backward are gathered again there
    // (autodiff's regatherParameterRows): the forward's copy is not kept.
    auto splitsRows = [](const ValueSharding &sharding) {
      return llvm::any_of(sharding.dims, [](const AxisList &axes) {
        return llvm::is_contained(axes, ::bm::plan::kTensor2Axis);
      });
    };
    if (inBackward && splitsRows(state[reshard.getInput()]) && !splitsRows(to))
      key += " backward";
    Value &known = reshardedCopies[reshard.getInput()][key];
    if (known)
      return known;
    FailureOr<Value> moved =
        reshardValue(b, reshard.getLoc(), reshard.getInput(), to, state);
    if (succeeded(moved) && *moved != reshard.getInput())
      known = *moved;
    return moved;
  }

  /// The gradient goes back to the sharding its producer needs: the
  /// producer's, with no partial sums; except that a parameter's gradient
  /// leaves the step still summed over the data-parallel replicas (the
  /// trainer reduces it, by reduce-scatter under ZeRO).
  ValueSharding gradientSharding(ReshardGradOp grad) {
    ValueSharding want = state[grad.getInput()].withoutPartial();
    if (!computedFromParameters(grad.getInput()))
      return want;
    for (const std::string &axis : state[grad.getResultGrad()].partial)
      if (llvm::none_of(want.dims, [&](const AxisList &axes) {
            return llvm::is_contained(axes, axis);
          }))
        want.partial.push_back(axis);
    return want;
  }

  /// Whether `value` is a parameter, or computed from parameters and
  /// constants alone (a slice of a table, a reshaped weight): its gradient
  /// flows to parameters only, so its partial sums over the replicas can
  /// wait for the trainer.
  /// (Memoised: the cones of a deep step share most of their ops.)
  bool computedFromParameters(Value value) {
    if (auto it = fromParameters.find(value); it != fromParameters.end())
      return it->second;
    bool result;
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      auto kind = step.getArgAttrOfType<StringAttr>(
          arg.getArgNumber(), BmDialect::kParamKindAttrName);
      result = kind && kind.getValue() == BmDialect::kKindParameter;
    } else {
      result = llvm::all_of(value.getDefiningOp()->getOperands(),
                            [&](Value v) { return computedFromParameters(v); });
    }
    return fromParameters[value] = result;
  }

  LogicalResult replaceBy(Operation *op, FailureOr<Value> value) {
    if (failed(value))
      return failure();
    op->getResult(0).replaceAllUsesWith(*value);
    op->erase();
    return success();
  }

  /// The loss and each parameter's gradient leave the step as partial sums
  /// over the data-parallel axes, for the trainer to reduce (with ZeRO, by
  /// reduce-scatter); a gradient is split like its parameter.
  LogicalResult shardResults(func::ReturnOp ret) {
    MLIRContext *context = step.getContext();
    for (OpOperand &operand : ret->getOpOperands()) {
      unsigned index = operand.getOperandNumber();
      Operation *before = ret->getPrevNode();
      Operation *producer = operand.get().getDefiningOp();
      FailureOr<Value> value = operand.get();
      auto of = step.getResultAttrOfType<StringAttr>(
          index, BmDialect::kGradOfAttrName);
      Value param = of ? parameterNamed(of.getValue()) : Value();
      if (param && state.factored.count(param))
        value = inFactoredView(*value, param);
      else
        value = destrided(b, ret.getLoc(), *value, state);
      if (failed(value))
        return failure();
      ValueSharding want = state[*value];
      if (param)
        want.dims = state[param].dims;
      value = reshardValue(b, ret.getLoc(), *value, want, state);
      if (failed(value))
        return failure();
      operand.set(*value);
      if (producer)
        placeLike(producer, before, ret);
      SmallVector<StringRef> partial(want.partial.begin(), want.partial.end());
      step.setResultAttr(index, BmDialect::kPartialAttrName,
                         Builder(context).getStrArrayAttr(partial));
    }
    return success();
  }

  /// The ops after `after` and before `end` (made for a result) run where
  /// `like` does.
  void placeLike(Operation *like, Operation *after, Operation *end) {
    for (Operation *made = after->getNextNode(); made && made != end;
         made = made->getNextNode())
      for (StringRef name : BmDialect::placementAttrNames())
        if (Attribute attr = like->getAttr(name); attr && !made->hasAttr(name))
          made->setAttr(name, attr);
  }

  /// The gradient of a parameter stored factored, reshaped to its view
  /// (a strided gradient lines up with the view's contiguous shards).
  FailureOr<Value> inFactoredView(Value grad, Value param) {
    Operation *ret = &*b.getInsertionPoint();
    auto reshape = ReshapeOp::create(b, grad.getLoc(), param.getType(), grad);
    b.setInsertionPoint(reshape);
    LogicalResult propagated = propagateThrough(reshape, b, state);
    b.setInsertionPoint(ret);
    if (failed(propagated))
      return failure();
    return reshape.getResult();
  }

  Value parameterNamed(StringRef name) {
    for (BlockArgument arg : step.getArguments())
      if (auto attr = step.getArgAttrOfType<StringAttr>(
              arg.getArgNumber(), BmDialect::kParamNameAttrName);
          attr && attr.getValue() == name)
        return arg;
    return {};
  }

  /// A slice keeps the dims the partition splits whole (their factor is
  /// parallel in its rule): those bounds become the local dim's.
  void localizeSliceBounds(SliceOp slice) {
    SmallVector<int64_t> starts(slice.getStarts()), limits(slice.getLimits()),
        strides(slice.getStrides());
    // Operands come first in the walk: the input's type is already local.
    auto local = cast<RankedTensorType>(slice.getInput().getType());
    const ValueSharding &sharding = state[slice.getInput()];
    for (size_t d = 0; d < sharding.dims.size(); ++d) {
      if (sharding.dims[d].empty())
        continue;
      starts[d] = 0;
      limits[d] = local.getDimSize(d);
      strides[d] = 1;
    }
    Builder b(slice.getContext());
    slice.setStartsAttr(b.getDenseI64ArrayAttr(starts));
    slice.setLimitsAttr(b.getDenseI64ArrayAttr(limits));
    slice.setStridesAttr(b.getDenseI64ArrayAttr(strides));
  }

  /// A split along a dim the partition splits too (a fused projection read
  /// by heads) cuts each device's strided share into equal local parts.
  void localizeSplitSizes(SplitOp split) {
    const ValueSharding &sharding = state[split.getInput()];
    int64_t axis = split.getAxis();
    int64_t devices = groupSize(state.mesh, sharding.dims[axis]);
    if (devices == 1)
      return;
    SmallVector<int64_t> sizes(split.getSizes());
    for (int64_t &size : sizes)
      size /= devices;
    split.setSizesAttr(Builder(split.getContext()).getDenseI64ArrayAttr(sizes));
  }

  /// Every value gets the shape one device holds; the plan's annotations
  /// describe global shapes and go.
  void localizeTypes() {
    auto localize = [&](Value value) {
      value.setType(localType(cast<RankedTensorType>(value.getType()),
                              state[value], state.mesh));
    };
    for (BlockArgument arg : step.getArguments())
      localize(arg);
    step.walk([&](Operation *op) {
      if (auto slice = dyn_cast<SliceOp>(op))
        localizeSliceBounds(slice);
      if (auto split = dyn_cast<SplitOp>(op))
        localizeSplitSizes(split);
      for (Value result : op->getResults())
        localize(result);
      op->removeAttr(BmDialect::kShardingAttrName);
      op->removeAttr(BmDialect::kOperandShardingAttrName);
    });
    step.setType(FunctionType::get(
        step.getContext(), step.getBody().front().getArgumentTypes(),
        step.getBody().front().getTerminator()->getOperandTypes()));
  }

  func::FuncOp step;
  OpBuilder b;
  ShardingState state;
  VocabParallelLoss vocabParallelLoss{state};
  llvm::DenseMap<Value, bool> fromParameters;
  /// Reshards lowered so far: (value, sharding and placement) -> its copy.
  llvm::DenseMap<Value, std::map<std::string, Value>> reshardedCopies;
  /// Whether the ops visited so far reached the backward pass (its seed).
  bool inBackward = false;
};

struct PartitionPass : impl::BmPartitionPassBase<PartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      module.emitError("bm-partition needs the training step @train_step "
                       "(run bm-autodiff first)");
      return signalPassFailure();
    }
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    if (!mesh) {
      module.emitError("bm-partition needs the plan's bm.mesh @mesh (run "
                       "bm-annotate first)");
      return signalPassFailure();
    }
    if (failed(Partitioner(step, mesh).run()))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::bm
