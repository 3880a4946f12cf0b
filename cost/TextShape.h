//===- TextShape.h - bounds on untrusted text for recursive parsers -*- C++ -*-===//
//
// LLVM's JSON and YAML parsers recurse once per nesting level (and the YAML
// one once per flow-collection entry), so a file of 200,000 '[' overflows
// the stack before they can report anything. The readers of cluster and
// plan files measure the text first and refuse shapes no such file has.
//
//===----------------------------------------------------------------------===//

#ifndef BM_COST_TEXTSHAPE_H
#define BM_COST_TEXTSHAPE_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>

namespace bm::cost {

struct TextShape {
  /// The deepest nesting of '[' and '{' outside double-quoted strings.
  size_t depth = 0;
  /// ',' outside double-quoted strings.
  size_t commas = 0;
  /// The most ',' directly inside one pair of brackets (or at top level):
  /// the entries of the longest flow collection.
  size_t widest = 0;
};

TextShape measureText(llvm::StringRef text);

} // namespace bm::cost

#endif // BM_COST_TEXTSHAPE_H
