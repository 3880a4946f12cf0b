//===- NodeContext.cpp - what an op importer sees of one ONNX node --------===//

#include "import/NodeContext.h"

#include "bm/BmOps.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

using namespace bm::import;
using namespace mlir;
using namespace mlir::bm;

const HostTensor *NodeContext::host(unsigned i) const {
  if (!hasInput(i))
    return nullptr;
  auto it = graph.values.find(node.input(i));
  if (it == graph.values.end() || !it->second.host)
    return nullptr;
  return &*it->second.host;
}

const std::vector<HostTensor> *NodeContext::hostSequence(unsigned i) const {
  const ImportedValue *v = hasInput(i) ? lookup(node.input(i)) : nullptr;
  return v && v->sequence ? &*v->sequence : nullptr;
}

bool NodeContext::allInputsOnHost() const {
  for (unsigned i = 0, e = numInputs(); i < e; ++i)
    if (hasInput(i) && !host(i) && !hostSequence(i))
      return false;
  return true;
}

namespace bm::import {
LogicalResult checkNodeInputs(NodeContext &nc, const OpImporter &importer) {
  if (failed(checkAttributesOfOpset(nc)))
    return failure();
  for (unsigned i = 0; i < importer.minInputs; ++i)
    if (!nc.hasInput(i))
      return nc.error("input " + Twine(i) + " is missing (the op needs " +
                      Twine(importer.minInputs) +
                      (importer.minInputs == 1 ? " input)" : " inputs)"));
  return nc.checkSequenceInputs();
}
} // namespace bm::import

LogicalResult NodeContext::checkSequenceInputs() {
  static const llvm::StringLiteral kTakeSequences[] = {
      "ConcatFromSequence", "Loop", "SequenceInsert"};
  if (llvm::is_contained(kTakeSequences, node.op_type()))
    return success();
  for (unsigned i = 0, e = numInputs(); i < e; ++i)
    if (hostSequence(i))
      return error("input '" + node.input(i) +
                   "' is a sequence, which this op does not take");
  return success();
}

const ImportedValue *NodeContext::lookup(const std::string &name) const {
  auto it = graph.values.find(name);
  return it == graph.values.end() ? nullptr : &it->second;
}

void NodeContext::bind(const std::string &name, ImportedValue value) {
  graph.values[name] = std::move(value);
}

LogicalResult NodeContext::appendIfGiven(unsigned i,
                                         SmallVectorImpl<Value> &operands) {
  if (!hasInput(i))
    return success();
  FailureOr<Value> input = value(i);
  if (failed(input))
    return failure();
  operands.push_back(*input);
  return success();
}

FailureOr<Value> NodeContext::value(unsigned i) {
  if (!hasInput(i)) {
    (void)error("input " + Twine(i) + " is missing");
    return failure();
  }
  auto it = graph.values.find(node.input(i));
  if (it == graph.values.end()) {
    (void)error("input '" + node.input(i) + "' is not defined");
    return failure();
  }
  ImportedValue &imported = it->second;
  if (imported.value)
    return imported.value;
  if (imported.sequence) {
    (void)error("input '" + node.input(i) +
                "' is a sequence; bm holds sequences only while it evaluates "
                "a loop on constants");
    return failure();
  }
  FailureOr<Value> materialised = constant(*imported.host);
  if (failed(materialised))
    return failure();
  // Materialise once per ONNX value; later users share the constant.
  graph.values[node.input(i)].value = *materialised;
  return materialised;
}

RankedTensorType NodeContext::type(unsigned i) const {
  if (!hasInput(i))
    return nullptr;
  auto it = graph.values.find(node.input(i));
  if (it == graph.values.end())
    return nullptr;
  if (it->second.value)
    return cast<RankedTensorType>(it->second.value.getType());
  if (!it->second.host)
    return nullptr;
  const HostTensor &t = *it->second.host;
  return RankedTensorType::get(
      t.shape, elementTypeOf(graph.builder.getContext(), t.dtype));
}

FailureOr<std::vector<int64_t>> NodeContext::constInts(unsigned i,
                                                       StringRef what) {
  const HostTensor *t = host(i);
  if (!t) {
    (void)error("the " + what +
                " input must be a constant the importer can fold; it is "
                "computed from run-time values");
    return failure();
  }
  return t->toInts();
}

FailureOr<std::optional<std::vector<int64_t>>> NodeContext::axes(unsigned i) {
  if (auto attr = getInts("axes"))
    return std::optional<std::vector<int64_t>>(std::move(*attr));
  if (!hasInput(i))
    return std::optional<std::vector<int64_t>>();
  FailureOr<std::vector<int64_t>> in = constInts(i, "axes");
  if (failed(in))
    return failure();
  return std::optional<std::vector<int64_t>>(std::move(*in));
}

void NodeContext::setOutput(unsigned i, Value value) {
  if (hasOutput(i))
    graph.values[node.output(i)] = ImportedValue{value, std::nullopt, {}};
}

void NodeContext::setOutput(unsigned i, HostTensor tensor) {
  if (hasOutput(i))
    graph.values[node.output(i)] =
        ImportedValue{Value(), std::move(tensor), {}};
}

void NodeContext::setSequenceOutput(unsigned i,
                                    std::vector<HostTensor> sequence) {
  if (hasOutput(i))
    graph.values[node.output(i)] =
        ImportedValue{Value(), std::nullopt, std::move(sequence)};
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

const onnx::AttributeProto *NodeContext::typedAttr(
    StringRef name,
    std::initializer_list<onnx::AttributeProto::AttributeType> accepted) const {
  const onnx::AttributeProto *a = attr(name);
  if (!a || llvm::is_contained(accepted, a->type()))
    return a;
  // The importer reads on with the fallback; importNode reports this first.
  if (graph.error.empty())
    graph.error = describe() + ": attribute '" + name.str() + "' is " +
                  onnx::AttributeProto::AttributeType_Name(a->type()) +
                  ", expected " +
                  onnx::AttributeProto::AttributeType_Name(*accepted.begin());
  return nullptr;
}

int64_t NodeContext::getInt(StringRef name, int64_t fallback) const {
  const onnx::AttributeProto *a = typedAttr(name, {onnx::AttributeProto::INT});
  return a ? a->i() : fallback;
}

float NodeContext::getFloat(StringRef name, float fallback) const {
  const onnx::AttributeProto *a =
      typedAttr(name, {onnx::AttributeProto::FLOAT, onnx::AttributeProto::INT});
  if (!a)
    return fallback;
  return a->type() == onnx::AttributeProto::INT ? static_cast<float>(a->i())
                                                : a->f();
}

std::string NodeContext::getString(StringRef name, StringRef fallback) const {
  const onnx::AttributeProto *a =
      typedAttr(name, {onnx::AttributeProto::STRING});
  return a ? a->s() : fallback.str();
}

std::optional<std::vector<int64_t>> NodeContext::getInts(StringRef name) const {
  const onnx::AttributeProto *a =
      typedAttr(name, {onnx::AttributeProto::INTS, onnx::AttributeProto::INT});
  if (!a)
    return std::nullopt;
  if (a->type() == onnx::AttributeProto::INT)
    return std::vector<int64_t>{a->i()};
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

LogicalResult NodeContext::gatherIndexError(int64_t index, int64_t axis,
                                            int64_t dim) {
  return error("gather index " + Twine(index) + " is out of range for '" +
               node.input(0) + "', whose dim " + Twine(axis) + " holds " +
               Twine(dim));
}

std::string NodeContext::describe() const {
  std::string op = node.op_type();
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    op = node.domain() + "." + op;
  if (!node.name().empty())
    return "node '" + node.name() + "' (" + op + ")";
  if (node.output_size() > 0)
    return "node producing '" + node.output(0) + "' (" + op + ")";
  return "node (" + op + ")";
}

LogicalResult NodeContext::error(const Twine &message) {
  if (graph.error.empty())
    graph.error = describe() + ": " + message.str();
  return failure();
}

FailureOr<int64_t> NodeContext::axis(int64_t axis, int64_t rank,
                                     StringRef what) {
  int64_t normalised = axis < 0 ? axis + rank : axis;
  if (normalised < 0 || normalised >= rank) {
    (void)error(what + " " + Twine(axis) + " is out of range for rank " +
                Twine(rank));
    return failure();
  }
  return normalised;
}

FailureOr<SmallVector<int64_t>> NodeContext::normaliseAxes(
    ArrayRef<int64_t> axes, int64_t rank, StringRef what,
    function_ref<LogicalResult(int64_t given, int64_t axis)> check) {
  SmallVector<int64_t> normalised;
  for (int64_t a : axes) {
    FailureOr<int64_t> n = axis(a, rank, what);
    if (failed(n) || (check && failed(check(a, *n))))
      return failure();
    normalised.push_back(*n);
  }
  return normalised;
}

FailureOr<Operation *> NodeContext::create(StringRef opName,
                                           ValueRange operands,
                                           ArrayRef<NamedAttribute> attrs,
                                           TypeRange resultTypes,
                                           unsigned numResults) {
  OperationState state(loc, opName);
  state.addOperands(operands);
  state.addAttributes(attrs);
  bool infer = resultTypes.empty();
  if (infer) {
    // Placeholders, replaced by the inferred types below. The generated
    // inferring builders would abort on bad input instead of reporting it.
    Type placeholder =
        operands.empty()
            ? Type(RankedTensorType::get({}, builder().getF32Type()))
            : operands.front().getType();
    state.types.append(numResults, placeholder);
  } else {
    state.addTypes(resultTypes);
  }
  graph.lastDiagnostic.clear();
  Operation *op = builder().create(state);
  if (infer) {
    auto inferable = dyn_cast<InferTypeOpInterface>(op);
    SmallVector<Type> types;
    if (!inferable ||
        failed(inferable.inferReturnTypes(
            context(), loc, op->getOperands(), op->getRawDictionaryAttrs(),
            op->getPropertiesStorage(), op->getRegions(), types)) ||
        types.size() != op->getNumResults()) {
      op->erase();
      return error(graph.lastDiagnostic.empty()
                       ? "cannot infer the result type of " + opName
                       : StringRef(graph.lastDiagnostic));
    }
    for (auto [result, type] : llvm::zip(op->getResults(), types))
      result.setType(type);
  }
  for (Type type : op->getResultTypes()) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (tensor && !checkedNumElements(tensor.getShape())) {
      op->erase();
      std::string text;
      llvm::raw_string_ostream os(text);
      os << "result shape " << type
         << " has a negative dim or more elements than int64 can count";
      return error(text);
    }
  }
  if (failed(mlir::verify(op))) {
    op->erase();
    return error(graph.lastDiagnostic.empty()
                     ? "the bm op does not verify"
                     : StringRef(graph.lastDiagnostic));
  }
  return op;
}

FailureOr<Value> NodeContext::build(StringRef opName, ValueRange operands,
                                    ArrayRef<NamedAttribute> attrs,
                                    Type resultType) {
  FailureOr<Operation *> op =
      resultType ? create(opName, operands, attrs, TypeRange(resultType))
                 : create(opName, operands, attrs);
  if (failed(op))
    return failure();
  return (*op)->getResult(0);
}

FailureOr<Value> NodeContext::constant(const HostTensor &tensor) {
  Type element = elementTypeOf(context(), tensor.dtype);
  if (!element) {
    (void)error("constant of element type " + dtypeName(tensor.dtype) +
                " is not supported");
    return failure();
  }
  auto type = RankedTensorType::get(tensor.shape, element);
  return build<ConstantOp>({}, {named("value", toElementsAttr(tensor, type))},
                           type);
}

//===----------------------------------------------------------------------===//
// Small builders shared by the op importers
//===----------------------------------------------------------------------===//

namespace bm::import {

LogicalResult setResult(NodeContext &nc, FailureOr<Value> value,
                        unsigned output) {
  if (failed(value))
    return failure();
  nc.setOutput(output, *value);
  return success();
}

Attribute i64(NodeContext &nc, int64_t v) {
  return nc.builder().getI64IntegerAttr(v);
}

Attribute f32(NodeContext &nc, double v) {
  return nc.builder().getF32FloatAttr(static_cast<float>(v));
}

Attribute array(NodeContext &nc, ArrayRef<int64_t> v) {
  return nc.builder().getDenseI64ArrayAttr(v);
}

Attribute boolean(NodeContext &nc, bool v) {
  return nc.builder().getBoolAttr(v);
}

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A scalar-shaped (rank 0) constant of `like`'s element type.
FailureOr<Value> scalarLike(NodeContext &nc, Value like, double value) {
  HostTensor t = HostTensor::zeros(dtypeOf(typeOf(like).getElementType()), {});
  t.set(0, value);
  return nc.constant(t);
}

SmallVector<NamedAttribute, 2>
reduceAttrs(NodeContext &nc, ArrayRef<int64_t> axes, bool keepDims) {
  return {nc.named("axes", array(nc, axes)),
          nc.named("keep_dims", boolean(nc, keepDims))};
}

FailureOr<CenteredDeviation> centeredDeviation(NodeContext &nc, Value x,
                                               Value mean,
                                               ArrayRef<int64_t> axes,
                                               double epsilon) {
  FailureOr<Value> centered = binaryOf<SubOp>(nc, x, mean);
  if (failed(centered))
    return failure();
  FailureOr<Value> r = binaryOf<MulOp>(nc, *centered, *centered);
  if (succeeded(r))
    r = reduceOf<ReduceMeanOp>(nc, *r, axes, /*keepDims=*/true);
  if (failed(r))
    return failure();
  FailureOr<Value> eps = scalarLike(nc, *r, epsilon);
  if (failed(eps))
    return failure();
  r = binaryOf<AddOp>(nc, *r, *eps);
  if (succeeded(r))
    r = unaryOf<SqrtOp>(nc, *r);
  if (failed(r))
    return failure();
  return CenteredDeviation{*centered, *r};
}

} // namespace bm::import
