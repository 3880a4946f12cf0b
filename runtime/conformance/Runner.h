//===- Runner.h - one-instruction cases run on a device ---------*- C++ -*-===//
//
// A conformance case is one instruction of the step program: the op, its
// attributes, its operands given on the host (seeded random data, kept
// away from the op's kinks and ties) and its results' element types and
// shapes. runCase builds the one-instruction program (operands as input
// slots, results as its outputs), loads it with an Executor (which runs
// verifyProgram first), copies the operands in, runs it and copies the
// results out. Collective cases run on a one-rank mesh with the local
// communicator: their chunks still move through the backend's copies.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CONFORMANCE_RUNNER_H
#define BMRT_CONFORMANCE_RUNNER_H

#include "Tolerance.h"

#include "bmrt/Backend.h"
#include "bmrt/Device.h"
#include "bmrt/Program.h"
#include "bmrt/SingleOp.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace bmrt::conformance {

/// A tensor in host memory, or an absent optional operand.
struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<uint8_t> bytes;
  bool absent = false;

  int64_t size() const { return numElements(shape); }
  /// Element i as a double (F32, I64, I32 or Bool).
  double at(int64_t i) const;
};

/// Seeded data: the same bytes on every machine (mt19937 is specified
/// exactly; the conversion to floats is ours, not the library's).
HostTensor uniform(Shape shape, uint32_t seed, float lo = -1, float hi = 1);
/// Magnitudes in [lo, hi] with random signs: away from 0 (relu's and
/// abs' kinks, division by ~0).
HostTensor awayFromZero(Shape shape, uint32_t seed, float lo = 0.1f,
                        float hi = 1);
/// Integers in [lo, hi].
HostTensor randomInts(DType dtype, Shape shape, uint32_t seed, int64_t lo,
                      int64_t hi);
HostTensor randomBools(Shape shape, uint32_t seed);
/// Given values.
HostTensor floats(Shape shape, const std::vector<float> &values);
HostTensor ints(DType dtype, Shape shape, const std::vector<int64_t> &values);
/// An optional operand left out.
HostTensor absent();

/// What the CPU's results must satisfy, checked with EXPECT_* (a cheap
/// invariant of the op: softmax rows sum to 1, top_k's values are sorted).
using Invariant = std::function<void(const std::vector<HostTensor> &operands,
                                     const std::vector<HostTensor> &results)>;

struct Case {
  /// Unique, [a-z0-9_], starting with the op: "matmul_batched".
  std::string name;
  std::string op;
  std::map<std::string, Attr> attrs;
  std::vector<HostTensor> operands;
  /// Element types and shapes of the results.
  std::vector<std::pair<DType, Shape>> results;
  /// For F32 results (Tolerance.h); others are compared exactly.
  Tolerance tolerance = kExact;
  /// Runs on a one-rank mesh with the executor's collectives.
  bool collective = false;
  /// The operands that meet in the case's GEMMs, its first ones (2 for
  /// matmul, gemm and the convolutions, n for an einsum of n inputs; 0: no
  /// GEMM). Cases with 2 or more also run on bf16 devices (cuda_bf16_...),
  /// within bf16GemmFactor (Tolerance.h) of |A| . |B| beyond `tolerance`.
  int gemmInputs = 0;
  Invariant invariant;
};

/// Builds a Case: `Build("gemm_bias", "gemm").in(a).in(b).f("alpha", 1)`.
class Build {
public:
  Build(std::string name, std::string op);
  Build &in(HostTensor operand);
  Build &out(DType dtype, Shape shape);
  Build &out(Shape shape) { return out(DType::F32, std::move(shape)); }
  Build &i(const std::string &name, int64_t value);
  Build &f(const std::string &name, double value);
  Build &ints(const std::string &name, std::vector<int64_t> values);
  Build &s(const std::string &name, std::string value);
  Build &tol(Tolerance tolerance);
  /// Its first `count` operands meet in GEMMs (Case::gemmInputs).
  Build &gemmInputs(int count);
  /// A collective: axes="tp" on a one-rank mesh.
  Build &collective();
  Build &check(Invariant invariant);
  operator Case() const { return c; }

private:
  Case c;
};

/// The instruction of `c`, for bmrt/SingleOp.h.
OpSignature signatureOf(const Case &c);

/// Runs `c` on `device` and returns its results in host memory. Throws
/// bmrt::Error where the program does not verify or a kernel fails.
std::vector<HostTensor> runCase(const Case &c, Device &device);

/// The device of `backend` whose GEMMs read their operands in
/// `precision`, created once per process (null when the backend has no
/// device here).
Device *deviceOf(const Backend &backend,
                 ContractionPrecision precision = ContractionPrecision::F32);

/// `c` with every F32 operand replaced by its magnitude, gemm's c and
/// conv's bias (the operands after the GEMM's) by zeros and gemm's alpha by
/// |alpha|: run on the CPU, each result element is sum |a_ik| |b_kj| (times
/// |alpha|), the scale of the bf16 bound (Tolerance.h).
Case magnitudeCase(const Case &c);

/// x rounded to the nearest bf16 (ties to even), as __float2bfloat16_rn;
/// NaN stays NaN.
float roundToBf16(float x);
/// `c` with its GEMM operands (the first gemmInputs) rounded to bf16 on the
/// host: the CPU running it computes what a bf16-input GEMM with fp32
/// accumulation does, up to the order of its sums.
Case bf16OperandsCase(const Case &c);

/// Every case, by name.
const std::vector<Case> &allCases();

// The case tables, one per op family (Cases*.cpp), alphabetical.
std::vector<Case> attentionCases();
std::vector<Case> collectiveCases();
std::vector<Case> contractionCases();
std::vector<Case> dataMovementCases();
std::vector<Case> elementwiseCases();
std::vector<Case> lossCases();
std::vector<Case> normCases();
std::vector<Case> poolCases();
std::vector<Case> reductionCases();

} // namespace bmrt::conformance

#endif // BMRT_CONFORMANCE_RUNNER_H
