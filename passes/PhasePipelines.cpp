//===- PhasePipelines.cpp - the named pass pipeline of each phase ---------===//
//
// DESIGN.md section 2: each phase is a named pipeline that bmc-opt can run
// alone and that ends with the phase's verifier.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

namespace mlir::bm {

namespace {
struct AnnotatePhaseOptions
    : public PassPipelineOptions<AnnotatePhaseOptions> {
  Option<std::string> plan{*this, "plan",
                           llvm::cl::desc("The JSON plan to write into the IR")};
};
struct AutodiffPhaseOptions
    : public PassPipelineOptions<AutodiffPhaseOptions> {
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("none, selective (attention cores) or full (layers)"),
      llvm::cl::init("none")};
  Option<std::string> loss{
      *this, "loss",
      llvm::cl::desc("auto, cross-entropy or mse (a non-scalar output's)"),
      llvm::cl::init("auto")};
};
} // namespace

// GELU's exported formulas become bm.gelu first (and, where the backend
// runs fused attention, attention cores bm.attention): the planner then
// prices, annotates and the trainer runs the same ops.
void buildFoldPhase(OpPassManager &pm, bool fuseAttention) {
  pm.addNestedPass<func::FuncOp>(createBmFuseGeluPass());
  if (fuseAttention)
    pm.addNestedPass<func::FuncOp>(createBmFuseAttentionPass());
  pm.addNestedPass<func::FuncOp>(createBmFoldPass());
  pm.addPass(createBmVerifyFoldedPass());
}

void buildAnnotatePhase(OpPassManager &pm, StringRef planFile) {
  BmAnnotatePassOptions options;
  options.planFile = planFile.str();
  pm.addPass(createBmAnnotatePass(options));
  pm.addPass(createBmVerifyAnnotatedPass());
}

void buildAutodiffPhase(OpPassManager &pm, StringRef recompute,
                        StringRef loss) {
  BmAutodiffPassOptions options;
  options.recompute = recompute.str();
  options.loss = loss.str();
  pm.addPass(createBmAutodiffPass(options));
  pm.addPass(createBmVerifyTrainingStepPass());
}

void buildPartitionPhase(OpPassManager &pm) {
  pm.addPass(createBmPartitionPass());
  pm.addPass(createBmSplitStagesPass());
  pm.addPass(createBmVerifyPartitionedPass());
}

void registerPhasePipelines() {
  PassPipelineRegistration<>(
      "bm-fold-phase",
      "Phase 2: find repeated layers (bm-fold), then bm-verify-folded",
      [](OpPassManager &pm) { buildFoldPhase(pm, /*fuseAttention=*/false); });
  PassPipelineRegistration<AnnotatePhaseOptions>(
      "bm-annotate-phase",
      "Phase 4: write a plan into the IR (bm-annotate), then "
      "bm-verify-annotated",
      [](OpPassManager &pm, const AnnotatePhaseOptions &options) {
        buildAnnotatePhase(pm, options.plan);
      });
  PassPipelineRegistration<AutodiffPhaseOptions>(
      "bm-autodiff-phase",
      "Phase 5: build the training step (bm-autodiff), then "
      "bm-verify-training-step",
      [](OpPassManager &pm, const AutodiffPhaseOptions &options) {
        buildAutodiffPhase(pm, options.recompute, options.loss);
      });
  PassPipelineRegistration<>(
      "bm-partition-phase",
      "Phase 6: partition the training step (bm-partition), split it into "
      "pipeline stages (bm-split-stages), then bm-verify-partitioned",
      buildPartitionPhase);
}

} // namespace mlir::bm
