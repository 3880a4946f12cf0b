//===- PlanningFlags.cpp - the flags `bmc plan` and `bmc compile` share ---===//

#include "tools/bmc/Subcommands.h"

#include "cost/Cluster.h"
#include "cost/CostModel.h"

using llvm::StringRef;

std::optional<int64_t> bmc::parseCount(StringRef text, StringRef what,
                                       std::string &error, int64_t min,
                                       int64_t max) {
  int64_t value;
  if (text.getAsInteger(10, value)) {
    error = what.str() + " expects an integer, got '" + text.str() + "'";
    return std::nullopt;
  }
  if (value < min) {
    error = what.str() + " must be at least " + std::to_string(min) + ", got " +
            text.str();
    return std::nullopt;
  }
  if (value > max) {
    error = what.str() + " must be at most " + std::to_string(max) + ", got " +
            text.str();
    return std::nullopt;
  }
  return value;
}

std::optional<std::string> bmc::applyPlanningFlag(StringRef flag,
                                                  StringRef value,
                                                  PlanningRequest &request) {
  std::string error;
  auto count = [&](StringRef what) -> std::optional<int64_t> {
    return parseCount(value, what, error, 1, bm::cost::kLargestCount);
  };
  if (flag == "--gpus") {
    std::optional<int64_t> n = count("--gpus");
    if (!n)
      return error;
    request.training.gpus = static_cast<int>(*n);
  } else if (flag == "--cluster") {
    request.cluster = value.str();
  } else if (flag == "--global-batch") {
    std::optional<int64_t> n = count("--global-batch");
    if (!n)
      return error;
    request.training.globalBatch = *n;
  } else if (flag == "--seq") {
    std::optional<int64_t> n = count("--seq");
    if (!n)
      return error;
    request.import.dims["seq"] = *n;
    request.import.sequenceLength = *n;
  } else if (flag == "--dim") {
    return parseDim(value, request.import.dims);
  } else if (flag == "--precision") {
    request.training.precision = bm::cost::parsePrecision(value);
    if (!request.training.precision)
      return "--precision must be bf16, fp16 or fp32, got '" + value.str() +
             "'";
  } else if (flag == "--optimizer") {
    std::optional<bm::plan::Optimizer> optimizer =
        bm::cost::parseOptimizer(value);
    if (!optimizer)
      return "--optimizer must be adam, sgd, lamb or lars, got '" +
             value.str() + "'";
    request.training.optimizer = *optimizer;
  } else if (flag == "--fuse-attention") {
    if (value != "on" && value != "off")
      return "--fuse-attention must be on or off, got '" + value.str() + "'";
    request.import.fuseAttention = value == "on";
  } else if (flag == "--fix") {
    llvm::Expected<bm::plan::FixedChoices> fixed =
        bm::plan::parseFixedChoices(value);
    if (!fixed)
      return llvm::toString(fixed.takeError());
    request.training.fixed = *fixed;
  }
  return std::nullopt;
}

std::vector<StringRef> bmc::withPlanningFlags(llvm::ArrayRef<StringRef> own) {
  std::vector<StringRef> flags(std::begin(kPlanningFlags),
                               std::end(kPlanningFlags));
  flags.insert(flags.end(), own.begin(), own.end());
  return flags;
}
