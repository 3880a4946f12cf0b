//===- BmOps.cpp - verifiers and type inference of the compute ops --------===//

#include "bm/BmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::bm;

#include "bm/BmInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "bm/BmOps.cpp.inc"

static RankedTensorType tensorOf(Type type) {
  return cast<RankedTensorType>(type);
}

/// Default-valued attributes are absent from the adaptor while the custom
/// parser infers result types (defaults are filled in after parsing).
static bool boolOr(BoolAttr attr, bool byDefault) {
  return attr ? attr.getValue() : byDefault;
}

static LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis
                             << " is out of range for rank " << rank;
  return success();
}

LogicalResult mlir::bm::checkAxis(std::optional<Location> loc, StringRef what,
                                  int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, what, " axis ", axis,
                             " is out of range for rank ", rank);
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult WhereOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Type onTrue = adaptor.getOnTrue().getType();
  Type onFalse = adaptor.getOnFalse().getType();
  if (tensorOf(onTrue).getElementType() != tensorOf(onFalse).getElementType())
    return emitOptionalError(loc, "where branches differ in element type: ",
                             onTrue, " and ", onFalse);
  SmallVector<int64_t> shape;
  if (failed(inferBroadcastShape(
          loc, {adaptor.getCondition().getType(), onTrue, onFalse}, shape)))
    return failure();
  types.push_back(RankedTensorType::get(shape, tensorOf(onTrue).getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto lhs = tensorOf(adaptor.getLhs().getType());
  auto rhs = tensorOf(adaptor.getRhs().getType());
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "matmul operand element types differ: ",
                             lhs, " and ", rhs);
  if (lhs.getRank() < 1 || rhs.getRank() < 1)
    return emitOptionalError(loc, "matmul operands must have rank >= 1, got ",
                             lhs, " and ", rhs);
  // numpy: a 1-D lhs is a row vector, a 1-D rhs a column vector; both extra
  // dims are dropped from the result.
  SmallVector<int64_t> l(lhs.getShape()), r(rhs.getShape());
  bool lhsVector = l.size() == 1, rhsVector = r.size() == 1;
  if (lhsVector)
    l.insert(l.begin(), 1);
  if (rhsVector)
    r.push_back(1);
  int64_t k = l.back(), k2 = r[r.size() - 2];
  if (k != k2)
    return emitOptionalError(loc, "matmul contracting dims differ: ", k,
                             " (lhs ", lhs, ") and ", k2, " (rhs ", rhs, ")");
  SmallVector<int64_t> batch;
  Type elt = lhs.getElementType();
  if (failed(inferBroadcastShape(
          loc,
          {RankedTensorType::get(ArrayRef(l).drop_back(2), elt),
           RankedTensorType::get(ArrayRef(r).drop_back(2), elt)},
          batch)))
    return failure();
  if (!lhsVector)
    batch.push_back(l[l.size() - 2]);
  if (!rhsVector)
    batch.push_back(r.back());
  types.push_back(RankedTensorType::get(batch, elt));
  return success();
}

/// The result of attention(q [..., s, d], kt [..., d, t], v [..., t, e]):
/// [..., s, e]; the leading dims must be equal (no broadcasting: grouped
/// keys are expanded before the scores in every export).
static FailureOr<RankedTensorType> attentionResult(std::optional<Location> loc,
                                                   Type qType, Type ktType,
                                                   Type vType) {
  auto q = tensorOf(qType), kt = tensorOf(ktType), v = tensorOf(vType);
  if (q.getElementType() != kt.getElementType() ||
      q.getElementType() != v.getElementType())
    return emitOptionalError(loc, "attention operand element types differ: ", q,
                             ", ", kt, " and ", v);
  if (q.getRank() < 2 || kt.getRank() != q.getRank() ||
      v.getRank() != q.getRank())
    return emitOptionalError(loc,
                             "attention needs q, kt and v of one rank "
                             ">= 2, got ",
                             q, ", ", kt, " and ", v);
  int64_t rank = q.getRank();
  ArrayRef<int64_t> lead = q.getShape().drop_back(2);
  if (kt.getShape().drop_back(2) != lead || v.getShape().drop_back(2) != lead)
    return emitOptionalError(loc, "attention's leading dims differ: ", q, ", ",
                             kt, " and ", v);
  if (kt.getDimSize(rank - 2) != q.getDimSize(rank - 1))
    return emitOptionalError(loc, "attention's kt rows (", kt,
                             ") must be q's head dim (", q, ")");
  if (v.getDimSize(rank - 2) != kt.getDimSize(rank - 1))
    return emitOptionalError(loc, "attention's v rows (", v,
                             ") must be kt's keys (", kt, ")");
  SmallVector<int64_t> shape(lead);
  shape.push_back(q.getDimSize(rank - 2));
  shape.push_back(v.getDimSize(rank - 1));
  return RankedTensorType::get(shape, q.getElementType());
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto result =
      attentionResult(loc, adaptor.getQ().getType(), adaptor.getKt().getType(),
                      adaptor.getV().getType());
  if (failed(result))
    return failure();
  types.push_back(*result);
  return success();
}

/// The positions of an attention's queries: [s], one per query, only
/// under a causal mask (elsewhere every query sees every key).
static LogicalResult verifyPositions(Operation *op, Value q, Value positions,
                                     bool causal) {
  if (!positions)
    return success();
  if (!causal)
    return op->emitOpError("positions need a causal mask");
  auto queries = cast<RankedTensorType>(q.getType());
  auto type = cast<RankedTensorType>(positions.getType());
  int64_t s = queries.getDimSize(queries.getRank() - 2);
  if (type.getRank() != 1 || type.getDimSize(0) != s)
    return op->emitOpError("positions must be [")
           << s << "], one per query, got " << type;
  return success();
}

LogicalResult AttentionOp::verify() {
  return verifyPositions(*this, getQ(), getPositions(), getCausal());
}

LogicalResult AttentionGradOp::verify() {
  auto result = attentionResult(getLoc(), getQ().getType(), getKt().getType(),
                                getV().getType());
  if (failed(result))
    return failure();
  if (*result != getResult().getType())
    return emitOpError("result must be the attention's result ")
           << *result << ", got " << getResult().getType();
  return verifyPositions(*this, getQ(), getPositions(), getCausal());
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto a = tensorOf(adaptor.getA().getType());
  auto b = tensorOf(adaptor.getB().getType());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOptionalError(loc, "gemm needs 2-D operands, got ", a, " and ",
                             b);
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "gemm operand element types differ: ", a,
                             " and ", b);
  bool transA = boolOr(adaptor.getTransAAttr(), false);
  bool transB = boolOr(adaptor.getTransBAttr(), false);
  int64_t m = a.getDimSize(transA ? 1 : 0);
  int64_t k = a.getDimSize(transA ? 0 : 1);
  int64_t k2 = b.getDimSize(transB ? 1 : 0);
  int64_t n = b.getDimSize(transB ? 0 : 1);
  if (k != k2)
    return emitOptionalError(loc, "gemm contracting dims differ: ", k, " and ",
                             k2);
  auto result = RankedTensorType::get({m, n}, a.getElementType());
  if (Value c = adaptor.getC()) {
    if (tensorOf(c.getType()).getElementType() != a.getElementType())
      return emitOptionalError(loc, "gemm bias ", c.getType(),
                               " differs in element type from ", a);
    SmallVector<int64_t> shape;
    if (failed(inferBroadcastShape(loc, {result, c.getType()}, shape)))
      return failure();
    if (ArrayRef(shape) != result.getShape())
      return emitOptionalError(loc, "gemm bias ", c.getType(),
                               " does not broadcast to ", result);
  }
  types.push_back(result);
  return success();
}

LogicalResult EinsumOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  std::string error;
  FailureOr<EinsumEquation> eq = parseEinsum(adaptor.getEquation(), error);
  if (failed(eq))
    return emitOptionalError(loc, error);
  if (eq->inputs.size() != adaptor.getInputs().size())
    return emitOptionalError(loc, "einsum equation has ", eq->inputs.size(),
                             " inputs but the op has ",
                             adaptor.getInputs().size(), " operands");
  llvm::DenseMap<char, int64_t> sizes;
  Type elt;
  for (auto [term, operand] : llvm::zip(eq->inputs, adaptor.getInputs())) {
    auto tensor = tensorOf(operand.getType());
    if (elt && tensor.getElementType() != elt)
      return emitOptionalError(loc,
                               "einsum operand element types differ: ", elt,
                               " and ", tensor.getElementType());
    elt = tensor.getElementType();
    if (static_cast<int64_t>(term.size()) != tensor.getRank())
      return emitOptionalError(loc, "einsum term '", term, "' has ",
                               term.size(), " letters for operand ", tensor);
    for (auto [i, c] : llvm::enumerate(term)) {
      int64_t dim = tensor.getDimSize(i);
      auto [it, inserted] = sizes.try_emplace(c, dim);
      if (!inserted && it->second != dim)
        return emitOptionalError(loc, "einsum letter '", std::string(1, c),
                                 "' is ", it->second, " in one operand and ",
                                 dim, " in another");
    }
  }
  SmallVector<int64_t> shape;
  for (char c : eq->output)
    shape.push_back(sizes[c]);
  types.push_back(RankedTensorType::get(shape, elt));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  auto weight = tensorOf(adaptor.getWeight().getType());
  int64_t spatial = input.getRank() - 2;
  if (spatial < 1 || weight.getRank() != input.getRank())
    return emitOptionalError(loc, "conv needs input and weight of one rank >= 3, got ",
                             input, " and ", weight);
  if (input.getElementType() != weight.getElementType())
    return emitOptionalError(loc, "conv operand element types differ: ", input,
                             " and ", weight);
  ArrayRef<int64_t> strides = adaptor.getStrides(), pads = adaptor.getPads(),
                    dilations = adaptor.getDilations();
  if (static_cast<int64_t>(strides.size()) != spatial ||
      static_cast<int64_t>(dilations.size()) != spatial ||
      static_cast<int64_t>(pads.size()) != 2 * spatial)
    return emitOptionalError(loc, "conv over ", spatial, " spatial dims needs ",
                             spatial, " strides and dilations and ",
                             2 * spatial, " pads");
  int64_t group = adaptor.getGroupAttr() ? adaptor.getGroupAttr().getInt() : 1;
  int64_t channels; // weight.getDimSize(1) * group, which may overflow
  if (group < 1 ||
      llvm::MulOverflow(weight.getDimSize(1), group, channels) ||
      input.getDimSize(1) != channels)
    return emitOptionalError(loc, "conv input has ", input.getDimSize(1),
                             " channels but weight expects ",
                             weight.getDimSize(1), " x group ", group);
  if (weight.getDimSize(0) % group != 0)
    return emitOptionalError(loc, "conv output channels ", weight.getDimSize(0),
                             " do not divide by group ", group);
  if (Value bias = adaptor.getBias()) {
    auto b = tensorOf(bias.getType());
    if (b.getRank() != 1 || b.getDimSize(0) != weight.getDimSize(0) ||
        b.getElementType() != input.getElementType())
      return emitOptionalError(loc, "conv bias ", b, " must be 1-D of size ",
                               weight.getDimSize(0), " and element type ",
                               input.getElementType());
  }
  SmallVector<int64_t> shape = {input.getDimSize(0), weight.getDimSize(0)};
  for (int64_t i = 0; i < spatial; ++i) {
    if (strides[i] < 1 || dilations[i] < 1)
      return emitOptionalError(loc, "conv stride ", strides[i],
                               " and dilation ", dilations[i],
                               " of spatial dim ", i, " must be >= 1");
    if (pads[i] < 0 || pads[i + spatial] < 0)
      return emitOptionalError(loc, "conv pads ", pads[i], "/",
                               pads[i + spatial], " of spatial dim ", i,
                               " must be >= 0");
    if (weight.getDimSize(i + 2) < 1)
      return emitOptionalError(loc, "conv kernel size ",
                               weight.getDimSize(i + 2), " of spatial dim ", i,
                               " must be >= 1");
    int64_t window, padded;
    if (llvm::MulOverflow(dilations[i], weight.getDimSize(i + 2) - 1,
                          window) ||
        llvm::AddOverflow(window, int64_t(1), window) ||
        llvm::AddOverflow(input.getDimSize(i + 2), pads[i], padded) ||
        llvm::AddOverflow(padded, pads[i + spatial], padded))
      return emitOptionalError(loc, "conv window or padded size of spatial "
                                    "dim ", i, " overflows int64");
    if (padded < window)
      return emitOptionalError(loc, "conv window ", window,
                               " is larger than padded dim ", padded);
    shape.push_back((padded - window) / strides[i] + 1);
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getInput().getType().getRank());
}

LogicalResult LogSoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getInput().getType().getRank());
}

/// Scale and bias of layer / RMS norm span the normalised dims [axis, rank).
static LogicalResult inferNormResult(std::optional<Location> loc, Type input,
                                     ArrayRef<Type> params, int64_t axis,
                                     APFloat epsilon,
                                     SmallVectorImpl<Type> &types) {
  auto tensor = tensorOf(input);
  if (epsilon.isNegative() || epsilon.isNaN())
    return emitOptionalError(loc, "normalisation epsilon ",
                             epsilon.convertToDouble(), " must be >= 0");
  if (failed(checkAxis(loc, "normalisation", axis, tensor.getRank())))
    return failure();
  ArrayRef<int64_t> normalized = tensor.getShape().drop_front(axis);
  for (Type param : params) {
    auto p = tensorOf(param);
    if (p.getShape() != normalized ||
        p.getElementType() != tensor.getElementType())
      return emitOptionalError(loc, "normalisation parameter ", p,
                               " must have the normalised shape of ", tensor,
                               " from axis ", axis);
  }
  types.push_back(tensor);
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  SmallVector<Type> params = {adaptor.getScale().getType()};
  if (Value bias = adaptor.getBias())
    params.push_back(bias.getType());
  return inferNormResult(loc, adaptor.getInput().getType(), params,
                         adaptor.getAxis(), adaptor.getEpsilon(), types);
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferNormResult(loc, adaptor.getInput().getType(),
                         {adaptor.getScale().getType()}, adaptor.getAxis(),
                         adaptor.getEpsilon(), types);
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  if (input.getRank() < 2)
    return emitOptionalError(loc, "batch norm needs rank >= 2, got ", input);
  APFloat epsilon = adaptor.getEpsilon();
  if (epsilon.isNegative() || epsilon.isNaN())
    return emitOptionalError(loc, "batch norm epsilon ",
                             epsilon.convertToDouble(), " must be >= 0");
  int64_t channels = input.getDimSize(1);
  for (Value param : {adaptor.getScale(), adaptor.getBias(), adaptor.getMean(),
                      adaptor.getVariance()}) {
    auto p = tensorOf(param.getType());
    if (p.getRank() != 1 || p.getDimSize(0) != channels)
      return emitOptionalError(loc, "batch norm parameter ", p,
                               " must be 1-D of size ", channels);
  }
  types.push_back(input);
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions, top-k, one-hot
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::verify() {
  auto logits = getLogits().getType(), labels = getLabels().getType();
  if (logits.getRank() != 2 || labels.getRank() != 1 ||
      logits.getDimSize(0) != labels.getDimSize(0))
    return emitOpError("needs logits [N, C] and labels [N], got ")
           << logits << " and " << labels;
  return success();
}

LogicalResult CumSumOp::verify() {
  return verifyAxis(*this, getAxis(), getInput().getType().getRank());
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *context,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  int64_t axis = adaptor.getAxis(), k = adaptor.getK();
  if (failed(checkAxis(loc, "top_k", axis, input.getRank())))
    return failure();
  if (k < 1 || k > input.getDimSize(axis))
    return emitOptionalError(loc, "top_k k = ", k, " must be in [1, ",
                             input.getDimSize(axis), "]");
  SmallVector<int64_t> shape(input.getShape());
  shape[axis] = k;
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  types.push_back(
      RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

LogicalResult OneHotOp::verify() {
  auto indices = getIndices().getType();
  int64_t rank = indices.getRank() + 1;
  if (getDepth() < 1)
    return emitOpError() << "depth " << getDepth() << " must be >= 1";
  if (failed(verifyAxis(*this, getAxis(), rank)))
    return failure();
  SmallVector<int64_t> shape(indices.getShape());
  shape.insert(shape.begin() + getAxis(), getDepth());
  if (getResult().getType().getShape() != ArrayRef(shape))
    return emitOpError() << "result shape must be ["
                         << llvm::make_range(shape.begin(), shape.end())
                         << "], got " << getResult().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult TriluOp::verify() {
  if (getInput().getType().getRank() < 2)
    return emitOpError() << "needs rank >= 2, got "
                         << getInput().getType();
  return success();
}

LogicalResult ReshapeOp::verify() {
  auto input = getInput().getType();
  auto result = getResult().getType();
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "cannot change the element type from "
                         << input.getElementType() << " to "
                         << result.getElementType();
  if (input.getNumElements() != result.getNumElements())
    return emitOpError() << "cannot reshape " << input.getNumElements()
                         << " elements (" << input << ") into "
                         << result.getNumElements() << " (" << result << ")";
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != input.getRank())
    return emitOptionalError(loc, "permutation of ", perm.size(),
                             " entries for rank ", input.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= input.getRank() || seen[p])
      return emitOptionalError(loc, "permutation [", perm,
                               "] is not a permutation of 0..",
                               input.getRank() - 1);
    seen[p] = true;
    shape.push_back(input.getDimSize(p));
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto data = tensorOf(adaptor.getData().getType());
  auto indices = tensorOf(adaptor.getIndices().getType());
  int64_t axis = adaptor.getAxis();
  if (failed(checkAxis(loc, "gather", axis, data.getRank())))
    return failure();
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  types.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

/// GatherElements and ScatterElements index `data` element by element:
/// `indices` has its rank, and every dim but `axis` at most its size.
static LogicalResult checkElementIndices(std::optional<Location> loc,
                                         StringRef what, RankedTensorType data,
                                         RankedTensorType indices,
                                         int64_t axis) {
  if (failed(checkAxis(loc, what, axis, data.getRank())))
    return failure();
  if (indices.getRank() != data.getRank())
    return emitOptionalError(loc, what, " indices ", indices,
                             " need the rank of the data ", data);
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != axis && indices.getDimSize(d) > data.getDimSize(d))
      return emitOptionalError(loc, what, " indices ", indices,
                               " are longer than the data ", data, " in dim ",
                               d);
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  auto data = tensorOf(adaptor.getData().getType());
  auto indices = tensorOf(adaptor.getIndices().getType());
  if (failed(checkElementIndices(loc, "gather_elements", data, indices,
                                 adaptor.getAxis())))
    return failure();
  types.push_back(indices.clone(data.getElementType()));
  return success();
}

LogicalResult
ScatterElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                    Adaptor adaptor,
                                    SmallVectorImpl<Type> &types) {
  auto data = tensorOf(adaptor.getData().getType());
  auto indices = tensorOf(adaptor.getIndices().getType());
  auto updates = tensorOf(adaptor.getUpdates().getType());
  if (failed(checkElementIndices(loc, "scatter_elements", data, indices,
                                 adaptor.getAxis())))
    return failure();
  if (updates.getShape() != indices.getShape() ||
      updates.getElementType() != data.getElementType())
    return emitOptionalError(loc, "scatter_elements updates ", updates,
                             " need the indices' shape ", indices,
                             " and the data's element type ", data);
  types.push_back(data);
  return success();
}

LogicalResult ScatterElementsOp::verify() {
  StringRef reduction = getReduction();
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, reduction))
    return emitOpError() << "reduction '" << reduction
                         << "' is not one of none, add, mul, max, min";
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "concat needs at least one input");
  auto first = tensorOf(adaptor.getInputs().front().getType());
  int64_t axis = adaptor.getAxis();
  if (failed(checkAxis(loc, "concat", axis, first.getRank())))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value input : adaptor.getInputs()) {
    auto tensor = tensorOf(input.getType());
    if (tensor.getRank() != first.getRank() ||
        tensor.getElementType() != first.getElementType())
      return emitOptionalError(loc, "concat inputs ", first, " and ", tensor,
                               " differ in rank or element type");
    for (int64_t d = 0; d < first.getRank(); ++d)
      if (d != axis && tensor.getDimSize(d) != first.getDimSize(d))
        return emitOptionalError(loc, "concat inputs ", first, " and ", tensor,
                                 " differ in dim ", d);
    if (llvm::AddOverflow(shape[axis], tensor.getDimSize(axis), shape[axis]))
      return emitOptionalError(loc, "concat along dim ", axis,
                               " is longer than int64 can count");
  }
  types.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  int64_t axis = adaptor.getAxis();
  if (failed(checkAxis(loc, "split", axis, input.getRank())))
    return failure();
  int64_t total = 0;
  for (int64_t size : adaptor.getSizes()) {
    if (size < 0)
      return emitOptionalError(loc, "split size ", size, " is negative");
    if (llvm::AddOverflow(total, size, total))
      return emitOptionalError(loc, "split sizes add up past int64");
    SmallVector<int64_t> shape(input.getShape());
    shape[axis] = size;
    types.push_back(RankedTensorType::get(shape, input.getElementType()));
  }
  if (total != input.getDimSize(axis))
    return emitOptionalError(loc, "split sizes add up to ", total,
                             " but dim ", axis, " is ",
                             input.getDimSize(axis));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  ArrayRef<int64_t> starts = adaptor.getStarts(), limits = adaptor.getLimits(),
                    strides = adaptor.getStrides();
  int64_t rank = input.getRank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(limits.size()) != rank ||
      static_cast<int64_t>(strides.size()) != rank)
    return emitOptionalError(loc, "slice needs one start, limit and stride "
                                  "per dim (rank ", rank, ")");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = input.getDimSize(d);
    if (strides[d] < 1 || starts[d] < 0 || limits[d] > size ||
        starts[d] > limits[d])
      return emitOptionalError(loc, "slice [", starts[d], ", ", limits[d],
                               ") step ", strides[d],
                               " is not within dim ", d, " of size ", size);
    // Not (span + stride - 1) / stride, which overflows for a dim near
    // INT64_MAX.
    shape.push_back(llvm::divideCeil(uint64_t(limits[d] - starts[d]),
                                     uint64_t(strides[d])));
  }
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  SmallVector<bool> drop(input.getRank(), false);
  for (int64_t axis : adaptor.getAxes()) {
    if (failed(checkAxis(loc, "squeeze", axis, input.getRank())))
      return failure();
    if (input.getDimSize(axis) != 1)
      return emitOptionalError(loc, "squeeze axis ", axis, " has size ",
                               input.getDimSize(axis), ", not 1");
    if (drop[axis])
      return emitOptionalError(loc, "squeeze axis ", axis, " is listed twice");
    drop[axis] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < input.getRank(); ++d)
    if (!drop[d])
      shape.push_back(input.getDimSize(d));
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  int64_t rank = input.getRank() + adaptor.getAxes().size();
  SmallVector<bool> inserted(rank, false);
  for (int64_t axis : adaptor.getAxes()) {
    if (axis < 0 || axis >= rank || inserted[axis])
      return emitOptionalError(loc, "unsqueeze axis ", axis,
                               " is out of range or repeated for result rank ",
                               rank);
    inserted[axis] = true;
  }
  SmallVector<int64_t> shape;
  auto dims = input.getShape().begin();
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(inserted[d] ? 1 : *dims++);
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ExpandOp::verify() {
  auto input = getInput().getType();
  auto result = getResult().getType();
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "cannot change the element type from "
                         << input.getElementType() << " to "
                         << result.getElementType();
  SmallVector<int64_t> shape;
  if (failed(inferBroadcastShape(getLoc(), {input, result}, shape)))
    return failure();
  if (ArrayRef(shape) != result.getShape())
    return emitOpError() << input << " does not expand to " << result;
  return success();
}

LogicalResult FlattenOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis > input.getRank())
    return emitOptionalError(loc, "flatten axis ", axis,
                             " is out of range for rank ", input.getRank());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < input.getRank(); ++d) {
    int64_t &side = d < axis ? outer : inner;
    if (llvm::MulOverflow(side, input.getDimSize(d), side))
      return emitOptionalError(loc, "flatten of ", input, " at axis ", axis,
                               " makes a dim larger than int64 can count");
  }
  types.push_back(
      RankedTensorType::get({outer, inner}, input.getElementType()));
  return success();
}

LogicalResult GlobalAvgPoolOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  if (input.getRank() < 3)
    return emitOptionalError(loc, "global pooling needs rank >= 3, got ",
                             input);
  SmallVector<int64_t> shape(input.getShape().take_front(2));
  shape.append(input.getRank() - 2, 1);
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}
