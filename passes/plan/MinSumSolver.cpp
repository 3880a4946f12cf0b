//===- MinSumSolver.cpp - exact pairwise min-sum by elimination -----------===//

#include "passes/plan/MinSumSolver.h"

#include <algorithm>
#include <cstdint>
#include <limits>

using namespace bm::plan;

MinSumSolver::MinSumSolver(std::vector<int> domainSizes)
    : domain_(std::move(domainSizes)) {
  unaryStart_.reserve(domain_.size() + 1);
  int offset = 0;
  for (int size : domain_) {
    unaryStart_.push_back(offset);
    offset += size;
  }
  unaryStart_.push_back(offset);
  unary_.assign(offset, 0.0);
}

void MinSumSolver::addUnary(int var, const std::vector<double> &costs) {
  double *own = unary_.data() + unaryStart_[var];
  for (int value = 0; value < domain_[var]; ++value)
    own[value] += costs[value];
}

void MinSumSolver::addPairwise(int varA, int varB, std::vector<double> costs) {
  if (varA < varB) {
    tables_.push_back({{varA, varB}, std::move(costs)});
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
  const int numGiven = static_cast<int>(tables_.size());
  // Tables built by elimination come after the given ones; given tables
  // are read in place.
  std::vector<Table> built;
  auto table = [&](int t) -> const Table & {
    return t < numGiven ? tables_[t] : built[t - numGiven];
  };
  std::vector<double> unary = unary_;
  std::vector<char> alive(tables_.size(), 1);
  // Tables that mention each variable (dead ones are skipped).
  std::vector<std::vector<int>> varTables(numVars);
  for (int t = 0; t < numGiven; ++t)
    for (int v : tables_[t].vars)
      varTables[v].push_back(t);
  std::vector<char> eliminated(numVars, 0);
  std::vector<int> stamp(numVars, -1);
  std::vector<int> assignment(numVars, 0);
  int stampCounter = 0;
  double constant = 0;

  // What back-substitution needs of each elimination: the eliminated
  // variable, the variables it was minimised against (its scope), and its
  // best value for each assignment of the scope, in flat pools.
  struct Step {
    int var, scopeBegin, scopeEnd, argminBegin;
  };
  std::vector<Step> steps;
  steps.reserve(numVars);
  std::vector<int> scopePool, argminPool;
  std::vector<int> scope, involved;

  // Variables and size of the table eliminating `x` would build.
  auto scopeOf = [&](int x, std::vector<int> *out) {
    ++stampCounter;
    double size = 1;
    for (int t : varTables[x]) {
      if (!alive[t])
        continue;
      for (int v : table(t).vars) {
        if (v == x || stamp[v] == stampCounter)
          continue;
        stamp[v] = stampCounter;
        size *= domain_[v];
        if (out)
          out->push_back(v);
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
    scope.clear();
    scopeOf(x, &scope);
    std::sort(scope.begin(), scope.end());
    eliminated[x] = 1;
    involved.clear();
    for (int t : varTables[x])
      if (alive[t]) {
        involved.push_back(t);
        alive[t] = 0;
      }
    const Step step{x, static_cast<int>(scopePool.size()),
                    static_cast<int>(scopePool.size() + scope.size()),
                    static_cast<int>(argminPool.size())};
    scopePool.insert(scopePool.end(), scope.begin(), scope.end());
    const size_t size = static_cast<size_t>(bestSize);
    argminPool.resize(argminPool.size() + size);
    // The message to the scope: a constant, a unary cost of its one
    // variable, or a new table.
    Table message;
    double *target = nullptr;
    if (scope.size() == 1) {
      target = unary.data() + unaryStart_[scope[0]];
    } else if (scope.size() > 1) {
      message.vars = scope;
      message.values.resize(size);
      target = message.values.data();
    }
    const double *own = unary.data() + unaryStart_[x];
    for (int v : scope)
      assignment[v] = 0;
    for (size_t index = 0; index < size; ++index) {
      double bestValue = std::numeric_limits<double>::infinity();
      int bestChoice = 0;
      for (int choice = 0; choice < domain_[x]; ++choice) {
        assignment[x] = choice;
        double sum = own[choice];
        for (int t : involved) {
          const Table &in = table(t);
          sum += in.values[tableIndex(in.vars, domain_, assignment)];
        }
        if (sum < bestValue) {
          bestValue = sum;
          bestChoice = choice;
        }
      }
      if (target)
        target[index] += bestValue;
      else
        constant += bestValue;
      argminPool[step.argminBegin + index] = bestChoice;
      for (int k = static_cast<int>(scope.size()) - 1; k >= 0; --k) {
        int v = scope[k];
        if (++assignment[v] < domain_[v])
          break;
        assignment[v] = 0;
      }
    }
    if (scope.size() > 1) {
      int id = numGiven + static_cast<int>(built.size());
      for (int v : scope)
        varTables[v].push_back(id);
      built.push_back(std::move(message));
      alive.push_back(1);
    }
    steps.push_back(step);
  }

  if (minimum)
    *minimum = constant;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    size_t index = 0;
    for (int k = it->scopeBegin; k < it->scopeEnd; ++k)
      index = index * domain_[scopePool[k]] + assignment[scopePool[k]];
    assignment[it->var] = argminPool[it->argminBegin + index];
  }
  return assignment;
}
