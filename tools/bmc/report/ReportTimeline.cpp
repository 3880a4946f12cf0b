//===- ReportTimeline.cpp - the pipeline Gantt chart of one step ----------===//
//
// Drawn from Plan::timeline, the simulation of the schedule the trainer
// runs (runtime/schedule): one row per pipeline rank, forward and backward
// of every micro-batch on every chunk, the idle time (the bubble) as the
// empty row, and below each row the lane of its communication that is not
// hidden: the communication share of each pass (the stage's communication
// items over all its per-micro-batch items) and the synchronisation after
// the pipeline. The chart spans the predicted step time.
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/report/Html.h"
#include "tools/bmc/report/Sections.h"

#include "passes/plan/PlanOutput.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>

using namespace bmc::report;
using namespace bm::plan;

namespace {

constexpr double kLeft = 70, kWidth = 1000, kRow = 22, kLane = 7;

const char *colourOf(TimelineBar::Kind kind) {
  switch (kind) {
  case TimelineBar::Kind::Forward:
    return "#4e79a7";
  case TimelineBar::Kind::Backward:
    return "#f28e2b";
  case TimelineBar::Kind::WeightGrad:
    return "#edc948";
  case TimelineBar::Kind::Sync:
    return "#b07aa1";
  case TimelineBar::Kind::Optimizer:
    return "#59a14f";
  case TimelineBar::Kind::HostCopy:
    return "#9c755f";
  }
  return "#999";
}

/// Per pipeline rank: the share of its per-micro-batch time that is
/// communication, from the items of its stage group.
std::vector<double> communicationShare(const Plan &plan) {
  std::map<int, std::pair<double, double>> byStage; // comm, all
  for (const CostItem &item : plan.items) {
    if (item.afterPipeline || item.kind == CostItem::Kind::Bubble)
      continue;
    auto &[comm, all] = byStage[item.stage];
    all += item.seconds;
    if (item.kind != CostItem::Kind::Compute)
      comm += item.seconds;
  }
  std::vector<double> share(plan.config.pp, 0);
  for (const auto &[stage, seconds] : byStage) {
    const auto &[comm, all] = seconds;
    int end = std::min(stage + stageDevices(plan, stage), plan.config.pp);
    for (int rank = stage; rank < end; ++rank)
      share[rank] = all > 0 ? comm / all : 0;
  }
  return share;
}

std::string barLabel(const TimelineBar &bar, bool chunks) {
  switch (bar.kind) {
  case TimelineBar::Kind::Forward:
  case TimelineBar::Kind::Backward:
  case TimelineBar::Kind::WeightGrad: {
    const char *letter = bar.kind == TimelineBar::Kind::Forward    ? "F"
                         : bar.kind == TimelineBar::Kind::Backward ? "B"
                                                                   : "W";
    std::string text = letter + std::to_string(bar.microBatch);
    return chunks ? text + "." + std::to_string(bar.chunk) : text;
  }
  case TimelineBar::Kind::Sync:
    return "sync";
  case TimelineBar::Kind::Optimizer:
    return "opt";
  case TimelineBar::Kind::HostCopy:
    return "copy";
  }
  return "";
}

/// The bars' colours; the host copies' where the plan offloads.
void legend(llvm::raw_ostream &os, bool offloaded) {
  os << "<div class=\"legend\">";
  for (auto [kind, name] :
       {std::pair{TimelineBar::Kind::Forward, "forward"},
        std::pair{TimelineBar::Kind::Backward, "backward (B: the input's "
                                               "gradient, where W is apart)"},
        std::pair{TimelineBar::Kind::WeightGrad, "W: the weights' gradient"},
        std::pair{TimelineBar::Kind::Sync,
                  "gradient sync (after the pipeline)"},
        std::pair{TimelineBar::Kind::Optimizer,
                  offloaded ? "optimizer step (on the host)"
                            : "optimizer step"},
        std::pair{TimelineBar::Kind::HostCopy,
                  "copy between device and host (gradients down, "
                  "parameters up)"}})
    if (offloaded || kind != TimelineBar::Kind::HostCopy)
      os << "<span><i style=\"background:" << colourOf(kind) << "\"></i>"
         << name << "</span>";
  os << "<span><i style=\"background:#e15759\"></i>exposed communication "
        "(lane)</span><span><i style=\"background:#ececec\"></i>idle: the "
        "bubble</span></div>";
}

} // namespace

void bmc::report::timelineSection(const Plan &plan, llvm::raw_ostream &os) {
  os << "<section id=\"timeline\"><h2>Pipeline timeline of one step</h2>";
  if (plan.timeline.empty()) {
    os << "<p class=\"note\">This plan file has no timeline (written before "
          "bmc report): plan the model again.</p></section>\n";
    return;
  }
  const int ranks = plan.config.pp;
  const bool chunks = plan.config.chunks > 1;
  double end = 0;
  for (const TimelineBar &bar : plan.timeline)
    end = std::max(end, bar.end);
  const double scale = end > 0 ? kWidth / end : 0;
  const double rowH = kRow + kLane + 6;
  Svg svg(kLeft + kWidth + 10, ranks * rowH + 30, "pipeline timeline");
  std::vector<double> share = communicationShare(plan);
  for (int r = 0; r < ranks; ++r) {
    double y = r * rowH;
    svg.text(kLeft - 6, y + kRow * 0.7, "rank " + std::to_string(r), "end", 11);
    svg.rect(kLeft, y, kWidth, kRow, "#ececec",
             llvm::formatv("pipeline rank {0}: idle time is the bubble", r)
                 .str(),
             "row");
  }
  for (const TimelineBar &bar : plan.timeline) {
    double x = kLeft + bar.start * scale, w = (bar.end - bar.start) * scale;
    double y = bar.rank * rowH;
    std::string label = barLabel(bar, chunks);
    svg.rect(x, y, w, kRow, colourOf(bar.kind),
             llvm::formatv("rank {0}: {1} {2}, {3} to {4}", bar.rank,
                           toString(bar.kind), label,
                           duration(bar.start), duration(bar.end))
                 .str(),
             "bar");
    if (w >= 7.5 * label.size())
      svg.text(x + w / 2, y + kRow * 0.68, label, "middle", 10, "#fff");
    // The lane: what of this bar is communication nobody hides.
    double exposed = bar.kind == TimelineBar::Kind::Sync ||
                             bar.kind == TimelineBar::Kind::HostCopy
                         ? 1.0
                     : bar.kind == TimelineBar::Kind::Optimizer
                         ? 0.0
                         : share[bar.rank];
    if (exposed > 0)
      svg.rect(x, y + kRow + 1, w * exposed, kLane, "#e15759",
               llvm::formatv("rank {0}: {1:F0}% of {2} {3} is communication",
                             bar.rank, 100 * exposed, toString(bar.kind),
                             label)
                   .str(),
               "comm");
  }
  // Time axis.
  double axisY = ranks * rowH + 4;
  svg.line(kLeft, axisY, kLeft + kWidth, axisY, "#888");
  for (int tick = 0; tick <= 5; ++tick) {
    double x = kLeft + tick * kWidth / 5;
    svg.line(x, axisY, x, axisY + 4, "#888");
    svg.text(x, axisY + 16, duration(end * tick / 5),
             tick == 0 ? "start" : tick == 5 ? "end" : "middle", 10);
  }
  os << llvm::formatv(
      "<p class=\"note\">{0}, {1} pipeline rank{2}, {3} "
      "micro-batches{4}: the schedule the trainer runs, "
      "simulated with each stage's forward and backward "
      "time. The step ends at {5} (the predicted step time); "
      "bubble {6}.</p>",
      ranks > 1 ? bmrt::toString(plan.config.schedule) : "no pipeline", ranks,
      ranks == 1 ? "" : "s", plan.config.numMicroBatches,
      chunks ? llvm::formatv(", {0} chunks per rank", plan.config.chunks).str()
             : std::string(),
      duration(end), duration(plan.time.bubble));
  legend(os, plan.config.offload != Offload::None);
  os << "<div class=\"scroll\">" << svg.str() << "</div></section>\n";
}
