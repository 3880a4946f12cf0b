//===- ScatterReduction.h - how scatter_elements combines -------*- C++ -*-===//
//
// Shared by program/Verify.cpp and the backends' scatter_elements kernels
// (runtime/cpu/DataMovementKernels.cpp, runtime/cuda/DataMovementKernels.cu):
// the reductions by name, and what each makes of a target and an update. The
// combination runs inside CUDA kernels too (their compare-and-swap loops),
// hence BMRT_HOST_DEVICE: both backends then agree on NaNs and overflow.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_SCATTERREDUCTION_H
#define BMRT_SCATTERREDUCTION_H

#include "bmrt/Error.h"
#include "bmrt/HostDevice.h"
#include "bmrt/Program.h"

#include <string>
#include <type_traits>

namespace bmrt {

/// Alphabetical. None writes the update; the others combine it with the
/// target (and need F32, I64 or I32 elements).
enum class ScatterReduction { Add, Max, Min, Mul, None };

/// The attribute's value when a program leaves it out (ONNX's default).
inline constexpr const char *kDefaultScatterReduction = "none";

/// "add", "max", "min", "mul", "none".
inline const char *nameOf(ScatterReduction reduction) {
  switch (reduction) {
  case ScatterReduction::Add:
    return "add";
  case ScatterReduction::Max:
    return "max";
  case ScatterReduction::Min:
    return "min";
  case ScatterReduction::Mul:
    return "mul";
  case ScatterReduction::None:
    break;
  }
  return "none";
}

/// The inverse of nameOf; false for an unknown name.
inline bool parseScatterReduction(const std::string &name,
                                  ScatterReduction &reduction) {
  for (ScatterReduction r :
       {ScatterReduction::Add, ScatterReduction::Max, ScatterReduction::Min,
        ScatterReduction::Mul, ScatterReduction::None})
    if (name == nameOf(r)) {
      reduction = r;
      return true;
    }
  return false;
}

/// scatter_elements' `reduction`, ONNX's "none" where the program leaves
/// it out (program/Verify.cpp has refused unknown names with their op).
inline ScatterReduction scatterReductionOf(const Instr &i) {
  std::string name = i.attrs.count("reduction") ? i.getString("reduction")
                                                : kDefaultScatterReduction;
  ScatterReduction reduction;
  BMRT_CHECK(parseScatterReduction(name, reduction),
             "scatter_elements has no reduction '" + name + "'");
  return reduction;
}

/// `target` combined with `update` by R (not None). Max and min let a NaN on
/// either side win, as numpy's maximum and torch's amax do, so that the
/// result does not depend on the order of the updates. Integers add and
/// multiply in unsigned arithmetic: overflow wraps instead of being
/// undefined, and wrapped sums and products are order-independent too.
template <ScatterReduction R, typename T>
BMRT_HOST_DEVICE T combineScatter(T target, T update) {
  if constexpr (R == ScatterReduction::Max)
    return (update > target || update != update) ? update : target;
  else if constexpr (R == ScatterReduction::Min)
    return (update < target || update != update) ? update : target;
  else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    U a = static_cast<U>(target), b = static_cast<U>(update);
    return static_cast<T>(R == ScatterReduction::Add ? U(a + b) : U(a * b));
  } else
    return R == ScatterReduction::Add ? target + update : target * update;
}

} // namespace bmrt

#endif // BMRT_SCATTERREDUCTION_H
