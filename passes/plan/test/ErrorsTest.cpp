//===- ErrorsTest.cpp - one clear line for each user error ----------------===//

#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <set>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

std::string searchError(const ModelGraph &graph, TrainingConfig config,
                        const char *fix = nullptr,
                        const char *cluster = "dgx-a100-80g") {
  if (fix)
    config.fixed = llvm::cantFail(parseFixedChoices(fix));
  std::string message = errorText(searchPlan(
      graph, llvm::cantFail(cost::getClusterPreset(cluster)), config));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

ModelGraph smallGpt() {
  GptDims dims;
  dims.layers = 4;
  return buildGpt(dims);
}

TEST(ErrorsTest, ZeroGpus) {
  TrainingConfig config;
  config.gpus = 0;
  EXPECT_EQ(searchError(smallGpt(), config), "--gpus must be at least 1, got 0");
}

TEST(ErrorsTest, Bf16OnGpusWithoutIt) {
  TrainingConfig config = trainingConfig(8, 8);
  config.precision = Precision::Bf16Mixed;
  EXPECT_EQ(searchError(smallGpt(), config, nullptr, "alpa-v100"),
            "--precision bf16: the V100-SXM2-16GB GPUs of cluster alpa-v100 "
            "have no bf16; use --precision fp16 (mixed, with loss scaling) "
            "or fp32");
  config.precision = Precision::Fp16Mixed;
  EXPECT_EQ(searchError(smallGpt(), config, nullptr, "alpa-v100"), "");
}

TEST(ErrorsTest, GpuCountTheNodesCannotHold) {
  TrainingConfig config = trainingConfig(12, 24);
  EXPECT_EQ(searchError(smallGpt(), config),
            "--gpus 12 cannot be laid out on dgx-a100-80g nodes of 8 GPUs: "
            "use a multiple of 8, or at most 8");
}

TEST(ErrorsTest, MoreGpusThanTheCluster) {
  cost::Cluster cluster = llvm::cantFail(cost::parseCluster(
      "name: lab\ngpus_per_node: 4\nmax_nodes: 2\npeak_tflops_16bit: 100\n"
      "peak_tflops_fp32: 10\nmemory_gib: 24\nhbm_gbps: 900\n"
      "intra_node_gbps: 50\ninter_node_gbps: 10\n",
      true, "lab.yaml"));
  TrainingConfig config = trainingConfig(16, 16);
  llvm::Expected<Plan> plan = searchPlan(smallGpt(), cluster, config);
  ASSERT_FALSE(!!plan);
  EXPECT_EQ(llvm::toString(plan.takeError()),
            "--gpus 16 exceeds cluster lab: 2 nodes of 4 GPUs");
}

TEST(ErrorsTest, FixContradictsGpus) {
  TrainingConfig config = trainingConfig(16, 32);
  EXPECT_EQ(searchError(smallGpt(), config, "dp=4,tp=2,pp=4"),
            "--fix dp=4,tp=2,pp=4 uses 32 GPUs, but --gpus is 16");
  EXPECT_EQ(searchError(smallGpt(), config, "tp=3"),
            "--fix tp=3 does not divide --gpus 16");
  EXPECT_EQ(searchError(smallGpt(), config, "pp=8"),
            "--fix pp=8 exceeds the model's 4 layers");
}

TEST(ErrorsTest, GlobalBatchNotDivisibleByFixedDp) {
  TrainingConfig config = trainingConfig(16, 100);
  EXPECT_EQ(searchError(smallGpt(), config, "dp=8"),
            "--global-batch 100 is not divisible by dp=8");
  EXPECT_EQ(searchError(smallGpt(), config, "dp=4,mb=8"),
            "--global-batch 100 is not divisible by dp x mb = 4 x 8");
  EXPECT_EQ(searchError(smallGpt(), config, "tp=2,pp=2"),
            "");
  EXPECT_EQ(searchError(smallGpt(), config, "tp=1,pp=2"),
            "--global-batch 100 is not divisible by dp=8");
}

TEST(ErrorsTest, GlobalBatchOfPartTokenGroups) {
  // A model that groups the tokens of two samples (GShard's dispatch) plans
  // whole groups; the default batch, one per GPU, rounds up to one group.
  ModelGraph graph = smallGpt();
  graph.batchGranularity = 2;
  EXPECT_EQ(searchError(graph, trainingConfig(8, 9)),
            "--global-batch 9 is not a multiple of 2: the model groups "
            "tokens of 2 samples together (a step must hold whole groups)");
  llvm::Expected<Plan> plan =
      searchPlan(graph, a100(), trainingConfig(1, /*globalBatch=*/0));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->globalBatch, 2);
}

TEST(ErrorsTest, NoConfigurationDividesTheBatch) {
  TrainingConfig config = trainingConfig(8, 7);
  std::string message = searchError(smallGpt(), config, "tp=1");
  EXPECT_NE(message.find("no configuration of 8 GPUs with --fix tp=1 divides "
                         "--global-batch 7"),
            std::string::npos)
      << message;
}

/// The number after `prefix` in `message`, or -1.
int64_t numberAfter(const std::string &message, const std::string &prefix) {
  size_t at = message.find(prefix);
  if (at == std::string::npos)
    return -1;
  return std::strtoll(message.c_str() + at + prefix.size(), nullptr, 10);
}

TEST(ErrorsTest, NoFeasiblePlanSaysHowManyGpusFit) {
  // GPT-3 175B on one DGX: 175e9 x 16 bytes cannot fit in 8 x 80 GiB. The
  // suggested count must fit and the count named too few must not.
  ModelGraph graph = buildGpt(gpt3_175B());
  TrainingConfig config = trainingConfig(8, 64);
  std::string message = searchError(graph, config);
  EXPECT_EQ(message.rfind("no plan fits in memory: the smallest needs ", 0), 0u)
      << message;
  EXPECT_NE(message.find("GiB per GPU"), std::string::npos) << message;
  int64_t enough =
      numberAfter(message, "the device has 80 GiB: a plan fits on ");
  int64_t tooFew = numberAfter(message, "GPUs (");
  ASSERT_GT(enough, 8) << message;
  EXPECT_EQ(tooFew * 2, enough) << message;
  EXPECT_NE(message.find(" are too few)"), std::string::npos) << message;
  EXPECT_EQ(searchError(graph, trainingConfig(enough, 64)), "");
  EXPECT_NE(searchError(graph, trainingConfig(tooFew, 64)), "");
}

TEST(ErrorsTest, NoFeasiblePlanNamesASmallerBatchThatFits) {
  // GPipe keeps every micro-batch of the step in flight: with dp fixed at
  // 1, a smaller global batch holds fewer, and more GPUs split the batch
  // over more data-parallel replicas.
  GptDims dims;
  dims.layers = 8;
  dims.hidden = 1024;
  dims.heads = 16;
  dims.sequence = 2048;
  ModelGraph graph = buildGpt(dims);
  TrainingConfig config = trainingConfig(8, 8192);
  std::string message = searchError(
      graph, config, "dp=1,tp=1,pp=8,mb=1,schedule=gpipe,recompute=none");
  int64_t batch = numberAfter(message, "--global-batch ");
  ASSERT_GT(batch, 0) << message;
  EXPECT_NE(message.find(" fits on these 8 GPUs"), std::string::npos)
      << message;
  EXPECT_EQ(searchError(graph, trainingConfig(8, batch),
                        "dp=1,tp=1,pp=8,mb=1,schedule=gpipe,recompute=none"),
            "");
  EXPECT_NE(searchError(graph, trainingConfig(8, batch * 2),
                        "dp=1,tp=1,pp=8,mb=1,schedule=gpipe,recompute=none"),
            "");
}

/// One head at a 256K sequence: its attention scores are 128 GiB in bf16.
ModelGraph oneHeadLongSequence() {
  GptDims dims;
  dims.layers = 2;
  dims.hidden = 64;
  dims.heads = 1;
  dims.sequence = 256 * 1024;
  return buildGpt(dims);
}

TEST(ErrorsTest, NoFeasiblePlanWhenMoreGpusStopHelping) {
  // Without context parallelism no degree splits the scores (cp=1 pins
  // it), so no count of GPUs and no batch fits.
  std::string message =
      searchError(oneHeadLongSequence(), trainingConfig(8, 8), "cp=1");
  EXPECT_NE(message.find(": more GPUs stop helping (the smallest need is "
                         "still "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(" and no smaller --global-batch fits; use a device "
                         "with more memory"),
            std::string::npos)
      << message;
}

TEST(ErrorsTest, ContextParallelismSplitsScoresNothingElseFits) {
  // Searched only where nothing fits without it: context parallelism
  // splits the queries, and with them the scores, over cp ranks.
  llvm::Expected<Plan> plan =
      searchPlan(oneHeadLongSequence(), a100(), trainingConfig(8, 8));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  EXPECT_GT(plan->config.cp, 1);
  EXPECT_LE(plan->memory.total(), a100().memoryBytes);
  // A model that fits without it does not get it.
  llvm::Expected<Plan> small =
      searchPlan(smallGpt(), a100(), trainingConfig(8, 8));
  ASSERT_TRUE(!!small) << llvm::toString(small.takeError());
  EXPECT_EQ(small->config.cp, 1);
}

/// Four layers of a two-GEMM MLP: no attention anywhere. Without
/// `repeated`, no layer is marked (what the fold finds in a model with no
/// repeated block).
ModelGraph attentionFreeMlp(bool repeated = true) {
  MlpStackDims dims;
  dims.repeated = repeated;
  return buildMlpStack(dims);
}

/// The recomputation of the plan and of up to 50 alternatives on 8 GPUs.
std::set<Recompute> recomputeSearched(const ModelGraph &graph) {
  TrainingConfig config = trainingConfig(8, 64);
  config.numAlternatives = 50;
  Plan plan = llvm::cantFail(searchPlan(graph, a100(), config));
  EXPECT_FALSE(plan.alternatives.empty());
  std::set<Recompute> seen = {plan.config.recompute};
  for (const Alternative &alternative : plan.alternatives)
    seen.insert(alternative.config.recompute);
  return seen;
}

TEST(ErrorsTest, SelectiveRecomputeWithoutAttention) {
  // Selective recomputation drops the attention core: a model without one
  // has nothing to drop, so --fix refuses it and the search never offers
  // it (it would be "none" under another name).
  ModelGraph graph = attentionFreeMlp();
  EXPECT_EQ(searchError(graph, trainingConfig(8, 64), "recompute=selective"),
            "--fix recompute=selective: the model has no attention (no "
            "softmax over a product of two activations), so selective "
            "recomputation drops nothing; use recompute=none or "
            "recompute=full");
  std::set<Recompute> searched = recomputeSearched(graph);
  EXPECT_EQ(searched.count(Recompute::Selective), 0u);
  EXPECT_EQ(searched.count(Recompute::None), 1u);
  // A GPT has attention: selective is searched there.
  EXPECT_EQ(
      searchError(smallGpt(), trainingConfig(8, 64), "recompute=selective"),
      "");
}

TEST(ErrorsTest, RecomputeWithoutLayers) {
  // Recomputation drops and repeats whole layers (or their attention
  // cores): with no layer found, both are none under another name.
  ModelGraph graph = attentionFreeMlp(/*repeated=*/false);
  for (const char *recompute : {"full", "selective"})
    EXPECT_EQ(searchError(graph, trainingConfig(8, 64),
                          (std::string("recompute=") + recompute).c_str()),
              std::string("--fix recompute=") + recompute +
                  ": the model has no repeated layers, and recomputation "
                  "works layer by layer (nothing would be recomputed); use "
                  "recompute=none");
  EXPECT_EQ(recomputeSearched(graph), std::set<Recompute>{Recompute::None});
}

TEST(ErrorsTest, EvaluateNeedsAMesh) {
  TrainingConfig config = trainingConfig(8, 8);
  config.fixed = llvm::cantFail(parseFixedChoices("mb=1"));
  llvm::Expected<Plan> plan = evaluateConfiguration(
      smallGpt(), a100(),
      config);
  ASSERT_FALSE(!!plan);
  EXPECT_EQ(llvm::toString(plan.takeError()),
            "--fix must give the mesh (dp, tp and pp, or two of them) to "
            "evaluate a configuration");
}

TEST(ErrorsTest, UnknownPresetAndMalformedClusterFile) {
  llvm::Expected<cost::Cluster> preset = cost::loadCluster("dgx-b300");
  ASSERT_FALSE(!!preset);
  EXPECT_EQ(llvm::toString(preset.takeError()),
            "unknown cluster preset 'dgx-b300' (presets: alpa-v100, "
            "dgx-a100-80g, dgx-h100-80g; or give a .json / .yaml file)");
  llvm::Expected<cost::Cluster> file =
      cost::parseCluster("gpus_per_node: 8\nmemory_gib: : 3\n", true, "x.yaml");
  ASSERT_FALSE(!!file);
  std::string message = llvm::toString(file.takeError());
  EXPECT_EQ(message.rfind("x.yaml: ", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

} // namespace
