//===- OnnxCustomMutator.cpp - libFuzzer's hook for OnnxMutator -----------===//
//
// Linked into the libFuzzer build of the ONNX target only. Inputs that
// parse as a ModelProto get structure-aware mutations most of the time and
// libFuzzer's byte mutations otherwise (so the protobuf parser and the
// loader's corrupt-file paths stay fuzzed too).
//
//===----------------------------------------------------------------------===//

#include "fuzz/OnnxMutator.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned int seed) {
  std::mt19937_64 rng(seed);
  onnx::ModelProto model;
  if (rng() % 8 == 0 || !model.ParseFromArray(data, static_cast<int>(size)))
    return LLVMFuzzerMutate(data, size, maxSize);
  bm::fuzz::mutateOnnxModel(model, rng);
  std::string bytes;
  if (!model.SerializeToString(&bytes) || bytes.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}
