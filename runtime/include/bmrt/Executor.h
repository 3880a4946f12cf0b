//===- Executor.h - runs a step program on a device -------------*- C++ -*-===//
//
// Loads a Program onto a Device: parameters and gradients get persistent
// buffers, constants are copied in once, and every intermediate value gets
// a place in one activation arena, assigned by liveness (a value's bytes are
// reused once its last reader has run), so the step allocates nothing.
// run() enqueues every instruction's kernel on the device's compute stream.
// A program partitioned over a mesh also needs the job's communicators
// (Collectives.h) for its collective instructions.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_EXECUTOR_H
#define BMRT_EXECUTOR_H

#include "bmrt/Backend.h"
#include "bmrt/Device.h"
#include "bmrt/Program.h"

#include <functional>
#include <string>
#include <vector>

namespace bmrt {

class Collectives;
class Executor;

/// Where a slot's memory comes from while the step runs, for slots whose
/// memory the executor gave up (releaseSlot): ZeRO 3's parameters, gathered
/// before their readers and freed after.
class SlotProvider {
public:
  virtual ~SlotProvider();
  /// Gives `slot` memory holding its value (Executor::bindSlot).
  virtual void acquire(Executor &executor, int slot) = 0;
  /// Takes it back once the readers so far are done.
  virtual void release(Executor &executor, int slot) = 0;
};

/// How a pipeline stage's backward runs: as one, or as B then W apart
/// (splitBackward; the zero-bubble schedules).
enum class BackwardParts { Whole, Split };

class Executor {
public:
  /// Inlines the program's calls, verifies that every kernel can run it
  /// (verifyProgram; errors name `source`, the program's file) and places
  /// every slot in device memory; throws bmrt::Error otherwise. Slot
  /// indices of `program` keep their meaning.
  /// `collectives`, needed by a program with collectives, must outlive the
  /// executor.
  /// With BackwardParts::Split the inlined program's backward is reordered
  /// into B and W (splitBackward) before anything is placed.
  Executor(const Program &program, Device &device,
           const std::string &source = "step program",
           Collectives *collectives = nullptr,
           BackwardParts backward = BackwardParts::Whole);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Runs every instruction in order, then waits for the device.
  void run();
  /// Runs instructions [begin, end) without waiting; for tests and tracing.
  void runRange(size_t begin, size_t end);
  /// A pipeline stage's forward and backward (Program::backwardStart),
  /// each then waiting for the device.
  void runForward();
  void runBackward();
  /// The two parts of a split backward (BackwardParts::Split): B, then,
  /// possibly after other micro-batches, W.
  void runBackwardInput();
  void runBackwardWeight();
  /// The values a stage's backward reads from its forward (the values live
  /// across Program::backwardStart, and the slots filled from outside that
  /// the backward reads: inputs, labels, the received activation; a value
  /// sent to the next stage only where the backward reads it), copied
  /// out to `stashBytes()` bytes of device memory, so that other
  /// micro-batches' forwards can run in between, and back. The rest of the
  /// arena is the forward's and the backward's own working memory.
  size_t stashBytes() const;
  void stash(void *out);
  void unstash(const void *in);
  /// The same for W of a split backward: what W reads that was there
  /// before it (values of the forward and of B, the received gradient,
  /// inputs), and the parameters' gradients B wrote, kept from B to W.
  size_t weightStashBytes() const;
  void stashWeightInputs(void *out);
  void unstashWeightInputs(const void *in);

  const Program &program() const { return prog; }
  Device &device() { return dev; }
  Stream &stream() { return dev.computeStream(); }
  /// The tensor of slot `index` in device memory.
  const TensorView &view(int index) const { return views.at(index); }
  /// The operand / result views of an instruction (null for an absent
  /// optional operand).
  const TensorView &operand(const Instr &instr, size_t i) const;
  const TensorView *optionalOperand(const Instr &instr, size_t i) const;
  const TensorView &result(const Instr &instr, size_t i) const;
  /// Bytes of the activation arena (the liveness plan's peak).
  size_t arenaBytes() const { return arenaSize; }
  /// The job's communicators; throws bmrt::Error when the executor has
  /// none (naming `op`, the instruction that needs them).
  Collectives &collectives(const std::string &op);
  /// Workspace of at least `bytes` for a kernel's temporaries, valid until
  /// the next call (collectives reorder chunks through it).
  void *scratch(size_t bytes);

  /// Frees the memory of a parameter or constant slot; from now on
  /// `provider` gives it memory before each run of instructions that read
  /// it and takes it back after (runs of consecutive readers share one).
  void releaseSlot(int index, SlotProvider &provider);
  /// Points slot `index` at `data` (null: none).
  void bindSlot(int index, void *data) { views.at(index).data = data; }

  /// Called after each instruction has run (run, runRange, runForward,
  /// runBackward), with its index in program().instrs; empty: none. The
  /// trainer starts gradient reductions from it while the backward goes on.
  using InstructionHook = std::function<void(size_t index)>;
  void setInstructionHook(InstructionHook hook) {
    afterInstruction = std::move(hook);
  }
  /// Called before each instruction runs, before the released slots it
  /// reads are acquired; empty: none. The trainer holds the first reader
  /// of each parameter there until the offloaded optimizer's update of it
  /// has landed.
  void setBeforeInstructionHook(InstructionHook hook) {
    beforeInstruction = std::move(hook);
  }

private:
  void placeSlots();
  void placeValues();
  /// Fills aliasRoot and elided, widening each root's life to its views'.
  void findViewAliases(std::vector<size_t> &first, std::vector<size_t> &last);
  void dropSharedBytes(std::vector<int> &slots) const;
  /// Fills `stashed` from each slot's first and last instruction.
  void findStashed(const std::vector<size_t> &first,
                   const std::vector<size_t> &last);
  /// Fills `weightStashed` (split backwards only).
  void findWeightStashed(const std::vector<size_t> &first);
  size_t bytesOf(const std::vector<int> &slots) const;
  void copyOut(const std::vector<int> &slots, void *out);
  void copyIn(const std::vector<int> &slots, const void *in);

  /// The program with its calls inlined: each layer's instance of a block
  /// function gets its own slots, placed by liveness like any other.
  Program prog;
  Device &dev;
  std::vector<TensorView> views;
  void *arena = nullptr;
  size_t arenaSize = 0;
  /// Per slot, the slot whose bytes it shares (itself unless it is the
  /// result of a reshape-like view of a value); per instruction, whether
  /// it is such a view and not run.
  std::vector<int> aliasRoot;
  std::vector<bool> elided;
  /// The slots stash() and stashWeightInputs() copy, in slot order.
  std::vector<int> stashed, weightStashed;
  Collectives *comms;
  void *scratchData = nullptr;
  size_t scratchSize = 0;
  /// Persistent allocations (pointer, bytes, kind) freed at destruction.
  struct Allocation {
    void *pointer;
    size_t bytes;
    MemoryKind kind;
  };
  std::vector<Allocation> owned;
  std::vector<KernelLauncher> launchers;
  /// Released slots and, per instruction, those it reads that must be
  /// acquired before it and released after it.
  SlotProvider *provider = nullptr;
  std::vector<std::vector<int>> acquireBefore, releaseAfter;
  InstructionHook afterInstruction, beforeInstruction;
};

} // namespace bmrt

#endif // BMRT_EXECUTOR_H
