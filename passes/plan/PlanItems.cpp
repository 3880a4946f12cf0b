//===- PlanItems.cpp - what printers read off the itemised step -----------===//

#include "passes/plan/PlanOutput.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

using namespace bm::plan;

const char *bm::plan::toString(CostItem::Kind kind) {
  switch (kind) {
  case CostItem::Kind::Compute:
    return "compute";
  case CostItem::Kind::Collective:
    return "collective";
  case CostItem::Kind::Transfer:
    return "transfer";
  case CostItem::Kind::Bubble:
    return "bubble";
  case CostItem::Kind::HostCopy:
    return "host_copy";
  }
  return "compute";
}

const char *bm::plan::toString(TimelineBar::Kind kind) {
  switch (kind) {
  case TimelineBar::Kind::Forward:
    return "forward";
  case TimelineBar::Kind::Backward:
    return "backward";
  case TimelineBar::Kind::WeightGrad:
    return "weight_grad";
  case TimelineBar::Kind::Sync:
    return "sync";
  case TimelineBar::Kind::Optimizer:
    return "optimizer";
  case TimelineBar::Kind::HostCopy:
    return "host_copy";
  }
  return "forward";
}

std::vector<const CostItem *> bm::plan::stepItems(const Plan &plan) {
  std::vector<const CostItem *> step;
  for (const CostItem &item : plan.items) {
    bool counted = item.kind == CostItem::Kind::Bubble ||
                   (item.afterPipeline ? item.stage == plan.tailStage
                                       : item.stage == plan.criticalStage);
    if (counted && !item.hidden)
      step.push_back(&item);
  }
  return step;
}

TimeBreakdown bm::plan::timeOfItems(const Plan &plan) {
  TimeBreakdown time;
  for (const CostItem *item : stepItems(plan)) {
    switch (item->kind) {
    case CostItem::Kind::Compute:
      time.compute += item->seconds;
      break;
    case CostItem::Kind::Bubble:
      time.bubble += item->seconds;
      break;
    case CostItem::Kind::HostCopy:
      time.hostLink += item->seconds;
      break;
    default:
      (item->link == "network" ? time.network : time.nvlink) += item->seconds;
    }
  }
  return time;
}

std::optional<OffloadSummary> bm::plan::offloadOf(const Plan &plan) {
  if (plan.config.offload == Offload::None)
    return std::nullopt;
  OffloadSummary offload;
  offload.hostBytes = plan.memory.host;
  for (const MemoryBreakdown &stage : plan.stageMemory)
    offload.hostBytes = std::max(offload.hostBytes, stage.host);
  offload.hostMemoryBytes = plan.hostMemoryBytes;
  for (const CostItem *item : stepItems(plan)) {
    if (item->kind == CostItem::Kind::HostCopy)
      (item->what == kToHostItem ? offload.toHost : offload.toDevice) +=
          item->seconds;
    else if (item->kind == CostItem::Kind::Compute &&
             item->what == kHostStepItem)
      offload.hostStep += item->seconds;
    else
      continue;
    offload.behind += item->hiddenSeconds;
  }
  return offload;
}

std::vector<CollectiveSummary>
bm::plan::collectivesOf(const std::vector<CostItem> &items) {
  std::vector<CollectiveSummary> all;
  std::map<std::tuple<std::string, std::string, std::string, std::string,
                      std::string, double>,
           size_t>
      index;
  for (const CostItem &item : items) {
    if (item.kind != CostItem::Kind::Collective &&
        item.kind != CostItem::Kind::Transfer)
      continue;
    auto key = std::make_tuple(item.what, item.axis, item.link, item.phase,
                               item.where, item.bytes);
    auto [it, added] = index.try_emplace(key, all.size());
    if (added)
      all.push_back({item.what, item.axis, item.link, item.phase, item.where,
                     item.bytes, 0, 0, 0});
    CollectiveSummary &summary = all[it->second];
    summary.countPerStep += item.count * item.devices;
    summary.seconds += item.seconds * item.devices;
    summary.hiddenSeconds += item.hiddenSeconds * item.devices;
  }
  return all;
}

static bool near(double a, double b) {
  return std::abs(a - b) <= 1e-6 * std::max({std::abs(a), std::abs(b), 1e-12});
}

/// `a` and `b` with the fewest significant digits (at least 4) that tell
/// them apart: "1.030e-05 vs 1.031e-05", not "0.00 vs 0.00".
static std::pair<std::string, std::string> apart(double a, double b) {
  auto digits = [](double x, int precision) {
    return llvm::formatv("{0}", llvm::format("%#.*g", precision, x)).str();
  };
  int precision = 4;
  while (precision < 17 && digits(a, precision) == digits(b, precision))
    ++precision;
  return {digits(a, precision), digits(b, precision)};
}

std::optional<std::string> bm::plan::inconsistency(const Plan &plan) {
  auto differ = [](const std::string &what, double items, double total) {
    auto [mine, theirs] = apart(items, total);
    return llvm::formatv("{0} add up to {1} s, the plan says {2} s", what,
                         mine, theirs)
        .str();
  };
  if (!near(plan.time.total(), plan.stepSeconds))
    return differ("the parts of the step time", plan.time.total(),
                  plan.stepSeconds);
  if (!plan.items.empty()) {
    TimeBreakdown items = timeOfItems(plan);
    if (!near(items.total(), plan.stepSeconds))
      return differ("the items of the step", items.total(), plan.stepSeconds);
    std::pair<const char *, std::pair<double, double>> parts[] = {
        {"the compute items", {items.compute, plan.time.compute}},
        {"the nvlink items", {items.nvlink, plan.time.nvlink}},
        {"the network items", {items.network, plan.time.network}},
        {"the bubble items", {items.bubble, plan.time.bubble}},
        {"the host link items", {items.hostLink, plan.time.hostLink}}};
    for (const auto &[what, values] : parts)
      if (!near(values.first, values.second))
        return differ(what, values.first, values.second);
  }
  for (const Alternative &a : plan.alternatives)
    if (a.time.total() > 0 && !near(a.time.total(), a.stepSeconds))
      return differ("the parts of alternative " + a.config.str(),
                    a.time.total(), a.stepSeconds);
  if (!plan.stageMemory.empty()) {
    double worst = 0;
    for (const MemoryBreakdown &stage : plan.stageMemory)
      worst = std::max(worst, stage.total());
    if (!near(worst, plan.memory.total())) {
      auto [mine, theirs] = apart(worst, plan.memory.total());
      return llvm::formatv("the worst stage needs {0} bytes, the plan says "
                           "{1} bytes",
                           mine, theirs)
          .str();
    }
  }
  if (!plan.timeline.empty()) {
    double end = 0;
    for (const TimelineBar &bar : plan.timeline)
      end = std::max(end, bar.end);
    if (!near(end, plan.stepSeconds))
      return differ("the timeline's bars", end, plan.stepSeconds);
  }
  return std::nullopt;
}
