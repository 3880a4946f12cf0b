//===- Costs.cpp - forward FLOPs of every bm op ---------------------------===//
//
// FLOPs count a multiply-add as 2. Contractions dominate; for the other ops
// the count is a small per-element constant (they are timed by the bytes
// they move, not their FLOPs, so these constants only feed reports).
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"

#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::bm;

static double numElements(Value value) {
  return static_cast<double>(
      cast<RankedTensorType>(value.getType()).getNumElements());
}

/// A contraction costs 2 FLOPs for every point of its iteration space: the
/// product of all factor sizes of its sharding rule.
static double contractionFlops(Operation *op) {
  ::bm::ShardingRule rule = lookupShardingRule(op);
  double points = 1;
  for (int64_t size : rule.factorSizes)
    points *= static_cast<double>(size);
  return 2 * points;
}

static double convFlops(Operation *op) {
  auto conv = cast<ConvOp>(op);
  auto weight = conv.getWeight().getType();
  // Each output element is a dot product over Cin/group x kernel window.
  double window = 1;
  for (int64_t d = 1; d < weight.getRank(); ++d)
    window *= static_cast<double>(weight.getDimSize(d));
  return 2 * numElements(conv.getResult()) * window;
}

template <int PerElement>
static double perResultElement(Operation *op) {
  return PerElement * numElements(op->getResult(0));
}

template <int PerElement>
static double perInputElement(Operation *op) {
  return PerElement * numElements(op->getOperand(0));
}

static double noFlops(Operation *) { return 0; }

using FlopCounter = double (*)(Operation *);

/// Alphabetical by op name. Transcendentals count as 4 FLOPs per element,
/// a norm as 8 (mean, variance, scale, shift), softmax as 5.
static const llvm::StringMap<FlopCounter> &flopTable() {
  static const llvm::StringMap<FlopCounter> table = {
      {"bm.abs", perResultElement<1>},
      {"bm.add", perResultElement<1>},
      {"bm.and", perResultElement<1>},
      {"bm.avg_pool", perInputElement<1>},
      {"bm.batch_norm", perResultElement<4>},
      {"bm.cast", noFlops},
      {"bm.concat", noFlops},
      {"bm.constant", noFlops},
      {"bm.conv", convFlops},
      {"bm.cos", perResultElement<4>},
      {"bm.cumsum", perResultElement<1>},
      {"bm.div", perResultElement<1>},
      {"bm.einsum", contractionFlops},
      {"bm.equal", perResultElement<1>},
      {"bm.erf", perResultElement<4>},
      {"bm.exp", perResultElement<4>},
      {"bm.expand", noFlops},
      {"bm.flatten", noFlops},
      {"bm.gather", noFlops},
      {"bm.gelu", perResultElement<8>},
      {"bm.gemm", contractionFlops},
      {"bm.global_avg_pool", perInputElement<1>},
      {"bm.greater", perResultElement<1>},
      {"bm.iota", noFlops},
      {"bm.layer_norm", perResultElement<8>},
      {"bm.less", perResultElement<1>},
      {"bm.log", perResultElement<4>},
      {"bm.log_softmax", perResultElement<5>},
      {"bm.matmul", contractionFlops},
      {"bm.max", perResultElement<1>},
      {"bm.max_pool", perInputElement<1>},
      {"bm.min", perResultElement<1>},
      {"bm.mul", perResultElement<1>},
      {"bm.neg", perResultElement<1>},
      {"bm.not", perResultElement<1>},
      {"bm.one_hot", noFlops},
      {"bm.or", perResultElement<1>},
      {"bm.pow", perResultElement<4>},
      {"bm.reciprocal", perResultElement<1>},
      {"bm.reduce_max", perInputElement<1>},
      {"bm.reduce_mean", perInputElement<1>},
      {"bm.reduce_sum", perInputElement<1>},
      {"bm.relu", perResultElement<1>},
      {"bm.reshape", noFlops},
      {"bm.rms_norm", perResultElement<6>},
      {"bm.sigmoid", perResultElement<4>},
      {"bm.sin", perResultElement<4>},
      {"bm.slice", noFlops},
      {"bm.softmax", perResultElement<5>},
      {"bm.split", noFlops},
      {"bm.sqrt", perResultElement<4>},
      {"bm.squeeze", noFlops},
      {"bm.sub", perResultElement<1>},
      {"bm.tanh", perResultElement<4>},
      {"bm.top_k", perInputElement<2>},
      {"bm.transpose", noFlops},
      {"bm.trilu", noFlops},
      {"bm.unsqueeze", noFlops},
      {"bm.where", perResultElement<1>},
  };
  return table;
}

double mlir::bm::lookupFlops(Operation *op) {
  auto it = flopTable().find(op->getName().getStringRef());
  return it == flopTable().end() ? 0 : it->second(op);
}

// Contractions report themselves to the cost model.
bool ConvOp::isContraction() { return true; }
bool EinsumOp::isContraction() { return true; }
bool GemmOp::isContraction() { return true; }
bool MatMulOp::isContraction() { return true; }
