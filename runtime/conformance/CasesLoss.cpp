//===- CasesLoss.cpp - cross-entropy, whole and vocabulary-parallel -------===//
//
// Logits [6, 10] with one label of -100 (PyTorch's ignore_index); the
// vocabulary-parallel forms' statistics computed on the host from the
// same logits, so that they are consistent: each row's max, the sum of
// exp(x - max) and the label's logit. Rows of 10 terms: kReduction.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include <algorithm>
#include <cmath>

namespace bmrt::conformance {
namespace {

constexpr int64_t kRows = 6, kClasses = 10;

HostTensor logits(uint32_t seed) { return uniform({kRows, kClasses}, seed, -3, 3); }

HostTensor labels() {
  return ints(DType::I64, {kRows}, {3, -100, 0, 9, 5, 3});
}

/// Statistics [3 x ranks, rows] of `x` [rows, ranks * classes] split into
/// `ranks` chunks of classes (rank r's three rows at 3r).
HostTensor stats(const HostTensor &x, const HostTensor &label, int64_t ranks) {
  int64_t rows = x.shape[0], classes = x.shape[1] / ranks;
  std::vector<float> values(3 * ranks * rows);
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t n = 0; n < rows; ++n) {
      double max = -INFINITY, sum = 0, picked = 0;
      for (int64_t j = 0; j < classes; ++j)
        max = std::max(max, x.at(n * x.shape[1] + r * classes + j));
      for (int64_t j = 0; j < classes; ++j)
        sum += std::exp(x.at(n * x.shape[1] + r * classes + j) - max);
      int64_t l = static_cast<int64_t>(label.at(n)) - r * classes;
      if (l >= 0 && l < classes)
        picked = x.at(n * x.shape[1] + r * classes + l);
      values[(3 * r) * rows + n] = static_cast<float>(max);
      values[(3 * r + 1) * rows + n] = static_cast<float>(sum);
      values[(3 * r + 2) * rows + n] = static_cast<float>(picked);
    }
  return floats({3 * ranks, rows}, values);
}

} // namespace

std::vector<Case> lossCases() {
  HostTensor x = logits(401);
  return {
      Build("cross_entropy", "cross_entropy")
          .in(x)
          .in(labels())
          .out({})
          .tol(kReduction),
      // Two ranks' statistics of logits [6, 20]: the merge of the
      // log-sum-exp across ranks.
      Build("cross_entropy_from_stats", "cross_entropy_from_stats")
          .in(stats(uniform({kRows, 2 * kClasses}, 402, -3, 3),
                    ints(DType::I64, {kRows}, {13, -100, 0, 19, 5, 10}), 2))
          .in(ints(DType::I64, {kRows}, {13, -100, 0, 19, 5, 10}))
          .out({})
          .tol(kReduction),
      Build("cross_entropy_grad", "cross_entropy_grad")
          .in(x)
          .in(labels())
          .in(floats({}, {0.75f}))
          .out({kRows, kClasses})
          .tol(kReduction),
      Build("cross_entropy_grad_from_stats", "cross_entropy_grad_from_stats")
          .in(x)
          .in(labels())
          .in(stats(x, labels(), 1))
          .in(floats({}, {0.75f}))
          .out({kRows, kClasses})
          .collective()
          .tol(kReduction),
      Build("cross_entropy_stats", "cross_entropy_stats")
          .in(x)
          .in(labels())
          .out({3, kRows})
          .collective()
          .tol(kReduction),
  };
}

} // namespace bmrt::conformance
