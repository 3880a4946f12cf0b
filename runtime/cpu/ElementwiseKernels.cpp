//===- ElementwiseKernels.cpp - unary, binary, where, cast, copy, fill ----===//
//
// Every kernel here is one pass over memory. Operations are lambdas handed
// to templated loops, so the compiler inlines them into loops that
// vectorise; dtype and op are dispatched once per call, never per element.
//
//===----------------------------------------------------------------------===//

#include "Broadcast.h"

#include "bmrt/Error.h"
#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace bmrt::cpu {

using namespace detail;

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f; // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTwoOverSqrtPi = 1.12837916709551257f;
constexpr float kGeluCubic = 0.044715f;

const char *nameOf(UnaryOp op) {
  switch (op) {
  case UnaryOp::Abs:
    return "abs";
  case UnaryOp::Cos:
    return "cos";
  case UnaryOp::Erf:
    return "erf";
  case UnaryOp::Exp:
    return "exp";
  case UnaryOp::Gelu:
    return "gelu";
  case UnaryOp::GeluTanh:
    return "gelu (tanh)";
  case UnaryOp::Log:
    return "log";
  case UnaryOp::Neg:
    return "neg";
  case UnaryOp::Not:
    return "not";
  case UnaryOp::Reciprocal:
    return "reciprocal";
  case UnaryOp::Relu:
    return "relu";
  case UnaryOp::Sigmoid:
    return "sigmoid";
  case UnaryOp::Sin:
    return "sin";
  case UnaryOp::Sqrt:
    return "sqrt";
  case UnaryOp::Tanh:
    return "tanh";
  }
  return "?";
}

const char *nameOf(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add:
    return "add";
  case BinaryOp::And:
    return "and";
  case BinaryOp::Div:
    return "div";
  case BinaryOp::Equal:
    return "equal";
  case BinaryOp::Greater:
    return "greater";
  case BinaryOp::Less:
    return "less";
  case BinaryOp::Max:
    return "max";
  case BinaryOp::Min:
    return "min";
  case BinaryOp::Mul:
    return "mul";
  case BinaryOp::Or:
    return "or";
  case BinaryOp::Pow:
    return "pow";
  case BinaryOp::Sub:
    return "sub";
  }
  return "?";
}

[[noreturn]] void unsupported(const char *kernel, const char *op, DType dtype) {
  BMRT_FAIL(std::string(kernel) + " " + op + " does not take " +
            bmrt::nameOf(dtype) + " operands");
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

/// y[i] = fn(x[i]) over contiguous x and y.
template <typename T, typename R = T, typename Fn>
void mapElements(const TensorView &x, const TensorView &y, Fn fn) {
  const T *in = static_cast<const T *>(x.data);
  R *out = static_cast<R *>(y.data);
  forEachChunk(x.size(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = fn(in[i]);
  });
}

float gelu(float x) { return 0.5f * x * (1.f + std::erf(x * kInvSqrt2)); }

/// 0.5 (1 + tanh(u)) is sigmoid(2u): one exp instead of a tanh, which
/// libm computes several times slower.
float geluTanhGate(float x) {
  float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 1.f / (1.f + std::exp(-2.f * u));
}

float geluTanh(float x) { return x * geluTanhGate(x); }

void unaryF32(UnaryOp op, const TensorView &x, const TensorView &y) {
  switch (op) {
  case UnaryOp::Abs:
    return mapElements<float>(x, y, [](float v) { return std::fabs(v); });
  case UnaryOp::Cos:
    return mapElements<float>(x, y, [](float v) { return std::cos(v); });
  case UnaryOp::Erf:
    return mapElements<float>(x, y, [](float v) { return std::erf(v); });
  case UnaryOp::Exp:
    return mapElements<float>(x, y, [](float v) { return std::exp(v); });
  // Lambdas, not function pointers, so that the loops inline them.
  case UnaryOp::Gelu:
    return mapElements<float>(x, y, [](float v) { return gelu(v); });
  case UnaryOp::GeluTanh:
    return mapElements<float>(x, y, [](float v) { return geluTanh(v); });
  case UnaryOp::Log:
    return mapElements<float>(x, y, [](float v) { return std::log(v); });
  case UnaryOp::Neg:
    return mapElements<float>(x, y, [](float v) { return -v; });
  case UnaryOp::Reciprocal:
    return mapElements<float>(x, y, [](float v) { return 1.f / v; });
  case UnaryOp::Relu:
    // A select that keeps NaN (as numpy's maximum(x, 0) does) and
    // vectorises.
    return mapElements<float>(x, y, [](float v) { return v < 0.f ? 0.f : v; });
  case UnaryOp::Sigmoid:
    // exp(-v) overflows to inf for v < -88, giving the right limit 0.
    return mapElements<float>(
        x, y, [](float v) { return 1.f / (1.f + std::exp(-v)); });
  case UnaryOp::Sin:
    return mapElements<float>(x, y, [](float v) { return std::sin(v); });
  case UnaryOp::Sqrt:
    return mapElements<float>(x, y, [](float v) { return std::sqrt(v); });
  case UnaryOp::Tanh:
    return mapElements<float>(x, y, [](float v) { return std::tanh(v); });
  case UnaryOp::Not:
    break;
  }
  unsupported("unary", nameOf(op), DType::F32);
}

template <typename T>
void unaryInteger(UnaryOp op, const TensorView &x, const TensorView &y) {
  switch (op) {
  case UnaryOp::Abs:
    return mapElements<T>(x, y, [](T v) { return v < 0 ? T(-v) : v; });
  case UnaryOp::Neg:
    return mapElements<T>(x, y, [](T v) { return T(-v); });
  case UnaryOp::Relu:
    return mapElements<T>(x, y, [](T v) { return v > 0 ? v : T(0); });
  default:
    unsupported("unary", nameOf(op), x.dtype);
  }
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

/// One row of a broadcast binary op: each operand steps by one or stays.
/// The four cases are separate loops so that each one vectorises.
template <typename T, typename R, typename Op>
inline void binaryRow(const T *a, const T *b, R *out, int64_t n, bool aSteps,
                      bool bSteps, Op op) {
  if (aSteps && bSteps) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = op(a[i], b[i]);
  } else if (aSteps) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i)
      out[i] = op(a[i], bv);
  } else if (bSteps) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i)
      out[i] = op(av, b[i]);
  } else {
    std::fill_n(out, n, op(*a, *b));
  }
}

template <typename T, typename R, typename Op>
void runBinary(const TensorView &a, const TensorView &b, const TensorView &out,
               Op op) {
  BroadcastPlan<2> plan = planBroadcast<2>(out.shape, {&a.shape, &b.shape});
  const T *pa = static_cast<const T *>(a.data);
  const T *pb = static_cast<const T *>(b.data);
  R *po = static_cast<R *>(out.data);
  bool aSteps = plan.steps(0), bSteps = plan.steps(1);
  forEachPiece(plan, [&](int64_t o, const std::array<int64_t, 2> &offsets,
                         int64_t count) {
    binaryRow(pa + offsets[0], pb + offsets[1], po + o, count, aSteps, bSteps,
              op);
  });
}

template <typename T>
void arithmetic(BinaryOp op, const TensorView &a, const TensorView &b,
                const TensorView &out) {
  constexpr bool isFloat = std::is_floating_point_v<T>;
  switch (op) {
  case BinaryOp::Add:
    return runBinary<T, T>(a, b, out, [](T x, T y) { return T(x + y); });
  case BinaryOp::Sub:
    return runBinary<T, T>(a, b, out, [](T x, T y) { return T(x - y); });
  case BinaryOp::Mul:
    return runBinary<T, T>(a, b, out, [](T x, T y) { return T(x * y); });
  case BinaryOp::Div:
    if constexpr (isFloat) {
      return runBinary<T, T>(a, b, out, [](T x, T y) { return x / y; });
    } else {
      // Integer division by zero would kill the process (SIGFPE): check the
      // divisor first, on one thread, so the error can be thrown.
      const T *pb = static_cast<const T *>(b.data);
      for (int64_t i = 0; i < b.size(); ++i)
        BMRT_CHECK(pb[i] != 0, "integer division by zero");
      // C++ division truncates toward zero, as ONNX wants. MIN / -1
      // overflows the quotient: negate with wrap-around instead.
      return runBinary<T, T>(a, b, out, [](T x, T y) {
        using U = std::make_unsigned_t<T>;
        return y == -1 ? static_cast<T>(U(0) - static_cast<U>(x)) : T(x / y);
      });
    }
  case BinaryOp::Max:
    // numpy's maximum: NaN in either operand gives NaN.
    return runBinary<T, T>(a, b, out,
                           [](T x, T y) { return (x > y || x != x) ? x : y; });
  case BinaryOp::Min:
    return runBinary<T, T>(a, b, out,
                           [](T x, T y) { return (x < y || x != x) ? x : y; });
  case BinaryOp::Pow:
    if constexpr (isFloat)
      return runBinary<T, T>(a, b, out,
                             [](T x, T y) { return std::pow(x, y); });
    else
      return runBinary<T, T>(a, b, out,
                             [](T x, T y) { return integerPow<T>(x, y); });
  case BinaryOp::Equal:
    return runBinary<T, uint8_t>(a, b, out,
                                 [](T x, T y) { return uint8_t(x == y); });
  case BinaryOp::Greater:
    return runBinary<T, uint8_t>(a, b, out,
                                 [](T x, T y) { return uint8_t(x > y); });
  case BinaryOp::Less:
    return runBinary<T, uint8_t>(a, b, out,
                                 [](T x, T y) { return uint8_t(x < y); });
  case BinaryOp::And:
  case BinaryOp::Or:
    break;
  }
  unsupported("binary", nameOf(op), a.dtype);
}

/// Bool operands: the logical ops and the comparisons (false < true).
void logical(BinaryOp op, const TensorView &a, const TensorView &b,
             const TensorView &out) {
  using B = uint8_t;
  switch (op) {
  case BinaryOp::And:
    return runBinary<B, B>(a, b, out, [](B x, B y) { return B(x && y); });
  case BinaryOp::Or:
    return runBinary<B, B>(a, b, out, [](B x, B y) { return B(x || y); });
  case BinaryOp::Equal:
    return runBinary<B, B>(a, b, out, [](B x, B y) { return B(!x == !y); });
  case BinaryOp::Greater:
    return runBinary<B, B>(a, b, out, [](B x, B y) { return B(x && !y); });
  case BinaryOp::Less:
    return runBinary<B, B>(a, b, out, [](B x, B y) { return B(!x && y); });
  default:
    unsupported("binary", nameOf(op), DType::Bool);
  }
}

//===----------------------------------------------------------------------===//
// Where and cast
//===----------------------------------------------------------------------===//

template <typename E>
void runWhere(const TensorView &condition, const TensorView &a,
              const TensorView &b, const TensorView &out) {
  BroadcastPlan<3> plan =
      planBroadcast<3>(out.shape, {&condition.shape, &a.shape, &b.shape});
  const uint8_t *pc = condition.boolean();
  const E *pa = static_cast<const E *>(a.data);
  const E *pb = static_cast<const E *>(b.data);
  E *po = static_cast<E *>(out.data);
  int64_t sc = plan.steps(0), sa = plan.steps(1), sb = plan.steps(2);
  forEachPiece(plan, [&](int64_t o, const std::array<int64_t, 3> &offsets,
                         int64_t count) {
    const uint8_t *c = pc + offsets[0];
    const E *x = pa + offsets[1];
    const E *y = pb + offsets[2];
    E *z = po + o;
    // The masks of attention (mask and scores stepping, the fill value
    // fixed) and plain selects get loops without the stride products.
    if (sc && sa && !sb) {
      const E fill = *y;
      for (int64_t i = 0; i < count; ++i)
        z[i] = c[i] ? x[i] : fill;
    } else if (sc && sa && sb) {
      for (int64_t i = 0; i < count; ++i)
        z[i] = c[i] ? x[i] : y[i];
    } else {
      for (int64_t i = 0; i < count; ++i)
        z[i] = c[i * sc] ? x[i * sa] : y[i * sb];
    }
  });
}

template <typename From, typename To>
void convert(const TensorView &x, const TensorView &y) {
  if constexpr (std::is_same_v<To, bool>)
    mapElements<From, uint8_t>(x, y,
                               [](From v) { return uint8_t(v != From(0)); });
  else
    mapElements<From, To>(x, y, [](From v) { return static_cast<To>(v); });
}

/// Bool is read and written as bool here (0 or 1 in a byte); storage is
/// uint8_t.
template <typename From>
void castFrom(const TensorView &x, const TensorView &y) {
  switch (y.dtype) {
  case DType::F32:
    return convert<From, float>(x, y);
  case DType::I64:
    return convert<From, int64_t>(x, y);
  case DType::I32:
    return convert<From, int32_t>(x, y);
  case DType::Bool:
    return convert<From, bool>(x, y);
  }
}

} // namespace

void unary(Stream &, UnaryOp op, const TensorView &x, const TensorView &y) {
  switch (x.dtype) {
  case DType::F32:
    return unaryF32(op, x, y);
  case DType::I64:
    return unaryInteger<int64_t>(op, x, y);
  case DType::I32:
    return unaryInteger<int32_t>(op, x, y);
  case DType::Bool:
    if (op != UnaryOp::Not)
      unsupported("unary", nameOf(op), x.dtype);
    return mapElements<uint8_t>(x, y, [](uint8_t v) { return uint8_t(!v); });
  }
}

namespace {

/// dx[i] = fn(x[i], dy[i]): each derivative decides how dy enters, so that
/// the kinks (abs, relu at 0) give 0 exactly rather than 0 * dy.
template <typename Fn>
void mapGradient(const TensorView &x, const TensorView &dy,
                 const TensorView &dx, Fn fn) {
  const float *px = x.f32(), *pdy = dy.f32();
  float *pdx = dx.f32();
  forEachChunk(x.size(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      pdx[i] = fn(px[i], pdy[i]);
  });
}

} // namespace

void unaryGrad(Stream &, UnaryOp op, const TensorView &x, const TensorView &dy,
               const TensorView &dx) {
  if (x.dtype != DType::F32)
    unsupported("unary_grad", nameOf(op), x.dtype);
  switch (op) {
  case UnaryOp::Abs:
    return mapGradient(x, dy, dx, [](float v, float g) {
      return v > 0.f ? g : (v < 0.f ? -g : 0.f);
    });
  case UnaryOp::Cos:
    return mapGradient(x, dy, dx,
                       [](float v, float g) { return -g * std::sin(v); });
  case UnaryOp::Erf:
    return mapGradient(x, dy, dx, [](float v, float g) {
      return g * kTwoOverSqrtPi * std::exp(-v * v);
    });
  case UnaryOp::Exp:
    return mapGradient(x, dy, dx,
                       [](float v, float g) { return g * std::exp(v); });
  case UnaryOp::Gelu:
    // d/dx x Phi(x) = Phi(x) + x phi(x).
    return mapGradient(x, dy, dx, [](float v, float g) {
      float cdf = 0.5f * (1.f + std::erf(v * kInvSqrt2));
      float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
      return g * (cdf + v * pdf);
    });
  case UnaryOp::GeluTanh:
    // With u = c (x + a x^3), t = tanh(u): 0.5 (1 + t) + 0.5 x (1 - t^2) u',
    // which is s + 2 x s (1 - s) u' for s = sigmoid(2u) = 0.5 (1 + t).
    return mapGradient(x, dy, dx, [](float v, float g) {
      float s = geluTanhGate(v);
      float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * v * v);
      return g * (s + 2.f * v * s * (1.f - s) * du);
    });
  case UnaryOp::Log:
    return mapGradient(x, dy, dx, [](float v, float g) { return g / v; });
  case UnaryOp::Neg:
    return mapGradient(x, dy, dx, [](float, float g) { return -g; });
  case UnaryOp::Reciprocal:
    return mapGradient(x, dy, dx,
                       [](float v, float g) { return -g / (v * v); });
  case UnaryOp::Relu:
    return mapGradient(x, dy, dx,
                       [](float v, float g) { return v > 0.f ? g : 0.f; });
  case UnaryOp::Sigmoid:
    return mapGradient(x, dy, dx, [](float v, float g) {
      float s = 1.f / (1.f + std::exp(-v));
      return g * s * (1.f - s);
    });
  case UnaryOp::Sin:
    return mapGradient(x, dy, dx,
                       [](float v, float g) { return g * std::cos(v); });
  case UnaryOp::Sqrt:
    return mapGradient(
        x, dy, dx, [](float v, float g) { return 0.5f * g / std::sqrt(v); });
  case UnaryOp::Tanh:
    return mapGradient(x, dy, dx, [](float v, float g) {
      float t = std::tanh(v);
      return g * (1.f - t * t);
    });
  case UnaryOp::Not:
    break;
  }
  BMRT_FAIL("unary_grad has no derivative of not");
}

void binary(Stream &, BinaryOp op, const TensorView &a, const TensorView &b,
            const TensorView &out) {
  switch (a.dtype) {
  case DType::F32:
    return arithmetic<float>(op, a, b, out);
  case DType::I64:
    return arithmetic<int64_t>(op, a, b, out);
  case DType::I32:
    return arithmetic<int32_t>(op, a, b, out);
  case DType::Bool:
    return logical(op, a, b, out);
  }
}

void where(Stream &, const TensorView &condition, const TensorView &a,
           const TensorView &b, const TensorView &out) {
  withElementWidth(out.dtype, [&](auto element) {
    runWhere<decltype(element)>(condition, a, b, out);
  });
}

void cast(Stream &stream, const TensorView &x, const TensorView &y) {
  if (x.dtype == y.dtype)
    return copy(stream, x, y);
  switch (x.dtype) {
  case DType::F32:
    return castFrom<float>(x, y);
  case DType::I64:
    return castFrom<int64_t>(x, y);
  case DType::I32:
    return castFrom<int32_t>(x, y);
  case DType::Bool:
    return castFrom<uint8_t>(x, y);
  }
}

void copy(Stream &, const TensorView &x, const TensorView &y) {
  // A reshape the executor ran in place: nothing to move.
  if (x.data == y.data)
    return;
  const char *from = static_cast<const char *>(x.data);
  char *to = static_cast<char *>(y.data);
  // One thread cannot saturate memory bandwidth on a many-core machine:
  // copy large tensors in chunks on every thread.
  int64_t bytes = static_cast<int64_t>(x.bytes());
  forEachChunk(bytes, [&](int64_t begin, int64_t end) {
    std::memcpy(to + begin, from + begin, end - begin);
  });
}

void fill(Stream &, const TensorView &y, double value) {
  auto fillWith = [&](auto v) {
    using T = decltype(v);
    T *out = static_cast<T *>(y.data);
    forEachChunk(y.size(), [&](int64_t begin, int64_t end) {
      std::fill(out + begin, out + end, v);
    });
  };
  switch (y.dtype) {
  case DType::F32:
    return fillWith(static_cast<float>(value));
  case DType::I64:
    return fillWith(static_cast<int64_t>(value));
  case DType::I32:
    return fillWith(static_cast<int32_t>(value));
  case DType::Bool:
    return fillWith(static_cast<uint8_t>(value != 0));
  }
}

} // namespace bmrt::cpu
