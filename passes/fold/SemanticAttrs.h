//===- SemanticAttrs.h - the attributes that say what an op computes -*- C++ -*-===//
//
// Every attribute of an op but the bm.* annotations the phases write (layer,
// block class, sharding, stage): two ops with the same name, types and
// semantic attributes compute the same thing. Shared by bm-fold, which
// groups layers by it, and bm-verify-folded, which checks the grouping.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PASSES_FOLD_SEMANTICATTRS_H
#define BM_PASSES_FOLD_SEMANTICATTRS_H

#include "bm/BmDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace mlir::bm {

/// Inherent attributes (an axis, an epsilon) are included whether the
/// dialect stores them as properties or in the attribute dictionary.
inline DictionaryAttr semanticAttrs(Operation *op) {
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute attr : op->getAttrs())
    if (!BmDialect::isAnnotation(attr.getName()))
      attrs.push_back(attr);
  return DictionaryAttr::get(op->getContext(), attrs);
}

} // namespace mlir::bm

#endif // BM_PASSES_FOLD_SEMANTICATTRS_H
