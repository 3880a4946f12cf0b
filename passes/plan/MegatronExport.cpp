//===- MegatronExport.cpp - the plan as Megatron-LM arguments -------------===//
//
// Argument names as in Megatron-LM's megatron/training/arguments.py.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanOutput.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>

using namespace bm::plan;

static llvm::Error exportError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--export megatron: " + message);
}

std::optional<MegatronMismatch> bm::plan::megatronMismatch(
    std::optional<int> zeroStage, std::optional<ScheduleKind> schedule,
    std::optional<StreamLayout> stream, std::optional<int> ep,
    std::optional<int> tp, std::optional<Offload> offload) {
  // Megatron-core's optimizer offload (--optimizer-cpu-offload) needs
  // --use-precision-aware-optimizer, which needs the distributed optimizer
  // (megatron/core/optimizer/optimizer_config.py).
  if (offload == Offload::Optimizer && zeroStage && *zeroStage != 1)
    return MegatronMismatch{"Megatron-LM offloads the optimizer "
                            "(--optimizer-cpu-offload) only with its "
                            "distributed optimizer (ZeRO stage 1)",
                            "--fix zero=1"};
  if (zeroStage && *zeroStage >= 2)
    return MegatronMismatch{"Megatron-LM has no ZeRO stage " +
                                std::to_string(*zeroStage) +
                                " (its distributed optimizer is stage 1)",
                            "--fix zero=1"};
  if (stream == StreamLayout::Hidden)
    return MegatronMismatch{"Megatron-LM cannot split the values between "
                            "layers along hidden over tp",
                            "--fix stream=sequence or stream=replicated"};
  if (schedule && *schedule != ScheduleKind::OneFOneB &&
      *schedule != ScheduleKind::Interleaved && *schedule != ScheduleKind::None)
    return MegatronMismatch{
        std::string("Megatron-LM runs 1F1B or interleaved pipelines, not ") +
            bmrt::toString(*schedule),
        "--fix schedule=1f1b"};
  // Megatron-core's TransformerConfig refuses expert parallelism with
  // tensor parallelism unless the sequence is split.
  if (ep && tp && stream && *ep > 1 && *tp > 1 &&
      *stream != StreamLayout::Sequence)
    return MegatronMismatch{"Megatron-LM combines expert and tensor "
                            "parallelism only with sequence parallelism",
                            "--fix stream=sequence"};
  return std::nullopt;
}

std::optional<MegatronMismatch>
bm::plan::megatronOptimizerMismatch(Optimizer optimizer, Offload offload) {
  // --use-precision-aware-optimizer, which the offload needs, is Adam's.
  if (offload == Offload::Optimizer && optimizer != Optimizer::Adam)
    return MegatronMismatch{std::string("Megatron-LM offloads only Adam "
                                        "(--optimizer-cpu-offload), not ") +
                                bm::cost::toString(optimizer),
                            "--optimizer adam"};
  if (optimizer == Optimizer::Adam || optimizer == Optimizer::Sgd)
    return std::nullopt;
  return MegatronMismatch{std::string("Megatron-LM's --optimizer is adam or "
                                      "sgd, not ") +
                              bm::cost::toString(optimizer),
                          "--optimizer adam"};
}

std::optional<std::string>
bm::plan::megatronModelMismatch(int numLayers, int numBlockClasses,
                                int attentionsPerBlock) {
  if (numLayers == 0)
    return std::string("no repeated layers were found in the model; "
                       "Megatron-LM runs a stack of identical transformer "
                       "layers");
  if (numBlockClasses > 1)
    return llvm::formatv("the model's layers are of {0} kinds; these "
                         "arguments describe one stack of identical "
                         "transformer layers",
                         numBlockClasses)
        .str();
  if (attentionsPerBlock == 0)
    return std::string("the model's repeated block has no attention; "
                       "Megatron-LM trains transformer layers");
  return std::nullopt;
}

/// "6, 7, 7, 4".
static std::string listText(const std::vector<int> &numbers) {
  return llvm::join(
      llvm::map_range(numbers, [](int n) { return std::to_string(n); }), ", ");
}

/// Megatron-LM's first / last stage arguments for `layers` per pipeline
/// stage (in Megatron's layers), or an error when the stages between the
/// first and the last differ.
static llvm::Error addStageLayout(const std::vector<int> &layers,
                                  std::vector<std::string> &args) {
  if (layers.size() < 2 ||
      std::all_of(layers.begin(), layers.end(),
                  [&](int n) { return n == layers.front(); }))
    return llvm::Error::success();
  for (size_t stage = 2; stage + 1 < layers.size(); ++stage)
    if (layers[stage] != layers[1])
      return exportError(
          "Megatron-LM gives every pipeline stage but the first and the last "
          "the same number of layers; this plan's stages hold " +
          listText(layers));
  args.push_back("--decoder-first-pipeline-num-layers " +
                 std::to_string(layers.front()));
  args.push_back("--decoder-last-pipeline-num-layers " +
                 std::to_string(layers.back()));
  return llvm::Error::success();
}

/// The mixture of experts as Megatron-core describes it: the experts, the
/// router's top-k, which layers are expert layers (a Python list expression,
/// quoted for the shell, when not all) and the all-to-all token exchange
/// that the plan priced.
static llvm::Error addExperts(const Plan &plan, int perBlock,
                              std::vector<std::string> &args) {
  if (plan.routerTopK <= 0)
    return exportError("the model has experts but its router's top-k "
                       "(a top_k over the experts) was not found");
  if (static_cast<int>(plan.expertLayersPerBlock.size()) != perBlock)
    return exportError(llvm::formatv("the plan marks {0} layers of the block "
                                     "as expert or dense; the block has {1}",
                                     plan.expertLayersPerBlock.size(), perBlock)
                           .str());
  args.push_back("--num-experts " + std::to_string(plan.numExperts));
  args.push_back("--moe-router-topk " + std::to_string(plan.routerTopK));
  if (!llvm::all_of(plan.expertLayersPerBlock, [](bool e) { return e; })) {
    std::string pattern = llvm::join(
        llvm::map_range(plan.expertLayersPerBlock,
                        [](bool expert) { return expert ? "1" : "0"; }),
        ",");
    args.push_back(
        llvm::formatv("--moe-layer-freq '([{0}]*{1})'", pattern, plan.numLayers)
            .str());
  }
  args.push_back("--moe-token-dispatcher-type alltoall");
  return llvm::Error::success();
}

llvm::Expected<std::string>
bm::plan::exportMegatronArguments(const Plan &plan) {
  const ParallelConfig &c = plan.config;
  if (std::optional<MegatronMismatch> mismatch = megatronMismatch(
          c.zeroStage, c.schedule, c.stream, c.ep, c.tp, c.offload))
    return exportError(mismatch->reason + "; re-plan with " + mismatch->fix);
  if (std::optional<std::string> why = megatronModelMismatch(
          plan.numLayers, plan.numBlockClasses, plan.attentionsPerBlock))
    return exportError(*why);
  if (std::optional<MegatronMismatch> mismatch =
          megatronOptimizerMismatch(plan.optimizer, c.offload))
    return exportError(mismatch->reason + "; re-plan with " + mismatch->fix);
  // Megatron-Core's context parallelism always balances causal attention
  // with mirrored chunks (its get_batch_on_this_cp_rank).
  if (c.cp > 1 && !c.cpMirrored)
    return exportError("Megatron-LM lays context parallelism's shares out in "
                       "mirrored chunks; re-plan with --fix "
                       "cp_layout=mirrored");
  if (c.tp2 > 1)
    return exportError("Megatron-LM has no 2-D tensor parallelism; re-plan "
                       "with --fix tp2=1");
  // Megatron counts attention layers; a block may hold several.
  const int perBlock = plan.attentionsPerBlock;
  std::vector<std::string> args;
  auto add = [&](const std::string &name, const llvm::Twine &value) {
    args.push_back(name + " " + value.str());
  };
  add("--tensor-model-parallel-size", llvm::Twine(c.tp));
  add("--pipeline-model-parallel-size", llvm::Twine(c.pp));
  if (c.cp > 1)
    add("--context-parallel-size", llvm::Twine(c.cp));
  if (c.ep > 1)
    add("--expert-model-parallel-size", llvm::Twine(c.ep));
  std::vector<int> stageLayers;
  for (int layers : plan.layersPerStage)
    stageLayers.push_back(layers * perBlock);
  if (c.schedule == ScheduleKind::Interleaved && c.chunks > 1) {
    if (std::adjacent_find(stageLayers.begin(), stageLayers.end(),
                           std::not_equal_to<int>()) != stageLayers.end())
      return exportError("Megatron-LM's interleaved schedule gives every "
                         "virtual stage the same number of layers; this "
                         "plan's hold " +
                         listText(stageLayers));
    add("--num-layers-per-virtual-pipeline-stage",
        llvm::Twine(plan.numLayers * perBlock / (c.pp * c.chunks)));
  } else if (llvm::Error error = addStageLayout(stageLayers, args)) {
    return std::move(error);
  }
  add("--num-layers", llvm::Twine(plan.numLayers * perBlock));
  if (plan.numExperts > 0)
    if (llvm::Error error = addExperts(plan, perBlock, args))
      return std::move(error);
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
  add("--optimizer", bm::cost::toString(plan.optimizer));
  // Megatron-core's HybridDeviceOptimizer (megatron/core/optimizer/
  // cpu_offloading/README.md): the whole optimizer on the host. Its copies
  // and step run one after another, as the plan priced them (without
  // --overlap-cpu-optimizer-d2h-h2d).
  if (c.offload == Offload::Optimizer) {
    args.push_back("--optimizer-cpu-offload");
    add("--optimizer-offload-fraction", "1.0");
    args.push_back("--use-precision-aware-optimizer");
  }
  return llvm::join(args, " ");
}
