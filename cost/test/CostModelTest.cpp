//===- CostModelTest.cpp - formulas of the cost model ---------------------===//

#include "cost/CostModel.h"

#include "gtest/gtest.h"

using namespace bm::cost;

namespace {

Cluster a100() { return llvm::cantFail(getClusterPreset("dgx-a100-80g")); }

TEST(CostModelTest, GemmEfficiencyPenalisesSkinnyShapes) {
  CostModel model(a100(), Precision::Bf16Mixed);
  double large = model.gemmEfficiency(8192, 8192, 8192);
  EXPECT_GT(large, 0.9 * a100().gemmEfficiency);
  EXPECT_LE(large, a100().gemmEfficiency);
  EXPECT_LT(model.gemmEfficiency(8192, 8192, 64), 0.5 * large * 1.2);
  EXPECT_LT(model.gemmEfficiency(16, 8192, 8192), large / 3);
}

TEST(CostModelTest, PrecisionsByName) {
  for (Precision p :
       {Precision::Bf16Mixed, Precision::Fp16Mixed, Precision::Fp32})
    EXPECT_EQ(parsePrecision(toString(p)), p);
  EXPECT_EQ(parsePrecision("fp8"), std::nullopt);
  Cluster v100 = llvm::cantFail(getClusterPreset("alpa-v100"));
  EXPECT_EQ(defaultPrecision(v100), Precision::Fp16Mixed);
  EXPECT_EQ(defaultPrecision(a100()), Precision::Bf16Mixed);
  // fp16 runs at the fp16 tensor-core peak and keeps 16-bit weights and
  // gradients, fp32 master weights and moments (ZeRO's 16 bytes).
  EXPECT_DOUBLE_EQ(CostModel(v100, Precision::Fp16Mixed).peakFlops(), 125e12);
  EXPECT_EQ(CostModel(v100, Precision::Fp16Mixed).activationBytes(), 2);
  EXPECT_EQ(
      modelStateBytesPerParam(Precision::Fp16Mixed, Optimizer::Adam).total(),
      16);
}

TEST(CostModelTest, CollectiveBusFactors) {
  Cluster cluster = a100();
  CostModel model(cluster, Precision::Bf16Mixed);
  CommGroup group{8, 8, false};
  double bytes = 1e9;
  double latency = cluster.intraNode.latency;
  double bw = cluster.intraNode.busBandwidth;
  EXPECT_NEAR(model.collectiveTime(CollectiveKind::AllReduce, bytes, group),
              14 * latency + bytes * 2 * 7 / 8 / bw, 1e-12);
  EXPECT_NEAR(model.collectiveTime(CollectiveKind::AllGather, bytes, group),
              7 * latency + bytes * 7 / 8 / bw, 1e-12);
  EXPECT_EQ(model.collectiveTime(CollectiveKind::AllReduce, bytes,
                                 CommGroup{1, 1, false}),
            0);
}

TEST(CostModelTest, PlacementTensorInsideNode) {
  Cluster cluster = a100();
  MeshPlacement placement = placeMesh(cluster, 4, 8, 2);
  EXPECT_FALSE(placement.tp.crossesNodes);
  EXPECT_TRUE(placement.dp.crossesNodes);
  EXPECT_EQ(placement.dp.ranksPerNode, 1);
  EXPECT_TRUE(placement.pipelineCrossesNodes);
  // One dp rank per node uses one NIC: 185/8 GB/s.
  CostModel model(cluster, Precision::Bf16Mixed);
  EXPECT_NEAR(model.busBandwidth(placement.dp), 185e9 / 8, 1);
  MeshPlacement small = placeMesh(cluster, 2, 4, 1);
  EXPECT_FALSE(small.dp.crossesNodes);
  EXPECT_EQ(small.dp.ranksPerNode, 2);
  MeshPlacement wide = placeMesh(cluster, 32, 1, 1);
  EXPECT_EQ(wide.dp.ranksPerNode, 8);
  EXPECT_NEAR(model.busBandwidth(wide.dp), 185e9, 1);
}

TEST(CostModelTest, Tensor2RowsFollowTheTensorGroup) {
  // A tp=4 x tp2=2 grid fills a node (ranks tp innermost, then tp2): tp2's
  // pairs are 4 apart in it; dp's replicas are one grid apart, one per
  // node; pp's stages dp x 8 apart.
  MeshPlacement placement = placeMesh(a100(), 2, 4, 2, 1, 1, 2);
  EXPECT_EQ(placement.tp2.size, 2);
  EXPECT_FALSE(placement.tp2.crossesNodes);
  EXPECT_EQ(placement.tp2.ranksPerNode, 2);
  EXPECT_EQ(placement.dp.size, 2);
  EXPECT_TRUE(placement.dp.crossesNodes);
  EXPECT_EQ(placement.dp.ranksPerNode, 1);
  EXPECT_EQ(placement.pp.size, 2);
  EXPECT_TRUE(placement.pipelineCrossesNodes);
  EXPECT_EQ(placeMesh(a100(), 2, 4, 2).tp2.size, 1);
}

TEST(CostModelTest, ExpertParallelGroupsSplitDataParallel) {
  // dp=32 over 4 nodes with tp=1: ep=8 is one node, its dp/ep = 4 peers
  // are one per node.
  MeshPlacement placement = placeMesh(a100(), 32, 1, 1, 8);
  EXPECT_EQ(placement.ep.size, 8);
  EXPECT_FALSE(placement.ep.crossesNodes);
  EXPECT_EQ(placement.expertDp.size, 4);
  EXPECT_TRUE(placement.expertDp.crossesNodes);
  EXPECT_EQ(placement.expertDp.ranksPerNode, 1);
  EXPECT_EQ(placeMesh(a100(), 32, 1, 1).ep.size, 1);
}

TEST(CostModelTest, Bf16AdamKeepsFp32GradientsAsMegatron) {
  // 2 (bf16 weights) + 4 (fp32 gradients) + 12 (fp32 master, moments): the
  // "bf16 param, fp32 grads" row of Megatron-LM's distrib_optimizer.md,
  // 18 bytes, and 6 + 12/d under its distributed optimizer (ZeRO 1).
  ModelStateBytes perParam =
      modelStateBytesPerParam(Precision::Bf16Mixed, Optimizer::Adam);
  EXPECT_EQ(perParam.grads, 4);
  EXPECT_EQ(perParam.total(), 18);
  ModelStateBytes z1 =
      modelStateMemory(1e9, Precision::Bf16Mixed, Optimizer::Adam, 1, 8);
  EXPECT_DOUBLE_EQ(z1.total(), 6e9 + 12e9 / 8);
  EXPECT_DOUBLE_EQ(z1.grads, 4e9);
  ModelStateBytes z3 =
      modelStateMemory(1e9, Precision::Bf16Mixed, Optimizer::Adam, 3, 8);
  EXPECT_DOUBLE_EQ(z3.total(), 18e9 / 8);
  // The update reads the fp32 gradient: 4 + 2 x 12 + 2.
  EXPECT_EQ(optimizerStepBytesPerParam(Precision::Bf16Mixed, Optimizer::Adam),
            30);
}

TEST(CostModelTest, Bubbles) {
  EXPECT_DOUBLE_EQ(pipelineBubbleFraction(ScheduleKind::OneFOneB, 4, 12, 1),
                   0.25);
  EXPECT_DOUBLE_EQ(pipelineBubbleFraction(ScheduleKind::GPipe, 4, 12, 1), 0.25);
  EXPECT_DOUBLE_EQ(pipelineBubbleFraction(ScheduleKind::Interleaved, 4, 12, 3),
                   0.25 / 3);
  EXPECT_DOUBLE_EQ(inFlightMicroBatches(ScheduleKind::OneFOneB, 4, 12, 1, 0),
                   4);
  EXPECT_DOUBLE_EQ(inFlightMicroBatches(ScheduleKind::OneFOneB, 4, 12, 1, 3),
                   1);
  EXPECT_DOUBLE_EQ(inFlightMicroBatches(ScheduleKind::GPipe, 4, 12, 1, 3), 12);
  EXPECT_DOUBLE_EQ(inFlightMicroBatches(ScheduleKind::Interleaved, 4, 12, 2, 0),
                   4 + 1.5);
}

// The zero-bubble closed forms against bmrt's generated lists, simulated
// with F = B = W (the simulator's default: a backward twice the forward,
// half of it W): the activations held per rank from above; and, once a V
// has the 2 pp micro-batches its steady state needs (with fewer, its
// greedy order idles more and holds less), the bubble exactly. ZB-H1's
// activations also within one micro-batch; a V's rank count sums its
// chunks' peaks, which need not coincide (the next test checks each).
TEST(CostModelTest, ZeroBubbleClosedFormsFollowTheGeneratedLists) {
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleH1,
                            ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV})
    for (int pp = 2; pp <= 8; ++pp)
      for (int m = pp; m <= 3 * pp; ++m) {
        bmrt::ScheduleSpec spec;
        spec.kind = kind;
        spec.pp = pp;
        spec.v = bmrt::layoutOf(kind) == bmrt::StageLayout::V ? 2 : 1;
        spec.m = m;
        if (bmrt::scheduleProblem(spec))
          continue; // dualpipe-v below 2 pp micro-batches
        bmrt::SimulationResult run =
            bmrt::simulate(bmrt::generateSchedule(spec), {}, spec.layout());
        ASSERT_TRUE(run.ok()) << run.describe();
        const std::string where = std::string(bmrt::toString(kind)) +
                                  " pp=" + std::to_string(pp) +
                                  " m=" + std::to_string(m);
        // A rank's share of a micro-batch: F + B + W = 3 per chunk.
        const double share = 3.0 * spec.v;
        const bool steady = spec.v == 1 || m >= 2 * pp;
        if (steady)
          EXPECT_NEAR(run.bubble,
                      (pp - 1) * share * bubbleScale(kind, spec.v, {}), 1e-9)
              << where;
        for (int rank = 0; rank < pp; ++rank) {
          double held = (run.peakActivations[rank] +
                         kWeightInputShare * run.peakWeightInputs[rank]) /
                        spec.v;
          double bound = inFlightMicroBatches(kind, pp, m, spec.v, rank);
          EXPECT_LE(held, bound + 1e-9) << where << " rank " << rank;
          if (spec.v == 1)
            EXPECT_GE(held, bound - 1) << where << " rank " << rank;
        }
      }
}

// Per chunk of a V: each chunk's peak from F to B and from B to W, read
// off every rank's generated list, from above, and within one micro-batch
// plus pp / 2 W inputs: ZB-V's greedy holds about 1.4 pp of chunk 0's W
// inputs on its first ranks and pp + 1 on its last; the bound takes the
// first's.
TEST(CostModelTest, VChunksHoldWhatTheGeneratedListsHold) {
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV})
    for (int pp = 2; pp <= 8; ++pp)
      for (int m = 2 * pp; m <= 3 * pp; ++m) {
        bmrt::ScheduleSpec spec{kind, pp, 2, m};
        std::vector<bmrt::RankActions> lists = bmrt::generateSchedule(spec);
        for (int rank = 0; rank < pp; ++rank) {
          int held[2] = {0, 0}, waiting[2] = {0, 0};
          double peak[2] = {0, 0}, peakWaiting[2] = {0, 0};
          for (const bmrt::Action &a : lists[rank]) {
            int c = a.chunk;
            if (a.kind == bmrt::ActionKind::Forward)
              peak[c] = std::max<double>(peak[c], ++held[c]);
            if (a.kind == bmrt::ActionKind::BackwardInput) {
              --held[c];
              peakWaiting[c] = std::max<double>(peakWaiting[c], ++waiting[c]);
            }
            if (a.kind == bmrt::ActionKind::BackwardWeight)
              --waiting[c];
          }
          for (int c = 0; c < 2; ++c) {
            double listed = peak[c] + kWeightInputShare * peakWaiting[c];
            double bound = inFlightChunkMicroBatches(kind, pp, m, rank, c);
            const std::string where =
                std::string(bmrt::toString(kind)) +
                " pp=" + std::to_string(pp) + " m=" + std::to_string(m) +
                " rank " + std::to_string(rank) + " chunk " + std::to_string(c);
            EXPECT_LE(listed, bound + 1e-9) << where;
            EXPECT_GE(listed, bound - 1 - kWeightInputShare * pp / 2) << where;
          }
        }
      }
}

} // namespace

TEST(CostModelTest, GradientReductionHidesBehindTheBackward) {
  const double bucket = kGradientBucketBytes;
  // One bucket is ready only when the backward ends: nothing hides.
  EXPECT_EQ(hiddenGradientReduction(1.0, bucket, 10.0, 1.0), 0);
  // Four buckets, backward longer than the reduction: all but the last
  // bucket's share (3/4) hides, times the overlap the machine allows.
  EXPECT_DOUBLE_EQ(hiddenGradientReduction(1.0, 4 * bucket, 10.0, 1.0), 0.75);
  EXPECT_DOUBLE_EQ(hiddenGradientReduction(1.0, 4 * bucket, 10.0, 0.2), 0.15);
  // A short backward bounds it: 3/4 of 0.4 s.
  EXPECT_DOUBLE_EQ(hiddenGradientReduction(1.0, 4 * bucket, 0.4, 1.0), 0.3);
  // No overlap, no reduction or no backward: nothing hides.
  EXPECT_EQ(hiddenGradientReduction(1.0, 4 * bucket, 10.0, 0.0), 0);
  EXPECT_EQ(hiddenGradientReduction(0.0, 4 * bucket, 10.0, 1.0), 0);
  EXPECT_EQ(hiddenGradientReduction(1.0, 4 * bucket, 0.0, 1.0), 0);
}
