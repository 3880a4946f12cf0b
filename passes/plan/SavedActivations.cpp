//===- SavedActivations.cpp - what backward reads, per value --------------===//
//
// The activations a training step keeps from forward to backward: the values
// some op's gradient reads (autograd's saved tensors). Korthikanti et al.
// 2022, section 4.1, count a transformer layer's activation memory the same
// way; the planner charges these bytes per micro-batch in flight.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/GraphAnalysis.h"

#include "llvm/ADT/StringRef.h"

using namespace bm;
using namespace bm::plan;

namespace {

/// What an op's backward reads besides the incoming gradient.
enum class BackwardReads {
  Nothing,       // linear in each operand, no state (add, views, sums)
  Operands,      // its activation operands (norms, pointwise nonlinearity)
  OtherOperands, // bilinear: operand i when another operand has a gradient
  Condition,     // where: only the mask
  Divide,        // a / b: b, and a when b has a gradient
  Output,        // its own result (softmax, exp)
};

// Alphabetical; ops not listed read their operands (the safe default).
BackwardReads backwardReads(llvm::StringRef name) {
  static const std::pair<const char *, BackwardReads> kTable[] = {
      {"bm.add", BackwardReads::Nothing},
      {"bm.and", BackwardReads::Nothing},
      {"bm.avg_pool", BackwardReads::Nothing},
      {"bm.cast", BackwardReads::Nothing},
      {"bm.concat", BackwardReads::Nothing},
      {"bm.constant", BackwardReads::Nothing},
      {"bm.conv", BackwardReads::OtherOperands},
      {"bm.cumsum", BackwardReads::Nothing},
      {"bm.div", BackwardReads::Divide},
      {"bm.einsum", BackwardReads::OtherOperands},
      {"bm.equal", BackwardReads::Nothing},
      {"bm.exp", BackwardReads::Output},
      {"bm.expand", BackwardReads::Nothing},
      {"bm.flatten", BackwardReads::Nothing},
      {"bm.gemm", BackwardReads::OtherOperands},
      {"bm.global_avg_pool", BackwardReads::Nothing},
      {"bm.greater", BackwardReads::Nothing},
      {"bm.iota", BackwardReads::Nothing},
      {"bm.less", BackwardReads::Nothing},
      {"bm.log_softmax", BackwardReads::Output},
      {"bm.matmul", BackwardReads::OtherOperands},
      {"bm.mul", BackwardReads::OtherOperands},
      {"bm.neg", BackwardReads::Nothing},
      {"bm.not", BackwardReads::Nothing},
      {"bm.one_hot", BackwardReads::Nothing},
      {"bm.or", BackwardReads::Nothing},
      {"bm.reduce_mean", BackwardReads::Nothing},
      {"bm.reduce_sum", BackwardReads::Nothing},
      {"bm.reshape", BackwardReads::Nothing},
      {"bm.slice", BackwardReads::Nothing},
      {"bm.softmax", BackwardReads::Output},
      {"bm.split", BackwardReads::Nothing},
      {"bm.squeeze", BackwardReads::Nothing},
      {"bm.sub", BackwardReads::Nothing},
      {"bm.transpose", BackwardReads::Nothing},
      {"bm.trilu", BackwardReads::Nothing},
      {"bm.unsqueeze", BackwardReads::Nothing},
      {"bm.where", BackwardReads::Condition},
  };
  for (const auto &[op, reads] : kTable)
    if (name == op)
      return reads;
  return BackwardReads::Operands;
}

} // namespace

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
  // Whether the gradient of an operand of `op` that needs one reads
  // position `index` (operands, then results) of `op`, by its rule.
  auto ruleReads = [&](const OpInfo &op, size_t index) {
    for (size_t j = 0; j < op.gradientReads.size(); ++j)
      if (needsGradient_[op.operands[j]] && op.gradientReads[j][index])
        return true;
    return false;
  };
  // Whether `consumer`'s backward reads its operand `index`.
  auto reads = [&](int consumer, size_t index) {
    const OpInfo &op = graph_.ops[consumer];
    if (!op.gradientReads.empty())
      return ruleReads(op, index);
    switch (backwardReads(op.opName)) {
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
  };
  for (int o : searchedOps) {
    const OpInfo &op = graph_.ops[o];
    for (auto [r, v] : llvm::enumerate(op.results)) {
      bool readsOutput =
          op.gradientReads.empty()
              ? backwardReads(op.opName) == BackwardReads::Output
              : ruleReads(op, op.operands.size() + r);
      bool saved = readsOutput || v == graph_.output;
      for (int user : consumers(v)) {
        const std::vector<int> &operands = graph_.ops[user].operands;
        for (size_t i = 0; i < operands.size() && !saved; ++i)
          saved = operands[i] == v && reads(user, i);
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
