//===- ContextLayout.h - context parallelism's positions -------*- C++ -*-===//
//-*-===//
//
// Part of bm-annotate, for plans that split sequences over cp ranks: each
// causal attention learns where its queries sit among the keys; and where
// the plan gives each rank two mirrored chunks of each sequence
// (bmrt/ContextLayout.h), the whole step runs on sequences in that order. The
// trainer feeds the inputs and labels so; this reorders what the model computes
// from positions alone (position ids, rotary tables, masks, attention
// positions) the same way, and puts the keys and values an attention reads
// whole back in natural order.
//
//===----------------------------------------------------------------------===//

#ifndef BM_ANNOTATE_CONTEXTLAYOUT_H
#define BM_ANNOTATE_CONTEXTLAYOUT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace bm::plan {

/// Gives every causal bm.attention whose queries cp splits their
/// positions (i64 [s], the default alignment t - s, ..., t - 1), split as
/// its queries are; the partitioner slices each rank's share.
void placeContextQueries(mlir::func::FuncOp func);

/// Inserts the reorderings into annotated `func` for `cp` ranks: a gather
/// into the mirrored order on every operand not computed from the data
/// that an op reads split over cp, and a gather back into natural order on
/// every operand computed from the data that an op reads whole along a
/// dim its producer splits over cp. Each gather carries its reader's
/// placement and shardings.
void layOutMirroredContext(mlir::func::FuncOp func, int64_t cp);

} // namespace bm::plan

#endif // BM_ANNOTATE_CONTEXTLAYOUT_H
