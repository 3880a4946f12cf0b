//===- MoeTest.cpp - expert parallelism for mixture-of-experts models ----===//

#include "passes/plan/IntraOpSearch.h"
#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

/// Switch-style GPT: every second MLP is 16 experts.
GptDims switchGpt(int layers = 8) {
  GptDims dims;
  dims.name = "switch";
  dims.layers = layers;
  dims.hidden = 1024;
  dims.heads = 16;
  dims.sequence = 1024;
  dims.vocab = 32000;
  dims.experts = 16;
  return dims;
}

TEST(MoeTest, DetectsExpertFactorsFromStackedWeights) {
  ModelGraph graph = buildGpt(switchGpt());
  GraphAnalysis analysis(graph, /*fold=*/true);
  EXPECT_TRUE(analysis.hasExperts());
  EXPECT_EQ(analysis.numExperts(), 16);
  int experts = 0;
  for (const Segment &segment : analysis.segments())
    for (int op : segment.ops) {
      const std::string &label = graph.ops[op].label;
      bool isExpertGemm = label.find("moe.experts.fc") != std::string::npos ||
                          label.find("moe.experts.proj") != std::string::npos;
      EXPECT_EQ(analysis.expertFactor(op) >= 0, isExpertGemm) << label;
      experts += isExpertGemm;
    }
  EXPECT_EQ(experts, 2);
  // Dense models have none.
  GraphAnalysis dense(buildGpt(GptDims()), true);
  EXPECT_FALSE(dense.hasExperts());
}

TEST(MoeTest, ExpertParallelismSplitsExpertWeights) {
  ModelGraph graph = buildGpt(switchGpt());
  Plan replicated =
      evaluateFixed(graph, 16, 64, "dp=16,tp=1,pp=1,ep=1,mb=1,zero=0");
  Plan split = evaluateFixed(graph, 16, 64, "dp=16,tp=1,pp=1,ep=8,mb=1,zero=0");
  EXPECT_EQ(split.config.ep, 8);
  EXPECT_LT(split.memory.params, 0.5 * replicated.memory.params);
  bool sawAllToAll = false;
  for (const CollectiveSummary &c : split.collectives)
    if (c.axis == "ep") {
      sawAllToAll = true;
      EXPECT_EQ(c.kind, "all_to_all");
      // Dispatch and combine, forward and backward, per micro-batch, in each
      // of the 4 MoE layers.
      EXPECT_EQ(c.countPerStep, 4 * 4 * 4);
    }
  EXPECT_TRUE(sawAllToAll);
  for (const CollectiveSummary &c : replicated.collectives)
    EXPECT_NE(c.axis, "ep");
  // The expert GEMMs put their expert factor on the ep axis.
  bool sawExpertAxis = false;
  for (const BlockSharding &block : split.blocks)
    for (const OpSharding &op : block.ops)
      for (const auto &[factor, axis] : op.factorAxes)
        sawExpertAxis |= axis == "ep";
  EXPECT_TRUE(sawExpertAxis);
  EXPECT_EQ(split.config.str(),
            "dp=16,ep=8,tp=1,pp=1,mb=1,zero=0,recompute=none,schedule=none,"
            "v=1");
}

TEST(MoeTest, SearchChoosesAnExpertParallelDegree) {
  ModelGraph graph = buildGpt(switchGpt());
  TrainingConfig config = trainingConfig(16, 64);
  Plan plan = llvm::cantFail(searchPlan(graph, a100(), config));
  // Splitting the experts over ep beats replicating them, and the search
  // finds that by itself.
  EXPECT_GT(plan.config.ep, 1) << plan.config.str();
  config.fixed = llvm::cantFail(parseFixedChoices("ep=1"));
  Plan replicated = llvm::cantFail(searchPlan(graph, a100(), config));
  EXPECT_LT(plan.stepSeconds, replicated.stepSeconds);
  EXPECT_LE(plan.memory.total(), plan.deviceMemoryBytes);
  EXPECT_EQ(plan.numBlockClasses, 2);
}

TEST(MoeTest, FoldedAndUnfoldedAgree) {
  GptDims dims = switchGpt(4);
  ModelGraph graph = buildGpt(dims);
  TrainingConfig config = trainingConfig(16, 64);
  Plan folded = llvm::cantFail(searchPlan(graph, a100(), config));
  config.fold = false;
  Plan unfolded = llvm::cantFail(searchPlan(graph, a100(), config));
  EXPECT_NEAR(folded.stepSeconds, unfolded.stepSeconds,
              1e-9 * folded.stepSeconds);
  EXPECT_EQ(folded.config.str(), unfolded.config.str());
}

TEST(MoeTest, ExpertDegreeErrors) {
  TrainingConfig config = trainingConfig(16, 64);
  config.fixed = llvm::cantFail(parseFixedChoices("ep=2"));
  llvm::Expected<Plan> dense = searchPlan(buildGpt(GptDims()), a100(), config);
  ASSERT_FALSE(!!dense);
  EXPECT_EQ(llvm::toString(dense.takeError()),
            "--fix ep=2 needs a mixture-of-experts model (no op of this one "
            "has an expert factor)");
  config.fixed = llvm::cantFail(parseFixedChoices("ep=3"));
  llvm::Expected<Plan> moe = searchPlan(buildGpt(switchGpt()), a100(), config);
  ASSERT_FALSE(!!moe);
  EXPECT_EQ(llvm::toString(moe.takeError()),
            "--fix ep=3 does not divide the 16 experts");
}

} // namespace
