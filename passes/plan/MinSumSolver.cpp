//===- MinSumSolver.cpp - exact pairwise min-sum by elimination -----------===//

#include "passes/plan/MinSumSolver.h"

#include <algorithm>
#include <cstdint>
#include <limits>

using namespace bm::plan;

MinSumSolver::MinSumSolver(std::vector<int> domainSizes)
    : domain_(std::move(domainSizes)) {}

void MinSumSolver::addUnary(int var, const std::vector<double> &costs) {
  tables_.push_back({{var}, costs});
}

void MinSumSolver::addPairwise(int varA, int varB,
                               const std::vector<double> &costs) {
  if (varA < varB) {
    tables_.push_back({{varA, varB}, costs});
    return;
  }
  // Store with ascending variables: transpose.
  const int sizeA = domain_[varA], sizeB = domain_[varB];
  std::vector<double> transposed(costs.size());
  for (int a = 0; a < sizeA; ++a)
    for (int b = 0; b < sizeB; ++b)
      transposed[b * sizeA + a] = costs[a * sizeB + b];
  tables_.push_back({{varB, varA}, std::move(transposed)});
}

namespace {
struct Step {
  int var;
  std::vector<int> scope;
  std::vector<int> argmin;
};
} // namespace

/// Row-major index of the current assignment in a table over `vars`.
static size_t tableIndex(const std::vector<int> &vars,
                         const std::vector<int> &domain,
                         const std::vector<int> &assignment) {
  size_t index = 0;
  for (int v : vars)
    index = index * domain[v] + assignment[v];
  return index;
}

std::vector<int> MinSumSolver::solve(double *minimum) const {
  const int numVars = static_cast<int>(domain_.size());
  std::vector<Table> tables = tables_;
  std::vector<char> alive(tables.size(), 1);
  // Tables that mention each variable (dead ones are skipped).
  std::vector<std::vector<int>> varTables(numVars);
  for (size_t t = 0; t < tables.size(); ++t)
    for (int v : tables[t].vars)
      varTables[v].push_back(static_cast<int>(t));
  std::vector<char> eliminated(numVars, 0);
  std::vector<int> stamp(numVars, -1);
  std::vector<Step> steps;
  steps.reserve(numVars);
  std::vector<int> assignment(numVars, 0);
  int stampCounter = 0;

  // Variables and size of the table eliminating `x` would build.
  auto scopeOf = [&](int x, std::vector<int> *scope) {
    ++stampCounter;
    double size = 1;
    for (int t : varTables[x]) {
      if (!alive[t])
        continue;
      for (int v : tables[t].vars) {
        if (v == x || stamp[v] == stampCounter)
          continue;
        stamp[v] = stampCounter;
        size *= domain_[v];
        if (scope)
          scope->push_back(v);
      }
    }
    return size;
  };

  for (int round = 0; round < numVars; ++round) {
    // Greedy order: the variable whose elimination builds the smallest
    // table, lowest index on ties.
    int x = -1;
    double bestSize = std::numeric_limits<double>::infinity();
    for (int v = 0; v < numVars; ++v) {
      if (eliminated[v])
        continue;
      double size = scopeOf(v, nullptr);
      if (size < bestSize) {
        bestSize = size;
        x = v;
        if (size == 1)
          break;
      }
    }
    std::vector<int> scope;
    scopeOf(x, &scope);
    std::sort(scope.begin(), scope.end());
    eliminated[x] = 1;
    std::vector<int> involved;
    for (int t : varTables[x])
      if (alive[t]) {
        involved.push_back(t);
        alive[t] = 0;
      }
    Table reduced;
    reduced.vars = scope;
    Step step{x, scope, {}};
    size_t size = static_cast<size_t>(bestSize);
    reduced.values.resize(size);
    step.argmin.resize(size);
    for (int v : scope)
      assignment[v] = 0;
    for (size_t index = 0; index < size; ++index) {
      double bestValue = std::numeric_limits<double>::infinity();
      int bestChoice = 0;
      for (int choice = 0; choice < domain_[x]; ++choice) {
        assignment[x] = choice;
        double sum = 0;
        for (int t : involved)
          sum += tables[t].values[tableIndex(tables[t].vars, domain_,
                                             assignment)];
        if (sum < bestValue) {
          bestValue = sum;
          bestChoice = choice;
        }
      }
      reduced.values[index] = bestValue;
      step.argmin[index] = bestChoice;
      for (int k = static_cast<int>(scope.size()) - 1; k >= 0; --k) {
        int v = scope[k];
        if (++assignment[v] < domain_[v])
          break;
        assignment[v] = 0;
      }
    }
    int id = static_cast<int>(tables.size());
    for (int v : scope)
      varTables[v].push_back(id);
    tables.push_back(std::move(reduced));
    alive.push_back(1);
    steps.push_back(std::move(step));
  }

  double total = 0;
  for (size_t t = 0; t < tables.size(); ++t)
    if (alive[t] && !tables[t].values.empty())
      total += tables[t].values[0];
  if (minimum)
    *minimum = total;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    assignment[it->var] =
        it->argmin[tableIndex(it->scope, domain_, assignment)];
  return assignment;
}
