//===- SafetensorsFuzzer.cpp - fuzz the safetensors reader ----------------===//
//
// readSafetensors on the input as a file: the header length, the JSON
// header, dtypes, shapes and byte ranges are all untrusted. bmrt::Error is
// the expected outcome for malformed files; anything else escaping is a bug.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Error.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bm::fuzz::MemoryFile file(data, size);
  try {
    bmrt::SafetensorsFile read = bmrt::readSafetensors(file.path());
    for (const bmrt::HostTensor &tensor : read.tensors)
      bmrt::findTensor(read.tensors, tensor.name);
  } catch (const bmrt::Error &) {
  }
  return 0;
}
