//===- SplitBackward.cpp - a stage's backward as B, then W ----------------===//
//
// The zero-bubble schedules (Qi et al. 2023, "Zero Bubble Pipeline
// Parallelism") run the gradient the previous stage waits for (B) as soon
// as they can and the weights' gradients (W) later, in the bubble. The
// split is read off the dataflow: B is every backward instruction the
// `send_grad` values depend on, W the rest. An instruction with several
// results (layer_norm_grad's input and weight gradients) goes where its
// input gradient is needed: into B.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Program.h"

#include <algorithm>

namespace bmrt {

/// Per slot, the instruction of `flat` that writes it, or -1.
static std::vector<int> writers(const Program &flat) {
  std::vector<int> writer(flat.slots.size(), -1);
  for (size_t t = 0; t < flat.instrs.size(); ++t)
    for (int r : flat.instrs[t].results)
      if (r >= 0)
        writer[r] = static_cast<int>(t);
  return writer;
}

/// Marks the backward instructions (from `backwardStart` on) that the
/// gradients sent back depend on.
static std::vector<bool> inputGradientPart(const Program &flat) {
  const std::vector<int> writer = writers(flat);
  std::vector<bool> inB(flat.instrs.size(), false);
  std::vector<int> pending(flat.sendGrads.begin(), flat.sendGrads.end());
  while (!pending.empty()) {
    int slot = pending.back();
    pending.pop_back();
    int t = slot >= 0 ? writer[slot] : -1;
    if (t < flat.backwardStart || inB[t])
      continue;
    inB[t] = true;
    for (int operand : flat.instrs[t].operands)
      if (operand >= 0)
        pending.push_back(operand);
  }
  return inB;
}

Program splitBackward(const Program &flat, const std::string &source) {
  BMRT_CHECK(flat.backwardStart >= 0,
             source + ": the backward cannot be split into B and W: the "
                      "program has no 'backward' line");
  BMRT_CHECK(std::none_of(flat.instrs.begin(), flat.instrs.end(),
                          [](const Instr &i) { return i.op == "call"; }),
             source + ": split the backward of the program with its calls "
                      "inlined");
  const std::vector<bool> inB = inputGradientPart(flat);
  Program split = flat;
  split.instrs.resize(flat.backwardStart);
  for (bool weights : {false, true}) {
    if (weights)
      split.weightGradStart = static_cast<int>(split.instrs.size());
    for (size_t t = flat.backwardStart; t < flat.instrs.size(); ++t)
      if (inB[t] != weights)
        split.instrs.push_back(flat.instrs[t]);
  }
  return split;
}

} // namespace bmrt
