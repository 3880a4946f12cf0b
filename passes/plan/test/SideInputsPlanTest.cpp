//===- SideInputsPlanTest.cpp - values every decoder stage receives -------===//
//
// An encoder-decoder whose decoder layers all read the encoder's output (T5's
// cross-attention): every pipeline stage holding decoder layers receives it
// per micro-batch and sends its gradient back, beside the decoder's own
// stream (bm-split-stages passes every value crossing a boundary; the
// trainer sends them all). Under an interleaved schedule each receiving
// chunk of a device receives it, and a device whose one chunk makes it still
// receives it in its others.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/GraphAnalysis.h"
#include "passes/plan/PlanOutput.h"
#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

#include <map>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

constexpr int64_t kHidden = 64, kSource = 32, kTarget = 16, kFeatures = 16;
/// The encoder output per sample in bf16 (the A100 preset's precision).
constexpr double kMemoryBytes = kSource * kHidden * 2;

/// x + W2 gelu(W1 x).
int mlp(GraphBuilder &g, const std::string &p, int x) {
  int up = g.matmul(p + "up", x,
                    g.parameter(p + "up.weight", {kHidden, 4 * kHidden}));
  int down = g.matmul(p + "down", g.unary("bm.gelu", p + "gelu", up),
                      g.parameter(p + "down.weight", {4 * kHidden, kHidden}));
  return g.binary("bm.add", p + "residual", x, down);
}

/// Single-head attention of the decoder stream `y` [1, T, h] over the
/// encoder output `memory` [1, S, h], then an MLP.
int decoderBlock(GraphBuilder &g, const std::string &p, int y, int memory) {
  int q = g.matmul(p + "q", y, g.parameter(p + "q.weight", {kHidden, kHidden}));
  int k = g.matmul(p + "k", memory,
                   g.parameter(p + "k.weight", {kHidden, kHidden}));
  int v = g.matmul(p + "v", memory,
                   g.parameter(p + "v.weight", {kHidden, kHidden}));
  int scores = g.matmul(p + "scores", q, g.transpose(p + "kt", k, {0, 2, 1}));
  int mixed = g.matmul(p + "mix", g.softmax(p + "softmax", scores), v);
  return mlp(g, p, g.binary("bm.add", p + "cross_residual", y, mixed));
}

/// Both streams' stems in the prologue, `encoderLayers` MLP blocks (class
/// 0), the encoder's final op (an interlude: it makes the side input), then
/// `decoderLayers` decoder blocks (class 1).
ModelGraph encoderDecoder(int encoderLayers, int decoderLayers) {
  GraphBuilder g("encoder-decoder");
  int source = g.input("source", {1, kSource, kFeatures}, true, 0);
  int target = g.input("target", {1, kTarget, kFeatures}, true, 0);
  int x = g.matmul("encoder/stem", source,
                   g.parameter("encoder.stem.weight", {kFeatures, kHidden}));
  int y = g.matmul("decoder/stem", target,
                   g.parameter("decoder.stem.weight", {kFeatures, kHidden}));
  for (int layer = 0; layer < encoderLayers; ++layer) {
    g.beginLayer(0);
    x = mlp(g, "encoder.block" + std::to_string(layer) + ".", x);
    g.endLayer();
  }
  int memory = g.unary("bm.gelu", "encoder/final", x);
  for (int layer = 0; layer < decoderLayers; ++layer) {
    g.beginLayer(1);
    y = decoderBlock(g, "decoder.block" + std::to_string(layer) + ".", y,
                     memory);
    g.endLayer();
  }
  g.setOutput(y);
  return g.take();
}

/// The side inputs' point-to-point items, by device.
std::map<int, CostItem> sideTransfers(const Plan &plan) {
  std::map<int, CostItem> items;
  for (const CostItem &item : plan.items)
    if (item.where == "side inputs" && item.what == "send_recv")
      items[item.stage] = item;
  return items;
}

TEST(SideInputsPlanTest, TheEncoderOutputIsTheDecoderClassSideInput) {
  ModelGraph graph = encoderDecoder(2, 6);
  GraphAnalysis analysis(graph, /*fold=*/true);
  EXPECT_TRUE(analysis.sideInputs(0).empty());
  ASSERT_EQ(analysis.sideInputs(1).size(), 1u);
  EXPECT_EQ(graph.values[analysis.sideInputs(1)[0]].shape,
            (std::vector<int64_t>{1, kSource, kHidden}));
}

// pp2 x v2: virtual stages 0 and 2 on device 0, 1 and 3 on device 1.
// Stage 0 ends with the encoder (it makes the side input), the other three
// hold decoder layers: device 0 receives it in one chunk (its second),
// device 1 in both. 4 micro-batches, each received and its gradient sent
// back once per receiving chunk.
TEST(SideInputsPlanTest, EachReceivingChunkOfADeviceReceivesThem) {
  Plan plan = evaluateFixed(encoderDecoder(2, 6), 2, 4,
                            "dp=1,tp=1,pp=2,v=2,mb=1,schedule=interleaved");
  ASSERT_EQ(plan.layersPerStage, (std::vector<int>{2, 2, 2, 2}));
  std::map<int, CostItem> side = sideTransfers(plan);
  ASSERT_EQ(side.size(), 2u);
  const int64_t m = 4;
  EXPECT_EQ(side[0].count, 2 * 1 * m);
  EXPECT_EQ(side[1].count, 2 * 2 * m);
  for (auto &[device, item] : side) {
    EXPECT_EQ(item.bytes, kMemoryBytes) << device;
    EXPECT_GT(item.seconds, 0) << device;
  }
  EXPECT_NEAR(side[1].seconds, 2 * side[0].seconds, 1e-12);
}

// Without interleaving the device that makes the side input receives none.
TEST(SideInputsPlanTest, TheEncoderEndReceivesNothingWithOneChunk) {
  Plan plan = evaluateFixed(encoderDecoder(2, 6), 2, 4,
                            "dp=1,tp=1,pp=2,mb=1,schedule=1f1b");
  std::map<int, CostItem> side = sideTransfers(plan);
  ASSERT_EQ(side.size(), 1u);
  EXPECT_EQ(side.begin()->first, 1);
  EXPECT_EQ(side[1].count, 2 * 4);
  EXPECT_EQ(side[1].bytes, kMemoryBytes);
}

// The simulated schedule times each stage's passes with its transfers: a
// micro-batch's forward and backward on each rank last its compute plus its
// boundary and side-input transfers, as the items price them (the decoder's
// rank receives the side inputs, the encoder's none).
TEST(SideInputsPlanTest, TheSimulatedScheduleWaitsForThem) {
  Plan plan = evaluateFixed(encoderDecoder(2, 6), 2, 4,
                            "dp=1,tp=1,pp=2,mb=1,schedule=1f1b");
  const int m = 4;
  EXPECT_GT(sideTransfers(plan)[1].seconds, 0);
  for (int rank : {0, 1}) {
    double compute = 0, transfers = 0;
    for (const CostItem &item : plan.items) {
      if (item.stage != rank || item.afterPipeline) // the optimizer step
        continue;
      if (item.kind == CostItem::Kind::Compute)
        compute += item.seconds;
      if (item.kind == CostItem::Kind::Transfer)
        transfers += item.seconds;
    }
    double passes = 0;
    for (const TimelineBar &bar : plan.timeline)
      if (bar.rank == rank && bar.microBatch == 0 &&
          (bar.kind == TimelineBar::Kind::Forward ||
           bar.kind == TimelineBar::Kind::Backward))
        passes += bar.end - bar.start;
    EXPECT_NEAR(passes, (compute + transfers) / m, 1e-9 * passes) << rank;
  }
}

} // namespace
