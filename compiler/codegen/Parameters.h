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

#include "bmrt/Tensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace bm {

/// One parameter tensor on the host: fp32 weights, or a model's integer or
/// boolean buffer (a causal mask), little-endian bytes.
struct ParameterValue {
  std::string name;
  bmrt::DType dtype = bmrt::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  float *f32() { return reinterpret_cast<float *>(bytes.data()); }
};

/// Reads every parameter argument of `main` (bm.kind = "parameter") from the
/// ONNX model at `path`, in argument order. Fails with one line naming the
/// parameter when its data is absent (a graph-only model: use --init
/// random), outside the model's folder, too short, or of an element type
/// the runtime does not hold.
llvm::Expected<std::vector<ParameterValue>>
readParameters(llvm::StringRef path, mlir::func::FuncOp main);

/// Initialises every parameter argument of `main` from `seed`, by the role
/// of the op it feeds: norm scales and batch-norm variances 1, biases and
/// batch-norm means 0, embeddings and matrices N(0, 0.02) (GPT-2, BERT,
/// ViT), convolution weights N(0, 2 / fan_in) (He et al. 2015). A boolean
/// buffer of shape [..., n, n] is a causal mask (true on and below the
/// diagonal), as GPT-2's `attn.bias` is; any other non-float buffer has
/// values a graph-only model does not carry, and is an error naming it.
llvm::Expected<std::vector<ParameterValue>>
initialiseParameters(mlir::func::FuncOp main, uint64_t seed);

} // namespace bm

#endif // BMC_COMPILER_CODEGEN_PARAMETERS_H
