//===- NormRows.h - how normalisations see their input ----------*- C++ -*-===//
//
// Shared by the backends' normalisation kernels (runtime/cpu/
// NormKernels.cpp, runtime/cuda/NormKernels.cu). Layer and RMS norm: x is
// rows (the dims before `axis`) of a normalised block (the dims from
// `axis` on), and the scale and bias broadcast onto the block numpy-style,
// right-aligned, a dim of size 1 (or a missing one) repeating. Batch norm:
// x is planes of positions, one per image and channel.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_NORMROWS_H
#define BMRT_NORMROWS_H

#include "bmrt/Tensor.h"

#include <cstdint>
#include <vector>

namespace bmrt {

/// x as `rows` rows of the normalised block, `cols` elements each.
struct NormRows {
  int64_t rows = 1, cols = 1;
  Shape block;
};

NormRows normRows(const Shape &shape, int64_t axis);

/// Per dim of `block`, the step in a parameter of shape `param` broadcast
/// onto it: 0 where the parameter repeats. Leading parameter dims beyond
/// the block's rank must be 1 and are ignored.
std::vector<int64_t> paramStrides(const Shape &block, const Shape &param);

/// An NC[spatial] x as [images, channels, positions] (positions: the
/// spatial dims); a plain struct, passed to CUDA kernels by value.
struct NormPlanes {
  int64_t images, channels, positions;
};

NormPlanes normPlanes(const Shape &shape);

} // namespace bmrt

#endif // BMRT_NORMROWS_H
