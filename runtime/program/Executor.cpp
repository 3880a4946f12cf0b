//===- Executor.cpp - placing slots and running instructions --------------===//

#include "bmrt/Executor.h"
#include "bmrt/Error.h"

#include <algorithm>

namespace bmrt {

static constexpr size_t kAlignment = 64;

static size_t alignUp(size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

Executor::Executor(const Program &program, Device &device,
                   const std::string &source, Collectives *collectives,
                   BackwardParts backward)
    : prog(inlineCalls(program)), dev(device), comms(collectives) {
  if (backward == BackwardParts::Split)
    prog = splitBackward(prog, source);
  // Before any memory is placed: the kernels trust shapes.
  verifyProgram(prog, source);
  for (const Instr &instr : prog.instrs) {
    KernelLauncher launcher = dev.backend().kernels.find(instr.op);
    BMRT_CHECK(launcher, source + ": the step program uses op '" + instr.op +
                             "', which the " + dev.backend().name +
                             " backend has no kernel for");
    launchers.push_back(launcher);
  }
  placeSlots();
}

Executor::~Executor() {
  for (const Allocation &a : owned)
    dev.deallocate(a.pointer, a.bytes, a.kind);
  if (scratchData)
    dev.deallocate(scratchData, scratchSize, MemoryKind::Workspace);
}

Collectives &Executor::collectives(const std::string &op) {
  BMRT_CHECK(comms, "'" + op + "' communicates, but this step program runs "
                                "without the job's communicators");
  return *comms;
}

void *Executor::scratch(size_t bytes) {
  if (bytes <= scratchSize)
    return scratchData;
  // Wait for the kernels still reading the old buffer.
  stream().synchronize();
  if (scratchData)
    dev.deallocate(scratchData, scratchSize, MemoryKind::Workspace);
  scratchSize = alignUp(bytes);
  scratchData = dev.allocate(scratchSize, MemoryKind::Workspace);
  return scratchData;
}

static MemoryKind memoryKindOf(SlotKind kind) {
  switch (kind) {
  case SlotKind::Param:
    return MemoryKind::Parameters;
  case SlotKind::Grad:
    return MemoryKind::Gradients;
  case SlotKind::Input:
  case SlotKind::Label:
  case SlotKind::Value:
  case SlotKind::Activation:
  case SlotKind::ActivationGrad:
    return MemoryKind::Activations;
  case SlotKind::Const:
    return MemoryKind::Workspace;
  }
  return MemoryKind::Workspace;
}

void Executor::placeSlots() {
  views.resize(prog.slots.size());
  for (size_t i = 0; i < prog.slots.size(); ++i) {
    const Slot &slot = prog.slots[i];
    views[i].dtype = slot.dtype;
    views[i].shape = slot.shape;
    if (slot.kind == SlotKind::Value)
      continue;
    size_t bytes = alignUp(std::max<int64_t>(slot.bytes(), 1));
    MemoryKind kind = memoryKindOf(slot.kind);
    views[i].data = dev.allocate(bytes, kind);
    owned.push_back({views[i].data, bytes, kind});
    if (slot.kind == SlotKind::Const)
      dev.copyToDevice(views[i].data, slot.data.data(), slot.bytes(),
                       dev.computeStream());
  }
  placeValues();
  dev.computeStream().synchronize();
}

/// Each slot's first and last instruction: a value lives from the
/// instruction that computes it to its last reader. What is read off the
/// device after the instructions lives to the end of the program (the loss,
/// the outputs, the gradients sent back); what a stage sends is read right
/// after its forward (Pipeline::forward, before any other forward), so it
/// lives to the forward's end, and past it only where the backward reads it:
/// the per-micro-batch stash keeps only what the backward needs.
static void findLifetimes(const Program &prog, std::vector<size_t> &first,
                          std::vector<size_t> &last) {
  size_t n = prog.slots.size(), end = prog.instrs.size();
  first.assign(n, end);
  last.assign(n, 0);
  for (size_t t = 0; t < end; ++t) {
    for (int r : prog.instrs[t].results) {
      first[r] = std::min(first[r], t);
      last[r] = std::max(last[r], t);
    }
    for (int o : prog.instrs[t].operands)
      if (o >= 0)
        last[o] = std::max(last[o], t);
  }
  if (prog.loss >= 0)
    last[prog.loss] = end;
  for (int slot : prog.sendGrads)
    last[slot] = end;
  for (int output : prog.outputs)
    last[output] = end;
  // Without a backward line the step runs as one: sends last to its end.
  size_t forwardLast = prog.backwardStart > 0 ? size_t(prog.backwardStart) - 1
                       : prog.backwardStart == 0 ? 0
                                                 : end;
  for (int slot : prog.sends)
    last[slot] = std::max(last[slot], forwardLast);
}

/// Ops whose result is their operand's bytes under another shape: run as a
/// copy, they move every byte once for nothing.
static bool isReshapeView(const Instr &instr) {
  static const char *const kViews[] = {"flatten", "reshape", "squeeze",
                                       "unsqueeze"};
  return std::find_if(std::begin(kViews), std::end(kViews),
                      [&](const char *op) { return instr.op == op; }) !=
         std::end(kViews);
}

/// Each reshape-like instruction between two values (each computed by
/// one instruction) makes its result share its operand's bytes: both slots
/// get one root (aliasRoot), whose life spans all of theirs, and the
/// instruction is not run (elided).
void Executor::findViewAliases(std::vector<size_t> &first,
                               std::vector<size_t> &last) {
  size_t n = prog.slots.size();
  aliasRoot.resize(n);
  for (size_t i = 0; i < n; ++i)
    aliasRoot[i] = static_cast<int>(i);
  elided.assign(prog.instrs.size(), false);
  std::vector<int> writers(n, 0);
  for (const Instr &instr : prog.instrs)
    for (int r : instr.results)
      ++writers[r];
  auto isValue = [&](int slot) {
    return slot >= 0 && prog.slots[slot].kind == SlotKind::Value &&
           writers[slot] == 1;
  };
  for (size_t t = 0; t < prog.instrs.size(); ++t) {
    const Instr &instr = prog.instrs[t];
    if (!isReshapeView(instr) || instr.operands.size() != 1 ||
        instr.results.size() != 1)
      continue;
    int from = instr.operands[0], to = instr.results[0];
    if (!isValue(from) || !isValue(to) ||
        prog.slots[from].bytes() != prog.slots[to].bytes())
      continue;
    int root = aliasRoot[from];
    aliasRoot[to] = root;
    first[root] = std::min(first[root], first[to]);
    last[root] = std::max(last[root], last[to]);
    elided[t] = true;
  }
}

/// Offsets in the arena by liveness (findLifetimes): values whose lives
/// overlap get disjoint bytes. Largest first, at the lowest offset that fits
/// between the values already placed that overlap it in time. A view's
/// result takes its root's bytes (findViewAliases).
void Executor::placeValues() {
  size_t n = prog.slots.size(), end = prog.instrs.size();
  std::vector<size_t> first, last;
  findLifetimes(prog, first, last);
  findViewAliases(first, last);

  std::vector<int> values;
  for (size_t i = 0; i < n; ++i)
    if (prog.slots[i].kind == SlotKind::Value && first[i] < end &&
        aliasRoot[i] == static_cast<int>(i))
      values.push_back(static_cast<int>(i));
  std::stable_sort(values.begin(), values.end(), [&](int a, int b) {
    return prog.slots[a].bytes() > prog.slots[b].bytes();
  });

  struct Placed {
    size_t offset, bytes, first, last;
  };
  std::vector<Placed> placed;
  std::vector<size_t> offsets(n, 0);
  for (int v : values) {
    size_t bytes = alignUp(std::max<int64_t>(prog.slots[v].bytes(), 1));
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed &p : placed)
      if (p.first <= last[v] && first[v] <= p.last)
        busy.push_back({p.offset, p.offset + p.bytes});
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + bytes <= lo)
        break;
      offset = std::max(offset, hi);
    }
    offsets[v] = offset;
    placed.push_back({offset, bytes, first[v], last[v]});
    arenaSize = std::max(arenaSize, offset + bytes);
  }
  if (arenaSize) {
    arena = dev.allocate(arenaSize, MemoryKind::Activations);
    owned.push_back({arena, arenaSize, MemoryKind::Activations});
  }
  for (int v : values)
    views[v].data = static_cast<char *>(arena) + offsets[v];
  for (size_t i = 0; i < n; ++i)
    if (aliasRoot[i] != static_cast<int>(i))
      views[i].data = views[aliasRoot[i]].data;
  findStashed(first, last);
  findWeightStashed(first);
}

/// A value crosses from the forward into the backward when it is computed
/// before backwardStart and read from it on; a slot filled from outside
/// (inputs, labels, the received activation) when the backward reads it.
/// The received gradient is filled at the backward's start: not stashed.
void Executor::findStashed(const std::vector<size_t> &first,
                           const std::vector<size_t> &last) {
  if (prog.backwardStart < 0)
    return;
  const size_t boundary = static_cast<size_t>(prog.backwardStart);
  std::vector<bool> readInBackward(prog.slots.size(), false);
  for (size_t t = boundary; t < prog.instrs.size(); ++t)
    for (int o : prog.instrs[t].operands)
      if (o >= 0)
        readInBackward[o] = true;
  for (size_t i = 0; i < prog.slots.size(); ++i) {
    SlotKind kind = prog.slots[i].kind;
    bool crosses = kind == SlotKind::Value && first[i] < boundary &&
                   last[i] >= boundary;
    bool fromOutside = (kind == SlotKind::Input || kind == SlotKind::Label ||
                        kind == SlotKind::Activation) &&
                       readInBackward[i];
    if (crosses || fromOutside)
      stashed.push_back(static_cast<int>(i));
  }
  dropSharedBytes(stashed);
}

/// Keeps one slot of each set of bytes (a view and its root): stashing both
/// would copy the bytes twice.
void Executor::dropSharedBytes(std::vector<int> &slots) const {
  std::vector<bool> taken(prog.slots.size(), false);
  std::vector<int> kept;
  for (int slot : slots) {
    int root = aliasRoot.empty() ? slot : aliasRoot[slot];
    if (!taken[root])
      kept.push_back(slot);
    taken[root] = true;
  }
  slots = std::move(kept);
}

/// What W reads from before it: values computed before weightGradStart,
/// and slots filled from outside (inputs, labels, the activation and the
/// gradient received); with the parameters' gradients B wrote, which the
/// next micro-batch's B would overwrite before this one's W is taken.
void Executor::findWeightStashed(const std::vector<size_t> &first) {
  if (prog.weightGradStart < 0)
    return;
  const size_t boundary = static_cast<size_t>(prog.weightGradStart);
  std::vector<bool> readInW(prog.slots.size(), false);
  std::vector<bool> writtenInB(prog.slots.size(), false);
  for (size_t t = prog.backwardStart; t < prog.instrs.size(); ++t) {
    for (int o : prog.instrs[t].operands)
      if (o >= 0 && t >= boundary)
        readInW[o] = true;
    for (int r : prog.instrs[t].results)
      if (t < boundary)
        writtenInB[r] = true;
  }
  for (size_t i = 0; i < prog.slots.size(); ++i) {
    SlotKind kind = prog.slots[i].kind;
    bool crosses = kind == SlotKind::Value && first[i] < boundary && readInW[i];
    bool fromOutside =
        (kind == SlotKind::Input || kind == SlotKind::Label ||
         kind == SlotKind::Activation || kind == SlotKind::ActivationGrad) &&
        readInW[i];
    bool gradientOfB = kind == SlotKind::Grad && writtenInB[i];
    if (crosses || fromOutside || gradientOfB)
      weightStashed.push_back(static_cast<int>(i));
  }
  dropSharedBytes(weightStashed);
}

const TensorView &Executor::operand(const Instr &instr, size_t i) const {
  BMRT_CHECK(i < instr.operands.size() && instr.operands[i] >= 0,
             "'" + instr.op + "' needs operand " + std::to_string(i));
  return views[instr.operands[i]];
}

const TensorView *Executor::optionalOperand(const Instr &instr,
                                            size_t i) const {
  if (i >= instr.operands.size() || instr.operands[i] < 0)
    return nullptr;
  return &views[instr.operands[i]];
}

const TensorView &Executor::result(const Instr &instr, size_t i) const {
  BMRT_CHECK(i < instr.results.size(),
             "'" + instr.op + "' needs result " + std::to_string(i));
  return views[instr.results[i]];
}

SlotProvider::~SlotProvider() = default;

void Executor::releaseSlot(int index, SlotProvider &slots) {
  BMRT_CHECK(!provider || provider == &slots,
             "an executor takes released slots from one provider");
  provider = &slots;
  auto it = std::find_if(owned.begin(), owned.end(), [&](const Allocation &a) {
    return a.pointer == views.at(index).data;
  });
  BMRT_CHECK(it != owned.end() && prog.slots[index].kind != SlotKind::Value,
             "slot %" + std::to_string(index) + " has no memory of its own");
  dev.deallocate(it->pointer, it->bytes, it->kind);
  owned.erase(it);
  views[index].data = nullptr;
  // Acquire before the first of each run of consecutive readers, release
  // after its last.
  size_t n = prog.instrs.size();
  acquireBefore.resize(n);
  releaseAfter.resize(n);
  auto reads = [&](size_t t) {
    const std::vector<int> &ops = prog.instrs[t].operands;
    return std::find(ops.begin(), ops.end(), index) != ops.end();
  };
  for (size_t t = 0; t < n; ++t) {
    if (!reads(t))
      continue;
    if (t == 0 || !reads(t - 1))
      acquireBefore[t].push_back(index);
    if (t + 1 == n || !reads(t + 1))
      releaseAfter[t].push_back(index);
  }
}

void Executor::runRange(size_t begin, size_t end) {
  for (size_t t = begin; t < end && t < prog.instrs.size(); ++t) {
    if (beforeInstruction)
      beforeInstruction(t);
    if (provider)
      for (int slot : acquireBefore[t])
        provider->acquire(*this, slot);
    if (t >= elided.size() || !elided[t])
      launchers[t](*this, prog.instrs[t]);
    if (provider)
      for (int slot : releaseAfter[t])
        provider->release(*this, slot);
    if (afterInstruction)
      afterInstruction(t);
  }
}

void Executor::runForward() {
  BMRT_CHECK(prog.backwardStart >= 0,
             "the step program has no 'backward' line: it is no pipeline "
             "stage");
  runRange(0, prog.backwardStart);
  stream().synchronize();
}

void Executor::runBackward() {
  runRange(prog.backwardStart, prog.instrs.size());
  stream().synchronize();
}

void Executor::runBackwardInput() {
  BMRT_CHECK(prog.weightGradStart >= 0,
             "the step program's backward was not split into B and W");
  runRange(prog.backwardStart, prog.weightGradStart);
  stream().synchronize();
}

void Executor::runBackwardWeight() {
  BMRT_CHECK(prog.weightGradStart >= 0,
             "the step program's backward was not split into B and W");
  runRange(prog.weightGradStart, prog.instrs.size());
  stream().synchronize();
}

size_t Executor::bytesOf(const std::vector<int> &slots) const {
  size_t total = 0;
  for (int slot : slots)
    total += views[slot].bytes();
  return total;
}

void Executor::copyOut(const std::vector<int> &slots, void *out) {
  char *at = static_cast<char *>(out);
  for (int slot : slots) {
    dev.copyOnDevice(at, views[slot].data, views[slot].bytes(), stream());
    at += views[slot].bytes();
  }
  stream().synchronize();
}

void Executor::copyIn(const std::vector<int> &slots, const void *in) {
  const char *at = static_cast<const char *>(in);
  for (int slot : slots) {
    dev.copyOnDevice(views[slot].data, at, views[slot].bytes(), stream());
    at += views[slot].bytes();
  }
  stream().synchronize();
}

size_t Executor::stashBytes() const { return bytesOf(stashed); }
void Executor::stash(void *out) { copyOut(stashed, out); }
void Executor::unstash(const void *in) { copyIn(stashed, in); }

size_t Executor::weightStashBytes() const { return bytesOf(weightStashed); }
void Executor::stashWeightInputs(void *out) { copyOut(weightStashed, out); }
void Executor::unstashWeightInputs(const void *in) {
  copyIn(weightStashed, in);
}

void Executor::run() {
  runRange(0, prog.instrs.size());
  stream().synchronize();
}

} // namespace bmrt
