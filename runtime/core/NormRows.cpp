//===- NormRows.cpp - layer and RMS norm's rows and parameters ------------===//

#include "bmrt/NormRows.h"

namespace bmrt {

NormRows normRows(const Shape &shape, int64_t axis) {
  NormRows r;
  for (int64_t d = 0; d < axis; ++d)
    r.rows *= shape[d];
  r.block.assign(shape.begin() + axis, shape.end());
  r.cols = numElements(r.block);
  return r;
}

std::vector<int64_t> paramStrides(const Shape &block, const Shape &param) {
  size_t rank = block.size();
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = 0; i < param.size() && i < rank; ++i) {
    int64_t extent = param[param.size() - 1 - i];
    strides[rank - 1 - i] = extent == 1 ? 0 : stride;
    stride *= extent;
  }
  return strides;
}

NormPlanes normPlanes(const Shape &shape) {
  NormPlanes p{shape[0], shape.size() > 1 ? shape[1] : 1, 1};
  for (size_t d = 2; d < shape.size(); ++d)
    p.positions *= shape[d];
  return p;
}

} // namespace bmrt
