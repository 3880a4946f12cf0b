//===- PipelinePartitionTest.cpp - balanced stages ------------------------===//

#include "passes/plan/PipelinePartition.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <random>

using namespace bm::plan;

namespace {

StageStats item(double time, int64_t layers = 1) {
  StageStats s;
  s.compute = time;
  s.layers = layers;
  s.params = 1;
  return s;
}

/// The optimal bottleneck by dynamic programming over single items.
double optimalBottleneck(const std::vector<double> &items, int stages) {
  size_t n = items.size();
  std::vector<std::vector<double>> best(
      stages + 1, std::vector<double>(n + 1, 1e300));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (size_t end = 0; end <= n; ++end) {
      double sum = 0;
      for (size_t start = end + 1; start-- > 0;) {
        if (start < end)
          sum += items[start];
        best[s][end] = std::min(best[s][end], std::max(best[s - 1][start], sum));
      }
    }
  return best[stages][n];
}

double bottleneck(const std::vector<StageGroup> &groups) {
  double worst = 0;
  for (const StageGroup &g : groups)
    worst = std::max(worst, g.stats.time());
  return worst;
}

TEST(PipelinePartitionTest, UniformLayersSplitEvenly) {
  std::vector<ItemRun> runs = {{item(1), 96}};
  std::vector<StageGroup> groups = partitionStages(runs, 8);
  std::vector<StageStats> stages = expandStages(groups);
  ASSERT_EQ(stages.size(), 8u);
  for (const StageStats &s : stages)
    EXPECT_EQ(s.layers, 12);
  // Bulk grouping: a handful of groups, not one per stage.
  EXPECT_LE(groups.size(), 3u);
}

TEST(PipelinePartitionTest, StagesLeftOverComeBeforeTheLast) {
  // Eight layers and an LM head as long as two of them over 8 stages: the
  // bottleneck of two layers leaves stages over. The compiled program puts
  // the head on the last stage, so the partition must too, with the empty
  // stages in between.
  std::vector<ItemRun> runs = {{item(1), 8}, {item(2, 0), 1}};
  std::vector<StageStats> stages = expandStages(partitionStages(runs, 8));
  ASSERT_EQ(stages.size(), 8u);
  EXPECT_DOUBLE_EQ(stages.back().time(), 2);
  EXPECT_EQ(stages.back().layers, 0);
  std::vector<int64_t> layers;
  for (const StageStats &s : stages)
    layers.push_back(s.layers);
  EXPECT_EQ(layers, (std::vector<int64_t>{2, 2, 2, 2, 0, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(stages[4].time(), 0);
  EXPECT_DOUBLE_EQ(stages[6].time(), 0);
}

TEST(PipelinePartitionTest, StageAtLooksUpWhatExpandStagesLists) {
  std::vector<ItemRun> runs = {{item(2, 0), 1}, {item(1), 30}, {item(3, 0), 1}};
  std::vector<StageGroup> groups = partitionStages(runs, 8);
  std::vector<StageStats> stages = expandStages(groups);
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageStats *found = stageAt(groups, static_cast<int>(s));
    ASSERT_NE(found, nullptr) << s;
    EXPECT_EQ(*found, stages[s]) << s;
  }
  EXPECT_EQ(stageAt(groups, static_cast<int>(stages.size())), nullptr);
  EXPECT_EQ(stageAt(groups, -1), nullptr);
}

TEST(PipelinePartitionTest, PrologueAndEpilogueTakeLayersAway) {
  // Embedding (cost 2 layers) first, LM head (cost 3 layers) last.
  std::vector<ItemRun> runs = {{item(2, 0), 1}, {item(1), 30}, {item(3, 0), 1}};
  std::vector<StageStats> stages = expandStages(partitionStages(runs, 5));
  ASSERT_EQ(stages.size(), 5u);
  int64_t total = 0;
  for (const StageStats &s : stages)
    total += s.layers;
  EXPECT_EQ(total, 30);
  EXPECT_LT(stages.front().layers, stages[2].layers);
  EXPECT_LT(stages.back().layers, stages[2].layers);
  EXPECT_DOUBLE_EQ(bottleneck(partitionStages(runs, 5)),
                   optimalBottleneck(
                       [] {
                         std::vector<double> v = {2};
                         v.insert(v.end(), 30, 1);
                         v.push_back(3);
                         return v;
                       }(),
                       5));
}

TEST(PipelinePartitionTest, OptimalOnRandomRuns) {
  std::mt19937 random(3);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<ItemRun> runs;
    std::vector<double> items;
    int numRuns = 1 + trial % 5;
    for (int r = 0; r < numRuns; ++r) {
      double cost = 1 + random() % 7;
      int64_t count = 1 + random() % 6;
      runs.push_back({item(cost), count});
      items.insert(items.end(), count, cost);
    }
    int stages = 1 + static_cast<int>(random() % std::min<size_t>(items.size(), 6));
    std::vector<StageGroup> groups = partitionStages(runs, stages);
    EXPECT_EQ(expandStages(groups).size(), static_cast<size_t>(stages));
    EXPECT_NEAR(bottleneck(groups), optimalBottleneck(items, stages), 1e-9)
        << "trial " << trial;
  }
}

} // namespace

namespace {

/// Layers a partition holds, over all stages.
int64_t totalLayers(const std::vector<StageGroup> &groups) {
  int64_t layers = 0;
  for (const StageStats &s : expandStages(groups))
    layers += s.layers;
  return layers;
}

TEST(PipelinePartitionTest, LayerLimitsHoldForFoldedAndUnfoldedRuns) {
  // 48 layers, as one folded run and as 48 runs of one (--no-fold): stage
  // limits that add up to fewer layers must fail both ways, and limits that
  // leave room must place every layer, the same way in both forms.
  std::vector<ItemRun> folded = {{item(1), 48}};
  std::vector<ItemRun> unfolded(48, ItemRun{item(1), 1});
  std::vector<int64_t> tooFew = {7, 8, 9, 10};
  EXPECT_TRUE(partitionStagesWithLimits(folded, tooFew).empty());
  EXPECT_TRUE(partitionStagesWithLimits(unfolded, tooFew).empty());

  std::vector<int64_t> enough = {10, 12, 14, 16};
  std::vector<StageGroup> a = partitionStagesWithLimits(folded, enough);
  std::vector<StageGroup> b = partitionStagesWithLimits(unfolded, enough);
  EXPECT_EQ(totalLayers(a), 48);
  EXPECT_EQ(totalLayers(b), 48);
  std::vector<StageStats> sa = expandStages(a), sb = expandStages(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].layers, sb[i].layers) << "stage " << i;
    EXPECT_LE(sa[i].layers, enough[i]) << "stage " << i;
  }
}

TEST(PipelinePartitionTest, LayerLimitsKeepTheEpilogueOnTheLastStage) {
  // Two layers and a head on four stages: two stages stay empty, and they
  // lie before the stage with the head (the compiled program runs the
  // epilogue on the last stage), as without limits.
  std::vector<ItemRun> runs = {{item(1), 2}, {item(3, 0), 1}};
  std::vector<StageStats> stages =
      expandStages(partitionStagesWithLimits(runs, {4, 4, 4, 4}));
  ASSERT_EQ(stages.size(), 4u);
  EXPECT_GT(stages.back().time(), 0);
  EXPECT_GT(stages.front().time(), 0);
  int empty = 0;
  for (const StageStats &s : stages)
    empty += s.time() == 0;
  EXPECT_EQ(empty, 2);
  EXPECT_EQ(totalLayers(partitionStagesWithLimits(runs, {4, 4, 4, 4})), 2);
}

/// The best bottleneck among Megatron-LM's layouts (first F, middle k
/// each, last La; every stage at least one layer), by enumeration.
double bestMegatronBottleneck(double prologue, double epilogue, int64_t n,
                              int stages) {
  double best = 1e300;
  if (stages == 1)
    return prologue + n + epilogue;
  for (int64_t first = 1; first < n; ++first)
    for (int64_t k = stages > 2 ? 1 : 0; k <= n; ++k) {
      int64_t last = n - first - (stages - 2) * k;
      if (last < 1)
        break;
      best = std::min(best, std::max({prologue + first, double(k),
                                      epilogue + last}));
    }
  return best;
}

TEST(PipelinePartitionTest, MegatronLayoutIsTheBestOfItsForm) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0, 6);
  for (int trial = 0; trial < 300; ++trial) {
    int stages = 2 + static_cast<int>(rng() % 6);
    int64_t n = stages + static_cast<int64_t>(rng() % 30);
    double prologue = cost(rng), epilogue = cost(rng);
    std::vector<ItemRun> runs = {
        {item(prologue, 0), 1}, {item(1), n}, {item(epilogue, 0), 1}};
    std::vector<StageStats> got =
        expandStages(partitionStagesMegatron(runs, stages, false));
    ASSERT_EQ(got.size(), static_cast<size_t>(stages));
    int64_t layers = 0;
    double worst = 0;
    for (int s = 0; s < stages; ++s) {
      EXPECT_GE(got[s].layers, 1);
      layers += got[s].layers;
      worst = std::max(worst, got[s].time());
      if (s > 1 && s + 1 < stages)
        EXPECT_EQ(got[s].layers, got[1].layers) << "middle stages differ";
    }
    EXPECT_EQ(layers, n);
    EXPECT_NEAR(worst, bestMegatronBottleneck(prologue, epilogue, n, stages),
                1e-9)
        << "stages " << stages << " layers " << n;
  }
}

TEST(PipelinePartitionTest, MegatronInterleavingSplitsEvenly) {
  std::vector<ItemRun> runs = {{item(2, 0), 1}, {item(1), 24}, {item(3, 0), 1}};
  std::vector<StageStats> stages =
      expandStages(partitionStagesMegatron(runs, 8, /*evenOnly=*/true));
  ASSERT_EQ(stages.size(), 8u);
  for (const StageStats &s : stages)
    EXPECT_EQ(s.layers, 3);
  EXPECT_DOUBLE_EQ(stages.front().time(), 5);
  EXPECT_DOUBLE_EQ(stages.back().time(), 6);
  // 24 layers do not split evenly into 5 stages.
  EXPECT_TRUE(partitionStagesMegatron(runs, 5, true).empty());
}

TEST(PipelinePartitionTest, MegatronLayoutKeepsToLayerLimits) {
  // A heavy epilogue wants a short last stage; memory caps the first.
  std::vector<ItemRun> runs = {{item(0, 0), 1}, {item(1), 20}, {item(4, 0), 1}};
  std::vector<int64_t> limits = {4, 8, 8, 8};
  std::vector<StageStats> stages =
      expandStages(partitionStagesMegatron(runs, 4, false, limits));
  ASSERT_EQ(stages.size(), 4u);
  int64_t layers = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    EXPECT_LE(stages[s].layers, limits[s]) << "stage " << s;
    layers += stages[s].layers;
  }
  EXPECT_EQ(layers, 20);
  EXPECT_EQ(stages[1].layers, stages[2].layers);
  // Limits that hold fewer layers than the model has: no layout.
  EXPECT_TRUE(partitionStagesMegatron(runs, 4, false, {4, 5, 5, 5}).empty());
}

TEST(PipelinePartitionTest, MegatronLayoutNeedsOneStackOfLayers) {
  // Two kinds of layers, or an item between layers: Megatron-LM has no
  // layout for them. Equal layers given one by one (--no-fold) are one
  // stack.
  std::vector<ItemRun> twoKinds = {{item(1), 8}, {item(2), 8}};
  EXPECT_TRUE(partitionStagesMegatron(twoKinds, 4, false).empty());
  std::vector<ItemRun> interlude = {{item(1), 8}, {item(1, 0), 1}, {item(1), 8}};
  EXPECT_TRUE(partitionStagesMegatron(interlude, 4, false).empty());
  std::vector<ItemRun> oneByOne(16, ItemRun{item(1), 1});
  EXPECT_EQ(expandStages(partitionStagesMegatron(oneByOne, 4, false))[0].layers,
            4);
  // Fewer layers than stages.
  EXPECT_TRUE(partitionStagesMegatron({{item(1), 3}}, 4, false).empty());
}

// A stage with decoder layers receives the encoder output unless it makes
// it; on a device the chunks' receipts add up, so the device whose first
// chunk ends the encoder still receives it in its decoder chunk.
TEST(PipelinePartitionTest, SideInputReceiversAddUpOverADevicesChunks) {
  StageStats encoderEnd = item(1);
  encoderEnd.sideInputSource = 1;
  encoderEnd.sideInputBytes = 100; // it holds a decoder layer too
  StageStats decoder = item(1);
  decoder.sideInputBytes = 100;
  StageStats encoder = item(1);

  EXPECT_EQ(encoderEnd.onDevice().sideInputReceivers, 0);
  EXPECT_EQ(encoder.onDevice().sideInputReceivers, 0);
  EXPECT_EQ(decoder.onDevice().sideInputReceivers, 1);
  EXPECT_EQ(decoder.onDevice().receivedSideBytes, 100);

  StageStats device = encoderEnd.onDevice();
  device += decoder.onDevice();
  EXPECT_EQ(device.sideInputReceivers, 1);
  EXPECT_EQ(device.receivedSideBytes, 100);
  device += encoder.onDevice();
  device += decoder.onDevice();
  EXPECT_EQ(device.sideInputReceivers, 2);
  EXPECT_EQ(device.receivedSideBytes, 200);
}

// The stage that makes the encoder output keeps it per micro-batch only
// where it holds readers of it (their backward reads it); otherwise the
// stages that receive it keep it.
TEST(PipelinePartitionTest, ASideInputIsKeptWhereItIsRead) {
  StageStats encoderEnd = item(1);
  encoderEnd.stored = 1000;
  encoderEnd.madeSideBytes = 100;
  encoderEnd.sideInputSource = 1;
  EXPECT_EQ(encoderEnd.onDevice().stored, 900);
  encoderEnd.sideInputBytes = 100; // and a decoder layer
  EXPECT_EQ(encoderEnd.onDevice().stored, 1000);
}

} // namespace
