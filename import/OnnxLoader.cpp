//===- OnnxLoader.cpp - read an ONNX file into protobuf classes -----------===//
//
// Compiled with -fexceptions (see CMakeLists.txt): protobuf and ONNX may
// throw (std::bad_alloc on absurd sizes, ONNX's own exceptions), and nothing
// may escape into exception-free MLIR code.
//
//===----------------------------------------------------------------------===//

#include "import/OnnxLoader.h"

#include <google/protobuf/io/coded_stream.h>

#include <climits>
#include <exception>
#include <fstream>
#include <sstream>

using llvm::Expected;

namespace {

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

Expected<std::unique_ptr<onnx::ModelProto>>
parseUnguarded(llvm::StringRef bytes, llvm::StringRef name) {
  auto model = std::make_unique<onnx::ModelProto>();
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(bytes.data()),
      static_cast<int>(bytes.size()));
  // Models with embedded weights exceed protobuf's 64 MiB default.
  stream.SetTotalBytesLimit(INT_MAX);
  if (!model->ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
    return failure("'" + name.str() +
                   "' is not an ONNX model (the protobuf is corrupt or "
                   "truncated)");
  if (!model->has_graph() || model->ir_version() <= 0)
    return failure("'" + name.str() +
                   "' is not an ONNX model (no graph or IR version)");
  return std::move(model);
}

} // namespace

Expected<std::unique_ptr<onnx::ModelProto>>
bm::parseOnnxModel(llvm::StringRef bytes, llvm::StringRef nameForErrors) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return failure("'" + nameForErrors.str() +
                   "' is larger than 2 GiB, the protobuf limit; store the "
                   "weights as external data");
  try {
    return parseUnguarded(bytes, nameForErrors);
  } catch (const std::exception &e) {
    return failure("cannot parse '" + nameForErrors.str() + "': " + e.what());
  } catch (...) {
    return failure("cannot parse '" + nameForErrors.str() + "'");
  }
}

Expected<std::unique_ptr<onnx::ModelProto>>
bm::loadOnnxModel(llvm::StringRef path) {
  llvm::Expected<std::string> bytes = readModelBytes(path);
  if (!bytes)
    return bytes.takeError();
  return parseOnnxModel(*bytes, path);
}

llvm::Expected<std::string> bm::readModelBytes(llvm::StringRef path) {
  try {
    std::ifstream in(path.str(), std::ios::binary);
    if (!in)
      return failure("cannot open '" + path.str() + "'");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad())
      return failure("cannot read '" + path.str() + "'");
    return std::move(buffer).str();
  } catch (const std::exception &e) {
    return failure("cannot read '" + path.str() + "': " + e.what());
  }
}
