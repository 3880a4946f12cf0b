//===- ExtractModelGraph.cpp - bm IR to the planner's model graph ---------===//

#include "passes/plan/ExtractModelGraph.h"
#include "passes/plan/GradientReads.h"

#include "bm/BmOps.h"

#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace bm::plan {

/// The ONNX node name the importer put in the op's location, if any.
static std::string labelOf(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations()) {
      std::string label = labelOf(inner);
      if (!label.empty())
        return label;
    }
  return "";
}

static int elementBytes(Type element) {
  return std::max<int>(1, (element.getIntOrFloatBitWidth() + 7) / 8);
}

namespace {
/// Builds a ModelGraph value by value and op by op.
class Extractor {
public:
  Extractor(func::FuncOp func, int64_t batch, int granularity)
      : func(func), batch(batch), units(batch / granularity) {
    graph.batchGranularity = granularity;
  }

  llvm::Expected<ModelGraph> run() {
    graph.name = func.getSymName().str();
    if (llvm::Error err = addArguments())
      return std::move(err);
    for (Operation &op : func.getBody().front()) {
      if (isa<func::ReturnOp>(op)) {
        if (op.getNumOperands() > 0)
          graph.output = valueIndex.lookup(op.getOperand(0));
        continue;
      }
      if (llvm::Error err = addOp(op))
        return std::move(err);
    }
    for (auto [layer, cls] : llvm::enumerate(graph.layerClass))
      if (cls < 0)
        return llvm::createStringError(
            "layer " + std::to_string(layer) + " has no block class: run "
            "bm-fold before extracting the model graph");
    return std::move(graph);
  }

private:
  llvm::Expected<RankedTensorType> staticTensor(Value value,
                                                const std::string &what) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || !type.hasStaticShape())
      return llvm::createStringError(what + " has type " +
                                     debugString(value.getType()) +
                                     "; the planner needs static shapes");
    return type;
  }

  static std::string debugString(Type type) {
    std::string text;
    llvm::raw_string_ostream os(text);
    type.print(os);
    return text;
  }

  int addValue(ValueInfo info, Value value) {
    int index = static_cast<int>(graph.values.size());
    graph.values.push_back(std::move(info));
    valueIndex[value] = index;
    return index;
  }

  /// Fills shape, element bytes and kind; `batchDim` (or -1) is divided by
  /// the imported batch units so the shape is per unit.
  ValueInfo describe(RankedTensorType type, int batchDim) {
    ValueInfo info;
    info.shape.assign(type.getShape().begin(), type.getShape().end());
    if (batchDim >= 0 && info.shape[batchDim] % units == 0)
      info.shape[batchDim] /= units;
    info.batchDim = batchDim;
    info.elementBytes = elementBytes(type.getElementType());
    info.isFloat = isa<FloatType>(type.getElementType());
    return info;
  }

  llvm::Error addArguments() {
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto nameAttr =
          func.getArgAttrOfType<StringAttr>(i, mlir::bm::BmDialect::kParamNameAttrName);
      auto kindAttr =
          func.getArgAttrOfType<StringAttr>(i, mlir::bm::BmDialect::kParamKindAttrName);
      std::string name =
          nameAttr ? nameAttr.getValue().str() : "arg" + std::to_string(i);
      llvm::Expected<RankedTensorType> type =
          staticTensor(arg, "argument '" + name + "'");
      if (!type)
        return type.takeError();
      bool parameter = kindAttr && kindAttr.getValue() ==
                                       mlir::bm::BmDialect::kKindParameter;
      int batchDim = !parameter && type->getRank() > 0 &&
                             type->getDimSize(0) == batch
                         ? 0
                         : -1;
      ValueInfo info = describe(*type, batchDim);
      info.name = name;
      info.kind = parameter ? ValueKind::Parameter : ValueKind::Input;
      addValue(std::move(info), arg);
    }
    return llvm::Error::success();
  }

  /// The factors of `rule` that carry the batch: in the batch dim of each
  /// batch-carrying operand, the factors from the major end until their
  /// product is a multiple of the imported units ({b, s} gives b; a merged
  /// b*s gives itself; GShard's reshape of a batch b into groups {G, 2}, one
  /// group per unit of two samples, gives G).
  llvm::SmallVector<bool> findBatchFactors(Operation &op,
                                           const ShardingRule &rule) {
    llvm::SmallVector<bool> carries(rule.numFactors(), false);
    for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
      const ValueInfo &info = graph.values[valueIndex.lookup(operand)];
      if (info.batchDim < 0 || i >= rule.operandFactors.size())
        continue;
      const TensorFactors &dims = rule.operandFactors[i];
      if (info.batchDim >= static_cast<int>(dims.size()))
        continue;
      int64_t product = 1;
      for (int f : dims[info.batchDim]) {
        carries[f] = true;
        product *= rule.factorSizes[f];
        if (product % units == 0)
          break;
      }
    }
    return carries;
  }

  /// The factor that scales with the batch: the first batch-carrying factor
  /// whose size is a multiple of the imported units, or -1.
  int findBatchFactor(const ShardingRule &rule, ArrayRef<bool> carries) {
    for (int f = 0; f < rule.numFactors(); ++f)
      if (carries[f] && rule.factorSizes[f] % units == 0)
        return f;
    return -1;
  }

  llvm::Error addOp(Operation &op) {
    std::string label = labelOf(op.getLoc());
    std::string what = "op " + op.getName().getStringRef().str() +
                       (label.empty() ? "" : " ('" + label + "')");
    auto ruleOp = dyn_cast<mlir::bm::ShardingRuleOpInterface>(op);
    auto costOp = dyn_cast<mlir::bm::CostOpInterface>(op);
    if (!ruleOp || !costOp)
      return llvm::createStringError(
          what + " has no sharding rule or cost; the planner takes the "
                 "forward model as imported");
    OpInfo info;
    info.opName = op.getName().getStringRef().str();
    info.label = label;
    info.rule = ruleOp.getShardingRule();
    info.isContraction = costOp.isContraction();
    info.isView = op.hasTrait<mlir::bm::View>();
    info.isSoftmax = isa<mlir::bm::SoftmaxOp>(op);
    info.isTopK = isa<mlir::bm::TopKOp>(op);
    if (auto attention = dyn_cast<mlir::bm::AttentionOp>(op))
      info.isCausalAttention = attention.getCausal();
    info.flops = costOp.getFlops();
    info.gradientReads = gradientReadsOf(op);
    std::optional<::bm::cost::MemoryKernelClass> memoryClass =
        ::bm::cost::parseMemoryKernelClass(costOp.getMemoryKernelClass());
    if (!memoryClass)
      return llvm::createStringError(what + " names memory kernel class '" +
                                     costOp.getMemoryKernelClass().str() +
                                     "', which the cost model lacks");
    info.memoryClass = *memoryClass;
    if (auto layer = op.getAttrOfType<IntegerAttr>(
            mlir::bm::BmDialect::kLayerAttrName)) {
      info.layer = static_cast<int>(layer.getInt());
      // Layer classes in layer order; -1 until an op of the layer names it.
      if (info.layer >= graph.numLayers())
        graph.layerClass.resize(info.layer + 1, -1);
      if (auto cls = op.getAttrOfType<IntegerAttr>(
              mlir::bm::BmDialect::kBlockClassAttrName))
        graph.layerClass[info.layer] = cls.getInt();
    }
    for (Value operand : op.getOperands())
      info.operands.push_back(valueIndex.lookup(operand));

    llvm::SmallVector<bool> carries = findBatchFactors(op, info.rule);
    info.batchFactor = findBatchFactor(info.rule, carries);
    if (info.batchFactor >= 0) {
      info.rule.factorSizes[info.batchFactor] /= units;
      info.flops /= static_cast<double>(units);
    }
    int opIndex = static_cast<int>(graph.ops.size());
    for (auto [r, result] : llvm::enumerate(op.getResults())) {
      llvm::Expected<RankedTensorType> type =
          staticTensor(result, "result of " + what);
      if (!type)
        return type.takeError();
      // The first result dim that holds a batch-carrying factor.
      int batchDim = -1;
      if (r < info.rule.resultFactors.size())
        for (auto [d, factors] : llvm::enumerate(info.rule.resultFactors[r]))
          if (batchDim < 0 &&
              llvm::any_of(factors, [&](int f) { return carries[f]; }))
            batchDim = static_cast<int>(d);
      ValueInfo value = describe(*type, batchDim);
      value.name = (label.empty() ? info.opName : label) +
                   (op.getNumResults() > 1 ? "#" + std::to_string(r) : "");
      value.kind = ValueKind::Activation;
      value.producer = opIndex;
      info.results.push_back(addValue(std::move(value), result));
    }
    graph.ops.push_back(std::move(info));
    return llvm::Error::success();
  }

  func::FuncOp func;
  int64_t batch;
  /// Batch units in the imported batch: what batch-derived sizes divide by.
  int64_t units;
  ModelGraph graph;
  llvm::DenseMap<Value, int> valueIndex;
};
} // namespace

llvm::Expected<ModelGraph> extractModelGraph(func::FuncOp func,
                                             int64_t importedBatch,
                                             int batchGranularity) {
  if (batchGranularity < 1 || importedBatch < batchGranularity ||
      importedBatch % batchGranularity != 0)
    return llvm::createStringError(
        "the imported batch must be a positive multiple of the batch "
        "granularity " +
        std::to_string(batchGranularity) + ", got " +
        std::to_string(importedBatch));
  return Extractor(func, importedBatch, batchGranularity).run();
}

} // namespace bm::plan
