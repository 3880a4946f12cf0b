//===- OpSpec.cpp - the ops a step program may name -----------------------===//

#include "bmrt/OpSpec.h"

#include <algorithm>

namespace bmrt {

const std::vector<std::string> &stepOpNames() {
  static const std::vector<std::string> names = {
#define BMRT_OP(name) #name,
#include "bmrt/OpSpec.def"
  };
  return names;
}

bool isStepOp(const std::string &op) {
  const std::vector<std::string> &names = stepOpNames();
  return std::binary_search(names.begin(), names.end(), op);
}

} // namespace bmrt
