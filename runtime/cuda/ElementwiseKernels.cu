//===- ElementwiseKernels.cu - unary, binary, where, cast, copy, fill -----===//
//
// One thread per output element. Each op is a device function chosen at
// compile time (a template argument), so every kernel is a plain loop with
// the op inlined; dtype and op are dispatched once per launch on the host.
// The formulas are the CPU backend's (runtime/cpu/ElementwiseKernels.cpp),
// written with CUDA's float functions (erff, expf, ...): results agree to
// the last bits of those functions, not bit for bit.
//
//===----------------------------------------------------------------------===//

#include "DeviceLoops.cuh"
#include "KernelFamilies.h"

#include "bmrt/Error.h"
#include "bmrt/Executor.h"

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

namespace bmrt::cuda {
namespace {

using E = Executor;

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f; // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTwoOverSqrtPi = 1.12837916709551257f;
constexpr float kGeluCubic = 0.044715f;

[[noreturn]] void unsupported(const Instr &i, DType dtype) {
  BMRT_FAIL(i.op + " does not take " + nameOf(dtype) + " operands");
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

/// Alphabetical.
enum class Unary {
  Abs,
  Cos,
  Erf,
  Exp,
  Gelu,
  GeluTanh,
  Log,
  Neg,
  Not,
  Reciprocal,
  Relu,
  Sigmoid,
  Sin,
  Sqrt,
  Tanh,
};

/// Ops that also take I64 and I32 (the CPU's unaryInteger).
constexpr bool takesIntegers(Unary op) {
  return op == Unary::Abs || op == Unary::Neg || op == Unary::Relu;
}

/// 0.5 (1 + tanh(u)) is sigmoid(2u), as the CPU computes it.
__device__ float geluTanhGate(float x) {
  float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 1.f / (1.f + expf(-2.f * u));
}

template <Unary Op> __device__ float applyF32(float v) {
  if constexpr (Op == Unary::Abs)
    return fabsf(v);
  if constexpr (Op == Unary::Cos)
    return cosf(v);
  if constexpr (Op == Unary::Erf)
    return erff(v);
  if constexpr (Op == Unary::Exp)
    return expf(v);
  if constexpr (Op == Unary::Gelu)
    return 0.5f * v * (1.f + erff(v * kInvSqrt2));
  if constexpr (Op == Unary::GeluTanh)
    return v * geluTanhGate(v);
  if constexpr (Op == Unary::Log)
    return logf(v);
  if constexpr (Op == Unary::Neg)
    return -v;
  if constexpr (Op == Unary::Reciprocal)
    return 1.f / v;
  if constexpr (Op == Unary::Relu)
    return v < 0.f ? 0.f : v; // keeps NaN, as numpy's maximum(x, 0)
  if constexpr (Op == Unary::Sigmoid)
    return 1.f / (1.f + expf(-v));
  if constexpr (Op == Unary::Sin)
    return sinf(v);
  if constexpr (Op == Unary::Sqrt)
    return sqrtf(v);
  if constexpr (Op == Unary::Tanh)
    return tanhf(v);
  return v; // Not: never instantiated for F32
}

template <Unary Op, typename T> __device__ T applyUnary(T v) {
  if constexpr (std::is_same_v<T, float>)
    return applyF32<Op>(v);
  else if constexpr (std::is_same_v<T, uint8_t>)
    return uint8_t(!v); // Not, on Bool
  else if constexpr (Op == Unary::Abs)
    return v < 0 ? T(-v) : v;
  else if constexpr (Op == Unary::Neg)
    return T(-v);
  else
    return v > 0 ? v : T(0); // Relu
}

template <Unary Op, typename T>
__global__ void unaryKernel(const T *x, T *y, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { y[i] = applyUnary<Op, T>(x[i]); }
}

template <Unary Op, typename T> void runUnary(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  launch("unary kernel", streamOf(e), x.size(), unaryKernel<Op, T>,
         static_cast<const T *>(x.data), static_cast<T *>(y.data), x.size());
}

template <Unary Op> void launchUnary(E &e, const Instr &i) {
  DType dtype = e.operand(i, 0).dtype;
  if constexpr (Op == Unary::Not) {
    if (dtype == DType::Bool)
      return runUnary<Op, uint8_t>(e, i);
  } else {
    if (dtype == DType::F32)
      return runUnary<Op, float>(e, i);
    if constexpr (takesIntegers(Op)) {
      if (dtype == DType::I64)
        return runUnary<Op, int64_t>(e, i);
      if (dtype == DType::I32)
        return runUnary<Op, int32_t>(e, i);
    }
  }
  unsupported(i, dtype);
}

void launchGelu(E &e, const Instr &i) {
  if (i.getInt("tanh_approximation", 0))
    return launchUnary<Unary::GeluTanh>(e, i);
  launchUnary<Unary::Gelu>(e, i);
}

//===----------------------------------------------------------------------===//
// Unary gradients: dx = dy * op'(x), F32
//===----------------------------------------------------------------------===//

/// Each derivative decides how dy enters, so that the kinks (abs, relu at
/// 0) give 0 exactly rather than 0 * dy.
template <Unary Op> __device__ float gradient(float v, float g) {
  if constexpr (Op == Unary::Abs)
    return v > 0.f ? g : (v < 0.f ? -g : 0.f);
  if constexpr (Op == Unary::Cos)
    return -g * sinf(v);
  if constexpr (Op == Unary::Erf)
    return g * kTwoOverSqrtPi * expf(-v * v);
  if constexpr (Op == Unary::Exp)
    return g * expf(v);
  if constexpr (Op == Unary::Gelu) {
    // d/dx x Phi(x) = Phi(x) + x phi(x).
    float cdf = 0.5f * (1.f + erff(v * kInvSqrt2));
    float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    return g * (cdf + v * pdf);
  }
  if constexpr (Op == Unary::GeluTanh) {
    // s + 2 x s (1 - s) u' for s = sigmoid(2u) (the CPU's derivation).
    float s = geluTanhGate(v);
    float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * v * v);
    return g * (s + 2.f * v * s * (1.f - s) * du);
  }
  if constexpr (Op == Unary::Log)
    return g / v;
  if constexpr (Op == Unary::Neg)
    return -g;
  if constexpr (Op == Unary::Reciprocal)
    return -g / (v * v);
  if constexpr (Op == Unary::Relu)
    return v > 0.f ? g : 0.f;
  if constexpr (Op == Unary::Sigmoid) {
    float s = 1.f / (1.f + expf(-v));
    return g * s * (1.f - s);
  }
  if constexpr (Op == Unary::Sin)
    return g * cosf(v);
  if constexpr (Op == Unary::Sqrt)
    return 0.5f * g / sqrtf(v);
  if constexpr (Op == Unary::Tanh) {
    float t = tanhf(v);
    return g * (1.f - t * t);
  }
  return 0.f; // Not: has no derivative, refused on the host
}

template <Unary Op>
__global__ void unaryGradKernel(const float *x, const float *dy, float *dx,
                                int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { dx[i] = gradient<Op>(x[i], dy[i]); }
}

template <Unary Op> void runUnaryGrad(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &dy = e.operand(i, 1),
                   &dx = e.result(i, 0);
  if (x.dtype != DType::F32)
    unsupported(i, x.dtype);
  launch("unary_grad kernel", streamOf(e), x.size(), unaryGradKernel<Op>,
         x.f32(), dy.f32(), dx.f32(), x.size());
}

/// The forward op's mnemonic (attribute `op`) picks the derivative.
void launchUnaryGrad(E &e, const Instr &i) {
  using RunGrad = void (*)(E &, const Instr &);
  static const std::pair<const char *, RunGrad> kOps[] = {
      {"abs", runUnaryGrad<Unary::Abs>},
      {"cos", runUnaryGrad<Unary::Cos>},
      {"erf", runUnaryGrad<Unary::Erf>},
      {"exp", runUnaryGrad<Unary::Exp>},
      {"gelu", runUnaryGrad<Unary::Gelu>},
      {"log", runUnaryGrad<Unary::Log>},
      {"neg", runUnaryGrad<Unary::Neg>},
      {"reciprocal", runUnaryGrad<Unary::Reciprocal>},
      {"relu", runUnaryGrad<Unary::Relu>},
      {"sigmoid", runUnaryGrad<Unary::Sigmoid>},
      {"sin", runUnaryGrad<Unary::Sin>},
      {"sqrt", runUnaryGrad<Unary::Sqrt>},
      {"tanh", runUnaryGrad<Unary::Tanh>},
  };
  const std::string &name = i.getString("op");
  if (name == "gelu" && i.getInt("tanh_approximation", 0))
    return runUnaryGrad<Unary::GeluTanh>(e, i);
  for (auto [n, run] : kOps)
    if (name == n)
      return run(e, i);
  BMRT_FAIL("unary_grad of unknown op '" + name + "'");
}

//===----------------------------------------------------------------------===//
// Binary, with broadcasting
//===----------------------------------------------------------------------===//

/// Alphabetical.
enum class Binary {
  Add,
  And,     // Bool
  Div,     // integers truncate toward zero
  Equal,   // -> Bool
  Greater, // -> Bool
  Less,    // -> Bool
  Max,
  Min,
  Mul,
  Or, // Bool
  Pow,
  Sub,
};

constexpr bool isComparison(Binary op) {
  return op == Binary::Equal || op == Binary::Greater || op == Binary::Less;
}
constexpr bool isLogical(Binary op) {
  return op == Binary::And || op == Binary::Or;
}
/// Whether op takes operands of type T (Bool is uint8_t).
template <Binary Op, typename T> constexpr bool takes() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return isLogical(Op) || isComparison(Op);
  else
    return !isLogical(Op);
}

/// The CPU's integer power: by squaring, wrapping on overflow; a negative
/// exponent gives the truncated real result.
template <typename T> __device__ T integerPow(T base, T exponent) {
  if (exponent < 0) {
    if (base == 1)
      return 1;
    if (base == -1)
      return (exponent % 2) ? T(-1) : T(1);
    return 0;
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, factor = static_cast<U>(base);
  for (T e = exponent; e > 0; e >>= 1) {
    if (e & 1)
      result *= factor;
    factor *= factor;
  }
  return static_cast<T>(result);
}

/// Bool operands: the logical ops and the comparisons (false < true).
template <Binary Op> __device__ uint8_t applyLogical(uint8_t x, uint8_t y) {
  if constexpr (Op == Binary::And)
    return x && y;
  if constexpr (Op == Binary::Or)
    return x || y;
  if constexpr (Op == Binary::Equal)
    return !x == !y;
  if constexpr (Op == Binary::Greater)
    return x && !y;
  return !x && y; // Less
}

template <Binary Op, typename T> __device__ auto applyBinary(T x, T y) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return applyLogical<Op>(x, y);
  else if constexpr (Op == Binary::Add)
    return T(x + y);
  else if constexpr (Op == Binary::Div) {
    if constexpr (std::is_floating_point_v<T>)
      return x / y;
    else {
      // MIN / -1 overflows the quotient: negate with wrap-around instead.
      // A zero divisor is flagged by the kernel before it gets here.
      using U = std::make_unsigned_t<T>;
      return y == -1 ? static_cast<T>(U(0) - static_cast<U>(x)) : T(x / y);
    }
  } else if constexpr (Op == Binary::Equal)
    return uint8_t(x == y);
  else if constexpr (Op == Binary::Greater)
    return uint8_t(x > y);
  else if constexpr (Op == Binary::Less)
    return uint8_t(x < y);
  else if constexpr (Op == Binary::Max)
    return (x > y || x != x) ? x : y; // NaN in either gives NaN
  else if constexpr (Op == Binary::Min)
    return (x < y || x != x) ? x : y;
  else if constexpr (Op == Binary::Mul)
    return T(x * y);
  else if constexpr (Op == Binary::Pow) {
    if constexpr (std::is_floating_point_v<T>)
      return powf(x, y);
    else
      return integerPow<T>(x, y);
  } else
    return T(x - y); // Sub
}

/// `divideByZero`, for integer division only: set where a divisor is 0
/// (the element gets 0), since a kernel cannot throw.
template <Binary Op, typename T, typename R>
__global__ void binaryKernel(Broadcast<2> plan, const T *a, const T *b, R *out,
                             int64_t n, int *divideByZero) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t at[2];
    plan.offsets(i, at);
    T x = a[at[0]], y = b[at[1]];
    if constexpr (Op == Binary::Div && std::is_integral_v<T>) {
      if (y == 0) {
        *divideByZero = 1;
        out[i] = 0;
        continue;
      }
    }
    out[i] = applyBinary<Op, T>(x, y);
  }
}

template <Binary Op, typename T>
void runBinary(cudaStream_t stream, const char *op, const TensorView &a,
               const TensorView &b, const TensorView &out) {
  using R = std::conditional_t<isComparison(Op), uint8_t, T>;
  Broadcast<2> plan = planBroadcast<2>(op, out.shape, {&a.shape, &b.shape});
  const T *pa = static_cast<const T *>(a.data);
  const T *pb = static_cast<const T *>(b.data);
  R *po = static_cast<R *>(out.data);
  if constexpr (Op == Binary::Div && std::is_integral_v<T>) {
    // Integer division by zero is an error on the CPU: check for it here
    // too, at the cost of waiting for the kernel (integer division is
    // shape arithmetic, never in a model's hot loop).
    StreamBuffer flag(sizeof(int), stream);
    BMRT_CUDA_CHECK(cudaMemsetAsync(flag.data(), 0, sizeof(int), stream));
    launch("div kernel", stream, out.size(), binaryKernel<Op, T, R>, plan, pa,
           pb, po, out.size(), static_cast<int *>(flag.data()));
    int divideByZero = 0;
    BMRT_CUDA_CHECK(cudaMemcpyAsync(&divideByZero, flag.data(), sizeof(int),
                                    cudaMemcpyDeviceToHost, stream));
    BMRT_CUDA_CHECK(cudaStreamSynchronize(stream));
    BMRT_CHECK(!divideByZero, "integer division by zero");
    return;
  }
  launch("binary kernel", stream, out.size(), binaryKernel<Op, T, R>, plan, pa,
         pb, po, out.size(), static_cast<int *>(nullptr));
}

template <Binary Op>
void binary(cudaStream_t stream, const Instr &i, const TensorView &a,
            const TensorView &b, const TensorView &out) {
  switch (a.dtype) {
  case DType::F32:
    if constexpr (takes<Op, float>())
      return runBinary<Op, float>(stream, i.op.c_str(), a, b, out);
    break;
  case DType::I64:
    if constexpr (takes<Op, int64_t>())
      return runBinary<Op, int64_t>(stream, i.op.c_str(), a, b, out);
    break;
  case DType::I32:
    if constexpr (takes<Op, int32_t>())
      return runBinary<Op, int32_t>(stream, i.op.c_str(), a, b, out);
    break;
  case DType::Bool:
    if constexpr (takes<Op, uint8_t>())
      return runBinary<Op, uint8_t>(stream, i.op.c_str(), a, b, out);
    break;
  }
  unsupported(i, a.dtype);
}

template <Binary Op> void launchBinary(E &e, const Instr &i) {
  binary<Op>(streamOf(e), i, e.operand(i, 0), e.operand(i, 1), e.result(i, 0));
}

//===----------------------------------------------------------------------===//
// Where, cast, copy, fill
//===----------------------------------------------------------------------===//

/// Elements of any dtype, moved as unsigned integers of their width.
template <typename W>
__global__ void whereKernel(Broadcast<3> plan, const uint8_t *condition,
                            const W *a, const W *b, W *out, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t at[3];
    plan.offsets(i, at);
    out[i] = condition[at[0]] ? a[at[1]] : b[at[2]];
  }
}

void launchWhere(E &e, const Instr &i) {
  const TensorView &c = e.operand(i, 0), &a = e.operand(i, 1),
                   &b = e.operand(i, 2), &out = e.result(i, 0);
  Broadcast<3> plan =
      planBroadcast<3>("where", out.shape, {&c.shape, &a.shape, &b.shape});
  withElementWidth(out.dtype, [&](auto element) {
    using W = decltype(element);
    launch("where kernel", streamOf(e), out.size(), whereKernel<W>, plan,
           c.boolean(), static_cast<const W *>(a.data),
           static_cast<const W *>(b.data), static_cast<W *>(out.data),
           out.size());
  });
}

/// float -> integer truncates toward zero (static_cast); to Bool is != 0.
template <typename From, typename To, bool ToBool>
__global__ void castKernel(const From *x, To *y, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    if constexpr (ToBool)
      y[i] = x[i] != From(0);
    else
      y[i] = static_cast<To>(x[i]);
  }
}

template <typename From>
void castFrom(cudaStream_t stream, const TensorView &x, const TensorView &y) {
  const From *in = static_cast<const From *>(x.data);
  int64_t n = x.size();
  switch (y.dtype) {
  case DType::F32:
    return launch("cast kernel", stream, n, castKernel<From, float, false>, in,
                  y.f32(), n);
  case DType::I64:
    return launch("cast kernel", stream, n, castKernel<From, int64_t, false>,
                  in, y.i64(), n);
  case DType::I32:
    return launch("cast kernel", stream, n, castKernel<From, int32_t, false>,
                  in, y.i32(), n);
  case DType::Bool:
    return launch("cast kernel", stream, n, castKernel<From, uint8_t, true>, in,
                  y.boolean(), n);
  }
}

/// reshape, squeeze, unsqueeze, flatten: the same bytes under another shape
/// (nothing to move where the executor ran it in place).
void launchCopy(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  e.device().copyOnDevice(y.data, x.data, x.bytes(), e.stream());
}

void launchCast(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  cudaStream_t stream = streamOf(e);
  if (x.dtype == y.dtype)
    return launchCopy(e, i);
  switch (x.dtype) {
  case DType::F32:
    return castFrom<float>(stream, x, y);
  case DType::I64:
    return castFrom<int64_t>(stream, x, y);
  case DType::I32:
    return castFrom<int32_t>(stream, x, y);
  case DType::Bool:
    return castFrom<uint8_t>(stream, x, y);
  }
}

template <typename T> __global__ void fillKernel(T *y, T value, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { y[i] = value; }
}

template <typename T>
void fillWith(cudaStream_t stream, const TensorView &y, T value) {
  launch("fill kernel", stream, y.size(), fillKernel<T>,
         static_cast<T *>(y.data), value, y.size());
}

/// Sets every element to `value`, converted to y's dtype.
void launchFill(E &e, const Instr &i) {
  const TensorView &y = e.result(i, 0);
  double value = i.getFloat("value");
  cudaStream_t stream = streamOf(e);
  switch (y.dtype) {
  case DType::F32:
    return fillWith(stream, y, static_cast<float>(value));
  case DType::I64:
    return fillWith(stream, y, static_cast<int64_t>(value));
  case DType::I32:
    return fillWith(stream, y, static_cast<int32_t>(value));
  case DType::Bool:
    return fillWith(stream, y, static_cast<uint8_t>(value != 0));
  }
}

// Alphabetical.
const KernelTable::Entry kKernels[] = {
    {"abs", launchUnary<Unary::Abs>},
    {"add", launchBinary<Binary::Add>},
    {"and", launchBinary<Binary::And>},
    {"cast", launchCast},
    {"copy", launchCopy},
    {"cos", launchUnary<Unary::Cos>},
    {"div", launchBinary<Binary::Div>},
    {"equal", launchBinary<Binary::Equal>},
    {"erf", launchUnary<Unary::Erf>},
    {"exp", launchUnary<Unary::Exp>},
    {"fill", launchFill},
    {"flatten", launchCopy},
    {"gelu", launchGelu},
    {"greater", launchBinary<Binary::Greater>},
    {"less", launchBinary<Binary::Less>},
    {"log", launchUnary<Unary::Log>},
    {"max", launchBinary<Binary::Max>},
    {"min", launchBinary<Binary::Min>},
    {"mul", launchBinary<Binary::Mul>},
    {"neg", launchUnary<Unary::Neg>},
    {"not", launchUnary<Unary::Not>},
    {"or", launchBinary<Binary::Or>},
    {"pow", launchBinary<Binary::Pow>},
    {"reciprocal", launchUnary<Unary::Reciprocal>},
    {"relu", launchUnary<Unary::Relu>},
    {"reshape", launchCopy},
    {"sigmoid", launchUnary<Unary::Sigmoid>},
    {"sin", launchUnary<Unary::Sin>},
    {"sqrt", launchUnary<Unary::Sqrt>},
    {"squeeze", launchCopy},
    {"sub", launchBinary<Binary::Sub>},
    {"tanh", launchUnary<Unary::Tanh>},
    {"unary_grad", launchUnaryGrad},
    {"unsqueeze", launchCopy},
    {"where", launchWhere},
};

} // namespace

KernelFamily elementwiseKernels() {
  return {kKernels, sizeof(kKernels) / sizeof(kKernels[0])};
}

void addF32(cudaStream_t stream, const TensorView &a, const TensorView &b,
            const TensorView &out) {
  runBinary<Binary::Add, float>(stream, "add", a, b, out);
}

} // namespace bmrt::cuda
