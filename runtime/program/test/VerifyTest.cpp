//===- VerifyTest.cpp - programs a kernel could not run are refused -------===//

#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/OpSpec.h"
#include "bmrt/Program.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace {

using namespace bmrt;

/// A small image classifier (conv, pool, matmul, cross-entropy) and a
/// token branch through most data-movement ops; every shape consistent.
const char *kProgram = R"(bmc-step-program 1
model "verify"
slot %0 input f32[2,3,8,8] "image"
slot %1 param f32[4,3,3,3] "conv.weight"
slot %2 param f32[4] "conv.bias"
slot %3 label i64[2] "labels"
slot %4 param f32[36,10] "head.weight"
slot %5 input i64[2,5] "tokens"
slot %6 param f32[16,8] "embedding"
slot %7 param f32[8] "ln.weight"
slot %8 param f32[8,6] "proj"
slot %9 value f32[2,4,6,6]
slot %10 value f32[2,4,3,3]
slot %11 value f32[2,36]
slot %12 value f32[2,10]
slot %13 value f32[]
slot %14 value f32[2,5,8]
slot %15 value f32[2,8,5]
slot %16 value f32[2,4,2]
slot %17 value f32[2,8]
slot %18 value f32[2,5,6]
slot %19 value f32[2,5,14]
slot %20 value f32[2,5,8]
slot %21 value f32[2,5,6]
slot %22 value f32[2,5,8]
slot %23 value f32[2,5,8]
slot %24 value f32[2,5,3]
slot %25 value i64[2,5,3]
slot %26 value f32[2,5,16]
slot %27 value f32[5]
slot %28 value f32[2,5,8]
slot %29 value f32[2,10]
slot %30 value f32[2,5,8]
slot %31 value f32[2,5,3]
slot %32 value f32[2,5,8]
slot %33 value f32[2,5,8]
slot %34 value f32[2,5,8]
slot %35 value f32[2,8,5]
slot %36 value f32[2,5,8]
slot %37 const i64[5] = 0 1 2 3 4

%9 = conv %0, %1, %2 {dilations=[1,1], group=1, pads=[0,0,0,0], strides=[1,1]}  # conv
%10 = max_pool %9 {kernel_shape=[2,2], pads=[0,0,0,0], strides=[2,2]}  # pool
%11 = reshape %10  # flatten
%12 = matmul %11, %4  # head
%13 = cross_entropy %12, %3  # loss
%14 = gather %6, %5 {axis=0}  # embed
%15 = transpose %14 {permutation=[0,2,1]}  # swap
%16 = slice %15 {starts=[0,0,1], strides=[1,2,2]}  # every other
%17 = reduce_sum %14 {axes=[1]}  # pool tokens
%18 = einsum %14, %8 {equation="bsd,de->bse"}  # project
%19 = concat %14, %18 {axis=2}  # join
%20, %21 = split %19 {axis=2}  # part
%22 = layer_norm %14, %7, %7 {axis=2, epsilon=1e-05}  # ln
%23 = add %22, %7  # bias
%24, %25 = top_k %23 {axis=2, k=3}  # best
%26 = one_hot %5 {axis=2, depth=16, off_value=0.0, on_value=1.0}  # onehot
%27 = iota {delta=1.0, start=0.0}  # positions
%28 = softmax %23 {axis=2}  # attention
%29 = gemm %11, %4 {alpha=1.0, beta=0.0}  # dense
%30 = exp %23  # exp
%31 = gather_elements %14, %25 {axis=2}  # pick
%32 = scatter_elements %14, %25, %24 {axis=2, reduction="add"}  # put
%33 = attention %14, %15, %14, %37 {causal=1, scale=0.35}  # attend
%34, %35, %36 = attention_grad %14, %15, %14, %33, %33 {scale=0.35}  # attend back

loss %13
)";

TEST(Verify, ConsistentProgramLoadsAndRuns) {
  Program program = parseProgram(kProgram, "verify.bmp");
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor executor(program, *device, "verify.bmp");
  for (int slot : {0, 1, 2, 4, 6, 7, 8}) {
    const TensorView &view = executor.view(slot);
    for (int64_t i = 0; i < view.size(); ++i)
      view.f32()[i] = 0.01f * static_cast<float>(i % 17);
  }
  int64_t labels[2] = {3, 7}, tokens[10] = {0, 1, 2, 3, 4, 15, 14, 13, 12, 11};
  std::memcpy(executor.view(3).data, labels, sizeof labels);
  std::memcpy(executor.view(5).data, tokens, sizeof tokens);
  executor.run();
  EXPECT_TRUE(std::isfinite(executor.view(13).f32()[0]));
}

/// Each corruption of kProgram still parses but is refused when loaded,
/// with one line naming the instruction ("verify.bmp: instruction N ('OP'
/// # COMMENT): ...") and the problem.
TEST(Verify, InconsistentProgramsAreOneLineErrors) {
  struct Case {
    std::string from, to;
    std::string op; // the instruction named, empty for the program's ends
    std::string message;
  };
  const Case cases[] = {
      // Contractions.
      {"slot %12 value f32[2,10]", "slot %12 value f32[2,11]", "matmul",
       "result 0 is f32[2,11], its shape must be [2,10]"},
      {"slot %4 param f32[36,10]", "slot %4 param f32[35,10]", "matmul",
       "operand 1 is f32[35,10], its rows must be 36 (the columns of operand "
       "0)"},
      {"%12 = matmul %11, %4", "%12 = matmul %11, _", "matmul",
       "operand 1 is absent"},
      {"%29 = gemm %11, %4 {", "%29 = gemm %11, %4, %27 {", "gemm",
       "operand 2 is f32[5], which does not broadcast to result 0"},
      {"{alpha=1.0, beta=0.0}", "{beta=0.0}", "gemm",
       "attribute 'alpha' is missing"},
      // An attribute the op spec (the dialect's ODS) does not declare: a
      // misspelling the kernel would ignore.
      {"{alpha=1.0, beta=0.0}", "{alpha=1.0, beta=0.0, trans_c=1}", "gemm",
       "has attribute 'trans_c', which 'gemm' does not take"},
      {"bsd,de->bse", "bsd,se->bse", "einsum",
       "letter 's' is 5 where operand 0 is f32[2,5,8] but 8 where operand 1"},
      {"bsd,de->bse", "bs,de->bse", "einsum",
       "gives input 0 'bs' 2 letters, but operand 0 is f32[2,5,8]"},
      {"bsd,de->bse", "bsd->bse", "einsum", "names 1 inputs for 2 operands"},
      // Convolution and pooling.
      {"slot %9 value f32[2,4,6,6]", "slot %9 value f32[2,4,7,6]", "conv",
       "result 0 is f32[2,4,7,6], its spatial dim 0 must be 6"},
      {"group=1", "group=2", "conv", "group 2 must divide"},
      {"pads=[0,0,0,0], strides=[1,1]}", "pads=[0,-1,0,0], strides=[1,1]}",
       "conv", "attribute 'pads' [0,-1,0,0] must hold values from 0 to 2^40"},
      {"strides=[1,1]}", "strides=[0,1]}", "conv",
       "attribute 'strides' [0,1] must hold values from 1 to 2^40"},
      {"slot %1 param f32[4,3,3,3]", "slot %1 param f32[4,2,3,3]", "conv",
       "operand 1 is f32[4,2,3,3], its dim 1 must be 3"},
      {"slot %2 param f32[4]", "slot %2 param f32[5]", "conv",
       "operand 2 is f32[5], its shape must be [4]"},
      {"slot %10 value f32[2,4,3,3]", "slot %10 value f32[2,4,4,3]", "max_pool",
       "result 0 is f32[2,4,4,3], its spatial dim 0 must be 3"},
      {"kernel_shape=[2,2]", "kernel_shape=[2]", "max_pool",
       "attribute 'kernel_shape' [2] must have 2 entries"},
      // Loss.
      {"slot %3 label i64[2]", "slot %3 label f32[2]", "cross_entropy",
       "operand 1 is f32[2]; 'cross_entropy' takes i64 there"},
      {"slot %3 label i64[2]", "slot %3 label i64[3]", "cross_entropy",
       "operand 1 is i64[3], its shape must be [2]"},
      {"%13 = cross_entropy %12, %3", "%13 = cross_entropy %12",
       "cross_entropy", "has 1 operand; it takes 2"},
      {"loss %13", "loss %12", "",
       "verify.bmp: the loss %12 is f32[2,10]; it must be a scalar f32"},
      // Data movement.
      {"slot %11 value f32[2,36]", "slot %11 value f32[2,35]", "reshape",
       "it must hold the 72 elements of operand 0 (f32[2,4,3,3])"},
      {"slot %14 value f32[2,5,8]", "slot %14 value f32[2,6,8]", "gather",
       "result 0 is f32[2,6,8], its shape must be [2,5,8]"},
      {"slot %5 input i64[2,5]", "slot %5 input f32[2,5]", "gather",
       "operand 1 is f32[2,5]; 'gather' takes i64 or i32 there"},
      {"{axis=0}  # embed", "{axis=2}  # embed", "gather",
       "attribute 'axis' is 2, not an axis of operand 0 (f32[16,8])"},
      {"{axis=0}  # embed", "  # embed", "gather",
       "attribute 'axis' is missing"},
      {"{axis=0}  # embed", "{axis=[0]}  # embed", "gather",
       "attribute 'axis' is a list of integers; it must be an integer"},
      {"slot %31 value f32[2,5,3]", "slot %31 value f32[2,5,4]",
       "gather_elements",
       "result 0 is f32[2,5,4], its shape must be [2,5,3] (that of operand "
       "1)"},
      {"%31 = gather_elements %14, %25", "%31 = gather_elements %14, %24",
       "gather_elements",
       "operand 1 is f32[2,5,3]; 'gather_elements' takes i64 or i32 there"},
      {"%31 = gather_elements %14, %25", "%31 = gather_elements %16, %25",
       "gather_elements",
       "operand 1 is i64[2,5,3], its dim 1 must be at most 4 (that of "
       "operand 0)"},
      {"%31 = gather_elements %14, %25 {axis=2}",
       "%31 = gather_elements %14, %5 {axis=1}", "gather_elements",
       "operand 1 is i64[2,5]; it must have the rank of operand 0 "
       "(f32[2,5,8])"},
      {"reduction=\"add\"", "reduction=\"sum\"", "scatter_elements",
       "attribute 'reduction' is 'sum'; it must be none, add, mul, max or "
       "min"},
      {"%32 = scatter_elements %14, %25, %24",
       "%32 = scatter_elements %14, %25, %16", "scatter_elements",
       "operand 2 is f32[2,4,2], its shape must be [2,5,3] (that of operand "
       "1)"},
      {"slot %32 value f32[2,5,8]", "slot %32 value i64[2,5,8]",
       "scatter_elements",
       "result 0 is i64[2,5,8], its element type must be f32 (that of "
       "operand 0)"},
      {"slot %33 value f32[2,5,8]", "slot %33 value f32[2,5,7]", "attention",
       "result 0 is f32[2,5,7], its shape must be [2,5,8] (q's rows by v's "
       "columns)"},
      {"%33 = attention %14, %15, %14", "%33 = attention %14, %14, %14",
       "attention",
       "operand 1 is f32[2,5,8], its shape must be [2,8,8] (q's leading "
       "dims, then q's head dim by the keys)"},
      {"{causal=1, scale=0.35}", "{causal=1}", "attention",
       "attribute 'scale' is missing"},
      {"%14, %37 {causal=1, scale=0.35}", "%14, %5 {causal=1, scale=0.35}",
       "attention",
       "operand 3 is i64[2,5], its shape must be [5] (one position per "
       "query)"},
      {"%14, %37 {causal=1, scale=0.35}", "%14, %37 {scale=0.35}",
       "attention", "operand 3 is i64[5]: positions need a causal mask"},
      {"slot %35 value f32[2,8,5]", "slot %35 value f32[2,5,8]",
       "attention_grad",
       "result 1 is f32[2,5,8], its shape must be [2,8,5] (that of operand "
       "1)"},
      {"permutation=[0,2,1]", "permutation=[0,2,2]", "transpose",
       "'permutation' [0,2,2] is not a permutation"},
      {"slot %15 value f32[2,8,5]", "slot %15 value f32[2,5,8]", "transpose",
       "result 0 is f32[2,5,8], its shape must be [2,8,5]"},
      {"starts=[0,0,1]", "starts=[0,0,3]", "slice",
       "the window of result 0 (f32[2,4,2]) reaches past dim 2 of operand 0 "
       "(f32[2,8,5]): start 3 + (2 - 1) x stride 2"},
      {"strides=[1,2,2]", "strides=[1,0,2]", "slice",
       "dim 1 has start 0 and stride 0; starts must be >= 0 and strides >= "
       "1"},
      {"%19 = concat %14, %18", "%19 = concat %14, %17", "concat",
       "operand 1 is f32[2,8]; it must have the rank of result 0"},
      {"slot %19 value f32[2,5,14]", "slot %19 value f32[2,5,15]", "concat",
       "result 0 is f32[2,5,15], its dim 2 must be 14"},
      {"slot %21 value f32[2,5,6]", "slot %21 value f32[2,5,5]", "split",
       "operand 0 is f32[2,5,14], its dim 2 must be 13"},
      // Reductions and selection.
      {"axes=[1]", "axes=[3]", "reduce_sum",
       "attribute 'axes' [3] must be increasing axes of operand 0"},
      {"slot %17 value f32[2,8]", "slot %17 value f32[2,5]", "reduce_sum",
       "result 0 is f32[2,5], it must hold 16 elements"},
      {"k=3", "k=9", "top_k",
       "attribute 'k' is 9; it must be in [0, 8], the size of dim 2"},
      {"slot %25 value i64[2,5,3]", "slot %25 value f32[2,5,3]", "top_k",
       "result 1 is f32[2,5,3]; 'top_k' takes i64 there"},
      {"slot %26 value f32[2,5,16]", "slot %26 value f32[2,16,5]", "one_hot",
       "its shape must be [2,5,16]"},
      {"slot %27 value f32[5]", "slot %27 value f32[5,1]", "iota",
       "'iota' needs rank 1 there"},
      // Normalisation and elementwise ops.
      {"slot %7 param f32[8]", "slot %7 param f32[7]", "layer_norm",
       "operand 1 is f32[7], which does not broadcast to [8]"},
      {"{axis=2, epsilon", "{axis=3, epsilon", "layer_norm",
       "attribute 'axis' is 3, not an axis of operand 0"},
      {"%23 = add %22, %7", "%23 = add %22, %17", "add",
       "operand 0 is f32[2,5,8], operand 1 is f32[2,8]: they do not "
       "broadcast"},
      {"%28 = softmax %23 {axis=2}", "%28 = softmax %23, %22 {axis=2}",
       "softmax", "has 2 operands; it takes 1"},
      {"%30 = exp %23", "%30 = exp %25", "exp",
       "operand 0 is i64[2,5,3]; 'exp' takes f32 there"},
      {"%30 = exp %23", "%30 = expo %23", "expo",
       "this runtime has no kernel 'expo'"},
  };
  std::unique_ptr<Device> device = createDevice("cpu");
  for (const Case &c : cases) {
    std::string text = kProgram;
    size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    Program program;
    ASSERT_NO_THROW(program = parseProgram(text, "verify.bmp")) << c.to;
    try {
      Executor executor(program, *device, "verify.bmp");
      ADD_FAILURE() << "accepted: " << c.to;
    } catch (const Error &e) {
      std::string message = e.what();
      std::string names = c.op.empty() ? std::string("verify.bmp: ")
                                       : "verify.bmp: instruction ";
      EXPECT_EQ(message.rfind(names, 0), 0u) << message;
      if (!c.op.empty()) {
        EXPECT_NE(message.find("('" + c.op + "' # "), std::string::npos)
            << message;
      }
      EXPECT_NE(message.find(c.message), std::string::npos)
          << message << " (wanted: " << c.message << ")";
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

/// Every op of the kernel table has a checker: an instruction without its
/// operands and attributes is refused for those, not as unknown.
TEST(Verify, EveryKernelIsChecked) {
  for (const std::string &op : stepOpNames()) {
    Program program;
    program.slots.resize(1);
    program.slots[0].shape = {1};
    Instr instr;
    instr.op = op;
    instr.results = {0};
    program.instrs.push_back(instr);
    program.outputs = {0};
    try {
      verifyProgram(program, "one.bmp");
      ADD_FAILURE() << op << " without operands or attributes was accepted";
    } catch (const Error &e) {
      std::string message = e.what();
      EXPECT_EQ(message.find("no kernel"), std::string::npos) << message;
      EXPECT_EQ(message.rfind("one.bmp: instruction 0 ('" + op + "'): ", 0), 0u)
          << message;
    }
  }
}

/// What the parser rules out is refused for hand-built programs as well:
/// reading a value nothing computed, an output nothing computes.
TEST(Verify, ValuesAreComputedBeforeUse) {
  Program program;
  program.slots.resize(2);
  for (Slot &slot : program.slots)
    slot.shape = {3};
  Instr instr;
  instr.op = "neg";
  instr.operands = {0};
  instr.results = {1};
  program.instrs.push_back(instr);
  program.outputs = {1};
  try {
    verifyProgram(program, "hand.bmp");
    ADD_FAILURE() << "a value read before it is computed was accepted";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "hand.bmp: instruction 0 ('neg'): operand 0 %0 is "
                           "read before any instruction computes it");
  }
  program.slots[0].kind = SlotKind::Input;
  program.instrs.clear();
  try {
    verifyProgram(program, "hand.bmp");
    ADD_FAILURE() << "an output nothing computes was accepted";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "hand.bmp: output %1 is never computed");
  }
}

/// scatter_elements combines with arithmetic, which bool elements lack; it
/// writes them under reduction none (its default).
TEST(Verify, ScatterElementsReducesOnlyNumbers) {
  Program program;
  program.slots.resize(4);
  for (int slot : {0, 1, 2})
    program.slots[slot].kind = SlotKind::Input;
  program.slots[0].dtype = program.slots[2].dtype = program.slots[3].dtype =
      DType::Bool;
  program.slots[1].dtype = DType::I64;
  program.slots[0].shape = program.slots[3].shape = {4};
  program.slots[1].shape = program.slots[2].shape = {2};
  Instr instr;
  instr.op = "scatter_elements";
  instr.operands = {0, 1, 2};
  instr.results = {3};
  instr.attrs["axis"].i = 0;
  program.instrs.push_back(instr);
  program.outputs = {3};
  EXPECT_NO_THROW(verifyProgram(program, "hand.bmp"));
  Attr max;
  max.kind = Attr::Kind::String;
  max.s = "max";
  program.instrs[0].attrs["reduction"] = max;
  try {
    verifyProgram(program, "hand.bmp");
    ADD_FAILURE() << "a bool max was accepted";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(),
                 "hand.bmp: instruction 0 ('scatter_elements'): operand 0 is "
                 "i1[4]; 'scatter_elements' with reduction 'max' takes f32, "
                 "i64 or i32 there");
  }
}

/// A training step: y = x w, loss = sum((y)^2)-like, with w's gradient
/// and a frozen buffer `b` the loss does not read.
const char *kTrainingStep = R"(bmc-step-program 1
model "frozen"
slot %0 input f32[2,3] "x"
slot %1 param f32[3,4] "w"
slot %2 param f32[4] "b" frozen
slot %3 value f32[2,4]
slot %4 grad f32[3,4] "w"

%3 = matmul %0, %1  # y
%4 = einsum %0, %3 {equation="bi,bj->ij"}  # dw

output %3
)";

/// A parameter whose gradient was deleted (its slot turned into a plain
/// value) is refused, not left frozen; `frozen` round-trips.
TEST(Verify, EveryTrainedParameterHasAGradient) {
  Program program = parseProgram(kTrainingStep, "frozen.bmp");
  ASSERT_TRUE(program.slots[2].frozen);
  EXPECT_FALSE(program.slots[1].frozen);
  Program again = parseProgram(printProgram(program), "again.bmp");
  EXPECT_TRUE(again.slots[2].frozen);

  Program lost = program;
  lost.slots[2].frozen = false;
  try {
    verifyProgram(lost, "lost.bmp");
    ADD_FAILURE() << "a parameter without a gradient was accepted";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "lost.bmp: parameter %2 'b' has no gradient and is "
                           "not marked frozen: the optimizer would never "
                           "update it");
  }
  Program both = program;
  both.slots[1].frozen = true;
  try {
    verifyProgram(both, "both.bmp");
    ADD_FAILURE() << "a gradient of a frozen parameter was accepted";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "both.bmp: gradient %4 'w' belongs to parameter "
                           "'w', which the program marks frozen");
  }
}

} // namespace
