//===- KernelTestSupport.h - host tensors and finite differences -*- C++ -*-===//
//
// Test-only helpers for the kernel tests: tensors that own their storage,
// seeded random fills, and a central finite-difference check of a backward
// kernel against its forward kernel.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CPU_TEST_KERNELTESTSUPPORT_H
#define BMRT_CPU_TEST_KERNELTESTSUPPORT_H

#include "bmrt/Backend.h"
#include "bmrt/Device.h"
#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace bmrt::test {

/// A tensor that owns its (host = CPU device) memory.
class Owned {
public:
  Owned() = default;
  Owned(DType dtype, Shape shape) {
    view.dtype = dtype;
    view.shape = std::move(shape);
    storage.assign(view.bytes() + 8, 0);
    view.data = storage.data();
  }
  Owned(const Owned &other) : Owned(other.view.dtype, other.view.shape) {
    std::memcpy(view.data, other.view.data, view.bytes());
  }
  Owned &operator=(const Owned &other) {
    Owned copy(other);
    std::swap(storage, copy.storage);
    view = copy.view;
    view.data = storage.data();
    return *this;
  }
  TensorView view;
  float &f(int64_t i) { return view.f32()[i]; }
  int64_t &i(int64_t k) { return view.i64()[k]; }
  int64_t size() const { return view.size(); }

private:
  std::vector<uint8_t> storage;
};

inline Owned f32(Shape shape, std::vector<float> values) {
  Owned t(DType::F32, std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
  std::memcpy(t.view.data, values.data(), t.view.bytes());
  return t;
}

inline Owned i64(Shape shape, std::vector<int64_t> values) {
  Owned t(DType::I64, std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
  std::memcpy(t.view.data, values.data(), t.view.bytes());
  return t;
}

/// Uniform in [lo, hi), from a fixed seed.
inline Owned randomF32(Shape shape, unsigned seed, float lo = -1.f,
                       float hi = 1.f) {
  Owned t(DType::F32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t k = 0; k < t.size(); ++k)
    t.f(k) = dist(rng);
  return t;
}

inline Stream &cpuStream() {
  static std::unique_ptr<Device> device = createDevice("cpu");
  return device->computeStream();
}

inline Owned bools(Shape shape, std::vector<uint8_t> values) {
  Owned t(DType::Bool, std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
  std::memcpy(t.view.data, values.data(), values.size());
  return t;
}

inline std::vector<float> floatsOf(const Owned &t) {
  return {t.view.f32(), t.view.f32() + t.size()};
}
inline std::vector<int64_t> intsOf(const Owned &t) {
  return {t.view.i64(), t.view.i64() + t.size()};
}
inline std::vector<uint8_t> boolsOf(const Owned &t) {
  return {t.view.boolean(), t.view.boolean() + t.size()};
}

/// Element k of t within tolerance * max(1, |expected[k]|).
inline void expectFloats(const Owned &t, const std::vector<float> &expected,
                         float tolerance = 1e-6f) {
  ASSERT_EQ(t.size(), static_cast<int64_t>(expected.size()));
  for (int64_t k = 0; k < t.size(); ++k)
    EXPECT_NEAR(t.view.f32()[k], expected[k],
                tolerance * std::max(1.f, std::fabs(expected[k])))
        << "element " << k;
}

/// The default absolute tolerance of expectClose: fp32 results of O(1)
/// values against double-precision references.
inline constexpr double kCloseTolerance = 1e-5;

inline void expectClose(const Owned &got, const Owned &want,
                        double tolerance = kCloseTolerance) {
  ASSERT_EQ(got.view.shape, want.view.shape);
  for (int64_t k = 0; k < got.size(); ++k)
    EXPECT_NEAR(got.view.f32()[k], want.view.f32()[k], tolerance)
        << "element " << k << " of " << formatShape(got.view.shape);
}

/// Checks an analytic gradient against central finite differences of
/// L(x) = sum(forward(x) * weights), for every element of one input.
///
/// `forward(x)` must return the forward output for input value x (the other
/// inputs fixed inside the lambda); `analytic` is dL/dx computed by the
/// backward kernel with dy = weights. fp32 forward passes limit the
/// difference's accuracy to about eps_fp32 * |L| / h, so with h = 1e-2 on
/// O(1) values the two agree to about 1e-3 relative: the default tolerance
/// is 2e-3 * max(1, |analytic|). Inputs must stay away from kinks (relu at
/// 0, max ties) by more than h.
inline void expectGradientMatches(
    const std::function<Owned(const Owned &x)> &forward, const Owned &x,
    const Owned &weights, const Owned &analytic, double h = 1e-2,
    double tolerance = 2e-3) {
  ASSERT_EQ(analytic.view.shape, x.view.shape);
  auto loss = [&](const Owned &input) {
    Owned y = forward(input);
    EXPECT_EQ(y.view.shape, weights.view.shape);
    double sum = 0;
    for (int64_t k = 0; k < y.size(); ++k)
      sum += double(y.view.f32()[k]) * weights.view.f32()[k];
    return sum;
  };
  for (int64_t k = 0; k < x.size(); ++k) {
    Owned plus = x, minus = x;
    plus.f(k) += static_cast<float>(h);
    minus.f(k) -= static_cast<float>(h);
    // The step actually taken, after fp32 rounding of x +- h.
    double step = double(plus.view.f32()[k]) - double(minus.view.f32()[k]);
    double numeric = (loss(plus) - loss(minus)) / step;
    double got = analytic.view.f32()[k];
    EXPECT_NEAR(got, numeric, tolerance * std::max(1.0, std::fabs(got)))
        << "element " << k << " of " << formatShape(x.view.shape);
  }
}

} // namespace bmrt::test

#endif // BMRT_CPU_TEST_KERNELTESTSUPPORT_H
