//===- Box.h - copying a box of one tensor into another ---------*- C++ -*-===//
//
// A box is a block of a row-major tensor: per dim an offset and a count.
// Checkpoints cut a rank's block out of a global tensor in host memory;
// collectives move chunks between device buffers (Device::copyBox). Both
// walk the box the same way: as 2-D strided copies of its last two dims,
// one per index of the dims before them.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_BOX_H
#define BMRT_BOX_H

#include "bmrt/Tensor.h"

#include <cstddef>
#include <functional>

namespace bmrt {

/// One 2-D piece of a box copy: `rows` runs of `runBytes` bytes, the i-th
/// from byte srcOffset + i * srcPitch of the source to byte dstOffset + i *
/// dstPitch of the destination.
struct BoxPlane {
  size_t srcOffset, dstOffset, srcPitch, dstPitch, runBytes, rows;
};

/// Calls `copy` for each 2-D piece of the copy of the box of `box`
/// elements per dim (`elementBytes` bytes each) from a tensor of shape
/// `srcShape` at `srcOffsets` to one of `dstShape` at `dstOffsets`. Throws
/// bmrt::Error unless the box lies inside both. Nothing is called for an
/// empty box.
void forEachBoxPlane(const Shape &srcShape, const Shape &srcOffsets,
                     const Shape &dstShape, const Shape &dstOffsets,
                     const Shape &box, size_t elementBytes,
                     const std::function<void(const BoxPlane &)> &copy);

/// The box copy between two tensors in host memory.
void copyBox(const void *src, const Shape &srcShape, const Shape &srcOffsets,
             void *dst, const Shape &dstShape, const Shape &dstOffsets,
             const Shape &box, size_t elementBytes);

} // namespace bmrt

#endif // BMRT_BOX_H
