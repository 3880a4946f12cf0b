//===- MinSumSolverTest.cpp - exactness of the elimination solver ---------===//

#include "passes/plan/MinSumSolver.h"

#include "gtest/gtest.h"

#include <functional>
#include <limits>
#include <random>

using namespace bm::plan;

namespace {

struct Problem {
  std::vector<int> domains;
  std::vector<std::vector<double>> unary;
  std::vector<std::tuple<int, int, std::vector<double>>> pairwise;

  double cost(const std::vector<int> &x) const {
    double total = 0;
    for (size_t v = 0; v < domains.size(); ++v)
      total += unary[v][x[v]];
    for (const auto &[a, b, table] : pairwise)
      total += table[x[a] * domains[b] + x[b]];
    return total;
  }
};

double bruteForce(const Problem &p) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> x(p.domains.size(), 0);
  std::function<void(size_t)> visit = [&](size_t v) {
    if (v == x.size()) {
      best = std::min(best, p.cost(x));
      return;
    }
    for (x[v] = 0; x[v] < p.domains[v]; ++x[v])
      visit(v + 1);
  };
  visit(0);
  return best;
}

TEST(MinSumSolverTest, MatchesBruteForceOnRandomGraphs) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> uniform(0, 10);
  for (int trial = 0; trial < 200; ++trial) {
    Problem p;
    int n = 2 + trial % 7;
    for (int v = 0; v < n; ++v) {
      p.domains.push_back(1 + static_cast<int>(random() % 4));
      std::vector<double> costs;
      for (int s = 0; s < p.domains.back(); ++s)
        costs.push_back(uniform(random));
      p.unary.push_back(costs);
    }
    // A chain plus random extra edges (skip connections, diamonds).
    for (int v = 1; v < n; ++v) {
      int u = trial % 3 == 0 ? static_cast<int>(random() % v) : v - 1;
      for (int extra = 0; extra < 1 + (trial % 2); ++extra) {
        std::vector<double> table;
        for (int a = 0; a < p.domains[u] * p.domains[v]; ++a)
          table.push_back(uniform(random));
        p.pairwise.push_back({u, v, table});
        u = static_cast<int>(random() % v);
      }
    }
    MinSumSolver solver(p.domains);
    for (int v = 0; v < n; ++v)
      solver.addUnary(v, p.unary[v]);
    // Half the pairs are given the other way round, their table transposed.
    for (const auto &[a, b, table] : p.pairwise) {
      if (random() % 2 == 0) {
        solver.addPairwise(a, b, table);
        continue;
      }
      std::vector<double> transposed(table.size());
      for (int i = 0; i < p.domains[a]; ++i)
        for (int j = 0; j < p.domains[b]; ++j)
          transposed[j * p.domains[a] + i] = table[i * p.domains[b] + j];
      solver.addPairwise(b, a, transposed);
    }
    double minimum = 0;
    std::vector<int> x = solver.solve(&minimum);
    double expected = bruteForce(p);
    EXPECT_NEAR(minimum, expected, 1e-9) << "trial " << trial;
    EXPECT_NEAR(p.cost(x), expected, 1e-9) << "trial " << trial;
  }
}

TEST(MinSumSolverTest, PairwiseArgumentOrderDoesNotMatter) {
  MinSumSolver forward({2, 3}), backward({2, 3});
  // cost(a, b) = 10 unless a == 1 and b == 0: entry 3 of the [a][b] table,
  // entry 1 of the same costs as a [b][a] table (a transposition error
  // would land elsewhere).
  forward.addPairwise(0, 1, {10, 10, 10, 0, 10, 10});
  backward.addPairwise(1, 0, {10, 0, 10, 10, 10, 10});
  EXPECT_EQ(forward.solve(), (std::vector<int>{1, 0}));
  EXPECT_EQ(backward.solve(), (std::vector<int>{1, 0}));
}

// Variables without pairwise tables, and unary costs given twice (they add
// up): the minimum is the sum of the per-variable minima.
TEST(MinSumSolverTest, UnaryCostsAddUpAndIsolatedVariablesSolve) {
  MinSumSolver solver({3, 2, 1});
  solver.addUnary(0, {5, 1, 4});
  solver.addUnary(0, {0, 3, 0}); // now {5, 4, 4}: ties go to the lower value
  solver.addUnary(1, {2, -1});
  solver.addUnary(2, {7});
  double minimum = 0;
  EXPECT_EQ(solver.solve(&minimum), (std::vector<int>{1, 1, 0}));
  EXPECT_DOUBLE_EQ(minimum, 4 - 1 + 7);
}

} // namespace
