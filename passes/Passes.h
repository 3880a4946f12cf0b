//===- Passes.h - bm passes -------------------------------------*- C++ -*-===//

#ifndef BM_PASSES_PASSES_H
#define BM_PASSES_PASSES_H

#include "bm/BmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::bm {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// The named pipeline of each phase (PhasePipelines.cpp), each ending with
/// the phase's verifier. The fold phase makes attention cores bm.attention
/// where `fuseAttention` says that the backend runs fused attention.
void buildFoldPhase(OpPassManager &pm, bool fuseAttention);
void buildAnnotatePhase(OpPassManager &pm, StringRef planFile);
void buildAutodiffPhase(OpPassManager &pm, StringRef recompute = "none",
                        StringRef loss = "auto");
void buildPartitionPhase(OpPassManager &pm);
/// Registers every phase pipeline (bm-fold-phase, ...) with bmc-opt.
void registerPhasePipelines();

} // namespace mlir::bm

#endif // BM_PASSES_PASSES_H
