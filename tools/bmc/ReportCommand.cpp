//===- ReportCommand.cpp - `bmc report plan.json [--html FILE] ...` -------===//
//
// Reads a plan that `bmc plan -o` wrote and prints what `bmc plan` printed,
// or writes the HTML report (tools/bmc/report): the plan's itemised step,
// its timeline, memory, communication and sharding, the alternatives, a
// second plan to compare with, and a trainer's measured steps.
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/Subcommands.h"
#include "tools/bmc/report/Report.h"

#include "cost/Cluster.h"
#include "passes/plan/PlanOutput.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace bmc;
using llvm::StringRef;

namespace {

constexpr StringRef kHelp =
    R"(USAGE: bmc report PLAN.json [--html FILE] [--log RUN.jsonl] [--compare OTHER.json]

Reads a plan written by 'bmc plan -o PLAN.json'. Without --html, prints the
plan as 'bmc plan' does. With --html, writes one self-contained HTML file
(no network access needed): summary, mesh over the nodes, pipeline timeline,
memory per stage, communication, per-op sharding, alternatives.

OPTIONS:
  --html FILE        write the HTML report to FILE
  --log RUN.jsonl    a trainer's --log of this plan: measured beside predicted
  --compare OTHER    a second plan of the same model, side by side
  --explain          (text) also per-op shardings and every collective
  --help             print this help
)";

struct ReportArgs {
  std::string plan;
  std::optional<std::string> html, log, compare;
  bool explain = false;
};

std::optional<int> parseArgs(llvm::ArrayRef<StringRef> args, ReportArgs &out) {
  ArgCursor cursor("report", args);
  while (!cursor.done()) {
    if (cursor.takeSwitch("--help") || cursor.takeSwitch("-h")) {
      llvm::outs() << kHelp;
      return 0;
    }
    if (cursor.takeSwitch("--explain")) {
      out.explain = true;
      continue;
    }
    std::optional<std::string> value;
    StringRef matched =
        cursor.takeAnyFlag({"--html", "--log", "--compare"}, value);
    if (matched.empty()) {
      if (cursor.isOption())
        return cursor.unknownOption();
      StringRef positional = cursor.takePositional();
      if (!out.plan.empty())
        return fail("bmc report takes one plan, got '" + out.plan + "' and '" +
                    positional + "'");
      out.plan = positional.str();
      continue;
    }
    if (cursor.error)
      return fail(*cursor.error);
    (matched == "--html" ? out.html
     : matched == "--log" ? out.log
                          : out.compare) = *value;
  }
  if (out.plan.empty())
    return fail("bmc report needs a plan file; see 'bmc report --help'");
  return std::nullopt;
}

/// The file's text, or the one-line error naming it.
llvm::Expected<std::string> readText(StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(buffer.getError(), "cannot read '" + path +
                                                          "': " +
                                                          buffer.getError()
                                                              .message());
  return (*buffer)->getBuffer().str();
}

llvm::Expected<bm::plan::Plan> readPlan(StringRef path) {
  llvm::Expected<std::string> text = readText(path);
  if (!text)
    return text.takeError();
  llvm::Expected<bm::plan::Plan> plan = bm::plan::parsePlanJson(*text);
  if (!plan)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "'" + path + "': " +
                                       llvm::toString(plan.takeError()));
  return plan;
}

} // namespace

int bmc::writeReportHtml(StringRef path, const report::ReportInput &input) {
  return writeFile(path, [&](llvm::raw_ostream &os) {
    report::printReportHtml(input, os);
  });
}

/// GPUs per node of the plan's cluster when bmc knows it (a preset, or a
/// cluster file by the same name), else 0.
static int gpusPerNode(const bm::plan::Plan &plan) {
  llvm::Expected<bm::cost::Cluster> cluster =
      bm::cost::loadCluster(plan.clusterName);
  if (!cluster) {
    llvm::consumeError(cluster.takeError());
    return 0;
  }
  return cluster->gpusPerNode;
}

int bmc::runReport(llvm::ArrayRef<StringRef> args) {
  ReportArgs reportArgs;
  if (std::optional<int> exit = parseArgs(args, reportArgs))
    return *exit;
  llvm::Expected<bm::plan::Plan> plan = readPlan(reportArgs.plan);
  if (!plan)
    return fail(llvm::toString(plan.takeError()));
  report::ReportInput input;
  input.plan = std::move(*plan);
  input.planPath = reportArgs.plan;
  input.gpusPerNode = gpusPerNode(input.plan);
  if (reportArgs.compare) {
    llvm::Expected<bm::plan::Plan> other = readPlan(*reportArgs.compare);
    if (!other)
      return fail("--compare: " + llvm::toString(other.takeError()));
    if (other->modelName != input.plan.modelName)
      return fail("--compare: '" + *reportArgs.compare + "' plans model '" +
                  other->modelName + "', '" + reportArgs.plan +
                  "' plans model '" + input.plan.modelName + "'");
    input.other = std::move(*other);
    input.otherPath = *reportArgs.compare;
  }
  if (reportArgs.log) {
    llvm::Expected<std::string> text = readText(*reportArgs.log);
    if (!text)
      return fail(llvm::toString(text.takeError()));
    auto steps = report::readTrainerLog(*text, input.plan);
    if (!steps)
      return fail("'" + *reportArgs.log + "': " +
                  llvm::toString(steps.takeError()));
    input.measured = std::move(*steps);
    input.logPath = *reportArgs.log;
  }
  if (reportArgs.html)
    return writeReportHtml(*reportArgs.html, input);
  if (input.other || !input.measured.empty())
    return fail("--compare and --log go into the HTML report: add --html "
                "FILE");
  bm::plan::printPlanText(input.plan, llvm::outs(), reportArgs.explain);
  return 0;
}
