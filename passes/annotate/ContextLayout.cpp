//===- ContextLayout.cpp - context parallelism's positions ----------------===//

#include "passes/annotate/ContextLayout.h"

#include "bm/BmOps.h"
#include "bmrt/ContextLayout.h"
#include "passes/plan/Plan.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using mlir::bm::BmDialect;
using mlir::bm::ShardingAttr;

namespace bm::plan {

namespace {

bool splitsOverContext(ArrayAttr axes) {
  return llvm::any_of(axes, [](Attribute axis) {
    return cast<StringAttr>(axis).getValue() == kContextAxis;
  });
}

/// The values computed from the step's data (inputs, labels): they come in
/// the mirrored order already.
llvm::DenseSet<Value> fromData(func::FuncOp func) {
  llvm::DenseSet<Value> data;
  for (BlockArgument arg : func.getArguments()) {
    auto kind = func.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), BmDialect::kParamKindAttrName);
    if (kind && kind.getValue() != BmDialect::kKindParameter)
      data.insert(arg);
  }
  func.walk([&](Operation *op) {
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return data.contains(v); }))
      for (Value result : op->getResults())
        data.insert(result);
  });
  return data;
}

/// How `value` is split where it is made: its producer's planned result
/// sharding, or its argument's.
ShardingAttr madeAs(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    return func.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(),
                                               BmDialect::kShardingAttrName);
  }
  Operation *producer = value.getDefiningOp();
  auto results =
      producer->getAttrOfType<ArrayAttr>(BmDialect::kShardingAttrName);
  if (!results)
    return {};
  return cast<ShardingAttr>(results[cast<OpResult>(value).getResultNumber()]);
}

/// `sharding` with dim `dim` split over `axes`.
ShardingAttr withDim(ShardingAttr sharding, int64_t dim, ArrayAttr axes) {
  SmallVector<Attribute> dims(sharding.getDims().begin(),
                              sharding.getDims().end());
  dims[dim] = axes;
  return ShardingAttr::get(sharding.getContext(), sharding.getMesh(),
                           ArrayAttr::get(sharding.getContext(), dims),
                           sharding.getPartial());
}

class Reorderer {
public:
  Reorderer(func::FuncOp func, int64_t cp) : func_(func), cp_(cp) {}

  void run() {
    llvm::DenseSet<Value> data = fromData(func_);
    SmallVector<Operation *> readers;
    func_.walk([&](Operation *op) {
      if (op->hasAttr(BmDialect::kOperandShardingAttrName))
        readers.push_back(op);
    });
    for (Operation *reader : readers)
      for (OpOperand &use : reader->getOpOperands())
        reorder(reader, use, data.contains(use.get()));
  }

private:
  /// Puts operand `use` of `reader` in the order `reader` reads it.
  void reorder(Operation *reader, OpOperand &use, bool isData) {
    auto wanted =
        reader->getAttrOfType<ArrayAttr>(BmDialect::kOperandShardingAttrName);
    auto want = cast<ShardingAttr>(wanted[use.getOperandNumber()]);
    auto type = dyn_cast<RankedTensorType>(use.get().getType());
    if (!type)
      return;
    ShardingAttr made = isData ? madeAs(use.get()) : ShardingAttr();
    for (int64_t dim = 0; dim < type.getRank(); ++dim) {
      int64_t length = type.getDimSize(dim);
      if (length % (2 * cp_) != 0)
        continue;
      bool readSplit = splitsOverContext(cast<ArrayAttr>(want.getDims()[dim]));
      bool madeSplit =
          made && splitsOverContext(cast<ArrayAttr>(made.getDims()[dim]));
      if (!isData && readSplit)
        use.set(gather(reader, use.get(), dim, want,
                       bmrt::mirroredOrder(length, cp_), /*intoLayout=*/true));
      else if (isData && madeSplit && !readSplit)
        use.set(gather(reader, use.get(), dim, want,
                       bmrt::inverseOrder(bmrt::mirroredOrder(length, cp_)),
                       /*intoLayout=*/false));
    }
  }

  /// value[order] along `dim`, made where `reader` runs: into the layout
  /// (each rank gathers its places of a whole value) or back out of it
  /// (every rank gathers the whole value, read whole).
  Value gather(Operation *reader, Value value, int64_t dim, ShardingAttr want,
               const std::vector<int64_t> &order, bool intoLayout) {
    OpBuilder b(reader);
    MLIRContext *context = b.getContext();
    auto indexType =
        RankedTensorType::get({int64_t(order.size())}, b.getI64Type());
    auto indices = mlir::bm::ConstantOp::create(
        b, reader->getLoc(),
        DenseElementsAttr::get(indexType, ArrayRef(order)));
    auto gathered = mlir::bm::GatherOp::create(b, reader->getLoc(), value,
                                               indices.getResult(), dim);
    ArrayAttr none = b.getArrayAttr({});
    ArrayAttr dimAxes = cast<ArrayAttr>(want.getDims()[dim]);
    // Into the layout: the places are split as the reader wants the dim,
    // the value is read whole along it. Out of it: all whole.
    ShardingAttr places =
        ShardingAttr::get(context, want.getMesh(),
                          b.getArrayAttr({intoLayout ? dimAxes : none}), none);
    ShardingAttr whole = withDim(want, dim, none);
    for (StringRef name : BmDialect::placementAttrNames())
      if (Attribute attr = reader->getAttr(name)) {
        indices->setAttr(name, attr);
        gathered->setAttr(name, attr);
      }
    indices->setAttr(BmDialect::kShardingAttrName, b.getArrayAttr({places}));
    gathered->setAttr(BmDialect::kOperandShardingAttrName,
                      b.getArrayAttr({whole, places}));
    gathered->setAttr(BmDialect::kShardingAttrName, b.getArrayAttr({want}));
    return gathered.getResult();
  }

  func::FuncOp func_;
  int64_t cp_;
};

} // namespace

/// Context parallelism splits a causal attention's queries: each rank's
/// kernels must know where its queries sit among the gathered keys. Gives
/// every such bm.attention the positions of its queries (i64 [s]: t - s,
/// ..., t - 1, the default causal alignment), split as its queries are;
/// the partitioner slices each rank's share.
void placeContextQueries(func::FuncOp func) {
  using mlir::bm::AttentionOp;
  func.walk([&](AttentionOp attention) {
    auto operands = attention->getAttrOfType<ArrayAttr>(
        BmDialect::kOperandShardingAttrName);
    if (!attention.getCausal() || attention.getPositions() || !operands)
      return;
    auto q = cast<mlir::bm::ShardingAttr>(operands[0]);
    auto qType = cast<RankedTensorType>(attention.getQ().getType());
    int64_t rows = qType.getRank() - 2;
    auto queryAxes = cast<ArrayAttr>(q.getDims()[rows]);
    if (queryAxes.empty())
      return;
    OpBuilder b(attention);
    int64_t s = qType.getDimSize(rows);
    int64_t t = cast<RankedTensorType>(attention.getKt().getType())
                    .getDimSize(qType.getRank() - 1);
    SmallVector<int64_t> values;
    for (int64_t i = 0; i < s; ++i)
      values.push_back(t - s + i);
    auto type = RankedTensorType::get({s}, b.getI64Type());
    auto positions = mlir::bm::ConstantOp::create(
        b, attention.getLoc(), DenseElementsAttr::get(type, ArrayRef(values)));
    for (StringRef name : BmDialect::placementAttrNames())
      if (Attribute attr = attention->getAttr(name))
        positions->setAttr(name, attr);
    auto split = mlir::bm::ShardingAttr::get(b.getContext(), q.getMesh(),
                                             b.getArrayAttr({queryAxes}),
                                             b.getArrayAttr({}));
    positions->setAttr(BmDialect::kShardingAttrName, b.getArrayAttr({split}));
    attention.getPositionsMutable().assign(positions.getResult());
    SmallVector<Attribute> wanted(operands.begin(), operands.end());
    wanted.push_back(split);
    attention->setAttr(BmDialect::kOperandShardingAttrName,
                       b.getArrayAttr(wanted));
  });
}

void layOutMirroredContext(func::FuncOp func, int64_t cp) {
  Reorderer(func, cp).run();
}

} // namespace bm::plan
