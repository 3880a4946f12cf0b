//===- Autodiff.cpp - phase 5: the training step from the forward model ---===//
//
// Reverse-mode differentiation of @main's single block: the forward ops are
// kept as they are, the loss is appended, and each op's gradient rule
// (GradientOpInterface) adds its backward ops after them, last op first.
// Only values that depend on a parameter ("active" values) get gradients:
// the rest of the graph (masks, positions, the input images) needs none.
// Under recomputation, backward runs a segment of forward ops again (a
// layer, or an attention core) before differentiating it, and its rules
// read the second run's values, so the first run's die after forward.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"
#include "passes/plan/Plan.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#include <map>

namespace mlir::bm {
#define GEN_PASS_DEF_BMAUTODIFFPASS
#include "passes/Passes.h.inc"

namespace {

RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

/// The pipeline stage (and virtual stage) of `from` onto `to`.
void copyStage(Operation *from, Operation *to) {
  for (StringRef name :
       {BmDialect::kStageAttrName, BmDialect::kVirtualStageAttrName})
    if (Attribute stage = from->getAttr(name))
      to->setAttr(name, stage);
}

bool isParameter(func::FuncOp func, unsigned index) {
  auto kind =
      func.getArgAttrOfType<StringAttr>(index, BmDialect::kParamKindAttrName);
  return kind && kind.getValue() == BmDialect::kKindParameter &&
         isFloatTensor(func.getArgument(index).getType());
}

/// On a planned model, the labels are split like the output: like the
/// logits' leading dims (by data parallelism, usually), or like every dim
/// of a regression's output (`dropLast` false), so that each device has its
/// rows'.
void shardLikeOutput(func::FuncOp step, unsigned labelIndex, Value output,
                     bool dropLast) {
  Operation *producer = output.getDefiningOp();
  auto shardings = producer ? producer->getAttrOfType<ArrayAttr>(
                                  BmDialect::kShardingAttrName)
                            : ArrayAttr();
  if (!shardings)
    return;
  auto sharding =
      cast<ShardingAttr>(shardings[cast<OpResult>(output).getResultNumber()]);
  ArrayRef<Attribute> dims = sharding.getDims().getValue();
  MLIRContext *context = step.getContext();
  step.setArgAttr(
      labelIndex, BmDialect::kShardingAttrName,
      ShardingAttr::get(
          context, sharding.getMesh(),
          ArrayAttr::get(context, dropLast ? dims.drop_back() : dims),
          ArrayAttr::get(context, {})));
}

/// Appends the label argument of `type`, named `name`, and returns it.
FailureOr<Value> appendLabel(func::FuncOp step, RankedTensorType type,
                             StringRef name, Location loc, OpBuilder &b) {
  unsigned index = step.getNumArguments();
  if (failed(step.insertArgument(
          index, type,
          b.getDictionaryAttr(
              {b.getNamedAttr(BmDialect::kParamKindAttrName,
                              b.getStringAttr(BmDialect::kKindLabel)),
               b.getNamedAttr(BmDialect::kParamNameAttrName,
                              b.getStringAttr(name))}),
          loc)))
    return failure();
  return step.getArgument(index);
}

/// Mean cross-entropy of the output's last dim (the classes) against a new
/// integer label argument of the leading shape.
FailureOr<Value> appendCrossEntropy(func::FuncOp step, Value output,
                                    OpBuilder &b) {
  RankedTensorType type = typeOf(output);
  Location loc = output.getLoc();
  ArrayRef<int64_t> shape = type.getShape();
  int64_t classes = shape.back(), rows = type.getNumElements() / classes;
  FailureOr<Value> labels = appendLabel(
      step, RankedTensorType::get(shape.drop_back(), b.getI64Type()), "labels",
      loc, b);
  if (failed(labels))
    return failure();
  shardLikeOutput(step, step.getNumArguments() - 1, output, true);
  Value flatLogits = ReshapeOp::create(
      b, loc, RankedTensorType::get({rows, classes}, type.getElementType()),
      output);
  Value flatLabels = ReshapeOp::create(
      b, loc, RankedTensorType::get({rows}, b.getI64Type()), *labels);
  return CrossEntropyOp::create(
             b, loc, RankedTensorType::get({}, b.getF32Type()), flatLogits,
             flatLabels)
      .getResult();
}

/// Mean squared error of the output against a new float target argument
/// of its shape: mean((y - t)^2) over every element.
FailureOr<Value> appendMeanSquaredError(func::FuncOp step, Value output,
                                        OpBuilder &b) {
  RankedTensorType type = typeOf(output);
  Location loc = output.getLoc();
  FailureOr<Value> targets = appendLabel(step, type, "targets", loc, b);
  if (failed(targets))
    return failure();
  shardLikeOutput(step, step.getNumArguments() - 1, output, false);
  Value error = SubOp::create(b, loc, output, *targets);
  Value squared = MulOp::create(b, loc, error, error);
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < type.getRank(); ++d)
    all.push_back(d);
  return ReduceMeanOp::create(b, loc, squared, b.getDenseI64ArrayAttr(all),
                              b.getBoolAttr(false))
      .getResult();
}

/// Whether cross-entropy fits logits of `type` under `auto`: one label per
/// sample ([B, C]), or labels shaped like an integer input (the tokens a
/// language model's labels are the next of).
bool looksLikeLogits(func::FuncOp step, RankedTensorType type) {
  if (type.getRank() == 2)
    return true;
  auto leading = RankedTensorType::get(type.getShape().drop_back(),
                                       IntegerType::get(step.getContext(), 64));
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto kind =
        step.getArgAttrOfType<StringAttr>(i, BmDialect::kParamKindAttrName);
    if (kind && kind.getValue() == BmDialect::kKindInput &&
        step.getArgument(i).getType() == leading)
      return true;
  }
  return false;
}

/// The scalar the step minimises: the model's output if it is one, else
/// the loss `loss` names (auto, cross-entropy or mse) appended to it.
FailureOr<Value> appendLoss(func::FuncOp step, Value output, StringRef loss,
                            OpBuilder &b) {
  RankedTensorType type = typeOf(output);
  Location loc = output.getLoc();
  if (!llvm::is_contained({"auto", "cross-entropy", "mse"}, loss))
    return emitError(loc, "the loss must be auto, cross-entropy or mse, not '")
           << loss << "'";
  if (!isa<FloatType>(type.getElementType()))
    return emitError(loc, "the model's output is ")
           << type << "; training needs a float loss, logits or a float "
           << "output to regress";
  if (type.getRank() == 0) {
    if (loss != "auto")
      return emitError(loc, "the model's output is a scalar, its own loss; "
                            "the loss ")
             << loss << " needs a tensor output";
    return output;
  }
  bool crossEntropy = loss == "cross-entropy" ||
                      (loss == "auto" && looksLikeLogits(step, type));
  if (crossEntropy && type.getRank() < 2)
    return emitError(loc, "the model's output ")
           << type << " has no class dim for a cross-entropy";
  return crossEntropy ? appendCrossEntropy(step, output, b)
                      : appendMeanSquaredError(step, output, b);
}

/// Values that depend on a parameter: only they need gradients.
llvm::DenseSet<Value> activeValues(func::FuncOp func) {
  llvm::DenseSet<Value> active;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (isParameter(func, i))
      active.insert(func.getArgument(i));
  for (Operation &op : func.getBody().front())
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return active.contains(v); }))
      for (Value result : op.getResults())
        if (isFloatTensor(result.getType()))
          active.insert(result);
  return active;
}

/// Groups of forward ops that backward runs again instead of keeping their
/// values alive from forward to backward.
using Segments = std::vector<SmallVector<Operation *>>;

/// Full recomputation: each layer bm-fold marked is a segment.
Segments layerSegments(ArrayRef<Operation *> forward) {
  std::map<int64_t, SmallVector<Operation *>> layers;
  for (Operation *op : forward)
    if (auto layer = op->getAttrOfType<IntegerAttr>(BmDialect::kLayerAttrName))
      layers[layer.getInt()].push_back(op);
  Segments segments;
  for (auto &[layer, ops] : layers)
    segments.push_back(std::move(ops));
  return segments;
}

bool isParameterArgument(Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg)
    return false;
  auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
  auto kind = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                BmDialect::kParamKindAttrName);
  return kind && kind.getValue() == BmDialect::kKindParameter;
}

/// The scores of an attention softmax: back from its input through the
/// scale, mask and bias (elementwise ops whose operand of the result's type
/// carries the scores) to the product Q K^T of two activations. Empty when
/// the softmax normalises something else.
SmallVector<Operation *> scoresChain(SoftmaxOp softmax) {
  SmallVector<Operation *> chain;
  Value scores = softmax.getInput();
  while (Operation *producer = scores.getDefiningOp()) {
    if (auto matmul = dyn_cast<MatMulOp>(producer)) {
      if (isParameterArgument(matmul.getLhs()) ||
          isParameterArgument(matmul.getRhs()))
        return {};
      chain.push_back(producer);
      return chain;
    }
    if (!isa<AddOp, SubOp, MulOp, DivOp, WhereOp>(producer))
      return {};
    Value carrier;
    for (Value operand : producer->getOperands())
      if (operand.getType() == scores.getType() && operand.getDefiningOp())
        carrier = operand;
    if (!carrier)
      return {};
    chain.push_back(producer);
    scores = carrier;
  }
  return {};
}

/// Selective recomputation: each attention core, from Q K^T through the
/// softmax to the product with V, is a segment (Korthikanti et al. 2022:
/// its activations grow with the square of the sequence).
Segments attentionCoreSegments(ArrayRef<Operation *> forward) {
  Segments segments;
  for (Operation *op : forward) {
    auto softmax = dyn_cast<SoftmaxOp>(op);
    if (!softmax)
      continue;
    SmallVector<Operation *> core = scoresChain(softmax);
    if (core.empty())
      continue;
    std::reverse(core.begin(), core.end());
    core.push_back(softmax);
    for (Operation *user : softmax->getUsers())
      if (auto pv = dyn_cast<MatMulOp>(user); pv && pv.getLhs() == softmax)
        core.push_back(pv);
    segments.push_back(std::move(core));
  }
  return segments;
}

class Backward {
public:
  Backward(OpBuilder &b, llvm::DenseSet<Value> active, Segments segments)
      : b(b), active(std::move(active)), segments(std::move(segments)),
        cloned(this->segments.size(), false) {
    for (auto [index, segment] : llvm::enumerate(this->segments))
      for (Operation *op : segment)
        segmentOf[op] = index;
  }

  /// Adds the gradient of each active operand of `op`, from its results'.
  LogicalResult differentiate(Operation *op) {
    SmallVector<Value> dys;
    bool any = false;
    for (Value result : op->getResults()) {
      dys.push_back(grads.lookup(result));
      any |= static_cast<bool>(dys.back());
    }
    if (!any || llvm::none_of(op->getOperands(),
                              [&](Value v) { return active.contains(v); }))
      return success();
    Operation *lastBefore = b.getInsertionPoint()->getPrevNode();
    if (failed(differentiateActive(op, dys)))
      return failure();
    tagWithLayer(op, lastBefore);
    return success();
  }

  void seed(Value value, Value grad) { grads[value] = grad; }
  Value gradientOf(Value value) const { return grads.lookup(value); }

private:
  LogicalResult differentiateActive(Operation *op, ArrayRef<Value> dys) {
    // In a recomputed segment, the rule reads the values of the segment's
    // second run.
    Operation *ruleOp = op;
    if (auto it = segmentOf.find(op); it != segmentOf.end())
      ruleOp = recomputed(it->second, op);
    SmallVector<Value> dxs;
    auto rule = dyn_cast<GradientOpInterface>(ruleOp);
    if (failed(rule ? rule.buildGradients(b, dys, dxs)
                    : buildGradientsFromRegistry(ruleOp, b, dys, dxs)))
      return failure();
    for (auto [operand, dx] : llvm::zip(op->getOperands(), dxs))
      if (dx && active.contains(operand) && failed(accumulate(op, operand, dx)))
        return failure();
    return success();
  }

  /// Backward ops belong to the layer of the forward op they differentiate,
  /// so that codegen can give each block class one backward function, and
  /// run on its pipeline stage.
  void tagWithLayer(Operation *op, Operation *lastBefore) {
    Attribute layer = op->getAttr(BmDialect::kLayerAttrName);
    Attribute blockClass = op->getAttr(BmDialect::kBlockClassAttrName);
    for (Operation *made = b.getInsertionPoint()->getPrevNode();
         made && made != lastBefore; made = made->getPrevNode()) {
      if (layer && blockClass) {
        made->setAttr(BmDialect::kLayerAttrName, layer);
        made->setAttr(BmDialect::kBlockClassAttrName, blockClass);
      }
      copyStage(op, made);
    }
  }

  /// The copy of `op` in the second run of segment `index`, which runs the
  /// first time backward reaches the segment (at its last op).
  Operation *recomputed(unsigned index, Operation *op) {
    if (!cloned[index]) {
      IRMapping map;
      for (Operation *original : segments[index])
        cloneOf[original] = b.clone(*original, map);
      cloned[index] = true;
    }
    return cloneOf.lookup(op);
  }

  LogicalResult accumulate(Operation *op, Value operand, Value dx) {
    if (dx.getType() != operand.getType())
      return op->emitOpError("gradient rule gave ")
             << dx.getType() << " for an operand of type "
             << operand.getType();
    Value &sum = grads[operand];
    sum = sum ? AddOp::create(b, op->getLoc(), sum, dx).getResult() : dx;
    return success();
  }

  OpBuilder &b;
  llvm::DenseSet<Value> active;
  llvm::DenseMap<Value, Value> grads;
  Segments segments;
  std::vector<bool> cloned;
  llvm::DenseMap<Operation *, unsigned> segmentOf;
  llvm::DenseMap<Operation *, Operation *> cloneOf;
};

/// The loss runs on the pipeline stage of the output it reads: the ops
/// appended after `lastForward` and before `end` take its stage.
void placeLikeOutput(Value output, Operation *lastForward, Operation *end) {
  Operation *producer = output.getDefiningOp();
  if (!producer || !lastForward)
    return;
  for (Operation *op = lastForward->getNextNode(); op && op != end;
       op = op->getNextNode())
    copyStage(producer, op);
}

/// Marks where the backward pass begins (its seed, the loss's gradient):
/// every op from it on runs in the backward pass, recomputation included,
/// which a pipeline stage runs at another time than its forward.
void markBackward(Operation *seed) {
  seed->setAttr(BmDialect::kGradientSeedAttrName,
                UnitAttr::get(seed->getContext()));
}

/// Removes backward ops whose results nothing reads (gradients rules build
/// for every operand; unused ones, such as a bias's reduction when only
/// the weight is trained, go here).
void eraseDeadOps(Operation *firstBackward) {
  SmallVector<Operation *> ops;
  for (Operation *op = firstBackward; op; op = op->getNextNode())
    ops.push_back(op);
  for (Operation *op : llvm::reverse(ops))
    if (!op->hasTrait<OpTrait::IsTerminator>() && op->use_empty() &&
        isPure(op))
      op->erase();
}

FailureOr<Segments> recomputeSegments(StringRef recompute,
                                      ArrayRef<Operation *> forward,
                                      Location loc) {
  if (recompute == "none")
    return Segments();
  if (recompute == "full")
    return layerSegments(forward);
  if (recompute == "selective")
    return attentionCoreSegments(forward);
  return emitError(loc, "recompute must be none, selective or full, got '")
         << recompute << "'";
}

/// Whether `reshard` gathers a parameter's shards over 2-D tensor
/// parallelism's tp2: the parameter is stored split over tp2 (bm-annotate's
/// splitParameterRows) and the reshard's sharding is not.
bool gathersRowsOfParameter(ReshardOp reshard) {
  auto arg = dyn_cast<BlockArgument>(reshard.getInput());
  if (!arg || !isParameterArgument(arg))
    return false;
  auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
  auto stored = func.getArgAttrOfType<ShardingAttr>(
      arg.getArgNumber(), BmDialect::kShardingAttrName);
  auto splitsRows = [](ShardingAttr sharding) {
    for (int64_t d = 0, e = sharding.getDims().size(); d < e; ++d)
      if (llvm::is_contained(sharding.getDimAxes(d), ::bm::plan::kTensor2Axis))
        return true;
    return false;
  };
  return stored && splitsRows(stored) && !splitsRows(reshard.getSharding());
}

/// A weight gathered over tp2 is gathered again for the backward that reads
/// it (as Optimus's SUMMA broadcasts again), rather than kept from the
/// forward: the gathered copy is a whole weight per layer, an all-gather
/// over a few ranks its cost. Each such reshard read after `firstBackward`
/// gets a copy before its first reader there (bm-partition lowers the copy
/// to a collective of its own).
void regatherParameterRows(Block &body, Operation *firstBackward) {
  for (Operation &op : body) {
    if (&op == firstBackward)
      break;
    auto reshard = dyn_cast<ReshardOp>(op);
    if (!reshard || !gathersRowsOfParameter(reshard))
      continue;
    SmallVector<OpOperand *> backwardUses;
    for (OpOperand &use : reshard->getUses())
      if (!use.getOwner()->isBeforeInBlock(firstBackward))
        backwardUses.push_back(&use);
    if (backwardUses.empty())
      continue;
    Operation *first = backwardUses.front()->getOwner();
    for (OpOperand *use : backwardUses)
      if (use->getOwner()->isBeforeInBlock(first))
        first = use->getOwner();
    OpBuilder b(first);
    Operation *again = b.clone(op);
    for (OpOperand *use : backwardUses)
      use->set(again->getResult(0));
  }
}

LogicalResult buildTrainStep(ModuleOp module, func::FuncOp main,
                             StringRef recompute, StringRef lossName) {
  OpBuilder b(module.getContext());
  b.setInsertionPointAfter(main);
  auto step = cast<func::FuncOp>(b.clone(*main));
  step.setSymName("train_step");

  Block &body = step.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() != 1)
    return main.emitError("the model has ")
           << ret.getNumOperands()
           << " outputs; training needs one (a scalar loss or logits)";
  b.setInsertionPoint(ret);
  Operation *lastForward = ret->getPrevNode();
  FailureOr<Value> loss = appendLoss(step, ret.getOperand(0), lossName, b);
  if (failed(loss))
    return failure();
  placeLikeOutput(ret.getOperand(0), lastForward, ret);

  Value one = ConstantOp::create(
      b, loss->getLoc(),
      DenseElementsAttr::get(typeOf(*loss), b.getF32FloatAttr(1.0f)));
  Operation *firstBackward = one.getDefiningOp();
  SmallVector<Operation *> forward;
  for (Operation &op : body)
    if (&op == firstBackward)
      break;
    else
      forward.push_back(&op);
  FailureOr<Segments> segments =
      recomputeSegments(recompute, forward, main.getLoc());
  if (failed(segments))
    return failure();
  Backward backward(b, activeValues(step), std::move(*segments));
  backward.seed(*loss, one);
  for (Operation *op : llvm::reverse(forward))
    if (failed(backward.differentiate(op)))
      return failure();

  SmallVector<Value> results = {*loss};
  SmallVector<DictionaryAttr> resultAttrs = {b.getDictionaryAttr(
      {b.getNamedAttr(BmDialect::kParamKindAttrName,
                      b.getStringAttr(BmDialect::kKindLoss))})};
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    if (!isParameter(step, i))
      continue;
    Value grad = backward.gradientOf(step.getArgument(i));
    if (!grad) {
      // No gradient reaches it (batch norm's running statistics, an unused
      // table): it is not trained, and the optimizer must not decay it.
      step.setArgAttr(i, BmDialect::kTrainableAttrName, b.getBoolAttr(false));
      continue;
    }
    results.push_back(grad);
    resultAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr(
        BmDialect::kGradOfAttrName,
        step.getArgAttrOfType<StringAttr>(i, BmDialect::kParamNameAttrName))}));
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  markBackward(firstBackward);
  regatherParameterRows(body, firstBackward);
  eraseDeadOps(firstBackward);
  step.setType(b.getFunctionType(step.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  step.setAllResultAttrs(resultAttrs);
  return success();
}

struct AutodiffPass : impl::BmAutodiffPassBase<AutodiffPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("autodiff needs the forward model as @main");
      return signalPassFailure();
    }
    if (module.lookupSymbol("train_step")) {
      module.emitError("the module already has a @train_step");
      return signalPassFailure();
    }
    if (failed(buildTrainStep(module, main, recompute, loss)))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::bm
