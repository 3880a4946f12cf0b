//===- Propagate.cpp - an op's sharding from its operands' ----------------===//

#include "passes/partition/Propagate.h"
#include "passes/partition/FactorParameters.h"

#include "bm/BmOps.h"
#include "bm/ShardingRule.h"

#include <algorithm>
#include <optional>
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
    layoutOf.assign(rule.numFactors(), std::nullopt);
    used.insert(passing.begin(), passing.end());
    if (failed(assignFromOperands()))
      return failure();
    assignFromPlan();
    dropUnsummable();
    if (failed(reshardOperands()))
      return failure();
    scaleBias();
    if (failed(shardResults()))
      return failure();
    scaleMeans();
    gatherFromTableSlices();
    return success();
  }

private:
  LogicalResult assignFromOperands() {
    assignFromStrided();
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      const ValueSharding &sharding = state[operand];
      for (auto [d, axes] : llvm::enumerate(sharding.dims)) {
        if (axes.empty() || d >= rule.operandFactors[i].size() ||
            rule.operandFactors[i][d].empty())
          continue;
        // A merged dim's split goes to its major factor, else (a strided
        // layout, converted around the op) to the first that divides.
        const std::vector<int> &factors = rule.operandFactors[i][d];
        int64_t devices = groupSize(state.mesh, axes);
        auto divides = llvm::find_if(
            factors, [&](int f) { return rule.factorSizes[f] % devices == 0; });
        if (divides != factors.end())
          assign(*divides, axes);
      }
    }
    return success();
  }

  /// Operand dims that hold a strided share go first, so that the op
  /// keeps their layout: where the rule merges the same factors in the dim,
  /// their axes go to the split factor; where the dim is one factor, that
  /// factor carries the layout to the results.
  void assignFromStrided() {
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      for (const StridedDim &have : state.strided.lookup(operand)) {
        if (have.dim >= rule.operandFactors[i].size())
          continue;
        const std::vector<int> &factors = rule.operandFactors[i][have.dim];
        SmallVector<int64_t> sizes;
        for (int f : factors)
          sizes.push_back(rule.factorSizes[f]);
        if (sizes == have.factorSizes) {
          for (auto [k, f] : llvm::enumerate(factors))
            if (!have.factorAxes[k].empty())
              assign(f, have.factorAxes[k]);
        } else if (factors.size() == 1) {
          assign(factors[0], have.axes());
          if (factorAxes[factors[0]] == have.axes())
            layoutOf[factors[0]] = have;
        }
      }
    }
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

  /// A gather from a table split along its gathered dim (Megatron's
  /// vocabulary-parallel embedding): each device gathers the entries it
  /// holds and zeros for the others, and the rule's reduction factor has
  /// already made the result a partial sum over those axes.
  void gatherFromTableSlices() {
    auto gather = dyn_cast<GatherOp>(op);
    if (!gather)
      return;
    AxisList axes;
    for (int f : rule.operandFactors[0][gather.getAxis()])
      axes.insert(axes.end(), factorAxes[f].begin(), factorAxes[f].end());
    if (axes.empty())
      return;
    b.setInsertionPoint(op);
    SmallVector<StringRef> names(axes.begin(), axes.end());
    auto local = ShardGatherOp::create(
        b, op->getLoc(), gather.getType(), gather.getData(),
        gather.getIndices(), gather.getAxisAttr(), state.meshRef,
        b.getStrArrayAttr(names));
    // A copy: inserting into `of` may move what state[...] refers to.
    ValueSharding sharding = state[gather.getResult()];
    state.of[local.getResult()] = std::move(sharding);
    gather.getResult().replaceAllUsesWith(local.getResult());
    op->erase();
  }

  /// The sharding `dims` (factors per dim) give under the factors' axes.
  /// A dim whose share is strided (a merged dim whose splits are not
  /// contiguous, or a factor carrying an operand's strided layout) is also
  /// listed in `strided`: its sharding names its axes, major to minor.
  ValueSharding wanted(const std::vector<std::vector<int>> &dims,
                       SmallVectorImpl<StridedDim> &strided) {
    ValueSharding sharding;
    for (auto [d, factors] : llvm::enumerate(dims)) {
      if (factors.size() == 1 && layoutOf[factors[0]]) {
        StridedDim dim = *layoutOf[factors[0]];
        dim.dim = d;
        strided.push_back(dim);
      }
      StridedDim merged{d, {}, {}};
      for (int f : factors) {
        merged.factorSizes.push_back(rule.factorSizes[f]);
        merged.factorAxes.push_back(factorAxes[f]);
      }
      if (factors.size() > 1 && !merged.contiguous(state.mesh))
        strided.push_back(merged);
      sharding.dims.push_back(merged.axes());
    }
    return sharding;
  }

  /// Whether `dims` has `dim`'s layout at its dim.
  static bool hasLayout(ArrayRef<StridedDim> dims, const StridedDim &dim) {
    return llvm::any_of(dims, [&](const StridedDim &d) {
      return d.dim == dim.dim && d.sameLayout(dim);
    });
  }

  LogicalResult reshardOperands() {
    for (OpOperand &operand : op->getOpOperands()) {
      unsigned i = operand.getOperandNumber();
      SmallVector<StridedDim> strided;
      ValueSharding want = wanted(rule.operandFactors[i], strided);
      if (keepsPartial(op, i, passing, state))
        want.partial = passing;
      FailureOr<Value> value = operand.get();
      // A strided dim this op reads otherwise is made whole first.
      for (const StridedDim &have : state.strided.lookup(operand.get()))
        if (succeeded(value) && !hasLayout(strided, have))
          value = fromStrided(b, op->getLoc(), *value, have, state);
      if (failed(value))
        return failure();
      ValueSharding contiguous = want;
      for (const StridedDim &dim : strided)
        contiguous.dims[dim.dim] = state[*value].dims[dim.dim];
      value = reshardValue(b, op->getLoc(), *value, contiguous, state);
      for (const StridedDim &dim : strided) {
        if (failed(value) || hasLayout(state.strided.lookup(*value), dim))
          continue;
        if (Value factored = factorParameters(*value, dim, op, b, state))
          value = factored;
        else
          value = toStrided(b, op->getLoc(), *value, dim, want, state);
      }
      if (failed(value))
        return failure();
      operand.set(*value);
    }
    return success();
  }

  LogicalResult shardResults() {
    b.setInsertionPointAfter(op);
    for (auto [r, result] : llvm::enumerate(op->getResults())) {
      SmallVector<StridedDim> strided;
      ValueSharding sharding = wanted(rule.resultFactors[r], strided);
      std::set<std::string> partial(passing.begin(), passing.end());
      for (int f = 0; f < rule.numFactors(); ++f) {
        bool inResult = llvm::any_of(rule.resultFactors[r], [&](auto &dim) {
          return llvm::is_contained(dim, f);
        });
        if (!inResult)
          partial.insert(factorAxes[f].begin(), factorAxes[f].end());
      }
      sharding.partial.assign(partial.begin(), partial.end());
      state.of[result] = sharding;
      // A strided result stays strided; its readers convert it if they
      // need another layout.
      if (!strided.empty())
        state.strided[result].assign(strided.begin(), strided.end());
    }
    return success();
  }



  /// Gemm and conv add their bias to a sum over a factor: where that
  /// factor is split, every device's partial sum would carry the whole
  /// bias, so each adds its share. (The bias's gradient, the sum of the
  /// result's, is unchanged.)
  void scaleBias() {
    if (!isa<GemmOp, ConvOp>(op) || op->getNumOperands() < 3)
      return;
    AxisList axes;
    for (int f = 0; f < rule.numFactors(); ++f)
      if (!inResults(f))
        axes.insert(axes.end(), factorAxes[f].begin(), factorAxes[f].end());
    int64_t devices = groupSize(state.mesh, axes);
    if (devices == 1)
      return;
    Value bias = op->getOperand(2);
    Value share = scaled(bias, 1.0 / devices);
    op->setOperand(2, share);
  }

  Value scaled(Value value, double factor) {
    return scaledValue(b, op->getLoc(), value, factor, state);
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
    b.setInsertionPointAfter(op);
    Value share = scaled(result, 1.0 / divisor);
    result.replaceAllUsesExcept(share, share.getDefiningOp());
  }

  Operation *op;
  OpBuilder &b;
  ShardingState &state;
  ShardingRule rule;
  AxisList passing;
  std::vector<AxisList> factorAxes;
  std::set<std::string> used;
  /// Per factor, the strided layout an operand holds it in (its dim of
  /// one factor), which results carrying the factor keep.
  std::vector<std::optional<StridedDim>> layoutOf;
};

} // namespace

LogicalResult propagateThrough(Operation *op, OpBuilder &b,
                               ShardingState &state) {
  return OpPropagation(op, b, state).run();
}

} // namespace mlir::bm
