//===- CalibratedPlanTest.cpp - plans follow a cluster's measured curves --===//
//
// Issue 15: "a plan made with a calibrated file differs from the preset's
// where the curves differ". The curves here are synthetic: the preset's own
// analytic numbers, except where a test makes one of them much slower.
//
//===----------------------------------------------------------------------===//

#include "cost/CostModel.h"
#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;
using cost::CollectiveKind;

namespace {

/// A 4-layer GPT with h = 2048: big enough that splitting it pays on A100s.
ModelGraph smallGpt() {
  GptDims dims;
  dims.name = "gpt-small";
  dims.layers = 4;
  dims.hidden = 2048;
  dims.heads = 16;
  dims.sequence = 1024;
  dims.vocab = 32000;
  return buildGpt(dims);
}

/// The A100 preset with 2-rank NVLink collectives "measured" at `slowdown`
/// times the preset's analytic time, at every power of 4 from 4 B to 64 MiB
/// (the sizes bmc calibrate measures), busbw from the measured time.
cost::Cluster withMeasuredCollectives(double slowdown) {
  cost::Cluster cluster = a100();
  cost::CostModel analytic(cluster, cost::Precision::Bf16Mixed);
  cost::CommGroup pair{2, 2, false};
  for (CollectiveKind kind :
       {CollectiveKind::AllGather, CollectiveKind::AllReduce,
        CollectiveKind::AllToAll, CollectiveKind::ReduceScatter})
    for (double bytes = 4; bytes <= 64 * 1024 * 1024; bytes *= 4) {
      double seconds = slowdown * analytic.collectiveTime(kind, bytes, pair);
      cluster.calibration.collectives.push_back(
          {kind, cost::LinkClass::IntraNode, 2, bytes, seconds,
           bytes * cost::busFactor(kind, 2) / seconds});
    }
  cluster.calibration.machine = "synthetic";
  return cluster;
}

Plan plan(const ModelGraph &graph, const cost::Cluster &cluster,
          llvm::StringRef fix = "") {
  llvm::Expected<Plan> result =
      searchPlan(graph, cluster, trainingConfig(2, 1, fix));
  EXPECT_TRUE(!!result) << llvm::toString(result.takeError());
  return result ? *result : Plan();
}

// Curves equal to the analytic model give the preset's plan, to rounding of
// the log-log interpolation between the measured sizes.
TEST(CalibratedPlanTest, CurvesEqualToThePresetPlanAlike) {
  ModelGraph graph = smallGpt();
  Plan preset = plan(graph, a100());
  Plan same = plan(graph, withMeasuredCollectives(1));
  EXPECT_EQ(same.config.str(), preset.config.str());
  EXPECT_TRUE(same.clusterCalibrated);
  EXPECT_FALSE(preset.clusterCalibrated);
  EXPECT_EQ(same.calibrationMachine, "synthetic");
}

// One sample on two GPUs: the preset splits the layers over tp (a pipeline
// of one micro-batch idles half the time). Measured tensor-parallel
// collectives 100x slower make tp lose to the pipeline, whose transfers the
// curves leave alone.
TEST(CalibratedPlanTest, SlowMeasuredCollectivesAbandonTensorParallelism) {
  ModelGraph graph = smallGpt();
  Plan preset = plan(graph, a100());
  Plan slow = plan(graph, withMeasuredCollectives(100));
  EXPECT_EQ(preset.config.tp, 2) << preset.config.str();
  EXPECT_EQ(slow.config.tp, 1) << slow.config.str();
  EXPECT_EQ(slow.config.pp, 2) << slow.config.str();
  // Pinned to tp=2, the search now keeps every op whole on both ranks
  // rather than pay a collective 100x: no tensor-parallel traffic left, and
  // about twice the compute of the preset's split layers.
  Plan presetTp = plan(graph, a100(), "tp=2");
  Plan slowTp = plan(graph, withMeasuredCollectives(100), "tp=2");
  EXPECT_GT(presetTp.time.nvlink, 0);
  EXPECT_EQ(slowTp.time.nvlink, 0);
  for (const CollectiveSummary &c : slowTp.collectives)
    EXPECT_NE(c.axis, "tp") << c.kind << " " << c.where;
  EXPECT_GT(slowTp.time.compute, 1.5 * presetTp.time.compute);
  EXPECT_GT(slowTp.stepSeconds, slow.stepSeconds);
}

// A measured GEMM grid at a constant rate replaces peak x efficiency: the
// compute of a single GPU follows the rate.
TEST(CalibratedPlanTest, MeasuredGemmRateSetsTheComputeTime) {
  ModelGraph graph = smallGpt();
  auto withGemmRate = [](double tflops) {
    cost::Cluster cluster = a100();
    for (double m : {16, 4096})
      for (double n : {16, 4096})
        for (double k : {16, 4096})
          cluster.calibration.gemm.push_back({m, n, k, tflops * 1e12});
    return cluster;
  };
  auto computeOn = [&](const cost::Cluster &cluster) {
    llvm::Expected<Plan> p = evaluateConfiguration(
        graph, cluster, trainingConfig(1, 1, "dp=1,tp=1,pp=1,mb=1"));
    EXPECT_TRUE(!!p) << llvm::toString(p.takeError());
    return p ? p->time.compute : 0.0;
  };
  double fast = computeOn(withGemmRate(100));
  double slow = computeOn(withGemmRate(10));
  // GEMMs dominate this model's compute; the memory-bound rest is unchanged.
  EXPECT_GT(slow, 5 * fast);
  EXPECT_LT(slow, 10 * fast);
}

} // namespace
