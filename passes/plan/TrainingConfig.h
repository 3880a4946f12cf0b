//===- TrainingConfig.h - what the user asks the planner for ----*- C++ -*-===//

#ifndef BM_PLAN_TRAININGCONFIG_H
#define BM_PLAN_TRAININGCONFIG_H

#include "cost/CostModel.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace bm::plan {

using cost::Optimizer;
using cost::Precision;
using cost::ScheduleKind;

/// Activation recomputation: none; selective recomputes the attention core
/// (the ops on sequence x sequence tensors, Korthikanti et al. 2022 section
/// 5); full recomputes every layer from its input (Chen et al. 2016).
enum class Recompute { None, Selective, Full };

const char *toString(Recompute recompute);

/// What lives in host memory instead of on the devices (ZeRO-Offload, Ren
/// et al. 2021): nothing, or the optimizer: its state, an fp32 copy of
/// each rank's range of the trained parameters and of their gradients,
/// and its step, run on the host's cores between a copy of the gradients
/// to the host and a copy of the parameters back.
enum class Offload { None, Optimizer };

/// "none" or "optimizer", as --fix and the plan file spell them.
const char *toString(Offload offload);
std::optional<Offload> parseOffload(llvm::StringRef text);

/// How the values between blocks (the residual stream) lie over the tensor
/// axis: whole on every GPU (Megatron-LM), split along the sequence
/// (Megatron-LM's sequence parallelism, Korthikanti et al. 2022), or split
/// along a feature dimension (hidden size, channels).
enum class StreamLayout { Replicated, Sequence, Hidden };

const char *toString(StreamLayout layout);

/// Choices the user pins with `--fix`; unset ones are searched.
struct FixedChoices {
  std::optional<int> dp, tp, pp, ep, microBatch, zeroStage, chunks;
  /// Context parallelism: the sequence split over cp ranks; in mirrored
  /// chunks (`cp_layout=mirrored`, the default wherever the model allows)
  /// or contiguous shares.
  std::optional<int> cp;
  std::optional<bool> cpMirrored;
  /// 2-D tensor parallelism: each tensor group a tp x tp2 grid (Plan.h's
  /// kTensor2Axis).
  std::optional<int> tp2;
  std::optional<Recompute> recompute;
  std::optional<ScheduleKind> schedule;
  std::optional<StreamLayout> stream;
  /// The dimension of the stream values that tp splits (`stream=hidden:1`):
  /// a conv net has several feature dimensions (channels, height, width).
  std::optional<int> streamDim;
  std::optional<Offload> offload;

  bool empty() const {
    return !dp && !cp && !cpMirrored && !tp && !pp && !ep && !microBatch &&
           !zeroStage && !chunks && !recompute && !schedule && !stream &&
           !offload;
  }
};

/// Parses `dp=4,tp=8,pp=2,mb=1,zero=1,recompute=full,schedule=1f1b,v=2`.
/// Keys: dp, cp (context parallelism: the sequence split over cp ranks),
/// cp_layout (contiguous|mirrored),
/// ep (expert parallelism, divides dp), tp, pp, mb, zero (0-3),
/// recompute (none|selective|full), schedule (gpipe|1f1b|interleaved), v
/// (chunks per device, interleaved), stream (replicated|sequence|hidden,
/// the split ones optionally with the dimension: hidden:1), offload
/// (none|optimizer).
llvm::Expected<FixedChoices> parseFixedChoices(llvm::StringRef text);

/// Prints the choices back in the form parseFixedChoices reads.
std::string formatFixedChoices(const FixedChoices &fixed);
/// A stream choice as --fix reads it: "hidden", or "hidden:2" with `dim`.
std::string formatStream(StreamLayout layout, std::optional<int> dim);

struct TrainingConfig {
  int gpus = 0;
  /// Samples per optimizer step; 0 means one per GPU.
  int64_t globalBatch = 0;
  /// Unset: bf16 mixed precision where the GPUs have bf16, else fp16.
  std::optional<Precision> precision;
  Optimizer optimizer = Optimizer::Adam;
  FixedChoices fixed;
  /// Search each block class once (TAP-style folding). Off: every layer is
  /// searched as its own class; the result must be the same.
  bool fold = true;
  /// Search only what Megatron-LM can run, for --export megatron: ZeRO 0 or
  /// 1 (its distributed optimizer), no GPipe, no stream split along hidden.
  bool megatronOnly = false;
  /// How many runner-up plans to report.
  int numAlternatives = 4;
};

} // namespace bm::plan

#endif // BM_PLAN_TRAININGCONFIG_H
