//===- BmAttrs.h - mesh and sharding attributes -----------------*- C++ -*-===//

#ifndef BM_BMATTRS_H
#define BM_BMATTRS_H

#include "bm/BmDialect.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

#define GET_ATTRDEF_CLASSES
#include "bm/BmAttrs.h.inc"

namespace mlir::bm {

/// The names in an array of axis-name string attributes (`["dp", "tp"]`).
::llvm::SmallVector<::llvm::StringRef> axisNamesOf(ArrayAttr axes);

} // namespace mlir::bm

#endif // BM_BMATTRS_H
