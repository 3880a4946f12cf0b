//===- IntraOpSearchTest.cpp - per-op sharding of one block ---------------===//

#include "passes/plan/IntraOpSearch.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

#include <map>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

/// Which role the tp-split factor plays in a matmul: "rows" (the
/// contraction, K), "columns" (N), "heads" (a batch factor of a batched
/// matmul), "none".
std::string splitRole(const ModelGraph &graph, int op, int factor) {
  if (factor < 0)
    return "none";
  const ShardingRule &rule = graph.ops[op].rule;
  if (rule.factorKinds[factor] == FactorKind::Reduction)
    return "rows";
  bool inA = dimOfFactor(rule.operandFactors[0], factor) >= 0;
  bool inB = dimOfFactor(rule.operandFactors[1], factor) >= 0;
  if (inA && inB)
    return "heads";
  return inB ? "columns" : "m";
}

class MegatronPatternTest : public ::testing::Test {
protected:
  void solveBlock(int tp, int microBatch, int streamDim = -1) {
    GptDims dims = megatron18B();
    dims.layers = 2;
    graph_ = buildGpt(dims);
    GraphAnalysis analysis(graph_, true);
    std::vector<Segment> segments = analysis.segments();
    ASSERT_EQ(segments.size(), 3u);
    segment_ = segments[1];
    cost::Cluster cluster = a100();
    cost::CostModel model(cluster, cost::Precision::Bf16Mixed);
    cost::CommGroup group = cost::placeMesh(cluster, 1, tp, 1).tp;
    solution_ = solveSegment(analysis, segment_, model, group, microBatch,
                             streamDim);
    for (size_t i = 0; i < segment_.ops.size(); ++i) {
      int op = segment_.ops[i];
      if (graph_.ops[op].opName != "bm.matmul")
        continue;
      std::string label = graph_.ops[op].label;
      label = label.substr(label.find('.') + 1);
      roles_[label] = splitRole(graph_, op, solution_.tpFactor[i]);
    }
  }

  int count(cost::CollectiveKind kind, Phase phase) const {
    int n = 0;
    for (const SegmentCollective &c : solution_.collectives)
      n += c.kind == kind && c.phase == phase;
    return n;
  }

  ModelGraph graph_;
  Segment segment_;
  SegmentSolution solution_;
  std::map<std::string, std::string> roles_;
};

TEST_F(MegatronPatternTest, FindsMegatronShardingAtTp8) {
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 1));
  // Shoeybi et al. 2019, section 3: column-parallel QKV and first MLP GEMM,
  // attention split by heads, row-parallel output projections.
  EXPECT_EQ(roles_["attn.c_attn"], "columns");
  EXPECT_EQ(roles_["attn.scores"], "heads");
  EXPECT_EQ(roles_["attn.context"], "heads");
  EXPECT_EQ(roles_["attn.c_proj"], "rows");
  EXPECT_EQ(roles_["mlp.c_fc"], "columns");
  EXPECT_EQ(roles_["mlp.c_proj"], "rows");
  // Two all-reduces forward (after each row-parallel GEMM), two backward
  // (the inputs of the column-parallel GEMMs), nothing else.
  EXPECT_EQ(count(cost::CollectiveKind::AllReduce, Phase::Forward), 2);
  EXPECT_EQ(count(cost::CollectiveKind::AllReduce, Phase::Backward), 2);
  EXPECT_EQ(solution_.collectives.size(), 4u);
  // Parameters are split eight ways (only LayerNorm and the row-parallel
  // biases stay replicated).
  EXPECT_LT(solution_.paramsPerGpu, solution_.paramsTotal / 7.9);
}

TEST_F(MegatronPatternTest, SamePatternAtTp2AndLargerMicroBatch) {
  ASSERT_NO_FATAL_FAILURE(solveBlock(2, 4));
  EXPECT_EQ(roles_["attn.c_attn"], "columns");
  EXPECT_EQ(roles_["attn.c_proj"], "rows");
  EXPECT_EQ(roles_["mlp.c_fc"], "columns");
  EXPECT_EQ(roles_["mlp.c_proj"], "rows");
  EXPECT_EQ(count(cost::CollectiveKind::AllReduce, Phase::Forward), 2);
  EXPECT_EQ(count(cost::CollectiveKind::AllReduce, Phase::Backward), 2);
}

TEST_F(MegatronPatternTest, NoTensorParallelismMeansNoCollectives) {
  ASSERT_NO_FATAL_FAILURE(solveBlock(1, 1));
  EXPECT_TRUE(solution_.collectives.empty());
  for (int factor : solution_.tpFactor)
    EXPECT_EQ(factor, -1);
  EXPECT_DOUBLE_EQ(solution_.paramsPerGpu, solution_.paramsTotal);
}

TEST_F(MegatronPatternTest, AttentionCoreIsTheSequenceSquaredPart) {
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 1));
  EXPECT_GT(solution_.attentionCoreCompute, 0);
  EXPECT_LT(solution_.attentionCoreCompute, solution_.forwardCompute);
  EXPECT_LT(solution_.storedBytesSelective, solution_.storedBytes);
  // Full recompute keeps only the block input: [1, 2048, 6144] in bf16.
  EXPECT_DOUBLE_EQ(solution_.inputBytes, 2048.0 * 6144 * 2);
  EXPECT_DOUBLE_EQ(solution_.outputBytes, 2048.0 * 6144 * 2);
}

TEST_F(MegatronPatternTest, SplitStreamTradesAllReducesForScatterAndGather) {
  // The values between blocks split along the hidden dim (2): each
  // row-parallel GEMM's partial sum is reduce-scattered into the stream and
  // gathered again before the next column-parallel GEMM (the collectives of
  // Korthikanti et al. 2022's sequence parallelism, along hidden), with the
  // same GEMM sharding as Megatron-LM.
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 1, /*streamDim=*/2));
  EXPECT_EQ(roles_["attn.c_attn"], "columns");
  EXPECT_EQ(roles_["attn.c_proj"], "rows");
  EXPECT_EQ(roles_["mlp.c_fc"], "columns");
  EXPECT_EQ(roles_["mlp.c_proj"], "rows");
  EXPECT_EQ(count(cost::CollectiveKind::AllReduce, Phase::Forward), 0);
  EXPECT_EQ(count(cost::CollectiveKind::ReduceScatter, Phase::Forward), 2);
  EXPECT_EQ(count(cost::CollectiveKind::AllGather, Phase::Forward), 2);
  // Full recompute keeps the block input, now one eighth per GPU.
  EXPECT_DOUBLE_EQ(solution_.inputBytes, 2048.0 * 6144 * 2 / 8);
  // The residual adds run on slices: less memory-bound time than with a
  // replicated stream.
  double splitCompute = solution_.forwardCompute;
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 1));
  EXPECT_LT(splitCompute, solution_.forwardCompute);
}

TEST_F(MegatronPatternTest, SequenceStreamIsMegatronSequenceParallelism) {
  // Korthikanti et al. 2022, figure 5: the norms run on a slice of the
  // sequence; an all-gather along the sequence before each column-parallel
  // GEMM and a reduce-scatter after each row-parallel one, forward, and
  // the conjugates backward. No all-reduce of activations is left; the
  // norms' weights get partial gradients, reduced once per step.
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 1, /*streamDim=*/1));
  EXPECT_EQ(roles_["attn.c_attn"], "columns");
  EXPECT_EQ(roles_["attn.c_proj"], "rows");
  EXPECT_EQ(roles_["mlp.c_fc"], "columns");
  EXPECT_EQ(roles_["mlp.c_proj"], "rows");
  for (Phase phase : {Phase::Forward, Phase::Backward}) {
    EXPECT_EQ(count(cost::CollectiveKind::AllGather, phase), 2);
    EXPECT_EQ(count(cost::CollectiveKind::ReduceScatter, phase), 2);
    EXPECT_EQ(count(cost::CollectiveKind::AllReduce, phase), 0);
  }
  EXPECT_GT(count(cost::CollectiveKind::AllReduce, Phase::Step), 0);
  EXPECT_DOUBLE_EQ(solution_.inputBytes, 2048.0 * 6144 * 2 / 8);
}

TEST_F(MegatronPatternTest, ActivationMemoryMatchesKorthikanti) {
  // Korthikanti et al. 2022, section 4 and table 2: bytes a GPT layer keeps
  // for backward per micro-batch, without dropout (whose masks and outputs
  // the paper adds: 2sbh + 3as^2b): 32sbh + 2as^2b on one GPU (the inputs of
  // the two norms, the four GEMMs, Q, K, V, GELU and the softmax output);
  // with tensor parallelism the norms' inputs and the GEMMs fed by a norm
  // stay whole: sbh(8 + 24/t) + 2as^2b/t; sequence parallelism splits
  // everything: (32sbh + 2as^2b)/t. Selective recomputation drops the
  // softmax output.
  const double s = 2048, h = 6144, a = 48, b = 1, sbh = s * b * h;
  const double as2b = a * s * s * b;
  const double t = 8;
  ASSERT_NO_FATAL_FAILURE(solveBlock(1, 1));
  EXPECT_DOUBLE_EQ(solution_.storedBytes, 32 * sbh + 2 * as2b);
  EXPECT_DOUBLE_EQ(solution_.storedBytesSelective, 32 * sbh);
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 1));
  EXPECT_DOUBLE_EQ(solution_.storedBytes, sbh * (8 + 24 / t) + 2 * as2b / t);
  EXPECT_DOUBLE_EQ(solution_.storedBytesSelective, sbh * (8 + 24 / t));
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 1, /*streamDim=*/1));
  EXPECT_DOUBLE_EQ(solution_.storedBytes, (32 * sbh + 2 * as2b) / t);
  EXPECT_DOUBLE_EQ(solution_.storedBytesSelective, 32 * sbh / t);
}

TEST_F(MegatronPatternTest, Tensor2SplitsSamplesAndWeightRows) {
  // A tp=8 x tp2=2 grid against tp=8 alone: the same Megatron choice per
  // op; half the samples (so half the stored activations) and half of
  // every weight, whose tp2 shards each reader gathers forward and again
  // backward and whose gradient is reduce-scattered backward.
  ASSERT_NO_FATAL_FAILURE(solveBlock(8, 2));
  const SegmentSolution line = solution_;
  cost::Cluster cluster = a100();
  cost::CostModel model(cluster, cost::Precision::Bf16Mixed);
  GraphAnalysis analysis(graph_, true);
  cost::MeshPlacement placement = cost::placeMesh(cluster, 1, 8, 1, 1, 1, 2);
  MeshSplits splits;
  splits.tp2 = 2;
  splits.tp2Group = placement.tp2;
  solution_ =
      solveSegment(analysis, segment_, model, placement.tp, 2, -1, 1.0, splits);
  EXPECT_EQ(solution_.tpFactor, line.tpFactor);
  // Half the rows: each GEMM at a little less efficiency than twice as
  // large a one.
  EXPECT_GE(solution_.forwardCompute * 2, line.forwardCompute);
  EXPECT_NEAR(solution_.forwardCompute * 2, line.forwardCompute,
              0.05 * line.forwardCompute);
  EXPECT_NEAR(solution_.paramsPerGpu * 2, line.paramsPerGpu,
              line.paramsPerGpu * 0.01);
  int forward = 0, backward = 0, scatters = 0;
  for (const SegmentCollective &c : solution_.collectives) {
    if (!c.overTensor2)
      continue;
    if (c.kind == cost::CollectiveKind::ReduceScatter) {
      ++scatters;
      EXPECT_EQ(c.phase, Phase::Backward);
    } else {
      EXPECT_EQ(c.kind, cost::CollectiveKind::AllGather);
      ++(c.phase == Phase::Forward ? forward : backward);
    }
  }
  // Every weight and norm gain read forward, those a backward reads (not
  // the biases) again, every gradient scattered.
  EXPECT_GE(backward, 4); // the four GEMMs' weights at least
  EXPECT_GT(forward, backward);
  EXPECT_EQ(scatters, forward);
  EXPECT_GT(solution_.tensor2Comm, 0);
  EXPECT_DOUBLE_EQ(solution_.storedBytes, line.storedBytes / 2);
}

TEST(DescribeSegmentTest, WritesFactorAxesAndPartialResults) {
  GptDims dims;
  dims.layers = 1;
  dims.hidden = 1024;
  dims.heads = 16;
  dims.sequence = 512;
  ModelGraph graph = buildGpt(dims);
  GraphAnalysis analysis(graph, true);
  std::vector<Segment> segments = analysis.segments();
  cost::Cluster cluster = a100();
  cost::CostModel model(cluster, cost::Precision::Bf16Mixed);
  SegmentSolution solution = solveSegment(
      analysis, segments[1], model, cost::placeMesh(cluster, 1, 4, 1).tp, 1);
  BlockSharding block = describeSegment(analysis, segments[1], solution);
  ASSERT_EQ(block.ops.size(), segments[1].ops.size());
  bool sawRowParallel = false;
  for (const OpSharding &op : block.ops) {
    if (op.label != "layer0.attn.c_proj")
      continue;
    sawRowParallel = true;
    // ([b, s, k], [k, n]) -> ([b, s, n]): b on dp, k on tp, result partial.
    EXPECT_EQ(op.rule, "([i, j, k], [k, l]) -> ([i, j, l]) {i=1, j=512, k=1024, "
                       "l=1024} reduction={k}");
    ASSERT_EQ(op.factorAxes.size(), 2u);
    EXPECT_EQ(op.factorAxes[0], std::make_pair(std::string("i"),
                                               std::string("dp")));
    EXPECT_EQ(op.factorAxes[1], std::make_pair(std::string("k"),
                                               std::string("tp")));
    EXPECT_EQ(op.operands[1].dims[0], std::vector<std::string>{"tp"});
    EXPECT_EQ(op.results[0].partialAxes, std::vector<std::string>{"tp"});
  }
  EXPECT_TRUE(sawRowParallel);
}

} // namespace
