//===- TextShape.cpp - bounds on untrusted text for recursive parsers -----===//

#include "compiler/cost/TextShape.h"

#include <algorithm>

bm::cost::TextShape bm::cost::measureText(llvm::StringRef text) {
  TextShape shape;
  size_t depth = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      inString = escaped || c != '"';
      escaped = !escaped && c == '\\';
      continue;
    }
    if (c == '"')
      inString = true;
    else if (c == ',')
      ++shape.commas;
    else if (c == '[' || c == '{')
      shape.depth = std::max(shape.depth, ++depth);
    else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return shape;
}
