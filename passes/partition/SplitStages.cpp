//===- SplitStages.cpp - the partitioned step, one function per stage -----===//
//
// Pipeline parallelism: the ops of @train_step carry the pipeline stage
// that runs them (bm.stage: annotation places forward ops by the plan's
// layers per stage, autodiff puts backward ops on their forward op's
// stage). Each stage becomes @stage_N with the ops it runs, forward then
// backward (from the op autodiff marked bm.gradient_seed on), where:
//  - the values earlier stages compute and this one reads in forward are
//    arguments (bm.kind = "activation"), and results (bm.kind = "send") of
//    the previous stage, in the same order: the order of their first use
//    in the step (T5's decoder stages read the encoder's output beside
//    the decoder's own stream). A value made on stage 1 and read on stage 3
//    crosses into stage 2 too, which passes it on;
//  - likewise the gradients later stages send back are arguments
//    (bm.kind = "activation_grad"), and results (bm.kind = "send_grad") of
//    the next stage, in the order of their first use in the backward;
//  - values that do not mix data with parameters (masks and positions from
//    the tokens; tables such as rotary embeddings from parameters) are
//    computed again where they are read;
//  - the step's data (tokens or images, labels) are every stage's
//    arguments, its parameters those of the stages reading them; the loss
//    and the gradients are results of the stage computing them.
// A parameter read on several stages (embeddings tied to the output layer,
// a table computed again) is an argument of every stage, each returning its
// share of the gradient (zeros where it reads none; a share goes through
// the linear ops that summed the shares' gradient in the whole step) as a
// partial sum over "pp" too. Under an interleaved schedule each virtual
// stage (chunk) is such a stage: a rank holds one copy per chunk, and the
// trainer keeps them in one buffer and adds their shares before the sum
// over "pp".
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"
#include "passes/plan/Plan.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include <climits>
#include <set>

namespace mlir::bm {
#define GEN_PASS_DEF_BMSPLITSTAGESPASS
#include "passes/Passes.h.inc"

namespace {

constexpr int kFloating = -1;

/// A term of a gradient: a value one stage computes, and the linear ops
/// (first to last) that the whole step applies to the sum of such terms.
struct Share {
  Value term;
  SmallVector<Operation *> through;
};

/// A parameter read on several stages, the step's result holding its
/// gradient, and the shares that gradient sums.
struct SharedParameter {
  BlockArgument arg;
  int result;
  SmallVector<Share> shares;
};

class StageSplitter {
public:
  StageSplitter(func::FuncOp step, int stages) : step(step), stages(stages) {
    int index = 0;
    for (Operation &op : step.getBody().front()) {
      position[&op] = index++;
      if (op.hasAttr(BmDialect::kGradientSeedAttrName))
        seedPosition = position[&op];
    }
  }

  LogicalResult run() {
    recordRecomputation();
    findSharedParameters();
    if (failed(findCrossings()))
      return failure();
    OpBuilder b(step);
    for (int s = 0; s < stages; ++s)
      if (failed(buildStage(b, s)))
        return failure();
    step.erase();
    return success();
  }

private:
  /// The virtual stage (model chunk) under an interleaved schedule, else
  /// the stage.
  static int stageOf(Operation *op) {
    auto stage =
        op->getAttrOfType<IntegerAttr>(BmDialect::kVirtualStageAttrName);
    if (!stage)
      stage = op->getAttrOfType<IntegerAttr>(BmDialect::kStageAttrName);
    return stage ? static_cast<int>(stage.getInt()) : kFloating;
  }
  bool isBackward(Operation *op) const {
    return position.lookup(op) >= seedPosition;
  }
  bool isParameter(Value value) {
    auto arg = dyn_cast<BlockArgument>(value);
    if (!arg)
      return false;
    auto kind = step.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), BmDialect::kParamKindAttrName);
    return kind && kind.getValue() == BmDialect::kKindParameter;
  }

  /// What `value` is computed from: whether by pure ops only, and whether
  /// from data (tokens, images, labels) and from parameters.
  struct Cone {
    bool pure = true, data = false, parameters = false;
  };
  const Cone &coneOf(Value value) {
    if (auto it = cones.find(value); it != cones.end())
      return it->second;
    Cone cone;
    if (isa<BlockArgument>(value)) {
      (isParameter(value) ? cone.parameters : cone.data) = true;
    } else {
      Operation *producer = value.getDefiningOp();
      cone.pure = isPure(producer);
      for (Value operand : producer->getOperands()) {
        const Cone &in = coneOf(operand);
        cone.pure &= in.pure;
        cone.data |= in.data;
        cone.parameters |= in.parameters;
      }
    }
    return cones[value] = cone;
  }

  /// Whether `value` can be computed again on any stage: it does not mix
  /// data with parameters (masks and positions from data; tables such as
  /// rotary embeddings from parameters, whose stages then share them).
  bool isRecomputable(Value value) {
    const Cone &cone = coneOf(value);
    return cone.pure && !(cone.data && cone.parameters);
  }

  /// The parameters `value` is computed from.
  void parametersOf(Value value, llvm::SmallPtrSetImpl<Value> &seen,
                    SmallVectorImpl<BlockArgument> &found) {
    if (!seen.insert(value).second || !coneOf(value).parameters)
      return;
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      found.push_back(arg);
      return;
    }
    for (Value operand : value.getDefiningOp()->getOperands())
      parametersOf(operand, seen, found);
  }

  /// Records `value` as crossing into each stage after `from` up to `to`
  /// (forward) or before `from` down to `to` (backward): the stages in
  /// between (with no reader, or an empty virtual stage) pass it on. Each
  /// boundary lists its values in the order they are first recorded.
  LogicalResult crossing(Value value, Operation *reader, int from, int to,
                         bool backward) {
    if (backward ? from <= to : from >= to)
      return reader->emitOpError()
             << "on pipeline stage " << to << " reads a "
             << (backward ? "gradient" : "value") << " of stage " << from
             << ": the pipeline sends values forward and gradients back";
    llvm::DenseMap<int, SmallVector<Value>> &crossings =
        backward ? gradientsInto : activationsInto;
    int first = backward ? to : from + 1, last = backward ? from - 1 : to;
    for (int stage = first; stage <= last; ++stage) {
      SmallVector<Value> &known = crossings[stage];
      if (!llvm::is_contained(known, value))
        known.push_back(value);
    }
    return success();
  }

  /// The stages that compute a value of parameters again read those
  /// parameters too.
  void recordRecomputation() {
    for (Operation &op : step.getBody().front()) {
      int to = stageOf(&op);
      if (to == kFloating || isa<func::ReturnOp>(op))
        continue;
      for (Value operand : op.getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer || stageOf(producer) == to || !isRecomputable(operand))
          continue;
        llvm::SmallPtrSet<Value, 8> seen;
        SmallVector<BlockArgument> parameters;
        parametersOf(operand, seen, parameters);
        for (BlockArgument parameter : parameters)
          recomputedOn[parameter].insert(to);
      }
    }
  }

  LogicalResult findCrossings() {
    for (Operation &op : step.getBody().front()) {
      int to = stageOf(&op);
      if (to == kFloating || isa<func::ReturnOp>(op) || summingOps.contains(&op))
        continue;
      for (Value operand : op.getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer)
          continue;
        if (isRecomputable(operand))
          continue;
        int from = stageOf(producer);
        if (from == to || from == kFloating)
          continue;
        // A forward value is the activation (backward reads it too); a
        // backward one the gradient sent back.
        if (failed(crossing(operand, &op, from, to, isBackward(producer))))
          return failure();
      }
    }
    return success();
  }

  /// Parameters read on several stages (embeddings tied to the output
  /// layer): every stage (every chunk, when interleaved) holds a copy,
  /// computes its share of the gradient (zero where it reads none) and the
  /// trainer sums the shares over "pp".
  /// The adds that summed the shares in the whole step are left out.
  void findSharedParameters() {
    auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
    for (BlockArgument arg : step.getArguments()) {
      if (!isParameter(arg))
        continue;
      std::set<int> readers = recomputedOn.lookup(arg);
      for (Operation *user : arg.getUsers())
        if (stageOf(user) != kFloating)
          readers.insert(stageOf(user));
      if (readers.size() < 2)
        continue;
      StringAttr name = step.getArgAttrOfType<StringAttr>(
          arg.getArgNumber(), BmDialect::kParamNameAttrName);
      SharedParameter shared{arg, -1, {}};
      for (OpOperand &operand : ret->getOpOperands()) {
        unsigned index = operand.getOperandNumber();
        if (step.getResultAttrOfType<StringAttr>(
                index, BmDialect::kGradOfAttrName) == name) {
          shared.result = index;
          collectShares(operand.get(), {}, shared.shares);
        }
      }
      sharedParameters.push_back(std::move(shared));
    }
  }

  /// The terms of a sum of gradient shares: an add read by nothing else is
  /// taken apart (sums associate), and so is an op linear in its first
  /// operand (a reshape, the gradient of a slice or of a gather): each share
  /// goes through it alone, on the stage computing the share, so that no
  /// gradient of a table computed again crosses a boundary.
  void collectShares(Value value, SmallVector<Operation *> chain,
                     SmallVectorImpl<Share> &shares) {
    Operation *op = value.getDefiningOp();
    if (op && value.hasOneUse()) {
      auto add = dyn_cast<AddOp>(op);
      if (add && add.getLhs().getType() == value.getType() &&
          add.getRhs().getType() == value.getType()) {
        summingOps.insert(add);
        collectShares(add.getLhs(), chain, shares);
        collectShares(add.getRhs(), chain, shares);
        return;
      }
      if (isLinearInFirstOperand(op)) {
        summingOps.insert(op);
        chain.insert(chain.begin(), op);
        collectShares(op->getOperand(0), chain, shares);
        return;
      }
    }
    shares.push_back({value, chain});
  }

  /// Whether `op` is linear in its first operand, its others (a gather's
  /// indices: T5's relative position buckets) computed again anywhere.
  bool isLinearInFirstOperand(Operation *op) {
    if (isa<ReshapeOp, TransposeOp, SqueezeOp, UnsqueezeOp, FlattenOp,
            ReduceSumOp, SliceGradOp, NegOp>(op))
      return op->getNumOperands() == 1;
    if (!isa<GatherGradOp>(op))
      return false;
    return llvm::all_of(op->getOperands().drop_front(),
                        [&](Value other) { return isRecomputable(other); });
  }

  LogicalResult buildStage(OpBuilder &b, int s);

  /// The shares of a shared parameter's gradient that stage `s` computes.
  SmallVector<Share> stageShare(const SharedParameter &shared, int s) {
    SmallVector<Share> mine;
    for (const Share &share : shared.shares) {
      Operation *producer = share.term.getDefiningOp();
      int stage = producer ? stageOf(producer) : kFloating;
      if (stage == s || (stage == kFloating && s == 0))
        mine.push_back(share);
    }
    return mine;
  }

  func::FuncOp step;
  /// Virtual stages (programs).
  int stages;
  int seedPosition = INT_MAX;
  llvm::DenseMap<Operation *, int> position;
  llvm::DenseMap<Value, Cone> cones;
  /// Stages that compute a value from a parameter again, per parameter.
  llvm::DenseMap<Value, std::set<int>> recomputedOn;
  /// The values crossing into each stage, forward and backward, in order.
  llvm::DenseMap<int, SmallVector<Value>> activationsInto, gradientsInto;
  std::vector<SharedParameter> sharedParameters;
  llvm::DenseSet<Operation *> summingOps;
};

/// Builds one stage's function: its arguments as its ops first read them.
class StageBuilder {
public:
  StageBuilder(func::FuncOp step, func::FuncOp stage, OpBuilder &b)
      : step(step), stage(stage), b(b) {}

  /// `value` in the stage: mapped, an argument added, or (depending on no
  /// parameter) its producer cloned.
  Value get(Value value) {
    if (Value mapped = map.lookupOrNull(value))
      return mapped;
    if (auto arg = dyn_cast<BlockArgument>(value))
      return addArgument(value, step.getArgAttrDict(arg.getArgNumber()));
    Operation *producer = value.getDefiningOp();
    for (Value operand : producer->getOperands())
      get(operand);
    b.clone(*producer, map);
    return map.lookup(value);
  }

  Value addArgument(Value value, DictionaryAttr attrs) {
    Block &body = stage.getBody().front();
    Value arg = body.addArgument(value.getType(), value.getLoc());
    argAttrs.push_back(attrs ? attrs : DictionaryAttr::get(stage.getContext()));
    map.map(value, arg);
    return arg;
  }

  void clone(Operation *op) {
    for (Value operand : op->getOperands())
      get(operand);
    b.clone(*op, map);
  }

  void addResult(Value value, DictionaryAttr attrs) {
    results.push_back(get(value));
    resultAttrs.push_back(attrs);
  }

  /// A shared parameter's gradient on this stage: the sum of its shares
  /// here (zeros without), a partial sum over "pp" too.
  void addShare(ArrayRef<Share> shares, Value parameter, DictionaryAttr attrs) {
    Value sum;
    for (const Share &share : shares) {
      Value here = get(share.term);
      for (Operation *op : share.through) {
        IRMapping through;
        for (Value other : op->getOperands().drop_front())
          through.map(other, get(other));
        through.map(op->getOperand(0), here);
        here = b.clone(*op, through)->getResult(0);
      }
      sum = sum ? AddOp::create(b, here.getLoc(), sum, here).getResult() : here;
    }
    if (!sum) {
      auto type = cast<RankedTensorType>(get(parameter).getType());
      sum = ConstantOp::create(
          b, parameter.getLoc(),
          DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), 0)));
    }
    results.push_back(sum);
    resultAttrs.push_back(withPipelinePartial(attrs));
  }

  DictionaryAttr withPipelinePartial(DictionaryAttr attrs) {
    Builder builder(stage.getContext());
    NamedAttrList list(attrs);
    SmallVector<Attribute> partial;
    if (auto axes =
            dyn_cast_or_null<ArrayAttr>(list.get(BmDialect::kPartialAttrName)))
      partial.append(axes.begin(), axes.end());
    partial.push_back(builder.getStringAttr(::bm::plan::kPipelineAxis));
    list.set(BmDialect::kPartialAttrName, builder.getArrayAttr(partial));
    return list.getDictionary(stage.getContext());
  }

  void finish(Location loc) {
    func::ReturnOp::create(b, loc, results);
    Block &body = stage.getBody().front();
    stage.setType(FunctionType::get(stage.getContext(),
                                    body.getArgumentTypes(),
                                    ValueRange(results).getTypes()));
    stage.setAllArgAttrs(argAttrs);
    stage.setAllResultAttrs(resultAttrs);
  }

private:
  func::FuncOp step, stage;
  OpBuilder &b;
  IRMapping map;
  SmallVector<DictionaryAttr> argAttrs, resultAttrs;
  SmallVector<Value> results;
};

/// An argument or result between stages, named after its kind.
DictionaryAttr kindAttr(MLIRContext *context, StringRef kind) {
  Builder b(context);
  return b.getDictionaryAttr(
      {b.getNamedAttr(BmDialect::kParamKindAttrName, b.getStringAttr(kind)),
       b.getNamedAttr(BmDialect::kParamNameAttrName, b.getStringAttr(kind))});
}

LogicalResult StageSplitter::buildStage(OpBuilder &b, int s) {
  MLIRContext *context = step.getContext();
  b.setInsertionPoint(step);
  auto stage = func::FuncOp::create(b, step.getLoc(),
                                    ("stage_" + Twine(s)).str(),
                                    FunctionType::get(context, {}, {}));
  b.setInsertionPointToStart(stage.addEntryBlock());
  StageBuilder builder(step, stage, b);
  // Every stage takes all the data (tokens or images, and labels), read or
  // not: each draws the same batches, and keeps what it reads.
  for (BlockArgument arg : step.getArguments())
    if (!isParameter(arg))
      builder.get(arg);
  for (const SharedParameter &shared : sharedParameters)
    builder.get(shared.arg);
  for (Value in : activationsInto.lookup(s))
    builder.addArgument(in, kindAttr(context, BmDialect::kKindActivation));
  for (Value in : gradientsInto.lookup(s))
    builder.addArgument(in, kindAttr(context, BmDialect::kKindActivationGrad));
  bool marked = false;
  for (Operation &op : step.getBody().front()) {
    if (stageOf(&op) != s || isa<func::ReturnOp>(op) ||
        summingOps.contains(&op))
      continue;
    size_t before = stage.getBody().front().getOperations().size();
    builder.clone(&op);
    // The stage's backward starts at its first backward op (or what that
    // op's operands needed cloned first).
    if (!marked && isBackward(&op)) {
      auto &ops = stage.getBody().front().getOperations();
      auto first = std::next(ops.begin(), before);
      first->setAttr(BmDialect::kGradientSeedAttrName, UnitAttr::get(context));
      marked = true;
    }
  }
  auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
  llvm::DenseSet<unsigned> sharedResults;
  for (const SharedParameter &shared : sharedParameters)
    sharedResults.insert(shared.result);
  for (OpOperand &operand : ret->getOpOperands()) {
    Operation *producer = operand.get().getDefiningOp();
    if (!producer || stageOf(producer) != s ||
        sharedResults.contains(operand.getOperandNumber()))
      continue;
    DictionaryAttr attrs = step.getResultAttrDict(operand.getOperandNumber());
    builder.addResult(operand.get(), attrs);
  }
  for (const SharedParameter &shared : sharedParameters)
    if (shared.result >= 0)
      builder.addShare(stageShare(shared, s), shared.arg,
                       step.getResultAttrDict(shared.result));
  // Sent in the order the neighbour takes them as arguments.
  for (Value out : activationsInto.lookup(s + 1))
    builder.addResult(out, kindAttr(context, BmDialect::kKindSend));
  for (Value out : gradientsInto.lookup(s - 1))
    builder.addResult(out, kindAttr(context, BmDialect::kKindSendGrad));
  builder.finish(step.getLoc());
  return success();
}

} // namespace

struct SplitStagesPass : impl::BmSplitStagesPassBase<SplitStagesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    if (!step || !mesh) {
      module.emitError("bm-split-stages needs a partitioned @train_step and "
                       "the plan's bm.mesh @mesh");
      return signalPassFailure();
    }
    int64_t axis = mesh.getMesh().findAxis(::bm::plan::kPipelineAxis);
    int pipelineRanks =
        axis < 0 ? 1 : static_cast<int>(mesh.getMesh().getAxisSizes()[axis]);
    int stages = pipelineRanks;
    // Interleaved: pp x v virtual stages, each a program.
    step.walk([&](Operation *op) {
      if (auto v = op->getAttrOfType<IntegerAttr>(
              BmDialect::kVirtualStageAttrName))
        stages = std::max(stages, static_cast<int>(v.getInt()) + 1);
    });
    if (stages > 1 && failed(StageSplitter(step, stages).run()))
      signalPassFailure();
  }
};

} // namespace mlir::bm
