//===- Parameters.h - the initial parameter values of a trainer -*- C++ -*-===//
//
// `bmc compile` gives the trainer its step-0 weights: the ONNX initializers
// (inline or external data inside the model's folder), or, for a graph-only
// model, values initialised as the architecture's papers do (`--init
// random`), chosen by what each parameter feeds in the forward graph.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_COMPILER_CODEGEN_PARAMETERS_H
#define BMC_COMPILER_CODEGEN_PARAMETERS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace bm {

/// One fp32 parameter tensor on the host.
struct ParameterValue {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

/// Reads every parameter argument of `main` (bm.kind = "parameter") from the
/// ONNX model at `path`, in argument order. Fails with one line naming the
/// parameter when its data is absent (a graph-only model: use --init
/// random), outside the model's folder, too short, or not fp32.
llvm::Expected<std::vector<ParameterValue>>
readParameters(llvm::StringRef path, mlir::func::FuncOp main);

/// Initialises every parameter argument of `main` from `seed`, by the role
/// of the op it feeds: norm scales and batch-norm variances 1, biases and
/// batch-norm means 0, embeddings and matrices N(0, 0.02) (GPT-2, BERT,
/// ViT), convolution weights N(0, 2 / fan_in) (He et al. 2015).
std::vector<ParameterValue> initialiseParameters(mlir::func::FuncOp main,
                                                 uint64_t seed);

} // namespace bm

#endif // BMC_COMPILER_CODEGEN_PARAMETERS_H
