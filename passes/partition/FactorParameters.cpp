//===- FactorParameters.cpp - parameters stored in a strided view ---------===//

#include "passes/partition/FactorParameters.h"

#include "bm/BmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::bm {

namespace {

/// A value and the dim of it that holds the columns.
struct Column {
  Value value;
  size_t dim;
};

class ColumnChain {
public:
  ColumnChain(const StridedDim &dim, Operation *reader, ShardingState &state)
      : want(dim), reader(reader), state(state) {}

  /// Collects `value`'s chain back to parameters; false where it breaks.
  bool collect(Value value, size_t dim) {
    if (!splitAsWanted(value, dim) || !readOnlyByChain(value))
      return false;
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      if (!isParameter(arg))
        return false;
      params.push_back({value, dim});
      return true;
    }
    Operation *def = value.getDefiningOp();
    bool kept = false;
    if (auto add = dyn_cast<AddOp>(def))
      kept = collectBroadcast(add, dim);
    else if (auto matmul = dyn_cast<MatMulOp>(def))
      kept = collectWeightColumns(matmul, dim);
    else if (auto gemm = dyn_cast<GemmOp>(def))
      kept = collectGemmColumns(gemm, dim);
    else if (auto reshape = dyn_cast<ReshapeOp>(def))
      kept = collectRowsRegrouped(reshape, dim);
    if (!kept)
      return false;
    values.push_back({value, dim});
    chainOps.insert(def);
    return true;
  }

  /// Stores the parameters factored and records every value strided.
  void apply(OpBuilder &b) {
    for (const Column &param : params)
      factor(cast<BlockArgument>(param.value), param.dim, b);
    for (const Column &column : values)
      record(column.value, column.dim);
  }

private:
  bool splitAsWanted(Value value, size_t dim) const {
    if (!state.has(value) || state.stridedAt(value, dim))
      return false;
    const ValueSharding &sharding = state[value];
    return !sharding.isPartial() && dim < sharding.dims.size() &&
           sharding.dims[dim] == want.axes();
  }

  /// Every op that read `value` before `reader` is one the chain rewrites
  /// the layout of (later readers see the strided record).
  bool readOnlyByChain(Value value) {
    for (Operation *user : value.getUsers()) {
      if (user == reader || !user->isBeforeInBlock(reader))
        continue;
      readersToCheck.push_back(user);
    }
    return true;
  }

  bool isParameter(BlockArgument arg) const {
    auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    auto kind = func ? func.getArgAttrOfType<StringAttr>(
                           arg.getArgNumber(), BmDialect::kParamKindAttrName)
                     : StringAttr();
    return kind && kind.getValue() == BmDialect::kKindParameter;
  }

  /// An add keeps columns apart; an operand broadcast along the dim (a
  /// bias) has none of its own there.
  bool collectBroadcast(AddOp add, size_t dim) {
    int64_t rank = cast<RankedTensorType>(add.getType()).getRank();
    for (Value operand : add->getOperands()) {
      auto type = cast<RankedTensorType>(operand.getType());
      int64_t offset = rank - type.getRank();
      int64_t d = static_cast<int64_t>(dim) - offset;
      if (d < 0 || type.getDimSize(d) == 1)
        continue;
      if (!collect(operand, d))
        return false;
    }
    return true;
  }

  /// A product's result columns are its weight's.
  bool collectWeightColumns(MatMulOp matmul, size_t dim) {
    auto result = cast<RankedTensorType>(matmul.getType());
    auto weight = cast<RankedTensorType>(matmul->getOperand(1).getType());
    if (static_cast<int64_t>(dim) != result.getRank() - 1 ||
        weight.getRank() < 2)
      return false;
    return collect(matmul->getOperand(1), weight.getRank() - 1);
  }

  /// A gemm's result columns are op(B)'s, its bias (C) broadcast or
  /// laid out like the result.
  bool collectGemmColumns(GemmOp gemm, size_t dim) {
    if (dim != 1)
      return false;
    if (!collect(gemm.getB(), gemm.getTransB() ? 0 : 1))
      return false;
    Value bias = gemm.getC();
    if (!bias)
      return true;
    auto type = cast<RankedTensorType>(bias.getType());
    int64_t d = static_cast<int64_t>(dim) - (2 - type.getRank());
    return d < 0 || type.getDimSize(d) == 1 || collect(bias, d);
  }

  /// A reshape that regroups only the dims before the last keeps the
  /// columns (HF GPT-2's Conv1D: rows flattened around the product).
  bool collectRowsRegrouped(ReshapeOp reshape, size_t dim) {
    auto in = cast<RankedTensorType>(reshape->getOperand(0).getType());
    auto out = cast<RankedTensorType>(reshape.getType());
    if (static_cast<int64_t>(dim) != out.getRank() - 1 ||
        in.getShape().back() != out.getShape().back())
      return false;
    return collect(reshape->getOperand(0), in.getRank() - 1);
  }

  StridedDim layoutAt(size_t dim) const {
    StridedDim layout = want;
    layout.dim = dim;
    return layout;
  }

  void record(Value value, size_t dim) {
    state.strided[value].push_back(layoutAt(dim));
  }

  /// `param` becomes its factored view, read through a reshape.
  void factor(BlockArgument param, size_t dim, OpBuilder &b) {
    auto model = cast<RankedTensorType>(param.getType());
    SmallVector<int64_t> shape(model.getShape().take_front(dim));
    shape.append(want.factorSizes.begin(), want.factorSizes.end());
    shape.append(model.getShape().begin() + dim + 1, model.getShape().end());
    ValueSharding modelSharding = state[param], view = modelSharding;
    view.dims.erase(view.dims.begin() + dim);
    view.dims.insert(view.dims.begin() + dim, want.factorAxes.begin(),
                     want.factorAxes.end());

    // Read right before its first reader, and placed as it is (codegen's
    // layers, pipeline stages).
    OpBuilder::InsertionGuard guard(b);
    Operation *firstReader = *llvm::min_element(
        SmallVector<Operation *>(param.getUsers()),
        [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    b.setInsertionPoint(firstReader);
    param.setType(model.clone(shape));
    Value read = ReshapeOp::create(b, param.getLoc(), model, param);
    for (StringRef name : BmDialect::placementAttrNames())
      if (Attribute attr = firstReader->getAttr(name))
        read.getDefiningOp()->setAttr(name, attr);
    param.replaceAllUsesExcept(read, read.getDefiningOp());
    state.of[param] = view;
    state.of[read] = modelSharding;
    record(read, dim);
    state.factored[param] = read;
    auto func = cast<func::FuncOp>(param.getOwner()->getParentOp());
    func.setArgAttr(param.getArgNumber(), BmDialect::kShardingAttrName,
                    view.toAttr(func.getContext(), state.meshRef));
    func.setArgAttr(param.getArgNumber(), BmDialect::kModelShapeAttrName,
                    b.getDenseI64ArrayAttr(model.getShape()));
  }

public:
  /// The readers before `reader` of the chain's values must all be the
  /// chain's own ops.
  bool readersInChain() const {
    return llvm::all_of(readersToCheck,
                        [&](Operation *op) { return chainOps.count(op); });
  }

private:
  StridedDim want;
  Operation *reader;
  ShardingState &state;
  SmallVector<Column> params, values;
  llvm::SmallPtrSet<Operation *, 8> chainOps;
  SmallVector<Operation *> readersToCheck;
};

} // namespace

Value factorParameters(Value value, const StridedDim &dim, Operation *reader,
                       OpBuilder &b, ShardingState &state) {
  ColumnChain chain(dim, reader, state);
  if (!chain.collect(value, dim.dim) || !chain.readersInChain())
    return {};
  chain.apply(b);
  return state.factored.lookup(value) ? state.factored.lookup(value) : value;
}

} // namespace mlir::bm
