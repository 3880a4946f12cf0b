//===- OnnxImportFuzzer.cpp - fuzz the ONNX loader and importer -----------===//
//
// Bytes -> parseOnnxModel -> importOnnxModel: protobuf parsing, dim binding,
// parameters and external-data checks, node ordering, every op importer and
// host folder (shape folding), and the final MLIR verification. Failing with
// an llvm::Error is the expected outcome for most inputs; a crash, a
// sanitizer report, a hang or an out-of-memory is the bug. In the libFuzzer
// build OnnxMutator.cpp adds a structure-aware mutator.
//
//===----------------------------------------------------------------------===//

#include "import/OnnxImporter.h"
#include "import/OnnxLoader.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto model = bm::parseOnnxModel(bytes, "fuzz.onnx");
  if (!model) {
    llvm::consumeError(model.takeError());
    return 0;
  }
  // A fresh context per input: uniqued types and attributes would otherwise
  // pile up over millions of runs. No threads: one input, one core.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  bm::ImportOptions options;
  // What `bmc plan` does: a small batch for a symbolic batch dim.
  options.batchSize = 2;
  auto module = bm::importOnnxModel(context, **model, "fuzz/model.onnx",
                                    options);
  if (!module)
    llvm::consumeError(module.takeError());
  return 0;
}
