//===- OpSpec.cpp - the ops a step program may name -----------------------===//

#include "bmrt/OpSpec.h"

#include <algorithm>
#include <sstream>

namespace bmrt {

namespace {

/// "a b c?" -> a, b and an optional c; "inputs*" -> variadic inputs.
std::vector<OpPart> partsOf(const char *text) {
  std::vector<OpPart> parts;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    OpPart part;
    part.optional = word.back() == '?';
    part.variadic = word.back() == '*';
    if (part.optional || part.variadic)
      word.pop_back();
    part.name = word;
    parts.push_back(part);
  }
  return parts;
}

std::vector<OpSpec> readSpecs() {
  std::vector<OpSpec> specs;
#define BMRT_OP(name, operands, results, attributes)                           \
  specs.push_back(                                                             \
      {#name, partsOf(operands), partsOf(results), partsOf(attributes)});
#include "bmrt/OpSpec.def"
#undef BMRT_OP
  std::sort(specs.begin(), specs.end(),
            [](const OpSpec &a, const OpSpec &b) { return a.name < b.name; });
  return specs;
}

} // namespace

int OpSpec::fewest(const std::vector<OpPart> &parts) {
  return static_cast<int>(
      std::count_if(parts.begin(), parts.end(), [](const OpPart &p) {
        return !p.optional && !p.variadic;
      }));
}

int OpSpec::most(const std::vector<OpPart> &parts) {
  for (const OpPart &part : parts)
    if (part.variadic)
      return -1;
  return static_cast<int>(parts.size());
}

const OpPart *OpSpec::attribute(const std::string &name) const {
  for (const OpPart &part : attributes)
    if (part.name == name)
      return &part;
  return nullptr;
}

const std::vector<OpSpec> &opSpecs() {
  static const std::vector<OpSpec> specs = readSpecs();
  return specs;
}

const OpSpec *findOpSpec(const std::string &op) {
  const std::vector<OpSpec> &specs = opSpecs();
  auto it = std::lower_bound(specs.begin(), specs.end(), op,
                             [](const OpSpec &spec, const std::string &name) {
                               return spec.name < name;
                             });
  return it != specs.end() && it->name == op ? &*it : nullptr;
}

const std::vector<std::string> &stepOpNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const OpSpec &spec : opSpecs())
      all.push_back(spec.name);
    return all;
  }();
  return names;
}

bool isStepOp(const std::string &op) { return findOpSpec(op) != nullptr; }

} // namespace bmrt
