//===- FuseAttention.cpp - the attention core as one bm.attention ---------===//
//
// Exporters write scaled dot-product attention as
//   matmul(q, kt) -> mul/div by a constant -> masks -> softmax -> matmul(., v)
// where each mask adds a constant (0 where a query sees a key, a large
// negative number where it does not) or, through where, replaces the hidden
// scores by one. Run op by op, the [s, t] scores and probabilities are
// written, read, kept for the backward and packed again for each GEMM. This
// pass replaces the chain by bm.attention {scale, causal} when the masks,
// evaluated on the host, hide exactly the keys after each query (causal) or
// none, so that a backend can run it without storing the scores
// (FlashAttention, Dao et al. 2022) and its gradient recomputes them. Any
// other mask (padding, ALiBi, a learned bias) leaves the chain as it is.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <optional>

namespace mlir::bm {
#define GEN_PASS_DEF_BMFUSEATTENTIONPASS
#include "passes/Passes.h.inc"

namespace {

/// A mask value at or below this hides its key: exp(-1e4) underflows to 0
/// in fp32 beside any score a softmax keeps (HF writes the dtype's lowest
/// value, Megatron-style models -1e4 or -1e9).
constexpr double kHidden = -1e4;
/// Constants larger than this are not evaluated (a mask is s x t at most,
/// times the batch where an exporter expanded it).
constexpr int64_t kMaxEvaluated = int64_t(1) << 26;

/// A constant tensor evaluated on the host (booleans as 0 and 1).
struct HostValues {
  SmallVector<int64_t> shape;
  std::vector<double> values;
  int64_t dim(int64_t fromEnd) const {
    int64_t i = static_cast<int64_t>(shape.size()) - fromEnd;
    return i >= 0 ? shape[i] : 1;
  }
};

std::optional<HostValues> evaluate(Value value);

std::optional<HostValues> evaluateConstant(ConstantOp constant) {
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  auto type = dyn_cast<RankedTensorType>(constant.getType());
  if (!dense || !type || type.getNumElements() > kMaxEvaluated)
    return std::nullopt;
  HostValues host{SmallVector<int64_t>(type.getShape()), {}};
  host.values.reserve(type.getNumElements());
  if (isa<FloatType>(dense.getElementType())) {
    for (const APFloat &v : dense.getValues<APFloat>())
      host.values.push_back(v.convertToDouble());
  } else if (dense.getElementType().isInteger(1)) {
    for (bool v : dense.getValues<bool>())
      host.values.push_back(v ? 1 : 0);
  } else {
    return std::nullopt;
  }
  return host;
}

/// ONNX Trilu: keeps j - i >= k (upper) or j - i <= k (lower) of the last
/// two dims, zeroing the rest.
std::optional<HostValues> evaluateTrilu(TriluOp trilu) {
  std::optional<HostValues> host = evaluate(trilu.getInput());
  if (!host || host->shape.size() < 2)
    return std::nullopt;
  int64_t rows = host->dim(2), cols = host->dim(1), k = trilu.getK();
  for (size_t at = 0; at < host->values.size(); ++at) {
    int64_t i = (at / cols) % rows, j = at % cols;
    bool kept = trilu.getUpper() ? j - i >= k : j - i <= k;
    if (!kept)
      host->values[at] = 0;
  }
  return host;
}

std::optional<HostValues> evaluate(Value value) {
  if (auto constant = value.getDefiningOp<ConstantOp>())
    return evaluateConstant(constant);
  if (auto trilu = value.getDefiningOp<TriluOp>())
    return evaluateTrilu(trilu);
  return std::nullopt;
}

/// Which keys a mask hides, as far as fusion cares.
enum class Mask { None, Causal, Other };

/// Whether query i of s hides key j of t under a causal mask: keys after
/// i + (t - s) (bmrt/Attention.h).
bool causallyHidden(int64_t i, int64_t j, int64_t s, int64_t t) {
  return j > i + (t - s);
}

/// Classifies `hidden` (1 where a key is hidden), broadcast onto scores
/// whose last two dims are s x t: the same pattern at every leading index,
/// either nothing hidden or exactly the causal triangle.
Mask classify(const HostValues &hidden, int64_t s, int64_t t) {
  int64_t rows = hidden.dim(2), cols = hidden.dim(1);
  if ((rows != 1 && rows != s) || (cols != 1 && cols != t))
    return Mask::Other;
  bool none = true, causal = true;
  for (size_t at = 0; at < hidden.values.size(); ++at) {
    bool h = hidden.values[at] != 0;
    int64_t i0 = (at / cols) % rows, j0 = at % cols;
    // A broadcast dim of size 1 stands for every row (or column).
    for (int64_t i = rows == 1 ? 0 : i0; i < (rows == 1 ? s : i0 + 1); ++i)
      for (int64_t j = cols == 1 ? 0 : j0; j < (cols == 1 ? t : j0 + 1); ++j) {
        none &= !h;
        causal &= h == causallyHidden(i, j, s, t);
      }
    if (!none && !causal)
      return Mask::Other;
  }
  return none ? Mask::None : Mask::Causal;
}

/// The mask an added `value` applies to s x t scores, read from its form
/// without evaluating it (a long sequence's [s, t] mask is too large to
/// evaluate on the host): the upper triangle j - i >= k of a splat that
/// hides (ONNX's Trilu over ConstantOfShape, as exporters build causal
/// masks) is the causal mask when k is 1 + t - s. Mask::Other for
/// anything else.
Mask classifyTriangle(Value value, int64_t s, int64_t t) {
  auto trilu = value.getDefiningOp<TriluOp>();
  auto type = cast<RankedTensorType>(value.getType());
  if (!trilu || !trilu.getUpper() || type.getRank() != 2 ||
      type.getDimSize(0) != s || type.getDimSize(1) != t ||
      trilu.getK() != 1 + t - s)
    return Mask::Other;
  auto constant = trilu.getInput().getDefiningOp<ConstantOp>();
  auto dense = constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                        : DenseElementsAttr();
  if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
    return Mask::Other;
  double fill = dense.getSplatValue<APFloat>().convertToDouble();
  return fill <= kHidden ? Mask::Causal : Mask::Other;
}

/// 1 where `values` hides a key (<= kHidden), 0 where it adds 0; nothing
/// when it adds anything else (a bias, not a mask).
std::optional<HostValues> hiddenByAddition(HostValues values) {
  for (double &v : values.values) {
    if (v != 0 && v > kHidden)
      return std::nullopt;
    v = v <= kHidden ? 1 : 0;
  }
  return values;
}

/// The chain found: the ops to replace and the attention's operands.
struct Chain {
  Value q, kt, v;
  double scale = 1;
  Mask mask = Mask::None;
  SmallVector<Operation *> ops; // last first
};

bool isScalarConstant(Value value, double &out) {
  std::optional<HostValues> host = evaluate(value);
  if (!host || host->values.size() != 1)
    return false;
  out = host->values[0];
  return true;
}

/// Steps from `x` over one mask op: add of a constant mask, or where with a
/// constant condition and a hiding constant on the other side. Returns the
/// masked operand and folds the mask's pattern into `mask`.
Value overMask(Value x, int64_t s, int64_t t, Mask &mask) {
  std::optional<HostValues> hidden;
  Value inner;
  if (auto add = x.getDefiningOp<AddOp>()) {
    for (auto [scores, other] : {std::pair{add.getLhs(), add.getRhs()},
                                 std::pair{add.getRhs(), add.getLhs()}}) {
      if (classifyTriangle(other, s, t) == Mask::Causal) {
        mask = Mask::Causal;
        return scores;
      }
      if (std::optional<HostValues> values = evaluate(other)) {
        hidden = hiddenByAddition(std::move(*values));
        inner = scores;
        break;
      }
    }
  } else if (auto where = x.getDefiningOp<WhereOp>()) {
    double fill;
    std::optional<HostValues> seen = evaluate(where.getCondition());
    bool scoresOnTrue = isScalarConstant(where.getOnFalse(), fill);
    if (!scoresOnTrue && !isScalarConstant(where.getOnTrue(), fill))
      return {};
    if (!seen || fill > kHidden)
      return {};
    for (double &v : seen->values) // hidden where the fill is chosen
      v = (v != 0) != scoresOnTrue ? 1 : 0;
    hidden = std::move(seen);
    inner = scoresOnTrue ? where.getOnTrue() : where.getOnFalse();
  }
  if (!hidden || !inner)
    return {};
  Mask found = classify(*hidden, s, t);
  if (found == Mask::Other)
    return {};
  if (found == Mask::Causal)
    mask = Mask::Causal;
  return inner;
}

/// Steps from `x` over a multiplication or division by a scalar constant.
Value overScale(Value x, double &scale) {
  double c;
  if (auto mul = x.getDefiningOp<MulOp>()) {
    if (isScalarConstant(mul.getRhs(), c)) {
      scale = c;
      return mul.getLhs();
    }
    if (isScalarConstant(mul.getLhs(), c)) {
      scale = c;
      return mul.getRhs();
    }
  }
  if (auto div = x.getDefiningOp<DivOp>())
    if (isScalarConstant(div.getRhs(), c) && c != 0) {
      scale = 1 / c;
      return div.getLhs();
    }
  return {};
}

bool sameLeadingDims(Value a, Value b) {
  auto x = cast<RankedTensorType>(a.getType());
  auto y = cast<RankedTensorType>(b.getType());
  return x.getRank() == y.getRank() &&
         x.getShape().drop_back(2) == y.getShape().drop_back(2);
}

/// The chain ending in `softmax`, or nothing.
std::optional<Chain> matchChain(SoftmaxOp softmax) {
  auto type = cast<RankedTensorType>(softmax.getType());
  int64_t rank = type.getRank();
  if (rank < 2 || softmax.getAxis() != rank - 1 ||
      !softmax.getResult().hasOneUse())
    return std::nullopt;
  auto context = dyn_cast<MatMulOp>(*softmax.getResult().getUsers().begin());
  if (!context || context.getLhs() != softmax.getResult())
    return std::nullopt;
  Chain chain;
  chain.ops = {context, softmax};
  int64_t s = type.getDimSize(rank - 2), t = type.getDimSize(rank - 1);
  Value x = softmax.getInput();
  // Masks, then at most one scale, then the scores; each value read only
  // here. (A mask added before the scale would be scaled with the scores.)
  bool scaled = false;
  while (x.hasOneUse() && !x.getDefiningOp<MatMulOp>()) {
    Value inner = scaled ? Value() : overMask(x, s, t, chain.mask);
    if (!inner && !scaled) {
      inner = overScale(x, chain.scale);
      scaled = true;
    }
    if (!inner)
      return std::nullopt;
    chain.ops.push_back(x.getDefiningOp());
    x = inner;
  }
  auto scores = x.getDefiningOp<MatMulOp>();
  if (!scores || !x.hasOneUse())
    return std::nullopt;
  chain.ops.push_back(scores);
  chain.q = scores.getLhs();
  chain.kt = scores.getRhs();
  chain.v = context.getRhs();
  if (!sameLeadingDims(chain.q, x) || !sameLeadingDims(chain.kt, x) ||
      !sameLeadingDims(chain.v, x))
    return std::nullopt;
  return chain;
}

/// Erases `op` once nothing reads it, then the constants and trilus that
/// only it read.
void eraseIfDead(Operation *op) {
  if (!op->use_empty())
    return;
  SmallVector<Value> operands(op->getOperands());
  op->erase();
  for (Value operand : operands)
    if (Operation *def = operand.getDefiningOp())
      if (isa<ConstantOp, TriluOp>(def))
        eraseIfDead(def);
}

struct FuseAttentionPass : impl::BmFuseAttentionPassBase<FuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<Chain> chains;
    getOperation().walk([&](SoftmaxOp softmax) {
      if (std::optional<Chain> chain = matchChain(softmax))
        chains.push_back(std::move(*chain));
    });
    for (Chain &chain : chains) {
      Operation *context = chain.ops.front();
      OpBuilder b(context);
      auto attention = AttentionOp::create(
          b, context->getLoc(), chain.q, chain.kt, chain.v,
          /*positions=*/Value(),
          b.getF32FloatAttr(static_cast<float>(chain.scale)),
          b.getBoolAttr(chain.mask == Mask::Causal));
      if (attention.getType() != context->getResult(0).getType()) {
        attention.erase();
        continue;
      }
      for (NamedAttribute attr : context->getAttrs())
        if (BmDialect::isAnnotation(attr.getName()))
          attention->setAttr(attr.getName(), attr.getValue());
      context->getResult(0).replaceAllUsesWith(attention.getResult());
      for (Operation *op : chain.ops)
        eraseIfDead(op);
    }
  }
};

} // namespace
} // namespace mlir::bm
