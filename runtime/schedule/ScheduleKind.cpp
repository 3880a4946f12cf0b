//===- ScheduleKind.cpp - schedule kinds, stage layouts, valid shapes -----===//
//
// The names of the schedule kinds, how each places its virtual stages on
// the ranks, and which (kind, pp, v, m) have a schedule at all.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Schedule.h"

namespace bmrt {

const char *toString(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::None:
    return "none";
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved:
    return "interleaved";
  case ScheduleKind::ZeroBubbleH1:
    return "zb-h1";
  case ScheduleKind::ZeroBubbleV:
    return "zb-v";
  case ScheduleKind::DualPipeV:
    return "dualpipe-v";
  }
  return "?";
}

std::optional<ScheduleKind> parseScheduleKind(const std::string &text) {
  for (ScheduleKind kind : allScheduleKinds())
    if (text == toString(kind))
      return kind;
  return std::nullopt;
}

const std::vector<ScheduleKind> &allScheduleKinds() {
  static const std::vector<ScheduleKind> kinds = {
      ScheduleKind::None,         ScheduleKind::GPipe,
      ScheduleKind::OneFOneB,     ScheduleKind::Interleaved,
      ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleV,
      ScheduleKind::DualPipeV};
  return kinds;
}

bool splitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleH1 ||
         kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV;
}

StageLayout layoutOf(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV
             ? StageLayout::V
             : StageLayout::Loop;
}

int virtualStageOf(StageLayout layout, int pp, int rank, int chunk) {
  if (layout == StageLayout::V && chunk == 1)
    return 2 * pp - 1 - rank;
  return chunk * pp + rank;
}

int rankOfStage(StageLayout layout, int pp, int virtualStage) {
  if (layout == StageLayout::V && virtualStage >= pp)
    return 2 * pp - 1 - virtualStage;
  return virtualStage % pp;
}

int chunkOfStage(StageLayout layout, int pp, int virtualStage) {
  if (layout == StageLayout::V)
    return virtualStage >= pp ? 1 : 0;
  return virtualStage / pp;
}

/// The zero-bubble kinds' own conditions, or nullopt.
static std::optional<std::string> zeroBubbleProblem(const ScheduleSpec &spec) {
  const std::string name = toString(spec.kind), pp = std::to_string(spec.pp),
                    v = std::to_string(spec.v), m = std::to_string(spec.m);
  if (spec.pp < 2)
    return "the " + name + " schedule needs pp >= 2 ranks, got pp=" + pp;
  if (spec.kind == ScheduleKind::ZeroBubbleH1)
    return std::nullopt; // v is checked with the other one-chunk kinds
  if (spec.v != 2)
    return "the " + name +
           " schedule needs v=2 model chunks per rank (a V), got v=" + v;
  // DualPipe-V's phases are counted for m >= 2 pp (dualpipev.py asserts
  // it): the first rank's warm-up and forward phases take 2 pp - 1 of
  // chunk 0's micro-batches before its main phase, which must run at least
  // once; with fewer the phase counts go negative.
  if (spec.kind == ScheduleKind::DualPipeV && spec.m < 2 * spec.pp)
    return "the dualpipe-v schedule needs m >= 2 pp micro-batches, got m=" + m +
           " with pp=" + pp + ", as DualPipe does";
  return std::nullopt;
}

std::optional<std::string> scheduleProblem(const ScheduleSpec &spec) {
  const std::string pp = std::to_string(spec.pp), v = std::to_string(spec.v),
                    m = std::to_string(spec.m);
  if (spec.pp < 1)
    return "a pipeline needs at least one stage, got pp=" + pp;
  if (spec.m < 1)
    return "a step needs at least one micro-batch, got m=" + m;
  if (spec.v < 1)
    return "a rank needs at least one model chunk, got v=" + v;
  if (spec.kind == ScheduleKind::None && spec.pp != 1)
    return "schedule none runs no pipeline, got pp=" + pp;
  const bool twoChunks = spec.layout() == StageLayout::V;
  if (spec.kind != ScheduleKind::Interleaved && !twoChunks && spec.v != 1)
    return "v=" + v +
           " model chunks per rank need the interleaved schedule, not " +
           toString(spec.kind);
  if (splitsBackward(spec.kind))
    return zeroBubbleProblem(spec);
  if (spec.kind != ScheduleKind::Interleaved)
    return std::nullopt;
  if (spec.pp < 2)
    return "the interleaved schedule needs pp >= 2 ranks, got pp=" + pp;
  if (spec.v < 2)
    return "the interleaved schedule needs v >= 2 model chunks per rank, got "
           "v=" +
           v + " (that is 1f1b)";
  // Megatron-LM's order sends micro-batches round the ranks in groups of
  // pp; a partial group would leave a chunk waiting for a micro-batch that
  // never comes in that order.
  if (spec.m % spec.pp != 0)
    return "the interleaved schedule needs the micro-batches (m=" + m +
           ") to be a multiple of pp=" + pp + ", as Megatron-LM does";
  return std::nullopt;
}

void validateSchedule(const ScheduleSpec &spec) {
  if (std::optional<std::string> problem = scheduleProblem(spec))
    BMRT_FAIL(*problem);
}

} // namespace bmrt
