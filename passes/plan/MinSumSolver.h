//===- MinSumSolver.h - exact pairwise min-sum by elimination ---*- C++ -*-===//
//
// Minimises sum_i u_i(x_i) + sum_(i,j) p_ij(x_i, x_j) over discrete
// variables exactly, by variable elimination (Dechter 1999, "Bucket
// elimination: a unifying framework for reasoning") with the greedy
// min-table-size order. Exponential only in the induced width, which is
// small for the op graphs of neural network blocks.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_MINSUMSOLVER_H
#define BM_PLAN_MINSUMSOLVER_H

#include <vector>

namespace bm::plan {

class MinSumSolver {
public:
  explicit MinSumSolver(std::vector<int> domainSizes);

  void addUnary(int var, const std::vector<double> &costs);
  /// costs[a * domain(b) + b].
  void addPairwise(int varA, int varB, const std::vector<double> &costs);

  /// The minimising assignment; ties go to the lowest values, in a fixed
  /// order, so equal problems give equal answers.
  std::vector<int> solve(double *minimum = nullptr) const;

private:
  struct Table {
    std::vector<int> vars; // ascending
    std::vector<double> values; // row-major, last var fastest
  };
  std::vector<int> domain_;
  std::vector<Table> tables_;
};

} // namespace bm::plan

#endif // BM_PLAN_MINSUMSOLVER_H
