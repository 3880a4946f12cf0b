//===- FixedChoicesTest.cpp - the --fix parser ----------------------------===//

#include "passes/plan/TrainingConfig.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

using namespace bm::plan;

namespace {

std::string errorOf(llvm::StringRef text) {
  return test::errorText(parseFixedChoices(text));
}

TEST(FixedChoicesTest, ParsesEveryKey) {
  FixedChoices f = llvm::cantFail(parseFixedChoices(
      "dp=4,tp=8,pp=2,mb=1,zero=1,recompute=selective,schedule=interleaved,v=3"));
  EXPECT_EQ(*f.dp, 4);
  EXPECT_EQ(*f.tp, 8);
  EXPECT_EQ(*f.pp, 2);
  EXPECT_EQ(*f.microBatch, 1);
  EXPECT_EQ(*f.zeroStage, 1);
  EXPECT_EQ(*f.recompute, Recompute::Selective);
  EXPECT_EQ(*f.schedule, ScheduleKind::Interleaved);
  EXPECT_EQ(*f.chunks, 3);
  EXPECT_EQ(formatFixedChoices(f), "dp=4,tp=8,pp=2,mb=1,zero=1,recompute="
                                   "selective,schedule=interleaved,v=3");
}

TEST(FixedChoicesTest, Tensor2IsPrintedOnlyWithAGrid) {
  // tp2 reads back, and a configuration prints it only where it is a
  // grid: 1-D configurations print as they always have.
  FixedChoices f = llvm::cantFail(parseFixedChoices("tp=4,tp2=4"));
  EXPECT_EQ(*f.tp2, 4);
  EXPECT_EQ(formatFixedChoices(f), "tp=4,tp2=4");
  ParallelConfig c;
  c.tp = 4;
  EXPECT_EQ(c.str().find("tp2"), std::string::npos);
  c.tp2 = 4;
  EXPECT_NE(c.str().find(",tp=4,tp2=4,"), std::string::npos);
  ParallelConfig line = c;
  line.tp2 = 1;
  EXPECT_FALSE(c == line);
}

TEST(FixedChoicesTest, StreamWithAndWithoutItsDimension) {
  FixedChoices any = llvm::cantFail(parseFixedChoices("stream=hidden"));
  EXPECT_EQ(*any.stream, StreamLayout::Hidden);
  EXPECT_FALSE(any.streamDim.has_value());
  FixedChoices one = llvm::cantFail(parseFixedChoices("tp=4,stream=hidden:2"));
  EXPECT_EQ(*one.stream, StreamLayout::Hidden);
  EXPECT_EQ(*one.streamDim, 2);
  EXPECT_EQ(formatFixedChoices(one), "tp=4,stream=hidden:2");
  // A plan names the dimension of a split stream (a conv net has several
  // feature dimensions, a grid of tokens two sequence ones).
  ParallelConfig config;
  config.tp = 4;
  config.stream = StreamLayout::Hidden;
  config.streamDim = 3;
  EXPECT_EQ(config.str().substr(config.str().rfind(',')), ",stream=hidden:3");
  config.stream = StreamLayout::Sequence;
  config.streamDim = 1;
  EXPECT_EQ(config.str().substr(config.str().rfind(',')), ",stream=sequence:1");
  config.stream = StreamLayout::Replicated;
  config.streamDim = -1;
  EXPECT_EQ(config.str().substr(config.str().rfind(',')), ",stream=replicated");
}

// Configurations without offload print as they did before it existed;
// an offloaded one says so, in the form --fix reads back.
TEST(FixedChoicesTest, OffloadIsPrintedOnlyWhereItIsOn) {
  FixedChoices on = llvm::cantFail(parseFixedChoices("dp=2,offload=optimizer"));
  EXPECT_EQ(*on.offload, Offload::Optimizer);
  EXPECT_FALSE(on.empty());
  EXPECT_EQ(formatFixedChoices(on), "dp=2,offload=optimizer");
  FixedChoices off = llvm::cantFail(parseFixedChoices("offload=none"));
  EXPECT_EQ(*off.offload, Offload::None);
  EXPECT_FALSE(off.empty());
  ParallelConfig config;
  const std::string plain = config.str();
  EXPECT_EQ(plain, "dp=1,tp=1,pp=1,mb=1,zero=0,recompute=none,schedule=none,"
                   "v=1");
  config.offload = Offload::Optimizer;
  EXPECT_EQ(config.str(), plain + ",offload=optimizer");
  EXPECT_FALSE(config == ParallelConfig());
  FixedChoices back = llvm::cantFail(parseFixedChoices(config.str()));
  EXPECT_EQ(*back.offload, Offload::Optimizer);
  EXPECT_EQ(toString(Offload::None), std::string("none"));
  EXPECT_EQ(parseOffload("optimizer"), Offload::Optimizer);
  EXPECT_EQ(parseOffload("host"), std::nullopt);
}

TEST(FixedChoicesTest, PartialFixLeavesTheRestOpen) {
  FixedChoices f = llvm::cantFail(parseFixedChoices(" tp=8 , recompute=full"));
  EXPECT_EQ(*f.tp, 8);
  EXPECT_EQ(*f.recompute, Recompute::Full);
  EXPECT_FALSE(f.dp.has_value());
  EXPECT_FALSE(f.schedule.has_value());
  EXPECT_FALSE(f.empty());
}

TEST(FixedChoicesTest, OneLineErrors) {
  EXPECT_EQ(errorOf("tp=eight"),
            "--fix: tp must be an integer in [1, 16777216], got 'eight'");
  EXPECT_EQ(errorOf("zero=4"),
            "--fix: zero must be an integer in [0, 3], got '4'");
  EXPECT_EQ(
      errorOf("sp=2"),
      "--fix: unknown key 'sp' (keys: cp, cp_layout, dp, ep, mb, offload, pp, "
      "recompute, schedule, stream, tp, tp2, v, zero)");
  EXPECT_EQ(errorOf("offload=cpu"),
            "--fix: offload must be none or optimizer, got 'cpu'");
  EXPECT_EQ(errorOf("offload=none,offload=optimizer"),
            "--fix: offload is given twice");
  EXPECT_EQ(errorOf("stream=diagonal"),
            "--fix: stream must be replicated, sequence or hidden (the split "
            "ones optionally with a dimension, as in hidden:1), got "
            "'diagonal'");
  EXPECT_EQ(errorOf("stream=replicated:1"),
            "--fix: stream=replicated splits no dimension, got "
            "'replicated:1'");
  EXPECT_EQ(errorOf("stream=hidden:c"),
            "--fix: stream dimension must be an integer in [0, 16777216], "
            "got 'c'");
  EXPECT_EQ(errorOf("stream=hidden,stream=replicated"),
            "--fix: stream is given twice");
  EXPECT_EQ(errorOf("dp=4,ep=3"), "--fix: ep=3 must divide dp=4");
  EXPECT_EQ(errorOf("tp"), "--fix: expected key=value, got 'tp'");
  EXPECT_EQ(errorOf("tp=2,tp=4"), "--fix: tp is given twice");
  EXPECT_EQ(errorOf("recompute=none,recompute=full"),
            "--fix: recompute is given twice");
  EXPECT_EQ(errorOf("schedule=1f1b,schedule=gpipe"),
            "--fix: schedule is given twice");
  EXPECT_EQ(errorOf("recompute=some"),
            "--fix: recompute must be none, selective or full, got 'some'");
  EXPECT_EQ(errorOf("schedule=zb"),
            "--fix: schedule must be gpipe, 1f1b, interleaved, zb-h1, zb-v or "
            "dualpipe-v, got 'zb'");
  EXPECT_EQ(errorOf("schedule=1f1b,v=2"),
            "--fix: v=2 needs schedule=interleaved, zb-v or dualpipe-v");
  EXPECT_EQ(errorOf("schedule=zb-h1,v=2"),
            "--fix: v=2 needs schedule=interleaved, zb-v or dualpipe-v");
  EXPECT_EQ(errorOf("schedule=dualpipe-v,v=4"),
            "--fix: schedule=dualpipe-v runs v=2 chunks per device, got v=4");
  EXPECT_EQ(errorOf(""), "--fix: expected key=value[,key=value...], got ''");
}

} // namespace
