//===- PlanCommand.cpp - `bmc plan MODEL.onnx --gpus N` -------------------===//
//
// The main job: import the model, fold its repeated layers, search data /
// tensor / pipeline parallelism with the cost model, and print the plan.
// Phases 1 to 4 of DESIGN.md run here: import, fold, plan, annotate
// (--emit-mlir).
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/Subcommands.h"
#include "tools/bmc/report/Report.h"

#include "driver/PlanDriver.h"
#include "passes/plan/PlanOutput.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdint>
#include <optional>

using namespace bmc;
using llvm::StringRef;

namespace {

constexpr StringRef kHelp = R"(USAGE: bmc plan MODEL.onnx --gpus N [options]

Searches data x tensor x pipeline parallelism, per-op sharding, pipeline
schedule, micro-batching, ZeRO and recomputation for training MODEL on N
GPUs, with an analytic cost model of the cluster (no GPU is touched), and
prints the best plan. Weights are not read: graph-only models plan.

OPTIONS:
  --gpus N              number of GPUs (required)
  --cluster NAME|FILE   a preset (dgx-a100-80g, dgx-h100-80g, alpa-v100) or a
                        JSON / YAML cluster file (default: dgx-a100-80g)
  --global-batch N      samples per optimizer step (default: one per GPU,
                        rounded up to the model's token groups, if any)
  --seq N               sequence length (binds the model's 'seq' dimension)
  --dim NAME=VALUE      bind a symbolic dimension (repeatable)
  --precision P         bf16 or fp16 (mixed precision; default bf16, or
                        fp16 on GPUs without bf16) or fp32
  --optimizer O         adam (default), sgd, lamb or lars (lamb keeps two
                        moments as adam, lars one buffer as sgd)
  --fix K=V,...         pin choices and evaluate them with the same cost
                        model: dp, tp, pp, mb, zero (0-3), recompute
                        (none|selective|full), schedule (gpipe|1f1b|
                        interleaved), v (chunks per device), stream
                        (replicated|sequence|hidden[:DIM]: how the values
                        between blocks lie over tp), offload (none|
                        optimizer: its state and step in host memory), cp
                        (context parallelism: each sequence split over cp
                        ranks; searched only where nothing fits without),
                        cp_layout (mirrored|contiguous: two mirrored chunks
                        per rank, the default where the model allows, or
                        one share), tp2 (2-D tensor parallelism: each tensor
                        group a tp x tp2 grid; tp2 splits the samples and
                        each weight's other dimension)
  --fuse-attention on|off
                        price each attention core (scores, scale, causal
                        mask, softmax, context) as one fused op that never
                        stores the scores, as bmc compile --device cuda
                        runs it (default off); written into the plan
  --no-fold             search every layer on its own (same result, slower)
  --explain             also print per-op shardings, collectives and why the
                        alternatives lost
  --alternatives N      how many runner-up plans to keep (default 4)
  --json                print the plan as JSON instead of text
  -o FILE               also write the JSON plan to FILE
  --html FILE           also write the HTML report to FILE (as 'bmc report
                        PLAN.json --html FILE' would)
  --emit-mlir FILE      write the model annotated with bm.mesh and
                        #bm.sharding to FILE ('-' for stdout)
  --export megatron     print the equivalent Megatron-LM arguments (the
                        search keeps to what Megatron-LM runs: ZeRO 0 or 1,
                        1F1B or interleaved, no stream split along hidden)
  --help                print this help
)";

struct PlanArgs {
  std::string model;
  bm::ImportOptions import;
  std::string cluster = "dgx-a100-80g";
  bm::plan::TrainingConfig training;
  bool explain = false, json = false;
  std::optional<std::string> jsonFile, htmlFile, mlirFile, exportFormat;
};

/// Returns 0 to go on, or the exit code.
std::optional<int> parseArgs(llvm::ArrayRef<StringRef> args, PlanArgs &out) {
  ArgCursor cursor("plan", args);
  PlanningRequest request{out.training, out.import, out.cluster};
  const std::vector<StringRef> flags = withPlanningFlags(
      {"--alternatives", "-o", "--html", "--emit-mlir", "--export"});
  out.training.gpus = 0; // required: 0 until --gpus gives it
  while (!cursor.done()) {
    std::optional<std::string> value;
    std::string error;
    if (cursor.takeSwitch("--help") || cursor.takeSwitch("-h")) {
      llvm::outs() << kHelp;
      return 0;
    }
    if (cursor.takeSwitch("--no-fold")) {
      out.training.fold = false;
      continue;
    }
    if (cursor.takeSwitch("--explain")) {
      out.explain = true;
      continue;
    }
    if (cursor.takeSwitch("--json")) {
      out.json = true;
      continue;
    }
    StringRef matched = cursor.takeAnyFlag(flags, value);
    if (matched.empty()) {
      if (cursor.isOption())
        return cursor.unknownOption();
      StringRef positional = cursor.takePositional();
      if (!out.model.empty())
        return fail("bmc plan takes one model, got '" + out.model +
                    "' and '" + positional + "'");
      out.model = positional.str();
      continue;
    }
    if (cursor.error)
      return fail(*cursor.error);
    StringRef v = *value;
    if (llvm::is_contained(kPlanningFlags, matched)) {
      if (std::optional<std::string> bad =
              applyPlanningFlag(matched, v, request))
        return fail(*bad);
    } else if (matched == "--alternatives") {
      auto n =
          parseCount(v, "--alternatives", error, 0, bm::cost::kLargestCount);
      if (!n)
        return fail(error);
      out.training.numAlternatives = static_cast<int>(*n);
    } else if (matched == "-o") {
      out.jsonFile = v.str();
    } else if (matched == "--html") {
      out.htmlFile = v.str();
    } else if (matched == "--emit-mlir") {
      out.mlirFile = v.str();
    } else if (matched == "--export") {
      if (v != "megatron")
        return fail("--export supports 'megatron', got '" + v + "'");
      out.exportFormat = v.str();
    }
  }
  if (out.model.empty())
    return fail("bmc plan needs a model file; see 'bmc plan --help'");
  if (out.training.gpus == 0)
    return fail("bmc plan needs --gpus N; see 'bmc plan --help'");
  if (out.json && out.exportFormat)
    return fail("--json and --export both print to standard output; write "
                "the JSON plan with -o FILE");
  // Search only the plans Megatron-LM can run.
  out.training.megatronOnly = out.exportFormat.has_value();
  return std::nullopt;
}

} // namespace

int bmc::runPlan(llvm::ArrayRef<StringRef> args) {
  PlanArgs planArgs;
  if (std::optional<int> exit = parseArgs(args, planArgs))
    return *exit;
  auto start = std::chrono::steady_clock::now();

  // The cluster first: a typo there should not wait for the import.
  llvm::Expected<bm::cost::Cluster> cluster =
      bm::cost::loadCluster(planArgs.cluster);
  if (!cluster)
    return fail(llvm::toString(cluster.takeError()));

  llvm::Expected<bm::OnnxFile> file = bm::readOnnxFile(planArgs.model);
  if (!file)
    return fail(llvm::toString(file.takeError()));
  mlir::MLIRContext context;
  llvm::Expected<bm::ModelForPlanning> model =
      bm::loadModelForPlanning(context, *file, planArgs.import);
  if (!model)
    return fail(llvm::toString(model.takeError()));
  llvm::Expected<bm::plan::Plan> plan =
      bm::planModel(model->graph, *cluster, planArgs.training);
  if (!plan)
    return fail(llvm::toString(plan.takeError()));
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();

  // What -o and --json write is read back first: never a file that
  // `bmc report` or `bmc compile --plan` would refuse.
  std::optional<std::string> json;
  if (planArgs.jsonFile || planArgs.json) {
    llvm::Expected<std::string> checked = bm::plan::planToCheckedJson(*plan);
    if (!checked)
      return fail(llvm::toString(checked.takeError()));
    json = std::move(*checked);
  }
  if (planArgs.jsonFile)
    if (int rc = writeFile(*planArgs.jsonFile,
                           [&](llvm::raw_ostream &os) { os << *json; }))
      return rc;
  if (planArgs.htmlFile) {
    report::ReportInput input;
    input.plan = *plan;
    input.planPath = planArgs.model;
    input.gpusPerNode = cluster->gpusPerNode;
    if (int rc = writeReportHtml(*planArgs.htmlFile, input))
      return rc;
  }
  if (planArgs.mlirFile) {
    llvm::Expected<bm::ModelForPlanning> step = bm::annotateForStep(
        context, *file, planArgs.import, *plan, model->graph);
    if (!step)
      return fail(llvm::toString(step.takeError()));
    if (int rc = writeFile(*planArgs.mlirFile, [&](llvm::raw_ostream &os) {
          step->module->print(os);
          os << "\n";
        }))
      return rc;
  }
  if (planArgs.exportFormat) {
    llvm::Expected<std::string> megatron =
        bm::plan::exportMegatronArguments(*plan);
    if (!megatron)
      return fail(llvm::toString(megatron.takeError()));
    llvm::outs() << *megatron << "\n";
    return 0;
  }
  if (planArgs.json) {
    llvm::outs() << *json;
    return 0;
  }
  if (planArgs.mlirFile && *planArgs.mlirFile == "-")
    return 0;
  bm::plan::printPlanText(*plan, llvm::outs(), planArgs.explain);
  llvm::outs() << llvm::format("\nplanned in %.2f s (import, fold, search)\n",
                               seconds);
  return 0;
}
