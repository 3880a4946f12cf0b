//===- SharedParametersPlanTest.cpp - parameters several stages hold ------===//
//
// A GPT whose LM head reads the token embedding (GPT-2 and GPT-3 tie them):
// pipeline stages that read it each hold a copy with its gradient and
// optimizer state, and once the pipeline has drained its gradient is
// all-reduced over pp. Megatron-LM keeps it on the first and the last stage
// (its embedding group); bmrt on every stage, and under an interleaved
// schedule every chunk writes its own gradient of it.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/GraphAnalysis.h"
#include "passes/plan/PlanOutput.h"
#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

constexpr int64_t kVocab = 128, kHidden = 64, kSequence = 32;
constexpr double kEmbedding = kVocab * kHidden;

ModelGraph tiedGpt(bool tied = true) {
  GptDims dims;
  dims.name = "gpt-tied";
  dims.layers = 4;
  dims.hidden = kHidden;
  dims.vocab = kVocab;
  dims.sequence = kSequence;
  dims.tiedEmbeddings = tied;
  return buildGpt(dims);
}

cost::Cluster bmrtA100() {
  cost::Cluster cluster = a100();
  cluster.runtime = cost::RuntimeModel::Bmrt;
  return cluster;
}

Plan evaluate(const ModelGraph &graph, const cost::Cluster &cluster, int gpus,
              int64_t batch, llvm::StringRef fix) {
  llvm::Expected<Plan> plan =
      evaluateConfiguration(graph, cluster, trainingConfig(gpus, batch, fix));
  EXPECT_TRUE(!!plan) << errorText(std::move(plan));
  if (!plan)
    return Plan();
  EXPECT_EQ(inconsistency(*plan), std::nullopt);
  return *plan;
}

/// The memory of pipeline rank `device` (its stage group's first device).
const MemoryBreakdown &memoryOf(const Plan &plan, int device) {
  const MemoryBreakdown *found = &plan.stageMemory.front();
  for (const MemoryBreakdown &stage : plan.stageMemory)
    if (stage.stage <= device)
      found = &stage;
  return *found;
}

/// The items of the all-reduce over pp of the shared gradients.
std::vector<CostItem> sharedSums(const Plan &plan) {
  std::vector<CostItem> sums;
  for (const CostItem &item : plan.items)
    if (item.axis == kPipelineAxis && item.what == "all_reduce")
      sums.push_back(item);
  return sums;
}

// 16 GPUs: dp4 x pp4, a layer per stage, one more node than 8 GPUs fill.
constexpr const char *kPipeline =
    "dp=4,tp=1,pp=4,mb=1,zero=1,recompute=none,schedule=1f1b";

TEST(SharedParametersPlanTest, TheTiedEmbeddingIsSharedAndReadByItsEnds) {
  ModelGraph graph = tiedGpt();
  GraphAnalysis analysis(graph, /*fold=*/true);
  ASSERT_EQ(analysis.sharedParameters().size(), 1u);
  EXPECT_EQ(graph.values[analysis.sharedParameters()[0]].name, "wte.weight");
  std::vector<Segment> segments = analysis.segments();
  for (size_t s = 0; s < segments.size(); ++s)
    EXPECT_EQ(analysis.sharedParametersRead(static_cast<int>(s)),
              segments[s].kind == SegmentKind::Layer ? 0u : 1u)
        << segments[s].name;

  ModelGraph untied = tiedGpt(/*tied=*/false);
  EXPECT_TRUE(GraphAnalysis(untied, true).sharedParameters().empty());
}

TEST(SharedParametersPlanTest, MegatronHoldsItOnTheFirstAndTheLastStage) {
  Plan plan = evaluate(tiedGpt(), a100(), 16, 16, kPipeline);
  const double bytes = 2; // bf16 parameters
  double middle = memoryOf(plan, 1).params;
  EXPECT_EQ(memoryOf(plan, 2).params, middle);
  EXPECT_EQ(memoryOf(plan, 0).params - middle,
            (kEmbedding + kSequence * kHidden) * bytes); // wte, wpe
  EXPECT_EQ(memoryOf(plan, 3).params - middle,
            (kEmbedding + 2 * kHidden) * bytes); // wte, ln_f

  // Its fp32 gradient all-reduced by the two holders, once each, across
  // nodes: the pipeline spans two.
  std::vector<CostItem> sums = sharedSums(plan);
  ASSERT_EQ(sums.size(), 2u);
  for (const CostItem &sum : sums) {
    EXPECT_TRUE(sum.stage == 0 || sum.stage == 3) << sum.stage;
    EXPECT_EQ(sum.devices, 1);
    EXPECT_EQ(sum.bytes, kEmbedding * 4);
    EXPECT_EQ(sum.count, 1);
    EXPECT_EQ(sum.link, "network");
    EXPECT_EQ(sum.phase, "step");
    EXPECT_TRUE(sum.afterPipeline);
    EXPECT_GT(sum.seconds, 0);
  }
  bool listed = false;
  for (const CollectiveSummary &c : plan.collectives)
    if (c.axis == kPipelineAxis && c.kind == "all_reduce") {
      listed = true;
      EXPECT_EQ(c.where, "shared gradients");
      EXPECT_EQ(c.countPerStep, 2);
    }
  EXPECT_TRUE(listed);
}

TEST(SharedParametersPlanTest, WithoutTiesNothingIsSummedOverPp) {
  Plan plan = evaluate(tiedGpt(false), a100(), 16, 16, kPipeline);
  EXPECT_TRUE(sharedSums(plan).empty());
}

TEST(SharedParametersPlanTest, BmrtGivesEveryStageACopy) {
  ModelGraph graph = tiedGpt();
  Plan megatron = evaluate(graph, a100(), 16, 16, kPipeline);
  Plan bmrt = evaluate(graph, bmrtA100(), 16, 16, kPipeline);
  for (int device : {1, 2})
    EXPECT_EQ(memoryOf(bmrt, device).params - memoryOf(megatron, device).params,
              kEmbedding * 2);
  for (int device : {0, 3})
    EXPECT_EQ(memoryOf(bmrt, device).params, memoryOf(megatron, device).params);
  // Every pipeline rank takes part in the sum (Parallel::sumOverStages).
  int64_t calls = 0;
  for (const CostItem &sum : sharedSums(bmrt)) {
    EXPECT_EQ(sum.bytes, kEmbedding * 4);
    calls += sum.count * sum.devices;
  }
  EXPECT_EQ(calls, 4);
}

TEST(SharedParametersPlanTest, ZeroTwoAndThreeSumTheDpShard) {
  ModelGraph graph = tiedGpt();
  for (const char *zero : {"2", "3"}) {
    Plan plan = evaluate(
        graph, bmrtA100(), 16, 16,
        "dp=4,tp=1,pp=4,mb=1,recompute=none,schedule=1f1b,zero=" +
            std::string(zero));
    std::vector<CostItem> sums = sharedSums(plan);
    ASSERT_FALSE(sums.empty()) << "zero=" << zero;
    for (const CostItem &sum : sums)
      EXPECT_EQ(sum.bytes, kEmbedding * 4 / 4) << "zero=" << zero;
  }
}

// Under the interleaved schedule bmrt keeps one copy per rank, but each of
// its chunks writes its own gradient (bf16, 2 bytes) before the sum.
TEST(SharedParametersPlanTest, BmrtChunksEachWriteAGradient) {
  ModelGraph graph = tiedGpt();
  Plan oneChunk = evaluate(graph, bmrtA100(), 2, 4,
                           "dp=1,tp=1,pp=2,mb=1,zero=0,recompute=none,"
                           "schedule=1f1b");
  Plan twoChunks = evaluate(graph, bmrtA100(), 2, 4,
                            "dp=1,tp=1,pp=2,mb=1,zero=0,recompute=none,"
                            "schedule=interleaved,v=2");
  for (int device : {0, 1}) {
    ASSERT_EQ(memoryOf(twoChunks, device).params,
              memoryOf(oneChunk, device).params);
    EXPECT_EQ(memoryOf(twoChunks, device).grads -
                  memoryOf(oneChunk, device).grads,
              kEmbedding * 2);
  }
}

} // namespace
