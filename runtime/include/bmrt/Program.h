//===- Program.h - the step program a trainer runs --------------*- C++ -*-===//
//
// `bmc compile` writes the training step as a program file (step.bmp) that
// the trainer loads: the compiler's last word and the runtime's only input
// besides the plan and the weights. It is text, meant to be read:
//
//   bmc-step-program 1
//   model gpt3-tiny
//   slot %0 input i64[2,16] "input_ids"
//   slot %1 param f32[512,64] "wte.weight"
//   slot %2 grad f32[512,64] "wte.weight"
//   slot %3 const i64[4] = 0 1 2 3
//   slot %4 value f32[2,16,64]
//   ...
//   %4 = gather %1, %0 {axis=0}  # wte (Gather)
//   ...
//   loss %40
//
// Layers of one block class share a function, run once per layer:
//
//   func block0_forward 14 -> %30, %31
//   slot %0 value f32[8,16,64]
//   ...
//   %14 = layer_norm %0, %1, %2 {axis=2, epsilon=9.99999975e-06}  # h.0.ln_1
//   ...
//   end
//   %50, %51 = call %32, %3, %4, ... {callee="block0_forward"}  # layer 1
//
// (A forward-only program, for checking the model against a reference, ends
// with `output %N` lines instead of `loss`.)
//
// A program partitioned over a device mesh (tensor, expert, data and
// pipeline parallelism) names the mesh after the model and gives each slot
// its LOCAL (per-rank) shape and its sharding:
//
//   mesh tp=2 ep=1 dp=2 pp=1
//   slot %0 input i64[4,16] "input_ids" sharding=[["dp"],[]]
//   slot %1 param f32[256,64] "wte.weight" sharding=[["tp"],[]]
//   slot %2 grad f32[256,64] "wte.weight" sharding=[["tp"],[]] partial=["dp"]
//   ...
//   %7 = all_reduce %6 {axes="tp"}                 # sum over the group
//   %8 = all_gather %7 {axes="tp", dim=2}          # concatenate along dim
//   %9 = reduce_scatter %8 {axes="tp", dim=1}      # sum, keep my chunk of dim
//   %10 = all_to_all %9 {axes="ep", split_dim=0, concat_dim=1}
//   %11 = shard_slice %10 {axes="tp", dim=2}       # my chunk, no messages
//   ...
//   loss %64 partial=["dp"]
//
// - `mesh` gives the axis sizes (tp, ep, dp, pp; bmrt::Mesh::fromPlan
//   numbers the ranks tp innermost). Their product is the job's rank count.
//   Without a mesh line the program is the whole step of one rank of a
//   data-parallel job, which averages gradients over all ranks.
// - `sharding=` lists, per tensor dim, the mesh axes splitting it, major to
//   minor (as #bm.sharding does); omitted: replicated. A dim's global size
//   is its local size times the product of its axes' sizes; the chunk a
//   rank holds is the mixed-radix number of its coordinates along the
//   listed axes, the first listed the most significant.
// - `partial=` on a gradient: the program leaves it a partial SUM over
//   those axes (the loss is already scaled), which the trainer reduces
//   (all-reduce, or reduce-scatter under ZeRO 2 and 3). On the loss: the
//   trainer sums it over those axes for the loss it reports.
// - Collectives name their group by `axes="dp,tp"`: the ranks differing
//   only along those axes. Along `dim` (all_gather, reduce_scatter,
//   shard_slice; split_dim and concat_dim of all_to_all) the chunks follow
//   the listed order, first listed major.
//
// Pipeline parallelism: each virtual stage (model chunk) is a program of
// its own (trainer.json's "stages", in virtual-stage order; the mesh line
// names pp), split into forward and backward by a `backward` line, which
// the trainer runs per micro-batch in the order of the plan's schedule:
//
//   slot %0 activation f32[4,8]        # the previous stage's output
//   slot %1 activation f32[4,6,8]      # another (T5's encoder output)
//   slot %9 activation_grad f32[4,8]   # gradients from the next stage
//   slot %10 activation_grad f32[4,6,8]
//   ...forward instructions...
//   backward
//   ...backward instructions...
//   send %7                            # values for the next stage
//   send %1                            # (one received, passed on)
//   send_grad %12                      # gradients for the previous stage
//   send_grad %13
//
// A boundary carries any number of values each way, matched by position:
// the i-th `send` line of stage s fills the i-th activation slot (in slot
// order) of stage s + 1, and the i-th `send_grad` line of stage s + 1 the
// i-th activation_grad slot of stage s; each pair has one dtype and shape
// (checkStageBoundary, run by the trainer on the stages it is given). The
// forward's order is the values' first use in the step, the backward's
// their gradients' first use in the backward (bm-split-stages), so the two
// lists need not pair up within a stage. A program with one of each is the
// single-value form of earlier versions, unchanged.
// The first stage has no activation and sends no gradient; the last has
// the loss instead of send and activation_grad. Between a micro-batch's
// forward and backward, the trainer keeps the stage's values (its arena
// and its input slots, every activation among them) per micro-batch in
// flight.
// A slot is one tensor of the step: a graph input or label (filled by the
// trainer's data), a parameter or its gradient (persistent, owned by the
// trainer), a constant (its values in the file), or an intermediate value
// (placed in one activation arena by liveness when the program is loaded).
// An instruction names a kernel, its operand and result slots, attributes
// and the ONNX node it came from. Instructions run in order.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_PROGRAM_H
#define BMRT_PROGRAM_H

#include "bmrt/Mesh.h"
#include "bmrt/Tensor.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bmrt {

enum class SlotKind : uint8_t {
  Input,
  Label,
  Param,
  Grad,
  Const,
  Value,
  /// A pipeline stage's input from the previous stage, and the gradient of
  /// its output from the next one.
  Activation,
  ActivationGrad,
};
const char *nameOf(SlotKind kind);

struct Slot {
  SlotKind kind = SlotKind::Value;
  DType dtype = DType::F32;
  Shape shape;
  /// The graph input's, label's or parameter's name (a gradient carries its
  /// parameter's name).
  std::string name;
  /// A constant's elements, little-endian, numElements(shape) * sizeOf(dtype)
  /// bytes.
  std::vector<uint8_t> data;
  /// Per dim, the mesh axes that split it, major to minor; empty when the
  /// slot is replicated (no `sharding=`).
  std::vector<std::vector<std::string>> sharding;
  /// The axes a gradient is a partial sum over (`partial=`).
  std::vector<std::string> partial;
  /// A parameter stored in a factored view of its model shape (a fused QKV
  /// weight [64, 192] as [64, 3, 64], bmc's FactorParameters): the model's
  /// shape (`model=`), which initial weights and exports have. Empty when
  /// the global shape is the model's.
  Shape model;
  /// A parameter a training step gives no gradient on purpose (`frozen`):
  /// batch norm's running statistics, a weight the loss does not read.
  /// Every other parameter of a training step must have one.
  bool frozen = false;

  int64_t bytes() const { return numElements(shape) * sizeOf(dtype); }
};

/// An attribute value: an integer (also booleans), a float, a list of
/// integers or a string.
struct Attr {
  enum class Kind : uint8_t { Int, Float, Ints, String } kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  std::vector<int64_t> ints;
  std::string s;
};

struct Instr {
  /// The kernel: a bm op's mnemonic ("matmul", "layer_norm_grad").
  std::string op;
  /// Slot indices; -1 for an optional operand that is absent.
  std::vector<int> operands;
  std::vector<int> results;
  std::map<std::string, Attr> attrs;
  /// Where it came from: the ONNX node, or what autodiff made it for.
  std::string comment;
  /// The folded layer and block class the op belongs to (-1: none). The
  /// compiler's bookkeeping for outlining blocks; not part of the text.
  int layer = -1, blockClass = -1;

  /// The attribute `name`; throws bmrt::Error if absent or of another kind.
  int64_t getInt(const std::string &name) const;
  double getFloat(const std::string &name) const;
  const std::vector<int64_t> &getInts(const std::string &name) const;
  const std::string &getString(const std::string &name) const;
  int64_t getInt(const std::string &name, int64_t otherwise) const;
};

/// The instructions of one block class's layers (their forward, or their
/// backward), run by `call` instructions once per layer: a layer's own
/// values are the function's slots, so a deep model's program is as long
/// as its unique blocks.
struct Function {
  std::string name;
  /// Local slots; the first `numArgs` are the arguments, bound by each call
  /// to its operands.
  std::vector<Slot> slots;
  int numArgs = 0;
  std::vector<Instr> instrs;
  /// Local slots each call binds to its results.
  std::vector<int> results;
};

struct Program {
  static constexpr int kVersion = 1;
  std::string model;
  /// The device mesh in the order the `mesh` line names it; empty when the
  /// program has none.
  std::vector<MeshAxis> mesh;
  std::vector<Slot> slots;
  /// Functions called by `call` instructions (attribute callee = name).
  std::vector<Function> functions;
  std::vector<Instr> instrs;
  /// The scalar the step minimises; -1 in a forward-only program.
  int loss = -1;
  /// The axes the loss is a partial sum over (`loss %N partial=[...]`).
  std::vector<std::string> lossPartial;
  /// A pipeline stage's program: where its backward starts (the `backward`
  /// line, an index into `instrs`; -1: the step runs as one).
  int backwardStart = -1;
  /// Where the backward's weight-gradient part (W) starts, when it is run
  /// apart from the rest (B, the gradients sent back and what they need):
  /// the `weight_grads` line, an index into `instrs` at or after
  /// backwardStart; -1: the backward runs as one. splitBackward sets it.
  int weightGradStart = -1;
  /// The values it sends to the next stage (`send %N` lines) and the
  /// gradients it sends back to the previous one (`send_grad %N`), in
  /// order; empty where there are none.
  std::vector<int> sends, sendGrads;
  /// What a forward-only program computes (the model's outputs).
  std::vector<int> outputs;

  /// Slots of one kind, in slot order.
  std::vector<int> slotsOf(SlotKind kind) const;
  /// The gradient slot of each parameter slot (by name), or -1.
  int gradientOf(int param) const;
  /// The size of mesh axis `name` (1 for an axis the mesh leaves out).
  int meshAxisSize(const std::string &name) const;
};

/// The same program with every call replaced by the callee's instructions
/// on fresh slots (appended after the program's own, whose indices stay).
Program inlineCalls(const Program &program);

/// Per slot of `flat` (a program without calls), the index of the last
/// instruction that writes it, or -1: from there on its value is final (a
/// gradient can be reduced while the rest of the backward runs). Where the
/// backward is split, a parameter's gradient written in B is final only
/// where W starts: W runs later, after other micro-batches, and the
/// gradients are taken together after it.
std::vector<int> lastWriters(const Program &flat);

/// `flat` (a pipeline stage's program without calls) with its backward
/// reordered into two parts for the zero-bubble schedules (Qi et al.
/// 2023): first B, the instructions the gradients sent back to the
/// previous stage depend on (`send_grad` slots), then W, the rest (the
/// weights' gradients); weightGradStart marks W. Each part keeps the
/// original relative order, and B is closed under the instructions it
/// reads from, so the order stays a valid one and every value is the same.
/// A first stage sends no gradient: its B is empty. Throws bmrt::Error
/// naming `source` when `flat` has no backward line.
Program splitBackward(const Program &flat, const std::string &source);

/// Checks that every kernel can run `flat` (a program without calls)
/// safely, since kernels trust shapes: each instruction names a kernel of
/// the runtime, has the operand and result counts, element types and
/// attributes (present, of the right kind, in range) its launcher reads,
/// reads only slots computed before it, and its results have exactly the
/// shapes the kernel writes (broadcast shapes, matmul and convolution
/// sizes, gathers and slices within bounds, ...); the loss is a scalar f32
/// and every output is computed; shardings name axes of the mesh, and
/// collectives' result shapes follow from their groups' sizes. Throws a one-line bmrt::Error
/// "SOURCE: instruction N ('OP' # COMMENT): WHAT" otherwise.
void verifyProgram(const Program &flat, const std::string &source);

/// Checks that pipeline stage `to` follows stage `from`: as many
/// activation slots in `to` as `from` has `send` lines, and as many
/// `send_grad` lines in `to` as activation_grad slots in `from`, each pair
/// (by position) of one dtype and shape. Throws a one-line bmrt::Error
/// naming both sources otherwise.
void checkStageBoundary(const Program &from, const std::string &fromSource,
                        const Program &to, const std::string &toSource);

/// The text form above. Printing then parsing gives the same program.
std::string printProgram(const Program &program);
/// Parses and checks a program: every slot defined once, operands defined
/// before use, shapes of constants consistent. Throws bmrt::Error naming
/// `source` and the line on anything malformed.
Program parseProgram(const std::string &text, const std::string &source);
/// Reads and parses a program file.
Program loadProgram(const std::string &path);

} // namespace bmrt

#endif // BMRT_PROGRAM_H
