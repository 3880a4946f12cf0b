//===- Parameters.cpp - initializer values and paper initialisation -------===//

#include "codegen/Parameters.h"
#include "codegen/StepProgram.h"

#include "bm/BmOps.h"
#include "import/OnnxImporter.h"
#include "import/OnnxLoader.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include <unistd.h>

using namespace mlir;
using namespace mlir::bm;

namespace bm {
namespace {

struct ParamArg {
  std::string name;
  RankedTensorType type;
  BlockArgument value;
};

std::vector<ParamArg> parameterArgs(func::FuncOp main) {
  std::vector<ParamArg> params;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    auto kind =
        main.getArgAttrOfType<StringAttr>(i, BmDialect::kParamKindAttrName);
    auto name =
        main.getArgAttrOfType<StringAttr>(i, BmDialect::kParamNameAttrName);
    if (kind && kind.getValue() == BmDialect::kKindParameter && name)
      params.push_back({name.getValue().str(),
                        cast<RankedTensorType>(main.getArgument(i).getType()),
                        main.getArgument(i)});
  }
  return params;
}

/// Refuses parameters that would need more bytes than this machine has
/// before allocating any: a declared size is no promise that it fits
/// (bmc compile builds a trainer that runs here).
llvm::Error checkFitsInMemory(const std::vector<ParamArg> &params) {
  uint64_t bytes = 0;
  for (const ParamArg &param : params) {
    uint64_t width = std::max(1u, param.type.getElementTypeBitWidth() / 8);
    bytes = llvm::SaturatingAdd(
        bytes, llvm::SaturatingMultiply(
                   static_cast<uint64_t>(param.type.getNumElements()), width));
  }
  uint64_t machine = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                     static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes <= machine)
    return llvm::Error::success();
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return llvm::createStringError(llvm::formatv(
      "the model's parameters need {0:F1} GiB, more than this machine's "
      "{1:F1} GiB of memory",
      bytes / kGiB, machine / kGiB));
}

llvm::Error paramError(const std::string &name, const llvm::Twine &problem) {
  return llvm::createStringError("parameter '" + name + "' " + problem.str());
}

/// The external data of `init`, read from the model's folder.
llvm::Error readExternal(llvm::StringRef modelPath,
                         const onnx::TensorProto &init, char *out,
                         size_t bytes) {
  std::string location;
  uint64_t offset = 0;
  for (const auto &entry : init.external_data()) {
    if (entry.key() == "location")
      location = entry.value();
    else if (entry.key() == "offset")
      llvm::StringRef(entry.value()).getAsInteger(10, offset);
  }
  if (!externalLocationIsSafe(location, modelPath))
    return paramError(init.name(), "has external data '" + location +
                                       "' outside the model's folder");
  llvm::SmallString<256> file = llvm::sys::path::parent_path(modelPath);
  llvm::sys::path::append(file, location);
  auto buffer = llvm::MemoryBuffer::getFileSlice(file, bytes, offset);
  if (!buffer)
    return paramError(init.name(),
                      "has no data: cannot read " + llvm::Twine(bytes) +
                          " bytes at offset " + llvm::Twine(offset) + " of '" +
                          file + "' (" + buffer.getError().message() +
                          "); a graph-only model needs --init random");
  if ((*buffer)->getBufferSize() != bytes)
    return paramError(init.name(), "has only " +
                                       llvm::Twine((*buffer)->getBufferSize()) +
                                       " of its " + llvm::Twine(bytes) +
                                       " bytes in '" + file + "'");
  std::memcpy(out, (*buffer)->getBufferStart(), bytes);
  return llvm::Error::success();
}

/// The typed field of an initializer without raw_data, as bytes of `type`.
bool copyTypedField(const onnx::TensorProto &init, bmrt::DType type,
                    ParameterValue &value) {
  size_t count = value.bytes.size() / bmrt::sizeOf(type);
  switch (type) {
  case bmrt::DType::F32:
    if (size_t(init.float_data_size()) != count)
      return false;
    std::memcpy(value.bytes.data(), init.float_data().data(),
                value.bytes.size());
    return true;
  case bmrt::DType::I64:
    if (size_t(init.int64_data_size()) != count)
      return false;
    std::memcpy(value.bytes.data(), init.int64_data().data(),
                value.bytes.size());
    return true;
  case bmrt::DType::I32:
  case bmrt::DType::Bool:
    // ONNX keeps int32 and bool elements in int32_data.
    if (size_t(init.int32_data_size()) != count)
      return false;
    for (size_t i = 0; i < count; ++i) {
      int32_t v = init.int32_data(int(i));
      if (type == bmrt::DType::Bool)
        value.bytes[i] = v != 0;
      else
        std::memcpy(value.bytes.data() + 4 * i, &v, 4);
    }
    return true;
  }
  return false;
}

std::optional<bmrt::DType> dtypeOfOnnx(int32_t type) {
  switch (type) {
  case onnx::TensorProto::FLOAT:
    return bmrt::DType::F32;
  case onnx::TensorProto::INT64:
    return bmrt::DType::I64;
  case onnx::TensorProto::INT32:
    return bmrt::DType::I32;
  case onnx::TensorProto::BOOL:
    return bmrt::DType::Bool;
  default:
    return std::nullopt;
  }
}

llvm::Error readInitializer(llvm::StringRef modelPath,
                            const onnx::TensorProto &init,
                            ParameterValue &value) {
  std::optional<bmrt::DType> type = dtypeOfOnnx(init.data_type());
  if (!type || *type != value.dtype)
    return paramError(init.name(), "has an element type the runtime does not "
                                   "train (it holds fp32 weights and i64, "
                                   "i32 and bool buffers)");
  char *out = reinterpret_cast<char *>(value.bytes.data());
  size_t bytes = value.bytes.size();
  if (init.data_location() == onnx::TensorProto::EXTERNAL)
    return readExternal(modelPath, init, out, bytes);
  if (init.has_raw_data()) {
    if (init.raw_data().size() != bytes)
      return paramError(init.name(), "holds " +
                                         llvm::Twine(init.raw_data().size()) +
                                         " bytes, its shape needs " +
                                         llvm::Twine(bytes));
    std::memcpy(out, init.raw_data().data(), bytes);
    return llvm::Error::success();
  }
  if (!copyTypedField(init, *type, value))
    return paramError(init.name(), "holds fewer or more values than its shape "
                                   "needs");
  return llvm::Error::success();
}

enum class Role { Ones, Zeros, Matrix, ConvWeight };

/// What a parameter is, from the first op that reads it.
Role roleOf(const ParamArg &param) {
  for (OpOperand &use : param.value.getUses()) {
    Operation *op = use.getOwner();
    unsigned index = use.getOperandNumber();
    if (isa<LayerNormOp, RmsNormOp>(op))
      return index == 1 ? Role::Ones : Role::Zeros;
    if (isa<BatchNormOp>(op))
      return index == 1 || index == 4 ? Role::Ones : Role::Zeros;
    if (isa<ConvOp>(op))
      return index == 1 ? Role::ConvWeight : Role::Zeros;
  }
  return param.type.getRank() >= 2 ? Role::Matrix : Role::Zeros;
}

/// The parameter's name, dtype and shape, as a zeros spec.
llvm::Expected<bmrt::InitSpec> emptySpec(const ParamArg &param) {
  std::optional<bmrt::DType> dtype = runtimeDType(param.type.getElementType());
  if (!dtype)
    return paramError(param.name, "has an element type the runtime does not "
                                  "train (it holds fp32 weights and i64, i32 "
                                  "and bool buffers)");
  bmrt::InitSpec spec;
  spec.name = param.name;
  spec.dtype = *dtype;
  spec.shape.assign(param.type.getShape().begin(),
                    param.type.getShape().end());
  return spec;
}

/// A zero-filled value of the parameter's type.
llvm::Expected<ParameterValue> emptyValue(const ParamArg &param) {
  auto spec = emptySpec(param);
  if (!spec)
    return spec.takeError();
  ParameterValue value;
  value.name = spec->name;
  value.dtype = spec->dtype;
  value.shape = spec->shape;
  value.bytes.assign(param.type.getNumElements() * bmrt::sizeOf(spec->dtype),
                     0);
  return value;
}

/// A boolean [..., n, n] buffer: the causal mask, true on and below the
/// diagonal.
bool isCausalMaskShape(const bmrt::InitSpec &spec) {
  size_t rank = spec.shape.size();
  return spec.dtype == bmrt::DType::Bool && rank >= 2 &&
         spec.shape[rank - 1] == spec.shape[rank - 2];
}

/// A weight's scheme, by the role of the op that reads it.
void setKindByRole(const ParamArg &param, bmrt::InitSpec &spec) {
  switch (roleOf(param)) {
  case Role::Ones:
    spec.kind = bmrt::InitKind::Ones;
    break;
  case Role::Zeros:
    spec.kind = bmrt::InitKind::Zeros;
    break;
  case Role::Matrix:
    spec.kind = bmrt::InitKind::Normal;
    spec.stddev = 0.02;
    break;
  case Role::ConvWeight: {
    // fan_in = input channels per group x kernel elements.
    int64_t fanIn = param.type.getNumElements() / param.type.getDimSize(0);
    spec.kind = bmrt::InitKind::Normal;
    spec.stddev = std::sqrt(2.0 / double(std::max<int64_t>(fanIn, 1)));
    break;
  }
  }
}

/// The spec of one parameter: its role's scheme.
llvm::Expected<bmrt::InitSpec> initSpecOf(const ParamArg &param) {
  auto value = emptySpec(param);
  if (!value)
    return value.takeError();
  bmrt::InitSpec &spec = *value;
  if (spec.dtype != bmrt::DType::F32) {
    if (!isCausalMaskShape(spec))
      return paramError(param.name,
                        "is a " + std::string(bmrt::nameOf(spec.dtype)) +
                            " buffer whose values a graph-only model does "
                            "not carry; --init random initialises weights "
                            "and causal masks only");
    spec.kind = bmrt::InitKind::CausalMask;
  } else {
    setKindByRole(param, spec);
  }
  std::string problem = bmrt::checkInitSpec(spec);
  if (!problem.empty())
    return paramError(param.name, problem);
  return spec;
}

} // namespace

llvm::Expected<std::vector<ParameterValue>> readParameters(const OnnxFile &file,
                                                           func::FuncOp main) {
  const std::string &path = file.path;
  std::map<std::string, const onnx::TensorProto *> byName;
  for (const onnx::TensorProto &init : file.model->graph().initializer())
    byName[init.name()] = &init;
  std::vector<ParamArg> params = parameterArgs(main);
  if (llvm::Error err = checkFitsInMemory(params))
    return std::move(err);
  std::vector<ParameterValue> values;
  for (const ParamArg &param : params) {
    auto it = byName.find(param.name);
    if (it == byName.end())
      return paramError(param.name, "is not an initializer of the model");
    auto value = emptyValue(param);
    if (!value)
      return value.takeError();
    if (auto err = readInitializer(path, *it->second, *value))
      return std::move(err);
    values.push_back(std::move(*value));
  }
  return values;
}

llvm::Expected<bmrt::InitPlan> initPlanOf(func::FuncOp main, uint64_t seed) {
  bmrt::InitPlan plan;
  plan.seed = seed;
  for (const ParamArg &param : parameterArgs(main)) {
    auto spec = initSpecOf(param);
    if (!spec)
      return spec.takeError();
    plan.tensors.push_back(std::move(*spec));
  }
  return plan;
}

llvm::Expected<std::vector<ParameterValue>>
initialiseParameters(func::FuncOp main, uint64_t seed) {
  if (llvm::Error err = checkFitsInMemory(parameterArgs(main)))
    return std::move(err);
  auto plan = initPlanOf(main, seed);
  if (!plan)
    return plan.takeError();
  return generateParameters(*plan);
}

std::vector<ParameterValue> generateParameters(const bmrt::InitPlan &plan) {
  std::vector<ParameterValue> values;
  for (const bmrt::InitSpec &spec : plan.tensors) {
    ParameterValue value;
    value.name = spec.name;
    value.dtype = spec.dtype;
    value.shape = spec.shape;
    value.bytes.resize(bmrt::numElements(spec.shape) *
                       bmrt::sizeOf(spec.dtype));
    bmrt::fillInit(spec, plan.seed, value.bytes.data());
    values.push_back(std::move(value));
  }
  return values;
}

} // namespace bm
