//===- Window.cpp - the window geometry of convolution and pooling --------===//

#include "bmrt/Window.h"

#include "bmrt/Error.h"

#include <algorithm>

namespace bmrt {

Geometry makeGeometry(const Shape &in, const Shape &out,
                      const std::vector<int64_t> &kernel,
                      const std::vector<int64_t> &strides,
                      const std::vector<int64_t> &pads,
                      const std::vector<int64_t> &dilations) {
  constexpr int64_t kSpatial = Geometry::kSpatial;
  int64_t dims = static_cast<int64_t>(in.size()) - 2;
  BMRT_CHECK(dims >= 1 && dims <= kSpatial,
             "convolution and pooling take 1 to 3 spatial dims, not " +
                 std::to_string(dims) + " (" + formatShape(in) + ")");
  Geometry g;
  int64_t offset = kSpatial - dims;
  for (int64_t i = 0; i < dims; ++i) {
    g.in[offset + i] = in[2 + i];
    g.out[offset + i] = out[2 + i];
    g.kernel[offset + i] = kernel[i];
    g.stride[offset + i] = strides.empty() ? 1 : strides[i];
    g.padBegin[offset + i] = pads.empty() ? 0 : pads[i];
    g.dilation[offset + i] = dilations.empty() ? 1 : dilations[i];
  }
  return g;
}

ConvShape makeConvShape(const Shape &x, const Shape &w, const Shape &y,
                        const std::vector<int64_t> &strides,
                        const std::vector<int64_t> &pads,
                        const std::vector<int64_t> &dilations, int64_t group) {
  ConvShape c;
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  c.geo = makeGeometry(x, y, kernel, strides, pads, dilations);
  c.batch = x[0];
  c.groups = std::max<int64_t>(group, 1);
  c.inChannels = x[1] / c.groups;
  c.outChannels = y[1] / c.groups;
  c.colRows = c.inChannels * c.geo.kernelSize();
  return c;
}

} // namespace bmrt
