//===- Window.h - convolution and pooling windows --------------*- C++ -*-===//
//
// Shared by the backends' convolution and pooling kernels (runtime/cpu/
// ConvPoolKernels.cpp, runtime/cuda/ContractionKernels.cu and
// ReductionKernels.cu), with the sizes of a grouped convolution's im2col
// GEMMs: NC[spatial] problems of 1 to 3 spatial dims padded
// to three, with leading spatial dims of size 1 (kernel 1, stride 1, no
// padding), so that one set of loops serves all three. A plain struct of
// arrays, passed to CUDA kernels by value; its size accessors compile for
// the device too.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_WINDOW_H
#define BMRT_WINDOW_H

#include "bmrt/HostDevice.h"
#include "bmrt/Tensor.h"

#include <cstdint>
#include <vector>

namespace bmrt {

/// A convolution's or pool's spatial geometry, padded to three dims.
struct Geometry {
  static constexpr int kSpatial = 3;
  int64_t in[kSpatial] = {1, 1, 1}, out[kSpatial] = {1, 1, 1};
  int64_t kernel[kSpatial] = {1, 1, 1}, stride[kSpatial] = {1, 1, 1};
  int64_t padBegin[kSpatial] = {0, 0, 0}, dilation[kSpatial] = {1, 1, 1};

  BMRT_HOST_DEVICE int64_t inSize() const { return in[0] * in[1] * in[2]; }
  BMRT_HOST_DEVICE int64_t outSize() const { return out[0] * out[1] * out[2]; }
  BMRT_HOST_DEVICE int64_t kernelSize() const {
    return kernel[0] * kernel[1] * kernel[2];
  }
};

/// `in` and `out` are the full NC[spatial] shapes; `kernel` the spatial
/// kernel. Empty strides, pads or dilations take ONNX's defaults (1, 0, 1).
/// The end pads are implied by `out` (which also covers ceil_mode). Throws
/// bmrt::Error unless there are 1 to 3 spatial dims.
Geometry makeGeometry(const Shape &in, const Shape &out,
                      const std::vector<int64_t> &kernel,
                      const std::vector<int64_t> &strides,
                      const std::vector<int64_t> &pads,
                      const std::vector<int64_t> &dilations);

/// The sizes every convolution kernel needs: x [batch, groups *
/// inChannels, spatial...], w [groups * outChannels, inChannels, kernel...],
/// y [batch, groups * outChannels, spatial...].
struct ConvShape {
  Geometry geo;
  int64_t batch = 0, groups = 1;
  int64_t inChannels = 0, outChannels = 0; // per group
  int64_t colRows = 0; // im2col's rows: inChannels * kernel size
};

/// A group below 1 counts as 1.
ConvShape makeConvShape(const Shape &x, const Shape &w, const Shape &y,
                        const std::vector<int64_t> &strides,
                        const std::vector<int64_t> &pads,
                        const std::vector<int64_t> &dilations, int64_t group);

} // namespace bmrt

#endif // BMRT_WINDOW_H
