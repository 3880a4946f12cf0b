//===- StepProgram.cpp - bm functions -> runtime programs -----------------===//

#include "codegen/StepProgram.h"

#include "bm/BmOps.h"
#include "bmrt/Executor.h"
#include "bmrt/OpSpec.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"

#include <cstring>

using namespace mlir;
using mlir::bm::BmDialect;
using mlir::bm::ConstantOp;

namespace bm {
namespace {

/// Splat constants above this many elements become a `fill` at run time
/// instead of their values in the program file (zero gradients of unused
/// parameters, all-ones masks).
constexpr int64_t kLargestInlineSplat = 16;

/// The ONNX node an op came from (the importer's NameLoc), or empty.
std::string nodeOf(Operation *op) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return name.getName().str();
  return "";
}

llvm::Error failAt(Operation *op, const llvm::Twine &message) {
  std::string node = nodeOf(op);
  std::string where = node.empty() ? "" : " (node '" + node + "')";
  return llvm::createStringError(
      "codegen: '" + op->getName().getStringRef().str() + "'" + where + ": " +
      message.str());
}

/// A collective's mesh axes as the program names them: "dp,tp".
std::string joinAxes(ArrayAttr axes) {
  std::string text;
  for (Attribute axis : axes)
    text += (text.empty() ? "" : ",") + cast<StringAttr>(axis).getValue().str();
  return text;
}

std::vector<std::string> axisNames(ArrayAttr axes) {
  std::vector<std::string> names;
  for (Attribute axis : axes)
    names.push_back(cast<StringAttr>(axis).getValue().str());
  return names;
}

/// Per dim, the axes splitting it; empty when nothing is split.
std::vector<std::vector<std::string>> shardingOf(mlir::bm::ShardingAttr attr) {
  std::vector<std::vector<std::string>> dims;
  bool split = false;
  for (Attribute dim : attr.getDims()) {
    dims.push_back(axisNames(cast<ArrayAttr>(dim)));
    split |= !dims.back().empty();
  }
  return split ? dims : std::vector<std::vector<std::string>>{};
}

std::string typeText(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

class Lowering {
public:
  Lowering(func::FuncOp func, bmrt::Program &program)
      : func(func), program(program) {}

  llvm::Error run() {
    if (auto err = addArguments())
      return err;
    Block &body = func.getBody().front();
    for (Operation &op : body.without_terminator())
      if (auto err = lowerOp(&op))
        return err;
    // A stage with no backward of its own (one passing values on) starts
    // its backward at its end.
    if (backwardFrom || (isStage && program.backwardStart < 0))
      program.backwardStart = static_cast<int>(program.instrs.size());
    if (auto err = lowerResults(cast<func::ReturnOp>(body.getTerminator())))
      return err;
    markFrozenParameters();
    return llvm::Error::success();
  }

private:
  /// A slot of `type`; `value` (may be null) then maps to it. `where` is
  /// the op (or null for an argument) an error names.
  llvm::Expected<int> addSlot(Type type, Value value, bmrt::SlotKind kind,
                              std::string name, Operation *where) {
    auto tensor = cast<RankedTensorType>(type);
    std::optional<bmrt::DType> dtype = runtimeDType(tensor.getElementType());
    if (!dtype) {
      std::string problem = "has element type " +
                            typeText(tensor.getElementType()) +
                            ", which the runtime does not compute in (fp32, "
                            "i64, i32, i1)";
      if (where)
        return failAt(where, problem);
      return llvm::createStringError("codegen: argument '" + name + "' " +
                                     problem);
    }
    bmrt::Slot slot;
    slot.kind = kind;
    slot.dtype = *dtype;
    slot.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
    slot.name = std::move(name);
    program.slots.push_back(std::move(slot));
    int index = static_cast<int>(program.slots.size()) - 1;
    if (value)
      slots[value] = index;
    return index;
  }
  llvm::Expected<int> addSlot(Value value, bmrt::SlotKind kind,
                              std::string name, Operation *where) {
    return addSlot(value.getType(), value, kind, std::move(name), where);
  }

  static bmrt::SlotKind slotKindOf(StringRef kind) {
    if (kind == BmDialect::kKindParameter)
      return bmrt::SlotKind::Param;
    if (kind == BmDialect::kKindLabel)
      return bmrt::SlotKind::Label;
    if (kind == BmDialect::kKindActivation)
      return bmrt::SlotKind::Activation;
    if (kind == BmDialect::kKindActivationGrad)
      return bmrt::SlotKind::ActivationGrad;
    return bmrt::SlotKind::Input;
  }

  llvm::Error addArguments() {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto kindAttr =
          func.getArgAttrOfType<StringAttr>(i, BmDialect::kParamKindAttrName);
      auto nameAttr =
          func.getArgAttrOfType<StringAttr>(i, BmDialect::kParamNameAttrName);
      StringRef kind =
          kindAttr ? kindAttr.getValue() : StringRef(BmDialect::kKindInput);
      bmrt::SlotKind slotKind = slotKindOf(kind);
      std::string name = nameAttr ? nameAttr.getValue().str()
                                  : "arg" + std::to_string(i);
      auto slot = addSlot(func.getArgument(i), slotKind, name, nullptr);
      if (!slot)
        return slot.takeError();
      auto sharding = func.getArgAttrOfType<mlir::bm::ShardingAttr>(
          i, BmDialect::kShardingAttrName);
      if (sharding && !program.mesh.empty())
        program.slots[*slot].sharding = shardingOf(sharding);
      if (auto model = func.getArgAttrOfType<DenseI64ArrayAttr>(
              i, BmDialect::kModelShapeAttrName))
        program.slots[*slot].model.assign(model.asArrayRef().begin(),
                                          model.asArrayRef().end());
    }
    return llvm::Error::success();
  }

  /// A constant's elements, converted to the slot's dtype.
  llvm::Error lowerConstant(ConstantOp constant) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!dense)
      return failAt(constant, "is not a dense constant");
    auto type = cast<RankedTensorType>(constant.getType());
    if (dense.isSplat() && type.getNumElements() > kLargestInlineSplat) {
      auto slot = addSlot(constant.getResult(), bmrt::SlotKind::Value, "",
                          constant);
      if (!slot)
        return slot.takeError();
      bmrt::Instr fill;
      fill.op = "fill";
      fill.results = {*slot};
      bmrt::Attr value;
      value.kind = bmrt::Attr::Kind::Float;
      value.f = isa<FloatType>(type.getElementType())
                    ? dense.getSplatValue<APFloat>().convertToDouble()
                    : double(dense.getSplatValue<APInt>().getSExtValue());
      fill.attrs["value"] = value;
      fill.comment = nodeOf(constant);
      if (auto layer =
              constant->getAttrOfType<IntegerAttr>(BmDialect::kLayerAttrName))
        fill.layer = static_cast<int>(layer.getInt());
      if (auto cls = constant->getAttrOfType<IntegerAttr>(
              BmDialect::kBlockClassAttrName))
        fill.blockClass = static_cast<int>(cls.getInt());
      program.instrs.push_back(std::move(fill));
      return llvm::Error::success();
    }
    auto slot =
        addSlot(constant.getResult(), bmrt::SlotKind::Const, "", constant);
    if (!slot)
      return slot.takeError();
    bmrt::Slot &s = program.slots[*slot];
    s.data.resize(s.bytes());
    int64_t i = 0;
    if (isa<FloatType>(type.getElementType())) {
      for (APFloat v : dense.getValues<APFloat>()) {
        float f = static_cast<float>(v.convertToDouble());
        std::memcpy(s.data.data() + 4 * i++, &f, 4);
      }
      return llvm::Error::success();
    }
    for (APInt v : dense.getValues<APInt>()) {
      int64_t x = v.getBitWidth() == 1 ? v.getZExtValue() : v.getSExtValue();
      std::memcpy(s.data.data() + i++ * bmrt::sizeOf(s.dtype), &x,
                  bmrt::sizeOf(s.dtype));
    }
    return llvm::Error::success();
  }

  /// The attributes the kernels read: integers (and booleans), floats,
  /// integer arrays and strings. Annotations of earlier phases ("bm.*") are
  /// not the kernel's business.
  llvm::Error lowerAttrs(Operation *op, bmrt::Instr &instr) {
    for (NamedAttribute named : op->getAttrs()) {
      StringRef key = named.getName();
      if (BmDialect::isAnnotation(key))
        continue;
      bmrt::Attr attr;
      Attribute value = named.getValue();
      if (auto b = dyn_cast<BoolAttr>(value)) {
        attr.i = b.getValue();
      } else if (auto i = dyn_cast<IntegerAttr>(value)) {
        attr.i = i.getInt();
      } else if (auto f = dyn_cast<FloatAttr>(value)) {
        attr.kind = bmrt::Attr::Kind::Float;
        attr.f = f.getValueAsDouble();
      } else if (auto ints = dyn_cast<DenseI64ArrayAttr>(value)) {
        attr.kind = bmrt::Attr::Kind::Ints;
        attr.ints.assign(ints.asArrayRef().begin(), ints.asArrayRef().end());
      } else if (auto s = dyn_cast<StringAttr>(value)) {
        attr.kind = bmrt::Attr::Kind::String;
        attr.s = s.getValue().str();
      } else if (isa<FlatSymbolRefAttr>(value)) {
        continue; // a collective's mesh: the program has one
      } else if (auto axes = dyn_cast<ArrayAttr>(value)) {
        attr.kind = bmrt::Attr::Kind::String;
        attr.s = joinAxes(axes);
      } else {
        return failAt(op, "has attribute '" + key +
                              "' of a kind the runtime cannot read");
      }
      instr.attrs[key.str()] = std::move(attr);
    }
    return llvm::Error::success();
  }

  llvm::Error lowerOp(Operation *op) {
    // A pipeline stage's backward starts at the first instruction from the
    // op autodiff (or stage splitting) marked on.
    if (op->hasAttr(BmDialect::kGradientSeedAttrName) &&
        program.backwardStart < 0 && isStage)
      backwardFrom = true;
    if (auto constant = dyn_cast<ConstantOp>(op))
      return lowerConstant(constant);
    // On the whole (unpartitioned) model a reshard is the same value.
    if (auto reshard = dyn_cast<mlir::bm::ReshardOp>(op)) {
      slots[reshard.getResult()] = slots.lookup(reshard.getInput());
      return llvm::Error::success();
    }
    bmrt::Instr instr;
    instr.op = op->getName().stripDialect().str();
    if (!bmrt::isStepOp(instr.op))
      return failAt(op, "has no kernel in the runtime");
    for (Value operand : op->getOperands())
      instr.operands.push_back(slots.lookup(operand));
    for (Value result : op->getResults()) {
      auto slot = addSlot(result, bmrt::SlotKind::Value, "", op);
      if (!slot)
        return slot.takeError();
      instr.results.push_back(*slot);
    }
    if (auto err = lowerAttrs(op, instr))
      return err;
    instr.comment = nodeOf(op);
    if (backwardFrom) {
      program.backwardStart = static_cast<int>(program.instrs.size());
      backwardFrom = false;
    }
    if (auto layer = op->getAttrOfType<IntegerAttr>(BmDialect::kLayerAttrName))
      instr.layer = static_cast<int>(layer.getInt());
    if (auto blockClass =
            op->getAttrOfType<IntegerAttr>(BmDialect::kBlockClassAttrName))
      instr.blockClass = static_cast<int>(blockClass.getInt());
    program.instrs.push_back(std::move(instr));
    return llvm::Error::success();
  }

  /// A gradient slot for each `bm.grad_of` result: the instruction that
  /// computes the value writes the gradient buffer directly when nothing
  /// else claims its slot; otherwise a copy fills it.
  llvm::Error lowerResults(func::ReturnOp ret) {
    llvm::DenseMap<int, int> producer; // value slot -> instruction
    for (size_t t = 0; t < program.instrs.size(); ++t)
      for (int r : program.instrs[t].results)
        producer[r] = static_cast<int>(t);
    llvm::DenseSet<int> claimed;
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      int slot = slots.lookup(value);
      auto gradOf = func.getResultAttrOfType<StringAttr>(
          index, BmDialect::kGradOfAttrName);
      auto kind = func.getResultAttrOfType<StringAttr>(
          index, BmDialect::kParamKindAttrName);
      std::vector<std::string> partial;
      if (auto axes = func.getResultAttrOfType<ArrayAttr>(
              index, BmDialect::kPartialAttrName))
        partial = axisNames(axes);
      if (kind && (kind.getValue() == BmDialect::kKindSend ||
                   kind.getValue() == BmDialect::kKindSendGrad)) {
        (kind.getValue() == BmDialect::kKindSend ? program.sends
                                                 : program.sendGrads)
            .push_back(slot);
        claimed.insert(slot);
        continue;
      }
      if (!gradOf) {
        if (kind && kind.getValue() == BmDialect::kKindLoss) {
          program.loss = slot;
          program.lossPartial = partial;
        } else
          program.outputs.push_back(slot);
        claimed.insert(slot);
        continue;
      }
      bmrt::Slot &from = program.slots[slot];
      auto it = producer.find(slot);
      if (from.kind == bmrt::SlotKind::Value && it != producer.end() &&
          !claimed.contains(slot)) {
        from.kind = bmrt::SlotKind::Grad;
        from.name = gradOf.getValue().str();
        shardLikeParameter(from, partial);
        claimed.insert(slot);
        continue;
      }
      auto grad = addSlot(value.getType(), Value(), bmrt::SlotKind::Grad,
                          gradOf.getValue().str(), ret);
      if (!grad)
        return grad.takeError();
      shardLikeParameter(program.slots[*grad], partial);
      bmrt::Instr copy;
      copy.op = "copy";
      copy.operands = {slot};
      copy.results = {*grad};
      copy.comment = "gradient of " + gradOf.getValue().str();
      program.instrs.push_back(std::move(copy));
    }
    return llvm::Error::success();
  }

  /// A training step names the parameters it leaves without a gradient
  /// (batch norm's running statistics, weights the loss does not read), so
  /// that the verifier can tell them from a parameter whose gradient was
  /// lost on the way to the optimizer.
  void markFrozenParameters() {
    if (program.slotsOf(bmrt::SlotKind::Grad).empty())
      return; // a forward: nothing is trained, nothing frozen
    for (int param : program.slotsOf(bmrt::SlotKind::Param))
      program.slots[param].frozen = program.gradientOf(param) < 0;
  }

  /// A gradient is split like its parameter; `partial` are the axes the
  /// trainer still sums it over.
  void shardLikeParameter(bmrt::Slot &grad, std::vector<std::string> partial) {
    for (const bmrt::Slot &param : program.slots)
      if (param.kind == bmrt::SlotKind::Param && param.name == grad.name)
        grad.sharding = param.sharding;
    grad.partial = std::move(partial);
  }

  func::FuncOp func;
  bmrt::Program &program;
  llvm::DenseMap<Value, int> slots;
  /// A pipeline stage's function (bm-split-stages): its backward runs
  /// apart from its forward.
  bool isStage = func.getSymName().starts_with("stage_");
  bool backwardFrom = false;
};

} // namespace

/// bm-partition marks what a partitioned step leaves to the trainer on
/// its results (`bm.partial`), and bm-split-stages names its stages;
/// @main, annotated but whole, has neither.
static bool isPartitioned(func::FuncOp func) {
  if (func.getSymName().starts_with("stage_"))
    return true;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, BmDialect::kPartialAttrName))
      return true;
  return false;
}

/// The mesh of a partitioned step, in the order ranks are numbered
/// (bmrt::kMeshAxes); empty for a step that is not partitioned.
static std::vector<bmrt::MeshAxis> meshOf(func::FuncOp func) {
  auto module = func->getParentOfType<ModuleOp>();
  auto mesh = module ? module.lookupSymbol<mlir::bm::MeshOp>("mesh")
                     : mlir::bm::MeshOp();
  if (!mesh || !isPartitioned(func))
    return {};
  std::vector<bmrt::MeshAxis> axes;
  for (const char *name : bmrt::kMeshAxes) {
    int64_t index = mesh.getMesh().findAxis(name);
    if (index < 0 && bmrt::isOptionalAxis(name))
      continue;
    axes.push_back(
        {name, index < 0 ? 1 : static_cast<int>(mesh.getMesh().getAxisSizes()[index])});
  }
  return axes;
}

std::optional<bmrt::DType> runtimeDType(Type element) {
  if (element.isF32())
    return bmrt::DType::F32;
  if (element.isInteger(64))
    return bmrt::DType::I64;
  if (element.isInteger(32))
    return bmrt::DType::I32;
  if (element.isInteger(1))
    return bmrt::DType::Bool;
  return std::nullopt;
}

llvm::Expected<bmrt::Program> lowerToProgram(func::FuncOp func,
                                             llvm::StringRef model) {
  bmrt::Program program;
  program.model = model.str();
  program.mesh = meshOf(func);
  Lowering lowering(func, program);
  if (auto err = lowering.run())
    return std::move(err);
  return program;
}

} // namespace bm
