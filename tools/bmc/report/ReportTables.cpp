//===- ReportTables.cpp - sharding, alternatives, compare, measured -------===//

#include "tools/bmc/report/Html.h"
#include "tools/bmc/report/Sections.h"

#include "passes/plan/PlanOutput.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace bmc::report;
using namespace bm::plan;

static std::string tensorsText(const std::vector<TensorSharding> &tensors) {
  std::vector<std::string> parts;
  for (const TensorSharding &t : tensors)
    parts.push_back(formatTensorSharding(t));
  return llvm::join(parts, ", ");
}

void bmc::report::shardingSection(const Plan &plan, llvm::raw_ostream &os) {
  os << "<section id=\"sharding\"><h2>Per-op sharding of each unique "
        "block</h2>";
  os << llvm::formatv("<p>Fold: {0} layers &rarr; {1} unique block{2}; each "
                      "instance of a block gets the same decisions.</p>",
                      plan.numLayers, plan.numBlockClasses,
                      plan.numBlockClasses == 1 ? "" : "s");
  os << "<input type=\"search\" placeholder=\"filter ops (label, op, axis)\" "
        "oninput=\"filterOps(this)\">";
  os << "<div class=\"scroll\"><table><thead><tr><th>block</th><th>ONNX "
        "node</th><th>op</th><th>rule</th><th>factors</th><th>operands "
        "&rarr; results</th></tr></thead><tbody>";
  for (const BlockSharding &block : plan.blocks)
    for (const OpSharding &op : block.ops) {
      std::vector<std::string> axes;
      for (const auto &[factor, axis] : op.factorAxes)
        axes.push_back(factor + "&rarr;" + escape(axis));
      os << "<tr><td>" << escape(block.name) << " (x" << block.numInstances
         << ")</td><td class=\"mono\">" << escape(op.label)
         << "</td><td class=\"mono\">" << escape(op.opName)
         << "</td><td class=\"mono\">" << escape(op.rule) << "</td><td>"
         << llvm::join(axes, " ") << "</td><td class=\"mono\">("
         << escape(tensorsText(op.operands)) << ") &rarr; ("
         << escape(tensorsText(op.results)) << ")</td></tr>";
    }
  os << "</tbody></table></div></section>\n";
}

/// A configuration that may wrap after its commas.
static std::string configHtml(const ParallelConfig &config) {
  std::string html;
  for (char c : escape(config.str()))
    html += c == ',' ? std::string(",<wbr>") : std::string(1, c);
  return html;
}

/// One row of the alternatives table: the first `parts` of the time split.
static void alternativeRow(llvm::raw_ostream &os, const std::string &rank,
                           const ParallelConfig &config, double step,
                           const TimeBreakdown &time, int parts, double memory,
                           const std::string &reason) {
  os << "<tr><td>" << rank << "</td><td class=\"mono\">" << configHtml(config)
     << "</td><td class=\"num\">" << duration(step);
  std::array<double, kSplitParts> split = splitParts(time);
  for (int i = 0; i < parts; ++i)
    os << "</td><td class=\"num\">" << duration(split[i]);
  os << "</td><td class=\"num\">" << formatBytes(memory) << "</td><td>"
     << escape(reason) << "</td></tr>";
}

void bmc::report::alternativesSection(const Plan &plan,
                                      llvm::raw_ostream &os) {
  os << "<section id=\"alternatives\"><h2>Alternatives</h2>";
  double longest = plan.stepSeconds;
  for (const Alternative &a : plan.alternatives)
    if (a.fits)
      longest = std::max(longest, a.stepSeconds);
  TimeBreakdown chosen = plan.items.empty() ? plan.time : timeOfItems(plan);
  // The host link's column where some plan offloads its optimizer.
  const bool hostLink =
      chosen.hostLink > 0 ||
      llvm::any_of(plan.alternatives,
                   [](const Alternative &a) { return a.time.hostLink > 0; });
  const int parts = hostLink ? kSplitParts : kSplitParts - 1;
  os << "<table><thead><tr><th>#</th><th>configuration</th><th "
        "class=\"num\">step time</th><th class=\"num\">compute</th><th "
        "class=\"num\">nvlink</th><th class=\"num\">network</th><th "
        "class=\"num\">bubble</th>"
     << (hostLink ? "<th class=\"num\">host link</th>" : "")
     << "<th class=\"num\">memory per GPU</th><th>why it lost</th></tr>"
        "</thead><tbody>";
  alternativeRow(os, "chosen", plan.config, plan.stepSeconds, chosen, parts,
                 plan.memory.total(), "-");
  // The step time split of each plan, on one scale.
  const double left = 70, width = 800, row = 24;
  Svg svg(left + width + 90, (plan.alternatives.size() + 1) * row,
          "step time split of the plan and its alternatives");
  auto bar = [&](size_t index, const std::string &name, double step,
                 const TimeBreakdown &time) {
    double y = index * row;
    svg.text(left - 6, y + 13, name, "end", 11);
    drawSplit(svg, left, y, width, 18, time, longest, name);
    svg.text(left + step / longest * width + 4, y + 13, duration(step),
             "start", 10);
  };
  bar(0, "chosen", plan.stepSeconds, chosen);
  for (size_t i = 0; i < plan.alternatives.size(); ++i) {
    const Alternative &a = plan.alternatives[i];
    std::string name = std::to_string(i + 1);
    alternativeRow(os, name, a.config, a.stepSeconds, a.time, parts,
                   a.memoryBytes, a.reason);
    if (a.fits)
      bar(i + 1, name, a.stepSeconds, a.time);
    else
      svg.text(left, (i + 1) * row + 13, "does not fit in memory", "start",
               11, "#e15759");
  }
  os << "</tbody></table>";
  os << "<p class=\"note\">The search ranks every configuration with the "
        "closed-form bubble ((p-1)/(v m) for equal stages); the plans shown "
        "here were then timed by simulating their own schedules and ranked "
        "again (one that does not fit keeps the closed form).</p>";
  if (plan.alternatives.empty())
    os << "<p class=\"note\">No runner-up: the search kept none (a --fix "
          "that pins every choice, or --alternatives 0).</p>";
  os << splitLegend(hostLink) << svg.str() << "</section>\n";
}

static void compareRow(llvm::raw_ostream &os, llvm::StringRef name,
                       const std::string &a, const std::string &b) {
  os << "<tr><td>" << escape(name) << "</td><td class=\"num\">" << escape(a)
     << "</td><td class=\"num\">" << escape(b) << "</td></tr>";
}

void bmc::report::compareSection(const ReportInput &input,
                                 llvm::raw_ostream &os) {
  const Plan &a = input.plan, &b = *input.other;
  os << "<section id=\"compare\"><h2>Compared with "
     << escape(input.otherPath) << "</h2><table><thead><tr><th></th><th "
        "class=\"num\">this plan</th><th class=\"num\">other plan</th></tr>"
        "</thead><tbody>";
  os << "<tr><td>configuration</td><td class=\"mono\">" << configHtml(a.config)
     << "</td><td class=\"mono\">" << configHtml(b.config) << "</td></tr>";
  compareRow(os, "GPUs", std::to_string(a.gpus), std::to_string(b.gpus));
  compareRow(os, "step time", duration(a.stepSeconds),
             duration(b.stepSeconds));
  TimeBreakdown ta = a.items.empty() ? a.time : timeOfItems(a);
  TimeBreakdown tb = b.items.empty() ? b.time : timeOfItems(b);
  compareRow(os, "compute", duration(ta.compute),
             duration(tb.compute));
  compareRow(os, "comm (nvlink)", duration(ta.nvlink),
             duration(tb.nvlink));
  compareRow(os, "comm (network)", duration(ta.network),
             duration(tb.network));
  compareRow(os, "pipeline bubble", duration(ta.bubble),
             duration(tb.bubble));
  if (ta.hostLink > 0 || tb.hostLink > 0)
    compareRow(os, "host link", duration(ta.hostLink), duration(tb.hostLink));
  compareRow(os, "MFU", llvm::formatv("{0:F1}%", 100 * a.mfu).str(),
             llvm::formatv("{0:F1}%", 100 * b.mfu).str());
  compareRow(os, "memory per GPU", formatBytes(a.memory.total()),
             formatBytes(b.memory.total()));
  os << "</tbody></table>";
  double scale = std::max(a.stepSeconds, b.stepSeconds);
  os << "<p class=\"note\">This plan</p>" << timeSplitBar(ta, scale, 900)
     << "<p class=\"note\">Other plan</p>" << timeSplitBar(tb, scale, 900)
     << "</section>\n";
}

void bmc::report::measuredSection(const ReportInput &input,
                                  llvm::raw_ostream &os) {
  const Plan &plan = input.plan;
  const std::vector<MeasuredStep> &steps = input.measured;
  os << "<section id=\"measured\"><h2>Measured (" << escape(input.logPath)
     << ") against predicted</h2>";
  std::vector<double> times;
  for (const MeasuredStep &s : steps)
    times.push_back(s.seconds);
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  double top = std::max(sorted.back(), plan.stepSeconds) * 1.1;
  const double left = 70, width = 900, height = 200;
  Svg svg(left + width + 20, height + 30, "measured step times");
  svg.line(left, height, left + width, height, "#888");
  svg.line(left, 0, left, height, "#888");
  double predictedY = height - plan.stepSeconds / top * height;
  svg.line(left, predictedY, left + width, predictedY, "#e15759", 1.5, true);
  svg.text(left + width, predictedY - 4,
           "predicted " + duration(plan.stepSeconds), "end", 11,
           "#e15759");
  std::string points;
  for (size_t i = 0; i < times.size(); ++i) {
    double x = left + (times.size() == 1
                           ? width / 2
                           : width * i / (times.size() - 1.0));
    double y = height - times[i] / top * height;
    points += llvm::formatv("{0:F1},{1:F1} ", x, y).str();
    svg.rect(x - 2, y - 2, 4, 4, palette(0),
             llvm::formatv("step {0}: {1}", steps[i].step,
                           duration(times[i]))
                 .str(),
             "step");
  }
  svg.polyline(points, palette(0));
  svg.text(left - 6, 10, duration(top), "end", 10);
  svg.text(left - 6, height, "0", "end", 10);
  svg.text(left + width / 2, height + 22, "step", "middle", 11);
  os << "<table><tbody>";
  compareRow(os, "step time (median of " + std::to_string(steps.size()) +
                     " steps / predicted)",
             duration(median), duration(plan.stepSeconds));
  std::optional<double> peak;
  for (const MeasuredStep &s : steps)
    if (s.peakBytes)
      peak = std::max(peak.value_or(0), *s.peakBytes);
  if (peak)
    compareRow(os, "peak memory (measured / predicted, worst stage)",
               formatBytes(*peak), formatBytes(plan.memory.total()));
  std::optional<double> hostPeak;
  for (const MeasuredStep &s : steps)
    if (s.hostPeakBytes)
      hostPeak = std::max(hostPeak.value_or(0), *s.hostPeakBytes);
  std::optional<OffloadSummary> offload = offloadOf(plan);
  if (hostPeak)
    compareRow(os, "host memory (measured / predicted, offloaded optimizer)",
               formatBytes(*hostPeak),
               offload ? formatBytes(offload->hostBytes) : "none");
  TimeBreakdown predicted = plan.items.empty() ? plan.time : timeOfItems(plan);
  std::pair<const char *,
            std::pair<std::optional<double> MeasuredStep::*, double>>
      parts[] = {{"compute", {&MeasuredStep::compute, predicted.compute}},
                 {"communication",
                  {&MeasuredStep::communication,
                   predicted.nvlink + predicted.network}},
                 {"pipeline bubble", {&MeasuredStep::bubble, predicted.bubble}},
                 {"host link", {&MeasuredStep::hostLink, predicted.hostLink}}};
  for (const auto &[name, part] : parts) {
    std::vector<double> values;
    for (const MeasuredStep &s : steps)
      if (s.*part.first)
        values.push_back(*(s.*part.first));
    if (values.empty())
      continue;
    std::sort(values.begin(), values.end());
    compareRow(os, std::string(name) + " (median / predicted)",
               duration(values[values.size() / 2]), duration(part.second));
  }
  os << "</tbody></table>" << svg.str()
     << "<p class=\"note\">The prediction is for the plan's cluster; a "
        "trainer run elsewhere (the CPU backend) measures that machine.</p>"
        "</section>\n";
}
