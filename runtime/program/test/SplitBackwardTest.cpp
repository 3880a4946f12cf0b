//===- SplitBackwardTest.cpp - a stage's backward run as B, then W --------===//
//
// The zero-bubble schedules run the gradient sent back (B) apart from the
// weights' gradients (W), with other micro-batches in between. These tests
// check the split's order, its text form, and that W computes what the
// whole backward computes although the arena was reused in between.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Program.h"

#include <gtest/gtest.h>

namespace {

using namespace bmrt;

/// A middle pipeline stage whose backward lists W's GEMM first: the split
/// must move it after B's.
const char *kStage = R"(bmc-step-program 1
model "stage"
mesh pp=2

slot %0 activation f32[2,4]
slot %1 param f32[4,4] "w"
slot %2 grad f32[4,4] "w"
slot %3 activation_grad f32[2,4]
slot %4 value f32[2,4]
slot %5 value f32[2,4]

%4 = matmul %0, %1
backward
%2 = matmul %0, %3 {trans_a=1}
%5 = matmul %3, %1 {trans_b=1}

send %4
send_grad %5
)";

/// Small integers (exact in fp32) in `slot`, different per `seed`.
void fill(Executor &e, int slot, int seed) {
  for (size_t i = 0; i < e.view(slot).size(); ++i)
    e.view(slot).f32()[i] = float((i * 3 + seed) % 7) - 3;
}

std::vector<float> values(Executor &e, int slot) {
  const float *data = e.view(slot).f32();
  return std::vector<float>(data, data + e.view(slot).size());
}

TEST(SplitBackward, PutsWhatTheSentGradientNeedsFirst) {
  Program flat = splitBackward(parseProgram(kStage, "stage.bmp"), "stage.bmp");
  ASSERT_EQ(flat.instrs.size(), 3u);
  EXPECT_EQ(flat.backwardStart, 1);
  EXPECT_EQ(flat.weightGradStart, 2);
  EXPECT_EQ(flat.instrs[1].results, std::vector<int>{5}); // B: dx
  EXPECT_EQ(flat.instrs[2].results, std::vector<int>{2}); // W: dw
  // The text names the part, and reads back the same.
  std::string text = printProgram(flat);
  EXPECT_NE(text.find("backward\n%5 = matmul %3, %1 {trans_b=1}\n"
                      "weight_grads\n%2 = matmul %0, %3 {trans_a=1}\n"),
            std::string::npos);
  EXPECT_EQ(printProgram(parseProgram(text, "split.bmp")), text);
}

TEST(SplitBackward, AFirstStageHasAnEmptyB) {
  std::string first = kStage;
  first.replace(first.find("send_grad %5\n"), 13, "");
  Program flat = splitBackward(parseProgram(first, "s0.bmp"), "s0.bmp");
  EXPECT_EQ(flat.weightGradStart, flat.backwardStart);
}

TEST(SplitBackward, AProgramWithoutABackwardIsRefusedInOneLine) {
  std::string whole = kStage;
  whole.replace(whole.find("backward\n"), 9, "");
  whole.replace(whole.find("send_grad %5\n"), 13, "");
  try {
    splitBackward(parseProgram(whole, "whole.bmp"), "whole.bmp");
    FAIL() << "a program without a backward line was split";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()),
              "whole.bmp: the backward cannot be split into B and W: the "
              "program has no 'backward' line");
  }
}

TEST(SplitBackward, WeightGradsBeforeTheBackwardAreALoadError) {
  std::string text = kStage;
  text.replace(text.find("backward\n"), 9, "weight_grads\nbackward\n");
  try {
    parseProgram(text, "bad.bmp");
    FAIL() << "weight_grads before backward was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "a 'weight_grads' line before the 'backward' line"),
              std::string::npos);
  }
}

TEST(SplitBackward, WRunLaterGivesTheWholeBackwardsGradient) {
  std::unique_ptr<Device> device = createDevice("cpu");
  Program program = parseProgram(kStage, "stage.bmp");
  // The reference: micro-batch 1 run whole.
  Executor whole(program, *device, "stage.bmp");
  fill(whole, 1, 0);
  fill(whole, 0, 1);
  fill(whole, 3, 2);
  whole.run();
  const std::vector<float> expected = values(whole, 2);

  Executor e(program, *device, "stage.bmp", nullptr, BackwardParts::Split);
  fill(e, 1, 0);
  fill(e, 0, 1);
  e.runForward();
  std::vector<uint8_t> stash(e.stashBytes());
  e.stash(stash.data());
  fill(e, 3, 2);
  e.runBackwardInput();
  std::vector<uint8_t> weightStash(e.weightStashBytes());
  e.stashWeightInputs(weightStash.data());
  // Micro-batch 2's forward and B overwrite the activation, the received
  // gradient and the arena.
  fill(e, 0, 5);
  e.runForward();
  fill(e, 3, 6);
  e.runBackwardInput();
  e.unstashWeightInputs(weightStash.data());
  e.runBackwardWeight();
  EXPECT_EQ(values(e, 2), expected); // small integers: exact in fp32
}

TEST(SplitBackward, AGradientWrittenInBIsKeptForW) {
  // The sent gradient reads the weights' gradient, so both are B and W is
  // empty: %2 must still survive the next micro-batch's B, since the
  // gradients are taken after W.
  std::string text = kStage;
  text.replace(text.find("%5 = matmul %3, %1 {trans_b=1}"), 30,
               "%5 = matmul %3, %2");
  std::unique_ptr<Device> device = createDevice("cpu");
  Program program = parseProgram(text, "stage.bmp");
  Executor e(program, *device, "stage.bmp", nullptr, BackwardParts::Split);
  EXPECT_EQ(e.program().weightGradStart, 3);
  EXPECT_EQ(e.weightStashBytes(), 4 * 4 * sizeof(float));
  // Final only where W starts, for the buckets that reduce it.
  EXPECT_EQ(lastWriters(e.program())[2], 3);
  fill(e, 1, 0);
  fill(e, 0, 1);
  fill(e, 3, 2);
  e.runForward();
  e.runBackwardInput();
  const std::vector<float> first = values(e, 2);
  std::vector<uint8_t> weightStash(e.weightStashBytes());
  e.stashWeightInputs(weightStash.data());
  fill(e, 3, 4);
  e.runBackwardInput();
  ASSERT_NE(values(e, 2), first);
  e.unstashWeightInputs(weightStash.data());
  e.runBackwardWeight();
  EXPECT_EQ(values(e, 2), first);
}

} // namespace
