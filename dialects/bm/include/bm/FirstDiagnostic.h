//===- FirstDiagnostic.h - keep the first diagnostic as text ----*- C++ -*-===//
//
// bmc reports every failure as one line. While one of these is alive, the
// diagnostics of `context` are swallowed and the first one is kept, so a
// verifier or pass failure deep inside MLIR becomes that line.
//
//===----------------------------------------------------------------------===//

#ifndef BM_FIRSTDIAGNOSTIC_H
#define BM_FIRSTDIAGNOSTIC_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <string>

namespace mlir::bm {

class FirstDiagnostic {
public:
  explicit FirstDiagnostic(MLIRContext *context)
      : handler(context, [this](Diagnostic &diagnostic) {
          if (text.empty())
            text = diagnostic.str();
          return success();
        }) {}

  /// The first diagnostic's message, or empty if there was none.
  const std::string &message() const { return text; }

private:
  std::string text;
  ScopedDiagnosticHandler handler;
};

} // namespace mlir::bm

#endif // BM_FIRSTDIAGNOSTIC_H
