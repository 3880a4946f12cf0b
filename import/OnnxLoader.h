//===- OnnxLoader.h - read an ONNX file into protobuf classes ---*- C++ -*-===//
//
// The only part of the importer that may touch ONNX's C++ library, which
// throws. It is compiled with exceptions and catches everything at its
// boundary: callers (built without exceptions, like MLIR) get an
// llvm::Expected with a one-line message.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_IMPORT_ONNXLOADER_H
#define BMC_IMPORT_ONNXLOADER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <onnx/onnx_pb.h>

#include <memory>
#include <string>

namespace bm {

/// Reads and parses the ONNX model at `path`. Fails on a missing file, bytes
/// that are not a protobuf ModelProto (truncated or corrupt files included)
/// and a model without a graph. External data is not read.
llvm::Expected<std::unique_ptr<onnx::ModelProto>>
loadOnnxModel(llvm::StringRef path);

/// The bytes of the file at `path` (what loadOnnxModel reads): fails with
/// one line on a missing or unreadable file.
llvm::Expected<std::string> readModelBytes(llvm::StringRef path);

/// Parses a ModelProto from memory (what loadOnnxModel does after reading).
llvm::Expected<std::unique_ptr<onnx::ModelProto>>
parseOnnxModel(llvm::StringRef bytes, llvm::StringRef nameForErrors);

} // namespace bm

#endif // BMC_IMPORT_ONNXLOADER_H
