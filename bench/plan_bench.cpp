//===- plan_bench.cpp - `bmc plan` end to end: time and scaling -----------===//
//
// Times what `bmc plan` runs (import, fold, extract, search) on real ONNX
// files and prints the numbers the planner promises, measured side by side
// in one run (the searches round-robin, best of N rounds each, on this
// machine):
//  - GPT-3 175B (96 layers) for 1024 GPUs, import included: under 2 s;
//  - the search for 960 layers takes less than twice that for 96 layers
//    (import and fold, printed beside it, read the whole file: linear);
//  - the folded search is at least 50x faster than --no-fold on 48 layers,
//    with the same best plan (and, for scale, the same ratio at 96 layers).
//    --no-fold runs the folded block search once per layer, so the ratio is
//    about the layer count times the block's share of the folded search.
// Usage: plan_bench GPT3_96L.onnx GPT3_960L.onnx GPT3_48L.onnx [reps]
// (bench/run-plan-bench makes the 48- and 960-layer files with models/zoo.py
// --layers and runs this.)
//
//===----------------------------------------------------------------------===//

#include "driver/PlanDriver.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

using namespace bm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename T> T orDie(llvm::Expected<T> value, llvm::StringRef what) {
  if (!value) {
    llvm::errs() << what << ": " << llvm::toString(value.takeError()) << "\n";
    std::exit(1);
  }
  return std::move(*value);
}

/// Best of `reps` runs of `body`.
double best(int reps, const std::function<void()> &body) {
  double fastest = 1e300;
  for (int r = 0; r < reps; ++r) {
    Clock::time_point start = Clock::now();
    body();
    fastest = std::min(fastest, seconds(start));
  }
  return fastest;
}

/// Loads `path` as `bmc plan` does, best of `reps` for the load time; the
/// last load is kept for the searches.
struct LoadedModel {
  double load = 0; // import + fold + extract
  std::unique_ptr<mlir::MLIRContext> context;
  ModelForPlanning model;
};

LoadedModel load(llvm::StringRef path, int reps) {
  LoadedModel loaded;
  loaded.load = best(reps, [&] {
    // The previous copy is freed before the next load is timed.
    loaded.model = ModelForPlanning();
    loaded.context = std::make_unique<mlir::MLIRContext>();
    OnnxFile file = orDie(readOnnxFile(path), path);
    loaded.model = orDie(loadModelForPlanning(*loaded.context, file, {}), path);
  });
  return loaded;
}

/// One search to time: a model and whether it is folded.
struct Search {
  const plan::ModelGraph *graph;
  plan::TrainingConfig config;
  double seconds = 1e300; // best so far
  plan::Plan plan;
};

/// Times the searches round-robin, `reps` rounds, keeping the best time of
/// each: every ratio compares runs made under the same load on this shared
/// machine, not one batch of runs against a later one.
void timeRoundRobin(std::vector<Search> &searches, int reps) {
  cost::Cluster cluster =
      llvm::cantFail(cost::getClusterPreset("dgx-a100-80g"));
  for (int round = 0; round < reps; ++round)
    for (Search &search : searches) {
      Clock::time_point start = Clock::now();
      plan::Plan plan = orDie(planModel(*search.graph, cluster, search.config),
                              "search");
      search.seconds = std::min(search.seconds, seconds(start));
      search.plan = std::move(plan);
    }
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    llvm::errs() << "usage: plan_bench GPT3_96L.onnx GPT3_960L.onnx "
                    "GPT3_48L.onnx [repetitions]\n";
    return 2;
  }
  int reps = argc > 4 ? std::max(1, std::atoi(argv[4])) : 3;
  plan::TrainingConfig config;
  config.gpus = 1024;
  config.globalBatch = 1536;
  plan::TrainingConfig noFold = config;
  noFold.fold = false;

  LoadedModel m96 = load(argv[1], reps), m960 = load(argv[2], reps),
              m48 = load(argv[3], reps);
  std::vector<Search> searches = {{&m96.model.graph, config},
                                  {&m960.model.graph, config},
                                  {&m48.model.graph, config},
                                  {&m48.model.graph, noFold},
                                  {&m96.model.graph, noFold}};
  timeRoundRobin(searches, reps);
  const Search &t96 = searches[0], &t960 = searches[1],
               &folded48 = searches[2], &unfolded48 = searches[3],
               &unfolded96 = searches[4];

  double total96 = m96.load + t96.seconds;
  llvm::outs() << llvm::formatv(
      "GPT-3 175B, 96 layers, 1024 GPUs: import+fold {0:f3} s, search {1:f3} "
      "s, total {2:f3} s (target < 2 s): {3}\n",
      m96.load, t96.seconds, total96, total96 < 2 ? "ok" : "MISSED");
  llvm::outs() << llvm::formatv(
      "depth: 960 vs 96 layers: search {0:f4} s vs {1:f4} s = {2:f2}x; "
      "import+fold {3:f3} s vs {4:f3} s = {5:f2}x (target search < 2x): "
      "{6}\n",
      t960.seconds, t96.seconds, t960.seconds / t96.seconds, m960.load,
      m96.load, m960.load / m96.load,
      t960.seconds < 2 * t96.seconds ? "ok" : "MISSED");
  bool same = folded48.plan.config.str() == unfolded48.plan.config.str() &&
              folded48.plan.stepSeconds == unfolded48.plan.stepSeconds;
  double speedup = unfolded48.seconds / folded48.seconds;
  llvm::outs() << llvm::formatv(
      "fold: 48 layers, --no-fold search {0:f3} s vs folded {1:f4} s = "
      "{2:f1}x (target >= 50x; --no-fold repeats the folded block search "
      "once per layer, so the ratio stays near the 48 layers), same plan: "
      "{3}: {4}\n",
      unfolded48.seconds, folded48.seconds, speedup, same ? "yes" : "NO",
      speedup >= 50 && same ? "ok" : "MISSED");
  bool same96 = t96.plan.config.str() == unfolded96.plan.config.str();
  llvm::outs() << llvm::formatv(
      "fold: 96 layers, --no-fold search {0:f3} s vs folded {1:f4} s = "
      "{2:f1}x, same configuration: {3}\n",
      unfolded96.seconds, t96.seconds, unfolded96.seconds / t96.seconds,
      same96 ? "yes" : "NO");
  return 0;
}
