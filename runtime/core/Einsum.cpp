//===- Einsum.cpp - einsum equations and their contraction plan -----------===//

#include "bmrt/Einsum.h"

#include "bmrt/Error.h"

namespace bmrt::einsum {
namespace {

std::string withoutSpaces(const std::string &text) {
  std::string spec;
  for (char c : text)
    if (c != ' ')
      spec += c;
  return spec;
}

std::vector<std::string> splitInputs(const std::string &lhs) {
  std::vector<std::string> inputs;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    inputs.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      return inputs;
    start = comma + 1;
  }
}

/// numpy's implicit output: the letters used once, in ASCII order (upper
/// case before lower case, as numpy).
std::string implicitOutput(const std::vector<std::string> &inputs) {
  int uses[128] = {};
  for (const std::string &in : inputs)
    for (char c : in)
      ++uses[static_cast<unsigned char>(c) & 127];
  std::string output;
  for (int c = 0; c < 128; ++c)
    if (uses[c] == 1)
      output += static_cast<char>(c);
  return output;
}

/// The letters of `from` that satisfy `keep`, in the order of `order`
/// (every one of them must appear in `order`).
template <typename Pred>
std::string select(const std::string &from, const std::string &order,
                   Pred keep) {
  std::string selected;
  for (char c : order)
    if (has(from, c) && keep(c) && !has(selected, c))
      selected += c;
  return selected;
}

/// Elements copied to gather an operand stored as `letters` into one of
/// the two GEMM layouts `order` or `transposed` (none if it is either).
int64_t copyCost(const std::string &letters, const std::string &order,
                 const std::string &transposed, const Extents &extents) {
  if (letters == order || letters == transposed)
    return 0;
  return extentOf(order, extents);
}

/// K's order: as in the left or the right operand, whichever needs fewer
/// elements copied (each operand may be read transposed as it is).
std::string chooseK(const PairPlan &p, const std::string &left,
                    const std::string &right, const std::string &keep,
                    const Extents &extents) {
  std::string uLeft = uniqueLetters(left), uRight = uniqueLetters(right);
  auto contracted = [&](const std::string &order) {
    return select(uLeft, order,
                  [&](char c) { return has(uRight, c) && !has(keep, c); });
  };
  auto cost = [&](const std::string &k) {
    return copyCost(left, p.batch + p.m + k, p.batch + k + p.m, extents) +
           copyCost(right, p.batch + k + p.n, p.batch + p.n + k, extents);
  };
  std::string byLeft = contracted(uLeft), byRight = contracted(uRight);
  return cost(byLeft) <= cost(byRight) ? byLeft : byRight;
}

} // namespace

Equation splitEquation(const std::string &text) {
  std::string spec = withoutSpaces(text);
  size_t arrow = spec.find("->");
  Equation eq;
  eq.inputs = splitInputs(spec.substr(0, arrow));
  eq.output = arrow != std::string::npos ? spec.substr(arrow + 2)
                                         : implicitOutput(eq.inputs);
  return eq;
}

bool isLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

Equation parseEquation(const std::string &text, size_t numInputs) {
  Equation eq = splitEquation(text);
  BMRT_CHECK(eq.inputs.size() == numInputs,
             "einsum '" + text + "' names " + std::to_string(eq.inputs.size()) +
                 " inputs but has " + std::to_string(numInputs));
  for (const std::string &in : eq.inputs)
    for (char c : in)
      BMRT_CHECK(isLetter(c), "einsum '" + text + "': '" + std::string(1, c) +
                                  "' is not a letter (no ellipsis support)");
  for (char c : eq.output)
    BMRT_CHECK(isLetter(c) && eq.output.find(c) == eq.output.rfind(c),
               "einsum '" + text + "': bad output letter '" +
                   std::string(1, c) + "'");
  return eq;
}

std::vector<Operand> bindOperands(const std::string &text, const Equation &eq,
                                  const std::vector<TensorView> &inputs,
                                  Extents &extents) {
  extents.fill(0);
  std::vector<Operand> operands(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string &letters = eq.inputs[i];
    BMRT_CHECK(static_cast<int64_t>(letters.size()) == inputs[i].rank(),
               "einsum '" + text + "': input " + std::to_string(i) +
                   " has rank " + std::to_string(inputs[i].rank()));
    operands[i] = {inputs[i].f32(), letters, inputs[i].shape};
    for (size_t d = 0; d < letters.size(); ++d)
      extents[static_cast<unsigned char>(letters[d])] = inputs[i].shape[d];
  }
  for (char c : eq.output) {
    bool used = false;
    for (const std::string &in : eq.inputs)
      used |= has(in, c);
    BMRT_CHECK(used, "einsum '" + text + "': output letter '" +
                         std::string(1, c) + "' is in no input");
  }
  return operands;
}

bool has(const std::string &letters, char c) {
  return letters.find(c) != std::string::npos;
}

std::string uniqueLetters(const std::string &letters) {
  std::string unique;
  for (char c : letters)
    if (!has(unique, c))
      unique += c;
  return unique;
}

int64_t extentOf(const std::string &letters, const Extents &extents) {
  int64_t n = 1;
  for (char c : letters)
    n *= extents[static_cast<unsigned char>(c)];
  return n;
}

std::string keptAfter(const Equation &eq, size_t input) {
  std::string keep = eq.output;
  for (size_t j = input + 1; j < eq.inputs.size(); ++j)
    for (char c : uniqueLetters(eq.inputs[j]))
      if (!has(keep, c))
        keep += c;
  return keep;
}

Walk walkFor(const Operand &op, const std::string &order,
             const Extents &extents) {
  Shape strides = contiguousStrides(op.shape);
  auto axisOf = [&](char c) {
    Axis axis{extents[static_cast<unsigned char>(c)], 0};
    for (size_t d = 0; d < op.letters.size(); ++d)
      if (op.letters[d] == c)
        axis.stride += strides[d];
    return axis;
  };
  Walk walk;
  for (char c : order)
    walk.kept.push_back(axisOf(c));
  for (char c : uniqueLetters(op.letters))
    if (!has(order, c))
      walk.summed.push_back(axisOf(c));
  return walk;
}

PairPlan planPair(const std::string &a, const std::string &b,
                  const std::string &keep, bool final, const Extents &extents) {
  std::string ua = uniqueLetters(a), ub = uniqueLetters(b);
  auto inKeep = [&](char c) { return has(keep, c); };
  // Group orders: the output's order for the final step, so that the GEMM
  // can write the output in place; else the operands' own orders.
  std::string batch = select(ub, final ? keep : ua,
                             [&](char c) { return has(ua, c) && inKeep(c); });
  std::string freeA = select(ua, final ? keep : ua,
                             [&](char c) { return !has(ub, c) && inKeep(c); });
  std::string freeB = select(ub, final ? keep : ub,
                             [&](char c) { return !has(ua, c) && inKeep(c); });
  PairPlan p;
  // The output laid out [batch, freeB, freeA] is the transposed product:
  // swap the operands instead of permuting the result.
  p.swap =
      final && keep != batch + freeA + freeB && keep == batch + freeB + freeA;
  const std::string &left = p.swap ? b : a, &right = p.swap ? a : b;
  p.batch = batch;
  p.m = p.swap ? freeB : freeA;
  p.n = p.swap ? freeA : freeB;
  p.k = chooseK(p, left, right, keep, extents);
  p.transLeft = left == p.batch + p.k + p.m && !p.m.empty() && !p.k.empty();
  p.transRight = right == p.batch + p.n + p.k && !p.n.empty() && !p.k.empty();
  return p;
}

GemmShape gemmOf(const PairPlan &p, const Extents &extents) {
  GemmShape g;
  g.m = extentOf(p.m, extents);
  g.n = extentOf(p.n, extents);
  g.k = extentOf(p.k, extents);
  g.transA = p.transLeft;
  g.transB = p.transRight;
  g.lda = g.transA ? g.m : g.k;
  g.ldb = g.transB ? g.k : g.n;
  g.ldc = g.n;
  g.batch = extentOf(p.batch, extents);
  g.strideA = g.m * g.k;
  g.strideB = g.k * g.n;
  g.strideC = g.m * g.n;
  return g;
}

} // namespace bmrt::einsum
