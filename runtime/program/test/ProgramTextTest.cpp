//===- ProgramTextTest.cpp - the step program's text form -----------------===//

#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Program.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

namespace {

using namespace bmrt;

/// y = relu(x * w) summed, with the layer in a function called twice.
const char *kProgram = R"(bmc-step-program 1
model "tiny"
slot %0 input f32[2,3] "x"
slot %1 param f32[3] "w"
slot %2 const f32[3] = 1.5 -2 0.25
slot %3 value f32[2,3]
slot %4 value f32[2,3]
slot %5 value f32[]

func block0_forward 2 -> %3
slot %0 value f32[2,3]
slot %1 value f32[3]
slot %2 value f32[2,3]
slot %3 value f32[2,3]
%2 = mul %0, %1  # scale
%3 = relu %2
end

%3 = call %0, %1 {callee="block0_forward"}  # layer 0
%4 = call %3, %2 {callee="block0_forward"}  # layer 1
%5 = reduce_sum %4 {axes=[0,1]}
output %5
)";

TEST(ProgramText, PrintParseRoundTrip) {
  Program program = parseProgram(kProgram, "tiny.bmp");
  ASSERT_EQ(program.functions.size(), 1u);
  EXPECT_EQ(program.functions[0].numArgs, 2);
  EXPECT_EQ(program.instrs.size(), 3u);
  std::string text = printProgram(program);
  EXPECT_EQ(printProgram(parseProgram(text, "again.bmp")), text);
}

TEST(ProgramText, CallsInlineAndRun) {
  Program program = parseProgram(kProgram, "tiny.bmp");
  Program flat = inlineCalls(program);
  ASSERT_EQ(flat.instrs.size(), 5u);
  EXPECT_EQ(flat.instrs[0].comment, "scale, layer 0");
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor executor(program, *device);
  float x[6] = {1, -1, 2, 0.5f, -2, 3}, w[3] = {1, 2, -1};
  std::memcpy(executor.view(0).data, x, sizeof x);
  std::memcpy(executor.view(1).data, w, sizeof w);
  executor.run();
  // relu(relu(x w) * c) summed, by hand.
  float c[3] = {1.5f, -2, 0.25f}, want = 0;
  for (int i = 0; i < 6; ++i)
    want += std::max(0.f, std::max(0.f, x[i] * w[i % 3]) * c[i % 3]);
  EXPECT_FLOAT_EQ(executor.view(5).f32()[0], want);
}

/// Each malformed program is refused with one line naming the file, the
/// line and the problem.
TEST(ProgramText, MalformedProgramsAreOneLineErrors) {
  struct Case {
    std::string from, to, message;
  };
  const Case cases[] = {
      {"bmc-step-program 1", "bmc-step-program 7", "tiny.bmp:1: step program version 7"},
      {"bmc-step-program 1", "hello", "not a bmc step program"},
      {"slot %1 param", "slot %2 param", "out of order"},
      {"f32[2,3] \"x\"", "f99[2,3] \"x\"", "unknown element type 'f99'"},
      {"= 1.5 -2 0.25", "= 1.5 -2", "constant has 2 values"},
      // Counted before its bytes are allocated (4 TiB here).
      {"const f32[3]", "const f32[1099511627776]", "constant has 3 values"},
      {"%5 = reduce_sum %4", "%5 = reduce_sum %9", "not a declared slot"},
      {"%5 = reduce_sum %4", "%5 = reduce_sum %5", "used before it is computed"},
      {"%4 = call %3, %2", "%4 = call %3", "binds 1 operands"},
      {"{callee=\"block0_forward\"}  # layer 1", "{callee=\"nope\"}",
       "which no func defines"},
      {"%3 = relu %2\nend", "%3 = relu %2\n", "'end' missing"},
      {"output %5", "", "names no loss and no output"},
      {"slot %1 param f32[3]", "slot %1 param f32[3,1]",
       "operand 1 of the call of 'block0_forward' is f32[3,1]"},
      {"%2 = mul %0, %1  # scale", "%2 = mul %0, %1 {axis=}",
       "expected a word"},
  };
  for (const Case &c : cases) {
    std::string text = kProgram;
    size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    try {
      parseProgram(text, "tiny.bmp");
      ADD_FAILURE() << "accepted: " << c.to;
    } catch (const Error &e) {
      std::string message = e.what();
      EXPECT_NE(message.find(c.message), std::string::npos)
          << message << " (wanted: " << c.message << ")";
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST(ProgramText, UnknownKernelIsRefusedAtLoad) {
  std::string text = kProgram;
  text.replace(text.find("reduce_sum"), 10, "reduce_foo");
  Program program = parseProgram(text, "tiny.bmp");
  std::unique_ptr<Device> device = createDevice("cpu");
  try {
    Executor executor(program, *device);
    ADD_FAILURE() << "an unknown kernel was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("'reduce_foo'"), std::string::npos);
  }
}

} // namespace
