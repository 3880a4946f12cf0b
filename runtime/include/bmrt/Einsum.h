//===- Einsum.h - einsum equations and their contraction plan ---*- C++ -*-===//
//
// The host-side half of einsum, shared by every backend's kernel
// (runtime/cpu/ContractionKernels.cpp, runtime/cuda/ContractionKernels.cu)
// and the program verifier (runtime/program/Verify.cpp), so that all three
// read an equation the same way and the backends plan the same GEMMs:
//  - the equation's parse (numpy's implicit output included);
//  - the strided walk that reads an operand as a tensor over other letters
//    (a transpose, a diagonal where a letter repeats, a sum over letters
//    left out);
//  - the plan of one pairwise contraction: which letters are the batched
//    GEMM's batch, M, N and K, and which operand is read as stored.
// Backends contract left to right and run the walks and GEMMs themselves.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_EINSUM_H
#define BMRT_EINSUM_H

#include "bmrt/Gemm.h"
#include "bmrt/Tensor.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace bmrt::einsum {

/// The letters of each input and of the output.
struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

/// Splits `text` without judging it: spaces dropped, inputs split at ',',
/// the output after "->" or (without one) numpy's implicit output, the
/// letters used once in ASCII order. The verifier reports its own errors.
Equation splitEquation(const std::string &text);

/// a-z and A-Z: the letters an equation may use (no ellipsis).
bool isLetter(char c);

/// splitEquation, then the kernels' checks (bmrt::Error): `numInputs`
/// inputs, letters only, output letters that do not repeat.
Equation parseEquation(const std::string &text, size_t numInputs);

/// The extent of every letter, indexed by the letter.
using Extents = std::array<int64_t, 128>;

/// An operand: row-major data (in the backend's memory) with one letter per
/// dim; a letter repeated within an input means its diagonal.
struct Operand {
  const float *data = nullptr;
  std::string letters;
  Shape shape;
};

/// The inputs as operands of `eq`, and every letter's extent in `extents`.
/// Throws bmrt::Error where an input's rank is not its letter count or an
/// output letter is in no input.
std::vector<Operand> bindOperands(const std::string &text, const Equation &eq,
                                  const std::vector<TensorView> &inputs,
                                  Extents &extents);

bool has(const std::string &letters, char c);
/// `letters` without repeats, in first-seen order.
std::string uniqueLetters(const std::string &letters);
/// The product of the letters' extents.
int64_t extentOf(const std::string &letters, const Extents &extents);

/// What the running result must keep after input `input` joins it: the
/// output's letters, then those a later input still needs.
std::string keptAfter(const Equation &eq, size_t input);

/// One axis of a strided walk: its extent and its step in the source.
struct Axis {
  int64_t extent;
  int64_t stride;
};

/// dst (contiguous over `kept`, in order) = the sum over `summed` of src.
struct Walk {
  std::vector<Axis> kept, summed;
};

/// The walk reading `op` as the tensor with dims `order` (unique letters),
/// summing its other letters away; a letter's stride is the sum over its
/// dims, so a repeated letter walks the diagonal.
Walk walkFor(const Operand &op, const std::string &order,
             const Extents &extents);

/// One contraction of a pair through a batched GEMM
/// result[batch, m, n] = left[batch, m, k] right[batch, k, n].
struct PairPlan {
  /// Left is b and right is a: the output wants [batch, n-of-b, m-of-a].
  bool swap = false;
  std::string batch, m, n, k;
  /// Left is stored [batch, k, m] / right [batch, n, k]: read transposed.
  bool transLeft = false, transRight = false;

  /// The layouts left and right are gathered into when not read as stored.
  std::string leftOrder() const { return batch + m + k; }
  std::string rightOrder() const { return batch + k + n; }
  std::string result() const { return batch + m + n; }
};

/// Plans contracting `a` and `b` (letters) into a tensor over the letters
/// of `keep` they hold: letters of both in `keep` are the batch, of both
/// not in `keep` K, of one in `keep` M or N; letters of one not in `keep`
/// are summed while gathering. `final`: the result is the einsum's output,
/// over `keep`, so the groups take its order and the operands swap where
/// that writes it in place.
PairPlan planPair(const std::string &a, const std::string &b,
                  const std::string &keep, bool final, const Extents &extents);

/// The strided batch of GEMMs of `p`: operands laid out as the plan
/// gathers them (or as stored, where it reads one transposed), one matrix
/// per batch entry.
GemmShape gemmOf(const PairPlan &p, const Extents &extents);

} // namespace bmrt::einsum

#endif // BMRT_EINSUM_H
