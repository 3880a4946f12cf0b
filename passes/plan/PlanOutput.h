//===- PlanOutput.h - printing, reading and exporting plans -----*- C++ -*-===//

#ifndef BM_PLAN_PLANOUTPUT_H
#define BM_PLAN_PLANOUTPUT_H

#include "passes/plan/Plan.h"

#include "bmrt/Format.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace bm::plan {

/// "19.095 s", or "2.55 ms" under a second: how plans print durations.
std::string formatSeconds(double seconds);
/// "66.27 GiB", "4.8 MiB", ...: how plans print sizes (the runtime's one
/// spelling, with its fixed decimals).
using bmrt::formatBytes;

/// "[{dp}, {}, {tp}] partial{tp}": a tensor's sharding as plans print it.
std::string formatTensorSharding(const TensorSharding &t);
/// Where most GPUs of a tp group repeat each other's work
/// (Plan::tpMostlyRepeats): one line saying how many GPUs do distinct
/// work and why, for the plan's text and the report.
std::string repeatedWorkLine(const Plan &plan);

/// Where the plan offloads its optimizer: one line saying what lives in
/// host memory, how much per GPU, and the seconds of the host copies and
/// step, for the plan's text and the report; nullopt otherwise.
std::optional<std::string> offloadLine(const Plan &plan);

/// The items that make the step time: the critical stage's work on the
/// micro-batches, the bubble, and the tail stage's work after the pipeline.
std::vector<const CostItem *> stepItems(const Plan &plan);
/// The step time split as the step items add it up.
TimeBreakdown timeOfItems(const Plan &plan);
/// What the plan's offloaded optimizer costs, as its items and stages say:
/// the most host memory a GPU's offloaded state takes, the host memory a
/// GPU has for it (0: the device's own, without a host link), and the
/// step's seconds of its phases.
struct OffloadSummary {
  double hostBytes = 0, hostMemoryBytes = 0;
  double toHost = 0, hostStep = 0, toDevice = 0;
  /// Seconds of the copies and the host step that run behind the next
  /// forward (not in the three above, which are what the step waits for).
  double behind = 0;
  double hostLink() const { return toHost + toDevice; }
};
/// nullopt where the plan does not offload.
std::optional<OffloadSummary> offloadOf(const Plan &plan);
/// The communication items as the collectives of one model replica per
/// step: calls of every device of a stage group, merged where kind, axis,
/// link, phase, place and size agree, in first-seen order.
std::vector<CollectiveSummary> collectivesOf(const std::vector<CostItem> &items);
/// Why the plan's numbers disagree ("the items add up to 1.2 s, the step
/// time is 1.3 s"), or nullopt: the items against the step time and its
/// split, the worst stage's memory against the stages, the timeline's end
/// against the step time. Relative tolerance 1e-6: the JSON keeps 17
/// significant digits, and sums in another order differ by ~1e-15.
std::optional<std::string> inconsistency(const Plan &plan);

/// The readable report of `bmc plan`. With `explain`, also the per-op
/// sharding of every unique block, every collective, how much was searched
/// and why each alternative lost.
void printPlanText(const Plan &plan, llvm::raw_ostream &os,
                   bool explain = false);

/// The JSON plan (schema in PLAN_SCHEMA.md, "schema_version": 1). Same plan,
/// same bytes.
void printPlanJson(const Plan &plan, llvm::raw_ostream &os);
std::string planToJson(const Plan &plan);
/// planToJson, read back as `bmc report` and `bmc compile --plan` read it:
/// the error that reading gives (one line, saying which numbers disagree)
/// instead of a file nothing reads.
llvm::Expected<std::string> planToCheckedJson(const Plan &plan);

/// Reads a JSON plan back; one-line errors for malformed input and for other
/// schema versions.
llvm::Expected<Plan> parsePlanJson(llvm::StringRef text);

/// Megatron-LM command-line arguments (pretrain_gpt.py) for the plan's
/// configuration, one string, arguments separated by spaces: parallelism,
/// batch, layer count and stage layout, recomputation, precision, the
/// optimizer and its offload. The
/// model's shape (--hidden-size, --num-attention-heads, --num-experts, ...)
/// is the user's. An error for what Megatron-LM cannot run (see
/// megatronMismatch, megatronModelMismatch) or cannot lay out (stages other
/// than first / even middle / last).
llvm::Expected<std::string> exportMegatronArguments(const Plan &plan);

/// Why Megatron-LM cannot run these choices (ZeRO stage 2 or 3, the GPipe
/// schedule, a stream split along hidden, expert and tensor parallelism
/// without sequence parallelism, an offloaded optimizer without its
/// distributed optimizer), and the --fix it can run instead; nullopt when
/// it can. Unset choices pass.
struct MegatronMismatch {
  std::string reason;
  std::string fix;
};
std::optional<MegatronMismatch> megatronMismatch(
    std::optional<int> zeroStage, std::optional<ScheduleKind> schedule,
    std::optional<StreamLayout> stream, std::optional<int> ep = std::nullopt,
    std::optional<int> tp = std::nullopt,
    std::optional<Offload> offload = std::nullopt);
/// Megatron-LM's --optimizer is adam or sgd: LAMB and LARS do not map; its
/// optimizer offload (--optimizer-cpu-offload) runs only Adam.
std::optional<MegatronMismatch>
megatronOptimizerMismatch(Optimizer optimizer, Offload offload = Offload::None);

/// Why Megatron-LM's arguments cannot describe the model: no repeated
/// layers, layers of several kinds, or a block without attention; nullopt
/// when they can.
std::optional<std::string> megatronModelMismatch(int numLayers,
                                                 int numBlockClasses,
                                                 int attentionsPerBlock);

} // namespace bm::plan

#endif // BM_PLAN_PLANOUTPUT_H
