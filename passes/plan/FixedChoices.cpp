//===- FixedChoices.cpp - the --fix parser and configuration printing -----===//

#include "cost/Cluster.h"
#include "passes/plan/Plan.h"
#include "passes/plan/TrainingConfig.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

using namespace bm::plan;
using llvm::StringRef;

const char *bm::plan::toString(Recompute recompute) {
  switch (recompute) {
  case Recompute::None:
    return "none";
  case Recompute::Selective:
    return "selective";
  case Recompute::Full:
    return "full";
  }
  return "none";
}

const char *bm::plan::toString(StreamLayout layout) {
  switch (layout) {
  case StreamLayout::Replicated:
    return "replicated";
  case StreamLayout::Sequence:
    return "sequence";
  case StreamLayout::Hidden:
    return "hidden";
  }
  return "replicated";
}

const char *bm::plan::toString(Offload offload) {
  return offload == Offload::Optimizer ? "optimizer" : "none";
}

std::optional<Offload> bm::plan::parseOffload(StringRef text) {
  for (Offload offload : {Offload::None, Offload::Optimizer})
    if (text == toString(offload))
      return offload;
  return std::nullopt;
}

static llvm::Error fixError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--fix: " + message);
}

static llvm::Expected<int> parseCount(StringRef key, StringRef text, int min,
                                      int max) {
  int value;
  if (text.getAsInteger(10, value) || value < min || value > max)
    return fixError(key + " must be an integer in [" + llvm::Twine(min) + ", " +
                    llvm::Twine(max) + "], got '" + text + "'");
  return value;
}

static llvm::Error parseRecompute(StringRef value, FixedChoices &fixed) {
  if (fixed.recompute)
    return fixError("recompute is given twice");
  if (value == "none")
    fixed.recompute = Recompute::None;
  else if (value == "selective")
    fixed.recompute = Recompute::Selective;
  else if (value == "full")
    fixed.recompute = Recompute::Full;
  else
    return fixError("recompute must be none, selective or full, got '" + value +
                    "'");
  return llvm::Error::success();
}

static llvm::Error parseSchedule(StringRef value, FixedChoices &fixed) {
  if (fixed.schedule)
    return fixError("schedule is given twice");
  std::optional<ScheduleKind> kind = bmrt::parseScheduleKind(value.str());
  if (!kind)
    return fixError("schedule must be gpipe, 1f1b, interleaved, zb-h1, zb-v "
                    "or dualpipe-v, got '" +
                    value + "'");
  fixed.schedule = *kind;
  return llvm::Error::success();
}

static llvm::Error parseOffloadChoice(StringRef value, FixedChoices &fixed) {
  if (fixed.offload)
    return fixError("offload is given twice");
  fixed.offload = parseOffload(value);
  if (!fixed.offload)
    return fixError("offload must be none or optimizer, got '" + value + "'");
  return llvm::Error::success();
}

/// stream=replicated|sequence|hidden, the split ones with an optional
/// dimension (hidden:1).
static llvm::Error parseStream(StringRef value, FixedChoices &fixed) {
  auto [name, dim] = value.split(':');
  std::optional<StreamLayout> layout;
  for (StreamLayout l :
       {StreamLayout::Replicated, StreamLayout::Sequence, StreamLayout::Hidden})
    if (name == toString(l))
      layout = l;
  if (fixed.stream)
    return fixError("stream is given twice");
  if (!layout)
    return fixError("stream must be replicated, sequence or hidden (the "
                    "split ones optionally with a dimension, as in "
                    "hidden:1), got '" +
                    value + "'");
  if (value.contains(':') && *layout == StreamLayout::Replicated)
    return fixError("stream=replicated splits no dimension, got '" + value +
                    "'");
  if (value.contains(':')) {
    llvm::Expected<int> parsed =
        parseCount("stream dimension", dim, 0, bm::cost::kLargestCount);
    if (!parsed)
      return parsed.takeError();
    fixed.streamDim = *parsed;
  }
  fixed.stream = layout;
  return llvm::Error::success();
}

static llvm::Error parseContextLayout(StringRef value, FixedChoices &fixed) {
  if (fixed.cpMirrored)
    return fixError("cp_layout is given twice");
  if (value != "contiguous" && value != "mirrored")
    return fixError("cp_layout must be contiguous or mirrored, got '" + value +
                    "'");
  fixed.cpMirrored = value == "mirrored";
  return llvm::Error::success();
}

/// One key=value item into `fixed`.
static llvm::Error parseItem(StringRef key, StringRef value,
                             FixedChoices &fixed) {
  auto count = [&](std::optional<int> &slot, int min, int max) -> llvm::Error {
    if (slot)
      return fixError(key + " is given twice");
    llvm::Expected<int> parsed = parseCount(key, value, min, max);
    if (!parsed)
      return parsed.takeError();
    slot = *parsed;
    return llvm::Error::success();
  };
  const int most = bm::cost::kLargestCount;
  // Keys alphabetical.
  if (key == "cp")
    return count(fixed.cp, 1, most);
  if (key == "cp_layout")
    return parseContextLayout(value, fixed);
  if (key == "dp")
    return count(fixed.dp, 1, most);
  if (key == "ep")
    return count(fixed.ep, 1, most);
  if (key == "mb")
    return count(fixed.microBatch, 1, most);
  if (key == "offload")
    return parseOffloadChoice(value, fixed);
  if (key == "pp")
    return count(fixed.pp, 1, most);
  if (key == "recompute")
    return parseRecompute(value, fixed);
  if (key == "schedule")
    return parseSchedule(value, fixed);
  if (key == "stream")
    return parseStream(value, fixed);
  if (key == "tp")
    return count(fixed.tp, 1, most);
  if (key == "tp2")
    return count(fixed.tp2, 1, most);
  if (key == "v")
    return count(fixed.chunks, 1, most);
  if (key == "zero")
    return count(fixed.zeroStage, 0, 3);
  return fixError(
      "unknown key '" + key +
      "' (keys: cp, cp_layout, dp, ep, mb, offload, pp, recompute, schedule, "
      "stream, tp, tp2, v, zero)");
}

/// Choices that contradict each other, whatever the model.
static llvm::Error checkCombination(const FixedChoices &fixed) {
  const bool vShaped =
      fixed.schedule && bmrt::layoutOf(*fixed.schedule) == bmrt::StageLayout::V;
  if (fixed.chunks && *fixed.chunks > 1 && fixed.schedule &&
      *fixed.schedule != ScheduleKind::Interleaved && !vShaped)
    return fixError("v=" + llvm::Twine(*fixed.chunks) +
                    " needs schedule=interleaved, zb-v or dualpipe-v");
  if (vShaped && fixed.chunks && *fixed.chunks != 2)
    return fixError(
        llvm::Twine("schedule=") + bmrt::toString(*fixed.schedule) +
        " runs v=2 chunks per device, got v=" + llvm::Twine(*fixed.chunks));
  if (fixed.cpMirrored && fixed.cp && *fixed.cp == 1)
    return fixError("cp_layout lays out the shares of cp > 1 ranks; cp=1 "
                    "splits nothing");
  if (fixed.ep && fixed.dp && *fixed.dp % *fixed.ep != 0)
    return fixError("ep=" + llvm::Twine(*fixed.ep) +
                    " must divide dp=" + llvm::Twine(*fixed.dp));
  if (fixed.pp && *fixed.pp == 1 && fixed.schedule &&
      *fixed.schedule != ScheduleKind::None)
    return fixError("pp=1 has no pipeline schedule");
  if (fixed.pp && *fixed.pp > 1 && fixed.schedule &&
      *fixed.schedule == ScheduleKind::None)
    return fixError("schedule=none needs pp=1, got pp=" +
                    llvm::Twine(*fixed.pp));
  return llvm::Error::success();
}

llvm::Expected<FixedChoices> bm::plan::parseFixedChoices(StringRef text) {
  FixedChoices fixed;
  llvm::SmallVector<StringRef> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  if (items.empty())
    return fixError("expected key=value[,key=value...], got '" + text + "'");
  for (StringRef item : items) {
    auto [key, value] = item.trim().split('=');
    key = key.trim();
    value = value.trim();
    if (value.empty())
      return fixError("expected key=value, got '" + item.trim() + "'");
    if (llvm::Error error = parseItem(key, value, fixed))
      return std::move(error);
  }
  if (llvm::Error error = checkCombination(fixed))
    return std::move(error);
  return fixed;
}

std::string bm::plan::formatFixedChoices(const FixedChoices &fixed) {
  std::vector<std::string> parts;
  auto add = [&](const char *key, const std::optional<int> &value) {
    if (value)
      parts.push_back(std::string(key) + "=" + std::to_string(*value));
  };
  add("dp", fixed.dp);
  add("cp", fixed.cp);
  if (fixed.cpMirrored)
    parts.push_back(std::string("cp_layout=") +
                    (*fixed.cpMirrored ? "mirrored" : "contiguous"));
  add("ep", fixed.ep);
  add("tp", fixed.tp);
  add("tp2", fixed.tp2);
  add("pp", fixed.pp);
  add("mb", fixed.microBatch);
  add("zero", fixed.zeroStage);
  if (fixed.recompute)
    parts.push_back(std::string("recompute=") + toString(*fixed.recompute));
  if (fixed.schedule)
    parts.push_back(std::string("schedule=") + bmrt::toString(*fixed.schedule));
  add("v", fixed.chunks);
  if (fixed.stream)
    parts.push_back("stream=" + formatStream(*fixed.stream, fixed.streamDim));
  if (fixed.offload)
    parts.push_back(std::string("offload=") + toString(*fixed.offload));
  return llvm::join(parts, ",");
}

std::string bm::plan::formatStream(StreamLayout layout,
                                   std::optional<int> dim) {
  return std::string(toString(layout)) +
         (dim ? ":" + std::to_string(*dim) : "");
}

std::string ParallelConfig::str() const {
  FixedChoices fixed;
  fixed.dp = dp;
  // Written only where the sequence is split: other configurations print
  // as they always have.
  if (cp > 1)
    fixed.cp = cp;
  // Mirrored is the default wherever it runs: only the other is written.
  if (cp > 1 && !cpMirrored)
    fixed.cpMirrored = false;
  if (ep > 1)
    fixed.ep = ep;
  fixed.tp = tp;
  if (tp2 > 1)
    fixed.tp2 = tp2;
  fixed.pp = pp;
  fixed.microBatch = microBatch;
  fixed.zeroStage = zeroStage;
  fixed.recompute = recompute;
  fixed.schedule = schedule;
  fixed.chunks = chunks;
  if (tp > 1)
    fixed.stream = stream;
  // A model may have several dimensions of one kind to split the stream
  // along (a conv net's channels, height and width; a grid of tokens):
  // the dimension makes the choice one that --fix reads back exactly.
  if (tp > 1 && stream != StreamLayout::Replicated)
    fixed.streamDim = streamDim;
  // Written only where it is not none: configurations without offload
  // print as they always have.
  if (offload != Offload::None)
    fixed.offload = offload;
  return formatFixedChoices(fixed);
}

bool ParallelConfig::operator==(const ParallelConfig &other) const {
  return dp == other.dp && cp == other.cp && cpMirrored == other.cpMirrored &&
         tp == other.tp && tp2 == other.tp2 && pp == other.pp &&
         ep == other.ep && microBatch == other.microBatch &&
         numMicroBatches == other.numMicroBatches &&
         zeroStage == other.zeroStage && recompute == other.recompute &&
         schedule == other.schedule && chunks == other.chunks &&
         streamDim == other.streamDim && stream == other.stream &&
         offload == other.offload;
}
