//===- ErrorsTest.cpp - one clear line for each user error ----------------===//

#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

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

TEST(ErrorsTest, NoConfigurationDividesTheBatch) {
  TrainingConfig config = trainingConfig(8, 7);
  std::string message = searchError(smallGpt(), config, "tp=1");
  EXPECT_NE(message.find("no configuration of 8 GPUs with --fix tp=1 divides "
                         "--global-batch 7"),
            std::string::npos)
      << message;
}

TEST(ErrorsTest, NoFeasiblePlanSaysWhatWouldFit) {
  // GPT-3 175B on one DGX: 175e9 x 16 bytes cannot fit in 8 x 80 GiB.
  ModelGraph graph = buildGpt(gpt3_175B());
  TrainingConfig config = trainingConfig(8, 64);
  std::string message = searchError(graph, config);
  EXPECT_NE(message.find("no plan fits in memory: the smallest needs "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("GiB per GPU"), std::string::npos) << message;
  EXPECT_NE(message.find("the device has 80 GiB: use >= "), std::string::npos)
      << message;
  EXPECT_NE(message.find("GPUs or a smaller --global-batch"),
            std::string::npos)
      << message;
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
