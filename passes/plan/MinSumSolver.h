//===- MinSumSolver.h - exact pairwise min-sum by elimination ---*- C++ -*-===//
//
// Minimises sum_i u_i(x_i) + sum_(i,j) p_ij(x_i, x_j) over discrete
// variables exactly, by variable elimination (Dechter 1999, "Bucket
// elimination: a unifying framework for reasoning") with the greedy
// min-table-size order. Exponential only in the induced width, which is
// small for the op graphs of neural network blocks.
//
// The planner solves thousands of small problems per plan, so the solver
// keeps its state in flat arrays: unary costs in one vector, and a message
// over a single variable (what eliminating a leaf of a chain produces) is
// added to that variable's unary costs instead of becoming a table.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_MINSUMSOLVER_H
#define BM_PLAN_MINSUMSOLVER_H

#include <vector>

namespace bm::plan {

class MinSumSolver {
public:
  explicit MinSumSolver(std::vector<int> domainSizes);

  /// Adds `costs` (one per value of `var`) to the unary costs of `var`.
  void addUnary(int var, const std::vector<double> &costs);
  /// costs[a * domain(b) + b].
  void addPairwise(int varA, int varB, std::vector<double> costs);

  /// The minimising assignment; ties go to the lowest values, in a fixed
  /// order, so equal problems give equal answers.
  std::vector<int> solve(double *minimum = nullptr) const;

private:
  class Elimination;
  struct Table {
    std::vector<int> vars;      // ascending
    std::vector<double> values; // row-major, last var fastest
  };
  std::vector<int> domain_;
  /// Unary costs of variable v: unary_[unaryStart_[v] + value].
  std::vector<int> unaryStart_;
  std::vector<double> unary_;
  std::vector<Table> tables_;
};

} // namespace bm::plan

#endif // BM_PLAN_MINSUMSOLVER_H
