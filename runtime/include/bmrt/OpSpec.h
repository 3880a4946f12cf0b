//===- OpSpec.h - the ops a step program may name ---------------*- C++ -*-===//
//
// One list (OpSpec.def, generated from the bm dialect's ODS by
// scripts/gen-op-spec) that the compiler's codegen, the program verifier
// and every backend's kernel table are checked against: each op's name,
// operands, results and attributes.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_OPSPEC_H
#define BMRT_OPSPEC_H

#include <string>
#include <vector>

namespace bmrt {

/// One name of an op's operands, results or attributes.
struct OpPart {
  std::string name;
  bool optional = false; // may be absent
  bool variadic = false; // any number, from 0
};

struct OpSpec {
  std::string name;
  std::vector<OpPart> operands, results, attributes;

  /// The fewest and most operands (or results) `parts` allow; most is -1
  /// when one part is variadic.
  static int fewest(const std::vector<OpPart> &parts);
  static int most(const std::vector<OpPart> &parts);
  /// The attribute called `name`, or null.
  const OpPart *attribute(const std::string &name) const;
};

/// Every op a step program may name, sorted by name.
const std::vector<OpSpec> &opSpecs();
/// The spec of `op`, or null.
const OpSpec *findOpSpec(const std::string &op);
/// Every op a step program may name, sorted.
const std::vector<std::string> &stepOpNames();
/// Whether `op` is one of them.
bool isStepOp(const std::string &op);

} // namespace bmrt

#endif // BMRT_OPSPEC_H
