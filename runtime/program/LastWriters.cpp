//===- LastWriters.cpp - where each slot's value becomes final ------------===//

#include "bmrt/Program.h"

#include <algorithm>

namespace bmrt {

std::vector<int> lastWriters(const Program &flat) {
  std::vector<int> last(flat.slots.size(), -1);
  for (size_t t = 0; t < flat.instrs.size(); ++t)
    for (int r : flat.instrs[t].results)
      if (r >= 0 && static_cast<size_t>(r) < last.size())
        last[r] = static_cast<int>(t);
  if (flat.weightGradStart >= 0)
    for (size_t slot = 0; slot < last.size(); ++slot)
      if (flat.slots[slot].kind == SlotKind::Grad && last[slot] >= 0)
        last[slot] = std::max(last[slot], flat.weightGradStart);
  return last;
}

} // namespace bmrt
