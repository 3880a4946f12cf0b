//===- SingleOp.cpp - one instruction run on a device ---------------------===//

#include "bmrt/SingleOp.h"

namespace bmrt {

static int addSlot(Program &program, SlotKind kind, const TensorType &type,
                   std::string name) {
  Slot slot;
  slot.kind = kind;
  slot.dtype = type.dtype;
  slot.shape = type.shape;
  slot.name = std::move(name);
  program.slots.push_back(std::move(slot));
  return static_cast<int>(program.slots.size()) - 1;
}

Program singleOpProgram(const OpSignature &signature,
                        const std::string &name) {
  Program program;
  program.model = name;
  program.mesh = signature.mesh;
  Instr instr;
  instr.op = signature.op;
  instr.attrs = signature.attrs;
  instr.comment = name;
  for (size_t i = 0; i < signature.operands.size(); ++i)
    instr.operands.push_back(
        signature.operands[i]
            ? addSlot(program, SlotKind::Input, *signature.operands[i],
                      "operand" + std::to_string(i))
            : -1);
  for (const TensorType &type : signature.results) {
    int slot = addSlot(program, SlotKind::Value, type, "");
    instr.results.push_back(slot);
    program.outputs.push_back(slot);
  }
  program.instrs.push_back(std::move(instr));
  return program;
}

SingleOp::SingleOp(Device &device, const OpSignature &signature,
                   const std::string &name, Collectives *collectives)
    : executor(std::make_unique<Executor>(singleOpProgram(signature, name),
                                          device, name, collectives)) {}

const TensorView &SingleOp::operand(size_t i) const {
  return executor->operand(executor->program().instrs.front(), i);
}

const TensorView &SingleOp::result(size_t i) const {
  return executor->result(executor->program().instrs.front(), i);
}

} // namespace bmrt
