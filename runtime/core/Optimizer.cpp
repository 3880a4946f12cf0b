//===- Optimizer.cpp - optimizer names and the layer-wise ratios ----------===//

#include "bmrt/Optimizer.h"

#include <cmath>

namespace bmrt {

bool parseOptimizer(const std::string &name, OptimizerKind &kind) {
  for (OptimizerKind k : {OptimizerKind::AdamW, OptimizerKind::Sgd,
                          OptimizerKind::Lamb, OptimizerKind::Lars})
    if (name == nameOf(k)) {
      kind = k;
      return true;
    }
  return false;
}

const char *nameOf(OptimizerKind kind) {
  switch (kind) {
  case OptimizerKind::AdamW:
    return "adamw";
  case OptimizerKind::Sgd:
    return "sgd";
  case OptimizerKind::Lamb:
    return "lamb";
  case OptimizerKind::Lars:
    return "lars";
  }
  return "?";
}

bool hasSecondMoment(OptimizerKind kind) {
  return kind == OptimizerKind::AdamW || kind == OptimizerKind::Lamb;
}

// A zero norm (a tensor initialised to zeros, such as a bias, or a step
// with no gradient) would make the ratio 0 or infinite: both papers'
// implementations fall back to 1 there, the plain optimizer's step.
double lambTrustRatio(double paramSquares, double updateSquares) {
  if (paramSquares <= 0 || updateSquares <= 0)
    return 1.0;
  return std::sqrt(paramSquares) / std::sqrt(updateSquares);
}

double larsLocalRate(const LarsConfig &config, double paramSquares,
                     double gradSquares) {
  if (paramSquares <= 0 || gradSquares <= 0)
    return 1.0;
  double param = std::sqrt(paramSquares);
  return config.trustCoefficient * param /
         (std::sqrt(gradSquares) + config.weightDecay * param);
}

} // namespace bmrt
