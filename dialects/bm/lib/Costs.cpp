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

/// One combine per update; plain writes are data movement alone.
static double scatterFlops(Operation *op) {
  auto scatter = cast<ScatterElementsOp>(op);
  return scatter.getReduction() == "none" ? 0
                                          : numElements(scatter.getUpdates());
}

/// Two products over the score matrix (q kt, then p v): 2 s t (d + e) per
/// leading index. Under a causal mask the fused kernels skip the key blocks
/// above the diagonal, about half of them when s = t.
static double attentionFlops(Operation *op) {
  auto attention = cast<AttentionOp>(op);
  auto q = attention.getQ().getType(), v = attention.getV().getType();
  int64_t rank = q.getRank();
  double lead =
      static_cast<double>(q.getNumElements()) /
      static_cast<double>(q.getDimSize(rank - 2) * q.getDimSize(rank - 1));
  double s = q.getDimSize(rank - 2), d = q.getDimSize(rank - 1);
  double t = v.getDimSize(rank - 2), e = v.getDimSize(rank - 1);
  // Query i sees keys j <= i + (t - s): all but a triangle when t >= s;
  // when t < s the first s - t queries see none and the rest a triangle.
  double pairs = s * t;
  if (attention.getCausal())
    pairs = t >= s ? s * t - s * (s - 1) / 2 : t * (t + 1) / 2;
  return 2 * lead * pairs * (d + e);
}

using FlopCounter = double (*)(Operation *);

// Memory kernel classes (cost MemoryKernelClass names): the cost
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
      {AbsOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {AddOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {AndOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {AttentionOp::getOperationName(), {attentionFlops, kElementwise}},
      {AvgPoolOp::getOperationName(), {perInputElement<1>, kReduction}},
      {BatchNormOp::getOperationName(), {perResultElement<4>, kNormalization}},
      {CastOp::getOperationName(), {noFlops, kElementwise}},
      {ConcatOp::getOperationName(), {noFlops, kDataMovement}},
      {ConstantOp::getOperationName(), {noFlops, kElementwise}},
      {ConvOp::getOperationName(), {convFlops, kElementwise}},
      {CosOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {CumSumOp::getOperationName(), {perResultElement<1>, kReduction}},
      {DivOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {EinsumOp::getOperationName(), {contractionFlops, kElementwise}},
      {EqualOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {ErfOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {ExpOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {ExpandOp::getOperationName(), {noFlops, kDataMovement}},
      {FlattenOp::getOperationName(), {noFlops, kDataMovement}},
      {GatherOp::getOperationName(), {noFlops, kDataMovement}},
      {GatherElementsOp::getOperationName(), {noFlops, kDataMovement}},
      {GeluOp::getOperationName(), {perResultElement<8>, kElementwise}},
      {GemmOp::getOperationName(), {contractionFlops, kElementwise}},
      {GlobalAvgPoolOp::getOperationName(), {perInputElement<1>, kReduction}},
      {GreaterOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {IotaOp::getOperationName(), {noFlops, kElementwise}},
      {LayerNormOp::getOperationName(), {perResultElement<8>, kNormalization}},
      {LessOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {LogOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {LogSoftmaxOp::getOperationName(), {perResultElement<5>, kSoftmax}},
      {MatMulOp::getOperationName(), {contractionFlops, kElementwise}},
      {MaxOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {MaxPoolOp::getOperationName(), {perInputElement<1>, kReduction}},
      {MinOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {MulOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {NegOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {NotOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {OneHotOp::getOperationName(), {noFlops, kElementwise}},
      {OrOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {PowOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {ReciprocalOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {ReduceMaxOp::getOperationName(), {perInputElement<1>, kReduction}},
      {ReduceMeanOp::getOperationName(), {perInputElement<1>, kReduction}},
      {ReduceSumOp::getOperationName(), {perInputElement<1>, kReduction}},
      {ReluOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {ReshapeOp::getOperationName(), {noFlops, kDataMovement}},
      {RmsNormOp::getOperationName(), {perResultElement<6>, kNormalization}},
      {ScatterElementsOp::getOperationName(), {scatterFlops, kDataMovement}},
      {SigmoidOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {SinOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {SliceOp::getOperationName(), {noFlops, kDataMovement}},
      {SoftmaxOp::getOperationName(), {perResultElement<5>, kSoftmax}},
      {SplitOp::getOperationName(), {noFlops, kDataMovement}},
      {SqrtOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {SqueezeOp::getOperationName(), {noFlops, kDataMovement}},
      {SubOp::getOperationName(), {perResultElement<1>, kElementwise}},
      {TanhOp::getOperationName(), {perResultElement<4>, kElementwise}},
      {TopKOp::getOperationName(), {perInputElement<2>, kReduction}},
      {TransposeOp::getOperationName(), {noFlops, kDataMovement}},
      {TriluOp::getOperationName(), {noFlops, kElementwise}},
      {UnsqueezeOp::getOperationName(), {noFlops, kDataMovement}},
      {WhereOp::getOperationName(), {perResultElement<1>, kElementwise}},
  };
  return table;
}

double mlir::bm::lookupFlops(Operation *op) {
  auto it = costTable().find(op->getName().getStringRef());
  return it == costTable().end() ? 0 : it->second.flops(op);
}

bool mlir::bm::hasCost(StringRef opName) {
  return costTable().contains(opName);
}

StringRef mlir::bm::lookupMemoryKernelClass(Operation *op) {
  auto it = costTable().find(op->getName().getStringRef());
  return it == costTable().end() ? kElementwise
                                 : it->second.memoryKernelClass;
}

// Contractions report themselves to the cost model.
bool AttentionOp::isContraction() { return true; }
bool ConvOp::isContraction() { return true; }
bool EinsumOp::isContraction() { return true; }
bool GemmOp::isContraction() { return true; }
bool MatMulOp::isContraction() { return true; }
