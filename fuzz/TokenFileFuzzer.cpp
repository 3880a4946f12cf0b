//===- TokenFileFuzzer.cpp - fuzz the token-file reader -------------------===//
//
// The first input byte picks the token type (bit 0), whether tokens are
// checked against a vocabulary (bit 1, vocabulary 50257 as GPT-2's) and a
// start position (the rest, as a checkpoint would restore it); the other
// bytes are the file. Reads more tokens than the file holds, so wrapping
// around its end is exercised.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "runtime/trainer/Data.h"

#include "bmrt/Error.h"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  uint8_t control = data[0];
  bm::fuzz::MemoryFile file(data + 1, size - 1);
  bmrt::TokenType type =
      control & 1 ? bmrt::TokenType::I32 : bmrt::TokenType::U16;
  try {
    bmrt::TokenFile tokens(file.path(), type);
    if (control & 2)
      tokens.checkVocab(50257);
    tokens.setPosition(control >> 2);
    std::vector<int64_t> out(2 * tokens.size() + 3);
    tokens.next(out.data(), static_cast<int64_t>(out.size()));
  } catch (const bmrt::Error &) {
  }
  return 0;
}
