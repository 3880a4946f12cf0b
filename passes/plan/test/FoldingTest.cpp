//===- FoldingTest.cpp - folded and unfolded searches agree ---------------===//

#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

struct Case {
  int layers;
  int gpus;
  int64_t batch;
};

class FoldingTest : public ::testing::TestWithParam<Case> {};

TEST_P(FoldingTest, FoldedAndUnfoldedFindTheSameBestCost) {
  const Case &c = GetParam();
  GptDims dims;
  dims.layers = c.layers;
  dims.hidden = 1024;
  dims.heads = 16;
  dims.sequence = 512;
  dims.vocab = 8192;
  ModelGraph graph = buildGpt(dims);
  cost::Cluster cluster = a100();
  TrainingConfig config;
  config.gpus = c.gpus;
  config.globalBatch = c.batch;
  llvm::Expected<Plan> folded = searchPlan(graph, cluster, config);
  ASSERT_TRUE(!!folded) << llvm::toString(folded.takeError());
  config.fold = false;
  llvm::Expected<Plan> unfolded = searchPlan(graph, cluster, config);
  ASSERT_TRUE(!!unfolded) << llvm::toString(unfolded.takeError());

  EXPECT_NEAR(folded->stepSeconds, unfolded->stepSeconds,
              1e-9 * folded->stepSeconds);
  EXPECT_EQ(folded->config.str(), unfolded->config.str());
  EXPECT_EQ(folded->layersPerStage, unfolded->layersPerStage);
  // Folded: prologue, one block, epilogue; unfolded: one per layer.
  EXPECT_EQ(folded->blocks.size(), 3u);
  EXPECT_EQ(unfolded->blocks.size(), static_cast<size_t>(c.layers) + 2);
  EXPECT_LT(folded->blockSearches, unfolded->blockSearches);
  // Every unfolded layer got the decisions of the folded block.
  const BlockSharding &block = folded->blocks[1];
  for (int layer = 0; layer < c.layers; ++layer) {
    const BlockSharding &own = unfolded->blocks[1 + layer];
    ASSERT_EQ(own.ops.size(), block.ops.size());
    for (size_t i = 0; i < own.ops.size(); ++i)
      EXPECT_EQ(own.ops[i].factorAxes, block.ops[i].factorAxes);
  }
}

INSTANTIATE_TEST_SUITE_P(SmallModels, FoldingTest,
                         ::testing::Values(Case{4, 8, 64}, Case{8, 16, 64},
                                           Case{6, 32, 96}));

TEST(FoldingSelectiveTest, RecomputedFlopsCountEveryLayer) {
  // Selective recomputation repeats the attention core of every layer, not
  // only of the one a folded block class is searched on: the reported
  // TFLOP/s must not depend on folding.
  GptDims dims;
  dims.layers = 8;
  ModelGraph graph = buildGpt(dims);
  TrainingConfig config =
      trainingConfig(16, 32, "dp=2,tp=4,pp=2,mb=2,recompute=selective");
  Plan folded = llvm::cantFail(evaluateConfiguration(graph, a100(), config));
  config.fold = false;
  Plan unfolded = llvm::cantFail(evaluateConfiguration(graph, a100(), config));
  EXPECT_NEAR(folded.hardwareTflopsPerGpu, unfolded.hardwareTflopsPerGpu,
              1e-9 * unfolded.hardwareTflopsPerGpu);
  EXPECT_GT(folded.hardwareTflopsPerGpu,
            folded.modelFlopsPerStep / (folded.stepSeconds * 16) / 1e12);
}

TEST(FoldingDistinctClassesTest, DistinctClassesSearchEveryLayer) {
  GptDims dims;
  dims.layers = 4;
  dims.distinctClasses = true;
  ModelGraph graph = buildGpt(dims);
  TrainingConfig config = trainingConfig(4, 8);
  llvm::Expected<Plan> plan = searchPlan(graph, a100(), config);
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->numBlockClasses, 4);
  EXPECT_EQ(plan->blocks.size(), 6u);
}

} // namespace
