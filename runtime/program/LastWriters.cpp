//===- LastWriters.cpp - where each slot's value becomes final ------------===//

#include "bmrt/Program.h"

namespace bmrt {

std::vector<int> lastWriters(const Program &flat) {
  std::vector<int> last(flat.slots.size(), -1);
  for (size_t t = 0; t < flat.instrs.size(); ++t)
    for (int r : flat.instrs[t].results)
      if (r >= 0 && static_cast<size_t>(r) < last.size())
        last[r] = static_cast<int>(t);
  return last;
}

} // namespace bmrt
