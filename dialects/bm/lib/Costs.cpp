//===- Costs.cpp - forward FLOPs and memory kernel class of every bm op ---===//
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

// Memory kernel classes (compiler/cost MemoryKernelClass names): the cost
// model times each memory-bound op at its class's measured rate. Copies of
// layout (transpose, concat, slice, gather, and the views, which cost
// nothing) are data movement; contractions are not memory-bound and say
// elementwise only for completeness.
static constexpr const char *kDataMovement = "data_movement";
static constexpr const char *kElementwise = "elementwise";
static constexpr const char *kNormalization = "normalization";
static constexpr const char *kReduction = "reduction";
static constexpr const char *kSoftmax = "softmax";

struct OpCost {
  FlopCounter flops;
  const char *memoryKernelClass;
};

/// Alphabetical by op name. Transcendentals count as 4 FLOPs per element,
/// a norm as 8 (mean, variance, scale, shift), softmax as 5.
static const llvm::StringMap<OpCost> &costTable() {
  static const llvm::StringMap<OpCost> table = {
      {"bm.abs", {perResultElement<1>, kElementwise}},
      {"bm.add", {perResultElement<1>, kElementwise}},
      {"bm.and", {perResultElement<1>, kElementwise}},
      {"bm.avg_pool", {perInputElement<1>, kReduction}},
      {"bm.batch_norm", {perResultElement<4>, kNormalization}},
      {"bm.cast", {noFlops, kElementwise}},
      {"bm.concat", {noFlops, kDataMovement}},
      {"bm.constant", {noFlops, kElementwise}},
      {"bm.conv", {convFlops, kElementwise}},
      {"bm.cos", {perResultElement<4>, kElementwise}},
      {"bm.cumsum", {perResultElement<1>, kReduction}},
      {"bm.div", {perResultElement<1>, kElementwise}},
      {"bm.einsum", {contractionFlops, kElementwise}},
      {"bm.equal", {perResultElement<1>, kElementwise}},
      {"bm.erf", {perResultElement<4>, kElementwise}},
      {"bm.exp", {perResultElement<4>, kElementwise}},
      {"bm.expand", {noFlops, kDataMovement}},
      {"bm.flatten", {noFlops, kDataMovement}},
      {"bm.gather", {noFlops, kDataMovement}},
      {"bm.gelu", {perResultElement<8>, kElementwise}},
      {"bm.gemm", {contractionFlops, kElementwise}},
      {"bm.global_avg_pool", {perInputElement<1>, kReduction}},
      {"bm.greater", {perResultElement<1>, kElementwise}},
      {"bm.iota", {noFlops, kElementwise}},
      {"bm.layer_norm", {perResultElement<8>, kNormalization}},
      {"bm.less", {perResultElement<1>, kElementwise}},
      {"bm.log", {perResultElement<4>, kElementwise}},
      {"bm.log_softmax", {perResultElement<5>, kSoftmax}},
      {"bm.matmul", {contractionFlops, kElementwise}},
      {"bm.max", {perResultElement<1>, kElementwise}},
      {"bm.max_pool", {perInputElement<1>, kReduction}},
      {"bm.min", {perResultElement<1>, kElementwise}},
      {"bm.mul", {perResultElement<1>, kElementwise}},
      {"bm.neg", {perResultElement<1>, kElementwise}},
      {"bm.not", {perResultElement<1>, kElementwise}},
      {"bm.one_hot", {noFlops, kElementwise}},
      {"bm.or", {perResultElement<1>, kElementwise}},
      {"bm.pow", {perResultElement<4>, kElementwise}},
      {"bm.reciprocal", {perResultElement<1>, kElementwise}},
      {"bm.reduce_max", {perInputElement<1>, kReduction}},
      {"bm.reduce_mean", {perInputElement<1>, kReduction}},
      {"bm.reduce_sum", {perInputElement<1>, kReduction}},
      {"bm.relu", {perResultElement<1>, kElementwise}},
      {"bm.reshape", {noFlops, kDataMovement}},
      {"bm.rms_norm", {perResultElement<6>, kNormalization}},
      {"bm.sigmoid", {perResultElement<4>, kElementwise}},
      {"bm.sin", {perResultElement<4>, kElementwise}},
      {"bm.slice", {noFlops, kDataMovement}},
      {"bm.softmax", {perResultElement<5>, kSoftmax}},
      {"bm.split", {noFlops, kDataMovement}},
      {"bm.sqrt", {perResultElement<4>, kElementwise}},
      {"bm.squeeze", {noFlops, kDataMovement}},
      {"bm.sub", {perResultElement<1>, kElementwise}},
      {"bm.tanh", {perResultElement<4>, kElementwise}},
      {"bm.top_k", {perInputElement<2>, kReduction}},
      {"bm.transpose", {noFlops, kDataMovement}},
      {"bm.trilu", {noFlops, kElementwise}},
      {"bm.unsqueeze", {noFlops, kDataMovement}},
      {"bm.where", {perResultElement<1>, kElementwise}},
  };
  return table;
}

double mlir::bm::lookupFlops(Operation *op) {
  auto it = costTable().find(op->getName().getStringRef());
  return it == costTable().end() ? 0 : it->second.flops(op);
}

StringRef mlir::bm::lookupMemoryKernelClass(Operation *op) {
  auto it = costTable().find(op->getName().getStringRef());
  return it == costTable().end() ? kElementwise
                                 : it->second.memoryKernelClass;
}

// Contractions report themselves to the cost model.
bool ConvOp::isContraction() { return true; }
bool EinsumOp::isContraction() { return true; }
bool GemmOp::isContraction() { return true; }
bool MatMulOp::isContraction() { return true; }
