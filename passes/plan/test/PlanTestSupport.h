//===- PlanTestSupport.h - what the planner's tests set up alike -*- C++ -*-===//
//
// The cluster the tests plan for and the training configurations they ask
// for, shared by the unit tests (hand-built graphs) and the end-to-end ones
// (ONNX files).
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_TEST_PLANTESTSUPPORT_H
#define BM_PLAN_TEST_PLANTESTSUPPORT_H

#include "cost/Cluster.h"
#include "passes/plan/ModelGraph.h"
#include "passes/plan/Plan.h"
#include "passes/plan/TrainingConfig.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace bm::plan::test {

/// The DGX A100 80 GB preset.
cost::Cluster a100();

/// `gpus` GPUs, `globalBatch` samples per step and the choices `fix` pins
/// (`--fix` syntax; none when empty).
TrainingConfig trainingConfig(int gpus, int64_t globalBatch,
                              llvm::StringRef fix = "");

/// evaluateConfiguration of `fix` on A100s; a failure fails the calling test
/// and gives an empty Plan.
Plan evaluateFixed(const ModelGraph &graph, int gpus, int64_t globalBatch,
                   llvm::StringRef fix);

/// The message of `result`'s error, or "" when it holds a value.
template <typename T> std::string errorText(llvm::Expected<T> result) {
  return result ? std::string() : llvm::toString(result.takeError());
}

} // namespace bm::plan::test

#endif // BM_PLAN_TEST_PLANTESTSUPPORT_H
