//===- Report.h - the HTML report of a plan (`bmc report --html`) -*- C++ -*-===//
//
// The report reads the itemised plan (Plan::items, stageMemory, timeline)
// and draws it as one self-contained HTML file: styles, the small scripts
// (copy buttons, the sharding filter) and every chart (SVG drawn here) are
// inline, so the file works offline and makes no request.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_TOOLS_BMC_REPORT_REPORT_H
#define BMC_TOOLS_BMC_REPORT_REPORT_H

#include "passes/plan/Plan.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace bmc::report {

/// One step of a trainer log (runtime/trainer/StepReport.cpp, one JSON
/// object per line): what the report sets beside the prediction.
struct MeasuredStep {
  int64_t step = 0;
  double seconds = 0;
  std::optional<double> peakBytes;
  /// The step split as the trainer measures it, where it logs one:
  /// compute, communication (all axes) and pipeline bubble; with the
  /// optimizer offloaded, its copies between device and host (the host
  /// link) and the host memory it held at most.
  std::optional<double> compute, communication, bubble, hostLink;
  std::optional<double> hostPeakBytes;
};

/// Reads a trainer's JSON lines. `itemsPerStep` is what the plan's step
/// processes on one data-parallel rank (tokens, or samples for models
/// without tokens): a log whose steps process another amount is of another
/// plan, and so is a log naming another model. One-line errors.
llvm::Expected<std::vector<MeasuredStep>>
readTrainerLog(llvm::StringRef text, const bm::plan::Plan &plan);

struct ReportInput {
  bm::plan::Plan plan;
  std::string planPath;
  /// --compare: a second plan of the same model.
  std::optional<bm::plan::Plan> other;
  std::string otherPath;
  /// --log: the measured steps.
  std::vector<MeasuredStep> measured;
  std::string logPath;
  /// GPUs per node of the plan's cluster (0 when unknown).
  int gpusPerNode = 0;
};

/// The whole HTML document.
void printReportHtml(const ReportInput &input, llvm::raw_ostream &os);

} // namespace bmc::report

#endif // BMC_TOOLS_BMC_REPORT_REPORT_H
