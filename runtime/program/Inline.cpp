//===- Inline.cpp - calls of block functions become their instructions ---===//

#include "bmrt/Error.h"
#include "bmrt/Program.h"

#include <map>

namespace bmrt {

namespace {

/// Appends `function`'s instructions to `flat`, its arguments and results
/// bound to the call's slots and its other slots fresh.
void inlineCall(const Function &function, const Instr &call, Program &flat) {
  std::vector<int> slotOf(function.slots.size(), -1);
  for (int i = 0; i < function.numArgs; ++i)
    slotOf[i] = call.operands[i];
  for (size_t i = 0; i < function.results.size(); ++i)
    slotOf[function.results[i]] = call.results[i];
  for (size_t local = 0; local < function.slots.size(); ++local)
    if (slotOf[local] < 0) {
      slotOf[local] = static_cast<int>(flat.slots.size());
      flat.slots.push_back(function.slots[local]);
    }
  for (const Instr &instr : function.instrs) {
    Instr copy = instr;
    for (int &operand : copy.operands)
      if (operand >= 0)
        operand = slotOf[operand];
    for (int &result : copy.results)
      result = slotOf[result];
    if (!call.comment.empty())
      copy.comment += (copy.comment.empty() ? "" : ", ") + call.comment;
    flat.instrs.push_back(std::move(copy));
  }
}

} // namespace

Program inlineCalls(const Program &program) {
  if (program.functions.empty())
    return program;
  std::map<std::string, const Function *> byName;
  for (const Function &function : program.functions)
    byName[function.name] = &function;
  Program flat;
  flat.model = program.model;
  flat.slots = program.slots;
  flat.mesh = program.mesh;
  flat.loss = program.loss;
  flat.lossPartial = program.lossPartial;
  flat.outputs = program.outputs;
  flat.sends = program.sends;
  flat.sendGrads = program.sendGrads;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const Instr &instr = program.instrs[i];
    if (static_cast<int>(i) == program.backwardStart)
      flat.backwardStart = static_cast<int>(flat.instrs.size());
    if (static_cast<int>(i) == program.weightGradStart)
      flat.weightGradStart = static_cast<int>(flat.instrs.size());
    if (instr.op != "call") {
      flat.instrs.push_back(instr);
      continue;
    }
    auto it = byName.find(instr.getString("callee"));
    BMRT_CHECK(it != byName.end(),
               "call of '" + instr.getString("callee") + "', which is no function");
    inlineCall(*it->second, instr, flat);
  }
  // Markers at the end (an empty backward, or an empty W).
  if (program.backwardStart == static_cast<int>(program.instrs.size()))
    flat.backwardStart = static_cast<int>(flat.instrs.size());
  if (program.weightGradStart == static_cast<int>(program.instrs.size()))
    flat.weightGradStart = static_cast<int>(flat.instrs.size());
  return flat;
}

} // namespace bmrt
