//===- ReportCharts.cpp - time split, memory and communication ------------===//

#include "tools/bmc/report/Html.h"
#include "tools/bmc/report/Sections.h"

#include "passes/plan/PlanOutput.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>
#include <map>

using namespace bmc::report;
using namespace bm::plan;

int bmc::report::stageDevices(const Plan &plan, int stage) {
  for (const CostItem &item : plan.items)
    if (item.stage == stage)
      return item.devices;
  return 1;
}

std::string bmc::report::stageName(const Plan &plan, int stage) {
  int devices = stageDevices(plan, stage);
  if (devices == 1)
    return "stage " + std::to_string(stage);
  return llvm::formatv("stages {0}-{1}", stage, stage + devices - 1).str();
}

const char *const bmc::report::kSplitNames[kSplitParts] = {
    "compute", "comm (nvlink)", "comm (network)", "pipeline bubble",
    "host link"};

std::array<double, kSplitParts>
bmc::report::splitParts(const TimeBreakdown &time) {
  return {time.compute, time.nvlink, time.network, time.bubble, time.hostLink};
}

/// The parts a legend names: the host link only where a plan offloads.
static int namedParts(bool hostLink) {
  return hostLink ? kSplitParts : kSplitParts - 1;
}

void bmc::report::drawSplit(Svg &svg, double x, double y, double width,
                            double height, const TimeBreakdown &time,
                            double scale, const std::string &plan) {
  std::array<double, kSplitParts> parts = splitParts(time);
  for (size_t i = 0; i < parts.size(); ++i) {
    double w = scale > 0 ? parts[i] / scale * width : 0;
    svg.rect(x, y, w, height, palette(static_cast<int>(i)),
             llvm::formatv("{0}{1}: {2}", plan.empty() ? "" : plan + ": ",
                           kSplitNames[i], duration(parts[i]))
                 .str(),
             "split");
    x += w;
  }
}

std::string bmc::report::splitLegend(bool hostLink) {
  std::string html = "<div class=\"legend\">";
  for (int i = 0; i < namedParts(hostLink); ++i)
    html += std::string("<span><i style=\"background:") + palette(i) +
            "\"></i>" + kSplitNames[i] + "</span>";
  return html + "</div>";
}

std::string bmc::report::timeSplitBar(const TimeBreakdown &time, double scale,
                                      double width) {
  Svg svg(width, 40, "step time split");
  drawSplit(svg, 0, 0, width, 20, time, scale, "");
  std::array<double, kSplitParts> parts = splitParts(time);
  double x = 0;
  for (int i = 0; i < namedParts(time.hostLink > 0); ++i) {
    svg.rect(x, 26, 10, 10, palette(i));
    std::string label =
        llvm::formatv("{0} {1}", kSplitNames[i], duration(parts[i])).str();
    svg.text(x + 14, 35, label, "start", 11);
    x += 14 + 6.5 * label.size() + 16;
  }
  return svg.str();
}

void bmc::report::memorySection(const Plan &plan, llvm::raw_ostream &os) {
  os << "<section id=\"memory\"><h2>Memory per GPU, by pipeline stage</h2>";
  std::vector<MemoryBreakdown> stages = plan.stageMemory;
  if (stages.empty())
    stages.push_back(plan.memory); // plans written before the stages
  double largest = plan.deviceMemoryBytes;
  for (const MemoryBreakdown &m : stages)
    largest = std::max(largest, m.total());
  const double left = 100, width = 880, row = 24;
  Svg svg(left + width + 20, stages.size() * (row + 8) + 50,
          "memory per stage against the device limit");
  const char *names[] = {"parameters", "gradients", "optimizer state",
                         "activations", "buffers, workspace"};
  for (size_t s = 0; s < stages.size(); ++s) {
    const MemoryBreakdown &m = stages[s];
    double parts[] = {m.params, m.grads, m.optimizer, m.activations,
                      m.buffers};
    double y = s * (row + 8);
    svg.text(left - 6, y + row * 0.7, stageName(plan, m.stage), "end", 11);
    double x = left;
    for (int k = 0; k < 5; ++k) {
      double w = parts[k] / largest * width;
      svg.rect(x, y, w, row, palette(k),
               llvm::formatv("{0}: {1} {2}", stageName(plan, m.stage), names[k],
                             formatBytes(parts[k]))
                   .str(),
               "mem");
      x += w;
    }
    svg.text(x + 4, y + row * 0.7, formatBytes(m.total()), "start", 10);
  }
  double limitX = left + plan.deviceMemoryBytes / largest * width;
  double bottom = stages.size() * (row + 8);
  svg.line(limitX, 0, limitX, bottom, "#e15759", 2, true);
  svg.text(limitX, bottom + 14,
           "device limit " + formatBytes(plan.deviceMemoryBytes), "end", 11,
           "#e15759");
  double x = left;
  for (int k = 0; k < 5; ++k) {
    svg.rect(x, bottom + 26, 10, 10, palette(k));
    svg.text(x + 14, bottom + 35, names[k], "start", 11);
    x += 30 + 6.5 * std::string(names[k]).size();
  }
  os << svg.str()
     << "<p class=\"note\">The first device of each group of "
        "identical stages (it holds the most micro-batches in flight); the "
        "worst is stage "
     << plan.memory.stage << ".</p>";
  if (std::optional<OffloadSummary> offload = offloadOf(plan))
    os << "<p class=\"note\">Host memory (the offloaded optimizer, not "
          "drawn): "
       << formatBytes(offload->hostBytes) << " per GPU"
       << (offload->hostMemoryBytes > 0
               ? " of " + formatBytes(offload->hostMemoryBytes)
               : std::string(", in the device's own memory (the "
                             "cluster's host has none apart)"))
       << ".</p>";
  os << "</section>\n";
}

namespace {

struct AxisTotal {
  int64_t calls = 0;
  double bytes = 0, seconds = 0, stepSeconds = 0;
};

} // namespace

void bmc::report::communicationSection(const Plan &plan,
                                       llvm::raw_ostream &os) {
  os << "<section id=\"communication\"><h2>Communication</h2>";
  // Per axis and link: the replica's calls and bytes, and the seconds they
  // add to the step (the critical stage's items).
  std::map<std::pair<std::string, std::string>, AxisTotal> byAxis;
  for (const CollectiveSummary &c : plan.collectives) {
    AxisTotal &t = byAxis[{c.axis, c.link}];
    t.calls += c.countPerStep;
    t.bytes += c.bytes * c.countPerStep;
    t.seconds += c.seconds;
  }
  double stepComm = 0;
  for (const CostItem *item : stepItems(plan))
    if (item->kind == CostItem::Kind::Collective ||
        item->kind == CostItem::Kind::Transfer) {
      byAxis[{item->axis, item->link}].stepSeconds += item->seconds;
      stepComm += item->seconds;
    }
  double longest = 0;
  for (const auto &[key, t] : byAxis)
    longest = std::max(longest, t.stepSeconds);
  const double left = 120, width = 700, row = 22;
  Svg svg(left + width + 120, byAxis.size() * (row + 6) + 6,
          "communication time in the step by axis and link");
  int i = 0;
  for (const auto &[key, t] : byAxis) {
    double y = i * (row + 6);
    std::string name = key.first + " / " + key.second;
    svg.text(left - 6, y + row * 0.7, name, "end", 11);
    double w = longest > 0 ? t.stepSeconds / longest * width : 0;
    svg.rect(left, y, w, row, palette(i),
             name + ": " + duration(t.stepSeconds) + " of the step",
             "comm-axis");
    svg.text(left + w + 4, y + row * 0.7, duration(t.stepSeconds),
             "start", 10);
    ++i;
  }
  os << "<p class=\"note\">Seconds each axis adds to the step (the critical "
        "stage's items; together " << duration(stepComm)
     << ", the step's NVLink and network parts). The table counts every "
        "stage of one model replica.</p>"
     << svg.str();
  os << "<div class=\"scroll\"><table><thead><tr><th>axis</th><th>kind</th>"
        "<th>phase</th><th>where</th><th>link</th><th class=\"num\">bytes "
        "per call</th><th class=\"num\">calls</th><th class=\"num\">time "
        "(all calls)</th></tr></thead><tbody>";
  for (const CollectiveSummary &c : plan.collectives)
    os << "<tr><td>" << escape(c.axis) << "</td><td>" << escape(c.kind)
       << "</td><td>" << escape(c.phase) << "</td><td class=\"mono\">"
       << escape(c.where) << "</td><td>" << escape(c.link)
       << "</td><td class=\"num\">" << formatBytes(c.bytes)
       << "</td><td class=\"num\">" << c.countPerStep
       << "</td><td class=\"num\">" << duration(c.seconds)
       << "</td></tr>";
  os << "</tbody></table></div></section>\n";
}
