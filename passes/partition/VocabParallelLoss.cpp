//===- VocabParallelLoss.cpp - cross-entropy on class-split logits --------===//

#include "passes/partition/VocabParallelLoss.h"

#include "bm/BmOps.h"

#include <algorithm>

namespace mlir::bm {

namespace {

/// Statistics per row and device: max, sum of exponentials, label's logit.
constexpr int64_t kStatsPerDevice = 3;

Value logitsOf(Operation *op) {
  if (auto loss = dyn_cast<CrossEntropyOp>(op))
    return loss.getLogits();
  if (auto grad = dyn_cast<CrossEntropyGradOp>(op))
    return grad.getLogits();
  return {};
}

Value labelsOf(Operation *op) {
  if (auto loss = dyn_cast<CrossEntropyOp>(op))
    return loss.getLabels();
  return cast<CrossEntropyGradOp>(op).getLabels();
}

ArrayAttr axesAttr(OpBuilder &b, const AxisList &axes) {
  SmallVector<StringRef> names(axes.begin(), axes.end());
  return b.getStrArrayAttr(names);
}

} // namespace

bool VocabParallelLoss::appliesTo(Operation *op) const {
  Value logits = logitsOf(op);
  if (!logits || !state.has(logits))
    return false;
  const ValueSharding &sharding = state[logits];
  return sharding.dims.size() == 2 && !sharding.dims[1].empty() &&
         !sharding.isPartial();
}

FailureOr<Value> VocabParallelLoss::labelsLike(Value labels, Value logits,
                                               OpBuilder &b, Location loc) {
  ValueSharding rows;
  rows.dims = {state[logits].dims[0]};
  return reshardValue(b, loc, labels, rows, state);
}

FailureOr<Value> VocabParallelLoss::gatheredStats(Value logits, Value labels,
                                                  OpBuilder &b, Location loc) {
  if (Value known = statsOf.lookup({logits, labels}))
    return known;
  FailureOr<Value> rowLabels = labelsLike(labels, logits, b, loc);
  if (failed(rowLabels))
    return failure();
  const ValueSharding &split = state[logits];
  const AxisList &rowAxes = split.dims[0], &classAxes = split.dims[1];
  int64_t devices = groupSize(state.mesh, classAxes);
  int64_t rows = cast<RankedTensorType>(logits.getType()).getDimSize(0);
  // Global [devices x 3, N]: each device holds its own three rows.
  auto type = RankedTensorType::get({devices * kStatsPerDevice, rows},
                                    b.getF32Type());
  Value stats = CrossEntropyStatsOp::create(b, loc, type, logits, *rowLabels,
                                            state.meshRef,
                                            axesAttr(b, classAxes));
  ValueSharding local;
  local.dims = {classAxes, rowAxes};
  state.of[stats] = local;
  ValueSharding shared;
  shared.dims = {{}, rowAxes};
  FailureOr<Value> gathered = reshardValue(b, loc, stats, shared, state);
  if (succeeded(gathered))
    statsOf[{logits, labels}] = *gathered;
  return gathered;
}

Value VocabParallelLoss::meanShare(Value value, Value logits, OpBuilder &b,
                                   Location loc) {
  int64_t devices = groupSize(state.mesh, state[logits].dims[0]);
  if (devices == 1)
    return value;
  return scaledValue(b, loc, value, 1.0 / devices, state);
}

LogicalResult VocabParallelLoss::rewrite(Operation *op, OpBuilder &b) {
  Location loc = op->getLoc();
  Value logits = logitsOf(op), labels = labelsOf(op);
  FailureOr<Value> stats = gatheredStats(logits, labels, b, loc);
  FailureOr<Value> rowLabels = labelsLike(labels, logits, b, loc);
  if (failed(stats) || failed(rowLabels))
    return failure();
  const ValueSharding &split = state[logits];
  Value result;
  if (isa<CrossEntropyOp>(op)) {
    result = CrossEntropyFromStatsOp::create(b, loc, op->getResult(0).getType(),
                                             *stats, *rowLabels);
    // Each device's mean covers its rows: a partial sum over their axes.
    ValueSharding loss;
    loss.partial = split.dims[0];
    std::sort(loss.partial.begin(), loss.partial.end());
    state.of[result] = loss;
  } else {
    auto grad = cast<CrossEntropyGradOp>(op);
    FailureOr<Value> dloss = reshardValue(
        b, loc, grad.getLossGrad(), ValueSharding::replicated(0), state);
    if (failed(dloss))
      return failure();
    result = CrossEntropyGradFromStatsOp::create(
        b, loc, logits.getType(), logits, *rowLabels, *stats, *dloss,
        state.meshRef, axesAttr(b, split.dims[1]));
    state.of[result] = split;
    // The gradient's rows are the logits' (a strided share where a batch
    // and a split sequence were flattened into them).
    if (auto strided = state.strided.find(logits);
        strided != state.strided.end())
      state.strided[result] = SmallVector<StridedDim, 1>(strided->second);
  }
  Value share = meanShare(result, logits, b, loc);
  op->getResult(0).replaceAllUsesWith(share);
  op->erase();
  return success();
}

} // namespace mlir::bm
