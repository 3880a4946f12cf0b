//===- bmc-opt.cpp - run any bm pass on MLIR text -------------------------===//
//
// The developer's driver: every phase of bmc is a named pass pipeline that
// this tool runs alone (`bmc-opt model.mlir --bm-fold`).
//
//===----------------------------------------------------------------------===//

#include "bm/BmDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  mlir::bm::registerBmPasses();
  mlir::bm::registerPhasePipelines();
  mlir::DialectRegistry registry;
  registry.insert<mlir::bm::BmDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "bmc developer driver\n", registry));
}
