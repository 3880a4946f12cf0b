//===- OpImporters.h - importers defined outside OpImporters.cpp -*- C++
//-*-===//
//
// OpImporters.cpp holds the alphabetical table of all op importers and the
// simple ones; the others live in files by kind and are declared here.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_IMPORT_OPIMPORTERS_H
#define BMC_IMPORT_OPIMPORTERS_H

#include "import/NodeContext.h"

namespace bm::import {

// CompositeOps.cpp: ops bm has no single op for, as formulas of bm ops.
mlir::LogicalResult importArgMax(NodeContext &nc);
mlir::LogicalResult importArgMin(NodeContext &nc);
mlir::LogicalResult importCelu(NodeContext &nc);
mlir::LogicalResult importCosh(NodeContext &nc);
mlir::LogicalResult importDepthToSpace(NodeContext &nc);
mlir::LogicalResult importElu(NodeContext &nc);
mlir::LogicalResult importGlobalMaxPool(NodeContext &nc);
mlir::LogicalResult importHardSigmoid(NodeContext &nc);
mlir::LogicalResult importHardSwish(NodeContext &nc);
mlir::LogicalResult importHardmax(NodeContext &nc);
mlir::LogicalResult importInstanceNormalization(NodeContext &nc);
mlir::LogicalResult importIsNaN(NodeContext &nc);
mlir::LogicalResult importLeakyRelu(NodeContext &nc);
mlir::LogicalResult importPRelu(NodeContext &nc);
mlir::LogicalResult importPad(NodeContext &nc);
mlir::LogicalResult importSelu(NodeContext &nc);
mlir::LogicalResult importSinh(NodeContext &nc);
mlir::LogicalResult importSoftplus(NodeContext &nc);
mlir::LogicalResult importSoftsign(NodeContext &nc);
mlir::LogicalResult importSpaceToDepth(NodeContext &nc);
mlir::LogicalResult importTan(NodeContext &nc);
mlir::LogicalResult importThresholdedRelu(NodeContext &nc);
mlir::LogicalResult importTile(NodeContext &nc);
/// Pads (or, negative, trims) one axis of `x` with the constant `value`.
mlir::FailureOr<mlir::Value> padAxis(NodeContext &nc, mlir::Value x,
                                     int64_t axis, int64_t before,
                                     int64_t after, double value);

// ControlFlow.cpp: host folders of Loop, If and sequences over constants
// (their importers refuse run-time values: importFoldedOnly).
mlir::FailureOr<bool> foldCastLike(NodeContext &nc);
mlir::FailureOr<bool> foldIf(NodeContext &nc);
mlir::FailureOr<bool> foldLoop(NodeContext &nc);
mlir::FailureOr<bool> foldSequenceConstruct(NodeContext &nc);
mlir::FailureOr<bool> foldSequenceEmpty(NodeContext &nc);
mlir::FailureOr<bool> foldSequenceInsert(NodeContext &nc);

// IndexingOps.cpp: gathers and scatters by index tensors.
mlir::LogicalResult importGather(NodeContext &nc);
mlir::LogicalResult importGatherElements(NodeContext &nc);
mlir::LogicalResult importGatherND(NodeContext &nc);
mlir::LogicalResult importScatterElements(NodeContext &nc);
mlir::LogicalResult importScatterND(NodeContext &nc);
/// Input `input` as indices into a data dim `axis` of size `dim`: constants
/// are checked and made non-negative (the node's error names the index),
/// run-time indices stay as they are for the kernel to wrap and check.
mlir::FailureOr<mlir::Value> axisIndices(NodeContext &nc, unsigned input,
                                         int64_t axis, int64_t dim);

// NeuralNetOps.cpp: convolution, pooling, normalisation, softmax.
mlir::LogicalResult importAveragePool(NodeContext &nc);
mlir::LogicalResult importBatchNormalization(NodeContext &nc);
mlir::LogicalResult importConv(NodeContext &nc);
mlir::LogicalResult importGlobalAveragePool(NodeContext &nc);
mlir::LogicalResult importLayerNormalization(NodeContext &nc);
mlir::LogicalResult importLogSoftmax(NodeContext &nc);
mlir::LogicalResult importMaxPool(NodeContext &nc);
mlir::LogicalResult importRmsNorm(NodeContext &nc);
mlir::LogicalResult importSoftmax(NodeContext &nc);

} // namespace bm::import

#endif // BMC_IMPORT_OPIMPORTERS_H
