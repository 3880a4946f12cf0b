//===- PlanText.cpp - the readable plan report (and --explain) ------------===//

#include "passes/plan/PlanOutput.h"

#include "cost/Cluster.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>

using namespace bm::plan;

std::string bm::plan::formatSeconds(double seconds) {
  if (seconds >= 1)
    return llvm::formatv("{0:F3} s", seconds).str();
  return llvm::formatv("{0:F2} ms", seconds * 1e3).str();
}

static std::string share(double part, double total) {
  return llvm::formatv("{0,5:F1}%", total > 0 ? 100 * part / total : 0).str();
}

static std::string scheduleText(const ParallelConfig &c) {
  if (c.pp == 1)
    return "no pipeline";
  std::string text = bmrt::toString(c.schedule);
  if (c.schedule == ScheduleKind::Interleaved)
    text += llvm::formatv(" (v={0})", c.chunks).str();
  return text;
}

std::string bm::plan::formatTensorSharding(const TensorSharding &t) {
  std::vector<std::string> dims;
  for (const std::vector<std::string> &axes : t.dims)
    dims.push_back("{" + llvm::join(axes, ",") + "}");
  std::string text = "[" + llvm::join(dims, ", ") + "]";
  if (!t.partialAxes.empty())
    text += " partial{" + llvm::join(t.partialAxes, ",") + "}";
  return text;
}

/// Layers per stage, run-length encoded: "12 x 4, 11 x 4".
static std::string stagesText(const std::vector<int> &layers) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j < layers.size() && layers[j] == layers[i])
      ++j;
    parts.push_back(j - i == 1
                        ? std::to_string(layers[i])
                        : llvm::formatv("{0} x {1}", layers[i], j - i).str());
    i = j;
  }
  return llvm::join(parts, ", ");
}

/// Models without token ids (vision) count samples, not tokens.
static bool countsTokens(const Plan &plan) { return plan.sequenceLength > 1; }

/// What the plan is for: model, GPUs, cluster, batch.
static void printRequest(const Plan &plan, llvm::raw_ostream &os) {
  os << llvm::formatv("plan for {0} on {1} GPUs of {2}\n", plan.modelName,
                      plan.gpus, plan.clusterName);
  if (plan.clusterCalibrated)
    os << llvm::formatv(
        "  cluster calibrated on {0}, {1}: measured curves "
        "replace the analytic ones where they apply\n",
        plan.calibrationMachine.empty() ? "an unnamed machine"
                                        : plan.calibrationMachine,
        plan.calibrationDate.empty() ? "undated" : plan.calibrationDate);
  if (countsTokens(plan))
    os << llvm::formatv("  global batch {0} x {1} tokens, {2}, {3}\n",
                        plan.globalBatch, plan.sequenceLength,
                        bm::cost::toString(plan.precision),
                        bm::cost::toString(plan.optimizer));
  else
    os << llvm::formatv("  global batch {0} samples, {1}, {2}\n",
                        plan.globalBatch, bm::cost::toString(plan.precision),
                        bm::cost::toString(plan.optimizer));
}

/// The mesh, schedule, stream layout, fold and stages.
static void printConfiguration(const Plan &plan, llvm::raw_ostream &os) {
  const ParallelConfig &c = plan.config;
  const std::string cp =
      c.cp > 1 ? llvm::formatv("cp={0} x ", c.cp).str() : std::string();
  const std::string tp2 =
      c.tp2 > 1 ? llvm::formatv(" x tp2={0}", c.tp2).str() : std::string();
  os << llvm::formatv("mesh        dp={0} x {3}tp={1}{5} x pp={2} (ranks: tp "
                      "innermost, then {6}{4}dp, then pp)\n",
                      c.dp, c.tp, c.pp, cp, c.cp > 1 ? "cp, then " : "", tp2,
                      c.tp2 > 1 ? "tp2, then " : "");
  if (c.tp2 > 1)
    os << llvm::formatv("2-D tensor  tp={0} x tp2={1} grid (Optimus): tp2 "
                        "splits each micro-batch's samples and the weights' "
                        "other dimension, gathered over tp2 for each use\n",
                        c.tp, c.tp2);
  if (!plan.tensor2Reason.empty())
    os << "2-D tensor  " << plan.tensor2Reason << "\n";
  if (c.cp > 1)
    os << llvm::formatv("context     cp={0}: each sequence split {0} ways{1}, "
                        "every attention's keys and values all-gathered over "
                        "cp\n",
                        c.cp,
                        c.cpMirrored
                            ? " in mirrored chunks (rank r holds chunks r and "
                              "2cp-1-r: even causal work)"
                            : " in contiguous shares");
  if (!plan.contextReason.empty())
    os << "            (" << plan.contextReason << ")\n";
  if (c.ep > 1)
    os << llvm::formatv("experts     ep={0}: each expert on dp/ep={1} "
                        "replicas, tokens exchanged all-to-all\n",
                        c.ep, c.dp / c.ep);
  os << llvm::formatv("micro-batch {0} x {1} micro-batches, {2}, ZeRO "
                      "stage {3}, recompute {4}\n",
                      c.microBatch, c.numMicroBatches, scheduleText(c),
                      c.zeroStage, toString(c.recompute));
  if (c.tp > 1) {
    os << "stream      values between blocks ";
    switch (c.stream) {
    case StreamLayout::Replicated:
      os << "replicated over tp (Megatron-LM)\n";
      break;
    case StreamLayout::Sequence:
      os << llvm::formatv("split along the sequence (dim {0}) over tp "
                          "(Megatron-LM's sequence parallelism)\n",
                          c.streamDim);
      break;
    case StreamLayout::Hidden:
      os << llvm::formatv("split along dim {0} over tp (stream=hidden:{0})\n",
                          c.streamDim);
      break;
    }
  }
  os << llvm::formatv("fold        {0} layers -> {1} unique block{2}\n",
                      plan.numLayers, plan.numBlockClasses,
                      plan.numBlockClasses == 1 ? "" : "s");
  os << "stages      layers per " << (c.chunks > 1 ? "virtual " : "")
     << "stage: " << stagesText(plan.layersPerStage) << "\n";
  os << "--fix       " << c.str() << "\n\n";
}

/// The step time, split as the items add up, and throughput.
static void printStepTime(const Plan &plan, llvm::raw_ostream &os) {
  // The split the items add up to (plans written before the items carry
  // only the split).
  const TimeBreakdown t = plan.items.empty() ? plan.time : timeOfItems(plan);
  double total = t.total();
  os << "step time   " << formatSeconds(plan.stepSeconds) << "\n";
  os << "  compute             " << formatSeconds(t.compute) << "  "
     << share(t.compute, total) << "\n";
  os << "  comm (nvlink)       " << formatSeconds(t.nvlink) << "  "
     << share(t.nvlink, total) << "\n";
  os << "  comm (network)      " << formatSeconds(t.network) << "  "
     << share(t.network, total) << "\n";
  os << "  pipeline bubble     " << formatSeconds(t.bubble) << "  "
     << share(t.bubble, total) << "\n";
  if (t.hostLink > 0)
    os << "  host link           " << formatSeconds(t.hostLink) << "  "
       << share(t.hostLink, total) << "\n";
  os << llvm::formatv("throughput  {0:F0} {1}/s, MFU {2:F1}%, {3:F1} "
                      "TFLOP/s per GPU (with recompute)\n",
                      plan.tokensPerSecond,
                      countsTokens(plan) ? "tokens" : "samples", 100 * plan.mfu,
                      plan.hardwareTflopsPerGpu);
  if (plan.tpMostlyRepeats())
    os << repeatedWorkLine(plan) << "\n";
  os << "\n";
}

std::string bm::plan::repeatedWorkLine(const Plan &plan) {
  const int tp = plan.config.tp;
  return llvm::formatv(
             "GPUs        about {0:F0} of the {1} GPUs do distinct work: "
             "tp={2} "
             "divides the compute {3:F1} ways (its ops are too small to "
             "split, or split ones cost more than they save), so the other "
             "GPUs of each tp group repeat it; a step is no faster on the "
             "extra GPUs",
             plan.distinctWorkGpus(), plan.gpus, tp, plan.tpComputeSplit)
      .str();
}

/// Memory per GPU on the worst stage.
static void printMemory(const Plan &plan, llvm::raw_ostream &os) {
  const MemoryBreakdown &m = plan.memory;
  os << llvm::formatv("memory per GPU (worst stage: {0})  {1} of {2}\n",
                      m.stage, formatBytes(m.total()),
                      formatBytes(plan.deviceMemoryBytes));
  os << "  parameters          " << formatBytes(m.params) << "\n";
  os << "  gradients           " << formatBytes(m.grads) << "\n";
  os << "  optimizer state     " << formatBytes(m.optimizer) << "\n";
  os << "  activations         " << formatBytes(m.activations) << "\n";
  os << "  buffers, workspace  " << formatBytes(m.buffers) << "\n";
  if (std::optional<std::string> offload = offloadLine(plan))
    os << *offload << "\n";
  os << "\n";
}

std::optional<std::string> bm::plan::offloadLine(const Plan &plan) {
  std::optional<OffloadSummary> offload = offloadOf(plan);
  if (!offload)
    return std::nullopt;
  std::string host =
      offload->hostMemoryBytes > 0
          ? "of " + formatBytes(offload->hostMemoryBytes) + " host memory"
          : "in the device's own memory (the cluster's host has none "
            "apart)";
  std::string behind =
      offload->behind > 0
          ? llvm::formatv("; {0} more of them run behind the next forward, "
                          "whose first reader of each parameter waits for "
                          "its range",
                          formatSeconds(offload->behind))
                .str()
          : "";
  return llvm::formatv(
             "offload     optimizer state, fp32 master weights and gradient "
             "copies on the host: {0} per GPU {1}; each step copies the "
             "gradients to the host ({2}), steps there ({3}) and copies the "
             "parameters back ({4}): {5} on the host link{6}",
             formatBytes(offload->hostBytes), host,
             formatSeconds(offload->toHost), formatSeconds(offload->hostStep),
             formatSeconds(offload->toDevice),
             formatSeconds(offload->hostLink()), behind)
      .str();
}

/// Collectives per step, merged by axis, kind, phase and link.
namespace {
/// What one device does of one kind of collective in a step.
struct CollectiveLine {
  int64_t count = 0;
  double bytes = 0, seconds = 0, hidden = 0;
  /// Adds `calls` calls of `bytesPerCall` each.
  void add(int64_t calls, double bytesPerCall, double exposed, double behind) {
    count += calls;
    bytes += bytesPerCall * static_cast<double>(calls);
    seconds += exposed;
    hidden += behind;
  }
};
using CollectiveKey =
    std::tuple<std::string, std::string, std::string, std::string>;
} // namespace

/// Per (axis, kind, phase, link), what one device sees: the sums over the
/// items of each stage group (its devices are alike), the group that spends
/// the longest on it kept. Summing over the stages instead would add up
/// collectives that run side by side on different devices.
static std::map<CollectiveKey, CollectiveLine>
busiestDeviceCollectives(const Plan &plan) {
  std::map<std::pair<CollectiveKey, int>, CollectiveLine> perGroup;
  for (const CostItem &item : plan.items) {
    if (item.kind != CostItem::Kind::Collective &&
        item.kind != CostItem::Kind::Transfer)
      continue;
    perGroup[{{item.axis, item.what, item.phase, item.link}, item.stage}].add(
        item.count, item.bytes, item.seconds, item.hiddenSeconds);
  }
  std::map<CollectiveKey, CollectiveLine> busiest;
  for (const auto &[key, line] : perGroup) {
    auto [it, added] = busiest.try_emplace(key.first, line);
    if (!added &&
        line.seconds + line.hidden > it->second.seconds + it->second.hidden)
      it->second = line;
  }
  return busiest;
}

/// Per (axis, kind, phase, link), summed over one model replica: what a
/// plan without items (written before they were) has.
static std::map<CollectiveKey, CollectiveLine>
replicaCollectives(const Plan &plan) {
  std::map<CollectiveKey, CollectiveLine> merged;
  for (const CollectiveSummary &s : plan.collectives)
    merged[{s.axis, s.kind, s.phase, s.link}].add(s.countPerStep, s.bytes,
                                                  s.seconds, s.hiddenSeconds);
  return merged;
}

/// Collectives per step, by axis, kind, phase and link.
static void printCollectives(const Plan &plan, llvm::raw_ostream &os) {
  const bool perDevice = !plan.items.empty();
  const std::map<CollectiveKey, CollectiveLine> lines =
      perDevice ? busiestDeviceCollectives(plan) : replicaCollectives(plan);
  os << (perDevice ? "collectives per step on one device (for each line, "
                     "the pipeline rank that spends the longest on it)\n"
                   : "collectives per step (one model replica, all "
                     "stages)\n");
  for (const auto &[key, line] : lines) {
    const auto &[axis, kind, phase, link] = key;
    os << llvm::formatv("  {0,-3} {1,-15} {2,-17} {3,7} calls {4,12} "
                        "{5,-8} {6}{7}\n",
                        axis, kind, phase, line.count, formatBytes(line.bytes),
                        link, formatSeconds(line.seconds),
                        line.hidden > 0 ? " (+" + formatSeconds(line.hidden) +
                                              " behind the backward)"
                                        : std::string());
  }
  if (lines.empty())
    os << "  none\n";
}

/// The runner-ups and why each lost.
static void printAlternatives(const Plan &plan, llvm::raw_ostream &os) {
  if (!plan.alternatives.empty()) {
    os << "\nalternatives\n";
    for (const Alternative &a : plan.alternatives)
      os << llvm::formatv("  {0,-62} {1}: {2}\n", a.config.str(),
                          a.fits ? formatSeconds(a.stepSeconds)
                                 : formatBytes(a.memoryBytes),
                          a.reason);
  }
}

/// What --explain adds: the search, every op's sharding, every collective.
static void printSearchDetails(const Plan &plan, llvm::raw_ostream &os) {
  os << llvm::formatv("\nsearch      {0} configurations scored, {1} block "
                      "searches (one per unique block, tp degree, "
                      "micro-batch size and stream layout)\n",
                      plan.configurationsEvaluated, plan.blockSearches);
  for (const BlockSharding &block : plan.blocks) {
    os << llvm::formatv("\n{0} ({1} instance{2})\n", block.name,
                        block.numInstances, block.numInstances == 1 ? "" : "s");
    for (const OpSharding &op : block.ops) {
      std::vector<std::string> axes;
      for (const auto &[factor, axis] : op.factorAxes)
        axes.push_back(factor + "->" + axis);
      std::vector<std::string> operands, results;
      for (const TensorSharding &s : op.operands)
        operands.push_back(formatTensorSharding(s));
      for (const TensorSharding &s : op.results)
        results.push_back(formatTensorSharding(s));
      os << llvm::formatv("  {0,-34} {1,-14} {2}\n", op.label, op.opName,
                          op.rule);
      os << llvm::formatv("  {0,-34} {1,-14} ({2}) -> ({3})\n", "",
                          llvm::join(axes, " "), llvm::join(operands, ", "),
                          llvm::join(results, ", "));
    }
  }
  os << "\ncollectives in detail\n";
  for (const CollectiveSummary &s : plan.collectives)
    os << llvm::formatv("  {0,-3} {1,-15} {2,-16} {3,-40} {4,10} x {5,-7} "
                        "{6}\n",
                        s.axis, s.kind, s.phase, s.where, formatBytes(s.bytes),
                        s.countPerStep, formatSeconds(s.seconds));
}

void bm::plan::printPlanText(const Plan &plan, llvm::raw_ostream &os,
                             bool explain) {
  printRequest(plan, os);
  printConfiguration(plan, os);
  printStepTime(plan, os);
  printMemory(plan, os);
  printCollectives(plan, os);
  printAlternatives(plan, os);
  if (explain)
    printSearchDetails(plan, os);
}
