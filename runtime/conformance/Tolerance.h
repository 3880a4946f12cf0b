//===- Tolerance.h - how close a backend must come to the CPU ---*- C++ -*-===//
//
// The one place the conformance suite's tolerances are stated. A result
// element passes when
//
//   |got - ref| <= atol + rtol * |ref|
//
// with ref the CPU backend's value. Integer and Bool results are compared
// exactly whatever the case's tolerance: every op on them is exact
// arithmetic (or a copy) on every backend. F32 results use the tolerance of
// the case's op class below, each with the reason it holds. eps is fp32's
// unit roundoff, 2^-24 ~= 6e-8 (an ulp of 1 is 1.2e-7).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CONFORMANCE_TOLERANCE_H
#define BMRT_CONFORMANCE_TOLERANCE_H

namespace bmrt::conformance {

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

/// Copies, gathers, slices, transposes, fills, comparisons, selections
/// (where, max, min, relu, top_k, pools' max) and collectives on one rank:
/// they move or pick values and compute none, so the bits must match.
inline constexpr Tolerance kExact{0, 0};

/// One correctly rounded IEEE operation per element (add, sub, mul, div,
/// neg, abs, casts, cumsum's first element): the same bits, except that a
/// backend may contract a*b+c into an FMA or flush denormals; 2 ulp
/// relative covers the single rounding that differs, and the cases keep
/// operands away from denormals.
inline constexpr Tolerance kArithmetic{0, 2.4e-7};

/// Products of n factors taken in different orders (scatter_elements' mul
/// with repeated indices: the CPU multiplies each target's updates in
/// index order, CUDA's atomics in whatever order the threads arrive). Each
/// of the n - 1 multiplications rounds by at most eps relative, and a
/// product's relative errors add, so two orders differ by at most
/// 2 (n - 1) eps relative. The cases keep n <= 8 factors away from 0 and
/// from denormals: 14 eps = 8.4e-7, under rtol 1e-6.
inline constexpr Tolerance kProduct{0, 1e-6};

/// Transcendentals and their compositions (exp, log, sin, cos, tanh, erf,
/// sigmoid, sqrt, reciprocal, pow, gelu, unary_grad): libm (glibc, ~1 ulp)
/// and CUDA's math library (<= 2 ulp for expf, logf, sinf, erff, tanhf;
/// powf 4 ulp) may each be a few ulp off the true value, so they differ by
/// up to ~6 ulp relative: rtol 2e-6 (16 ulp) leaves room for the one or two
/// further roundings of the composite ops. atol 1e-6 covers results that
/// are a small difference of O(1) terms (gelu's 1 + erf(x / sqrt 2) for
/// x < 0, sigmoid' = s (1 - s), sin near its zeros), where an ulp of the
/// O(1) intermediate (1.2e-7) is carried into a small result.
inline constexpr Tolerance kTranscendental{1e-6, 2e-6};

/// Sums over n terms (GEMMs, convolutions, einsum, reductions, cumsum,
/// norms, softmax, losses, pools' averages, the gradients of all of these):
/// backends sum in different orders (blocked GEMMs, tree reductions,
/// atomics). Each addition rounds by at most eps times its partial sum,
/// and the partial sums of signed random terms grow like sqrt(k) * rms, so
/// two orders differ by about sqrt(n) * eps * sqrt(n) * rms = n * eps *
/// rms (the worst case, every rounding in one direction over sums of one
/// sign, is 2 n eps sum|terms|). The cases keep n <= 64 and terms of
/// magnitude <= 1: n * eps * rms <= 64 * 6e-8 * 1 ~= 4e-6. That is an
/// absolute error, not relative to ref (a signed sum may cancel to near
/// zero), hence atol 1e-5 (2.5x over it); rtol 1e-5 covers results of
/// sums of one sign (norms' variances, softmax denominators, losses),
/// whose worst case n * eps = 4e-6 is relative.
inline constexpr Tolerance kReduction{1e-5, 1e-5};

/// GEMMs with bf16 inputs (a device made with ContractionPrecision::BF16:
/// the cuda_bf16_<case> runs) against the CPU's fp32, on top of the case's
/// own tolerance (kReduction). bf16 keeps 8 significant bits (7 stored),
/// so its values in [1, 2) are 2^-7 apart and rounding to nearest even
/// moves each operand by at most half that: u = 2^-8 of itself (the unit
/// roundoff 2^-p of p = 8 bits, as fp32's is 2^-24; 2^-9 would be half
/// too tight, and Bf16Bound.RoundsToNearestEven sees operands of the cases
/// moved by more than 2^-9). A product of two rounded operands is
/// a b (1 + d1)(1 + d2), off by at most (1 + u)^2 - 1 = 2^-7 + 2^-16 of
/// |a b|; it is exact in fp32 (16 significant bits), and the fp32
/// accumulation adds only what kReduction already covers. So each element
/// of a GEMM's result is off by at most
///
///   ((1 + u)^r - 1) * sum_k |a_ik| |b_kj|,   r = 2,
///
/// a bound per element, computed from the operands: the case run on the
/// CPU with every operand replaced by its magnitude (magnitudeCase in
/// Runner.h: |A| . |B|, with gemm's c and conv's bias zeroed and alpha
/// made |alpha|). A blanket rtol would be wrong both ways: too loose where
/// the terms agree in sign, and too tight where they cancel (|ref| much
/// below sum |a b|). An einsum of n inputs rounds each input once and each
/// of the n - 2 intermediates once on its way into the next GEMM: r = 2n -
/// 2 roundings on every term of sum |a| |b| |c| ... (to first order; the
/// intermediates' own fp32 sums stay under kReduction).
inline constexpr double kBf16UnitRoundoff = 1.0 / 256; // 2^-8

/// (1 + u)^r - 1 for the r = 2n - 2 roundings of a GEMM chain over n
/// inputs (0 for n < 2: no GEMM).
inline double bf16GemmFactor(int gemmInputs) {
  double factor = 1;
  for (int r = 0; r < 2 * gemmInputs - 2; ++r)
    factor *= 1 + kBf16UnitRoundoff;
  return factor - 1;
}

} // namespace bmrt::conformance

#endif // BMRT_CONFORMANCE_TOLERANCE_H
