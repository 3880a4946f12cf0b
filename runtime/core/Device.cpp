//===- Device.cpp - memory accounting and the copies every backend shares -===//

#include "bmrt/Backend.h"
#include "bmrt/Device.h"
#include "bmrt/Error.h"

#include <algorithm>

namespace bmrt {

const char *nameOf(MemoryKind kind) {
  switch (kind) {
  case MemoryKind::Parameters:
    return "parameters";
  case MemoryKind::Gradients:
    return "gradients";
  case MemoryKind::OptimizerState:
    return "optimizer_state";
  case MemoryKind::Activations:
    return "activations";
  case MemoryKind::Workspace:
    return "workspace";
  }
  return "?";
}

const char *nameOf(ContractionPrecision precision) {
  switch (precision) {
  case ContractionPrecision::F32:
    return "fp32";
  case ContractionPrecision::BF16:
    return "bf16";
  case ContractionPrecision::F16:
    return "fp16";
  }
  return "?";
}

bool parseContractionPrecision(const std::string &name,
                               ContractionPrecision &precision) {
  for (ContractionPrecision p :
       {ContractionPrecision::F32, ContractionPrecision::BF16,
        ContractionPrecision::F16})
    if (name == nameOf(p)) {
      precision = p;
      return true;
    }
  return false;
}

Stream::~Stream() = default;
Event::~Event() = default;
Device::~Device() = default;

static std::string mebibytes(size_t bytes) {
  return std::to_string((bytes + (1u << 19)) >> 20) + " MiB";
}

void *Device::allocate(size_t bytes, MemoryKind kind) {
  bool capped = limit && total + bytes > limit;
  void *pointer = capped ? nullptr : rawAllocate(bytes);
  if (!pointer && bytes) {
    size_t free = capped ? limit - total : freeBytes();
    throw OutOfMemory(
        "out of memory on " + name() + ": cannot allocate " +
            std::to_string(bytes) + " bytes of " + nameOf(kind) + " with " +
            mebibytes(total) + " held by this process" +
            (free ? " and " + mebibytes(free) + " free on the device" : "") +
            (limit ? " (limited to " + mebibytes(limit) + ")" : ""),
        __FILE__, __LINE__, nameOf(kind));
  }
  size_t k = static_cast<size_t>(kind);
  inUse[k] += bytes;
  peak[k] = std::max(peak[k], inUse[k]);
  total += bytes;
  peakTotal = std::max(peakTotal, total);
  return pointer;
}

void Device::deallocate(void *pointer, size_t bytes, MemoryKind kind) {
  if (!pointer)
    return;
  rawDeallocate(pointer);
  inUse[static_cast<size_t>(kind)] -= bytes;
  total -= bytes;
}

size_t Device::bytesInUse(MemoryKind kind) const {
  return inUse[static_cast<size_t>(kind)];
}

void Device::resetPeaks() {
  peak = inUse;
  peakTotal = total;
}

size_t Device::peakBytes(MemoryKind kind) const {
  return peak[static_cast<size_t>(kind)];
}

void Device::copyStrided(void *dst, size_t dstPitch, const void *src,
                         size_t srcPitch, size_t runBytes, size_t rows,
                         Stream &stream) {
  for (size_t r = 0; r < rows; ++r)
    copyOnDevice(static_cast<char *>(dst) + r * dstPitch,
                 static_cast<const char *>(src) + r * srcPitch, runBytes,
                 stream);
}

void Device::copyBox(const void *src, const Shape &srcShape,
                     const Shape &srcOffsets, void *dst, const Shape &dstShape,
                     const Shape &dstOffsets, const Shape &box,
                     size_t elementBytes, Stream &stream) {
  const char *from = static_cast<const char *>(src);
  char *to = static_cast<char *>(dst);
  forEachBoxPlane(srcShape, srcOffsets, dstShape, dstOffsets, box,
                  elementBytes, [&](const BoxPlane &p) {
                    copyStrided(to + p.dstOffset, p.dstPitch,
                                from + p.srcOffset, p.srcPitch, p.runBytes,
                                p.rows, stream);
                  });
}

} // namespace bmrt
