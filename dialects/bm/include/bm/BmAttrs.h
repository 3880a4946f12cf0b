//===- BmAttrs.h - mesh and sharding attributes -----------------*- C++ -*-===//

#ifndef BM_BMATTRS_H
#define BM_BMATTRS_H

#include "bm/BmDialect.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

#define GET_ATTRDEF_CLASSES
#include "bm/BmAttrs.h.inc"

#endif // BM_BMATTRS_H
