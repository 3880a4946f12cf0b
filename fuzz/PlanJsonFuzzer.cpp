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
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<bm::plan::Plan> plan = bm::plan::parsePlanJson(text);
  if (!plan) {
    llvm::consumeError(plan.takeError());
    return 0;
  }
  std::string printed = bm::plan::planToJson(*plan);
  llvm::Expected<bm::plan::Plan> again = bm::plan::parsePlanJson(printed);
  if (!again) { // what the writer wrote, the reader refused
    llvm::errs() << "the printed plan does not parse: "
                 << llvm::toString(again.takeError()) << "\n"
                 << printed << "\n";
    std::abort();
  }
  return 0;
}
