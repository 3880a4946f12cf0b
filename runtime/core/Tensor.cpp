//===- Tensor.cpp - element types, shapes, errors -------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Tensor.h"

#include <algorithm>
#include <cmath>

namespace bmrt {

size_t sizeOf(DType type) {
  switch (type) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::I64:
    return 8;
  case DType::Bool:
    return 1;
  }
  return 0;
}

const char *nameOf(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::Bool:
    return "i1";
  }
  return "?";
}

bool parseDType(const std::string &name, DType &type) {
  for (DType t : {DType::F32, DType::I64, DType::I32, DType::Bool})
    if (name == nameOf(t)) {
      type = t;
      return true;
    }
  return false;
}

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string formatShape(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

namespace {

/// The running products of `shape`'s dims other than 1.
std::vector<int64_t> runningProducts(const Shape &shape) {
  std::vector<int64_t> products;
  int64_t n = 1;
  for (int64_t d : shape)
    if (d != 1)
      products.push_back(n *= d);
  return products;
}

bool isSubsequence(const std::vector<int64_t> &part,
                   const std::vector<int64_t> &whole) {
  return std::includes(whole.begin(), whole.end(), part.begin(), part.end());
}

} // namespace

bool sameElementOrder(const Shape &a, const Shape &b) {
  if (a == b)
    return true;
  if (numElements(a) != numElements(b))
    return false;
  // One shape's dims are runs of the other's where every running product
  // of the coarser is one of the finer.
  std::vector<int64_t> pa = runningProducts(a), pb = runningProducts(b);
  return isSubsequence(pa, pb) || isSubsequence(pb, pa);
}

int64_t firstNonFinite(const void *data, DType dtype, int64_t count) {
  if (dtype != DType::F32)
    return -1;
  const float *values = static_cast<const float *>(data);
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i]))
      return i;
  return -1;
}

std::string Error::where() const {
  return std::string(file) + ":" + std::to_string(line);
}

} // namespace bmrt
