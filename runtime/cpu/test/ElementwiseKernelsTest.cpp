//===- ElementwiseKernelsTest.cpp - unary, binary, where, cast, copy, fill ===//

#include "KernelTestSupport.h"

#include "bmrt/Error.h"

#include <cmath>
#include <string>

using namespace bmrt;
using namespace bmrt::cpu;
using namespace bmrt::test;

namespace {

/// The element of a tensor of `shape` that numpy broadcasting reads for
/// element `index` of `out` (a reference, independent of the kernels').
int64_t broadcastSource(int64_t index, const Shape &out, const Shape &shape) {
  int64_t source = 0, stride = 1;
  int64_t shift = static_cast<int64_t>(out.size() - shape.size());
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    int64_t i = index % out[d];
    index /= out[d];
    if (d < shift)
      continue;
    int64_t size = shape[d - shift];
    source += (size == 1 ? 0 : i) * stride;
    stride *= size;
  }
  return source;
}

Owned runUnary(UnaryOp op, const Owned &x) {
  Owned y(x.view.dtype, x.view.shape);
  unary(cpuStream(), op, x.view, y.view);
  return y;
}

Owned runBinary(BinaryOp op, const Owned &a, const Owned &b, Shape shape,
                DType dtype) {
  Owned out(dtype, std::move(shape));
  binary(cpuStream(), op, a.view, b.view, out.view);
  return out;
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

TEST(Unary, HandComputedF32Values) {
  Owned x = f32({4}, {-1.f, 0.f, 0.5f, 2.f});
  expectFloats(runUnary(UnaryOp::Relu, x), {0.f, 0.f, 0.5f, 2.f});
  expectFloats(runUnary(UnaryOp::Abs, x), {1.f, 0.f, 0.5f, 2.f});
  expectFloats(runUnary(UnaryOp::Neg, x), {1.f, 0.f, -0.5f, -2.f});
  // Phi(1) = 0.841344746, Phi(-1) = 0.158655254, Phi(2) = 0.977249868.
  expectFloats(runUnary(UnaryOp::Gelu, x),
               {-0.158655254f, 0.f, 0.5f * 0.691462461f, 2.f * 0.977249868f},
               1e-5f);
  // 0.5 x (1 + tanh(0.797884561 (x + 0.044715 x^3))) by hand at x = -1, 2.
  expectFloats(runUnary(UnaryOp::GeluTanh, f32({2}, {-1.f, 2.f})),
               {-0.158808009f, 1.954597694f}, 1e-5f);
  expectFloats(runUnary(UnaryOp::Sigmoid, x),
               {0.268941421f, 0.5f, 0.622459331f, 0.880797078f}, 1e-6f);
  expectFloats(runUnary(UnaryOp::Tanh, x),
               {-0.761594156f, 0.f, 0.462117157f, 0.964027580f}, 1e-6f);
  expectFloats(runUnary(UnaryOp::Erf, x),
               {-0.842700793f, 0.f, 0.520499878f, 0.995322265f}, 1e-6f);
  Owned positive = f32({3}, {0.25f, 1.f, 4.f});
  expectFloats(runUnary(UnaryOp::Sqrt, positive), {0.5f, 1.f, 2.f});
  expectFloats(runUnary(UnaryOp::Reciprocal, positive), {4.f, 1.f, 0.25f});
  expectFloats(runUnary(UnaryOp::Log, positive),
               {-1.386294361f, 0.f, 1.386294361f}, 1e-6f);
  expectFloats(runUnary(UnaryOp::Exp, positive),
               {1.284025417f, 2.718281828f, 54.59815003f}, 1e-6f);
  expectFloats(runUnary(UnaryOp::Sin, positive),
               {0.247403959f, 0.841470985f, -0.756802495f}, 1e-6f);
  expectFloats(runUnary(UnaryOp::Cos, positive),
               {0.968912422f, 0.540302306f, -0.653643621f}, 1e-6f);
}

TEST(Unary, SigmoidSaturatesWithoutNaN) {
  expectFloats(runUnary(UnaryOp::Sigmoid, f32({2}, {-200.f, 200.f})),
               {0.f, 1.f});
}

TEST(Unary, IntegerAndBool) {
  Owned x = i64({4}, {-3, 0, 5, -1});
  EXPECT_EQ(intsOf(runUnary(UnaryOp::Abs, x)),
            (std::vector<int64_t>{3, 0, 5, 1}));
  EXPECT_EQ(intsOf(runUnary(UnaryOp::Neg, x)),
            (std::vector<int64_t>{3, 0, -5, 1}));
  EXPECT_EQ(intsOf(runUnary(UnaryOp::Relu, x)),
            (std::vector<int64_t>{0, 0, 5, 0}));
  EXPECT_EQ(boolsOf(runUnary(UnaryOp::Not, bools({3}, {1, 0, 1}))),
            (std::vector<uint8_t>{0, 1, 0}));
}

TEST(Unary, LargeTensorMatchesReferenceOnEveryThread) {
  // Above the parallel threshold, so the chunks of forEachChunk are used.
  Owned x = randomF32({3, 70001}, 1, -3.f, 3.f);
  Owned y = runUnary(UnaryOp::Tanh, x);
  for (int64_t k = 0; k < x.size(); ++k)
    ASSERT_FLOAT_EQ(y.f(k), std::tanh(x.f(k))) << k;
}

TEST(Unary, WrongDtypeThrows) {
  EXPECT_THROW(runUnary(UnaryOp::Exp, i64({1}, {1})), Error);
  EXPECT_THROW(runUnary(UnaryOp::Not, f32({1}, {1.f})), Error);
}

//===----------------------------------------------------------------------===//
// Unary gradients
//===----------------------------------------------------------------------===//

/// Inputs in [lo, hi) whose magnitude is at least 0.2, so that no central
/// difference (h = 1e-2) straddles the kink of abs or relu at 0.
Owned inputsAwayFromZero(Shape shape, unsigned seed, float lo, float hi) {
  Owned x = randomF32(std::move(shape), seed, lo, hi);
  for (int64_t k = 0; k < x.size(); ++k)
    if (std::fabs(x.f(k)) < 0.2f)
      x.f(k) = x.f(k) < 0 ? -0.2f - x.f(k) : 0.2f + x.f(k);
  return x;
}

void checkUnaryGrad(UnaryOp op, const Owned &x) {
  SCOPED_TRACE(static_cast<int>(op));
  Owned weights = randomF32(x.view.shape, 7);
  Owned dx(DType::F32, x.view.shape);
  unaryGrad(cpuStream(), op, x.view, weights.view, dx.view);
  // Default tolerance (2e-3 relative): every derivative here is smooth on
  // the sampled range, and the difference's error is dominated by fp32
  // rounding of the forward values (about 1e-7 / h = 1e-5) plus the
  // h^2 f''' / 6 truncation, at most ~1e-3 for reciprocal at x = 0.5.
  expectGradientMatches([&](const Owned &in) { return runUnary(op, in); }, x,
                        weights, dx);
}

TEST(UnaryGrad, MatchesFiniteDifferencesForEveryOp) {
  Owned anywhere = inputsAwayFromZero({3, 5}, 3, -2.f, 2.f);
  Owned positive = randomF32({3, 5}, 4, 0.5f, 2.f);
  for (UnaryOp op :
       {UnaryOp::Abs, UnaryOp::Cos, UnaryOp::Erf, UnaryOp::Exp, UnaryOp::Gelu,
        UnaryOp::GeluTanh, UnaryOp::Neg, UnaryOp::Relu, UnaryOp::Sigmoid,
        UnaryOp::Sin, UnaryOp::Tanh})
    checkUnaryGrad(op, anywhere);
  for (UnaryOp op : {UnaryOp::Log, UnaryOp::Reciprocal, UnaryOp::Sqrt})
    checkUnaryGrad(op, positive);
}

TEST(UnaryGrad, AbsAndReluAreZeroAtZero) {
  Owned x = f32({3}, {0.f, -1.f, 1.f});
  Owned dy = f32({3}, {5.f, 5.f, 5.f});
  Owned dx(DType::F32, {3});
  unaryGrad(cpuStream(), UnaryOp::Abs, x.view, dy.view, dx.view);
  expectFloats(dx, {0.f, -5.f, 5.f});
  unaryGrad(cpuStream(), UnaryOp::Relu, x.view, dy.view, dx.view);
  expectFloats(dx, {0.f, 0.f, 5.f});
}

TEST(UnaryGrad, NotHasNoGradient) {
  Owned x = f32({1}, {1.f}), dx(DType::F32, {1});
  EXPECT_THROW(unaryGrad(cpuStream(), UnaryOp::Not, x.view, x.view, dx.view),
               Error);
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

TEST(Binary, RowPlusVector) {
  Owned a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Owned b = f32({3}, {10, 20, 30});
  expectFloats(runBinary(BinaryOp::Add, a, b, {2, 3}, DType::F32),
               {11, 22, 33, 14, 25, 36});
  // The stretched operand on the left.
  expectFloats(runBinary(BinaryOp::Sub, b, a, {2, 3}, DType::F32),
               {9, 18, 27, 6, 15, 24});
}

TEST(Binary, BothOperandsStretched) {
  // [2,1,4] * [3,1] -> [2,3,4]: a stretched along dim 1, b along dims 0, 2.
  Owned a = randomF32({2, 1, 4}, 11);
  Owned b = randomF32({3, 1}, 12);
  Owned out = runBinary(BinaryOp::Mul, a, b, {2, 3, 4}, DType::F32);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_FLOAT_EQ(out.f((i * 3 + j) * 4 + k), a.f(i * 4 + k) * b.f(j));
}

TEST(Binary, ScalarOperands) {
  Owned scalar = f32({}, {2.f});
  Owned x = f32({3}, {1, 4, 8});
  expectFloats(runBinary(BinaryOp::Div, x, scalar, {3}, DType::F32),
               {0.5f, 2.f, 4.f});
  expectFloats(runBinary(BinaryOp::Div, scalar, x, {3}, DType::F32),
               {2.f, 0.5f, 0.25f});
  expectFloats(runBinary(BinaryOp::Pow, x, scalar, {3}, DType::F32),
               {1.f, 16.f, 64.f});
  expectFloats(runBinary(BinaryOp::Add, scalar, scalar, {}, DType::F32), {4.f});
}

TEST(Binary, MaxMinAndNaN) {
  Owned a = f32({3}, {1.f, 5.f, NAN});
  Owned b = f32({3}, {2.f, 3.f, 0.f});
  Owned max = runBinary(BinaryOp::Max, a, b, {3}, DType::F32);
  Owned min = runBinary(BinaryOp::Min, a, b, {3}, DType::F32);
  EXPECT_EQ(max.f(0), 2.f);
  EXPECT_EQ(max.f(1), 5.f);
  EXPECT_TRUE(std::isnan(max.f(2)));
  EXPECT_EQ(min.f(0), 1.f);
  EXPECT_EQ(min.f(1), 3.f);
  EXPECT_TRUE(std::isnan(min.f(2)));
}

TEST(Binary, IntegerArithmetic) {
  Owned a = i64({2, 2}, {7, -7, 9, 1});
  Owned b = i64({2}, {2, -2});
  // Division truncates toward zero: -7 / -2 = 3, 9 / 2 = 4, 1 / -2 = 0.
  EXPECT_EQ(intsOf(runBinary(BinaryOp::Div, a, b, {2, 2}, DType::I64)),
            (std::vector<int64_t>{3, 3, 4, 0}));
  EXPECT_EQ(intsOf(runBinary(BinaryOp::Add, a, b, {2, 2}, DType::I64)),
            (std::vector<int64_t>{9, -9, 11, -1}));
  EXPECT_EQ(intsOf(runBinary(BinaryOp::Mul, a, b, {2, 2}, DType::I64)),
            (std::vector<int64_t>{14, 14, 18, -2}));
  EXPECT_EQ(intsOf(runBinary(BinaryOp::Max, a, b, {2, 2}, DType::I64)),
            (std::vector<int64_t>{7, -2, 9, 1}));
  EXPECT_EQ(intsOf(runBinary(BinaryOp::Pow, i64({3}, {3, -2, 5}), i64({}, {3}),
                             {3}, DType::I64)),
            (std::vector<int64_t>{27, -8, 125}));
}

TEST(Binary, IntegerDivisionByZeroThrows) {
  Owned a = i64({2}, {1, 2}), b = i64({2}, {1, 0});
  EXPECT_THROW(runBinary(BinaryOp::Div, a, b, {2}, DType::I64), Error);
}

TEST(Binary, ComparisonsWriteBool) {
  Owned a = f32({2, 2}, {1, 2, 3, 4});
  Owned b = f32({2}, {2, 3});
  EXPECT_EQ(boolsOf(runBinary(BinaryOp::Less, a, b, {2, 2}, DType::Bool)),
            (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(boolsOf(runBinary(BinaryOp::Greater, a, b, {2, 2}, DType::Bool)),
            (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(
      boolsOf(runBinary(BinaryOp::Equal, a, f32({}, {3}), {2, 2}, DType::Bool)),
      (std::vector<uint8_t>{0, 0, 1, 0}));
  Owned ids = i64({3}, {4, 5, 6});
  EXPECT_EQ(
      boolsOf(runBinary(BinaryOp::Equal, ids, i64({1}, {5}), {3}, DType::Bool)),
      (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(boolsOf(runBinary(BinaryOp::Greater, ids, i64({1}, {4}), {3},
                              DType::Bool)),
            (std::vector<uint8_t>{0, 1, 1}));
}

TEST(Binary, LogicalOnBool) {
  Owned a = bools({4}, {0, 0, 1, 1}), b = bools({4}, {0, 1, 0, 1});
  EXPECT_EQ(boolsOf(runBinary(BinaryOp::And, a, b, {4}, DType::Bool)),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(boolsOf(runBinary(BinaryOp::Or, a, b, {4}, DType::Bool)),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(
      boolsOf(runBinary(BinaryOp::Or, a, bools({}, {1}), {4}, DType::Bool)),
      (std::vector<uint8_t>{1, 1, 1, 1}));
  EXPECT_THROW(
      runBinary(BinaryOp::And, f32({1}, {1}), f32({1}, {1}), {1}, DType::F32),
      Error);
}

TEST(Binary, LargeBroadcastsMatchReferenceLoop) {
  // Large enough for the parallel path, with rows longer than one chunk in
  // the first case and many short rows in the others.
  struct Case {
    Shape a, b, out;
  };
  for (const Case &c : {Case{{2, 40000}, {40000}, {2, 40000}},
                        Case{{30, 1, 70}, {50, 1}, {30, 50, 70}},
                        Case{{1, 60, 1}, {700, 1, 3}, {700, 60, 3}},
                        Case{{300, 200}, {300, 200}, {300, 200}}}) {
    SCOPED_TRACE(formatShape(c.out));
    Owned a = randomF32(c.a, 21), b = randomF32(c.b, 22);
    Owned out = runBinary(BinaryOp::Sub, a, b, c.out, DType::F32);
    for (int64_t k = 0; k < out.size(); ++k)
      ASSERT_EQ(out.f(k), a.f(broadcastSource(k, c.out, c.a)) -
                              b.f(broadcastSource(k, c.out, c.b)))
          << k;
  }
}

//===----------------------------------------------------------------------===//
// Where, cast, copy, fill
//===----------------------------------------------------------------------===//

TEST(Where, BroadcastsConditionAndOperands) {
  Owned condition = bools({1, 3}, {1, 0, 1});
  Owned a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Owned b = f32({}, {-1.f});
  Owned out(DType::F32, {2, 3});
  where(cpuStream(), condition.view, a.view, b.view, out.view);
  expectFloats(out, {1, -1, 3, 4, -1, 6});
  // Both operands stretched, I64.
  Owned ia = i64({2, 1}, {7, 8}), ib = i64({3}, {0, 1, 2});
  Owned iout(DType::I64, {2, 3});
  where(cpuStream(), condition.view, ia.view, ib.view, iout.view);
  EXPECT_EQ(intsOf(iout), (std::vector<int64_t>{7, 1, 7, 8, 1, 8}));
  // Bool operands.
  Owned ba = bools({3}, {1, 1, 1}), bb = bools({3}, {0, 0, 0});
  Owned bout(DType::Bool, {1, 3});
  where(cpuStream(), condition.view, ba.view, bb.view, bout.view);
  EXPECT_EQ(boolsOf(bout), (std::vector<uint8_t>{1, 0, 1}));
}

TEST(Where, LargeCausalMask) {
  Owned mask(DType::Bool, {200, 200});
  for (int64_t i = 0; i < 200; ++i)
    for (int64_t j = 0; j <= i; ++j)
      mask.view.boolean()[i * 200 + j] = 1;
  Owned scores = randomF32({3, 200, 200}, 5);
  Owned fill = f32({}, {-1e9f});
  Owned out(DType::F32, {3, 200, 200});
  where(cpuStream(), mask.view, scores.view, fill.view, out.view);
  for (int64_t k = 0; k < out.size(); ++k) {
    int64_t i = (k / 200) % 200, j = k % 200;
    ASSERT_EQ(out.f(k), j <= i ? scores.f(k) : -1e9f) << k;
  }
}

TEST(Cast, ConvertsBetweenDtypes) {
  Owned x = f32({4}, {-1.7f, 2.9f, 0.f, -0.5f});
  Owned asInt(DType::I64, {4});
  cast(cpuStream(), x.view, asInt.view);
  EXPECT_EQ(intsOf(asInt), (std::vector<int64_t>{-1, 2, 0, 0}));
  Owned asBool(DType::Bool, {4});
  cast(cpuStream(), x.view, asBool.view);
  EXPECT_EQ(boolsOf(asBool), (std::vector<uint8_t>{1, 1, 0, 1}));
  Owned back(DType::F32, {4});
  cast(cpuStream(), asBool.view, back.view);
  expectFloats(back, {1, 1, 0, 1});
  cast(cpuStream(), asInt.view, back.view);
  expectFloats(back, {-1, 2, 0, 0});
  Owned same(DType::F32, {4});
  cast(cpuStream(), x.view, same.view);
  EXPECT_EQ(floatsOf(same), floatsOf(x));
}

TEST(Copy, CopiesBytesUnderAnotherShape) {
  Owned x = randomF32({2, 3, 70000}, 9);
  Owned y(DType::F32, {6, 70000});
  copy(cpuStream(), x.view, y.view);
  EXPECT_EQ(floatsOf(y), floatsOf(x));
}

TEST(Fill, ConvertsTheValue) {
  Owned f(DType::F32, {3}), i(DType::I64, {2}), b(DType::Bool, {2});
  fill(cpuStream(), f.view, 1.5);
  fill(cpuStream(), i.view, 7.0);
  fill(cpuStream(), b.view, 2.0);
  expectFloats(f, {1.5f, 1.5f, 1.5f});
  EXPECT_EQ(intsOf(i), (std::vector<int64_t>{7, 7}));
  EXPECT_EQ(boolsOf(b), (std::vector<uint8_t>{1, 1}));
  Owned large(DType::F32, {100000});
  fill(cpuStream(), large.view, -2.0);
  for (int64_t k = 0; k < large.size(); ++k)
    ASSERT_EQ(large.f(k), -2.f);
}

} // namespace
