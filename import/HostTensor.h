//===- HostTensor.h - small tensors known at import time --------*- C++ -*-===//
//
// Shape computations (Shape -> Gather -> Concat -> Reshape chains that
// exporters write) are evaluated on the host while importing, so the IR never
// contains shape arithmetic. A HostTensor holds such a value: integers (and
// booleans) as int64, floating-point values as double, and splats of any
// size as one stored element without materialising them.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_IMPORT_HOSTTENSOR_H
#define BMC_IMPORT_HOSTTENSOR_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bm::import {

/// Results with more elements than this are not folded unless they are
/// splats; they are emitted as bm ops instead.
constexpr int64_t kMaxFoldElements = 65536;

struct HostTensor {
  int32_t dtype = onnx::TensorProto::INT64;
  llvm::SmallVector<int64_t, 4> shape;
  std::vector<int64_t> ints;  // integer and bool element types
  std::vector<double> floats; // floating-point element types
  bool splat = false;         // one stored element stands for all

  static bool isFloatType(int32_t dtype);
  bool isFloat() const { return isFloatType(dtype); }
  /// Product of `shape`; shapes are checked against overflow on creation.
  int64_t numElements() const;
  int64_t getInt(int64_t i) const;
  double getFloat(int64_t i) const;

  /// A tensor of `dtype` and `shape` with zero-initialised storage (one
  /// element if `splat`).
  static HostTensor zeros(int32_t dtype, llvm::ArrayRef<int64_t> shape,
                          bool splat = false);
  static HostTensor fromInts(llvm::ArrayRef<int64_t> values,
                             llvm::ArrayRef<int64_t> shape,
                             int32_t dtype = onnx::TensorProto::INT64);
  /// Stores element i, rounding to the element type (ints wrap, bools are
  /// 0 or 1).
  void set(int64_t i, double value);
  void setInt(int64_t i, int64_t value);
  /// Stores element `at` of `from` (of the same element type) as element i.
  void copyElement(int64_t i, const HostTensor &from, int64_t at) {
    if (isFloat())
      set(i, from.getFloat(at));
    else
      setInt(i, from.getInt(at));
  }
  /// Converts to another element type (ONNX Cast semantics for numbers).
  HostTensor cast(int32_t toType) const;
  /// The values as int64 (for shapes, axes, indices).
  std::vector<int64_t> toInts() const;
};

/// The MLIR element type of an ONNX data type, or null for types bm cannot
/// hold (strings, complex numbers).
mlir::Type elementTypeOf(mlir::MLIRContext *context, int32_t dtype);
/// The ONNX data type of an MLIR element type (UNDEFINED if none).
int32_t dtypeOf(mlir::Type elementType);
/// ONNX's name of a data type ("FLOAT", "INT64").
std::string dtypeName(int32_t dtype);
/// A shape as error messages write it: "[2, 3]".
std::string shapeText(llvm::ArrayRef<int64_t> shape);

/// Decodes an embedded TensorProto (raw_data or the typed fields). Fails
/// with a message for external data, strings and inconsistent sizes.
std::optional<HostTensor> decodeTensor(const onnx::TensorProto &tensor,
                                       std::string &error);

/// Bytes of one element as stored in raw_data; 0 for types bm cannot hold.
int64_t byteWidth(int32_t dtype);
/// How many elements an embedded TensorProto stores (raw_data or the typed
/// field of its type); -1 when raw_data is not a whole number of elements.
int64_t storedElements(const onnx::TensorProto &proto);

/// Checked element count of a shape; nullopt on a negative dim or overflow.
std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape);

/// The constant's attribute for `type` (a splat stays a splat).
mlir::DenseElementsAttr toElementsAttr(const HostTensor &tensor,
                                       mlir::RankedTensorType type);

/// Numpy broadcast of two shapes; nullopt if they do not broadcast.
std::optional<llvm::SmallVector<int64_t, 4>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);
/// The flat index into a tensor of `shape` that broadcasts to `outShape`,
/// for the output element at flat index `outIndex`.
int64_t broadcastIndex(int64_t outIndex, llvm::ArrayRef<int64_t> outShape,
                       llvm::ArrayRef<int64_t> shape);

} // namespace bm::import

#endif // BMC_IMPORT_HOSTTENSOR_H
