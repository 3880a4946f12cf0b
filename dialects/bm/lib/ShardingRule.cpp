//===- ShardingRule.cpp - printing sharding rules -------------------------===//

#include "bm/ShardingRule.h"

#include <sstream>

namespace bm {

/// Factor names: i, j, k, ..., z, then z1, z2, ... (as Shardy prints them).
static std::string factorName(int f) {
  if (f < 18)
    return std::string(1, static_cast<char>('i' + f));
  return "z" + std::to_string(f - 17);
}

static void printTensor(std::ostringstream &os, const TensorFactors &dims) {
  os << "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d)
      os << ", ";
    const DimFactors &factors = dims[d];
    if (factors.size() == 1) {
      os << factorName(factors[0]);
      continue;
    }
    os << "{";
    for (size_t k = 0; k < factors.size(); ++k)
      os << (k ? ", " : "") << factorName(factors[k]);
    os << "}";
  }
  os << "]";
}

std::string ShardingRule::str() const {
  std::ostringstream os;
  auto printList = [&](const std::vector<TensorFactors> &tensors) {
    os << "(";
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (t)
        os << ", ";
      printTensor(os, tensors[t]);
    }
    os << ")";
  };
  printList(operandFactors);
  os << " -> ";
  printList(resultFactors);
  os << " {";
  for (int f = 0; f < numFactors(); ++f)
    os << (f ? ", " : "") << factorName(f) << "=" << factorSizes[f];
  os << "}";
  auto printKind = [&](FactorKind kind, const char *label) {
    std::string names;
    for (int f = 0; f < numFactors(); ++f)
      if (factorKinds[f] == kind)
        names += (names.empty() ? "" : ", ") + factorName(f);
    if (!names.empty())
      os << " " << label << "={" << names << "}";
  };
  printKind(FactorKind::Reduction, "reduction");
  printKind(FactorKind::NeedReplication, "need_replication");
  return os.str();
}

} // namespace bm
