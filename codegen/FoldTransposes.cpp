//===- FoldTransposes.cpp - GEMM transposes as BLAS flags -----------------===//

#include "codegen/FoldTransposes.h"
#include "codegen/OutlineBlocks.h"

#include <algorithm>

namespace bm {
namespace {

using bmrt::Instr;

/// A permutation that swaps the last two dims and keeps the others.
bool swapsLastTwo(const std::vector<int64_t> &perm) {
  size_t rank = perm.size();
  if (rank < 2)
    return false;
  for (size_t i = 0; i + 2 < rank; ++i)
    if (perm[i] != int64_t(i))
      return false;
  return perm[rank - 2] == int64_t(rank - 1) &&
         perm[rank - 1] == int64_t(rank - 2);
}

bool isFoldableTranspose(const Instr &instr) {
  if (instr.op != "transpose")
    return false;
  auto perm = instr.attrs.find("permutation");
  return perm != instr.attrs.end() &&
         perm->second.kind == bmrt::Attr::Kind::Ints &&
         swapsLastTwo(perm->second.ints);
}

/// Slots the loss, the outputs or a gradient hold: never dropped.
bool isKept(const bmrt::Program &program, int slot) {
  auto listed = [slot](const std::vector<int> &slots) {
    return std::find(slots.begin(), slots.end(), slot) != slots.end();
  };
  return slot == program.loss || listed(program.sends) ||
         listed(program.sendGrads) ||
         program.slots[slot].kind != bmrt::SlotKind::Value ||
         std::find(program.outputs.begin(), program.outputs.end(), slot) !=
             program.outputs.end();
}

} // namespace

void foldTransposesIntoMatmuls(bmrt::Program &program) {
  std::vector<int> producer(program.slots.size(), -1);
  for (size_t t = 0; t < program.instrs.size(); ++t)
    for (int r : program.instrs[t].results)
      producer[r] = static_cast<int>(t);
  for (Instr &instr : program.instrs) {
    if (instr.op != "matmul")
      continue;
    for (size_t k = 0; k < 2 && k < instr.operands.size(); ++k) {
      const char *flag = k == 0 ? "trans_a" : "trans_b";
      int from = producer[instr.operands[k]];
      if (from < 0 || !isFoldableTranspose(program.instrs[from]) ||
          instr.getInt(flag, 0))
        continue;
      instr.operands[k] = program.instrs[from].operands[0];
      instr.attrs[flag].kind = bmrt::Attr::Kind::Int;
      instr.attrs[flag].i = 1;
    }
  }
  // Transposes nothing reads any more.
  std::vector<int> readers(program.slots.size(), 0);
  for (const Instr &instr : program.instrs)
    for (int o : instr.operands)
      if (o >= 0)
        ++readers[o];
  std::vector<Instr> kept;
  int backwardStart = program.backwardStart;
  for (size_t t = 0; t < program.instrs.size(); ++t) {
    Instr &instr = program.instrs[t];
    if (static_cast<int>(t) == program.backwardStart)
      backwardStart = static_cast<int>(kept.size());
    bool dead = instr.op == "transpose" && readers[instr.results[0]] == 0 &&
                !isKept(program, instr.results[0]);
    if (!dead)
      kept.push_back(std::move(instr));
  }
  program.instrs = std::move(kept);
  program.backwardStart = backwardStart;
  compactSlots(program);
}

} // namespace bm
