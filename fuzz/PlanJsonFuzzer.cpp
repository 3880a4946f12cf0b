//===- PlanJsonFuzzer.cpp - fuzz the plan-file reader ---------------------===//
//
// parsePlanJson, what `bmc compile --plan` and bm-annotate read. Malformed
// plans must come back as an llvm::Error; a plan that parses is printed and
// parsed again, which must succeed (the writer's output is always readable).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanOutput.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<bm::plan::Plan> plan = bm::plan::parsePlanJson(text);
  if (!plan) {
    llvm::consumeError(plan.takeError());
    return 0;
  }
  llvm::Expected<bm::plan::Plan> again =
      bm::plan::parsePlanJson(bm::plan::planToJson(*plan));
  if (!again)
    std::abort(); // what the writer wrote, the reader refused
  return 0;
}
