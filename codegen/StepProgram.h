//===- StepProgram.h - phase 7: bm functions -> runtime programs -*- C++ -*-===//
//
// Codegen's first half: a function of bm ops (the training step that
// autodiff built, or the forward model) becomes a bmrt::Program, the
// instruction list the trainer runs. Each op is one instruction naming its
// kernel (the op's mnemonic) with its attributes and the ONNX node it came
// from; function arguments become input, label and parameter slots;
// gradients returned by the step become gradient slots (the trainer's
// persistent buffers) written in place by the op that computes them.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_CODEGEN_STEPPROGRAM_H
#define BMC_CODEGEN_STEPPROGRAM_H

#include "bmrt/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace bm {

/// The runtime's element type for a bm tensor's (fp32, i64, i32, i1), or
/// none for one the runtime does not hold (bf16, f16, f64, ...).
std::optional<bmrt::DType> runtimeDType(mlir::Type element);

/// Lowers @train_step (loss first, then `bm.grad_of` gradients) to a step
/// program, or any other function to a forward program whose outputs are
/// its results. Fails, naming the op, on element types the runtime does not
/// hold (the CPU runtime computes in fp32) or ops it has no kernel for.
llvm::Expected<bmrt::Program> lowerToProgram(mlir::func::FuncOp func,
                                             llvm::StringRef model);

} // namespace bm

#endif // BMC_CODEGEN_STEPPROGRAM_H
