//===- TrainerLog.cpp - the measured steps of a trainer --log file --------===//

#include "tools/bmc/report/Report.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace bmc::report;

static llvm::Error logError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "log: " + message);
}

llvm::Expected<std::vector<MeasuredStep>>
bmc::report::readTrainerLog(llvm::StringRef text, const bm::plan::Plan &plan) {
  const bool tokens = plan.sequenceLength > 1;
  const char *rateKey = tokens ? "tokens_per_s" : "samples_per_s";
  // What one data-parallel rank processes per step under this plan.
  const double expected =
      static_cast<double>(plan.globalBatch) / std::max(plan.config.dp, 1) *
      static_cast<double>(tokens ? plan.sequenceLength : 1);
  std::vector<MeasuredStep> steps;
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = llvm::formatv("line {0}", i + 1).str();
    llvm::Expected<llvm::json::Value> value = llvm::json::parse(lines[i]);
    if (!value) {
      llvm::consumeError(value.takeError());
      return logError(where + " is not JSON: is this a trainer --log file?");
    }
    const llvm::json::Object *object = value->getAsObject();
    std::optional<double> seconds =
        object ? object->getNumber("step_time_s") : std::nullopt;
    std::optional<int64_t> step =
        object ? object->getInteger("step") : std::nullopt;
    if (!seconds || !step)
      return logError(where + " has no 'step' and 'step_time_s': is this a "
                              "trainer --log file?");
    if (std::optional<llvm::StringRef> model = object->getString("model"))
      if (*model != plan.modelName)
        return logError(llvm::formatv("the log is of model '{0}', the plan "
                                      "of '{1}'",
                                      *model, plan.modelName));
    std::optional<double> rate = object->getNumber(rateKey);
    if (!rate)
      return logError(llvm::formatv("{0} has no '{1}': the log is of another "
                                    "plan (the plan counts {2})",
                                    where, rateKey,
                                    tokens ? "tokens" : "samples"));
    // The rate is items / seconds: items per step to a tenth of a percent
    // (the log keeps about 6 significant digits of each).
    double items = *rate * *seconds;
    if (std::abs(items - expected) > 1e-3 * expected)
      return logError(llvm::formatv(
          "the log is of another plan: its steps process {0:F0} {1} per "
          "data-parallel rank, this plan's {2:F0} (global batch {3} over "
          "dp={4})",
          items, tokens ? "tokens" : "samples", expected, plan.globalBatch,
          plan.config.dp));
    MeasuredStep measured;
    measured.step = *step;
    measured.seconds = *seconds;
    if (const llvm::json::Object *memory =
            object->getObject("peak_memory_bytes"))
      measured.peakBytes = memory->getNumber("total");
    measured.compute = object->getNumber("compute_time_s");
    measured.bubble = object->getNumber("bubble_time_s");
    // The offloaded optimizer's phases (runtime/trainer/OptimizerOffload):
    // the copies are the host link's. Behind the next forward, the step
    // waited ("wait") for part of the three: the copies' share of it, as
    // the plan splits what the forward waits for.
    if (const llvm::json::Object *offload =
            object->getObject("offload_time_s")) {
      double copies = offload->getNumber("copy_down").value_or(0) +
                      offload->getNumber("copy_up").value_or(0);
      if (std::optional<double> wait = offload->getNumber("wait")) {
        double all = copies + offload->getNumber("host_step").value_or(0);
        copies = all > 0 ? *wait * copies / all : 0;
      }
      measured.hostLink = copies;
    }
    measured.hostPeakBytes = object->getNumber("host_peak_memory_bytes");
    if (const llvm::json::Object *axes =
            object->getObject("communication_time_s")) {
      double sum = 0;
      for (const auto &[axis, seconds] : *axes)
        sum += seconds.getAsNumber().value_or(0);
      measured.communication = sum;
    }
    steps.push_back(measured);
  }
  if (steps.empty())
    return logError("no steps in the log");
  return steps;
}
