//===- import_bench.cpp - time of `bmc import` on the model zoo -----------===//
//
// The planner imports a model before every search, so import must stay far
// below a second even for the largest graphs: GPT-3 175B is 96 layers,
// 4339 ONNX nodes. Measures the whole path (read + parse + import + verify)
// and the import alone from a parsed model.
//
//   build/bin/import_bench [--benchmark_filter=175b]
//
//===----------------------------------------------------------------------===//

#include "import/OnnxImporter.h"
#include "import/OnnxLoader.h"

#include "mlir/IR/MLIRContext.h"

#include <benchmark/benchmark.h>

#include <string>

namespace {

std::string modelPath(const char *name) {
  return std::string(BMC_SOURCE_DIR) + "/models/onnx/" + name;
}

bm::ImportOptions batch8() {
  bm::ImportOptions options;
  options.dims["batch"] = 8;
  return options;
}

void readAndImport(benchmark::State &state, const char *name) {
  std::string path = modelPath(name);
  for (auto _ : state) {
    mlir::MLIRContext context;
    auto module = bm::importOnnxFile(context, path, batch8());
    if (!module) {
      state.SkipWithError(llvm::toString(module.takeError()).c_str());
      return;
    }
    benchmark::DoNotOptimize(module->get());
  }
}

void importParsed(benchmark::State &state, const char *name) {
  std::string path = modelPath(name);
  auto model = bm::loadOnnxModel(path);
  if (!model) {
    state.SkipWithError(llvm::toString(model.takeError()).c_str());
    return;
  }
  for (auto _ : state) {
    mlir::MLIRContext context;
    auto module = bm::importOnnxModel(context, **model, path, batch8());
    if (!module) {
      state.SkipWithError(llvm::toString(module.takeError()).c_str());
      return;
    }
    benchmark::DoNotOptimize(module->get());
  }
}

BENCHMARK_CAPTURE(readAndImport, gpt3_175b, "gpt3-175b.onnx")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(importParsed, gpt3_175b, "gpt3-175b.onnx")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(readAndImport, llama2_70b, "llama2-70b.onnx")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(readAndImport, gpt3_1t, "gpt3-1t.onnx")
    ->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
