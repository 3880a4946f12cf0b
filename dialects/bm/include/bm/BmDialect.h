//===- BmDialect.h - the bm dialect -----------------------------*- C++ -*-===//

#ifndef BM_BMDIALECT_H
#define BM_BMDIALECT_H

#include "mlir/IR/Dialect.h"

#include "bm/BmDialect.h.inc"

#endif // BM_BMDIALECT_H
