//===- Init.h - step-0 weights generated from a seed ------------*- C++ -*-===//
//
// A graph-only model's step-0 parameters are described, not stored: per
// tensor a spec (name, dtype, shape and a kind: ones, zeros, normal with a
// standard deviation, or a causal mask) and one seed for the whole model.
// `bmc compile --init random` fills params.safetensors with these values;
// `--weights-at-load` writes the specs (init.json) instead and the trainer
// and bmrt-forward generate them when they load the folder. Both go
// through fillInitBox, so the two give the same bits.
//
// Every element is a pure function of (seed, tensor name, its flat index
// in the tensor): any box of a tensor (a rank's shard under tp or ZeRO)
// can be generated alone, in any order and in parallel, and is the same
// box of the whole tensor one rank would generate.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_INIT_H
#define BMRT_INIT_H

#include "bmrt/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace bmrt {

enum class InitKind { Ones, Zeros, Normal, CausalMask };

/// "ones", "zeros", "normal", "causal_mask".
const char *nameOf(InitKind kind);

/// How one parameter tensor starts.
struct InitSpec {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  InitKind kind = InitKind::Zeros;
  /// The standard deviation of InitKind::Normal (mean 0).
  double stddev = 0.0;
};

/// Every parameter's spec and the seed they are drawn from.
struct InitPlan {
  uint64_t seed = 1;
  std::vector<InitSpec> tensors;
};

/// The spec's own problem (an f32 kind on another dtype, a causal mask
/// that is not boolean [..., n, n], a negative or non-finite stddev), or
/// an empty string.
std::string checkInitSpec(const InitSpec &spec);

/// init.json's text: {"format": 1, "seed": N, "tensors": [{"name", "dtype",
/// "shape", "kind"[, "stddev"]}, ...]}. Doubles print so that they read back
/// to the same bits.
std::string printInitPlan(const InitPlan &plan);

/// Parses init.json's text; throws one line naming `where` and the tensor
/// on anything malformed (an unknown kind or dtype, a bad shape, a spec
/// checkInitSpec refuses).
InitPlan parseInitPlan(const std::string &text, const std::string &where);

/// Reads and parses the file at `path`.
InitPlan readInitPlan(const std::string &path);

/// The spec called `name`, or null.
const InitSpec *findInitSpec(const InitPlan &plan, const std::string &name);

/// Fills `out` (row-major, of shape `box`, spec.dtype elements) with the
/// box at `offsets` of the tensor `spec` describes, seen in the shape
/// `global` (spec.shape, or a factored view of it with the same element
/// order). Throws bmrt::Error unless the box lies inside `global`.
void fillInitBox(const InitSpec &spec, uint64_t seed, const Shape &global,
                 const Shape &offsets, const Shape &box, void *out);

/// The whole tensor: fillInitBox over spec.shape into `out`
/// (numElements(spec.shape) * sizeOf(spec.dtype) bytes).
void fillInit(const InitSpec &spec, uint64_t seed, void *out);

/// The random numbers under InitKind::Normal, for tests: the key of a
/// tensor, and its element `index` as a standard normal (mean 0, variance
/// 1) before scaling by the stddev.
uint64_t initTensorKey(uint64_t seed, const std::string &name);
double initStandardNormal(uint64_t key, uint64_t index);

} // namespace bmrt

#endif // BMRT_INIT_H
