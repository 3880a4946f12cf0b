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

/// Checks that `axes` are distinct axes of `mesh`; returns the device count
/// of the group (the product of their sizes).
static FailureOr<int64_t> groupSize(Operation *op, MeshAttr mesh,
                                    ArrayRef<StringRef> axes) {
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

static SmallVector<StringRef> axisNames(ArrayAttr axes) {
  SmallVector<StringRef> names;
  for (Attribute axis : axes)
    names.push_back(cast<StringAttr>(axis).getValue());
  return names;
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
  FailureOr<MeshAttr> mesh = resolveMesh(op, meshName, tables);
  if (failed(mesh))
    return failure();
  FailureOr<int64_t> size = groupSize(op, *mesh, {axis});
  if (failed(size))
    return failure();
  if (offset == 0 || offset <= -*size || offset >= *size)
    return op->emitOpError() << "offset " << offset << " along axis \""
                             << axis << "\" of size " << *size
                             << " must be non-zero and within (-" << *size
                             << ", " << *size << ")";
  return success();
}

#define BM_LOOKUP_MESH(OpClass)                                                \
  MeshAttr OpClass::lookupMesh(SymbolTableCollection &tables) {                \
    auto meshOp = tables.lookupNearestSymbolFrom<MeshOp>(*this, getMeshAttr()); \
    return meshOp ? meshOp.getMesh() : MeshAttr();                             \
  }
BM_LOOKUP_MESH(AllGatherOp)
BM_LOOKUP_MESH(AllReduceOp)
BM_LOOKUP_MESH(AllToAllOp)
BM_LOOKUP_MESH(CollectivePermuteOp)
BM_LOOKUP_MESH(RecvOp)
BM_LOOKUP_MESH(ReduceScatterOp)
BM_LOOKUP_MESH(SendOp)
#undef BM_LOOKUP_MESH

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<MeshAttr> mesh = resolveMesh(*this, getMeshAttr(), tables);
  if (failed(mesh) || failed(groupSize(*this, *mesh, axisNames(getAxes()))))
    return failure();
  return verifyReduction(*this, getReduction());
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<MeshAttr> mesh = resolveMesh(*this, getMeshAttr(), tables);
  if (failed(mesh))
    return failure();
  FailureOr<int64_t> n = groupSize(*this, *mesh, axisNames(getAxes()));
  if (failed(n))
    return failure();
  auto input = getInput().getType();
  auto result = getResult().getType();
  int64_t dim = getDim();
  if (dim < 0 || dim >= input.getRank())
    return emitOpError() << "dim " << dim << " is out of range for rank "
                         << input.getRank();
  SmallVector<int64_t> expected(input.getShape());
  expected[dim] *= *n;
  if (result.getShape() != ArrayRef(expected) ||
      result.getElementType() != input.getElementType())
    return emitOpError() << "gathering dim " << dim << " of " << input
                         << " over " << *n << " devices gives "
                         << RankedTensorType::get(expected,
                                                  input.getElementType())
                         << ", not " << result;
  return success();
}

LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<MeshAttr> mesh = resolveMesh(*this, getMeshAttr(), tables);
  if (failed(mesh))
    return failure();
  FailureOr<int64_t> n = groupSize(*this, *mesh, axisNames(getAxes()));
  if (failed(n) || failed(verifyReduction(*this, getReduction())))
    return failure();
  auto input = getInput().getType();
  auto result = getResult().getType();
  int64_t dim = getDim();
  if (dim < 0 || dim >= input.getRank())
    return emitOpError() << "dim " << dim << " is out of range for rank "
                         << input.getRank();
  if (input.getDimSize(dim) % *n != 0)
    return emitOpError() << "dim " << dim << " of size "
                         << input.getDimSize(dim)
                         << " does not divide evenly over " << *n
                         << " devices";
  SmallVector<int64_t> expected(input.getShape());
  expected[dim] /= *n;
  if (result.getShape() != ArrayRef(expected) ||
      result.getElementType() != input.getElementType())
    return emitOpError() << "scattering dim " << dim << " of " << input
                         << " over " << *n << " devices gives "
                         << RankedTensorType::get(expected,
                                                  input.getElementType())
                         << ", not " << result;
  return success();
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &tables) {
  FailureOr<MeshAttr> mesh = resolveMesh(*this, getMeshAttr(), tables);
  if (failed(mesh))
    return failure();
  FailureOr<int64_t> n = groupSize(*this, *mesh, axisNames(getAxes()));
  if (failed(n))
    return failure();
  auto input = getInput().getType();
  auto result = getResult().getType();
  int64_t split = getSplitDim(), concat = getConcatDim(),
          rank = input.getRank();
  if (split < 0 || split >= rank || concat < 0 || concat >= rank)
    return emitOpError() << "split_dim " << split << " and concat_dim "
                         << concat << " must be in [0, " << rank << ")";
  if (input.getDimSize(split) % *n != 0)
    return emitOpError() << "split dim " << split << " of size "
                         << input.getDimSize(split)
                         << " does not divide evenly over " << *n
                         << " devices";
  SmallVector<int64_t> expected(input.getShape());
  expected[split] /= *n;
  expected[concat] *= *n;
  if (result.getShape() != ArrayRef(expected) ||
      result.getElementType() != input.getElementType())
    return emitOpError() << "all_to_all of " << input << " over " << *n
                         << " devices gives "
                         << RankedTensorType::get(expected,
                                                  input.getElementType())
                         << ", not " << result;
  return success();
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
