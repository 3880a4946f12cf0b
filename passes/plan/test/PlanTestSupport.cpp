//===- PlanTestSupport.cpp - what the planner's tests set up alike --------===//

#include "passes/plan/test/PlanTestSupport.h"

#include "passes/plan/Search.h"

#include "gtest/gtest.h"

using namespace bm;
using namespace bm::plan;

cost::Cluster test::a100() {
  return llvm::cantFail(cost::getClusterPreset("dgx-a100-80g"));
}

TrainingConfig test::trainingConfig(int gpus, int64_t globalBatch,
                                    llvm::StringRef fix) {
  TrainingConfig config;
  config.gpus = gpus;
  config.globalBatch = globalBatch;
  if (!fix.empty())
    config.fixed = llvm::cantFail(parseFixedChoices(fix));
  return config;
}

Plan test::evaluateFixed(const ModelGraph &graph, int gpus,
                         int64_t globalBatch, llvm::StringRef fix) {
  llvm::Expected<Plan> plan = evaluateConfiguration(
      graph, a100(), trainingConfig(gpus, globalBatch, fix));
  EXPECT_TRUE(!!plan) << fix.str() << ": "
                      << (plan ? std::string() : llvm::toString(plan.takeError()));
  return plan ? std::move(*plan) : Plan();
}
