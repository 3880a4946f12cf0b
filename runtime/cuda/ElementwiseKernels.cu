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

#include "bmrt/ElementwiseOps.h"
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

// The ops are bmrt/ElementwiseOps.h's, shared with the CPU.

/// Ops that also take I64 and I32 (the CPU's unaryInteger).
constexpr bool takesIntegers(UnaryOp op) {
  return op == UnaryOp::Abs || op == UnaryOp::Neg || op == UnaryOp::Relu;
}

/// 0.5 (1 + tanh(u)) is sigmoid(2u), as the CPU computes it.
__device__ float geluTanhGate(float x) {
  float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 1.f / (1.f + expf(-2.f * u));
}

template <UnaryOp Op> __device__ float applyF32(float v) {
  if constexpr (Op == UnaryOp::Abs)
    return fabsf(v);
  if constexpr (Op == UnaryOp::Cos)
    return cosf(v);
  if constexpr (Op == UnaryOp::Erf)
    return erff(v);
  if constexpr (Op == UnaryOp::Exp)
    return expf(v);
  if constexpr (Op == UnaryOp::Gelu)
    return 0.5f * v * (1.f + erff(v * kInvSqrt2));
  if constexpr (Op == UnaryOp::GeluTanh)
    return v * geluTanhGate(v);
  if constexpr (Op == UnaryOp::Log)
    return logf(v);
  if constexpr (Op == UnaryOp::Neg)
    return -v;
  if constexpr (Op == UnaryOp::Reciprocal)
    return 1.f / v;
  if constexpr (Op == UnaryOp::Relu)
    return v < 0.f ? 0.f : v; // keeps NaN, as numpy's maximum(x, 0)
  if constexpr (Op == UnaryOp::Sigmoid)
    return 1.f / (1.f + expf(-v));
  if constexpr (Op == UnaryOp::Sin)
    return sinf(v);
  if constexpr (Op == UnaryOp::Sqrt)
    return sqrtf(v);
  if constexpr (Op == UnaryOp::Tanh)
    return tanhf(v);
  return v; // Not: never instantiated for F32
}

template <UnaryOp Op, typename T> __device__ T applyUnary(T v) {
  if constexpr (std::is_same_v<T, float>)
    return applyF32<Op>(v);
  else if constexpr (std::is_same_v<T, uint8_t>)
    return uint8_t(!v); // Not, on Bool
  else if constexpr (Op == UnaryOp::Abs)
    return v < 0 ? T(-v) : v;
  else if constexpr (Op == UnaryOp::Neg)
    return T(-v);
  else
    return v > 0 ? v : T(0); // Relu
}

template <UnaryOp Op, typename T>
__global__ void unaryKernel(const T *x, T *y, int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { y[i] = applyUnary<Op, T>(x[i]); }
}

template <UnaryOp Op, typename T> void runUnary(E &e, const Instr &i) {
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  launch("unary kernel", streamOf(e), x.size(), unaryKernel<Op, T>,
         static_cast<const T *>(x.data), static_cast<T *>(y.data), x.size());
}

template <UnaryOp Op> void launchUnary(E &e, const Instr &i) {
  DType dtype = e.operand(i, 0).dtype;
  if constexpr (Op == UnaryOp::Not) {
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
    return launchUnary<UnaryOp::GeluTanh>(e, i);
  launchUnary<UnaryOp::Gelu>(e, i);
}

//===----------------------------------------------------------------------===//
// Unary gradients: dx = dy * op'(x), F32
//===----------------------------------------------------------------------===//

/// Each derivative decides how dy enters, so that the kinks (abs, relu at
/// 0) give 0 exactly rather than 0 * dy.
template <UnaryOp Op> __device__ float gradient(float v, float g) {
  if constexpr (Op == UnaryOp::Abs)
    return v > 0.f ? g : (v < 0.f ? -g : 0.f);
  if constexpr (Op == UnaryOp::Cos)
    return -g * sinf(v);
  if constexpr (Op == UnaryOp::Erf)
    return g * kTwoOverSqrtPi * expf(-v * v);
  if constexpr (Op == UnaryOp::Exp)
    return g * expf(v);
  if constexpr (Op == UnaryOp::Gelu) {
    // d/dx x Phi(x) = Phi(x) + x phi(x).
    float cdf = 0.5f * (1.f + erff(v * kInvSqrt2));
    float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    return g * (cdf + v * pdf);
  }
  if constexpr (Op == UnaryOp::GeluTanh) {
    // s + 2 x s (1 - s) u' for s = sigmoid(2u) (the CPU's derivation).
    float s = geluTanhGate(v);
    float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * v * v);
    return g * (s + 2.f * v * s * (1.f - s) * du);
  }
  if constexpr (Op == UnaryOp::Log)
    return g / v;
  if constexpr (Op == UnaryOp::Neg)
    return -g;
  if constexpr (Op == UnaryOp::Reciprocal)
    return -g / (v * v);
  if constexpr (Op == UnaryOp::Relu)
    return v > 0.f ? g : 0.f;
  if constexpr (Op == UnaryOp::Sigmoid) {
    float s = 1.f / (1.f + expf(-v));
    return g * s * (1.f - s);
  }
  if constexpr (Op == UnaryOp::Sin)
    return g * cosf(v);
  if constexpr (Op == UnaryOp::Sqrt)
    return 0.5f * g / sqrtf(v);
  if constexpr (Op == UnaryOp::Tanh) {
    float t = tanhf(v);
    return g * (1.f - t * t);
  }
  return 0.f; // Not: has no derivative, refused on the host
}

template <UnaryOp Op>
__global__ void unaryGradKernel(const float *x, const float *dy, float *dx,
                                int64_t n) {
  BMRT_GRID_STRIDE_LOOP(i, n) { dx[i] = gradient<Op>(x[i], dy[i]); }
}

template <UnaryOp Op> void runUnaryGrad(E &e, const Instr &i) {
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
      {"abs", runUnaryGrad<UnaryOp::Abs>},
      {"cos", runUnaryGrad<UnaryOp::Cos>},
      {"erf", runUnaryGrad<UnaryOp::Erf>},
      {"exp", runUnaryGrad<UnaryOp::Exp>},
      {"gelu", runUnaryGrad<UnaryOp::Gelu>},
      {"log", runUnaryGrad<UnaryOp::Log>},
      {"neg", runUnaryGrad<UnaryOp::Neg>},
      {"reciprocal", runUnaryGrad<UnaryOp::Reciprocal>},
      {"relu", runUnaryGrad<UnaryOp::Relu>},
      {"sigmoid", runUnaryGrad<UnaryOp::Sigmoid>},
      {"sin", runUnaryGrad<UnaryOp::Sin>},
      {"sqrt", runUnaryGrad<UnaryOp::Sqrt>},
      {"tanh", runUnaryGrad<UnaryOp::Tanh>},
  };
  const std::string &name = i.getString("op");
  if (name == "gelu" && i.getInt("tanh_approximation", 0))
    return runUnaryGrad<UnaryOp::GeluTanh>(e, i);
  for (auto [n, run] : kOps)
    if (name == n)
      return run(e, i);
  BMRT_FAIL("unary_grad of unknown op '" + name + "'");
}

//===----------------------------------------------------------------------===//
// Binary, with broadcasting
//===----------------------------------------------------------------------===//

constexpr bool isComparison(BinaryOp op) {
  return op == BinaryOp::Equal || op == BinaryOp::Greater ||
         op == BinaryOp::Less;
}
constexpr bool isLogical(BinaryOp op) {
  return op == BinaryOp::And || op == BinaryOp::Or;
}
/// Whether op takes operands of type T (Bool is uint8_t).
template <BinaryOp Op, typename T> constexpr bool takes() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return isLogical(Op) || isComparison(Op);
  else
    return !isLogical(Op);
}

/// Bool operands: the logical ops and the comparisons (false < true).
template <BinaryOp Op> __device__ uint8_t applyLogical(uint8_t x, uint8_t y) {
  if constexpr (Op == BinaryOp::And)
    return x && y;
  if constexpr (Op == BinaryOp::Or)
    return x || y;
  if constexpr (Op == BinaryOp::Equal)
    return !x == !y;
  if constexpr (Op == BinaryOp::Greater)
    return x && !y;
  return !x && y; // Less
}

template <BinaryOp Op, typename T> __device__ auto applyBinary(T x, T y) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return applyLogical<Op>(x, y);
  else if constexpr (Op == BinaryOp::Add)
    return T(x + y);
  else if constexpr (Op == BinaryOp::Div) {
    if constexpr (std::is_floating_point_v<T>)
      return x / y;
    else {
      // MIN / -1 overflows the quotient: negate with wrap-around instead.
      // A zero divisor is flagged by the kernel before it gets here.
      using U = std::make_unsigned_t<T>;
      return y == -1 ? static_cast<T>(U(0) - static_cast<U>(x)) : T(x / y);
    }
  } else if constexpr (Op == BinaryOp::Equal)
    return uint8_t(x == y);
  else if constexpr (Op == BinaryOp::Greater)
    return uint8_t(x > y);
  else if constexpr (Op == BinaryOp::Less)
    return uint8_t(x < y);
  else if constexpr (Op == BinaryOp::Max)
    return (x > y || x != x) ? x : y; // NaN in either gives NaN
  else if constexpr (Op == BinaryOp::Min)
    return (x < y || x != x) ? x : y;
  else if constexpr (Op == BinaryOp::Mul)
    return T(x * y);
  else if constexpr (Op == BinaryOp::Pow) {
    if constexpr (std::is_floating_point_v<T>)
      return powf(x, y);
    else
      return integerPow<T>(x, y);
  } else
    return T(x - y); // Sub
}

/// `divideByZero`, for integer division only: set where a divisor is 0
/// (the element gets 0), since a kernel cannot throw.
template <BinaryOp Op, typename T, typename R>
__global__ void binaryKernel(Broadcast<2> plan, const T *a, const T *b, R *out,
                             int64_t n, int *divideByZero) {
  BMRT_GRID_STRIDE_LOOP(i, n) {
    int64_t at[2];
    plan.offsets(i, at);
    T x = a[at[0]], y = b[at[1]];
    if constexpr (Op == BinaryOp::Div && std::is_integral_v<T>) {
      if (y == 0) {
        *divideByZero = 1;
        out[i] = 0;
        continue;
      }
    }
    out[i] = applyBinary<Op, T>(x, y);
  }
}

template <BinaryOp Op, typename T>
void runBinary(cudaStream_t stream, const char *op, const TensorView &a,
               const TensorView &b, const TensorView &out) {
  using R = std::conditional_t<isComparison(Op), uint8_t, T>;
  Broadcast<2> plan = planBroadcast<2>(op, out.shape, {&a.shape, &b.shape});
  const T *pa = static_cast<const T *>(a.data);
  const T *pb = static_cast<const T *>(b.data);
  R *po = static_cast<R *>(out.data);
  if constexpr (Op == BinaryOp::Div && std::is_integral_v<T>) {
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

template <BinaryOp Op>
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

template <BinaryOp Op> void launchBinary(E &e, const Instr &i) {
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
    {"abs", launchUnary<UnaryOp::Abs>},
    {"add", launchBinary<BinaryOp::Add>},
    {"and", launchBinary<BinaryOp::And>},
    {"cast", launchCast},
    {"copy", launchCopy},
    {"cos", launchUnary<UnaryOp::Cos>},
    {"div", launchBinary<BinaryOp::Div>},
    {"equal", launchBinary<BinaryOp::Equal>},
    {"erf", launchUnary<UnaryOp::Erf>},
    {"exp", launchUnary<UnaryOp::Exp>},
    {"fill", launchFill},
    {"flatten", launchCopy},
    {"gelu", launchGelu},
    {"greater", launchBinary<BinaryOp::Greater>},
    {"less", launchBinary<BinaryOp::Less>},
    {"log", launchUnary<UnaryOp::Log>},
    {"max", launchBinary<BinaryOp::Max>},
    {"min", launchBinary<BinaryOp::Min>},
    {"mul", launchBinary<BinaryOp::Mul>},
    {"neg", launchUnary<UnaryOp::Neg>},
    {"not", launchUnary<UnaryOp::Not>},
    {"or", launchBinary<BinaryOp::Or>},
    {"pow", launchBinary<BinaryOp::Pow>},
    {"reciprocal", launchUnary<UnaryOp::Reciprocal>},
    {"relu", launchUnary<UnaryOp::Relu>},
    {"reshape", launchCopy},
    {"sigmoid", launchUnary<UnaryOp::Sigmoid>},
    {"sin", launchUnary<UnaryOp::Sin>},
    {"sqrt", launchUnary<UnaryOp::Sqrt>},
    {"squeeze", launchCopy},
    {"sub", launchBinary<BinaryOp::Sub>},
    {"tanh", launchUnary<UnaryOp::Tanh>},
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
  runBinary<BinaryOp::Add, float>(stream, "add", a, b, out);
}

} // namespace bmrt::cuda
