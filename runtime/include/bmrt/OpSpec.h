//===- OpSpec.h - the ops a step program may name ---------------*- C++ -*-===//
//
// One list (OpSpec.def) that the compiler's codegen, the program verifier
// and every backend's kernel table are checked against.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_OPSPEC_H
#define BMRT_OPSPEC_H

#include <string>
#include <vector>

namespace bmrt {

/// Every op a step program may name, sorted.
const std::vector<std::string> &stepOpNames();
/// Whether `op` is one of them.
bool isStepOp(const std::string &op);

} // namespace bmrt

#endif // BMRT_OPSPEC_H
