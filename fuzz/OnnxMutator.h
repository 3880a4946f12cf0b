//===- OnnxMutator.h - structure-aware mutations of ONNX models -*- C++ -*-===//
//
// Raw byte flips rarely survive protobuf parsing, so the ONNX fuzz target
// also mutates parsed models: dims, element types, attributes, names, graph
// edges, initializer sizes and data, the opset, and any scalar field reached
// through protobuf reflection. The result always serialises to a valid
// protobuf; whether it is a valid ONNX model is the importer's problem.
// (libprotobuf-mutator does this generically, but is not packaged for
// Debian 12.)
//
//===----------------------------------------------------------------------===//

#ifndef BMC_FUZZ_ONNXMUTATOR_H
#define BMC_FUZZ_ONNXMUTATOR_H

#include <onnx/onnx_pb.h>

#include <random>

namespace bm::fuzz {

/// Applies one to four random mutations to `model`.
void mutateOnnxModel(onnx::ModelProto &model, std::mt19937_64 &rng);

} // namespace bm::fuzz

#endif // BMC_FUZZ_ONNXMUTATOR_H
