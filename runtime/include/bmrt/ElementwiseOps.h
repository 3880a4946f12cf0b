//===- ElementwiseOps.h - the elementwise ops of every backend *- C++ -*-===//
//
// Shared by the backends' elementwise kernels (runtime/cpu/Kernels.h and
// ElementwiseKernels.cpp, runtime/cuda/ElementwiseKernels.cu): the unary
// and binary ops by name, and the integer power both must compute alike
// (it runs inside CUDA kernels too, hence BMRT_HOST_DEVICE).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_ELEMENTWISEOPS_H
#define BMRT_ELEMENTWISEOPS_H

#include "bmrt/HostDevice.h"

#include <type_traits>

namespace bmrt {

/// Alphabetical. F32 unless noted.
enum class UnaryOp {
  Abs,        // also I64
  Cos,
  Erf,
  Exp,
  Gelu,       // x * Phi(x), with erf
  GeluTanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  Log,
  Neg,        // also I64
  Not,        // Bool only
  Reciprocal,
  Relu,       // also I64
  Sigmoid,
  Sin,
  Sqrt,
  Tanh,
};

/// Alphabetical.
enum class BinaryOp {
  Add,
  And,     // Bool
  Div,     // I64: truncates toward zero
  Equal,   // -> Bool
  Greater, // -> Bool
  Less,    // -> Bool
  Max,
  Min,
  Mul,
  Or,      // Bool
  Pow,     // F32
  Sub,
};

/// Integer power by squaring; a negative exponent gives the truncated real
/// result (0 unless the base is 1 or -1), as C's integer division would.
template <typename T>
BMRT_HOST_DEVICE T integerPow(T base, T exponent) {
  if (exponent < 0) {
    if (base == 1)
      return 1;
    if (base == -1)
      return (exponent % 2) ? T(-1) : T(1);
    return 0;
  }
  // Unsigned arithmetic: overflow wraps instead of being undefined.
  using U = std::make_unsigned_t<T>;
  U result = 1, factor = static_cast<U>(base);
  for (T e = exponent; e > 0; e >>= 1) {
    if (e & 1)
      result *= factor;
    factor *= factor;
  }
  return static_cast<T>(result);
}

} // namespace bmrt

#endif // BMRT_ELEMENTWISEOPS_H
