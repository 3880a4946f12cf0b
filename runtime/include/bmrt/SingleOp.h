//===- SingleOp.h - one instruction run on a device -------------*- C++ -*-===//
//
// A step program of one instruction: its operands are input slots, its
// results the program's outputs. The conformance suite runs every op this
// way on every backend; bmrt-calibrate times kernels this way on the device
// it measures. Both go through the backend's kernel table and the
// verifier, as a trainer's instruction does.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_SINGLEOP_H
#define BMRT_SINGLEOP_H

#include "bmrt/Executor.h"
#include "bmrt/Mesh.h"
#include "bmrt/Program.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bmrt {

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
};

struct OpSignature {
  std::string op;
  std::map<std::string, Attr> attrs;
  /// Absent optional operands are nullopt.
  std::vector<std::optional<TensorType>> operands;
  std::vector<TensorType> results;
  /// The program's mesh: collectives need one (their axes name it).
  std::vector<MeshAxis> mesh;
};

/// The one-instruction program of `signature`; `name` becomes its model
/// name and the instruction's comment.
Program singleOpProgram(const OpSignature &signature, const std::string &name);

/// The program of `signature` loaded on `device`: operands and results live
/// in the device's memory for as long as this does.
class SingleOp {
public:
  /// Throws bmrt::Error where the verifier refuses the instruction or the
  /// device's backend has no kernel for it. `collectives` as Executor's.
  SingleOp(Device &device, const OpSignature &signature,
           const std::string &name, Collectives *collectives = nullptr);

  const TensorView &operand(size_t i) const;
  const TensorView &result(size_t i) const;
  /// Enqueues the instruction and waits for the device.
  void run() { executor->run(); }
  /// Enqueues it without waiting (a benchmark waits once for many calls).
  void enqueue() { executor->runRange(0, 1); }

private:
  std::unique_ptr<Executor> executor;
};

} // namespace bmrt

#endif // BMRT_SINGLEOP_H
