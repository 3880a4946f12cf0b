//===- SchedulePrint.cpp - schedules as text for --print-schedule ---------===//

#include "bmrt/Schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace bmrt {

std::string formatAction(const Action &a, bool showChunk) {
  auto id = [&] {
    std::string text = std::to_string(a.microBatch);
    if (showChunk)
      text += "." + std::to_string(a.chunk);
    return text;
  };
  const std::string peer = std::to_string(a.peer);
  switch (a.kind) {
  case ActionKind::Forward:
    return "F" + id();
  case ActionKind::Backward:
  case ActionKind::BackwardInput:
    return "B" + id();
  case ActionKind::BackwardWeight:
    return "W" + id();
  case ActionKind::SendActivation:
    return "sendA" + id() + ">" + peer;
  case ActionKind::RecvActivation:
    return "recvA" + id() + "<" + peer;
  case ActionKind::SendGradient:
    return "sendG" + id() + ">" + peer;
  case ActionKind::RecvGradient:
    return "recvG" + id() + "<" + peer;
  case ActionKind::ReduceGradients:
    return showChunk ? "reduce." + std::to_string(a.chunk) : "reduce";
  case ActionKind::OptimizerStep:
    return "step";
  }
  return "?";
}

std::string formatActionLists(const std::vector<RankActions> &lists,
                              bool showChunk) {
  std::string text;
  for (size_t r = 0; r < lists.size(); ++r) {
    text += "rank " + std::to_string(r) + ":";
    for (const Action &a : lists[r])
      text += " " + formatAction(a, showChunk);
    text += "\n";
  }
  return text;
}

/// Pads `text` on the right to `width` characters.
static std::string pad(std::string text, size_t width) {
  text.resize(std::max(text.size(), width), ' ');
  return text;
}

/// The compute action of each rank in each slot: its name in the first
/// slot it covers, "-" in the others, so a backward twice as long as a
/// forward reads as one action, not two; "." where the rank computes
/// nothing. Also the widest cell.
static std::vector<std::vector<std::string>>
gridCells(const SimulationResult &result, bool showChunk, double slot,
          size_t &width) {
  const auto columns =
      static_cast<size_t>(std::ceil(result.stepTime / slot - 1e-9));
  std::vector<std::vector<std::string>> cells(
      result.timeline.size(), std::vector<std::string>(columns, "."));
  width = std::to_string(columns ? columns - 1 : 0).size();
  for (size_t r = 0; r < result.timeline.size(); ++r)
    for (const TimedAction &t : result.timeline[r]) {
      if (!t.action.isCompute())
        continue;
      auto first = static_cast<size_t>(std::lround(t.start / slot));
      auto last =
          std::max(first + 1, static_cast<size_t>(std::lround(t.end / slot)));
      std::string label = formatAction(t.action, showChunk);
      width = std::max(width, label.size());
      for (size_t c = first; c < last && c < columns; ++c)
        cells[r][c] = c == first ? label : "-";
    }
  return cells;
}

/// One line: `head` then the cells [from, to), trailing blanks dropped.
static std::string gridLine(const std::string &head,
                            const std::vector<std::string> &cells, size_t from,
                            size_t to, size_t width) {
  std::string line = head + " |";
  for (size_t c = from; c < to; ++c)
    line += " " + pad(cells[c], width);
  line.erase(line.find_last_not_of(' ') + 1);
  return line + "\n";
}

std::string formatTimelineGrid(const SimulationResult &result, bool showChunk,
                               double slot, size_t maxWidth) {
  if (!(slot > 0))
    slot = 1;
  size_t width = 1;
  std::vector<std::vector<std::string>> cells =
      gridCells(result, showChunk, slot, width);
  const size_t columns = cells.empty() ? 0 : cells[0].size();
  const size_t margin =
      ("rank " + std::to_string(result.timeline.size())).size();
  std::vector<std::string> times;
  for (size_t c = 0; c < columns; ++c)
    times.push_back(std::to_string(c));
  // Long steps wrap into bands of whole columns, each with its own time
  // row, so a terminal never folds a row into the next.
  size_t band = columns;
  if (maxWidth > 0 && margin + 2 + columns * (width + 1) > maxWidth)
    band = std::max<size_t>(1, (maxWidth - std::min(maxWidth, margin + 2)) /
                                   (width + 1));
  std::string text;
  for (size_t from = 0; from < columns || from == 0; from += band) {
    const size_t to = std::min(columns, from + band);
    if (from > 0)
      text += "\n";
    text += gridLine(pad("time", margin), times, from, to, width);
    for (size_t r = 0; r < cells.size(); ++r)
      text += gridLine(pad("rank " + std::to_string(r), margin), cells[r], from,
                       to, width);
    if (columns == 0)
      break;
  }
  return text;
}

/// The header's bubble line. The closed form (p-1)/(v m) is GPipe's, 1F1B's
/// and interleaving's; the split kinds have none that holds for every
/// shape, so their simulated bubble stands alone, named by the schedule.
static std::string bubbleSummary(const ScheduleSpec &spec,
                                 const SimulationResult &result) {
  char text[200];
  if (spec.splitsBackward())
    std::snprintf(text, sizeof(text),
                  "step %g, bubble %.3f of the compute (simulated %s, "
                  "B and W apart)",
                  result.stepTime, result.bubbleFraction, toString(spec.kind));
  else
    std::snprintf(text, sizeof(text),
                  "step %g, bubble %.3f of the compute ((p-1)/(v m) = %.3f)",
                  result.stepTime, result.bubbleFraction,
                  static_cast<double>(spec.pp - 1) / (spec.m * spec.v));
  return text;
}

std::string printSchedule(const ScheduleSpec &spec, const ActionCosts &costs) {
  std::vector<RankActions> lists = generateSchedule(spec, costs);
  SimulationResult result = simulate(lists, costs, spec.layout());
  // One column per shortest forward: with the default costs a forward is
  // one column and a backward two (B and W one each where they are apart).
  double slot = costs.forwardTime(0);
  for (int stage = 1; stage < spec.virtualStages(); ++stage)
    slot = std::min(slot, costs.forwardTime(stage));
  const bool showChunk = spec.v > 1;
  std::string text = std::string("schedule ") + toString(spec.kind) +
                     ": pp=" + std::to_string(spec.pp) +
                     " v=" + std::to_string(spec.v) +
                     " m=" + std::to_string(spec.m) + " (" +
                     (result.ok() ? "no deadlock" : result.describe()) + ")\n";
  text += formatTimelineGrid(result, showChunk, slot);
  text += bubbleSummary(spec, result) + "; peak activations per rank:";
  for (int peak : result.peakActivations)
    text += " " + std::to_string(peak);
  text += showChunk ? " chunks\n" : "\n";
  if (spec.splitsBackward()) {
    text += "peak W inputs per rank:";
    for (int peak : result.peakWeightInputs)
      text += " " + std::to_string(peak);
    text += showChunk ? " chunks\n" : "\n";
  }
  text += "instructions:\n" + formatActionLists(lists, showChunk);
  return text;
}

} // namespace bmrt
