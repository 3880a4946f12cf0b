//===- CollectiveOps.cpp - verifiers of the collective ops ----------------===//
//
// Collectives name a mesh by symbol and the mesh axes they run over; their
// verifiers resolve the mesh and check axes and shapes against it.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"

#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::bm;

/// Resolves `mesh` from `op`; emits an error if it is not a bm.mesh.
static FailureOr<MeshAttr> resolveMesh(Operation *op, FlatSymbolRefAttr mesh,
                                       SymbolTableCollection &tables) {
  auto meshOp = tables.lookupNearestSymbolFrom<MeshOp>(op, mesh);
  if (!meshOp)
    return op->emitOpError() << "names unknown mesh " << mesh;
  return meshOp.getMesh();
}

/// Resolves `meshName` and checks that `axes` are distinct axes of it;
/// returns the device count of the group (the product of their sizes).
static FailureOr<int64_t> groupSize(Operation *op, FlatSymbolRefAttr meshName,
                                    ArrayRef<StringRef> axes,
                                    SymbolTableCollection &tables) {
  FailureOr<MeshAttr> resolved = resolveMesh(op, meshName, tables);
  if (failed(resolved))
    return failure();
  MeshAttr mesh = *resolved;
  if (axes.empty())
    return op->emitOpError() << "needs at least one mesh axis";
  llvm::SmallSet<StringRef, 4> seen;
  int64_t size = 1;
  for (StringRef axis : axes) {
    int64_t index = mesh.findAxis(axis);
    if (index < 0)
      return op->emitOpError() << "axis \"" << axis
                               << "\" is not an axis of the mesh " << mesh;
    if (!seen.insert(axis).second)
      return op->emitOpError() << "axis \"" << axis << "\" is listed twice";
    size *= mesh.getAxisSizes()[index];
  }
  return size;
}

/// Checks that `dim` is a dim of `input`.
static LogicalResult checkDim(Operation *op, int64_t dim,
                              RankedTensorType input) {
  if (dim < 0 || dim >= input.getRank())
    return op->emitOpError() << "dim " << dim << " is out of range for rank "
                             << input.getRank();
  return success();
}

/// Checks that dim `dim` of `input` splits evenly over `n` devices; `what`
/// names the dim in the error ("dim", "split dim").
static LogicalResult checkDivides(Operation *op, StringRef what, int64_t dim,
                                  RankedTensorType input, int64_t n) {
  if (input.getDimSize(dim) % n != 0)
    return op->emitOpError() << what << " " << dim << " of size "
                             << input.getDimSize(dim)
                             << " does not divide evenly over " << n
                             << " devices";
  return success();
}

/// Checks that `result` has shape `expected` and the element type of
/// `input`; the error reads "WHAT of INPUT over N devices gives ...".
static LogicalResult checkResult(Operation *op, const Twine &what,
                                 RankedTensorType input,
                                 RankedTensorType result,
                                 ArrayRef<int64_t> expected, int64_t n) {
  if (result.getShape() != expected ||
      result.getElementType() != input.getElementType())
    return op->emitOpError()
           << what << " of " << input << " over " << n << " devices gives "
           << RankedTensorType::get(expected, input.getElementType())
           << ", not " << result;
  return success();
}

static LogicalResult verifyReduction(Operation *op, StringRef reduction) {
  if (reduction != "sum" && reduction != "max" && reduction != "min" &&
      reduction != "mean")
    return op->emitOpError() << "reduction \"" << reduction
                             << "\" is not one of sum, max, min, mean";
  return success();
}

/// Shared by collective_permute, send and recv: one axis, and an offset that
/// moves to another device along it.
static LogicalResult verifyPeer(Operation *op, FlatSymbolRefAttr meshName,
                                StringRef axis, int64_t offset,
                                SymbolTableCollection &tables) {
  FailureOr<int64_t> size = groupSize(op, meshName, {axis}, tables);
  if (failed(size))
    return failure();
  if (offset == 0 || offset <= -*size || offset >= *size)
    return op->emitOpError() << "offset " << offset << " along axis \""
                             << axis << "\" of size " << *size
                             << " must be non-zero and within (-" << *size
                             << ", " << *size << ")";
  return success();
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &tables) {
  if (failed(groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables)))
    return failure();
  return verifyReduction(*this, getReduction());
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> n =
      groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables);
  auto input = getInput().getType();
  int64_t dim = getDim();
  if (failed(n) || failed(checkDim(*this, dim, input)))
    return failure();
  SmallVector<int64_t> expected(input.getShape());
  expected[dim] *= *n;
  return checkResult(*this, "gathering dim " + Twine(dim), input,
                     getResult().getType(), expected, *n);
}

LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> n =
      groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables);
  auto input = getInput().getType();
  int64_t dim = getDim();
  if (failed(n) || failed(verifyReduction(*this, getReduction())) ||
      failed(checkDim(*this, dim, input)) ||
      failed(checkDivides(*this, "dim", dim, input, *n)))
    return failure();
  SmallVector<int64_t> expected(input.getShape());
  expected[dim] /= *n;
  return checkResult(*this, "scattering dim " + Twine(dim), input,
                     getResult().getType(), expected, *n);
}

LogicalResult ShardSliceOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> n =
      groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables);
  auto input = getInput().getType();
  int64_t dim = getDim();
  if (failed(n) || failed(checkDim(*this, dim, input)) ||
      failed(checkDivides(*this, "dim", dim, input, *n)))
    return failure();
  SmallVector<int64_t> expected(input.getShape());
  expected[dim] /= *n;
  return checkResult(*this, "slicing dim " + Twine(dim), input,
                     getResult().getType(), expected, *n);
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> n =
      groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables);
  if (failed(n))
    return failure();
  auto input = getInput().getType();
  int64_t split = getSplitDim(), concat = getConcatDim(),
          rank = input.getRank();
  if (split < 0 || split >= rank || concat < 0 || concat >= rank)
    return emitOpError() << "split_dim " << split << " and concat_dim "
                         << concat << " must be in [0, " << rank << ")";
  if (failed(checkDivides(*this, "split dim", split, input, *n)))
    return failure();
  SmallVector<int64_t> expected(input.getShape());
  expected[split] /= *n;
  expected[concat] *= *n;
  return checkResult(*this, "all_to_all", input, getResult().getType(),
                     expected, *n);
}

LogicalResult
CollectivePermuteOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyPeer(*this, getMeshAttr(), getAxis(), getOffset(), tables);
}

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyPeer(*this, getMeshAttr(), getAxis(), getOffset(), tables);
}

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &tables) {
  return verifyPeer(*this, getMeshAttr(), getAxis(), getOffset(), tables);
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

/// The three statistics a device keeps per row: max, sum of exponentials,
/// the label's logit.
static constexpr int64_t kStatsPerDevice = 3;

/// Checks logits [N, C] and labels [N].
static LogicalResult checkLogitsAndLabels(Operation *op,
                                          RankedTensorType logits,
                                          RankedTensorType labels) {
  if (logits.getRank() != 2 || labels.getRank() != 1 ||
      logits.getDimSize(0) != labels.getDimSize(0))
    return op->emitOpError("needs logits [N, C] and labels [N], got ")
           << logits << " and " << labels;
  return success();
}

/// Checks that `stats` are f32 [devices x 3, rows].
static LogicalResult checkStats(Operation *op, RankedTensorType stats,
                                int64_t devices, int64_t rows) {
  if (stats.getRank() != 2 || !stats.getElementType().isF32() ||
      stats.getDimSize(0) != devices * kStatsPerDevice ||
      stats.getDimSize(1) != rows)
    return op->emitOpError() << "needs statistics f32 [" << devices << " x "
                             << kStatsPerDevice << ", " << rows << "], got "
                             << stats;
  return success();
}

LogicalResult CrossEntropyStatsOp::verify() {
  return checkLogitsAndLabels(*this, getLogits().getType(),
                              getLabels().getType());
}

LogicalResult
CrossEntropyStatsOp::verifySymbolUses(SymbolTableCollection &tables) {
  if (failed(groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables)))
    return failure();
  return checkStats(*this, getStats().getType(), 1,
                    getLogits().getType().getDimSize(0));
}

LogicalResult CrossEntropyFromStatsOp::verify() {
  auto stats = getStats().getType();
  int64_t rows = getLabels().getType().getDimSize(0);
  if (getLabels().getType().getRank() != 1 || stats.getRank() != 2 ||
      stats.getDimSize(0) % kStatsPerDevice != 0)
    return emitOpError("needs statistics [k x 3, N] and labels [N], got ")
           << stats << " and " << getLabels().getType();
  return checkStats(*this, stats, stats.getDimSize(0) / kStatsPerDevice, rows);
}

LogicalResult
CrossEntropyGradFromStatsOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<int64_t> n =
      groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables);
  auto logits = getLogits().getType();
  if (failed(n) ||
      failed(checkLogitsAndLabels(*this, logits, getLabels().getType())))
    return failure();
  return checkStats(*this, getStats().getType(), *n, logits.getDimSize(0));
}

LogicalResult ShardGatherOp::verifySymbolUses(SymbolTableCollection &tables) {
  if (failed(groupSize(*this, getMeshAttr(), axisNamesOf(getAxes()), tables)))
    return failure();
  auto data = getData().getType();
  if (failed(checkDim(*this, getAxis(), data)))
    return failure();
  // The result is the gather's: data's dims with `axis` replaced by the
  // indices' dims.
  auto indices = getIndices().getType();
  SmallVector<int64_t> expected(data.getShape().take_front(getAxis()));
  expected.append(indices.getShape().begin(), indices.getShape().end());
  expected.append(data.getShape().begin() + getAxis() + 1,
                  data.getShape().end());
  if (getResult().getType().getShape() != ArrayRef<int64_t>(expected) ||
      getResult().getType().getElementType() != data.getElementType())
    return emitOpError() << "gathering " << indices << " from " << data
                         << " gives "
                         << RankedTensorType::get(expected,
                                                  data.getElementType())
                         << ", not " << getResult().getType();
  return success();
}
