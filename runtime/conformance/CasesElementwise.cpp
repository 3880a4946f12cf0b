//===- CasesElementwise.cpp - unary, binary, select, cast, fill -----------===//
//
// Each dtype an op accepts (program/Verify.cpp), broadcasting for the
// binary ops, inputs inside each function's domain and away from kinks
// (relu and abs at 0) and from ties (max, min) where the derivative or
// the choice would be ambiguous.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include <gtest/gtest.h>

namespace bmrt::conformance {
namespace {

const DType F32 = DType::F32, I64 = DType::I64, I32 = DType::I32,
            Bool = DType::Bool;

/// op(x) on f32[3,5,4] (60 elements, three dims: walks any stride logic).
Case unaryF32(const std::string &op, HostTensor x, Tolerance tol,
              const std::string &suffix = "") {
  Shape shape = x.shape;
  return Build(op + suffix, op).in(std::move(x)).out(shape).tol(tol);
}

/// a op b, f32: [2,3,4] with [3,1] (broadcast on both sides of b).
Case binaryBroadcast(const std::string &op, HostTensor a, HostTensor b,
                     Tolerance tol) {
  return Build(op + "_f32_broadcast", op).in(a).in(b).out({2, 3, 4}).tol(tol);
}

/// a op b for an integer type, [4,6] with [1,6].
Case binaryInts(const std::string &op, DType type, int64_t lo, int64_t hi,
                int64_t bLo, int64_t bHi, uint32_t seed) {
  std::string suffix = type == I64 ? "_i64" : "_i32";
  return Build(op + suffix, op)
      .in(randomInts(type, {4, 6}, seed, lo, hi))
      .in(randomInts(type, {1, 6}, seed + 1, bLo, bHi))
      .out(type, {4, 6});
}

/// A comparison: integer-valued operands so that ties (equal) occur.
void comparisons(std::vector<Case> &cases, const std::string &op) {
  cases.push_back(Build(op + "_bool", op)
                      .in(randomBools({3, 4}, 1))
                      .in(randomBools({3, 4}, 2))
                      .out(Bool, {3, 4}));
  cases.push_back(Build(op + "_f32_broadcast", op)
                      .in(randomInts(F32, {2, 3, 4}, 3, -2, 2))
                      .in(randomInts(F32, {3, 1}, 4, -2, 2))
                      .out(Bool, {2, 3, 4}));
  cases.push_back(Build(op + "_i32", op)
                      .in(randomInts(I32, {5, 6}, 5, -3, 3))
                      .in(randomInts(I32, {5, 6}, 6, -3, 3))
                      .out(Bool, {5, 6}));
  cases.push_back(Build(op + "_i64", op)
                      .in(randomInts(I64, {5, 6}, 7, -3, 3))
                      .in(randomInts(I64, {6}, 8, -3, 3))
                      .out(Bool, {5, 6}));
}

/// The ops with an integer form: abs, neg, relu.
void signedUnary(std::vector<Case> &cases, const std::string &op,
                 Tolerance tol) {
  cases.push_back(unaryF32(op, awayFromZero({3, 5, 4}, 11), tol, "_f32"));
  cases.push_back(Build(op + "_i32", op)
                      .in(randomInts(I32, {4, 5}, 12, -9, 9))
                      .out(I32, {4, 5}));
  cases.push_back(Build(op + "_i64", op)
                      .in(randomInts(I64, {4, 5}, 13, -9, 9))
                      .out(I64, {4, 5}));
}

/// The arithmetic binary ops: f32 broadcast, i32, i64.
void arithmetic(std::vector<Case> &cases, const std::string &op,
                Tolerance tol) {
  cases.push_back(binaryBroadcast(op, uniform({2, 3, 4}, 21),
                                  awayFromZero({3, 1}, 22, 0.25f, 2), tol));
  // Integer divisors away from 0; both signs (division truncates).
  cases.push_back(binaryInts(op, I32, -20, 20, 1, 7, 23));
  cases.push_back(binaryInts(op, I64, -20, 20, -7, -1, 25));
}

/// dy * op'(x) with x inside op's domain, away from its kinks.
Case unaryGrad(const std::string &forward, HostTensor x, bool tanh = false) {
  Shape shape = x.shape;
  Build b("unary_grad_" + forward + (tanh ? "_tanh" : ""), "unary_grad");
  b.in(std::move(x)).in(uniform(shape, 31)).out(shape).s("op", forward);
  if (tanh)
    b.i("tanh_approximation", 1);
  return b.tol(kTranscendental);
}

void expectNonNegative(const std::vector<HostTensor> &,
                       const std::vector<HostTensor> &results) {
  for (int64_t i = 0; i < results[0].size(); ++i)
    EXPECT_GE(results[0].at(i), 0) << "element " << i;
}

} // namespace

std::vector<Case> elementwiseCases() {
  std::vector<Case> cases;
  signedUnary(cases, "abs", kExact);
  arithmetic(cases, "add", kArithmetic);
  cases.push_back(Build("and_broadcast", "and")
                      .in(randomBools({2, 3, 4}, 41))
                      .in(randomBools({3, 1}, 42))
                      .out(Bool, {2, 3, 4}));
  cases.push_back(Build("cast_bool_to_f32", "cast")
                      .in(randomBools({4, 5}, 43))
                      .out(F32, {4, 5}));
  // Away from integers: truncation toward zero is the only rounding.
  cases.push_back(Build("cast_f32_to_bool", "cast")
                      .in(randomInts(F32, {4, 5}, 44, -2, 2))
                      .out(Bool, {4, 5}));
  cases.push_back(Build("cast_f32_to_i64", "cast")
                      .in(awayFromZero({4, 5}, 45, 0.2f, 50))
                      .out(I64, {4, 5}));
  cases.push_back(Build("cast_i32_to_i64", "cast")
                      .in(randomInts(I32, {4, 5}, 46, -1000, 1000))
                      .out(I64, {4, 5}));
  cases.push_back(Build("cast_i64_to_f32", "cast")
                      .in(randomInts(I64, {4, 5}, 47, -1000, 1000))
                      .out(F32, {4, 5}));
  cases.push_back(unaryF32("cos", uniform({3, 5, 4}, 48, -4, 4),
                           kTranscendental));
  arithmetic(cases, "div", kArithmetic);
  comparisons(cases, "equal");
  cases.push_back(unaryF32("erf", uniform({3, 5, 4}, 49, -3, 3),
                           kTranscendental));
  cases.push_back(unaryF32("exp", uniform({3, 5, 4}, 50, -5, 5),
                           kTranscendental));
  cases.push_back(Build("fill_f32", "fill").f("value", 1.5).out({3, 4}));
  cases.push_back(Build("fill_i64", "fill").f("value", -7).out(I64, {5}));
  cases.push_back(unaryF32("gelu", uniform({3, 5, 4}, 51, -3, 3),
                           kTranscendental, "_erf"));
  cases.push_back(Build("gelu_tanh", "gelu")
                      .in(uniform({3, 5, 4}, 52, -3, 3))
                      .out({3, 5, 4})
                      .i("tanh_approximation", 1)
                      .tol(kTranscendental));
  comparisons(cases, "greater");
  cases.push_back(Build("iota_f32", "iota")
                      .f("start", -2.5)
                      .f("delta", 0.5)
                      .out({11})
                      .tol(kArithmetic));
  cases.push_back(
      Build("iota_i64", "iota").f("start", 3).f("delta", 2).out(I64, {9}));
  comparisons(cases, "less");
  cases.push_back(unaryF32("log", uniform({3, 5, 4}, 53, 0.05f, 10),
                           kTranscendental));
  // Continuous random operands: no ties between a and b.
  arithmetic(cases, "max", kExact);
  arithmetic(cases, "min", kExact);
  arithmetic(cases, "mul", kArithmetic);
  signedUnary(cases, "neg", kExact);
  cases.push_back(
      Build("not", "not").in(randomBools({3, 7}, 54)).out(Bool, {3, 7}));
  cases.push_back(Build("or_broadcast", "or")
                      .in(randomBools({4, 1}, 55))
                      .in(randomBools({3}, 56))
                      .out(Bool, {4, 3}));
  cases.push_back(Build("pow_f32_broadcast", "pow")
                      .in(uniform({2, 3, 4}, 57, 0.5f, 2))
                      .in(uniform({3, 1}, 58, -2, 2))
                      .out({2, 3, 4})
                      .tol(kTranscendental));
  cases.push_back(binaryInts("pow", I32, -4, 4, 0, 3, 59));
  cases.push_back(binaryInts("pow", I64, -4, 4, 0, 3, 61));
  cases.push_back(unaryF32("reciprocal", awayFromZero({3, 5, 4}, 63, 0.1f, 4),
                           kTranscendental));
  signedUnary(cases, "relu", kExact);
  cases.back().invariant = expectNonNegative;
  cases.push_back(unaryF32("sigmoid", uniform({3, 5, 4}, 64, -6, 6),
                           kTranscendental));
  cases.push_back(unaryF32("sin", uniform({3, 5, 4}, 65, -4, 4),
                           kTranscendental));
  cases.push_back(unaryF32("sqrt", uniform({3, 5, 4}, 66, 0.01f, 9),
                           kTranscendental));
  arithmetic(cases, "sub", kArithmetic);
  cases.push_back(unaryF32("tanh", uniform({3, 5, 4}, 67, -4, 4),
                           kTranscendental));
  cases.push_back(unaryGrad("abs", awayFromZero({4, 6}, 71)));
  cases.push_back(unaryGrad("cos", uniform({4, 6}, 72, -4, 4)));
  cases.push_back(unaryGrad("erf", uniform({4, 6}, 73, -3, 3)));
  cases.push_back(unaryGrad("exp", uniform({4, 6}, 74, -3, 3)));
  cases.push_back(unaryGrad("gelu", uniform({4, 6}, 75, -3, 3)));
  cases.push_back(unaryGrad("gelu", uniform({4, 6}, 76, -3, 3), true));
  cases.push_back(unaryGrad("log", uniform({4, 6}, 77, 0.1f, 5)));
  cases.push_back(unaryGrad("neg", uniform({4, 6}, 78)));
  cases.push_back(unaryGrad("reciprocal", awayFromZero({4, 6}, 79, 0.2f, 3)));
  cases.push_back(unaryGrad("relu", awayFromZero({4, 6}, 80)));
  cases.push_back(unaryGrad("sigmoid", uniform({4, 6}, 81, -5, 5)));
  cases.push_back(unaryGrad("sin", uniform({4, 6}, 82, -4, 4)));
  cases.push_back(unaryGrad("sqrt", uniform({4, 6}, 83, 0.1f, 5)));
  cases.push_back(unaryGrad("tanh", uniform({4, 6}, 84, -3, 3)));
  cases.push_back(Build("where_f32_broadcast", "where")
                      .in(randomBools({2, 1, 4}, 85))
                      .in(uniform({3, 4}, 86))
                      .in(uniform({2, 3, 1}, 87))
                      .out({2, 3, 4}));
  cases.push_back(Build("where_i64", "where")
                      .in(randomBools({5}, 88))
                      .in(randomInts(I64, {5}, 89, -9, 9))
                      .in(randomInts(I64, {1}, 90, -9, 9))
                      .out(I64, {5}));
  return cases;
}

} // namespace bmrt::conformance
