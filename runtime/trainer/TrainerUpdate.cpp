//===- TrainerUpdate.cpp - the optimizer step, on the device or the host --===//
//
// Part of the Trainer (TrainerLoop.h): each rank's ranges of the trained
// parameters, the optimizer step over them on the device, or offloaded to
// the host (OptimizerOffload.h) one phase after another or behind the next
// forward, with the gates that make each parameter's first use wait for
// its range.
//
//===----------------------------------------------------------------------===//

#include "TrainerLoop.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace bmrt {

/// This rank's range of a trained parameter and of its gradient and
/// optimizer state (under ZeRO its dp shard, flat).
TensorUpdate Trainer::updateRange(const ParamSlot &p) const {
  TensorUpdate r{p.value, gradientOf(p), p.first, p.second};
  if (config.zero) {
    r.value = p.shard.data ? Parallel::flatRange(p.shard, 0, p.length)
                           : Parallel::flatRange(p.value, p.begin, p.length);
    r.grad = config.zero >= 2 ? Parallel::flatRange(r.grad, 0, p.length)
                              : Parallel::flatRange(r.grad, p.begin, p.length);
    r.first = Parallel::flatRange(p.first, 0, p.length);
    if (r.second.data)
      r.second = Parallel::flatRange(p.second, 0, p.length);
  }
  return r;
}

/// The ranges of the parameters this rank updates, and those parameters
/// (`trained`), in the order of `params`.
std::vector<TensorUpdate>
Trainer::updateRanges(std::vector<const ParamSlot *> &trained) const {
  std::vector<TensorUpdate> tensors;
  for (const ParamSlot &p : params)
    if (p.grad.data) {
      tensors.push_back(updateRange(p));
      trained.push_back(&p);
    }
  return tensors;
}

/// Updates this rank's range of every parameter (under ZeRO its dp shard,
/// then gathered back over dp), on the device or, offloaded, on the host:
/// there behind the next forward where the optimizer allows, each range
/// gathered once it has landed.
void Trainer::update(int64_t step, float lr, float gradScale) {
  std::vector<const ParamSlot *> trained;
  std::vector<TensorUpdate> tensors = updateRanges(trained);
  if (updatesBehind()) {
    offload->settle(stream());
    offload->stepBehind(
        tensors, stream(), hostOrder,
        [this, step, lr, gradScale](const TensorUpdate &copy) {
          stepRange(offload->hostKernels(), offload->hostStream(), copy, step,
                    lr, gradScale);
        },
        [this, trained](size_t k) { gatherUpdated(*trained[k]); });
    return;
  }
  if (offload) {
    runOptimizer(offload->hostKernels(), offload->hostStream(),
                 offload->copyDown(tensors, stream()), trained, step, lr,
                 gradScale);
    offload->copyUp(tensors, stream());
  } else {
    runOptimizer(kernels(), stream(), tensors, trained, step, lr, gradScale);
  }
  for (const ParamSlot *p : trained)
    gatherUpdated(*p);
}

/// Under ZeRO 1 and 2, `p`'s updated shards gathered over dp into the
/// whole parameter every rank reads.
void Trainer::gatherUpdated(const ParamSlot &p) {
  if (config.zero && !p.shard.data)
    parallel.gatherOverDp(p, p.value, {}, stream());
}

/// The first instruction of `instrs` that reads slot `param` or writes
/// slot `grad`; instrs.size() where none does.
static size_t firstUse(const std::vector<Instr> &instrs, int param, int grad) {
  auto has = [](const std::vector<int> &slots, int slot) {
    return slot >= 0 && std::count(slots.begin(), slots.end(), slot) > 0;
  };
  for (size_t t = 0; t < instrs.size(); ++t)
    if (has(instrs[t].operands, param) || has(instrs[t].results, grad))
      return t;
  return instrs.size();
}

/// Makes the first use of each trained parameter in every stage that holds
/// it (its first reader, or its gradient's first writer if that comes
/// first) wait for its range of a step behind, and orders the host's work
/// as those uses come: the next forward starts once the first range has
/// landed.
void Trainer::gateParameterUses() {
  std::vector<const ParamSlot *> trained;
  size_t ranges = updateRanges(trained).size();
  // Per range, its uses: (stage, instruction).
  using Use = std::pair<size_t, size_t>;
  std::vector<std::vector<Use>> uses(ranges);
  for (size_t k = 0; k < ranges; ++k) {
    std::vector<std::pair<int, int>> slots = {
        {trained[k]->stage, trained[k]->slot}};
    for (const ChunkCopy &copy : trained[k]->copies)
      slots.push_back({copy.stage, copy.slot});
    for (auto [st, slot] : slots) {
      const std::vector<Instr> &instrs = stages[st].executor->program().instrs;
      size_t t = firstUse(instrs, slot, stages[st].program.gradientOf(slot));
      if (t < instrs.size())
        uses[k].push_back({size_t(st), t});
    }
  }
  // Unused ranges (none in a step program) go last, landed by settle().
  auto firstOf = [&](size_t k) {
    return uses[k].empty() ? Use{stages.size(), 0}
                           : *std::min_element(uses[k].begin(), uses[k].end());
  };
  hostOrder.resize(ranges);
  for (size_t k = 0; k < ranges; ++k)
    hostOrder[k] = k;
  std::stable_sort(hostOrder.begin(), hostOrder.end(),
                   [&](size_t a, size_t b) { return firstOf(a) < firstOf(b); });
  readGates.assign(stages.size(), {});
  for (size_t st = 0; st < stages.size(); ++st)
    readGates[st].assign(stages[st].executor->program().instrs.size(), -1);
  for (size_t position = 0; position < ranges; ++position)
    for (auto [st, t] : uses[hostOrder[position]])
      readGates[st][t] = std::max(readGates[st][t], int(position));
  for (size_t st = 0; st < stages.size(); ++st)
    stages[st].executor->setBeforeInstructionHook([this, st](size_t t) {
      if (readGates[st][t] >= 0)
        offload->awaitUpTo(size_t(readGates[st][t]), stream());
    });
}

/// One range's step with an optimizer whose update reads that range alone.
void Trainer::stepRange(const TrainerKernels &kernels, Stream &on,
                        const TensorUpdate &t, int64_t step, float lr,
                        float gradScale) const {
  if (config.optimizerKind == OptimizerKind::AdamW)
    kernels.adamwUpdate(on, t.value, t.grad, t.first, t.second, hyper.adamw, lr,
                        step, gradScale);
  else if (config.optimizerKind == OptimizerKind::Sgd)
    kernels.sgdUpdate(on, t.value, t.grad, t.first, hyper.sgd, lr, step,
                      gradScale);
  else
    BMRT_FAIL("the " + config.optimizer +
              " optimizer's update of a range reads other ranges");
}

/// One step of the optimizer over `tensors` (the ranges of `trained`),
/// with `kernels` on `on`.
void Trainer::runOptimizer(const TrainerKernels &kernels, Stream &on,
                           const std::vector<TensorUpdate> &tensors,
                           const std::vector<const ParamSlot *> &trained,
                           int64_t step, float lr, float gradScale) {
  // LAMB's and LARS's norms: sums over the ranks holding the other parts.
  WholeSums wholeSums = [&](std::vector<float> &sums) {
    parallel.sumOverShards(trained, sums, /*width=*/2, stream());
  };
  switch (config.optimizerKind) {
  case OptimizerKind::AdamW:
  case OptimizerKind::Sgd:
    for (const TensorUpdate &t : tensors)
      stepRange(kernels, on, t, step, lr, gradScale);
    break;
  case OptimizerKind::Lamb:
    lambStep(kernels, on, tensors, hyper.lamb, lr, step, gradScale, wholeSums);
    break;
  case OptimizerKind::Lars:
    larsStep(kernels, on, tensors, hyper.lars, lr, gradScale, wholeSums);
    break;
  }
}

/// Where the offloaded optimizer's work runs, and why, for the start line.
std::string Trainer::offloadWay() const {
  if (updatesBehind())
    return "the host steps behind the next forward, each parameter's first "
           "reader waiting for its range";
  std::string after = "the host steps after the backward";
  if (config.optimizerKind == OptimizerKind::Lamb ||
      config.optimizerKind == OptimizerKind::Lars)
    return after + " (" + config.optimizer +
           "'s trust ratios sum norms over ranks)";
  if (options.offloadBehind)
    return after + " (--offload-after)";
  return after + " (the " + device->name() +
         " device's host step would share its cores; --offload-behind runs "
         "it behind the next forward)";
}

} // namespace bmrt
