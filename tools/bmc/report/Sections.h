//===- Sections.h - the sections of the HTML report -------------*- C++ -*-===//
//
// One function per section; each writes a <section> with an id the browser
// test looks for (summary, mesh, timeline, memory, communication, sharding,
// alternatives, compare, measured).
//
//===----------------------------------------------------------------------===//

#ifndef BMC_TOOLS_BMC_REPORT_SECTIONS_H
#define BMC_TOOLS_BMC_REPORT_SECTIONS_H

#include "tools/bmc/report/Html.h"
#include "tools/bmc/report/Report.h"

#include <array>

namespace bmc::report {

void summarySection(const ReportInput &input, llvm::raw_ostream &os);
void meshSection(const ReportInput &input, llvm::raw_ostream &os);
void timelineSection(const bm::plan::Plan &plan, llvm::raw_ostream &os);
void memorySection(const bm::plan::Plan &plan, llvm::raw_ostream &os);
void communicationSection(const bm::plan::Plan &plan, llvm::raw_ostream &os);
void shardingSection(const bm::plan::Plan &plan, llvm::raw_ostream &os);
void alternativesSection(const bm::plan::Plan &plan, llvm::raw_ostream &os);
void compareSection(const ReportInput &input, llvm::raw_ostream &os);
void measuredSection(const ReportInput &input, llvm::raw_ostream &os);

/// Identical pipeline ranks in the stage group that starts at `stage` (the
/// items say), 1 when unknown.
int stageDevices(const bm::plan::Plan &plan, int stage);
/// "stage 3", or "stages 1-6" for a group.
std::string stageName(const bm::plan::Plan &plan, int stage);

/// The parts of a step time split, in drawing order: compute, NVLink,
/// network, bubble, host link (the offloaded optimizer's copies).
inline constexpr int kSplitParts = 5;
extern const char *const kSplitNames[kSplitParts];
std::array<double, kSplitParts> splitParts(const bm::plan::TimeBreakdown &time);

/// One stacked bar of a step time split at (x, y), `scale` seconds to
/// `width` units, each part with a tooltip naming `plan`.
void drawSplit(Svg &svg, double x, double y, double width, double height,
               const bm::plan::TimeBreakdown &time, double scale,
               const std::string &plan);

/// The colours of drawSplit's parts, as an HTML legend (the host link's
/// where `hostLink`).
std::string splitLegend(bool hostLink);

/// A horizontal bar of the step time split (compute, NVLink, network,
/// bubble, and the host link where it has one), `width` wide, scaled so
/// that `scale` seconds fill it.
std::string timeSplitBar(const bm::plan::TimeBreakdown &time, double scale,
                         double width);

} // namespace bmc::report

#endif // BMC_TOOLS_BMC_REPORT_SECTIONS_H
