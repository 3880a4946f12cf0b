//===- MegatronQualityTest.cpp - plan quality against Megatron-LM ---------===//
//
// Narayanan et al. 2021 (SC'21), Table 1, on DGX A100 80GB (Selene), with
// the micro-batch sizes and full ("uniform") recomputation of the paper's
// scripts (Megatron-LM examples/sc21/run_table_1.sh). The cost model is
// calibrated once from hardware numbers (cost/Cluster.cpp); these
// rows are not special-cased anywhere.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

struct Row {
  GptDims dims;
  int gpus;
  int64_t batch;
  const char *paperConfig;
  double paperTflops;
};

class MegatronQualityTest : public ::testing::TestWithParam<Row> {};

TEST_P(MegatronQualityTest, PlansAtLeastAsFastAsThePaper) {
  const Row &row = GetParam();
  ModelGraph graph = buildGpt(row.dims);
  cost::Cluster cluster = a100();
  TrainingConfig config;
  config.gpus = row.gpus;
  config.globalBatch = row.batch;

  TrainingConfig paper = config;
  paper.fixed = llvm::cantFail(parseFixedChoices(row.paperConfig));
  llvm::Expected<Plan> paperPlan = evaluateConfiguration(graph, cluster, paper);
  ASSERT_TRUE(!!paperPlan) << llvm::toString(paperPlan.takeError());
  EXPECT_LE(paperPlan->memory.total(), cluster.memoryBytes)
      << "the paper's configuration ran on 80 GB GPUs";
  double tflops = megatronFlops(row.dims, row.batch) /
                  (paperPlan->stepSeconds * row.gpus) / 1e12;
  EXPECT_NEAR(tflops, row.paperTflops, 0.2 * row.paperTflops)
      << row.dims.name << ": predicted " << tflops << " TFLOP/s per GPU";

  llvm::Expected<Plan> plan = searchPlan(graph, cluster, config);
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  EXPECT_LE(plan->stepSeconds, paperPlan->stepSeconds * (1 + 1e-12));
  EXPECT_LE(plan->memory.total(), cluster.memoryBytes);
}

INSTANTIATE_TEST_SUITE_P(
    Table1, MegatronQualityTest,
    ::testing::Values(
        Row{megatron1_7B(), 32, 512,
            "dp=32,tp=1,pp=1,mb=16,zero=0,recompute=full", 137},
        Row{megatron18B(), 256, 1024,
            "dp=32,tp=8,pp=1,mb=8,zero=0,recompute=full", 135},
        Row{megatron39B(), 512, 1536,
            "dp=32,tp=8,pp=2,mb=4,zero=0,recompute=full,schedule=1f1b", 138}),
    [](const ::testing::TestParamInfo<Row> &info) {
      std::string name = info.param.dims.name;
      for (char &c : name)
        if (!isalnum(static_cast<unsigned char>(c)))
          c = '_';
      return name;
    });

} // namespace
