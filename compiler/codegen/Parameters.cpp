//===- Parameters.cpp - initializer values and paper initialisation -------===//

#include "compiler/codegen/Parameters.h"

#include "bm/BmOps.h"
#include "compiler/import/OnnxImporter.h"
#include "compiler/import/OnnxLoader.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>
#include <random>

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
    auto kind = main.getArgAttrOfType<StringAttr>(i, "bm.kind");
    auto name = main.getArgAttrOfType<StringAttr>(i, "bm.name");
    if (kind && kind.getValue() == "parameter" && name)
      params.push_back({name.getValue().str(),
                        cast<RankedTensorType>(main.getArgument(i).getType()),
                        main.getArgument(i)});
  }
  return params;
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

llvm::Error readInitializer(llvm::StringRef modelPath,
                            const onnx::TensorProto &init,
                            ParameterValue &value) {
  if (init.data_type() != onnx::TensorProto::FLOAT)
    return paramError(init.name(), "is not fp32; the CPU runtime trains fp32 "
                                   "parameters");
  size_t count = value.values.size(), bytes = count * sizeof(float);
  char *out = reinterpret_cast<char *>(value.values.data());
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
  if (static_cast<size_t>(init.float_data_size()) != count)
    return paramError(init.name(),
                      "holds " + llvm::Twine(init.float_data_size()) +
                          " values, its shape needs " + llvm::Twine(count));
  std::copy(init.float_data().begin(), init.float_data().end(),
            value.values.begin());
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

} // namespace

llvm::Expected<std::vector<ParameterValue>>
readParameters(llvm::StringRef path, func::FuncOp main) {
  auto model = loadOnnxModel(path);
  if (!model)
    return model.takeError();
  std::map<std::string, const onnx::TensorProto *> byName;
  for (const onnx::TensorProto &init : (*model)->graph().initializer())
    byName[init.name()] = &init;
  std::vector<ParameterValue> values;
  for (const ParamArg &param : parameterArgs(main)) {
    auto it = byName.find(param.name);
    if (it == byName.end())
      return paramError(param.name, "is not an initializer of the model");
    ParameterValue value{param.name,
                         {param.type.getShape().begin(),
                          param.type.getShape().end()},
                         std::vector<float>(param.type.getNumElements())};
    if (auto err = readInitializer(path, *it->second, value))
      return std::move(err);
    values.push_back(std::move(value));
  }
  return values;
}

std::vector<ParameterValue> initialiseParameters(func::FuncOp main,
                                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ParameterValue> values;
  for (const ParamArg &param : parameterArgs(main)) {
    ParameterValue value{param.name,
                         {param.type.getShape().begin(),
                          param.type.getShape().end()},
                         std::vector<float>(param.type.getNumElements())};
    Role role = roleOf(param);
    double stddev = 0.02;
    if (role == Role::ConvWeight) {
      // fan_in = input channels per group x kernel elements.
      int64_t fanIn = param.type.getNumElements() / param.type.getDimSize(0);
      stddev = std::sqrt(2.0 / double(std::max<int64_t>(fanIn, 1)));
    }
    std::normal_distribution<double> normal(0.0, stddev);
    for (float &v : value.values)
      v = role == Role::Ones    ? 1.0f
          : role == Role::Zeros ? 0.0f
                                : static_cast<float>(normal(rng));
    values.push_back(std::move(value));
  }
  return values;
}

} // namespace bm
