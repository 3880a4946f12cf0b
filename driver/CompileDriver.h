//===- CompileDriver.h - phases 1 to 7 for `bmc compile` --------*- C++ -*-===//
//
// What `bmc compile` runs, as a library so that tests run the same thing:
// plan (one device for now), import the model at the plan's micro-batch,
// build the training step (autodiff), lower it and the forward model to
// step programs, and gather the step-0 parameters.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_DRIVER_COMPILEDRIVER_H
#define BMC_DRIVER_COMPILEDRIVER_H

#include "codegen/Parameters.h"
#include "driver/PlanDriver.h"

#include "bmrt/Program.h"

#include <optional>

namespace bm {

struct CompileOptions {
  std::string model;
  ImportOptions import;
  plan::TrainingConfig training;
  std::string cluster = "dgx-a100-80g";
  /// Initialise the parameters from this seed instead of reading them.
  std::optional<uint64_t> initSeed;
  /// With initSeed: leave the values to the runtime (CompiledModel::init)
  /// instead of generating them here.
  bool weightsAtLoad = false;
  /// A plan file `bmc plan -o` wrote for this model, instead of planning.
  std::optional<std::string> planFile;
  /// The loss appended to a non-scalar output: auto, cross-entropy or mse
  /// (bm-autodiff's `loss`).
  std::string loss = "auto";
  /// --fuse-attention as given (import.fuseAttention holds the choice);
  /// a plan file must agree with it.
  std::optional<bool> fuseAttention;
};

/// What the trainer learns from the compiler, besides the programs.
enum class TrainingTask {
  /// Next-token prediction: labels are an integer input shifted by one.
  LanguageModel,
  /// One class per sample.
  Classifier,
  /// The model's output is its own loss.
  OwnLoss,
  /// Mean squared error of a float output against targets of its shape.
  Regression,
};
/// trainer.json's name: language-model, classifier, own-loss, regression.
const char *nameOf(TrainingTask task);
/// The task with its loss, for the compile line ("language-model:
/// next-token cross-entropy").
std::string describe(TrainingTask task);

struct CompiledModel {
  plan::Plan plan;
  /// The whole step (one device, or each rank's share without pipeline
  /// stages); with stages, `stages` holds one program per stage instead.
  bmrt::Program step;
  std::vector<bmrt::Program> stages;
  bmrt::Program forward;
  /// The step-0 values; empty when the runtime generates them from `init`.
  std::vector<ParameterValue> parameters;
  /// The specs the values are generated from (--init random).
  std::optional<bmrt::InitPlan> init;
  TrainingTask task = TrainingTask::OwnLoss;
  /// SHA-256 of the ONNX file, hex: checkpoints name the model by it.
  std::string modelHash;

  size_t numParameterTensors() const {
    return parameters.empty() && init ? init->tensors.size()
                                      : parameters.size();
  }
};

llvm::Expected<CompiledModel> compileModel(mlir::MLIRContext &context,
                                           const CompileOptions &options);

} // namespace bm

#endif // BMC_DRIVER_COMPILEDRIVER_H
