//===- FoldTransposes.h - GEMM transposes as BLAS flags ---------*- C++ -*-===//
//
// A transpose of the last two dims that feeds a matmul is a copy the GEMM
// does not need: cblas_sgemm reads either layout. Backward is full of them
// (dA = dY B^T, dB = A^T dY), and a tied embedding's LM head transposes the
// whole vocabulary table every step. This rewrite gives the matmul the
// transpose's input and a trans_a / trans_b flag, and drops the transpose
// when nothing else reads it.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_CODEGEN_FOLDTRANSPOSES_H
#define BMC_CODEGEN_FOLDTRANSPOSES_H

#include "bmrt/Program.h"

namespace bm {

/// Folds last-two-dims transposes into the matmuls that read them (a flat
/// program, before outlining). The result computes the same values.
void foldTransposesIntoMatmuls(bmrt::Program &program);

} // namespace bm

#endif // BMC_CODEGEN_FOLDTRANSPOSES_H
