//===- SearchTest.cpp - the planner's search ------------------------------===//

#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

#include <cmath>
#include <numeric>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

GptDims mediumGpt(int layers) {
  GptDims dims;
  dims.name = "gpt-medium";
  dims.layers = layers;
  dims.hidden = 2048;
  dims.heads = 16;
  dims.sequence = 1024;
  dims.vocab = 32000;
  return dims;
}

Plan plan(const ModelGraph &graph, const cost::Cluster &cluster, int gpus,
          int64_t batch, llvm::StringRef fix = "") {
  llvm::Expected<Plan> result =
      searchPlan(graph, cluster, trainingConfig(gpus, batch, fix));
  EXPECT_TRUE(!!result) << llvm::toString(result.takeError());
  return result ? *result : Plan();
}

TEST(SearchTest, PlanIsConsistent) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  Plan p = plan(graph, a100(), 16, 128);
  const ParallelConfig &c = p.config;
  EXPECT_EQ(c.dp * c.tp * c.pp, 16);
  EXPECT_EQ(int64_t{c.dp} * c.microBatch * c.numMicroBatches, 128);
  EXPECT_EQ(std::accumulate(p.layersPerStage.begin(), p.layersPerStage.end(),
                            0),
            16);
  EXPECT_EQ(p.layersPerStage.size(), static_cast<size_t>(c.pp * c.chunks));
  EXPECT_LE(p.memory.total(), p.deviceMemoryBytes);
  EXPECT_NEAR(p.time.total(), p.stepSeconds, 1e-9 * p.stepSeconds);
  EXPECT_GT(p.mfu, 0.2);
  EXPECT_LT(p.mfu, 0.7);
  EXPECT_GT(p.tokensPerSecond, 0);
  EXPECT_EQ(p.numLayers, 16);
  EXPECT_EQ(p.numBlockClasses, 1);
  EXPECT_EQ(p.sequenceLength, 1024);
  ASSERT_FALSE(p.alternatives.empty());
  for (const Alternative &a : p.alternatives) {
    EXPECT_FALSE(a.reason.empty());
    if (a.fits) {
      EXPECT_GE(a.stepSeconds, p.stepSeconds);
    }
  }
}

TEST(SearchTest, PartialFixConstrainsTheSearch) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  Plan p = plan(graph, a100(), 16, 128, "tp=4,recompute=selective");
  EXPECT_EQ(p.config.tp, 4);
  EXPECT_EQ(p.config.recompute, Recompute::Selective);
  Plan q = plan(graph, a100(), 16, 128, "pp=4,schedule=interleaved");
  EXPECT_EQ(q.config.pp, 4);
  EXPECT_EQ(q.config.schedule, ScheduleKind::Interleaved);
  EXPECT_GE(q.config.chunks, 2);
  EXPECT_EQ(q.layersPerStage.size(), static_cast<size_t>(4 * q.config.chunks));
}

TEST(SearchTest, FixedConfigurationEvaluatesExactly) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  Plan p = evaluateFixed(graph, 16, 128,
                         "dp=2,tp=4,pp=2,mb=2,zero=1,recompute=full,"
                         "schedule=1f1b,stream=replicated");
  EXPECT_EQ(p.config.str(), "dp=2,tp=4,pp=2,mb=2,zero=1,recompute=full,"
                            "schedule=1f1b,v=1,stream=replicated");
  EXPECT_EQ(p.config.numMicroBatches, 32);
  // The search never does worse than a configuration it could have chosen.
  Plan best = plan(graph, a100(), 16, 128);
  EXPECT_LE(best.stepSeconds, p.stepSeconds);
}

TEST(SearchTest, StreamLayoutIsSearchedAndCanBePinned) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  const std::string mesh = "dp=4,tp=4,pp=1,mb=1,zero=1,recompute=none";
  Plan replicated = plan(graph, a100(), 16, 128, mesh + ",stream=replicated");
  Plan sequence = plan(graph, a100(), 16, 128, mesh + ",stream=sequence");
  Plan hidden = plan(graph, a100(), 16, 128, mesh + ",stream=hidden");
  Plan free = plan(graph, a100(), 16, 128, mesh);
  // [batch, sequence, hidden]
  EXPECT_EQ(replicated.config.streamDim, -1);
  EXPECT_EQ(sequence.config.streamDim, 1);
  EXPECT_EQ(hidden.config.streamDim, 2);
  // The search takes the fastest.
  EXPECT_EQ(free.stepSeconds,
            std::min({replicated.stepSeconds, sequence.stepSeconds,
                      hidden.stepSeconds}));
  // Sequence parallelism runs the norms and residual adds on a quarter of
  // the tokens and keeps a quarter of their activations (Korthikanti et al.
  // 2022, section 4.2.2): faster and smaller than Megatron-LM without it.
  EXPECT_LT(sequence.stepSeconds, replicated.stepSeconds);
  EXPECT_LT(sequence.memory.activations, replicated.memory.activations);

  // A hidden size of 1800 does not split 16 ways.
  GptDims oddDims = mediumGpt(2);
  oddDims.hidden = 1800;
  oddDims.heads = 12;
  ModelGraph odd = buildGpt(oddDims);
  auto errorOf = [&](const ModelGraph &model, const char *fix) {
    return errorText(searchPlan(model, a100(), trainingConfig(16, 128, fix)));
  };
  EXPECT_EQ(errorOf(graph, "tp=1,stream=sequence"),
            "--fix stream=sequence needs tp > 1");
  EXPECT_EQ(errorOf(odd, "tp=16,stream=hidden"),
            "--fix stream=hidden: the values between the model's blocks "
            "have no hidden dimension that splits 16 ways");
}

TEST(SearchTest, PipelineBubbleFollowsTheSchedule) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  auto evaluate = [&](const char *fix) {
    return evaluateFixed(graph, 8, 16, fix);
  };
  Plan oneF = evaluate("dp=1,tp=2,pp=4,mb=1,schedule=1f1b");
  Plan gpipe = evaluate("dp=1,tp=2,pp=4,mb=1,schedule=gpipe");
  Plan inter = evaluate("dp=1,tp=2,pp=4,mb=1,schedule=interleaved,v=2");
  // Same bubble for GPipe and 1F1B, (p-1)/m of the busy time: 3/16.
  EXPECT_NEAR(oneF.time.bubble, gpipe.time.bubble, 1e-12);
  double busy = oneF.stepSeconds - oneF.time.bubble;
  // Stages holding the embedding or the LM head are slower than the rest,
  // so the bubble is near, not at, (p-1)/m = 3/16.
  EXPECT_NEAR(oneF.time.bubble / busy, 3.0 / 16, 0.05);
  EXPECT_LT(inter.time.bubble, 0.6 * oneF.time.bubble);
  // GPipe holds all 16 micro-batches, 1F1B at most 4.
  EXPECT_GT(gpipe.memory.activations, 3 * oneF.memory.activations);
}

TEST(SearchTest, RecomputationTradesTimeForMemory) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  auto evaluate = [&](const char *fix) {
    return evaluateFixed(graph, 8, 64, fix);
  };
  Plan none = evaluate("dp=8,tp=1,pp=1,mb=4,recompute=none");
  Plan selective = evaluate("dp=8,tp=1,pp=1,mb=4,recompute=selective");
  Plan full = evaluate("dp=8,tp=1,pp=1,mb=4,recompute=full");
  EXPECT_LT(none.stepSeconds, selective.stepSeconds);
  EXPECT_LT(selective.stepSeconds, full.stepSeconds);
  EXPECT_GT(none.memory.activations, selective.memory.activations);
  EXPECT_GT(selective.memory.activations, full.memory.activations);
  // Full recompute adds one forward: ~4/3 of the compute.
  EXPECT_NEAR(full.time.compute / none.time.compute, 4.0 / 3, 0.05);
  // MFU counts no recompute FLOPs, hardware TFLOP/s does.
  EXPECT_GT(full.hardwareTflopsPerGpu * 1e12 / 312e12, full.mfu);
}

TEST(SearchTest, ZeroShardsModelState) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  auto evaluate = [&](const char *fix) {
    return evaluateFixed(graph, 8, 64, fix);
  };
  Plan z0 = evaluate("dp=8,tp=1,pp=1,mb=1,zero=0");
  Plan z1 = evaluate("dp=8,tp=1,pp=1,mb=1,zero=1");
  Plan z3 = evaluate("dp=8,tp=1,pp=1,mb=1,zero=3");
  // Mixed-precision Adam: 2 + 4 + 12 bytes per parameter.
  EXPECT_NEAR(z0.memory.optimizer, 6 * z0.memory.params, 1);
  EXPECT_NEAR(z1.memory.optimizer, z0.memory.optimizer / 8, 1);
  EXPECT_NEAR(z3.memory.params, z0.memory.params / 8, 1);
  EXPECT_GT(z3.stepSeconds, z0.stepSeconds);
}

TEST(SearchTest, Fp32AndSgd) {
  ModelGraph graph = buildGpt(mediumGpt(4));
  TrainingConfig config = trainingConfig(8, 32);
  config.precision = Precision::Fp32;
  config.optimizer = Optimizer::Sgd;
  config.fixed.zeroStage = 0;
  llvm::Expected<Plan> p = searchPlan(graph, a100(), config);
  ASSERT_TRUE(!!p) << llvm::toString(p.takeError());
  EXPECT_EQ(p->precision, Precision::Fp32);
  // fp32 weights, fp32 gradients, SGD momentum.
  EXPECT_NEAR(p->memory.grads, p->memory.params, 1);
  config.precision = Precision::Bf16Mixed;
  config.optimizer = Optimizer::Adam;
  Plan bf16 = llvm::cantFail(searchPlan(graph, a100(), config));
  EXPECT_LT(bf16.stepSeconds, p->stepSeconds);
}

TEST(SearchTest, Gpt3On1024Gpus) {
  ModelGraph graph = buildGpt(gpt3_175B());
  Plan p = plan(graph, a100(), 1024, 1536);
  EXPECT_LE(p.memory.total(), p.deviceMemoryBytes);
  // 175B parameters cannot live without model parallelism on 80 GB.
  EXPECT_GT(p.config.tp * p.config.pp, 1);
  EXPECT_GT(p.mfu, 0.3);
  EXPECT_FALSE(p.alternatives.empty());
}

TEST(SearchTest, SmallClusterFromV100Preset) {
  ModelGraph graph = buildGpt(mediumGpt(8));
  Plan p = plan(graph, llvm::cantFail(cost::getClusterPreset("alpa-v100")),
                16, 64);
  EXPECT_LE(p.memory.total(), p.deviceMemoryBytes);
  // 25 Gb/s between nodes: keep the chatty axes inside a node.
  EXPECT_LE(p.config.tp, 8);
  // V100s have no bf16: mixed precision there is fp16.
  EXPECT_EQ(p.precision, Precision::Fp16Mixed);
}

} // namespace

namespace {

TEST(SearchTest, StagesAreRebalancedToFitMemory) {
  // 1F1B: stage 0 holds 4 micro-batches in flight, stage 3 one. With 19 GiB
  // the time-balanced split (8 layers each) does not fit on stage 0; moving
  // layers to the later stages does.
  GptDims dims = mediumGpt(32);
  ModelGraph graph = buildGpt(dims);
  auto cluster = [](int gib) {
    return llvm::cantFail(cost::parseCluster(
        "gpus_per_node: 8\npeak_tflops_16bit: 312\npeak_tflops_fp32: 19.5\n"
        "memory_gib: " +
            std::to_string(gib) +
            "\nhbm_gbps: 2039\nintra_node_gbps: 230\ninter_node_gbps: 185\n",
        true, "test.yaml"));
  };
  TrainingConfig config = trainingConfig(4, 64);
  config.fixed = llvm::cantFail(parseFixedChoices(
      "dp=1,tp=1,pp=4,mb=4,zero=0,recompute=none,schedule=1f1b"));
  Plan roomy = llvm::cantFail(evaluateConfiguration(graph, cluster(40), config));
  EXPECT_EQ(roomy.layersPerStage, (std::vector<int>{8, 8, 8, 8}));
  Plan tight = llvm::cantFail(evaluateConfiguration(graph, cluster(19), config));
  EXPECT_LE(tight.memory.total(), tight.deviceMemoryBytes);
  ASSERT_EQ(tight.layersPerStage.size(), 4u);
  EXPECT_LT(tight.layersPerStage.front(), 8);
  EXPECT_EQ(std::accumulate(tight.layersPerStage.begin(),
                            tight.layersPerStage.end(), 0),
            32);
  EXPECT_GT(tight.stepSeconds, roomy.stepSeconds);
  // With too little memory for any split, evaluation says how much it needs.
  llvm::Expected<Plan> tiny =
      evaluateConfiguration(graph, cluster(12), config);
  ASSERT_FALSE(!!tiny);
  std::string message = llvm::toString(tiny.takeError());
  EXPECT_EQ(message.rfind("no plan fits in memory: the smallest needs ", 0),
            0u)
      << message;
  EXPECT_NE(message.find("(dp=1,tp=1,pp=4,mb=4,zero=0,recompute=none,"
                         "schedule=1f1b,v=1, stage 0), the device has 12 GiB"),
            std::string::npos)
      << message;
}

} // namespace

namespace {

TEST(SearchTest, GraphWithoutLayersPlansAsOneStage) {
  // An MLP with no repeated block: everything is prologue, no pipeline.
  GraphBuilder g("mlp");
  int x = g.input("x", {1, 4096}, /*isFloat=*/true, /*batchDim=*/0);
  int h = g.matmul("fc1", x, g.parameter("w1", {4096, 16384}));
  h = g.unary("bm.relu", "relu", h);
  int y = g.matmul("fc2", h, g.parameter("w2", {16384, 4096}));
  g.setOutput(y);
  ModelGraph graph = g.take();
  TrainingConfig config = trainingConfig(8, 4096);
  llvm::Expected<Plan> p = searchPlan(graph, a100(), config);
  ASSERT_TRUE(!!p) << llvm::toString(p.takeError());
  EXPECT_EQ(p->config.pp, 1);
  EXPECT_EQ(p->numLayers, 0);
  EXPECT_EQ(p->blocks.size(), 1u);
  EXPECT_EQ(p->blocks[0].name, "prologue");
  EXPECT_LE(p->memory.total(), p->deviceMemoryBytes);
}

} // namespace

TEST(SearchTest, BmrtMemoryIsWhatTheTrainerHolds) {
  ModelGraph graph = buildGpt(mediumGpt(16));
  cost::Cluster megatron = a100();
  cost::Cluster bmrt = a100();
  bmrt.runtime = cost::RuntimeModel::Bmrt;
  // Gradient buckets (overlap) are checked below; first without them.
  bmrt.gradReduceOverlap = 0;
  auto evaluate = [&](const cost::Cluster &cluster, const char *fix) {
    return llvm::cantFail(
        evaluateConfiguration(graph, cluster, trainingConfig(8, 64, fix)));
  };
  // ZeRO-3: the trainer gathers one parameter at a time around its readers,
  // the largest one's 2 bytes per element, counted as parameters.
  double largest = 0;
  for (const ValueInfo &value : graph.values)
    if (value.kind == ValueKind::Parameter)
      largest = std::max<double>(largest, value.numElements());
  // ZeRO's gathers over dp go through one workspace of dp + 1 chunks of
  // the largest parameter (Parallel::gatherOverDp), 2 bytes each.
  auto gatherWorkspace = [&](const Plan &p) {
    const int dp = p.config.dp;
    if (p.config.zeroStage < 1 || dp <= 1)
      return 0.0;
    return std::ceil(largest / p.config.tp / dp) * (dp + 1) * 2;
  };
  Plan z0 = evaluate(bmrt, "dp=8,tp=1,pp=1,mb=1,zero=0");
  Plan z3 = evaluate(bmrt, "dp=8,tp=1,pp=1,mb=1,zero=3");
  EXPECT_NEAR(z3.memory.params - z0.memory.params / 8, 2 * largest, 1);
  EXPECT_GT(gatherWorkspace(z3), 0);
  EXPECT_NEAR(z3.memory.buffers,
              bmrt.reservedMemoryBytes + gatherWorkspace(z3), 1);
  EXPECT_EQ(z0.memory.buffers, bmrt.reservedMemoryBytes);
  // Eight micro-batches accumulate: the step program's bf16 gradient
  // outputs (2 bytes) beside the fp32 sums; Megatron-LM sums in place.
  Plan inPlace = evaluate(megatron, "dp=8,tp=1,pp=1,mb=1,zero=0");
  ASSERT_EQ(z0.config.numMicroBatches, 8);
  EXPECT_NEAR(z0.memory.grads - inPlace.memory.grads, z0.memory.params, 1);
  // A pipeline stage keeps an arena beside a stash per micro-batch in
  // flight, and its transfer buffers are activations.
  Plan pipeBmrt = evaluate(bmrt, "dp=2,tp=1,pp=4,mb=1,schedule=1f1b");
  Plan pipeMegatron = evaluate(megatron, "dp=2,tp=1,pp=4,mb=1,schedule=1f1b");
  EXPECT_GT(pipeBmrt.memory.activations, pipeMegatron.memory.activations);
  EXPECT_NEAR(pipeBmrt.memory.buffers,
              bmrt.reservedMemoryBytes + gatherWorkspace(pipeBmrt), 1);
  EXPECT_GT(pipeMegatron.memory.buffers, megatron.reservedMemoryBytes);
  // Overlapping the reductions, bmrt reduces flat copies of the gradients
  // (2 bytes each): workspace; under ZeRO 3 in dp + 1 blocks of shards.
  cost::Cluster overlapping = bmrt;
  overlapping.gradReduceOverlap = 0.5;
  Plan bucketed = evaluate(overlapping, "dp=8,tp=1,pp=1,mb=1,zero=0");
  EXPECT_NEAR(bucketed.memory.buffers - z0.memory.buffers, z0.memory.params,
              1);
  Plan bucketed3 = evaluate(overlapping, "dp=8,tp=1,pp=1,mb=1,zero=3");
  EXPECT_NEAR(bucketed3.memory.buffers - z3.memory.buffers,
              z0.memory.params * 9 / 8, 1);
}
