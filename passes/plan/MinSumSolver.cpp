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

/// One run of variable elimination over a solver's problem: the greedy
/// order, the messages each elimination sends to its scope, and the
/// back-substitution of the best values.
class MinSumSolver::Elimination {
public:
  explicit Elimination(const MinSumSolver &solver)
      : solver_(solver), domain_(solver.domain_),
        numGiven_(static_cast<int>(solver.tables_.size())),
        unary_(solver.unary_), alive_(solver.tables_.size(), 1),
        varTables_(domain_.size()), eliminated_(domain_.size(), 0),
        stamp_(domain_.size(), -1), assignment_(domain_.size(), 0) {
    for (int t = 0; t < numGiven_; ++t)
      for (int v : solver.tables_[t].vars)
        varTables_[v].push_back(t);
    steps_.reserve(domain_.size());
  }

  std::vector<int> run(double *minimum) {
    for (size_t round = 0; round < domain_.size(); ++round) {
      auto [x, size] = pickVariable();
      eliminate(x, size);
    }
    if (minimum)
      *minimum = constant_;
    backSubstitute();
    return assignment_;
  }

private:
  /// What back-substitution needs of each elimination: the eliminated
  /// variable, the variables it was minimised against (its scope), and its
  /// best value for each assignment of the scope, in flat pools.
  struct Step {
    int var, scopeBegin, scopeEnd, argminBegin;
  };

  // Tables built by elimination come after the given ones; given tables
  // are read in place.
  const Table &table(int t) const {
    return t < numGiven_ ? solver_.tables_[t] : built_[t - numGiven_];
  }

  /// Variables (into `out`, when given) and size of the table eliminating
  /// `x` would build (dead tables are skipped).
  double scopeOf(int x, std::vector<int> *out) {
    ++stampCounter_;
    double size = 1;
    for (int t : varTables_[x]) {
      if (!alive_[t])
        continue;
      for (int v : table(t).vars) {
        if (v == x || stamp_[v] == stampCounter_)
          continue;
        stamp_[v] = stampCounter_;
        size *= domain_[v];
        if (out)
          out->push_back(v);
      }
    }
    return size;
  }

  /// Greedy order: the variable whose elimination builds the smallest
  /// table, lowest index on ties.
  std::pair<int, double> pickVariable() {
    int x = -1;
    double bestSize = std::numeric_limits<double>::infinity();
    for (int v = 0; v < static_cast<int>(domain_.size()); ++v) {
      if (eliminated_[v])
        continue;
      double size = scopeOf(v, nullptr);
      if (size < bestSize) {
        bestSize = size;
        x = v;
        if (size == 1)
          break;
      }
    }
    return {x, bestSize};
  }

  /// Minimises `x` out of the tables that mention it; the message to its
  /// scope is a constant, a unary cost of its one variable, or a new table.
  void eliminate(int x, double tableSize) {
    scope_.clear();
    scopeOf(x, &scope_);
    std::sort(scope_.begin(), scope_.end());
    eliminated_[x] = 1;
    involved_.clear();
    for (int t : varTables_[x])
      if (alive_[t]) {
        involved_.push_back(t);
        alive_[t] = 0;
      }
    const Step step{x, static_cast<int>(scopePool_.size()),
                    static_cast<int>(scopePool_.size() + scope_.size()),
                    static_cast<int>(argminPool_.size())};
    scopePool_.insert(scopePool_.end(), scope_.begin(), scope_.end());
    const size_t size = static_cast<size_t>(tableSize);
    argminPool_.resize(argminPool_.size() + size);
    Table message;
    double *target = nullptr;
    if (scope_.size() == 1) {
      target = unary_.data() + solver_.unaryStart_[scope_[0]];
    } else if (scope_.size() > 1) {
      message.vars = scope_;
      message.values.resize(size);
      target = message.values.data();
    }
    minimiseOver(x, size, target, argminPool_.data() + step.argminBegin);
    if (scope_.size() > 1) {
      int id = numGiven_ + static_cast<int>(built_.size());
      for (int v : scope_)
        varTables_[v].push_back(id);
      built_.push_back(std::move(message));
      alive_.push_back(1);
    }
    steps_.push_back(step);
  }

  /// For each of the `size` assignments of the scope, in row-major order:
  /// the least sum over the values of `x` into `target` (or the constant,
  /// for an empty scope) and the value that gives it into `argmin`.
  void minimiseOver(int x, size_t size, double *target, int *argmin) {
    const double *own = unary_.data() + solver_.unaryStart_[x];
    for (int v : scope_)
      assignment_[v] = 0;
    for (size_t index = 0; index < size; ++index) {
      double bestValue = std::numeric_limits<double>::infinity();
      int bestChoice = 0;
      for (int choice = 0; choice < domain_[x]; ++choice) {
        assignment_[x] = choice;
        double sum = own[choice];
        for (int t : involved_) {
          const Table &in = table(t);
          sum += in.values[tableIndex(in.vars, domain_, assignment_)];
        }
        if (sum < bestValue) {
          bestValue = sum;
          bestChoice = choice;
        }
      }
      if (target)
        target[index] += bestValue;
      else
        constant_ += bestValue;
      argmin[index] = bestChoice;
      for (int k = static_cast<int>(scope_.size()) - 1; k >= 0; --k) {
        int v = scope_[k];
        if (++assignment_[v] < domain_[v])
          break;
        assignment_[v] = 0;
      }
    }
  }

  void backSubstitute() {
    for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
      size_t index = 0;
      for (int k = it->scopeBegin; k < it->scopeEnd; ++k)
        index = index * domain_[scopePool_[k]] + assignment_[scopePool_[k]];
      assignment_[it->var] = argminPool_[it->argminBegin + index];
    }
  }

  const MinSumSolver &solver_;
  const std::vector<int> &domain_;
  const int numGiven_;
  std::vector<Table> built_;
  std::vector<double> unary_;
  std::vector<char> alive_;
  /// Tables that mention each variable (dead ones are skipped).
  std::vector<std::vector<int>> varTables_;
  std::vector<char> eliminated_;
  std::vector<int> stamp_;
  std::vector<int> assignment_;
  int stampCounter_ = 0;
  double constant_ = 0;
  std::vector<Step> steps_;
  std::vector<int> scopePool_, argminPool_;
  std::vector<int> scope_, involved_;
};

std::vector<int> MinSumSolver::solve(double *minimum) const {
  return Elimination(*this).run(minimum);
}
