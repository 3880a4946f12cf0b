//===- ExecutorViewsTest.cpp - reshapes share their operand's bytes -------===//
//
// A reshape (flatten, squeeze, unsqueeze) of a value is its operand's bytes
// under another shape: the executor gives both slots one place in the
// arena, lives as long as the longer of them, and does not run the copy.
// The stash keeps such bytes once.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Executor.h"
#include "bmrt/Program.h"

#include <gtest/gtest.h>

#include <memory>

namespace bmrt {
namespace {

// x [2, 3] -> relu -> reshape [6] -> reshape [3, 2] -> relu; the backward
// reads the flat view and its root: two slots, one set of bytes, crossing
// the boundary.
const char *kViews = R"(bmc-step-program 1
model "views"

slot %0 activation f32[2,3]
slot %1 value f32[2,3]
slot %2 value f32[6]
slot %3 value f32[3,2]
slot %4 value f32[3,2]
slot %5 value f32[2,3]
slot %6 value f32[6]

%1 = relu %0
%2 = reshape %1
%3 = reshape %2
%4 = relu %3
backward
%5 = relu %1
%6 = add %2, %2

send %4
)";

TEST(ExecutorViews, ReshapesShareBytesAndAreNotRun) {
  Program program = parseProgram(kViews, "views.bmp");
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor e(program, *device, "views.bmp");
  EXPECT_EQ(e.view(1).data, e.view(2).data);
  EXPECT_EQ(e.view(2).data, e.view(3).data);
  EXPECT_NE(e.view(1).data, e.view(4).data);
  float x[6] = {-1, 2, -3, 4, -5, 6};
  for (int i = 0; i < 6; ++i)
    e.view(0).f32()[i] = x[i];
  int launched = 0;
  e.setInstructionHook([&](size_t) { ++launched; });
  e.runForward();
  e.runBackward();
  EXPECT_EQ(launched, 6); // the hook sees every instruction, run or not
  for (int i = 0; i < 6; ++i) {
    float relu = x[i] > 0 ? x[i] : 0;
    EXPECT_EQ(e.view(3).f32()[i], relu) << i;
    EXPECT_EQ(e.view(6).f32()[i], 2 * relu) << i;
  }
}

TEST(ExecutorViews, TheStashKeepsSharedBytesOnce) {
  Program program = parseProgram(kViews, "views.bmp");
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor e(program, *device, "views.bmp");
  // The backward reads %1 and its view %2 (and not the activation %0):
  // their bytes once, 6 floats, not 12.
  EXPECT_EQ(e.stashBytes(), 6 * sizeof(float));
  for (int i = 0; i < 6; ++i)
    e.view(0).f32()[i] = float(i);
  e.runForward();
  std::vector<uint8_t> saved(e.stashBytes());
  e.stash(saved.data());
  for (int i = 0; i < 6; ++i)
    e.view(0).f32()[i] = -1;
  e.runForward();
  e.unstash(saved.data());
  e.runBackward();
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(e.view(6).f32()[i], 2 * float(i)) << i;
}

} // namespace
} // namespace bmrt
