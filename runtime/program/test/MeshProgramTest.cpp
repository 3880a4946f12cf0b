//===- MeshProgramTest.cpp - programs partitioned over a mesh -------------===//
//
// The mesh line, shardings, partial sums and collectives: their text form
// round-trips, and everything a kernel or the trainer could not run is
// refused in one line when the program is loaded.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Program.h"
#include "bmrt/Sharding.h"

#include <gtest/gtest.h>

namespace {

using namespace bmrt;

/// A column- then row-parallel pair over tp = 2, the batch over dp = 2,
/// and one of each collective.
const char *kProgram = R"(bmc-step-program 1
model "mesh"
mesh tp=2 ep=1 dp=2 pp=1

slot %0 input f32[4,8] "x" sharding=[["dp"],[]]
slot %1 param f32[8,8] "w1" sharding=[[],["tp"]]
slot %2 param f32[8,8] "w2" sharding=[["tp"],[]]
slot %3 grad f32[8,8] "w1" sharding=[[],["tp"]] partial=["dp"]
slot %4 value f32[4,8]
slot %5 value f32[4,8]
slot %6 value f32[4,8]
slot %7 value f32[4,16]
slot %8 value f32[4,4]
slot %9 value f32[2,8]
slot %10 value f32[4,2]
slot %11 value f32[]

%4 = matmul %0, %1  # column-parallel
%5 = matmul %4, %2  # row-parallel
%6 = all_reduce %5 {axes="tp"}
%7 = all_gather %6 {axes="tp", dim=1}
%8 = reduce_scatter %7 {axes="dp,tp", dim=1}
%9 = all_to_all %8 {axes="tp", concat_dim=1, split_dim=0}
%10 = shard_slice %8 {axes="tp", dim=1}
%3 = matmul %0, %6 {trans_a=1}
%11 = reduce_sum %9 {axes=[0,1]}

loss %11 partial=["dp"]
)";

TEST(MeshProgram, AFactoredParameterKeepsItsModelShape) {
  // w [8, 8] stored as its view [8, 2, 4], split along the last dim: the
  // model shape comes back from the text.
  const char *text = R"(bmc-step-program 1
model "view"
mesh tp=2 ep=1 dp=1 pp=1

slot %0 param f32[8,2,2] "w" sharding=[[],[],["tp"]] model=[8,8]
slot %1 value f32[]

%1 = reduce_sum %0 {axes=[0,1,2]}

loss %1
)";
  Program program = parseProgram(text, "view.bmp");
  EXPECT_EQ(program.slots[0].model, (Shape{8, 8}));
  EXPECT_EQ(printProgram(program), text);
  EXPECT_TRUE(sameElementOrder({8, 2, 4}, {8, 8}));
  EXPECT_TRUE(sameElementOrder({16, 4}, {8, 2, 4}));
  EXPECT_FALSE(sameElementOrder({8, 8}, {4, 16}));
  EXPECT_FALSE(sameElementOrder({64, 192}, {192, 64}));
}

TEST(MeshProgram, PrintParseRoundTrip) {
  Program program = parseProgram(kProgram, "mesh.bmp");
  ASSERT_EQ(program.mesh.size(), 4u);
  EXPECT_EQ(program.meshAxisSize("dp"), 2);
  EXPECT_EQ(program.slots[2].sharding,
            (std::vector<std::vector<std::string>>{{"tp"}, {}}));
  EXPECT_EQ(program.slots[3].partial, std::vector<std::string>{"dp"});
  EXPECT_EQ(program.lossPartial, std::vector<std::string>{"dp"});
  std::string text = printProgram(program);
  EXPECT_EQ(text, kProgram);
  EXPECT_EQ(printProgram(parseProgram(text, "again.bmp")), text);
}

TEST(MeshProgram, ShardsFollowTheListedAxes) {
  Program program = parseProgram(kProgram, "mesh.bmp");
  Mesh mesh = meshOf(program);
  // Rank 1 is tp 1, dp 0: chunk 0 * 2 + 1 listed dp-major, 1 * 2 + 0
  // listed tp-major; the communicator numbers the group tp innermost, so
  // only the tp-major listing reorders.
  EXPECT_EQ(chunkIndex(mesh, 1, {"dp", "tp"}), 1);
  EXPECT_EQ(chunkIndex(mesh, 1, {"tp", "dp"}), 2);
  EXPECT_EQ(chunkOrder(mesh, 0, {"dp", "tp"}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(chunkOrder(mesh, 0, {"tp", "dp"}), (std::vector<int>{0, 2, 1, 3}));
  const Slot &w2 = program.slots[2];
  EXPECT_EQ(globalShape(w2.shape, w2.sharding, mesh), (Shape{16, 8}));
  EXPECT_EQ(shardOffsets(w2.shape, w2.sharding, mesh, 3), (Shape{8, 0}));
  EXPECT_EQ(meshOf(Program(), 4).str(), "tp=1,ep=1,dp=4,pp=1");
}

TEST(MeshProgram, CopyBoxMovesOneBlock) {
  std::vector<int> global(4 * 6);
  for (size_t i = 0; i < global.size(); ++i)
    global[i] = static_cast<int>(i);
  std::vector<int> box(2 * 3);
  copyBox(global.data(), {4, 6}, {2, 3}, box.data(), {2, 3}, {0, 0}, {2, 3},
          sizeof(int));
  EXPECT_EQ(box, (std::vector<int>{15, 16, 17, 21, 22, 23}));
}

std::string loadError(const std::string &text) {
  try {
    Program program = parseProgram(text, "mesh.bmp");
    verifyProgram(inlineCalls(program), "mesh.bmp");
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

/// Each change to kProgram is refused with one line.
TEST(MeshProgram, BadMeshesAndShardingsAreOneLineErrors) {
  struct Case {
    std::string from, to, message;
  };
  const Case cases[] = {
      {"mesh tp=2 ep=1 dp=2 pp=1", "mesh tp=2 sp=1 dp=2",
       "mesh.bmp: the mesh names axis 'sp'; the runtime knows tp, tp2, cp, ep, "
       "dp "
       "and pp"},
      {"mesh tp=2 ep=1 dp=2 pp=1", "mesh tp=2 dp=0",
       "mesh.bmp:3: mesh axis 'dp' has size 0"},
      {"mesh tp=2 ep=1 dp=2 pp=1", "mesh tp=2 tp=2",
       "mesh.bmp:3: mesh axis 'tp' appears twice"},
      {"mesh tp=2 ep=1 dp=2 pp=1\n", "",
       "mesh.bmp: slot %0 'x' is sharded but the program has no mesh line"},
      {"\"x\" sharding=[[\"dp\"],[]]", "\"x\" sharding=[[\"dp\"]]",
       "mesh.bmp:5: the sharding lists 1 dims; the slot has 2"},
      {"\"x\" sharding=[[\"dp\"],[]]", "\"x\" sharding=[[\"xp\"],[]]",
       "mesh.bmp: slot %0 'x' names 'xp', no axis of the mesh"},
      {"\"x\" sharding=[[\"dp\"],[]]", "\"x\" sharding=[[\"dp\"],[\"dp\"]]",
       "mesh.bmp: slot %0 'x' names axis 'dp' twice"},
      {"\"w1\" sharding=[[],[\"tp\"]]\n", "\"w1\" partial=[\"dp\"]\n",
       "mesh.bmp: slot %1 'w1' is a param; only gradients (and the loss) are "
       "partial sums"},
      {"grad f32[8,8] \"w1\" sharding=[[],[\"tp\"]]",
       "grad f32[8,8] \"w1\" sharding=[[\"tp\"],[]]",
       "mesh.bmp: the gradient of 'w1' is sharded unlike the parameter"},
      // w2's global [16, 8] is a view of [16, 2, 4] or [128], not these.
      {"\"w2\" sharding=[[\"tp\"],[]]",
       "\"w2\" sharding=[[\"tp\"],[]] model=[8,2,4]",
       "mesh.bmp: slot %2 'w2' is stored as [16,8], which is no view of its "
       "model shape [8,2,4]"},
      {"\"w2\" sharding=[[\"tp\"],[]]",
       "\"w2\" sharding=[[\"tp\"],[]] model=[8,16]",
       "mesh.bmp: slot %2 'w2' is stored as [16,8], which is no view of its "
       "model shape [8,16]"},
      {"slot %4 value f32[4,8]", "slot %4 value f32[4,8] model=[32]",
       "mesh.bmp:9: unexpected 'model=' on a slot (sharding= and partial= "
       "come once each, model= once on a parameter)"},
      {"loss %11 partial=[\"dp\"]", "loss %11 partial=[\"zp\"]",
       "mesh.bmp: the loss is a partial sum over 'zp', no axis of the mesh"},
      {"{axes=\"tp\"}\n%7", "{axes=\"xp\"}\n%7",
       "mesh.bmp: instruction 2 ('all_reduce'): attribute 'axes' is \"xp\"; "
       "'xp' is no axis of the mesh"},
      {"{axes=\"dp,tp\", dim=1}", "{axes=\"tp,tp\", dim=1}",
       "mesh.bmp: instruction 4 ('reduce_scatter'): attribute 'axes' is "
       "\"tp,tp\"; it names 'tp' twice"},
      {"slot %7 value f32[4,16]", "slot %7 value f32[4,8]",
       "mesh.bmp: instruction 3 ('all_gather'): result 0 is f32[4,8], its "
       "shape must be [4,16] (operand 0's with dim 1 times 2 ranks)"},
      {"slot %8 value f32[4,4]", "slot %8 value f32[4,8]",
       "mesh.bmp: instruction 4 ('reduce_scatter'): result 0 is f32[4,8], "
       "its shape must be [4,4] (operand 0's with dim 1 divided by 4 ranks)"},
      {"slot %9 value f32[2,8]", "slot %9 value f32[4,8]",
       "mesh.bmp: instruction 5 ('all_to_all'): result 0 is f32[4,8], its "
       "shape must be [2,8] (operand 0's split along split_dim and joined "
       "along concat_dim over 2 ranks)"},
      {"%10 = shard_slice %8 {axes=\"tp\", dim=1}",
       "%10 = shard_slice %9 {axes=\"dp,tp\", dim=0}",
       "mesh.bmp: instruction 6 ('shard_slice'): operand 0 is f32[2,8]; its "
       "dim 0 does not split into 4 chunks (the group's ranks)"},
      {"{axes=\"tp\", dim=1}\n%3", "{axes=\"tp\", dim=2}\n%3",
       "mesh.bmp: instruction 6 ('shard_slice'): attribute 'dim' is 2, not "
       "an axis of operand 0 (f32[4,4])"},
  };
  for (const Case &c : cases) {
    std::string text = kProgram;
    size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    EXPECT_EQ(loadError(text), c.message) << c.from << " -> " << c.to;
  }
}

/// Small integers (exact in fp32) in the slots: i % 5 - 2 at element i.
void fillSmallIntegers(Executor &e, std::initializer_list<int> slots) {
  for (int slot : slots)
    for (int64_t i = 0; i < e.view(slot).size(); ++i)
      e.view(slot).f32()[i] = float(i % 5) - 2;
}

/// A pipeline stage: an activation in, a backward part, sends both ways.
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

TEST(MeshProgram, PipelineStagesRoundTripAndRunInTwoParts) {
  Program program = parseProgram(kStage, "stage.bmp");
  EXPECT_EQ(program.backwardStart, 1);
  EXPECT_EQ(program.sends, std::vector<int>{4});
  EXPECT_EQ(program.sendGrads, std::vector<int>{5});
  EXPECT_EQ(printProgram(program), kStage);
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor e(program, *device, "stage.bmp");
  fillSmallIntegers(e, {0, 1, 3});
  e.runForward();
  // x = [[-2 -1 0 1] [2 -2 -1 0]] and w = [[-2 -1 0 1] [2 -2 -1 0] ...]: the
  // sent value is x w, exact in fp32 (small integers), read before the next
  // forward as the trainer does.
  EXPECT_EQ(e.view(4).f32()[3], -4.0f);
  std::vector<uint8_t> saved(e.stashBytes());
  e.stash(saved.data());
  e.view(0).f32()[0] = 100; // another micro-batch's forward in between
  e.runForward();
  e.unstash(saved.data());
  EXPECT_EQ(e.view(0).f32()[0], -2.0f);
  e.runBackward();
  std::string unsent = kStage;
  unsent.replace(unsent.find("%5 = matmul %3, %1 {trans_b=1}\n"), 31, "");
  EXPECT_EQ(loadError(unsent), "mesh.bmp: send_grad %5 is never computed");
}

/// The middle of three stages with two values crossing each boundary: its
/// own output and one it passes on (%1, made on stage 0 and read on stage
/// 2), and their gradients back, the passed-on one (%5) also unchanged.
const char *kTwoValueStage = R"(bmc-step-program 1
model "stage"
mesh pp=3

slot %0 activation f32[2,4]
slot %1 activation f32[2,6]
slot %2 param f32[4,4] "w"
slot %3 grad f32[4,4] "w"
slot %4 activation_grad f32[2,4]
slot %5 activation_grad f32[2,6]
slot %6 value f32[2,4]
slot %7 value f32[2,4]

%6 = matmul %0, %2
backward
%3 = matmul %0, %4 {trans_a=1}
%7 = matmul %4, %2 {trans_b=1}

send %6
send %1
send_grad %7
send_grad %5
)";

/// kTwoValueStage whose backward also reads `operand` (of the forward):
/// %8 (of `type`) = operand^T x the received gradient %4.
std::string withBackwardRead(const std::string &operand,
                             const std::string &type) {
  std::string text = kTwoValueStage;
  text.replace(text.find("slot %7 value f32[2,4]"), 22,
               "slot %7 value f32[2,4]\nslot %8 value " + type);
  text.replace(text.find("%7 = matmul %4, %2 {trans_b=1}"), 30,
               "%7 = matmul %4, %2 {trans_b=1}\n%8 = matmul " + operand +
                   ", %4 {trans_a=1}");
  return text;
}

TEST(MeshProgram, SeveralValuesCrossABoundaryInOrder) {
  Program program = parseProgram(kTwoValueStage, "stage1.bmp");
  EXPECT_EQ(program.sends, (std::vector<int>{6, 1}));
  EXPECT_EQ(program.sendGrads, (std::vector<int>{7, 5}));
  EXPECT_EQ(printProgram(program), kTwoValueStage);
  verifyProgram(program, "stage1.bmp");
  // The stash per micro-batch holds only the activation the backward reads
  // (%0): the value sent (%6) and the activation only passed on (%1) are
  // sent before the next forward.
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor e(program, *device, "stage1.bmp");
  EXPECT_EQ(e.stashBytes(), 2 * 4 * sizeof(float));
}

TEST(MeshProgram, ASentValueTheBackwardReadsIsStashed) {
  // The backward reads the sent %6 (as a layer's backward reads its
  // output): it is kept per micro-batch, and the backward sees this
  // micro-batch's, not the one of a forward run in between.
  Program program =
      parseProgram(withBackwardRead("%6", "f32[4,4]"), "stage1.bmp");
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor e(program, *device, "stage1.bmp");
  EXPECT_EQ(e.stashBytes(), (2 * 4 + 2 * 4) * sizeof(float));
  fillSmallIntegers(e, {0, 2, 4});
  e.runForward();
  std::vector<float> sent(e.view(6).f32(), e.view(6).f32() + 8);
  std::vector<uint8_t> saved(e.stashBytes());
  e.stash(saved.data());
  e.view(0).f32()[0] = 100;
  e.runForward();
  e.unstash(saved.data());
  EXPECT_EQ(std::vector<float>(e.view(6).f32(), e.view(6).f32() + 8), sent);
}

TEST(MeshProgram, TheBackwardReusesTheBytesOfWhatWasSent) {
  // %6 is sent after the forward and the backward's %7 is as large: with
  // the send's life ending at the forward's end, they share bytes.
  Program program = parseProgram(kTwoValueStage, "stage1.bmp");
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor e(program, *device, "stage1.bmp");
  EXPECT_EQ(e.view(6).data, e.view(7).data);
  EXPECT_EQ(e.arenaBytes(), 64u); // one f32[2,4], aligned to 64 bytes
}

TEST(MeshProgram, ReadsEveryActivationInTheStash) {
  // Both activations read in backward: both are kept per micro-batch (and
  // not the sent %6, which the backward does not read).
  Program program =
      parseProgram(withBackwardRead("%1", "f32[6,4]"), "stage1.bmp");
  std::unique_ptr<Device> device = createDevice("cpu");
  Executor e(program, *device, "stage1.bmp");
  EXPECT_EQ(e.stashBytes(), (2 * 4 + 2 * 6) * sizeof(float));
}

TEST(MeshProgram, RepeatedSendsAreOneLineErrors) {
  std::string twice = kTwoValueStage;
  twice.replace(twice.find("send %1"), 7, "send %6");
  EXPECT_EQ(loadError(twice), "mesh.bmp:20: send %6 is listed twice");
  std::string trailing = kTwoValueStage;
  trailing.replace(trailing.find("send %1"), 7, "send %1 %6");
  EXPECT_EQ(loadError(trailing), "mesh.bmp:20: unexpected text after send %1");
}

/// A slot of `kind` and shape, f32 unless `dtype` says otherwise.
Slot slotOf(SlotKind kind, Shape shape, DType dtype = DType::F32) {
  Slot slot;
  slot.kind = kind;
  slot.shape = std::move(shape);
  slot.dtype = dtype;
  return slot;
}

/// Stage 0 before kTwoValueStage: sends [2,4] and [2,6], receives their
/// gradients.
Program firstStage() {
  Program p;
  p.slots = {slotOf(SlotKind::ActivationGrad, {2, 4}),
             slotOf(SlotKind::ActivationGrad, {2, 6}),
             slotOf(SlotKind::Value, {2, 4}), slotOf(SlotKind::Value, {2, 6})};
  p.sends = {2, 3};
  return p;
}

/// Stage 2 after kTwoValueStage: receives both, sends their gradients.
Program lastStage() {
  Program p;
  p.slots = {slotOf(SlotKind::Activation, {2, 4}),
             slotOf(SlotKind::Activation, {2, 6}),
             slotOf(SlotKind::Value, {2, 4}), slotOf(SlotKind::Value, {2, 6})};
  p.sendGrads = {2, 3};
  return p;
}

std::string boundaryError(const Program &from, const Program &to) {
  try {
    checkStageBoundary(from, "from.bmp", to, "to.bmp");
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(MeshProgram, StageBoundariesMatchByPosition) {
  Program middle = parseProgram(kTwoValueStage, "stage1.bmp");
  EXPECT_EQ(boundaryError(firstStage(), middle), "");
  EXPECT_EQ(boundaryError(middle, lastStage()), "");

  Program one = firstStage();
  one.sends = {2};
  EXPECT_EQ(boundaryError(one, middle),
            "from.bmp has 1 'send' lines but to.bmp has 2 activation slots; "
            "stage boundaries match them by position");
  Program swapped = firstStage();
  swapped.sends = {3, 2};
  EXPECT_EQ(boundaryError(swapped, middle),
            "from.bmp: send %3 (number 1) is f32[2,6] but to.bmp receives it "
            "in activation %0, f32[2,4]");
  Program halves = firstStage();
  halves.slots[3].dtype = DType::I32;
  EXPECT_EQ(boundaryError(halves, middle),
            "from.bmp: send %3 (number 2) is i32[2,6] but to.bmp receives it "
            "in activation %1, f32[2,6]");
  Program gradients = lastStage();
  gradients.slots[3].shape = {2, 5};
  EXPECT_EQ(boundaryError(middle, gradients),
            "to.bmp: send_grad %3 (number 2) is f32[2,5] but from.bmp "
            "receives it in activation_grad %5, f32[2,6]");
  Program noGradients = lastStage();
  noGradients.sendGrads.clear();
  EXPECT_EQ(boundaryError(middle, noGradients),
            "to.bmp has 0 'send_grad' lines but from.bmp has 2 activation_grad "
            "slots; stage boundaries match them by position");
}

} // namespace
