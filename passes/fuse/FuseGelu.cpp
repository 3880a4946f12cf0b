//===- FuseGelu.cpp - GELU's exported formulas as one op ------------------===//
//
// Exporters write GELU (Hendrycks & Gimpel 2016) as elementwise ops: the
// tanh approximation
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// in eight, the exact form 0.5 x (1 + erf(x / sqrt(2))) (torch's default,
// ViT's and BERT's) in five; backward doubles them, and each keeps a copy
// of the MLP's widest activation for the backward. This pass recognises
// either formula, whichever way the exporter associated the final products,
// and replaces it with bm.gelu {tanh_approximation = true / false}, whose
// kernel and gradient rule compute the same function.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <cmath>

namespace mlir::bm {
#define GEN_PASS_DEF_BMFUSEGELUPASS
#include "passes/Passes.h.inc"

namespace {

/// Whether `value` is a splat constant equal to `expected` (to fp32
/// rounding of the exporter's literal).
bool isConstant(Value value, double expected) {
  auto constant = value.getDefiningOp<ConstantOp>();
  if (!constant)
    return false;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
    return false;
  double got = dense.getSplatValue<APFloat>().convertToDouble();
  return std::fabs(got - expected) <= 1e-6 * std::fabs(expected);
}

/// For a binary op with a constant `c` on either side: the other operand.
template <typename OpTy> Value otherThanConstant(Value value, double c) {
  auto op = value.getDefiningOp<OpTy>();
  if (!op)
    return {};
  if (isConstant(op.getRhs(), c))
    return op.getLhs();
  if (isConstant(op.getLhs(), c))
    return op.getRhs();
  return {};
}

/// The x of sqrt(2/pi) (x + 0.044715 x^3) at the tanh's input, or null.
Value geluInput(TanhOp tanh) {
  Value inner = otherThanConstant<MulOp>(tanh.getInput(), std::sqrt(2 / M_PI));
  auto sum = inner ? inner.getDefiningOp<AddOp>() : AddOp();
  if (!sum)
    return {};
  for (auto [x, cubic] : {std::pair{sum.getLhs(), sum.getRhs()},
                          std::pair{sum.getRhs(), sum.getLhs()}}) {
    Value cube = otherThanConstant<MulOp>(cubic, 0.044715);
    auto pow = cube ? cube.getDefiningOp<PowOp>() : PowOp();
    if (pow && pow.getLhs() == x && isConstant(pow.getRhs(), 3.0))
      return x;
  }
  return {};
}

/// The x of erf(x / sqrt(2)) (or erf(x * (1 / sqrt(2)))), or null.
Value geluInput(ErfOp erf) {
  if (Value x = otherThanConstant<MulOp>(erf.getInput(), 1 / std::sqrt(2.0)))
    return x;
  auto div = erf.getInput().getDefiningOp<DivOp>();
  if (div && isConstant(div.getRhs(), std::sqrt(2.0)))
    return div.getLhs();
  return {};
}

/// The op computing 0.5 x (1 + t), given s = 1 + t: x * s then * 0.5, or
/// (0.5 x) * s, operands in any order. Null if it is not there.
Operation *geluOutput(Value s, Value x) {
  if (!s.hasOneUse())
    return nullptr;
  auto product = dyn_cast<MulOp>(*s.getUsers().begin());
  if (!product)
    return nullptr;
  Value other = product.getLhs() == s ? product.getRhs() : product.getLhs();
  if (other == x) {
    Value p = product.getResult();
    if (!p.hasOneUse())
      return nullptr;
    auto half = dyn_cast<MulOp>(*p.getUsers().begin());
    if (half && otherThanConstant<MulOp>(half.getResult(), 0.5) == p)
      return half;
    return nullptr;
  }
  if (otherThanConstant<MulOp>(other, 0.5) == x)
    return product;
  return nullptr;
}

/// The fused op keeps what folding and annotation wrote on the formula's
/// last op (its layer, stage and result sharding); GELU is elementwise, so
/// it reads x in its result's sharding.
void carryAnnotations(Operation *output, GeluOp gelu) {
  for (NamedAttribute attr : output->getAttrs())
    if (BmDialect::isAnnotation(attr.getName()))
      gelu->setAttr(attr.getName(), attr.getValue());
  auto results =
      output->getAttrOfType<ArrayAttr>(BmDialect::kShardingAttrName);
  if (!results)
    return;
  gelu->setAttr(BmDialect::kOperandShardingAttrName, results);
}

/// A GELU formula found: the op whose result is GELU(x), and which form.
struct Found {
  Operation *output;
  Value x;
  bool tanhApproximation;
};

/// Given t (the tanh or erf) of x: the formula's output when t's one user
/// is 1 + t and 0.5 x (1 + t) follows, else nothing.
void matchOutput(Value t, Value x, bool tanhApproximation,
                 SmallVectorImpl<Found> &found) {
  if (!x || !t.hasOneUse())
    return;
  Value s = (*t.getUsers().begin())->getResult(0);
  if (otherThanConstant<AddOp>(s, 1.0) != t)
    return;
  if (Operation *output = geluOutput(s, x))
    if (output->getResult(0).getType() == x.getType())
      found.push_back({output, x, tanhApproximation});
}

struct FuseGeluPass : impl::BmFuseGeluPassBase<FuseGeluPass> {
  void runOnOperation() override {
    SmallVector<Found> found;
    getOperation().walk([&](Operation *op) {
      if (auto tanh = dyn_cast<TanhOp>(op))
        matchOutput(tanh.getResult(), geluInput(tanh), true, found);
      else if (auto erf = dyn_cast<ErfOp>(op))
        matchOutput(erf.getResult(), geluInput(erf), false, found);
    });
    for (auto [output, x, tanhApproximation] : found) {
      OpBuilder b(output);
      auto gelu = GeluOp::create(b, output->getLoc(), x,
                                 b.getBoolAttr(tanhApproximation));
      carryAnnotations(output, gelu);
      output->getResult(0).replaceAllUsesWith(gelu.getResult());
    }
    // The formula's ops are dead now; so are constants only they read.
    for (bool erased = true; erased;) {
      erased = false;
      getOperation().walk([&](Operation *op) {
        if (isa<AddOp, DivOp, ErfOp, MulOp, PowOp, TanhOp, ConstantOp>(op) &&
            op->use_empty()) {
          op->erase();
          erased = true;
        }
      });
    }
  }
};

} // namespace
} // namespace mlir::bm
