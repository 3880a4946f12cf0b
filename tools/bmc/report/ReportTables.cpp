//===- ReportTables.cpp - sharding, alternatives, compare, measured -------===//

#include "tools/bmc/report/Html.h"
#include "tools/bmc/report/Sections.h"

#include "passes/plan/PlanOutput.h"

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

void bmc::report::alternativesSection(const Plan &plan,
                                      llvm::raw_ostream &os) {
  os << "<section id=\"alternatives\"><h2>Alternatives</h2>";
  double longest = plan.stepSeconds;
  for (const Alternative &a : plan.alternatives)
    if (a.fits)
      longest = std::max(longest, a.stepSeconds);
  const double left = 20, width = 360;
  Svg svg(left + width + 90, (plan.alternatives.size() + 1) * 24,
          "step time of the plan and its alternatives");
  auto bar = [&](int row, double seconds, const char *colour,
                 const std::string &name) {
    double w = longest > 0 ? seconds / longest * width : 0;
    svg.rect(left, row * 24, w, 18, colour, name + ": " + duration(seconds),
             "alt");
    svg.text(left + w + 4, row * 24 + 13, duration(seconds), "start", 10);
  };
  bar(0, plan.stepSeconds, palette(2), "chosen " + plan.config.str());
  os << "<table><thead><tr><th>#</th><th>configuration</th><th "
        "class=\"num\">step time</th><th class=\"num\">memory per GPU</th>"
        "<th>why it lost</th></tr></thead><tbody>";
  os << "<tr><td>chosen</td><td class=\"mono\">" << escape(plan.config.str())
     << "</td><td class=\"num\">" << duration(plan.stepSeconds)
     << "</td><td class=\"num\">" << formatBytes(plan.memory.total())
     << "</td><td>-</td></tr>";
  for (size_t i = 0; i < plan.alternatives.size(); ++i) {
    const Alternative &a = plan.alternatives[i];
    if (a.fits)
      bar(static_cast<int>(i + 1), a.stepSeconds, palette(0),
          a.config.str());
    else
      svg.text(left, (i + 1) * 24 + 13, "does not fit", "start", 10,
               "#e15759");
    os << "<tr><td>" << i + 1 << "</td><td class=\"mono\">"
       << escape(a.config.str()) << "</td><td class=\"num\">"
       << duration(a.stepSeconds) << "</td><td class=\"num\">"
       << formatBytes(a.memoryBytes) << "</td><td>" << escape(a.reason)
       << "</td></tr>";
  }
  os << "</tbody></table>";
  if (plan.alternatives.empty())
    os << "<p class=\"note\">No runner-up: the search kept none (a --fix "
          "that pins every choice, or --alternatives 0).</p>";
  os << svg.str() << "</section>\n";
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
  compareRow(os, "configuration", a.config.str(), b.config.str());
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
  os << "</tbody></table>" << svg.str()
     << "<p class=\"note\">The prediction is for the plan's cluster; a "
        "trainer run elsewhere (the CPU backend) measures that machine.</p>"
        "</section>\n";
}
