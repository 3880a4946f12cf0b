//===- CasesNorm.cpp - softmax and normalisation, forward and backward ----===//
//
// Normalised blocks of at most 24 elements (kReduction, Tolerance.h); the
// scale broadcasting onto a block of two dims; layer_norm with and without
// bias; batch norm's variances kept well above 0.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include <gtest/gtest.h>

#include <cmath>

namespace bmrt::conformance {
namespace {

/// Each row of the last dim of results[0] sums to 1 (sums of <= 8 positive
/// terms: n * eps = 5e-7).
void rowsSumToOne(const std::vector<HostTensor> &,
                  const std::vector<HostTensor> &results) {
  const HostTensor &y = results[0];
  int64_t n = y.shape.back();
  for (int64_t row = 0; row < y.size() / n; ++row) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j)
      sum += y.at(row * n + j);
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << row;
  }
}

Case softmax(const std::string &op, int64_t axis, Shape shape, uint32_t seed) {
  return Build(op + "_axis" + std::to_string(axis), op)
      .in(uniform(shape, seed, -3, 3))
      .out(shape)
      .i("axis", axis)
      .tol(kReduction);
}

/// The backward from a forward output y: softmax's is in (0, 1) summing to
/// 1 per row; log_softmax's is its log.
Case softmaxGrad(const std::string &op, bool logOf) {
  const Shape shape = {3, 4, 6};
  HostTensor y = uniform(shape, 301, 0.05f, 1);
  for (int64_t row = 0; row < 12; ++row) {
    float sum = 0;
    for (int64_t j = 0; j < 6; ++j)
      sum += reinterpret_cast<float *>(y.bytes.data())[row * 6 + j];
    for (int64_t j = 0; j < 6; ++j) {
      float &v = reinterpret_cast<float *>(y.bytes.data())[row * 6 + j];
      v /= sum;
      if (logOf)
        v = std::log(v);
    }
  }
  return Build(op, op)
      .in(y)
      .in(uniform(shape, 302))
      .out(shape)
      .i("axis", 2)
      .tol(kReduction);
}

} // namespace

std::vector<Case> normCases() {
  const Shape x = {4, 3, 8};
  std::vector<Case> cases = {
      Build("batch_norm", "batch_norm")
          .in(uniform({2, 3, 4, 5}, 311, -2, 2))
          .in(uniform({3}, 312))
          .in(uniform({3}, 313))
          .in(uniform({3}, 314))
          .in(uniform({3}, 315, 0.5f, 2))
          .out({2, 3, 4, 5})
          .f("epsilon", 1e-5)
          .tol(kTranscendental),
      Build("batch_norm_grad", "batch_norm_grad")
          .in(uniform({2, 3, 4, 5}, 316, -2, 2))
          .in(uniform({3}, 317))
          .in(uniform({3}, 318))
          .in(uniform({3}, 319, 0.5f, 2))
          .in(uniform({2, 3, 4, 5}, 320))
          .out({2, 3, 4, 5})
          .out({3})
          .out({3})
          .f("epsilon", 1e-5)
          .tol(kReduction),
      Build("layer_norm_bias", "layer_norm")
          .in(uniform(x, 321, -2, 2))
          .in(uniform({8}, 322))
          .in(uniform({8}, 323))
          .out(x)
          .i("axis", 2)
          .f("epsilon", 1e-5)
          .tol(kReduction),
      Build("layer_norm_grad_bias", "layer_norm_grad")
          .in(uniform(x, 324, -2, 2))
          .in(uniform({8}, 325))
          .in(uniform(x, 326))
          .out(x)
          .out({8})
          .out({8})
          .i("axis", 2)
          .f("epsilon", 1e-5)
          .tol(kReduction),
      Build("layer_norm_grad_no_bias_two_dims", "layer_norm_grad")
          .in(uniform(x, 327, -2, 2))
          .in(uniform({1, 8}, 328))
          .in(uniform(x, 329))
          .out(x)
          .out({1, 8})
          .i("axis", 1)
          .f("epsilon", 1e-5)
          .tol(kReduction),
      // 300 rows: the parameter sums' first pass takes 64 rows per chunk,
      // so five chunks, the last one short.
      Build("layer_norm_grad_many_rows", "layer_norm_grad")
          .in(uniform({3, 100, 16}, 340, -2, 2))
          .in(uniform({16}, 341))
          .in(uniform({3, 100, 16}, 342))
          .out({3, 100, 16})
          .out({16})
          .out({16})
          .i("axis", 2)
          .f("epsilon", 1e-5)
          .tol(kReduction),
      Build("layer_norm_no_bias_two_dims", "layer_norm")
          .in(uniform(x, 330, -2, 2))
          .in(uniform({3, 1}, 331))
          .in(absent())
          .out(x)
          .i("axis", 1)
          .f("epsilon", 1e-5)
          .tol(kReduction),
      Build("rms_norm", "rms_norm")
          .in(uniform(x, 332, -2, 2))
          .in(uniform({8}, 333))
          .out(x)
          .i("axis", 2)
          .f("epsilon", 1e-6)
          .tol(kReduction),
      Build("rms_norm_grad", "rms_norm_grad")
          .in(uniform(x, 334, -2, 2))
          .in(uniform({8}, 335))
          .in(uniform(x, 336))
          .out(x)
          .out({8})
          .i("axis", 2)
          .f("epsilon", 1e-6)
          .tol(kReduction),
      Build("rms_norm_grad_many_rows", "rms_norm_grad")
          .in(uniform({130, 8}, 343, -2, 2))
          .in(uniform({8}, 344))
          .in(uniform({130, 8}, 345))
          .out({130, 8})
          .out({8})
          .i("axis", 1)
          .f("epsilon", 1e-6)
          .tol(kReduction),
      softmax("log_softmax", 2, {3, 4, 6}, 337),
      softmaxGrad("log_softmax_grad", true),
      softmax("softmax", 1, {3, 4, 6}, 338),
      softmax("softmax", 2, {3, 4, 6}, 339),
      softmaxGrad("softmax_grad", false),
  };
  for (Case &c : cases)
    if (c.name == "softmax_axis2")
      c.invariant = rowsSumToOne;
  return cases;
}

} // namespace bmrt::conformance
