//===- MegatronExport.cpp - the plan as Megatron-LM arguments -------------===//
//
// Argument names as in Megatron-LM's megatron/training/arguments.py.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanOutput.h"

#include "llvm/ADT/StringExtras.h"

using namespace bm::plan;

static llvm::Error exportError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--export megatron: " + message);
}

std::optional<MegatronMismatch>
bm::plan::megatronMismatch(std::optional<int> zeroStage,
                           std::optional<PipelineSchedule> schedule,
                           std::optional<StreamLayout> stream) {
  if (zeroStage && *zeroStage >= 2)
    return MegatronMismatch{"Megatron-LM has no ZeRO stage " +
                                std::to_string(*zeroStage) +
                                " (its distributed optimizer is stage 1)",
                            "--fix zero=1"};
  if (stream == StreamLayout::Hidden)
    return MegatronMismatch{"Megatron-LM cannot split the values between "
                            "layers along hidden over tp",
                            "--fix stream=sequence or stream=replicated"};
  if (schedule == PipelineSchedule::GPipe)
    return MegatronMismatch{
        "Megatron-LM runs 1F1B or interleaved pipelines, not gpipe",
        "--fix schedule=1f1b"};
  return std::nullopt;
}

llvm::Expected<std::string>
bm::plan::exportMegatronArguments(const Plan &plan) {
  const ParallelConfig &c = plan.config;
  if (std::optional<MegatronMismatch> mismatch =
          megatronMismatch(c.zeroStage, c.schedule, c.stream))
    return exportError(mismatch->reason + "; re-plan with " + mismatch->fix);
  std::vector<std::string> args;
  auto add = [&](const std::string &name, const llvm::Twine &value) {
    args.push_back(name + " " + value.str());
  };
  add("--tensor-model-parallel-size", llvm::Twine(c.tp));
  add("--pipeline-model-parallel-size", llvm::Twine(c.pp));
  if (c.ep > 1)
    add("--expert-model-parallel-size", llvm::Twine(c.ep));
  if (c.schedule == PipelineSchedule::Interleaved && c.chunks > 1)
    add("--num-layers-per-virtual-pipeline-stage",
        llvm::Twine(plan.numLayers / (c.pp * c.chunks)));
  add("--num-layers", llvm::Twine(plan.numLayers));
  add("--micro-batch-size", llvm::Twine(c.microBatch));
  add("--global-batch-size", llvm::Twine(plan.globalBatch));
  add("--seq-length", llvm::Twine(plan.sequenceLength));
  switch (c.recompute) {
  case Recompute::None:
    break;
  case Recompute::Selective:
    add("--recompute-granularity", "selective");
    break;
  case Recompute::Full:
    add("--recompute-granularity", "full");
    add("--recompute-method", "uniform");
    add("--recompute-num-layers", "1");
    break;
  }
  if (c.stream == StreamLayout::Sequence)
    args.push_back("--sequence-parallel");
  if (c.zeroStage == 1)
    args.push_back("--use-distributed-optimizer");
  if (plan.precision == Precision::Bf16Mixed)
    args.push_back("--bf16");
  else if (plan.precision == Precision::Fp16Mixed)
    args.push_back("--fp16");
  add("--optimizer", plan.optimizer == Optimizer::Sgd ? "sgd" : "adam");
  return llvm::join(args, " ");
}
