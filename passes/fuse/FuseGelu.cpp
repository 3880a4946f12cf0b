//===- FuseGelu.cpp - the tanh form of GELU as one op ---------------------===//
//
// Exporters write GELU's tanh approximation (Hendrycks & Gimpel 2016),
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// as eight elementwise ops, and backward doubles them: eight passes over
// the MLP's widest activation where one would do. This pass recognises the
// formula, whichever way the exporter associated the final products, and
// replaces it with bm.gelu {tanh_approximation = true}, whose kernel and
// gradient rule compute the same function.
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
    if (attr.getName().getValue().starts_with("bm."))
      gelu->setAttr(attr.getName(), attr.getValue());
  auto results =
      output->getAttrOfType<ArrayAttr>(BmDialect::kShardingAttrName);
  if (!results)
    return;
  gelu->setAttr(BmDialect::kOperandShardingAttrName, results);
}

struct FuseGeluPass : impl::BmFuseGeluPassBase<FuseGeluPass> {
  void runOnOperation() override {
    SmallVector<std::pair<Operation *, Value>> found;
    getOperation().walk([&](TanhOp tanh) {
      Value x = geluInput(tanh);
      if (!x || !tanh.getResult().hasOneUse())
        return;
      Value one = otherThanConstant<AddOp>(
          (*tanh.getResult().getUsers().begin())->getResult(0), 1.0);
      if (one != tanh.getResult())
        return;
      Value s = (*tanh.getResult().getUsers().begin())->getResult(0);
      if (Operation *output = geluOutput(s, x))
        if (output->getResult(0).getType() == x.getType())
          found.push_back({output, x});
    });
    for (auto [output, x] : found) {
      OpBuilder b(output);
      auto gelu = GeluOp::create(b, output->getLoc(), x,
                                 b.getBoolAttr(/*tanh_approximation=*/true));
      carryAnnotations(output, gelu);
      output->getResult(0).replaceAllUsesWith(gelu.getResult());
    }
    // The formula's ops are dead now; so are constants only they read.
    for (bool erased = true; erased;) {
      erased = false;
      getOperation().walk([&](Operation *op) {
        if (isa<AddOp, MulOp, PowOp, TanhOp, ConstantOp>(op) &&
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
