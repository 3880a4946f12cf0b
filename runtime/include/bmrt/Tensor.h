//===- Tensor.h - element types, shapes and tensor views -------*- C++ -*-===//
//
// bmrt (the runtime) knows tensors only as a pointer into device memory, an
// element type and a static shape: the step program fixes every shape when
// it is compiled, and kernels work on local (per-rank) shapes. Row-major,
// contiguous, no strides. No MLIR in here (DESIGN.md section 6).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TENSOR_H
#define BMRT_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bmrt {

/// Element types the step program uses. Compute is fp32 on the CPU; ids and
/// indices are i64 (ONNX's default), masks i1 stored as one byte per element.
enum class DType : uint8_t { F32, I64, I32, Bool };

/// Bytes per element.
size_t sizeOf(DType type);
/// "f32", "i64", "i32", "i1".
const char *nameOf(DType type);
/// The inverse of nameOf; false for an unknown name.
bool parseDType(const std::string &name, DType &type);

/// Calls fn with a value of the unsigned integer type as wide as one
/// element: data movement never looks inside an element, so one
/// instantiation per width serves every dtype (both backends' kernels).
template <typename Fn> void withElementWidth(DType dtype, Fn &&fn) {
  switch (sizeOf(dtype)) {
  case 1:
    return fn(uint8_t{});
  case 2:
    return fn(uint16_t{});
  case 4:
    return fn(uint32_t{});
  default:
    return fn(uint64_t{});
  }
}

using Shape = std::vector<int64_t>;

/// Number of elements (1 for a scalar, rank 0).
int64_t numElements(const Shape &shape);
/// "[2,16,64]".
std::string formatShape(const Shape &shape);
/// Whether `a` and `b` lay out the same elements in the same row-major
/// order, one splitting dims of the other into factors: a parameter stored
/// in a factored view (bmc's fused QKV weight [64, 192] as [64, 3, 64]) is
/// the model's tensor. [64, 192] and [192, 64] are not.
bool sameElementOrder(const Shape &a, const Shape &b);
/// The index of the first NaN or infinity among `count` elements of
/// `dtype` at `data` (host memory), or -1 when all are finite (integers
/// always are).
int64_t firstNonFinite(const void *data, DType dtype, int64_t count);

/// Row-major strides of `shape`, in elements.
inline Shape contiguousStrides(const Shape &shape) {
  Shape strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// A shape seen as [outer, dim, inner] around one of its dims, in elements.
struct AxisSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};
inline AxisSplit splitAt(const Shape &shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      s.outer *= shape[d];
    else if (d == axis)
      s.dim = shape[d];
    else
      s.inner *= shape[d];
  }
  return s;
}

/// A tensor in device memory: the runtime's only tensor type. Cheap to copy;
/// it does not own its memory.
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

  int64_t size() const { return numElements(shape); }
  size_t bytes() const { return size() * sizeOf(dtype); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  float *f32() const { return static_cast<float *>(data); }
  int64_t *i64() const { return static_cast<int64_t *>(data); }
  int32_t *i32() const { return static_cast<int32_t *>(data); }
  uint8_t *boolean() const { return static_cast<uint8_t *>(data); }
};

} // namespace bmrt

#endif // BMRT_TENSOR_H
