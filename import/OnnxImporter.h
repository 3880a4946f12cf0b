//===- OnnxImporter.h - ONNX model -> bm dialect ----------------*- C++ -*-===//
//
// The public entry points of phase 1 (import): an ONNX model becomes a module
// with one `func.func @main` of bm ops on static ranked tensors. Parameters
// are function arguments (never dense constants); shape computations are
// folded on the host. Every failure is one line of text, never an abort.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_IMPORT_ONNXIMPORTER_H
#define BMC_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace bm {

struct ImportOptions {
  /// Values of symbolic dimensions ("batch" -> 8). They win over the
  /// model's "bm.dim.NAME" metadata.
  std::map<std::string, int64_t> dims;
  /// Whether "bm.dim.NAME" metadata entries bind dims not given in `dims`.
  bool useModelDefaults = true;
  /// Binds dim 0 of every graph input whose dim 0 is symbolic and not named
  /// in `dims`: the batch, whatever the exporter called it (`bmc plan`
  /// imports with a small batch and scales).
  std::optional<int64_t> batchSize;
  /// Binds dim 1 of every rank-2 integer graph input (token ids) whose dim 1
  /// is symbolic and not named in `dims`: the sequence length (`--seq`).
  std::optional<int64_t> sequenceLength;
  /// Whether the fold phase after the import makes attention cores one
  /// bm.attention each: the trainer's backend runs fused attention (bmc
  /// compile --device cuda, or --fuse-attention on).
  bool fuseAttention = false;
};

/// The symbolic dimensions of a model's graph inputs as an import bound
/// them, but for the batch (dim 0 of every input, when `batchSize` binds
/// it): what `ImportOptions::dims` must hold for another import to build
/// the same model at another batch ("seq" -> 16, "dec_seq" -> 12).
using BoundDims = std::map<std::string, int64_t>;

/// Reads the ONNX file at `path` and imports it. External data is never read
/// (it may be absent); its location is checked to stay inside the model's
/// folder. With `boundDims`, fills it with the dims the import bound.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxFile(mlir::MLIRContext &context, llvm::StringRef path,
               const ImportOptions &options, BoundDims *boundDims = nullptr);

/// An ONNX file read and parsed once: the driver imports it at several
/// batch sizes (finding the batch granularity, planning, one step's
/// batch) and reads its initializers, without reading the file again.
struct OnnxFile {
  std::string path;
  std::shared_ptr<const onnx::ModelProto> model;
  /// SHA-256 of the file's bytes, lowercase hex: what a trainer's
  /// checkpoints and exports name the model by.
  std::string sha256;
};

/// Reads, hashes and parses the ONNX file at `path` (loadOnnxModel's
/// errors).
llvm::Expected<OnnxFile> readOnnxFile(llvm::StringRef path);

/// Imports a file read by readOnnxFile, as importOnnxFile does.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxFile(mlir::MLIRContext &context, const OnnxFile &file,
               const ImportOptions &options, BoundDims *boundDims = nullptr);

/// Imports a parsed model; `path` names it in locations and messages and
/// anchors external data locations.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxModel(mlir::MLIRContext &context, const onnx::ModelProto &model,
                llvm::StringRef path, const ImportOptions &options,
                BoundDims *boundDims = nullptr);

/// Whether an initializer's external data `location` stays inside the
/// folder of the model at `modelPath` (no absolute path, no ".." part): an
/// untrusted model must not make bmc read outside its folder.
bool externalLocationIsSafe(llvm::StringRef location,
                            llvm::StringRef modelPath);

/// The ONNX op types the importer lowers, sorted.
std::vector<std::string> supportedOnnxOps();
/// The ONNX op types the importer can evaluate on the host when all their
/// inputs are constants, sorted.
std::vector<std::string> hostFoldedOnnxOps();
/// The ONNX op types the importer takes only when it can fold them (their
/// inputs constants: Mod, Floor, ...), sorted.
std::vector<std::string> foldOnlyOnnxOps();

} // namespace bm

#endif // BMC_IMPORT_ONNXIMPORTER_H
