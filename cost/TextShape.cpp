//===- TextShape.cpp - bounds on untrusted text for recursive parsers -----===//

#include "cost/TextShape.h"

#include <algorithm>
#include <vector>

bm::cost::TextShape bm::cost::measureText(llvm::StringRef text) {
  TextShape shape;
  size_t depth = 0;
  // Commas directly inside each open bracket, outermost (the text) first.
  std::vector<size_t> open = {0};
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      inString = escaped || c != '"';
      escaped = !escaped && c == '\\';
      continue;
    }
    if (c == '"')
      inString = true;
    else if (c == ',') {
      ++shape.commas;
      shape.widest = std::max(shape.widest, ++open.back());
    } else if (c == '[' || c == '{') {
      shape.depth = std::max(shape.depth, ++depth);
      open.push_back(0);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
      open.pop_back();
    }
  }
  return shape;
}
