//===- Passes.h - bm passes -------------------------------------*- C++ -*-===//

#ifndef BM_PASSES_PASSES_H
#define BM_PASSES_PASSES_H

#include "bm/BmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::bm {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::bm

#endif // BM_PASSES_PASSES_H
