//===- Propagate.cpp - an op's sharding from its operands' ----------------===//

#include "passes/partition/Propagate.h"

#include "bm/BmOps.h"
#include "bm/ShardingRule.h"

#include <algorithm>
#include <set>

namespace mlir::bm {

namespace {

using ::bm::FactorKind;
using ::bm::ShardingRule;

/// How partial sums may flow through an op. (Which ops are linear in
/// which operands is a fact about the op; it belongs in ODS as a trait
/// once a second pass needs it.)
enum class Linearity {
  None,        // reduce every partial operand first
  Additive,    // linear in all operands together: all partial alike
  OneOperand,  // multilinear: one operand may be partial
  FirstOperand // linear in operand 0 only
};

Linearity linearityOf(Operation *op) {
  if (isa<AddOp, SubOp, ConcatOp, ReshapeOp, TransposeOp, SqueezeOp,
          UnsqueezeOp, FlattenOp, ExpandOp, NegOp, ReduceSumOp, SliceOp,
          SplitOp, SliceGradOp, CastOp>(op))
    return Linearity::Additive;
  if (isa<MulOp, MatMulOp, EinsumOp, ConvGradInputOp, ConvGradWeightOp>(op))
    return Linearity::OneOperand;
  if (isa<DivOp, GatherGradOp>(op))
    return Linearity::FirstOperand;
  return Linearity::None;
}

/// The partial axes that flow through `op` unreduced.
AxisList passingPartials(Operation *op, const ShardingState &state) {
  SmallVector<AxisList> partials;
  for (Value operand : op->getOperands())
    partials.push_back(state[operand].partial);
  auto partialCount = llvm::count_if(
      partials, [](const AxisList &axes) { return !axes.empty(); });
  if (partialCount == 0)
    return {};
  switch (linearityOf(op)) {
  case Linearity::Additive:
    if (llvm::all_equal(partials))
      return partials.front();
    return {};
  case Linearity::OneOperand:
    for (const AxisList &axes : partials)
      if (!axes.empty())
        return axes;
    return {};
  case Linearity::FirstOperand:
    return partials.front();
  case Linearity::None:
    return {};
  }
  return {};
}

/// Whether operand `i` may stay a partial sum over `passing`.
bool keepsPartial(Operation *op, unsigned i, const AxisList &passing,
                  const ShardingState &state) {
  const AxisList &partial = state[op->getOperand(i)].partial;
  if (partial.empty() || partial != passing)
    return false;
  switch (linearityOf(op)) {
  case Linearity::Additive:
    return true;
  case Linearity::OneOperand:
    for (unsigned j = 0; j < i; ++j)
      if (!state[op->getOperand(j)].partial.empty())
        return false;
    return true;
  case Linearity::FirstOperand:
    return i == 0;
  case Linearity::None:
    return false;
  }
  return false;
}

class OpPropagation {
public:
  OpPropagation(Operation *op, OpBuilder &b, ShardingState &state)
      : op(op), b(b), state(state) {}

  LogicalResult run() {
    auto iface = dyn_cast<ShardingRuleOpInterface>(op);
    if (!iface)
      return op->emitOpError("has no sharding rule: bm-partition cannot "
                             "split it");
    rule = iface.getShardingRule();
    if (rule.operandFactors.size() != op->getNumOperands() ||
        rule.resultFactors.size() != op->getNumResults())
      return op->emitOpError("has no sharding rule for its operands: "
                             "bm-partition cannot split it");
    passing = passingPartials(op, state);
    factorAxes.assign(rule.numFactors(), {});
    used.insert(passing.begin(), passing.end());
    if (failed(assignFromOperands()))
      return failure();
    assignFromPlan();
    dropUnsummable();
    if (failed(refuseSplitTables()) || failed(reshardOperands()) ||
        failed(shardResults()))
      return failure();
    scaleMeans();
    return success();
  }

private:
  LogicalResult strided(StringRef what, unsigned index, size_t dim) {
    return op->emitOpError()
           << "needs a strided sharding of its " << what << " #" << index
           << " dim " << dim
           << " (a minor factor of a merged dim split over mesh axes, as in "
              "a fused QKV projection split by heads), which bm-partition "
              "does not support yet";
  }

  LogicalResult assignFromOperands() {
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      const ValueSharding &sharding = state[operand];
      for (auto [d, axes] : llvm::enumerate(sharding.dims)) {
        if (axes.empty() || d >= rule.operandFactors[i].size() ||
            rule.operandFactors[i][d].empty())
          continue;
        const std::vector<int> &factors = rule.operandFactors[i][d];
        int f = factors.front();
        if (factors.size() > 1 &&
            rule.factorSizes[f] % groupSize(state.mesh, axes) != 0)
          return strided("operand", i, d);
        assign(f, axes);
      }
    }
    return success();
  }

  void assign(int f, const AxisList &axes) {
    if (rule.factorKinds[f] == FactorKind::NeedReplication ||
        !factorAxes[f].empty() ||
        llvm::any_of(axes, [&](const std::string &a) { return used.count(a); }))
      return;
    factorAxes[f] = axes;
    used.insert(axes.begin(), axes.end());
  }

  /// Factors no operand splits (a broadcast's new dims) follow the plan's
  /// result sharding where the op has one; sources (constants, iota) stay
  /// whole and their readers slice them.
  void assignFromPlan() {
    auto planned = op->getAttrOfType<ArrayAttr>(BmDialect::kShardingAttrName);
    // A one-hot's classes are numbered globally: its readers slice them.
    if (!planned || op->getNumOperands() == 0 || isa<OneHotOp>(op))
      return;
    for (auto [r, attr] : llvm::enumerate(planned)) {
      ValueSharding sharding =
          ValueSharding::fromAttr(cast<ShardingAttr>(attr));
      for (auto [d, axes] : llvm::enumerate(sharding.dims))
        if (!axes.empty() && rule.resultFactors[r][d].size() == 1 &&
            rule.factorKinds[rule.resultFactors[r][d][0]] ==
                FactorKind::Parallel)
          assign(rule.resultFactors[r][d][0], axes);
    }
  }

  bool inResults(int f) const {
    for (const auto &result : rule.resultFactors)
      for (const auto &dim : result)
        if (llvm::is_contained(dim, f))
          return true;
    return false;
  }

  /// A max or a top-k over a split dim is no sum of its parts.
  void dropUnsummable() {
    if (!isa<ReduceMaxOp, TopKOp, CumSumOp>(op))
      return;
    for (int f = 0; f < rule.numFactors(); ++f)
      if (!inResults(f))
        factorAxes[f].clear();
  }

  /// Gathering rows of a table split by rows would need each device to
  /// mask the ids it does not own (Megatron's vocabulary-parallel
  /// embedding); not built yet.
  LogicalResult refuseSplitTables() {
    if (!isa<GatherOp>(op))
      return success();
    for (int f : rule.operandFactors[0][cast<GatherOp>(op).getAxis()])
      if (!factorAxes[f].empty())
        return op->emitOpError("gathers from a table split over its rows "
                               "(vocabulary-parallel embedding), which "
                               "bm-partition does not support yet");
    return success();
  }

  FailureOr<ValueSharding> wanted(const std::vector<std::vector<int>> &dims,
                                  StringRef what, unsigned index) {
    ValueSharding sharding;
    for (auto [d, factors] : llvm::enumerate(dims)) {
      AxisList axes;
      for (auto [k, f] : llvm::enumerate(factors)) {
        if (factorAxes[f].empty())
          continue;
        if (k > 0) {
          (void)strided(what, index, d);
          return failure();
        }
        axes = factorAxes[f];
      }
      sharding.dims.push_back(axes);
    }
    return sharding;
  }

  LogicalResult reshardOperands() {
    for (OpOperand &operand : op->getOpOperands()) {
      unsigned i = operand.getOperandNumber();
      FailureOr<ValueSharding> want =
          wanted(rule.operandFactors[i], "operand", i);
      if (failed(want))
        return failure();
      if (keepsPartial(op, i, passing, state))
        want->partial = passing;
      FailureOr<Value> value =
          reshardValue(b, op->getLoc(), operand.get(), *want, state);
      if (failed(value))
        return failure();
      operand.set(*value);
    }
    return success();
  }

  LogicalResult shardResults() {
    for (auto [r, result] : llvm::enumerate(op->getResults())) {
      FailureOr<ValueSharding> sharding =
          wanted(rule.resultFactors[r], "result", r);
      if (failed(sharding))
        return failure();
      std::set<std::string> partial(passing.begin(), passing.end());
      for (int f = 0; f < rule.numFactors(); ++f) {
        bool inResult = llvm::any_of(rule.resultFactors[r], [&](auto &dim) {
          return llvm::is_contained(dim, f);
        });
        if (!inResult)
          partial.insert(factorAxes[f].begin(), factorAxes[f].end());
      }
      sharding->partial.assign(partial.begin(), partial.end());
      state.of[result] = *sharding;
    }
    return success();
  }

  /// Devices splitting the dims that `op` averages over: its local mean is
  /// that many times too large a share of the global one.
  int64_t meanDivisor() {
    AxisList axes;
    if (isa<CrossEntropyGradOp>(op)) {
      axes = factorAxes[rule.operandFactors[0][0].front()];
    } else if (isa<CrossEntropyOp, ReduceMeanOp, GlobalAvgPoolOp>(op)) {
      for (int f = 0; f < rule.numFactors(); ++f)
        if (rule.factorKinds[f] == FactorKind::Reduction && !inResults(f))
          axes.insert(axes.end(), factorAxes[f].begin(), factorAxes[f].end());
    }
    return groupSize(state.mesh, axes);
  }

  void scaleMeans() {
    int64_t divisor = meanDivisor();
    if (divisor == 1)
      return;
    Value result = op->getResult(0);
    auto type = cast<RankedTensorType>(result.getType());
    b.setInsertionPointAfter(op);
    auto scalarType = RankedTensorType::get({}, type.getElementType());
    Value scale = ConstantOp::create(
        b, op->getLoc(),
        DenseElementsAttr::get(
            scalarType, b.getFloatAttr(type.getElementType(), 1.0 / divisor)));
    auto scaled = MulOp::create(b, op->getLoc(), result, scale);
    result.replaceAllUsesExcept(scaled, scaled);
    state.of[scale] = ValueSharding::replicated(0);
    state.of[scaled] = state[result];
  }

  Operation *op;
  OpBuilder &b;
  ShardingState &state;
  ShardingRule rule;
  AxisList passing;
  std::vector<AxisList> factorAxes;
  std::set<std::string> used;
};

} // namespace

LogicalResult propagateThrough(Operation *op, OpBuilder &b,
                               ShardingState &state) {
  return OpPropagation(op, b, state).run();
}

} // namespace mlir::bm
