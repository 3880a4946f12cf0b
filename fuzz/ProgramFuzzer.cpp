//===- ProgramFuzzer.cpp - fuzz the step-program parser and verifier ------===//
//
// What the trainer does with OUT/program.txt before running anything:
// parseProgram, inlineCalls, verifyProgram. The verifier's promise is that
// a program it accepts is safe for every kernel; this target checks the
// parser and verifier never crash on their own, and print/parse round trips.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Program.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  bmrt::Program program;
  try {
    program = bmrt::parseProgram(text, "fuzz.program");
  } catch (const bmrt::Error &) {
    return 0;
  }
  try {
    bmrt::parseProgram(bmrt::printProgram(program), "printed");
  } catch (const bmrt::Error &) {
    std::abort(); // what the printer wrote, the parser refused
  }
  try {
    bmrt::verifyProgram(bmrt::inlineCalls(program), "fuzz.program");
  } catch (const bmrt::Error &) {
  }
  return 0;
}
