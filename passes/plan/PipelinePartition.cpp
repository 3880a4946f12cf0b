//===- PipelinePartition.cpp - layers to pipeline stages ------------------===//

#include "passes/plan/PipelinePartition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

using namespace bm::plan;

StageStats &StageStats::operator+=(const StageStats &other) {
  compute += other.compute;
  gemmCompute += other.gemmCompute;
  attentionCompute += other.attentionCompute;
  recomputeCompute += other.recomputeCompute;
  forward += other.forward;
  comm += other.comm;
  contextComm += other.contextComm;
  tensor2Comm += other.tensor2Comm;
  stepComm += other.stepComm;
  params += other.params;
  stored += other.stored;
  workingSet = std::max(workingSet, other.workingSet);
  sideInputBytes = std::max(sideInputBytes, other.sideInputBytes);
  sideInputSource = std::max(sideInputSource, other.sideInputSource);
  sideInputReceivers += other.sideInputReceivers;
  receivedSideBytes += other.receivedSideBytes;
  madeSideBytes += other.madeSideBytes;
  shared |= other.shared;
  sharedParams += other.sharedParams;
  expertParams += other.expertParams;
  exchangeBytes += other.exchangeBytes;
  exchanges += other.exchanges;
  layers += other.layers;
  return *this;
}

bool StageStats::operator==(const StageStats &other) const {
  auto fields = [](const StageStats &s) {
    return std::make_tuple(s.compute, s.gemmCompute, s.attentionCompute,
                           s.recomputeCompute, s.forward, s.comm, s.contextComm,
                           s.tensor2Comm, s.stepComm, s.params, s.stored,
                           s.workingSet, s.expertParams, s.exchangeBytes,
                           s.exchanges, s.sideInputBytes, s.sideInputSource,
                           s.sideInputReceivers, s.receivedSideBytes,
                           s.madeSideBytes, s.shared, s.sharedParams, s.layers);
  };
  return fields(*this) == fields(other);
}

// The trainer reads what a stage sends off the device right after its
// forward, and keeps a value per micro-batch only where its own backward
// reads it (Executor::findStashed): side inputs are kept where they are
// received, and where they are made only beside readers of them.
bm::cost::PassTimes StageStats::passTimes() const {
  bm::cost::PassTimes t;
  t.forward = forward;
  const double backward = std::max(0.0, time() - forward);
  t.backwardWeight = std::min(gemmCompute / 3, backward);
  t.backwardInput = backward - t.backwardWeight;
  return t;
}

StageStats StageStats::onDevice() const {
  StageStats s = *this;
  if (receivesSideInputs()) {
    s.sideInputReceivers = 1;
    s.receivedSideBytes = sideInputBytes;
  }
  if (sideInputBytes == 0) {
    s.stored -= madeSideBytes;
    s.madeSideBytes = 0;
  }
  return s;
}

StageStats StageStats::scaled(int64_t count) const {
  StageStats s = *this;
  s.compute *= count;
  s.gemmCompute *= count;
  s.attentionCompute *= count;
  s.recomputeCompute *= count;
  s.forward *= count;
  s.comm *= count;
  s.contextComm *= count;
  s.tensor2Comm *= count;
  s.stepComm *= count;
  s.params *= count;
  s.stored *= count;
  s.expertParams *= count;
  s.exchangeBytes *= count;
  s.exchanges *= count;
  s.sharedParams *= count;
  s.sideInputReceivers *= count;
  s.receivedSideBytes *= count;
  s.madeSideBytes *= count;
  s.layers *= count;
  if (count == 0) {
    s.workingSet = 0;
    s.sideInputBytes = 0;
    s.sideInputSource = 0;
    s.shared = 0;
  }
  return s;
}

/// The time of all items together, and of the slowest one.
static std::pair<double, double>
totalAndLargest(const std::vector<ItemRun> &runs) {
  double total = 0, largest = 0;
  for (const ItemRun &run : runs) {
    total += run.each.time() * run.count;
    if (run.count > 0)
      largest = std::max(largest, run.each.time());
  }
  return {total, largest};
}

namespace {

constexpr int64_t kInfeasible = std::numeric_limits<int64_t>::max();

/// Items of `cost` that fit in what is left of a stage, up to `available`.
int64_t itemsThatFit(double room, double cost, int64_t available) {
  if (cost <= 0)
    return available;
  double fit = std::floor(std::max(0.0, room) / cost);
  return fit >= static_cast<double>(available) ? available
                                               : static_cast<int64_t>(fit);
}

/// Walks the runs greedily, filling each stage up to `bottleneck`, and
/// returns the number of stages used. With `emit`, also reports the stages
/// (stats, how many identical stages in a row).
template <bool kEmit, typename Emit>
int64_t greedyStages(const std::vector<ItemRun> &runs, double bottleneck,
                     Emit emit) {
  // Tolerance for sums that equal the bottleneck up to rounding.
  const double limit = bottleneck * (1 + 1e-12);
  int64_t stages = 1;
  StageStats open;
  double load = 0;
  bool empty = true;
  for (const ItemRun &run : runs) {
    const double cost = run.each.time();
    int64_t remaining = run.count;
    while (remaining > 0) {
      int64_t fit = itemsThatFit(limit - load, cost, remaining);
      if (fit == remaining) {
        if constexpr (kEmit)
          open += run.each.scaled(remaining);
        load += remaining * cost;
        empty = false;
        break;
      }
      if (fit == 0 && empty)
        return kInfeasible; // one item exceeds the bottleneck
      if constexpr (kEmit) {
        open += run.each.scaled(fit);
        emit(open, 1);
        open = StageStats();
      }
      remaining -= fit;
      ++stages;
      // Whole stages inside this run, leaving the last piece open.
      int64_t perStage = itemsThatFit(limit, cost, remaining);
      if (perStage == 0)
        return kInfeasible;
      int64_t full = (remaining - 1) / perStage;
      if (full > 0) {
        if constexpr (kEmit)
          emit(run.each.scaled(perStage), full);
        stages += full;
        remaining -= full * perStage;
      }
      if constexpr (kEmit)
        open = run.each.scaled(remaining);
      load = remaining * cost;
      empty = false;
      remaining = 0;
    }
  }
  if constexpr (kEmit)
    emit(open, 1);
  return stages;
}

} // namespace

namespace {

/// Items of the shape prologue?, layers, epilogue? (the folded shape of a
/// model with one block class and nothing between its layers). With
/// `mergeEqual`, layer runs in a row that cost the same (the layers of
/// --no-fold) count as one.
struct ChainShape {
  std::optional<StageStats> prologue, epilogue;
  StageStats layer;
  int64_t count = 0;
};

std::optional<ChainShape> chainShape(const std::vector<ItemRun> &runs,
                                     bool mergeEqual) {
  ChainShape shape;
  for (const ItemRun &run : runs) {
    if (run.count == 0)
      continue;
    if (run.each.layers > 0) {
      if (shape.epilogue ||
          (shape.count > 0 &&
           (!mergeEqual || run.each.time() != shape.layer.time() ||
            run.each.layers != shape.layer.layers)))
        return std::nullopt;
      shape.layer = run.each;
      shape.count += run.count;
    } else if (run.count == 1 && shape.count == 0 && !shape.prologue) {
      shape.prologue = run.each;
    } else if (run.count == 1 && shape.count > 0 && !shape.epilogue) {
      shape.epilogue = run.each;
    } else {
      return std::nullopt;
    }
  }
  if (shape.count == 0)
    return std::nullopt;
  return shape;
}

} // namespace

/// The optimal bottleneck when the items are a prologue, n identical layers
/// and an epilogue (the folded shape of most models), without bisection:
/// stage 0 holds the prologue and a layers, the last stage b layers and the
/// epilogue, the others k layers each, and the bottleneck is one of
/// tP + a tL, tE + b tL or k tL. For each form, capacity grows with the
/// integer, so a binary search over [0, n] finds its smallest feasible value.
static std::optional<double> foldedBottleneck(const std::vector<ItemRun> &runs,
                                              int numStages) {
  std::optional<ChainShape> shape = chainShape(runs, /*mergeEqual=*/false);
  if (!shape || numStages < 2 || shape->layer.time() <= 0)
    return std::nullopt;
  const double tL = shape->layer.time();
  const double tP = shape->prologue ? shape->prologue->time() : 0;
  const double tE = shape->epilogue ? shape->epilogue->time() : 0;
  const int64_t n = shape->count;
  auto fit = [&](double room) -> int64_t {
    if (room < 0)
      return -1;
    return std::min<int64_t>(n, static_cast<int64_t>(std::floor(room / tL + 1e-9)));
  };
  auto feasible = [&](double bottleneck) {
    int64_t first = fit(bottleneck - tP), last = fit(bottleneck - tE),
            middle = fit(bottleneck);
    if (first < 0 || last < 0 || middle < 1)
      return false;
    return first + last + (numStages - 2) * middle >= n;
  };
  double best = std::numeric_limits<double>::infinity();
  for (double base : {tP, tE, 0.0}) {
    int64_t low = base == 0 ? 1 : 0, high = n;
    if (!feasible(base + high * tL))
      continue;
    while (low < high) {
      int64_t middle = low + (high - low) / 2;
      if (feasible(base + middle * tL))
        high = middle;
      else
        low = middle + 1;
    }
    best = std::min(best, base + low * tL);
  }
  if (!std::isfinite(best))
    return std::nullopt;
  return best;
}

/// Stages left over go before the last one that holds anything, not after
/// it: the compiled program puts what follows the last layer (the
/// epilogue: final norm, LM head, loss) on the last virtual stage
/// (annotate's stagesOf), so the stage priced with it must be the last.
/// Empty stages in between pass values on.
static void insertEmptyStages(std::vector<StageGroup> &groups, int count) {
  StageGroup last =
      groups.empty() ? StageGroup{0, StageStats()} : groups.back();
  if (last.numStages > 1) {
    // The last group's other stages stay where they are.
    groups.back().numStages -= 1;
    last.numStages = 1;
  } else if (!groups.empty()) {
    groups.pop_back();
  }
  groups.push_back({count, StageStats()});
  if (last.numStages > 0)
    groups.push_back(last);
}

std::vector<StageGroup> bm::plan::partitionStages(
    const std::vector<ItemRun> &runs, int numStages) {
  auto noEmit = [](const StageStats &, int64_t) {};
  auto emitAt = [&](double bottleneck) {
    std::vector<StageGroup> groups;
    int64_t used = 0;
    greedyStages<true>(runs, bottleneck,
                       [&](const StageStats &stats, int64_t count) {
                         if (count <= 0)
                           return;
                         used += count;
                         groups.push_back({static_cast<int>(count), stats});
                       });
    if (used < numStages)
      insertEmptyStages(groups, static_cast<int>(numStages - used));
    return std::make_pair(groups, used);
  };
  if (std::optional<double> bottleneck = foldedBottleneck(runs, numStages)) {
    auto [groups, used] = emitAt(*bottleneck);
    if (used <= numStages)
      return groups;
  }
  auto [total, largest] = totalAndLargest(runs);
  double low = std::max(largest, total / std::max(numStages, 1));
  // The greedy fill always fits within average + largest item (each stage
  // but the last ends above the average).
  double high = std::max(std::min(total, low + largest), low);
  if (greedyStages<false>(runs, low, noEmit) > numStages) {
    // Bisection on the bottleneck, to rounding.
    for (int iteration = 0; iteration < 80 && high - low > 1e-14 * high;
         ++iteration) {
      double middle = 0.5 * (low + high);
      if (greedyStages<false>(runs, middle, noEmit) <= numStages)
        high = middle;
      else
        low = middle;
    }
  } else {
    high = low;
  }
  return emitAt(high).first;
}

/// Greedy fill with a layer limit per stage; returns whether everything
/// fits in the stages, and the stages when `out` is given.
static bool greedyWithLimits(const std::vector<ItemRun> &runs,
                             const std::vector<int64_t> &maxLayers,
                             double bottleneck,
                             std::vector<StageGroup> *out) {
  const double limit = bottleneck * (1 + 1e-12);
  size_t stage = 0;
  StageStats open;
  double load = 0;
  auto close = [&] {
    if (out)
      out->push_back({1, open});
    open = StageStats();
    load = 0;
    ++stage;
  };
  for (const ItemRun &run : runs) {
    const double cost = run.each.time();
    int64_t remaining = run.count;
    while (remaining > 0) {
      if (stage >= maxLayers.size())
        return false;
      int64_t fit = itemsThatFit(limit - load, cost, remaining);
      // The layer limit needs the open stage's layer count whether or not
      // the stages are being recorded.
      if (run.each.layers > 0)
        fit = std::min(fit, (maxLayers[stage] - open.layers) / run.each.layers);
      fit = std::max<int64_t>(fit, 0);
      open += run.each.scaled(fit);
      load += fit * cost;
      remaining -= fit;
      if (remaining > 0)
        close();
    }
  }
  if (stage >= maxLayers.size())
    return false;
  close();
  if (out && out->size() < maxLayers.size()) {
    // Stages left over go before the last one, as insertEmptyStages puts
    // them (the epilogue must stay on the last stage), where the last
    // stage's layers fit that stage's limit; else after it.
    StageGroup last = out->back();
    bool moves = last.stats.layers <= maxLayers.back();
    if (moves)
      out->pop_back();
    while (out->size() + (moves ? 1 : 0) < maxLayers.size())
      out->push_back({1, StageStats()});
    if (moves)
      out->push_back(last);
  }
  return true;
}

std::vector<StageGroup> bm::plan::partitionStagesWithLimits(
    const std::vector<ItemRun> &runs, const std::vector<int64_t> &maxLayers) {
  auto [total, largest] = totalAndLargest(runs);
  if (!greedyWithLimits(runs, maxLayers, total, nullptr))
    return {};
  // No stage can take less than an even share, nor less than its largest
  // item.
  double low = std::max(largest, total / maxLayers.size()), high = total;
  for (int iteration = 0; iteration < 80 && high - low > 1e-12 * high;
       ++iteration) {
    double middle = 0.5 * (low + high);
    (greedyWithLimits(runs, maxLayers, middle, nullptr) ? high : low) = middle;
  }
  std::vector<StageGroup> groups;
  greedyWithLimits(runs, maxLayers, high, &groups);
  return groups;
}

std::vector<StageGroup> bm::plan::partitionStagesMegatron(
    const std::vector<ItemRun> &runs, int numStages, bool evenOnly,
    const std::vector<int64_t> &maxLayers) {
  std::optional<ChainShape> shape = chainShape(runs, /*mergeEqual=*/true);
  const int64_t n = shape ? shape->count : 0;
  if (!shape || numStages < 1 || n < numStages)
    return {};
  const StageStats &layer = shape->layer;
  const StageStats prologue = shape->prologue.value_or(StageStats());
  const StageStats epilogue = shape->epilogue.value_or(StageStats());
  auto limit = [&](int stage) {
    return maxLayers.empty() ? n : maxLayers[stage];
  };
  // Stages of first, middle (each) and last layers.
  auto build = [&](int64_t first, int64_t middle, int64_t last) {
    std::vector<StageGroup> groups;
    StageStats head = prologue;
    head += layer.scaled(first);
    if (numStages == 1) {
      head += epilogue;
      return std::vector<StageGroup>{{1, head}};
    }
    groups.push_back({1, head});
    if (numStages > 2)
      groups.push_back({numStages - 2, layer.scaled(middle)});
    StageStats tail = layer.scaled(last);
    tail += epilogue;
    groups.push_back({1, tail});
    return groups;
  };
  if (evenOnly || numStages == 1) {
    const int64_t each = n / numStages;
    if (n % numStages != 0)
      return {};
    for (int stage = 0; stage < numStages; ++stage)
      if (each > limit(stage))
        return {};
    return build(each, each, each);
  }
  const double tL = layer.time(), tP = prologue.time(), tE = epilogue.time();
  int64_t middleLimit = n;
  for (int stage = 1; stage + 1 < numStages; ++stage)
    middleLimit = std::min(middleLimit, limit(stage));
  const int middles = numStages - 2;
  double best = std::numeric_limits<double>::infinity();
  int64_t bestFirst = 0, bestMiddle = 0;
  // Middle stages of k layers leave r for the first and the last stage;
  // the first takes about half of r, shifted by the difference of the
  // prologue and the epilogue.
  const int64_t largestMiddle =
      middles > 0 ? std::min(middleLimit, (n - 2) / middles) : 0;
  for (int64_t k = middles > 0 ? 1 : 0; k <= largestMiddle; ++k) {
    const int64_t r = n - middles * k;
    const int64_t low = std::max<int64_t>(1, r - limit(numStages - 1));
    const int64_t high = std::min(r - 1, limit(0));
    if (low > high)
      continue;
    double ideal = tL > 0 ? (tE - tP + r * tL) / (2 * tL) : 0.5 * r;
    int64_t around = static_cast<int64_t>(std::floor(ideal));
    for (int64_t first : {around, around + 1}) {
      first = std::clamp(first, low, high);
      double bottleneck = std::max({tP + first * tL, k * tL,
                                    tE + (r - first) * tL});
      // Ties go to the more even layout, then to fewer layers first.
      bool even = first == k && r - first == k;
      if (bottleneck < best * (1 - 1e-12) ||
          (bottleneck <= best * (1 + 1e-12) && even)) {
        best = bottleneck;
        bestFirst = first;
        bestMiddle = k;
      }
    }
  }
  if (!std::isfinite(best))
    return {};
  return build(bestFirst, bestMiddle, n - middles * bestMiddle - bestFirst);
}

const StageStats *bm::plan::stageAt(const std::vector<StageGroup> &groups,
                                    int stage) {
  for (const StageGroup &group : groups) {
    if (stage < group.numStages)
      return stage >= 0 ? &group.stats : nullptr;
    stage -= std::max(group.numStages, 0);
  }
  return nullptr;
}

std::vector<StageStats> bm::plan::expandStages(
    const std::vector<StageGroup> &groups) {
  size_t total = 0;
  for (const StageGroup &group : groups)
    total += std::max(group.numStages, 0);
  std::vector<StageStats> stages;
  stages.reserve(total);
  for (const StageGroup &group : groups)
    for (int i = 0; i < group.numStages; ++i)
      stages.push_back(group.stats);
  return stages;
}
