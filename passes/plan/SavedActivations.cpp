//===- SavedActivations.cpp - what backward reads, per value --------------===//
//
// The activations a training step keeps from forward to backward: the values
// some op's gradient reads (autograd's saved tensors). Korthikanti et al.
// 2022, section 4.1, count a transformer layer's activation memory the same
// way; the planner charges these bytes per micro-batch in flight.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/GraphAnalysis.h"

using namespace bm;
using namespace bm::plan;

// By the gradient rule where the graph has it (GradientReads): whether the
// gradient of an operand that needs one reads position `index` (operands,
// then results); else by the op's class.
bool GraphAnalysis::backwardReads(int consumer, size_t index) const {
  const OpInfo &op = graph_.ops[consumer];
  if (!op.gradientReads.empty()) {
    for (size_t j = 0; j < op.gradientReads.size(); ++j)
      if (needsGradient_[op.operands[j]] && op.gradientReads[j][index])
        return true;
    return false;
  }
  if (index >= op.operands.size())
    return op.backwardReads == BackwardReads::Output;
  switch (op.backwardReads) {
  case BackwardReads::Nothing:
  case BackwardReads::Output:
    return false;
  case BackwardReads::Operands:
    return true;
  case BackwardReads::Condition:
    return index == 0;
  case BackwardReads::Divide:
    return index == 1 || needsGradient_[op.operands[1]];
  case BackwardReads::OtherOperands:
    for (size_t j = 0; j < op.operands.size(); ++j)
      if (j != index && needsGradient_[op.operands[j]])
        return true;
    return false;
  }
  return true;
}

// Korthikanti et al. 2022, section 4.1, count a transformer layer's
// activations the same way: the inputs of the GEMMs, norms and GELU, the
// softmax output; none of the additions.
void GraphAnalysis::findSavedValues(const std::vector<int> &searchedOps) {
  saved_.assign(graph_.values.size(), 0);
  // Per-sample values, and values with a gradient; masks and tables made
  // from constants alone are kept once, not per micro-batch.
  auto keptPerMicroBatch = [&](int v) {
    const ValueInfo &value = graph_.values[v];
    return value.kind == ValueKind::Activation &&
           (value.batchDim >= 0 || needsGradient_[v]);
  };
  for (int o : searchedOps) {
    const OpInfo &op = graph_.ops[o];
    for (auto [r, v] : llvm::enumerate(op.results)) {
      bool saved =
          backwardReads(o, op.operands.size() + r) || v == graph_.output;
      for (int user : consumers(v)) {
        const std::vector<int> &operands = graph_.ops[user].operands;
        for (size_t i = 0; i < operands.size() && !saved; ++i)
          saved = operands[i] == v && backwardReads(user, i);
      }
      saved_[v] = saved && keptPerMicroBatch(v);
    }
  }
  // A fused kernel's backward recomputes the values it does not write from
  // its inputs: what it needs but did not write makes its inputs saved.
  for (auto it = searchedOps.rbegin(); it != searchedOps.rend(); ++it) {
    const OpInfo &op = graph_.ops[*it];
    bool needsRecompute = false;
    for (int v : op.results)
      needsRecompute |= saved_[v] && !materialized_[v];
    if (needsRecompute)
      for (int v : op.operands)
        if (keptPerMicroBatch(v))
          saved_[v] = 1;
  }
}
