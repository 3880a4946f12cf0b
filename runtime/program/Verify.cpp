//===- Verify.cpp - refusing programs a kernel could not run safely -------===//
//
// The kernels trust shapes: each indexes its operands by the shapes of the
// views it is handed and writes every element of its results, so a step
// program whose shapes disagree (hand-edited, corrupt, or a fuzzer's) would
// read or write out of bounds. verifyProgram checks every instruction
// against what its kernel assumes before any memory is placed: operand and
// result counts, element types, the attributes its launcher reads (present,
// of the right kind, in range) and the exact shapes the kernel will write.
//
// One small checker per op family and one alphabetical table op -> checker,
// like KernelTable.cpp; a checker reads what that file's launcher reads.
// Every failure is one line naming the instruction:
//
//   step.bmp: instruction 12 ('matmul' # h.0.attn.qkv): operand 1 is
//   f32[64,192], its rows must be 65 (the columns of operand 0)
//
//===----------------------------------------------------------------------===//

#include "bmrt/Einsum.h"
#include "bmrt/Error.h"
#include "bmrt/OpSpec.h"
#include "bmrt/Program.h"
#include "bmrt/ScatterReduction.h"
#include "bmrt/Sharding.h"

#include <algorithm>
#include <iterator>
#include <optional>

namespace bmrt {
namespace {

using Ints = std::vector<int64_t>;

//===----------------------------------------------------------------------===//
// Shapes and element types
//===----------------------------------------------------------------------===//

/// "f32[2,3]".
std::string typeText(const Slot &slot) {
  return nameOf(slot.dtype) + formatShape(slot.shape);
}

/// Numpy broadcasting of `shapes` (aligned on the right, dims of size 1
/// stretched) into `out`; false where two dims differ and neither is 1.
bool broadcastShape(const std::vector<const Shape *> &shapes, Shape &out) {
  out.clear();
  for (const Shape *shape : shapes) {
    if (shape->size() > out.size())
      out.insert(out.begin(), shape->size() - out.size(), 1);
    size_t offset = out.size() - shape->size();
    for (size_t d = 0; d < shape->size(); ++d) {
      int64_t &dim = out[offset + d], other = (*shape)[d];
      if (dim == other || other == 1)
        continue;
      if (dim != 1)
        return false;
      dim = other;
    }
  }
  return true;
}

/// Whether `shape` broadcasts to `target` without changing it (a norm's
/// scale onto the normalised block, gemm's bias onto its result).
bool broadcastsTo(const Shape &shape, const Shape &target) {
  Shape out;
  return broadcastShape({&target, &shape}, out) && out == target;
}

/// A set of element types, one bit each.
using DTypes = unsigned;
constexpr DTypes bit(DType type) { return 1u << static_cast<unsigned>(type); }
constexpr DTypes kF32 = bit(DType::F32);
constexpr DTypes kBool = bit(DType::Bool);
constexpr DTypes kIndex = bit(DType::I64) | bit(DType::I32);
constexpr DTypes kNumeric = kF32 | kIndex;
constexpr DTypes kAny = kNumeric | kBool;

/// "f32, i64 or i32".
std::string typesText(DTypes types) {
  std::vector<std::string> names;
  for (DType t : {DType::F32, DType::I64, DType::I32, DType::Bool})
    if (types & bit(t))
      names.push_back(nameOf(t));
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

/// The shape of a window op along one dim (convolution, pooling): ONNX's
/// floor((in + pads - dilation * (kernel - 1) - 1) / stride) + 1, or nullopt
/// where the window is larger than the padded input. Attribute values are
/// arbitrary integers from the file, so the arithmetic checks for overflow.
std::optional<int64_t> windowCount(int64_t in, int64_t kernel, int64_t stride,
                                   int64_t padBegin, int64_t padEnd,
                                   int64_t dilation) {
  int64_t window, padded;
  if (__builtin_mul_overflow(dilation, kernel - 1, &window) ||
      __builtin_add_overflow(window, 1, &window) ||
      __builtin_add_overflow(in, padBegin, &padded) ||
      __builtin_add_overflow(padded, padEnd, &padded) || padded < window)
    return std::nullopt;
  return (padded - window) / stride + 1;
}

//===----------------------------------------------------------------------===//
// The instruction being checked
//===----------------------------------------------------------------------===//

/// No upper bound on a count of operands or results (concat, split).
constexpr size_t kAnyNumber = static_cast<size_t>(-1);

/// One operand or result of the instruction, named for messages.
struct Arg {
  const Slot *slot;
  std::string role; // "operand 1", "result 0"

  DType dtype() const { return slot->dtype; }
  const Shape &shape() const { return slot->shape; }
  int64_t rank() const { return static_cast<int64_t>(slot->shape.size()); }
  int64_t dim(int64_t d) const { return slot->shape[d]; }
  /// "operand 1 is f32[64,192]", to start a message.
  std::string is() const { return role + " is " + typeText(*slot); }
  /// "operand 1 (f32[64,192])", inside one.
  std::string named() const { return role + " (" + typeText(*slot) + ")"; }
};

/// Accessors that refuse what the kernel could not run, each failure one
/// line: "SOURCE: instruction N ('OP' # COMMENT): WHAT".
class Check {
public:
  Check(const Program &program, const Instr &instr, size_t index,
        const std::string &source)
      : program(program), instr(instr), index(index), source(source) {}

  [[noreturn]] void fail(const std::string &what) const {
    std::string where = source + ": instruction " + std::to_string(index) +
                        " ('" + instr.op + "'";
    if (!instr.comment.empty())
      where += " # " + instr.comment;
    BMRT_FAIL(where + "): " + what);
  }

  const std::string &op() const { return instr.op; }
  const Program &prog() const { return program; }
  size_t numOperands() const { return instr.operands.size(); }
  size_t numResults() const { return instr.results.size(); }

  /// Exactly `operands` operands and `results` results.
  void counts(size_t operands, size_t results) const {
    operandCount(operands, operands);
    resultCount(results, results);
  }
  void operandCount(size_t least, size_t most) const {
    countIn("operand", numOperands(), least, most);
  }
  void resultCount(size_t least, size_t most) const {
    countIn("result", numResults(), least, most);
  }

  /// Operand i, which must be present (only a launcher that reads it
  /// through optionalOperand may see it absent).
  Arg operand(size_t i) const {
    if (i >= numOperands() || instr.operands[i] < 0)
      fail("operand " + std::to_string(i) + " is absent; the kernel needs it");
    return {&program.slots[instr.operands[i]], "operand " + std::to_string(i)};
  }
  std::optional<Arg> optionalOperand(size_t i) const {
    if (i >= numOperands() || instr.operands[i] < 0)
      return std::nullopt;
    return operand(i);
  }
  Arg result(size_t i) const {
    return {&program.slots[instr.results[i]], "result " + std::to_string(i)};
  }

  // Attributes: those a launcher reads with Instr::getInt(name) and the
  // like must exist with the right kind; those read with a default must
  // have the right kind where present.
  int64_t intAttr(const char *name) const {
    return attr(name, Attr::Kind::Int).i;
  }
  int64_t intAttr(const char *name, int64_t otherwise) const {
    return instr.attrs.count(name) ? intAttr(name) : otherwise;
  }
  /// As Instr::getFloat: an integral float may have been printed as an
  /// integer.
  double floatAttr(const char *name) const {
    auto it = instr.attrs.find(name);
    if (it != instr.attrs.end() && it->second.kind == Attr::Kind::Int)
      return static_cast<double>(it->second.i);
    return attr(name, Attr::Kind::Float).f;
  }
  const Ints &intsAttr(const char *name) const {
    return attr(name, Attr::Kind::Ints).ints;
  }
  const std::string &stringAttr(const char *name) const {
    return attr(name, Attr::Kind::String).s;
  }
  std::string stringAttr(const char *name, const std::string &otherwise) const {
    return instr.attrs.count(name) ? stringAttr(name) : otherwise;
  }
  /// The integer attribute `name`, an axis of `of`.
  int64_t axisAttr(const char *name, const Arg &of) const {
    int64_t axis = intAttr(name);
    if (axis < 0 || axis >= of.rank())
      fail("attribute '" + std::string(name) + "' is " + std::to_string(axis) +
           ", not an axis of " + of.named());
    return axis;
  }

  // Element types and shapes.
  void dtypeIn(const Arg &a, DTypes types) const {
    if (!(types & bit(a.dtype())))
      fail(a.is() + "; '" + op() + "' takes " + typesText(types) + " there");
  }
  void dtypeIs(const Arg &a, DType type) const { dtypeIn(a, bit(type)); }
  void sameDType(const Arg &a, const Arg &like) const {
    if (a.dtype() != like.dtype())
      fail(a.is() + ", its element type must be " + nameOf(like.dtype()) +
           " (that of " + like.role + ")");
  }
  void shapeIs(const Arg &a, const Shape &shape, const std::string &why) const {
    if (a.shape() != shape)
      fail(a.is() + ", its shape must be " + formatShape(shape) + " (" + why +
           ")");
  }
  /// The same element type and shape as `like`.
  void sameType(const Arg &a, const Arg &like) const {
    sameDType(a, like);
    shapeIs(a, like.shape(), "that of " + like.role);
  }
  void rankAtLeast(const Arg &a, int64_t rank) const {
    if (a.rank() < rank)
      fail(a.is() + "; '" + op() + "' needs rank " + std::to_string(rank) +
           " or more there");
  }
  void rankIs(const Arg &a, int64_t rank) const {
    if (a.rank() != rank)
      fail(a.is() + "; '" + op() + "' needs rank " + std::to_string(rank) +
           " there");
  }
  /// The numpy broadcast of `args`' shapes.
  Shape broadcast(const std::vector<Arg> &args) const {
    std::vector<const Shape *> shapes;
    std::string names;
    for (const Arg &a : args) {
      shapes.push_back(&a.shape());
      names += (names.empty() ? "" : ", ") + a.is();
    }
    Shape out;
    if (!broadcastShape(shapes, out))
      fail(names + ": they do not broadcast");
    return out;
  }

private:
  void countIn(const char *what, size_t count, size_t least,
               size_t most) const {
    if (count >= least && count <= most)
      return;
    std::string want = std::to_string(least);
    if (most == kAnyNumber)
      want += " or more";
    else if (most != least)
      want += (most == least + 1 ? " or " : " to ") + std::to_string(most);
    fail("has " + std::to_string(count) + " " + what + (count == 1 ? "" : "s") +
         "; it takes " + want);
  }

  const Attr &attr(const char *name, Attr::Kind kind) const {
    auto it = instr.attrs.find(name);
    if (it == instr.attrs.end())
      fail("attribute '" + std::string(name) + "' is missing");
    if (it->second.kind != kind)
      fail("attribute '" + std::string(name) + "' is " +
           kindText(it->second.kind) + "; it must be " + kindText(kind));
    return it->second;
  }

  static const char *kindText(Attr::Kind kind) {
    switch (kind) {
    case Attr::Kind::Int:
      return "an integer";
    case Attr::Kind::Float:
      return "a number";
    case Attr::Kind::Ints:
      return "a list of integers";
    case Attr::Kind::String:
      return "a string";
    }
    return "?";
  }

  const Program &program;
  const Instr &instr;
  size_t index;
  const std::string &source;
};

/// "[1,2,3]".
std::string listText(const Ints &values) { return formatShape(values); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// y = op(x) element by element: one shape and dtype.
template <DTypes Types> void checkUnary(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.dtypeIn(x, Types);
  c.sameType(y, x);
}

void checkGelu(Check &c) {
  c.intAttr("tanh_approximation", 0);
  checkUnary<kF32>(c);
}

/// dx = dy * op'(x), for the ops KernelTable.cpp's unaryOpNamed knows.
void checkUnaryGrad(Check &c) {
  static const char *const kDifferentiable[] = {
      "abs",        "cos",  "erf",     "exp", "gelu", "log", "neg",
      "reciprocal", "relu", "sigmoid", "sin", "sqrt", "tanh"};
  c.counts(2, 1);
  const std::string &name = c.stringAttr("op");
  if (std::find(std::begin(kDifferentiable), std::end(kDifferentiable), name) ==
      std::end(kDifferentiable))
    c.fail("attribute 'op' is '" + name + "', which has no derivative kernel");
  c.intAttr("tanh_approximation", 0);
  Arg x = c.operand(0), dy = c.operand(1), dx = c.result(0);
  c.dtypeIn(x, kF32);
  c.sameType(dy, x);
  c.sameType(dx, x);
}

/// out = a op b: a and b share a dtype, out has their broadcast shape (the
/// kernel walks out's shape and reads the operands aligned on the right).
/// Comparisons (and logic) write Bool.
template <DTypes Types, bool WritesBool> void checkBinary(Check &c) {
  c.counts(2, 1);
  Arg a = c.operand(0), b = c.operand(1), out = c.result(0);
  c.dtypeIn(a, Types);
  c.sameDType(b, a);
  if (WritesBool)
    c.dtypeIs(out, DType::Bool);
  else
    c.sameDType(out, a);
  c.shapeIs(out, c.broadcast({a, b}), "the broadcast of the operands");
}

void checkWhere(Check &c) {
  c.counts(3, 1);
  Arg condition = c.operand(0), a = c.operand(1), b = c.operand(2);
  Arg out = c.result(0);
  c.dtypeIs(condition, DType::Bool);
  c.sameDType(b, a);
  c.sameDType(out, a);
  c.shapeIs(out, c.broadcast({condition, a, b}),
            "the broadcast of the operands");
}

void checkCast(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.shapeIs(y, x.shape(), "that of operand 0");
}

/// reshape, squeeze, unsqueeze, flatten and copy move x's bytes as they
/// are: the same element type and count under any shape.
void checkCopy(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.sameDType(y, x);
  if (numElements(y.shape()) != numElements(x.shape()))
    c.fail(y.is() + ", it must hold the " +
           std::to_string(numElements(x.shape())) + " elements of " +
           x.named());
}

void checkExpand(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.sameDType(y, x);
  if (!broadcastsTo(x.shape(), y.shape()))
    c.fail(x.is() + ", which does not broadcast to " + y.named());
}

void checkFill(Check &c) {
  c.counts(0, 1);
  c.floatAttr("value");
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

/// numpy matmul, read as the kernel reads it: a rank-1 a is a row [1, K]
/// and a rank-1 b a column [K, 1], neither transposed; trans_a / trans_b
/// read a as [..., K, M] and b as [..., N, K]; batch dims broadcast.
void checkMatmul(Check &c) {
  c.counts(2, 1);
  Arg a = c.operand(0), b = c.operand(1), out = c.result(0);
  bool transA = c.intAttr("trans_a", 0), transB = c.intAttr("trans_b", 0);
  for (const Arg &arg : {a, b, out})
    c.dtypeIs(arg, DType::F32);
  c.rankAtLeast(a, 1);
  c.rankAtLeast(b, 1);
  int64_t m = 1, k, n = 1, kOfB;
  std::string kIsA, kIsB;
  Shape aBatch, bBatch;
  if (a.rank() == 1) {
    k = a.dim(0);
    kIsA = "length";
  } else {
    int64_t rows = a.dim(a.rank() - 2), cols = a.dim(a.rank() - 1);
    m = transA ? cols : rows;
    k = transA ? rows : cols;
    kIsA = transA ? "rows" : "columns";
    aBatch.assign(a.shape().begin(), a.shape().end() - 2);
  }
  if (b.rank() == 1) {
    kOfB = b.dim(0);
    kIsB = "length";
  } else {
    int64_t rows = b.dim(b.rank() - 2), cols = b.dim(b.rank() - 1);
    kOfB = transB ? cols : rows;
    n = transB ? rows : cols;
    kIsB = transB ? "columns" : "rows";
    bBatch.assign(b.shape().begin(), b.shape().end() - 2);
  }
  if (kOfB != k)
    c.fail(b.is() + ", its " + kIsB + " must be " + std::to_string(k) +
           " (the " + kIsA + " of operand 0)");
  Shape shape;
  if (!broadcastShape({&aBatch, &bBatch}, shape))
    c.fail("the batch dims of " + a.named() + " and " + b.named() +
           " do not broadcast");
  if (a.rank() >= 2)
    shape.push_back(m);
  if (b.rank() >= 2)
    shape.push_back(n);
  c.shapeIs(out, shape, "the product of the operands");
}

/// ONNX Gemm on 2-D operands; the optional c broadcasts onto the result.
void checkGemm(Check &c) {
  c.operandCount(2, 3);
  c.resultCount(1, 1);
  c.floatAttr("alpha");
  c.floatAttr("beta");
  bool transA = c.intAttr("trans_a", 0), transB = c.intAttr("trans_b", 0);
  Arg a = c.operand(0), b = c.operand(1), out = c.result(0);
  for (const Arg &arg : {a, b, out})
    c.dtypeIs(arg, DType::F32);
  c.rankIs(a, 2);
  c.rankIs(b, 2);
  int64_t m = a.dim(transA ? 1 : 0), k = a.dim(transA ? 0 : 1);
  if (b.dim(transB ? 1 : 0) != k)
    c.fail(b.is() + ", its " + (transB ? "columns" : "rows") + " must be " +
           std::to_string(k) + " (the " + (transA ? "rows" : "columns") +
           " of operand 0)");
  c.shapeIs(out, {m, b.dim(transB ? 0 : 1)}, "the product of the operands");
  if (std::optional<Arg> bias = c.optionalOperand(2)) {
    c.dtypeIs(*bias, DType::F32);
    if (!broadcastsTo(bias->shape(), out.shape()))
      c.fail(bias->is() + ", which does not broadcast to " + out.named());
  }
}

/// Every letter names one extent: the kernel keeps one size per letter, so
/// operands that disagree on it would be walked past their ends.
void checkEinsum(Check &c) {
  c.operandCount(1, kAnyNumber);
  c.resultCount(1, 1);
  const std::string &text = c.stringAttr("equation");
  // The kernels' own split (bmrt/Einsum.h); the checks are the verifier's.
  einsum::Equation eq = einsum::splitEquation(text);
  std::string where = "equation '" + text + "'";
  if (eq.inputs.size() != c.numOperands())
    c.fail(where + " names " + std::to_string(eq.inputs.size()) +
           " inputs for " + std::to_string(c.numOperands()) + " operands");
  int64_t extent[128];
  std::string seenIn[128];
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    Arg x = c.operand(i);
    c.dtypeIs(x, DType::F32);
    const std::string &letters = eq.inputs[i];
    if (static_cast<int64_t>(letters.size()) != x.rank())
      c.fail(where + " gives input " + std::to_string(i) + " '" + letters +
             "' " + std::to_string(letters.size()) + " letters, but " + x.is());
    for (size_t d = 0; d < letters.size(); ++d) {
      char ch = letters[d];
      if (!einsum::isLetter(ch))
        c.fail(where + ": '" + std::string(1, ch) +
               "' is not a letter (no ellipsis support)");
      std::string &seen = seenIn[static_cast<unsigned char>(ch)];
      if (seen.empty()) {
        extent[static_cast<unsigned char>(ch)] = x.dim(d);
        seen = x.is();
      } else if (extent[static_cast<unsigned char>(ch)] != x.dim(d)) {
        c.fail(where + ": letter '" + std::string(1, ch) + "' is " +
               std::to_string(extent[static_cast<unsigned char>(ch)]) +
               " where " + seen + " but " + std::to_string(x.dim(d)) +
               " where " + x.is());
      }
    }
  }
  Shape shape;
  for (char ch : eq.output) {
    if (!einsum::isLetter(ch) || eq.output.find(ch) != eq.output.rfind(ch) ||
        seenIn[static_cast<unsigned char>(ch)].empty())
      c.fail(where + ": output letter '" + std::string(1, ch) +
             "' is not a letter of an input, or repeats");
    shape.push_back(extent[static_cast<unsigned char>(ch)]);
  }
  Arg out = c.result(0);
  c.dtypeIs(out, DType::F32);
  c.shapeIs(out, shape, "the output letters of " + where);
}

/// The largest window size, stride or pad: the parser's largest dim. The
/// kernels' index arithmetic (tap * dilation - pad, o * stride) then stays
/// far from overflowing.
constexpr int64_t kLargestWindow = int64_t(1) << 40;

/// Values of the list attribute `name` of a convolution or pool, each in
/// [least, kLargestWindow]: `perDim` per spatial dim (for pads the begin
/// pads, then the end pads), or ONNX's default where `byDefault` is given
/// and the list is empty (the kernels accept that).
Ints windowList(Check &c, const char *name, int64_t perDim, int64_t spatial,
                int64_t least, std::optional<int64_t> byDefault) {
  const Ints &values = c.intsAttr(name);
  if (values.empty() && byDefault)
    return Ints(perDim * spatial, *byDefault);
  if (static_cast<int64_t>(values.size()) != perDim * spatial)
    c.fail("attribute '" + std::string(name) + "' " + listText(values) +
           " must have " + std::to_string(perDim * spatial) + " entries for " +
           std::to_string(spatial) + " spatial dims");
  for (int64_t v : values)
    if (v < least || v > kLargestWindow)
      c.fail("attribute '" + std::string(name) + "' " + listText(values) +
             " must hold values from " + std::to_string(least) + " to 2^40");
  return values;
}

/// The spatial dims of `big` (NC[spatial], 1 to 3 of them) under the
/// window `kernel` must give those of `small`, by ONNX's formula.
void checkWindows(Check &c, const Arg &big, const Arg &small,
                  const Ints &kernel, const Ints &strides, const Ints &pads,
                  const Ints &dilations) {
  int64_t spatial = big.rank() - 2;
  for (int64_t i = 0; i < spatial; ++i) {
    std::optional<int64_t> count =
        windowCount(big.dim(2 + i), kernel[i], strides[i], pads[i],
                    pads[spatial + i], dilations[i]);
    if (!count)
      c.fail("the window of spatial dim " + std::to_string(i) + " (kernel " +
             std::to_string(kernel[i]) + ", dilation " +
             std::to_string(dilations[i]) + ") does not fit that dim of " +
             big.named() + " with pads " + std::to_string(pads[i]) + "+" +
             std::to_string(pads[spatial + i]));
    if (small.dim(2 + i) != *count)
      c.fail(small.is() + ", its spatial dim " + std::to_string(i) +
             " must be " + std::to_string(*count) + " (from " + big.role +
             ", kernel " + std::to_string(kernel[i]) + ", stride " +
             std::to_string(strides[i]) + ", pads " + std::to_string(pads[i]) +
             "+" + std::to_string(pads[spatial + i]) + ", dilation " +
             std::to_string(dilations[i]) + ")");
  }
}

/// A rank for convolution and pooling: N, C and 1 to 3 spatial dims.
void checkSpatialRank(Check &c, const Arg &x) {
  if (x.rank() < 3 || x.rank() > 5)
    c.fail(x.is() + "; '" + c.op() +
           "' takes N, C and 1 to 3 spatial dims there");
}

/// conv and its gradients share one geometry: x [N, C, in...], weight
/// [C_out, C / group, kernel...], y [N, C_out, out...].
void checkConvGeometry(Check &c, const Arg &x, const Arg &w, const Arg &y) {
  for (const Arg *arg : {&x, &w, &y})
    c.dtypeIs(*arg, DType::F32);
  checkSpatialRank(c, x);
  int64_t spatial = x.rank() - 2;
  if (w.rank() != x.rank() || y.rank() != x.rank())
    c.fail(w.named() + " and " + y.named() + " must have the rank of " +
           x.named());
  Ints strides = windowList(c, "strides", 1, spatial, 1, 1);
  Ints pads = windowList(c, "pads", 2, spatial, 0, 0);
  Ints dilations = windowList(c, "dilations", 1, spatial, 1, 1);
  int64_t group = c.intAttr("group", 1);
  if (group < 1 || x.dim(1) % group != 0 || w.dim(0) % group != 0)
    c.fail("group " + std::to_string(group) + " must divide the channels of " +
           x.named() + " and of " + w.named());
  if (w.dim(1) != x.dim(1) / group)
    c.fail(w.is() + ", its dim 1 must be " + std::to_string(x.dim(1) / group) +
           " (the channels of " + x.role + " / group " + std::to_string(group) +
           ")");
  if (y.dim(0) != x.dim(0) || y.dim(1) != w.dim(0))
    c.fail(y.is() + ", its first dims must be [" + std::to_string(x.dim(0)) +
           "," + std::to_string(w.dim(0)) + "] (the images of " + x.role +
           ", the output channels of " + w.role + ")");
  Ints kernel(w.shape().begin() + 2, w.shape().end());
  for (int64_t k : kernel)
    if (k < 1)
      c.fail(w.is() + ", its kernel dims must be at least 1");
  checkWindows(c, x, y, kernel, strides, pads, dilations);
}

void checkConv(Check &c) {
  c.operandCount(2, 3);
  c.resultCount(1, 1);
  Arg y = c.result(0);
  checkConvGeometry(c, c.operand(0), c.operand(1), y);
  if (std::optional<Arg> bias = c.optionalOperand(2)) {
    c.dtypeIs(*bias, DType::F32);
    c.shapeIs(*bias, {y.dim(1)}, "the output channels");
  }
}

/// Operands dy, w; result dx.
void checkConvGradInput(Check &c) {
  c.counts(2, 1);
  checkConvGeometry(c, c.result(0), c.operand(1), c.operand(0));
}

/// Operands dy, x; result dw.
void checkConvGradWeight(Check &c) {
  c.counts(2, 1);
  checkConvGeometry(c, c.operand(1), c.result(0), c.operand(0));
}

//===----------------------------------------------------------------------===//
// Softmax, normalisation, loss
//===----------------------------------------------------------------------===//

void checkSoftmax(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.dtypeIs(x, DType::F32);
  c.sameType(y, x);
  c.axisAttr("axis", x);
}

/// attention's q [..., s, d], kt [..., d, t] and v [..., t, e]: f32, one
/// rank >= 2, equal leading dims, matching inner dims. Returns the result's
/// shape [..., s, e].
Shape checkAttentionOperands(Check &c) {
  Arg q = c.operand(0), kt = c.operand(1), v = c.operand(2);
  for (const Arg &arg : {q, kt, v})
    c.dtypeIs(arg, DType::F32);
  c.rankAtLeast(q, 2);
  c.floatAttr("scale");
  c.intAttr("causal", 0);
  int64_t r = q.rank();
  Shape lead(q.shape().begin(), q.shape().end() - 2);
  Shape kShape = lead, vShape = lead;
  kShape.insert(kShape.end(),
                {q.dim(r - 1), kt.rank() == r ? kt.dim(r - 1) : 0});
  c.shapeIs(kt, kShape, "q's leading dims, then q's head dim by the keys");
  vShape.insert(vShape.end(),
                {kt.dim(r - 1), v.rank() == r ? v.dim(r - 1) : 0});
  c.shapeIs(v, vShape, "q's leading dims, then one row per key");
  Shape out = lead;
  out.insert(out.end(), {q.dim(r - 2), v.dim(r - 1)});
  return out;
}

/// The optional positions (operand `i`): i64 [s], under a causal mask.
void checkAttentionPositions(Check &c, size_t i) {
  std::optional<Arg> positions = c.optionalOperand(i);
  if (!positions)
    return;
  Arg q = c.operand(0);
  if (!c.intAttr("causal", 0))
    c.fail(positions->is() + ": positions need a causal mask");
  c.dtypeIs(*positions, DType::I64);
  c.shapeIs(*positions, Shape{q.dim(q.rank() - 2)}, "one position per query");
}

void checkAttention(Check &c) {
  c.operandCount(3, 4);
  c.resultCount(1, 1);
  checkAttentionPositions(c, 3);
  Shape out = checkAttentionOperands(c);
  c.dtypeIs(c.result(0), DType::F32);
  c.shapeIs(c.result(0), out, "q's rows by v's columns");
}

/// Operands q, kt, v, result, result_grad[, positions]; results dq, dkt,
/// dv.
void checkAttentionGrad(Check &c) {
  c.operandCount(5, 6);
  c.resultCount(3, 3);
  checkAttentionPositions(c, 5);
  Shape out = checkAttentionOperands(c);
  for (size_t i : {3, 4}) {
    c.dtypeIs(c.operand(i), DType::F32);
    c.shapeIs(c.operand(i), out, "the attention's result");
  }
  for (size_t i : {0, 1, 2})
    c.sameType(c.result(i), c.operand(i));
}

/// Operands y (the forward result) and dy; result dx.
void checkSoftmaxGrad(Check &c) {
  c.counts(2, 1);
  Arg y = c.operand(0), dy = c.operand(1), dx = c.result(0);
  c.dtypeIs(y, DType::F32);
  c.sameType(dy, y);
  c.sameType(dx, y);
  c.axisAttr("axis", y);
}

/// x's normalised block: its dims from `axis` on.
Shape normalisedBlock(Check &c, const Arg &x) {
  c.dtypeIs(x, DType::F32);
  int64_t axis = c.axisAttr("axis", x);
  c.floatAttr("epsilon");
  return Shape(x.shape().begin() + axis, x.shape().end());
}

/// A scale or bias broadcasts onto the normalised block, numpy-style.
void checkNormParam(Check &c, const Arg &param, const Arg &x,
                    const Shape &block) {
  c.dtypeIs(param, DType::F32);
  if (!broadcastsTo(param.shape(), block))
    c.fail(param.is() + ", which does not broadcast to " + formatShape(block) +
           " (the dims of " + x.role + " from 'axis')");
}

/// layer_norm x, scale[, bias] and rms_norm x, scale.
void checkNorm(Check &c) {
  c.operandCount(2, c.op() == "layer_norm" ? 3 : 2);
  c.resultCount(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  Shape block = normalisedBlock(c, x);
  checkNormParam(c, c.operand(1), x, block);
  if (std::optional<Arg> bias = c.optionalOperand(2))
    checkNormParam(c, *bias, x, block);
  c.sameType(y, x);
}

/// Operands x, scale, dy; results dx, dscale and (layer_norm_grad only)
/// dbias, each parameter gradient folded into its own shape.
void checkNormGrad(Check &c) {
  c.operandCount(3, 3);
  c.resultCount(2, c.op() == "layer_norm_grad" ? 3 : 2);
  Arg x = c.operand(0), scale = c.operand(1), dy = c.operand(2);
  Shape block = normalisedBlock(c, x);
  checkNormParam(c, scale, x, block);
  c.sameType(dy, x);
  c.sameType(c.result(0), x);
  c.sameType(c.result(1), scale);
  if (c.numResults() > 2)
    checkNormParam(c, c.result(2), x, block);
}

/// Per-channel parameters of batch norm: f32[C].
void checkChannels(Check &c, const Arg &param, const Arg &x) {
  c.dtypeIs(param, DType::F32);
  c.shapeIs(param, {x.dim(1)}, "the channels of " + x.role);
}

void checkBatchNorm(Check &c) {
  c.counts(5, 1);
  c.floatAttr("epsilon");
  Arg x = c.operand(0);
  c.dtypeIs(x, DType::F32);
  c.rankAtLeast(x, 2);
  for (size_t i = 1; i < 5; ++i)
    checkChannels(c, c.operand(i), x);
  c.sameType(c.result(0), x);
}

/// Operands x, scale, mean, variance, dy; results dx, dscale, dbias.
void checkBatchNormGrad(Check &c) {
  c.counts(5, 3);
  c.floatAttr("epsilon");
  Arg x = c.operand(0);
  c.dtypeIs(x, DType::F32);
  c.rankAtLeast(x, 2);
  for (size_t i = 1; i < 4; ++i)
    checkChannels(c, c.operand(i), x);
  c.sameType(c.operand(4), x);
  c.sameType(c.result(0), x);
  checkChannels(c, c.result(1), x);
  checkChannels(c, c.result(2), x);
}

/// logits f32[N, C] and labels i64[N].
void checkLogitsAndLabels(Check &c, const Arg &logits, const Arg &labels) {
  c.dtypeIs(logits, DType::F32);
  c.rankIs(logits, 2);
  c.dtypeIs(labels, DType::I64);
  c.shapeIs(labels, {logits.dim(0)}, "the rows of " + logits.role);
}

void checkScalarF32(Check &c, const Arg &a) {
  c.dtypeIs(a, DType::F32);
  c.shapeIs(a, {}, "a scalar");
}

void checkCrossEntropy(Check &c) {
  c.counts(2, 1);
  checkLogitsAndLabels(c, c.operand(0), c.operand(1));
  checkScalarF32(c, c.result(0));
}

/// Operands logits, labels, dloss; result dlogits.
void checkCrossEntropyGrad(Check &c) {
  c.counts(3, 1);
  Arg logits = c.operand(0);
  checkLogitsAndLabels(c, logits, c.operand(1));
  checkScalarF32(c, c.operand(2));
  c.sameType(c.result(0), logits);
}

/// Per-row statistics of the vocabulary-parallel loss: f32[3 x devices, N].
void checkStats(Check &c, const Arg &stats, int64_t devices, int64_t rows) {
  c.dtypeIs(stats, DType::F32);
  c.shapeIs(stats, {3 * devices, rows},
            std::to_string(3 * devices) + " statistics of " +
                std::to_string(rows) + " rows");
}

int64_t groupSizeAttr(Check &c); // with the collectives, below

/// Operands logits, labels; result this rank's statistics.
void checkCrossEntropyStats(Check &c) {
  c.counts(2, 1);
  groupSizeAttr(c);
  Arg logits = c.operand(0);
  checkLogitsAndLabels(c, logits, c.operand(1));
  checkStats(c, c.result(0), 1, logits.dim(0));
}

/// Operands every rank's statistics, labels; result the mean loss.
void checkCrossEntropyFromStats(Check &c) {
  c.counts(2, 1);
  Arg stats = c.operand(0), labels = c.operand(1);
  c.dtypeIs(labels, DType::I64);
  c.rankIs(labels, 1);
  c.rankIs(stats, 2);
  if (stats.dim(0) % 3 != 0 || stats.dim(0) == 0)
    c.fail("operand 0 has " + std::to_string(stats.dim(0)) +
           " statistics per row, not a positive multiple of 3");
  checkStats(c, stats, stats.dim(0) / 3, labels.dim(0));
  checkScalarF32(c, c.result(0));
}

/// Operands logits, labels, every rank's statistics, dloss; result dlogits.
void checkCrossEntropyGradFromStats(Check &c) {
  c.counts(4, 1);
  int64_t group = groupSizeAttr(c);
  Arg logits = c.operand(0);
  checkLogitsAndLabels(c, logits, c.operand(1));
  checkStats(c, c.operand(2), group, logits.dim(0));
  checkScalarF32(c, c.operand(3));
  c.sameType(c.result(0), logits);
}

//===----------------------------------------------------------------------===//
// Reductions, scans, selection
//===----------------------------------------------------------------------===//

/// The kernel looks axes up by binary search and drops them from x's
/// shape: distinct, increasing axes of x; y holds the elements left (x's
/// shape without the axes or with them as 1).
void checkReduce(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.dtypeIn(x, kNumeric);
  c.sameDType(y, x);
  const Ints &axes = c.intsAttr("axes");
  int64_t kept = 1, previous = -1;
  for (int64_t axis : axes) {
    if (axis <= previous || axis >= x.rank())
      c.fail("attribute 'axes' " + listText(axes) +
             " must be increasing axes of " + x.named());
    previous = axis;
  }
  for (int64_t d = 0; d < x.rank(); ++d)
    if (!std::binary_search(axes.begin(), axes.end(), d))
      kept *= x.dim(d);
  if (numElements(y.shape()) != kept)
    c.fail(y.is() + ", it must hold " + std::to_string(kept) + " elements (" +
           x.role + " without axes " + listText(axes) + ")");
}

/// The mean over x's spatial dims, kept as 1: y is [N, C, 1...].
void checkGlobalAvgPool(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.dtypeIs(x, DType::F32);
  c.rankAtLeast(x, 3);
  Shape shape(x.rank(), 1);
  shape[0] = x.dim(0);
  shape[1] = x.dim(1);
  c.sameDType(y, x);
  c.shapeIs(y, shape, "the images and channels of operand 0");
}

void checkCumsum(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.dtypeIn(x, kNumeric);
  c.sameType(y, x);
  c.axisAttr("axis", x);
  c.intAttr("exclusive", 0);
  c.intAttr("reverse", 0);
}

/// Results values (x's dtype) and indices (i64), x's shape with k at axis.
void checkTopK(Check &c) {
  c.counts(1, 2);
  Arg x = c.operand(0), values = c.result(0), indices = c.result(1);
  c.dtypeIn(x, kNumeric);
  int64_t axis = c.axisAttr("axis", x);
  int64_t k = c.intAttr("k");
  c.intAttr("largest", 1);
  if (k < 0 || k > x.dim(axis))
    c.fail("attribute 'k' is " + std::to_string(k) + "; it must be in [0, " +
           std::to_string(x.dim(axis)) + "], the size of dim " +
           std::to_string(axis) + " of " + x.named());
  Shape shape = x.shape();
  shape[axis] = k;
  c.sameDType(values, x);
  c.shapeIs(values, shape, "operand 0's with k at 'axis'");
  c.dtypeIs(indices, DType::I64);
  c.shapeIs(indices, shape, "operand 0's with k at 'axis'");
}

/// out is the indices' shape with a new dim of size depth at axis.
void checkOneHot(Check &c) {
  c.counts(1, 1);
  Arg indices = c.operand(0), out = c.result(0);
  int64_t depth = c.intAttr("depth"), axis = c.intAttr("axis");
  c.floatAttr("on_value");
  c.floatAttr("off_value");
  if (depth < 1)
    c.fail("attribute 'depth' is " + std::to_string(depth) +
           "; it must be at least 1");
  if (axis < 0 || axis > indices.rank())
    c.fail("attribute 'axis' is " + std::to_string(axis) +
           ", not a place for a new dim in " + indices.named());
  Shape shape = indices.shape();
  shape.insert(shape.begin() + axis, depth);
  c.shapeIs(out, shape, "operand 0's with 'depth' at 'axis'");
}

void checkIota(Check &c) {
  c.counts(0, 1);
  c.floatAttr("start");
  c.floatAttr("delta");
  Arg out = c.result(0);
  c.dtypeIn(out, kNumeric);
  c.rankIs(out, 1);
}

void checkTrilu(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  c.rankAtLeast(x, 2);
  c.sameType(y, x);
  c.intAttr("k", 0);
  c.intAttr("upper", 1);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

void checkTranspose(Check &c) {
  c.counts(1, 1);
  Arg x = c.operand(0), y = c.result(0);
  const Ints &perm = c.intsAttr("permutation");
  std::vector<bool> seen(x.rank(), false);
  bool valid = static_cast<int64_t>(perm.size()) == x.rank();
  Shape shape;
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    valid = perm[i] >= 0 && perm[i] < x.rank() && !seen[perm[i]];
    if (valid) {
      seen[perm[i]] = true;
      shape.push_back(x.dim(perm[i]));
    }
  }
  if (!valid)
    c.fail("attribute 'permutation' " + listText(perm) +
           " is not a permutation of the dims of " + x.named());
  c.sameDType(y, x);
  c.shapeIs(y, shape, "operand 0's dims permuted");
}

/// data's shape with the indices' dims in place of dim `axis`.
Shape gatheredShape(const Arg &data, const Arg &indices, int64_t axis) {
  Shape shape(data.shape().begin(), data.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), data.shape().begin() + axis + 1,
               data.shape().end());
  return shape;
}

/// Operands data, indices; result out.
void checkGather(Check &c) {
  c.counts(2, 1);
  Arg data = c.operand(0), indices = c.operand(1), out = c.result(0);
  int64_t axis = c.axisAttr("axis", data);
  c.dtypeIn(indices, kIndex);
  c.sameDType(out, data);
  c.shapeIs(out, gatheredShape(data, indices, axis),
            "operand 0's with operand 1's dims at 'axis'");
}

/// A gather from this rank's slice of a table split over `axes`.
void checkShardGather(Check &c) {
  groupSizeAttr(c);
  checkGather(c);
}

/// Operands dy, indices; result ddata, into whose dim `axis` dy is added.
void checkGatherGrad(Check &c) {
  c.counts(2, 1);
  Arg dy = c.operand(0), indices = c.operand(1), ddata = c.result(0);
  int64_t axis = c.axisAttr("axis", ddata);
  c.dtypeIn(indices, kIndex);
  c.dtypeIs(ddata, DType::F32);
  c.dtypeIs(dy, DType::F32);
  c.shapeIs(dy, gatheredShape(ddata, indices, axis),
            "result 0's with operand 1's dims at 'axis'");
}

/// gather_elements' and scatter_elements' indices: i64 or i32, data's rank,
/// every dim but `axis` at most data's (torch.gather's rule: the kernels
/// walk data at the indices' coordinates). Returns the axis.
int64_t checkElementIndices(Check &c, const Arg &data, const Arg &indices) {
  int64_t axis = c.axisAttr("axis", data);
  c.dtypeIn(indices, kIndex);
  if (indices.rank() != data.rank())
    c.fail(indices.is() + "; it must have the rank of " + data.named());
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      c.fail(indices.is() + ", its dim " + std::to_string(d) +
             " must be at most " + std::to_string(data.dim(d)) + " (that of " +
             data.role + ")");
  return axis;
}

/// Operands data, indices; result out, of the indices' shape.
void checkGatherElements(Check &c) {
  c.counts(2, 1);
  Arg data = c.operand(0), indices = c.operand(1), out = c.result(0);
  checkElementIndices(c, data, indices);
  c.sameDType(out, data);
  c.shapeIs(out, indices.shape(), "that of operand 1");
}

/// Operands data, indices, updates (of the indices' shape); result out, of
/// data's type. A combining reduction needs numbers (no bool arithmetic).
void checkScatterElements(Check &c) {
  c.counts(3, 1);
  Arg data = c.operand(0), indices = c.operand(1), updates = c.operand(2),
      out = c.result(0);
  checkElementIndices(c, data, indices);
  c.sameDType(updates, data);
  c.shapeIs(updates, indices.shape(), "that of operand 1");
  c.sameType(out, data);
  std::string name = c.stringAttr("reduction", kDefaultScatterReduction);
  ScatterReduction reduction;
  if (!parseScatterReduction(name, reduction))
    c.fail("attribute 'reduction' is '" + name +
           "'; it must be none, add, mul, max or min");
  if (reduction != ScatterReduction::None && !(kNumeric & bit(data.dtype())))
    c.fail(data.is() + "; 'scatter_elements' with reduction '" + name +
           "' takes " + typesText(kNumeric) + " there");
}

/// `whole` is the parts joined along `axis`: the same dtype and rank, the
/// same dims elsewhere, and the parts' dims at `axis` add up to its.
void checkJoined(Check &c, const Arg &whole, const std::vector<Arg> &parts) {
  int64_t axis = c.axisAttr("axis", whole);
  int64_t total = 0;
  for (const Arg &part : parts) {
    c.sameDType(part, whole);
    if (part.rank() != whole.rank())
      c.fail(part.is() + "; it must have the rank of " + whole.named());
    Shape shape = whole.shape();
    shape[axis] = part.dim(axis);
    c.shapeIs(part, shape, "that of " + whole.role + " but at 'axis'");
    total += part.dim(axis);
  }
  if (total != whole.dim(axis))
    c.fail(whole.is() + ", its dim " + std::to_string(axis) + " must be " +
           std::to_string(total) + " (the sum of the parts')");
}

void checkConcat(Check &c) {
  c.operandCount(1, kAnyNumber);
  c.resultCount(1, 1);
  std::vector<Arg> parts;
  for (size_t i = 0; i < c.numOperands(); ++i)
    parts.push_back(c.operand(i));
  checkJoined(c, c.result(0), parts);
}

void checkSplit(Check &c) {
  c.operandCount(1, 1);
  c.resultCount(1, kAnyNumber);
  std::vector<Arg> parts;
  for (size_t i = 0; i < c.numResults(); ++i)
    parts.push_back(c.result(i));
  checkJoined(c, c.operand(0), parts);
}

/// The window big[starts + i * strides] for every index i of `small`: one
/// start and stride per dim, strides > 0, and every dim's last index
/// start + (count - 1) * stride inside `big`.
void checkWindow(Check &c, const Arg &big, const Arg &small) {
  const Ints &starts = c.intsAttr("starts"), &strides = c.intsAttr("strides");
  c.sameDType(small, big);
  if (small.rank() != big.rank())
    c.fail(small.is() + "; it must have the rank of " + big.named());
  if (static_cast<int64_t>(starts.size()) != big.rank() ||
      static_cast<int64_t>(strides.size()) != big.rank())
    c.fail("attributes 'starts' " + listText(starts) + " and 'strides' " +
           listText(strides) + " need one entry per dim of " + big.named());
  for (int64_t d = 0; d < big.rank(); ++d) {
    if (strides[d] < 1 || starts[d] < 0)
      c.fail("dim " + std::to_string(d) + " has start " +
             std::to_string(starts[d]) + " and stride " +
             std::to_string(strides[d]) +
             "; starts must be >= 0 and strides >= 1");
    int64_t count = small.dim(d), last;
    if (count == 0)
      continue;
    if (__builtin_mul_overflow(count - 1, strides[d], &last) ||
        __builtin_add_overflow(last, starts[d], &last) || last >= big.dim(d))
      c.fail("the window of " + small.named() + " reaches past dim " +
             std::to_string(d) + " of " + big.named() + ": start " +
             std::to_string(starts[d]) + " + (" + std::to_string(count) +
             " - 1) x stride " + std::to_string(strides[d]));
  }
}

void checkSlice(Check &c) {
  c.counts(1, 1);
  checkWindow(c, c.operand(0), c.result(0));
}

/// Operand dy (the window), result dx.
void checkSliceGrad(Check &c) {
  c.counts(1, 1);
  checkWindow(c, c.result(0), c.operand(0));
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// The ranks in the group of attribute `axes` ("dp,tp"): axes of the
/// program's mesh, each named once.
int64_t groupSizeAttr(Check &c) {
  const std::string &axes = c.stringAttr("axes");
  if (c.prog().mesh.empty())
    c.fail("a collective needs the program's mesh line");
  std::vector<std::string> names = splitAxes(axes);
  int64_t size = 1;
  for (size_t i = 0; i < names.size(); ++i) {
    bool known = false;
    for (const MeshAxis &axis : c.prog().mesh)
      known |= axis.name == names[i];
    if (!known)
      c.fail("attribute 'axes' is \"" + axes + "\"; '" + names[i] +
             "' is no axis of the mesh");
    if (std::find(names.begin(), names.begin() + i, names[i]) !=
        names.begin() + i)
      c.fail("attribute 'axes' is \"" + axes + "\"; it names '" + names[i] +
             "' twice");
    size *= c.prog().meshAxisSize(names[i]);
  }
  return size;
}

/// `x` with dim `d` multiplied by `times` (or divided, where `times` < 0).
Shape scaledAt(Check &c, const Arg &x, int64_t d, int64_t times) {
  Shape shape = x.shape();
  if (times < 0 && shape[d] % -times != 0)
    c.fail(x.is() + "; its dim " + std::to_string(d) + " does not split into " +
           std::to_string(-times) + " chunks (the group's ranks)");
  shape[d] = times < 0 ? shape[d] / -times : shape[d] * times;
  return shape;
}

/// all_reduce: the sum over the group, of the operand's type.
void checkAllReduce(Check &c) {
  c.counts(1, 1);
  groupSizeAttr(c);
  Arg x = c.operand(0), y = c.result(0);
  c.dtypeIn(x, kNumeric);
  c.sameType(y, x);
}

/// all_gather (chunks joined along `dim`), reduce_scatter (summed, this
/// rank's chunk of `dim` kept) and shard_slice (this rank's chunk).
template <int64_t Direction, DTypes Types> void checkAlongDim(Check &c) {
  c.counts(1, 1);
  int64_t group = groupSizeAttr(c);
  Arg x = c.operand(0), y = c.result(0);
  c.dtypeIn(x, Types);
  c.sameDType(y, x);
  int64_t dim = c.axisAttr("dim", x);
  c.shapeIs(y, scaledAt(c, x, dim, Direction * group),
            "operand 0's with dim " + std::to_string(dim) +
                (Direction > 0 ? " times " : " divided by ") +
                std::to_string(group) + " ranks");
}

/// all_to_all: split along split_dim, each chunk to one rank, received
/// chunks joined along concat_dim.
void checkAllToAll(Check &c) {
  c.counts(1, 1);
  int64_t group = groupSizeAttr(c);
  Arg x = c.operand(0), y = c.result(0);
  c.sameDType(y, x);
  int64_t split = c.axisAttr("split_dim", x), concat = c.axisAttr("concat_dim", x);
  Shape shape = scaledAt(c, x, split, -group);
  shape[concat] *= group;
  c.shapeIs(y, shape, "operand 0's split along split_dim and joined along "
                      "concat_dim over " + std::to_string(group) + " ranks");
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// x [N, C, in...] pooled into y [N, C, out...]: kernel_shape has one size
/// per spatial dim (the kernel reads it unconditionally).
void checkPoolGeometry(Check &c, const Arg &x, const Arg &y) {
  c.dtypeIs(x, DType::F32);
  c.dtypeIs(y, DType::F32);
  checkSpatialRank(c, x);
  int64_t spatial = x.rank() - 2;
  if (y.rank() != x.rank() || y.dim(0) != x.dim(0) || y.dim(1) != x.dim(1))
    c.fail(y.is() + "; it must have the rank, images and channels of " +
           x.named());
  Ints kernel = windowList(c, "kernel_shape", 1, spatial, 1, std::nullopt);
  Ints strides = windowList(c, "strides", 1, spatial, 1, 1);
  Ints pads = windowList(c, "pads", 2, spatial, 0, 0);
  checkWindows(c, x, y, kernel, strides, pads, Ints(spatial, 1));
}

void checkPool(Check &c) {
  c.counts(1, 1);
  checkPoolGeometry(c, c.operand(0), c.result(0));
}

/// Operands x, dy; result dx.
void checkMaxPoolGrad(Check &c) {
  c.counts(2, 1);
  Arg x = c.operand(0);
  checkPoolGeometry(c, x, c.operand(1));
  c.sameType(c.result(0), x);
}

/// Operand dy; result dx.
void checkAvgPoolGrad(Check &c) {
  c.counts(1, 1);
  checkPoolGeometry(c, c.result(0), c.operand(0));
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

using Checker = void (*)(Check &c);

struct Entry {
  const char *op;
  Checker check;
};

constexpr DTypes kSigned = kNumeric; // abs, neg and relu: also integers

// Alphabetical, one entry per op of KernelTable.cpp.
const Entry kCheckers[] = {
    {"abs", checkUnary<kSigned>},
    {"add", checkBinary<kNumeric, false>},
    {"all_gather", checkAlongDim<1, kAny>},
    {"all_reduce", checkAllReduce},
    {"all_to_all", checkAllToAll},
    {"and", checkBinary<kBool, true>},
    {"attention", checkAttention},
    {"attention_grad", checkAttentionGrad},
    {"avg_pool", checkPool},
    {"avg_pool_grad", checkAvgPoolGrad},
    {"batch_norm", checkBatchNorm},
    {"batch_norm_grad", checkBatchNormGrad},
    {"cast", checkCast},
    {"concat", checkConcat},
    {"conv", checkConv},
    {"conv_grad_input", checkConvGradInput},
    {"conv_grad_weight", checkConvGradWeight},
    {"copy", checkCopy},
    {"cos", checkUnary<kF32>},
    {"cross_entropy", checkCrossEntropy},
    {"cross_entropy_from_stats", checkCrossEntropyFromStats},
    {"cross_entropy_grad", checkCrossEntropyGrad},
    {"cross_entropy_grad_from_stats", checkCrossEntropyGradFromStats},
    {"cross_entropy_stats", checkCrossEntropyStats},
    {"cumsum", checkCumsum},
    {"div", checkBinary<kNumeric, false>},
    {"einsum", checkEinsum},
    {"equal", checkBinary<kAny, true>},
    {"erf", checkUnary<kF32>},
    {"exp", checkUnary<kF32>},
    {"expand", checkExpand},
    {"fill", checkFill},
    {"flatten", checkCopy},
    {"gather", checkGather},
    {"gather_elements", checkGatherElements},
    {"gather_grad", checkGatherGrad},
    {"gelu", checkGelu},
    {"gemm", checkGemm},
    {"global_avg_pool", checkGlobalAvgPool},
    {"greater", checkBinary<kAny, true>},
    {"iota", checkIota},
    {"layer_norm", checkNorm},
    {"layer_norm_grad", checkNormGrad},
    {"less", checkBinary<kAny, true>},
    {"log", checkUnary<kF32>},
    {"log_softmax", checkSoftmax},
    {"log_softmax_grad", checkSoftmaxGrad},
    {"matmul", checkMatmul},
    {"max", checkBinary<kNumeric, false>},
    {"max_pool", checkPool},
    {"max_pool_grad", checkMaxPoolGrad},
    {"min", checkBinary<kNumeric, false>},
    {"mul", checkBinary<kNumeric, false>},
    {"neg", checkUnary<kSigned>},
    {"not", checkUnary<kBool>},
    {"one_hot", checkOneHot},
    {"or", checkBinary<kBool, true>},
    {"pow", checkBinary<kNumeric, false>},
    {"reciprocal", checkUnary<kF32>},
    {"reduce_max", checkReduce},
    {"reduce_mean", checkReduce},
    {"reduce_scatter", checkAlongDim<-1, kNumeric>},
    {"reduce_sum", checkReduce},
    {"relu", checkUnary<kSigned>},
    {"reshape", checkCopy},
    {"rms_norm", checkNorm},
    {"rms_norm_grad", checkNormGrad},
    {"scatter_elements", checkScatterElements},
    {"shard_gather", checkShardGather},
    {"shard_slice", checkAlongDim<-1, kAny>},
    {"sigmoid", checkUnary<kF32>},
    {"sin", checkUnary<kF32>},
    {"slice", checkSlice},
    {"slice_grad", checkSliceGrad},
    {"softmax", checkSoftmax},
    {"softmax_grad", checkSoftmaxGrad},
    {"split", checkSplit},
    {"sqrt", checkUnary<kF32>},
    {"squeeze", checkCopy},
    {"sub", checkBinary<kNumeric, false>},
    {"tanh", checkUnary<kF32>},
    {"top_k", checkTopK},
    {"transpose", checkTranspose},
    {"trilu", checkTrilu},
    {"unary_grad", checkUnaryGrad},
    {"unsqueeze", checkCopy},
    {"where", checkWhere},
};

Checker findChecker(const std::string &op) {
  auto it = std::lower_bound(
      std::begin(kCheckers), std::end(kCheckers), op,
      [](const Entry &e, const std::string &name) { return e.op < name; });
  if (it == std::end(kCheckers) || it->op != op)
    return nullptr;
  return it->check;
}

/// Slot indices in range, absent operands only as -1, and every value or
/// gradient read after an earlier instruction computed it (else its view
/// would have no memory). `computed` tracks the slots holding data so far.
void checkSlots(const Check &c, const Program &program, const Instr &instr,
                std::vector<bool> &computed) {
  int count = static_cast<int>(program.slots.size());
  for (size_t i = 0; i < instr.operands.size(); ++i) {
    int slot = instr.operands[i];
    if (slot < -1 || slot >= count)
      c.fail("operand " + std::to_string(i) + " is %" + std::to_string(slot) +
             ", which is no slot");
    if (slot >= 0 && !computed[slot])
      c.fail("operand " + std::to_string(i) + " %" + std::to_string(slot) +
             " is read before any instruction computes it");
  }
  for (size_t i = 0; i < instr.results.size(); ++i) {
    int slot = instr.results[i];
    if (slot < 0 || slot >= count)
      c.fail("result " + std::to_string(i) + " is %" + std::to_string(slot) +
             ", which is no slot");
    SlotKind kind = program.slots[slot].kind;
    if (kind != SlotKind::Value && kind != SlotKind::Grad)
      c.fail("result " + std::to_string(i) + " %" + std::to_string(slot) +
             " is a " + nameOf(kind) +
             " slot; instructions compute values and gradients only");
    if (computed[slot])
      c.fail("result " + std::to_string(i) + " %" + std::to_string(slot) +
             " is computed twice");
    computed[slot] = true;
  }
}

/// Constants are copied in from their bytes when the program is placed
/// (parseProgram sizes them; a program built in memory may not).
void checkConstants(const Program &program, const std::string &source) {
  for (size_t i = 0; i < program.slots.size(); ++i) {
    const Slot &slot = program.slots[i];
    BMRT_CHECK(slot.kind != SlotKind::Const ||
                   static_cast<int64_t>(slot.data.size()) == slot.bytes(),
               source + ": constant %" + std::to_string(i) + " has " +
                   std::to_string(slot.data.size()) + " bytes; " +
                   typeText(slot) + " needs " + std::to_string(slot.bytes()));
  }
}

/// The loss is a scalar f32 the trainer reads after the step; outputs are
/// read likewise. Both must hold data by then.
void checkEnds(const Program &program, const std::vector<bool> &computed,
               const std::string &source) {
  int count = static_cast<int>(program.slots.size());
  auto checkSlot = [&](int slot, const std::string &what) {
    BMRT_CHECK(slot >= 0 && slot < count, source + ": " + what + " is no slot");
    BMRT_CHECK(computed[slot], source + ": " + what + " is never computed");
  };
  if (program.loss != -1) {
    std::string what = "the loss %" + std::to_string(program.loss);
    checkSlot(program.loss, what);
    const Slot &loss = program.slots[program.loss];
    BMRT_CHECK(loss.dtype == DType::F32 && loss.shape.empty(),
               source + ": " + what + " is " + typeText(loss) +
                   "; it must be a scalar f32");
  }
  for (int output : program.outputs)
    checkSlot(output, "output %" + std::to_string(output));
  for (int slot : program.sends)
    checkSlot(slot, "send %" + std::to_string(slot));
  for (int slot : program.sendGrads)
    checkSlot(slot, "send_grad %" + std::to_string(slot));
  BMRT_CHECK(program.backwardStart <= static_cast<int>(program.instrs.size()),
             source + ": the backward starts at instruction " +
                 std::to_string(program.backwardStart) + " of " +
                 std::to_string(program.instrs.size()));
  BMRT_CHECK(
      program.weightGradStart < 0 ||
          (program.weightGradStart >= program.backwardStart &&
           program.backwardStart >= 0 &&
           program.weightGradStart <= static_cast<int>(program.instrs.size())),
      source + ": the weight gradients start at instruction " +
          std::to_string(program.weightGradStart) + ", outside the backward");
}

/// A training step (one that computes gradients) gives every parameter it
/// does not mark frozen a gradient: one deleted or turned into a plain
/// value would otherwise freeze its parameter without a word.
void checkTrainedParameters(const Program &program,
                            const std::string &source) {
  if (program.slotsOf(SlotKind::Grad).empty())
    return; // a forward (with or without its loss): nothing is trained
  for (int param : program.slotsOf(SlotKind::Param))
    BMRT_CHECK(program.slots[param].frozen || program.gradientOf(param) >= 0,
               source + ": parameter %" + std::to_string(param) + " '" +
                   program.slots[param].name +
                   "' has no gradient and is not marked frozen: the "
                   "optimizer would never update it");
}

/// Every gradient reaches the optimizer: the trainer binds a gradient to
/// the parameter of its name, so each names one parameter of its type,
/// once, and is computed. (A parameter without one is frozen: batch norm's
/// running statistics.) A gradient renamed by hand or by a bug would
/// otherwise leave its parameter silently frozen.
void checkGradients(const Program &program, const std::vector<bool> &computed,
                    const std::string &source) {
  std::vector<int> params = program.slotsOf(SlotKind::Param);
  std::vector<std::string> seen;
  for (size_t i = 0; i < program.slots.size(); ++i) {
    const Slot &grad = program.slots[i];
    if (grad.kind != SlotKind::Grad)
      continue;
    std::string what = source + ": gradient %" + std::to_string(i) + " '" +
                       grad.name + "'";
    auto param = std::find_if(params.begin(), params.end(), [&](int p) {
      return program.slots[p].name == grad.name;
    });
    BMRT_CHECK(param != params.end(),
               what + " names no parameter: the optimizer would never read "
                      "it, and the parameter it belongs to would stay frozen");
    const Slot &value = program.slots[*param];
    BMRT_CHECK(value.dtype == grad.dtype && value.shape == grad.shape,
               what + " is " + typeText(grad) + "; its parameter is " +
                   typeText(value));
    BMRT_CHECK(std::find(seen.begin(), seen.end(), grad.name) == seen.end(),
               what + " is the second gradient of that parameter");
    seen.push_back(grad.name);
    BMRT_CHECK(computed[i], what + " is never computed");
    BMRT_CHECK(!value.frozen, what + " belongs to parameter '" + grad.name +
                                  "', which the program marks frozen");
  }
  checkTrainedParameters(program, source);
}

/// The mesh's axes are those bmrt::Mesh::fromPlan lays out.
void checkMesh(const Program &program, const std::string &source) {
  for (const MeshAxis &axis : program.mesh)
    BMRT_CHECK(std::find_if(std::begin(kMeshAxes), std::end(kMeshAxes),
                            [&](const char *k) { return axis.name == k; }) !=
                   std::end(kMeshAxes),
               source + ": the mesh names axis '" + axis.name +
                   "'; the runtime knows tp, tp2, cp, ep, dp and pp");
}

/// A slot's sharding and partial sums name axes of the mesh, each once;
/// only gradients are partial sums; a gradient is sharded as its parameter
/// (the optimizer updates one with the other).
void checkSlotSharding(const Program &program, size_t index,
                       const std::string &source) {
  const Slot &slot = program.slots[index];
  std::string what = source + ": slot %" + std::to_string(index) +
                     (slot.name.empty() ? "" : " '" + slot.name + "'");
  if (slot.sharding.empty() && slot.partial.empty())
    return;
  BMRT_CHECK(!program.mesh.empty(),
             what + " is sharded but the program has no mesh line");
  BMRT_CHECK(slot.sharding.empty() || slot.sharding.size() == slot.shape.size(),
             what + " has a sharding of " +
                 std::to_string(slot.sharding.size()) + " dims for " +
                 formatShape(slot.shape));
  BMRT_CHECK(slot.partial.empty() || slot.kind == SlotKind::Grad,
             what + " is a " + nameOf(slot.kind) +
                 "; only gradients (and the loss) are partial sums");
  std::vector<std::string> seen;
  auto add = [&](const std::string &axis) {
    bool known = false;
    for (const MeshAxis &a : program.mesh)
      known |= a.name == axis;
    BMRT_CHECK(known, what + " names '" + axis + "', no axis of the mesh");
    BMRT_CHECK(std::find(seen.begin(), seen.end(), axis) == seen.end(),
               what + " names axis '" + axis + "' twice");
    seen.push_back(axis);
  };
  for (const auto &dim : slot.sharding)
    for (const std::string &axis : dim)
      add(axis);
  for (const std::string &axis : slot.partial)
    add(axis);
}

/// A parameter stored in a factored view (`model=`) holds its model
/// shape's elements in the same order.
void checkModelShape(const Program &program, size_t index,
                     const std::string &source) {
  const Slot &slot = program.slots[index];
  if (slot.model.empty())
    return;
  Shape global = program.mesh.empty()
                     ? slot.shape
                     : globalShape(slot.shape, slot.sharding, meshOf(program));
  BMRT_CHECK(sameElementOrder(global, slot.model),
             source + ": slot %" + std::to_string(index) + " '" + slot.name +
                 "' is stored as " + formatShape(global) +
                 ", which is no view of its model shape " +
                 formatShape(slot.model));
}

void checkShardings(const Program &program, const std::string &source) {
  checkMesh(program, source);
  for (size_t i = 0; i < program.slots.size(); ++i) {
    checkSlotSharding(program, i, source);
    checkModelShape(program, i, source);
    const Slot &grad = program.slots[i];
    if (grad.kind != SlotKind::Grad)
      continue;
    for (int param : program.slotsOf(SlotKind::Param))
      BMRT_CHECK(program.slots[param].name != grad.name ||
                     program.slots[param].sharding == grad.sharding,
                 source + ": the gradient of '" + grad.name +
                     "' is sharded unlike the parameter");
  }
  for (const std::string &axis : program.lossPartial)
    BMRT_CHECK(std::any_of(program.mesh.begin(), program.mesh.end(),
                           [&](const MeshAxis &a) { return a.name == axis; }),
               source + ": the loss is a partial sum over '" + axis +
                   "', no axis of the mesh");
}

/// What the op spec (generated from the dialect's ODS) says of every
/// instance of an op: operand and result counts in its bounds and no
/// attribute it does not declare (a misspelt one would be ignored by the
/// kernel). Whether the attributes a kernel reads are there is the op's
/// own checker's business: it runs first, and its messages say more.
void checkAgainstSpec(const Check &c, const Instr &instr, const OpSpec &spec) {
  auto counted = [&](const char *what, size_t n,
                     const std::vector<OpPart> &parts) {
    const int fewest = OpSpec::fewest(parts), most = OpSpec::most(parts);
    if (static_cast<int>(n) < fewest ||
        (most >= 0 && static_cast<int>(n) > most))
      c.fail("has " + std::to_string(n) + " " + what + "; '" + spec.name +
             "' takes " + std::to_string(fewest) +
             (most < 0         ? " or more"
              : most == fewest ? ""
                               : " to " + std::to_string(most)));
  };
  counted("operands", c.numOperands(), spec.operands);
  counted("results", c.numResults(), spec.results);
  for (const auto &[name, attr] : instr.attrs)
    if (!spec.attribute(name))
      c.fail("has attribute '" + name + "', which '" + spec.name +
             "' does not take");
}

} // namespace

void verifyProgram(const Program &flat, const std::string &source) {
  checkConstants(flat, source);
  checkShardings(flat, source);
  std::vector<bool> computed(flat.slots.size());
  for (size_t i = 0; i < flat.slots.size(); ++i)
    computed[i] = flat.slots[i].kind != SlotKind::Value &&
                  flat.slots[i].kind != SlotKind::Grad;
  for (size_t t = 0; t < flat.instrs.size(); ++t) {
    const Instr &instr = flat.instrs[t];
    Check c(flat, instr, t, source);
    Checker check = findChecker(instr.op);
    if (!check)
      c.fail("this runtime has no kernel '" + instr.op + "'");
    checkSlots(c, flat, instr, computed);
    check(c);
    if (const OpSpec *spec = findOpSpec(instr.op))
      checkAgainstSpec(c, instr, *spec);
  }
  checkEnds(flat, computed, source);
  checkGradients(flat, computed, source);
}

} // namespace bmrt

namespace bmrt {

namespace {

/// The values one side of a boundary sends, as `send %N` (or `send_grad
/// %N`) lines name them, against the slots the other side receives them
/// in, by position.
void checkTransfer(const Program &sender, const std::vector<int> &sent,
                   const std::string &sendKeyword, const std::string &senderSource,
                   const Program &receiver, SlotKind kind,
                   const std::string &receiverSource) {
  std::vector<int> slots = receiver.slotsOf(kind);
  const std::string slotKind = nameOf(kind);
  BMRT_CHECK(sent.size() == slots.size(),
             senderSource + " has " + std::to_string(sent.size()) + " '" +
                 sendKeyword + "' lines but " + receiverSource + " has " +
                 std::to_string(slots.size()) + " " + slotKind +
                 " slots; stage boundaries match them by position");
  for (size_t i = 0; i < sent.size(); ++i) {
    const Slot &out = sender.slots.at(sent[i]);
    const Slot &in = receiver.slots.at(slots[i]);
    BMRT_CHECK(out.dtype == in.dtype && out.shape == in.shape,
               senderSource + ": " + sendKeyword + " %" +
                   std::to_string(sent[i]) + " (number " +
                   std::to_string(i + 1) + ") is " + typeText(out) +
                   " but " + receiverSource + " receives it in " + slotKind +
                   " %" + std::to_string(slots[i]) + ", " + typeText(in));
  }
}

} // namespace

void checkStageBoundary(const Program &from, const std::string &fromSource,
                        const Program &to, const std::string &toSource) {
  checkTransfer(from, from.sends, "send", fromSource, to,
                SlotKind::Activation, toSource);
  checkTransfer(to, to.sendGrads, "send_grad", toSource, from,
                SlotKind::ActivationGrad, fromSource);
}

} // namespace bmrt
