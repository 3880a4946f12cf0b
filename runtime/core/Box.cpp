//===- Box.cpp - copying a box of one tensor into another -----------------===//

#include "bmrt/Box.h"
#include "bmrt/Error.h"

#include <cstring>

namespace bmrt {
namespace {

void checkBox(const Shape &srcShape, const Shape &srcOffsets,
              const Shape &dstShape, const Shape &dstOffsets,
              const Shape &box) {
  size_t rank = box.size();
  BMRT_CHECK(srcShape.size() == rank && dstShape.size() == rank &&
                 srcOffsets.size() == rank && dstOffsets.size() == rank,
             "a box copy between tensors of different ranks");
  for (size_t d = 0; d < rank; ++d)
    BMRT_CHECK(srcOffsets[d] >= 0 && dstOffsets[d] >= 0 &&
                   srcOffsets[d] + box[d] <= srcShape[d] &&
                   dstOffsets[d] + box[d] <= dstShape[d],
               "a box of " + formatShape(box) + " does not fit " +
                   formatShape(srcShape) + " at " + formatShape(srcOffsets) +
                   " and " + formatShape(dstShape) + " at " +
                   formatShape(dstOffsets));
}

} // namespace

void forEachBoxPlane(const Shape &srcShape, const Shape &srcOffsets,
                     const Shape &dstShape, const Shape &dstOffsets,
                     const Shape &box, size_t elementBytes,
                     const std::function<void(const BoxPlane &)> &copy) {
  checkBox(srcShape, srcOffsets, dstShape, dstOffsets, box);
  if (numElements(box) == 0)
    return;
  // A scalar or a vector is one plane of one row; higher ranks iterate
  // the dims before the last two.
  size_t rank = box.size();
  Shape srcStrides = contiguousStrides(srcShape), dstStrides = contiguousStrides(dstShape);
  size_t outer = rank > 2 ? rank - 2 : 0;
  BoxPlane plane{};
  plane.runBytes = (rank ? box[rank - 1] : 1) * elementBytes;
  plane.rows = rank >= 2 ? box[rank - 2] : 1;
  plane.srcPitch = rank >= 2 ? srcStrides[rank - 2] * elementBytes : 0;
  plane.dstPitch = rank >= 2 ? dstStrides[rank - 2] * elementBytes : 0;
  Shape index(outer, 0);
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < rank; ++d) {
      int64_t at = d < outer ? index[d] : 0;
      s += (srcOffsets[d] + at) * srcStrides[d];
      t += (dstOffsets[d] + at) * dstStrides[d];
    }
    plane.srcOffset = s * elementBytes;
    plane.dstOffset = t * elementBytes;
    copy(plane);
    size_t d = outer;
    while (d-- > 0) {
      if (++index[d] < box[d])
        break;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1))
      return;
  }
}

void copyBox(const void *src, const Shape &srcShape, const Shape &srcOffsets,
             void *dst, const Shape &dstShape, const Shape &dstOffsets,
             const Shape &box, size_t elementBytes) {
  const char *from = static_cast<const char *>(src);
  char *to = static_cast<char *>(dst);
  forEachBoxPlane(srcShape, srcOffsets, dstShape, dstOffsets, box,
                  elementBytes, [&](const BoxPlane &p) {
                    for (size_t r = 0; r < p.rows; ++r)
                      std::memcpy(to + p.dstOffset + r * p.dstPitch,
                                  from + p.srcOffset + r * p.srcPitch,
                                  p.runBytes);
                  });
}

} // namespace bmrt
