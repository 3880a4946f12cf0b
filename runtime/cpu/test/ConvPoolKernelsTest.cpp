//===- ConvPoolKernelsTest.cpp - convolution and pooling ------------------===//
//
// Forward kernels against direct loops (in double) over 1-D, 2-D and 3-D
// problems with groups, strides, dilations and asymmetric padding; every
// backward kernel against central finite differences of its forward kernel
// (and, on shapes too large for differences, against the direct loops'
// adjoint).
//
// Tolerances: convolution is linear in x and in w, and average pooling in x,
// so their finite differences are exact but for fp32 rounding of the
// outputs a perturbation touches (~1e-4 relative at h = 1e-2): the default
// 2e-3 holds. Max pooling is piecewise linear; inputs spaced 0.05 apart keep
// every window's maximum unique by more than 2h, so no perturbation crosses
// a kink. Forward results are short sums (<= 72 terms) of O(1) products: 1e-5
// absolute against the double reference.
//
//===----------------------------------------------------------------------===//

#include "KernelTestSupport.h"

#include <algorithm>
#include <numeric>

namespace bmrt::test {
namespace {

using cpu::Ints;

constexpr double kTolerance = 1e-5;

/// Row-major coordinates of `flat` in `dims`.
Ints coordinates(int64_t flat, const Shape &dims) {
  Ints at(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    at[d] = flat % dims[d];
    flat /= dims[d];
  }
  return at;
}

/// Spatial-only position -> flat index in a plane of `dims`, or -1 outside.
int64_t flatIndex(const Ints &at, const Shape &dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (at[d] < 0 || at[d] >= dims[d])
      return -1;
    flat = flat * dims[d] + at[d];
  }
  return flat;
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

struct ConvCase {
  Shape x, w;
  Ints strides, pads, dilations;
  int64_t group = 1;
  bool bias = false;
};

int64_t spatialRank(const ConvCase &c) {
  return static_cast<int64_t>(c.x.size()) - 2;
}
int64_t strideOf(const ConvCase &c, int64_t i) {
  return c.strides.empty() ? 1 : c.strides[i];
}
int64_t padOf(const ConvCase &c, int64_t i) {
  return c.pads.empty() ? 0 : c.pads[i];
}
int64_t dilationOf(const ConvCase &c, int64_t i) {
  return c.dilations.empty() ? 1 : c.dilations[i];
}

/// ONNX's output shape (floor).
Shape convOutShape(const ConvCase &c) {
  Shape out = {c.x[0], c.w[0]};
  int64_t dims = spatialRank(c);
  for (int64_t i = 0; i < dims; ++i) {
    int64_t padded = c.x[2 + i] + padOf(c, i) + padOf(c, dims + i);
    int64_t span = dilationOf(c, i) * (c.w[2 + i] - 1) + 1;
    out.push_back((padded - span) / strideOf(c, i) + 1);
  }
  return out;
}

/// Visits every (output element, input element, weight element) triple of
/// the convolution's sum, straight from ONNX's definition.
template <typename Visit> void forEachConvTerm(const ConvCase &c, Visit visit) {
  Shape out = convOutShape(c);
  int64_t dims = spatialRank(c);
  Shape inSpatial(c.x.begin() + 2, c.x.end());
  Shape outSpatial(out.begin() + 2, out.end());
  Shape kernel(c.w.begin() + 2, c.w.end());
  int64_t cin = c.x[1] / c.group, cout = c.w[0] / c.group;
  int64_t inSize = numElements(inSpatial), outSize = numElements(outSpatial);
  int64_t kSize = numElements(kernel);
  for (int64_t n = 0; n < c.x[0]; ++n)
    for (int64_t co = 0; co < c.w[0]; ++co)
      for (int64_t o = 0; o < outSize; ++o) {
        Ints oAt = coordinates(o, outSpatial);
        int64_t g = co / cout;
        for (int64_t ci = 0; ci < cin; ++ci)
          for (int64_t k = 0; k < kSize; ++k) {
            Ints kAt = coordinates(k, kernel), iAt(dims);
            for (int64_t d = 0; d < dims; ++d)
              iAt[d] = oAt[d] * strideOf(c, d) - padOf(c, d) +
                       kAt[d] * dilationOf(c, d);
            int64_t i = flatIndex(iAt, inSpatial);
            if (i < 0)
              continue;
            visit((n * c.w[0] + co) * outSize + o,
                  (n * c.x[1] + g * cin + ci) * inSize + i,
                  (co * cin + ci) * kSize + k);
          }
      }
}

Owned referenceConv(const ConvCase &c, const Owned &x, const Owned &w,
                    const Owned *bias) {
  Shape outShape = convOutShape(c);
  std::vector<double> sums(numElements(outShape), 0.0);
  forEachConvTerm(c, [&](int64_t y, int64_t xi, int64_t wi) {
    sums[y] += double(x.view.f32()[xi]) * w.view.f32()[wi];
  });
  Owned y(DType::F32, outShape);
  int64_t plane = numElements(outShape) / (outShape[0] * outShape[1]);
  for (int64_t k = 0; k < y.size(); ++k)
    y.f(k) = static_cast<float>(
        sums[k] + (bias ? bias->view.f32()[(k / plane) % outShape[1]] : 0.0));
  return y;
}

Owned runConv(const ConvCase &c, const Owned &x, const Owned &w,
              const Owned *bias) {
  Owned y = randomF32(convOutShape(c), 77); // stale contents
  cpu::conv(cpuStream(), x.view, w.view, bias ? &bias->view : nullptr, y.view,
            c.strides, c.pads, c.dilations, c.group);
  return y;
}

Owned runConvGradInput(const ConvCase &c, const Owned &dy, const Owned &w) {
  Owned dx = randomF32(c.x, 78);
  cpu::convGradInput(cpuStream(), dy.view, w.view, dx.view, c.strides, c.pads,
                     c.dilations, c.group);
  return dx;
}

Owned runConvGradWeight(const ConvCase &c, const Owned &dy, const Owned &x) {
  Owned dw = randomF32(c.w, 79);
  cpu::convGradWeight(cpuStream(), dy.view, x.view, dw.view, c.strides, c.pads,
                      c.dilations, c.group);
  return dw;
}

/// The cases every convolution test runs: each dimensionality, groups,
/// strides, dilations, asymmetric padding, the pointwise shortcut, the
/// ONNX defaults (empty attributes).
std::vector<ConvCase> convCases() {
  return {
      {{2, 3, 5, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},
      {{2, 4, 7, 8}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2, true},
      {{2, 3, 9}, {4, 3, 3}, {2}, {2, 1}, {2}, 1, false},
      {{1, 2, 4, 5, 4},
       {4, 1, 2, 3, 2},
       {1, 2, 1},
       {1, 0, 1, 0, 1, 1},
       {1, 1, 2},
       2,
       true},
      {{2, 4, 3, 3}, {6, 4, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},
      {{2, 3, 5, 5}, {3, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 3, false},
      {{1, 2, 4, 4}, {3, 2, 2, 2}, {}, {}, {}, 1, false},
  };
}

std::string describe(const ConvCase &c) {
  return "x " + formatShape(c.x) + " w " + formatShape(c.w) + " group " +
         std::to_string(c.group);
}

TEST(Conv, MatchesDirectLoops) {
  for (const ConvCase &c : convCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 1), w = randomF32(c.w, 2);
    Owned bias = randomF32({c.w[0]}, 3);
    const Owned *b = c.bias ? &bias : nullptr;
    expectClose(runConv(c, x, w, b), referenceConv(c, x, w, b));
  }
}

TEST(Conv, GradInputMatchesFiniteDifferences) {
  for (const ConvCase &c : convCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 4), w = randomF32(c.w, 5);
    Owned dy = randomF32(convOutShape(c), 6);
    expectGradientMatches(
        [&](const Owned &v) { return runConv(c, v, w, nullptr); }, x, dy,
        runConvGradInput(c, dy, w));
  }
}

TEST(Conv, GradWeightMatchesFiniteDifferences) {
  for (const ConvCase &c : convCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 7), w = randomF32(c.w, 8);
    Owned dy = randomF32(convOutShape(c), 9);
    expectGradientMatches(
        [&](const Owned &v) { return runConv(c, x, v, nullptr); }, w, dy,
        runConvGradWeight(c, dy, x));
  }
}

TEST(Conv, LargerProblemsOnEveryThreadingPath) {
  // Many small GEMMs (spread over OpenMP threads) and a few large ones
  // (threaded by OpenBLAS), against the direct loops and their adjoints.
  // Sums of up to 144 O(1) products: 1e-4.
  ConvCase cases[] = {
      {{8, 8, 6, 6}, {8, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2, true},
      {{2, 16, 20, 20}, {32, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},
  };
  for (const ConvCase &c : cases) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 10), w = randomF32(c.w, 11);
    Owned bias = randomF32({c.w[0]}, 12);
    Owned dy = randomF32(convOutShape(c), 13);
    expectClose(runConv(c, x, w, &bias), referenceConv(c, x, w, &bias), 1e-4);

    std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
    forEachConvTerm(c, [&](int64_t y, int64_t xi, int64_t wi) {
      dx[xi] += double(dy.view.f32()[y]) * w.view.f32()[wi];
      dw[wi] += double(dy.view.f32()[y]) * x.view.f32()[xi];
    });
    Owned wantDx(DType::F32, c.x), wantDw(DType::F32, c.w);
    for (int64_t k = 0; k < x.size(); ++k)
      wantDx.f(k) = static_cast<float>(dx[k]);
    for (int64_t k = 0; k < w.size(); ++k)
      wantDw.f(k) = static_cast<float>(dw[k]);
    expectClose(runConvGradInput(c, dy, w), wantDx, 1e-4);
    // dw sums over images and positions too: up to 800 terms.
    expectClose(runConvGradWeight(c, dy, x), wantDw, 5e-4);
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

struct PoolCase {
  Shape x;
  Ints kernel, strides, pads;
  Shape out; // empty: ONNX's floor shape
};

Shape poolOutShape(const PoolCase &c) {
  if (!c.out.empty())
    return c.out;
  Shape out = {c.x[0], c.x[1]};
  size_t dims = c.kernel.size();
  for (size_t i = 0; i < dims; ++i)
    out.push_back((c.x[2 + i] + c.pads[i] + c.pads[dims + i] - c.kernel[i]) /
                      c.strides[i] +
                  1);
  return out;
}

/// Calls visit(plane, outIndex, inIndices) with the in-input elements of
/// every window (padding is outside the input and skipped), in row-major
/// order.
template <typename Visit>
void forEachPoolWindow(const PoolCase &c, Visit visit) {
  Shape out = poolOutShape(c);
  Shape inSpatial(c.x.begin() + 2, c.x.end());
  Shape outSpatial(out.begin() + 2, out.end());
  Shape kernel(c.kernel.begin(), c.kernel.end());
  size_t dims = kernel.size();
  int64_t planes = c.x[0] * c.x[1];
  std::vector<int64_t> members;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o = 0; o < numElements(outSpatial); ++o) {
      Ints oAt = coordinates(o, outSpatial);
      members.clear();
      for (int64_t k = 0; k < numElements(kernel); ++k) {
        Ints kAt = coordinates(k, kernel), iAt(dims);
        for (size_t d = 0; d < dims; ++d)
          iAt[d] = oAt[d] * c.strides[d] - c.pads[d] + kAt[d];
        int64_t i = flatIndex(iAt, inSpatial);
        if (i >= 0)
          members.push_back(p * numElements(inSpatial) + i);
      }
      visit(p * numElements(outSpatial) + o, members);
    }
}

Owned referenceMaxPool(const PoolCase &c, const Owned &x) {
  Owned y(DType::F32, poolOutShape(c));
  forEachPoolWindow(c, [&](int64_t o, const std::vector<int64_t> &in) {
    float best = x.view.f32()[in[0]];
    for (int64_t i : in)
      best = std::max(best, x.view.f32()[i]);
    y.f(o) = best;
  });
  return y;
}

Owned referenceAvgPool(const PoolCase &c, const Owned &x) {
  Owned y(DType::F32, poolOutShape(c));
  forEachPoolWindow(c, [&](int64_t o, const std::vector<int64_t> &in) {
    double sum = 0;
    for (int64_t i : in)
      sum += x.view.f32()[i];
    y.f(o) = static_cast<float>(sum / in.size());
  });
  return y;
}

Owned runMaxPool(const PoolCase &c, const Owned &x) {
  Owned y = randomF32(poolOutShape(c), 80);
  cpu::maxPool(cpuStream(), x.view, y.view, c.kernel, c.strides, c.pads);
  return y;
}

Owned runAvgPool(const PoolCase &c, const Owned &x) {
  Owned y = randomF32(poolOutShape(c), 81);
  cpu::avgPool(cpuStream(), x.view, y.view, c.kernel, c.strides, c.pads);
  return y;
}

/// Distinct values 0.05 apart, shuffled: every window has one maximum, by
/// more than the finite-difference step.
Owned spacedValues(const Shape &shape, unsigned seed) {
  Owned x(DType::F32, shape);
  std::vector<int64_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  for (int64_t k = 0; k < x.size(); ++k)
    x.f(k) = 0.05f * static_cast<float>(order[k] - x.size() / 2);
  return x;
}

std::vector<PoolCase> poolCases() {
  return {
      {{2, 3, 6, 7}, {3, 2}, {2, 2}, {1, 0, 1, 1}, {}},
      {{2, 2, 5, 5}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {}}, // overlapping
      {{1, 2, 9}, {3}, {2}, {1, 2}, {}},
      {{1, 2, 4, 5, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 0, 0, 1, 1}, {}},
      // ceil_mode: a last window running past the input's end.
      {{1, 2, 5, 5}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 2, 3, 3}},
  };
}

std::string describe(const PoolCase &c) {
  return "x " + formatShape(c.x) + " kernel " + formatShape(c.kernel);
}

TEST(MaxPool, MatchesDirectLoops) {
  for (const PoolCase &c : poolCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 20);
    expectClose(runMaxPool(c, x), referenceMaxPool(c, x), 0.0);
  }
}

TEST(MaxPool, GradMatchesFiniteDifferences) {
  for (const PoolCase &c : poolCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = spacedValues(c.x, 21);
    Owned dy = randomF32(poolOutShape(c), 22);
    Owned dx = randomF32(c.x, 23);
    cpu::maxPoolGrad(cpuStream(), x.view, dy.view, dx.view, c.kernel, c.strides,
                     c.pads);
    expectGradientMatches([&](const Owned &v) { return runMaxPool(c, v); }, x,
                          dy, dx);
  }
}

TEST(MaxPool, GradGoesToTheFirstOfTiedMaxima) {
  // One 2x2 window of equal values, then one whose two maxima are at
  // (0, 3) and (1, 2): the first in row-major order takes dy.
  PoolCase c{{1, 1, 2, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {}};
  Owned x = f32({1, 1, 2, 4}, {3, 3, 1, 5, 3, 3, 5, 0});
  Owned dy = f32({1, 1, 1, 2}, {1.5f, 2.5f});
  Owned dx(DType::F32, c.x);
  cpu::maxPoolGrad(cpuStream(), x.view, dy.view, dx.view, c.kernel, c.strides,
                   c.pads);
  expectClose(dx, f32({1, 1, 2, 4}, {1.5f, 0, 0, 2.5f, 0, 0, 0, 0}), 0.0);
}

TEST(AvgPool, MatchesDirectLoops) {
  for (const PoolCase &c : poolCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 24);
    expectClose(runAvgPool(c, x), referenceAvgPool(c, x));
  }
}

TEST(AvgPool, DoesNotCountPadding) {
  // count_include_pad = 0: a corner window sees one element, the centre
  // all four.
  PoolCase c{{1, 1, 2, 2}, {2, 2}, {1, 1}, {1, 1, 1, 1}, {}};
  Owned x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  expectClose(runAvgPool(c, x),
              f32({1, 1, 3, 3}, {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4}));
}

TEST(AvgPool, GradMatchesFiniteDifferences) {
  for (const PoolCase &c : poolCases()) {
    SCOPED_TRACE(describe(c));
    Owned x = randomF32(c.x, 25);
    Owned dy = randomF32(poolOutShape(c), 26);
    Owned dx = randomF32(c.x, 27);
    cpu::avgPoolGrad(cpuStream(), dy.view, dx.view, c.kernel, c.strides,
                     c.pads);
    expectGradientMatches([&](const Owned &v) { return runAvgPool(c, v); }, x,
                          dy, dx);
  }
}

TEST(Pool, LargeEnoughToRunOnManyThreads) {
  PoolCase c{{4, 16, 24, 24}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}};
  Owned x = randomF32(c.x, 28);
  expectClose(runMaxPool(c, x), referenceMaxPool(c, x), 0.0);
  expectClose(runAvgPool(c, x), referenceAvgPool(c, x));
}

} // namespace
} // namespace bmrt::test
