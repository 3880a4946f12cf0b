//===- AttentionBf16Test.cpp - fused attention on bf16 devices ------------===//
//
// Under the plan's bf16 the CUDA backend runs attention on tensor cores
// (runtime/cuda/AttentionMma.cu): q, kt, v (and, backward, dout) rounded
// to bf16, fp32 accumulation, the probabilities P and the score gradients
// dS rounded to bf16 again before their second products. Its results are
// held to a bound per element derived from the operands, first order in
// the bf16 unit roundoff u = 2^-8 (Tolerance.h), computed here in double:
//  - scores: |dS_ij| <= d_ij = ((1 + u)^2 - 1) |scale| sum_c |q_ic| |k_jc|;
//    with D_i = max_j d_ij, softmax moves each P_ij by at most a factor
//    e^(+-2 D_i), so |dP_ij| <= (e^(2 D_i) - 1) P_ij;
//  - forward: out_ic = sum_j P_ij v_jc with P and v rounded once more:
//    |d out_ic| <= (e^(2 D_i) (1 + u)^2 - 1) sum_j P_ij |v_jc|;
//  - dv_jc = sum_i P_ij dout_ic, the same way;
//  - dS_ij = P_ij (dP_ij - delta_i) with dP = dout v^T from rounded
//    operands (|d dP_ij| <= g_ij = ((1 + u)^2 - 1) sum_c |dout_ic||v_jc|):
//    |d dS_ij| <= (e^(2 D_i) - 1) P_ij |dP_ij - delta_i| + e^(2 D_i) P_ij
//    g_ij, and rounding dS adds u of it;
//  - dq_ic = scale sum_j dS_ij k_jc and dk_jc = scale sum_i dS_ij q_ic:
//    the dS error times |k| (|q|), plus ((1 + u)^2 - 1) |dS| |k| (|q|).
// Each bound adds kReduction for the fp32 sums. A wrong mask, scale, tile
// or transposition moves elements by far more (the shapes are small
// enough that each probability is a visible share of a row).
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include "bmrt/Attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace bmrt::conformance {
namespace {

constexpr double kU = kBf16UnitRoundoff;
constexpr double kTwoRoundings = (1 + kU) * (1 + kU) - 1;

struct Geometry {
  std::string name;
  int64_t batch, s, t, d;
  bool causal;
  /// Each query's place among the keys (a positions operand), if given.
  std::vector<int64_t> positions = {};
};

HostTensor positionsOf(const Geometry &g) {
  return ints(DType::I64, {g.s}, g.positions);
}

/// Two runs of consecutive places, as a rank of balanced context
/// parallelism holds: `n` from `first`, `n` from `second`.
std::vector<int64_t> twoRuns(int64_t first, int64_t second, int64_t n) {
  std::vector<int64_t> all;
  for (int64_t start : {first, second})
    for (int64_t i = 0; i < n; ++i)
      all.push_back(start + i);
  return all;
}

/// Row-major views of one leading index's operands, in double.
struct Operands {
  const HostTensor &q, &kt, &v;
  int64_t b;
  const AttentionShape &a;
  double qAt(int64_t i, int64_t c) const {
    return q.at((b * a.s + i) * a.d + c);
  }
  double kAt(int64_t j, int64_t c) const {
    return kt.at((b * a.d + c) * a.t + j);
  }
  double vAt(int64_t j, int64_t c) const {
    return v.at((b * a.t + j) * a.e + c);
  }
};

/// P [s, t] in double and each query's score bound D_i.
void probabilities(const Operands &x, double scale, std::vector<double> &p,
                   std::vector<double> &scoreBound) {
  const AttentionShape &a = x.a;
  p.assign(a.s * a.t, 0);
  scoreBound.assign(a.s, 0);
  for (int64_t i = 0; i < a.s; ++i) {
    int64_t n = a.visibleKeys(i);
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0, mag = 0;
      for (int64_t c = 0; c < a.d; ++c) {
        dot += x.qAt(i, c) * x.kAt(j, c);
        mag += std::fabs(x.qAt(i, c) * x.kAt(j, c));
      }
      p[i * a.t + j] = scale * dot;
      max = std::max(max, p[i * a.t + j]);
      scoreBound[i] =
          std::max(scoreBound[i], kTwoRoundings * std::fabs(scale) * mag);
    }
    for (int64_t j = 0; j < n; ++j)
      sum += p[i * a.t + j] = std::exp(p[i * a.t + j] - max);
    for (int64_t j = 0; j < n; ++j)
      p[i * a.t + j] /= sum;
  }
}

double reductionSlack(double value) {
  return kReduction.atol + kReduction.rtol * std::fabs(value);
}

/// Checks `got` against `want` within `bound` (plus kReduction), per element.
void expectWithin(const std::string &what, const HostTensor &got,
                  const HostTensor &want, const std::vector<double> &bound) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(bound.size())) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    double error = std::fabs(got.at(i) - want.at(i));
    double allowed = bound[i] + reductionSlack(want.at(i));
    if (!(error <= allowed) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": " << got.at(i)
                    << " against " << want.at(i) << ", allowed " << allowed;
  }
  EXPECT_EQ(bad, 0) << what << ": elements outside the bf16 bound";
}

Case forwardCase(const Geometry &g, float scale) {
  Build b("attention_" + g.name, "attention");
  b.in(uniform({g.batch, g.s, g.d}, 11, -1, 1))
      .in(uniform({g.batch, g.d, g.t}, 12, -1, 1))
      .in(uniform({g.batch, g.t, g.d}, 13, -1, 1));
  if (!g.positions.empty())
    b.in(positionsOf(g));
  return b.out({g.batch, g.s, g.d}).f("scale", scale).i("causal", g.causal);
}

Case gradCase(const Geometry &g, float scale, const Case &forward,
              const HostTensor &out) {
  Build b("attention_grad_" + g.name, "attention_grad");
  b.in(forward.operands[0])
      .in(forward.operands[1])
      .in(forward.operands[2])
      .in(out)
      .in(uniform({g.batch, g.s, g.d}, 14, -1, 1));
  if (!g.positions.empty())
    b.in(positionsOf(g));
  return b.out({g.batch, g.s, g.d})
      .out({g.batch, g.d, g.t})
      .out({g.batch, g.t, g.d})
      .f("scale", scale)
      .i("causal", g.causal);
}

AttentionShape shapeOf(const Geometry &g) {
  AttentionShape a{g.batch, g.s, g.t, g.d, g.d, g.causal};
  if (!g.positions.empty())
    a.positions = g.positions.data();
  return a;
}

/// The forward's bound per element of out (the file's comment).
std::vector<double> forwardBound(const Geometry &g, const Case &c,
                                 float scale) {
  AttentionShape a = shapeOf(g);
  std::vector<double> bound(a.batch * a.s * a.e);
  for (int64_t b = 0; b < a.batch; ++b) {
    Operands x{c.operands[0], c.operands[1], c.operands[2], b, a};
    std::vector<double> p, scoreBound;
    probabilities(x, scale, p, scoreBound);
    for (int64_t i = 0; i < a.s; ++i)
      for (int64_t col = 0; col < a.e; ++col) {
        double weighted = 0;
        for (int64_t j = 0; j < a.t; ++j)
          weighted += p[i * a.t + j] * std::fabs(x.vAt(j, col));
        double factor = std::exp(2 * scoreBound[i]) * (1 + kTwoRoundings) - 1;
        bound[(b * a.s + i) * a.e + col] = factor * weighted;
      }
  }
  return bound;
}

/// The gradients' bounds per element of dq, dkt and dv (the file's comment).
std::vector<std::vector<double>> gradBounds(const Geometry &g, const Case &c,
                                            float scale) {
  AttentionShape a = shapeOf(g);
  const HostTensor &out = c.operands[3], &dout = c.operands[4];
  std::vector<double> dqBound(a.batch * a.s * a.d, 0),
      dkBound(a.batch * a.d * a.t, 0), dvBound(a.batch * a.t * a.e, 0);
  for (int64_t b = 0; b < a.batch; ++b) {
    Operands x{c.operands[0], c.operands[1], c.operands[2], b, a};
    auto doutAt = [&](int64_t i, int64_t col) {
      return dout.at((b * a.s + i) * a.e + col);
    };
    std::vector<double> p, scoreBound;
    probabilities(x, scale, p, scoreBound);
    for (int64_t i = 0; i < a.s; ++i) {
      double grow = std::exp(2 * scoreBound[i]);
      double delta = 0;
      for (int64_t col = 0; col < a.e; ++col)
        delta += doutAt(i, col) * out.at((b * a.s + i) * a.e + col);
      for (int64_t j = 0; j < a.t; ++j) {
        double pij = p[i * a.t + j];
        if (pij == 0)
          continue;
        double dp = 0, dpMag = 0;
        for (int64_t col = 0; col < a.e; ++col) {
          dp += doutAt(i, col) * x.vAt(j, col);
          dpMag += std::fabs(doutAt(i, col) * x.vAt(j, col));
        }
        double ds = pij * (dp - delta);
        double dsError = (grow - 1) * pij * std::fabs(dp - delta) +
                         grow * pij * kTwoRoundings * dpMag;
        dsError += kU * (std::fabs(ds) + dsError);
        for (int64_t col = 0; col < a.e; ++col)
          dvBound[(b * a.t + j) * a.e + col] +=
              (grow * (1 + kTwoRoundings) - 1) * pij *
              std::fabs(doutAt(i, col));
        double perTerm = dsError * (1 + kU) + kTwoRoundings * std::fabs(ds);
        for (int64_t col = 0; col < a.d; ++col) {
          dqBound[(b * a.s + i) * a.d + col] +=
              std::fabs(scale) * perTerm * std::fabs(x.kAt(j, col));
          dkBound[(b * a.d + col) * a.t + j] +=
              std::fabs(scale) * perTerm * std::fabs(x.qAt(i, col));
        }
      }
    }
  }
  return {dqBound, dkBound, dvBound};
}

/// `c` with the operands the kernels round (all but attention_grad's
/// forward output, which only enters delta, in fp32) rounded to bf16 on the
/// host.
Case roundedOperands(Case c) {
  for (size_t k = 0; k < c.operands.size(); ++k) {
    HostTensor &operand = c.operands[k];
    // The forward result is the true one; positions are integers.
    if ((c.op == "attention_grad" && k == 3) || operand.dtype != DType::F32)
      continue;
    auto *values = reinterpret_cast<float *>(operand.bytes.data());
    for (int64_t i = 0; i < operand.size(); ++i)
      values[i] = roundToBf16(values[i]);
  }
  return c;
}

Device &cpuDevice() { return *deviceOf(*findBackend("cpu")); }

const float kScale = 0.125f;

/// The bounds, checked without a GPU: the CPU's fp32 attention of the
/// bf16-rounded operands (what the tensor-core kernels read, less their
/// rounding of P and dS) stays inside them.
class AttentionBf16Bound : public testing::TestWithParam<Geometry> {};

TEST_P(AttentionBf16Bound, CoversOperandRounding) {
  const Geometry &g = GetParam();
  Case forward = forwardCase(g, kScale);
  HostTensor out = runCase(forward, cpuDevice())[0];
  expectWithin("out", runCase(roundedOperands(forward), cpuDevice())[0], out,
               forwardBound(g, forward, kScale));
  Case grad = gradCase(g, kScale, forward, out);
  std::vector<HostTensor> want = runCase(grad, cpuDevice());
  std::vector<HostTensor> got = runCase(roundedOperands(grad), cpuDevice());
  std::vector<std::vector<double>> bounds = gradBounds(g, grad, kScale);
  expectWithin("dq", got[0], want[0], bounds[0]);
  expectWithin("dkt", got[1], want[1], bounds[1]);
  expectWithin("dv", got[2], want[2], bounds[2]);
}

/// The tensor-core kernels on a CUDA device made with bf16 GEMMs.
class AttentionBf16 : public testing::TestWithParam<Geometry> {
protected:
  void SetUp() override {
    const Backend *cuda = findBackend("cuda");
    device = cuda ? deviceOf(*cuda, ContractionPrecision::BF16) : nullptr;
    if (!device)
      GTEST_SKIP() << "no CUDA device here";
  }
  Device *device = nullptr;
};

TEST_P(AttentionBf16, ForwardWithinBound) {
  const Geometry &g = GetParam();
  Case c = forwardCase(g, kScale);
  expectWithin("out", runCase(c, *device)[0], runCase(c, cpuDevice())[0],
               forwardBound(g, c, kScale));
}

TEST_P(AttentionBf16, GradientsWithinBound) {
  const Geometry &g = GetParam();
  Case forward = forwardCase(g, kScale);
  Case c = gradCase(g, kScale, forward, runCase(forward, cpuDevice())[0]);
  std::vector<HostTensor> got = runCase(c, *device);
  std::vector<HostTensor> want = runCase(c, cpuDevice());
  std::vector<std::vector<double>> bounds = gradBounds(g, c, kScale);
  expectWithin("dq", got[0], want[0], bounds[0]);
  expectWithin("dkt", got[1], want[1], bounds[1]);
  expectWithin("dv", got[2], want[2], bounds[2]);
}

// Head dims 64 and 128 (the tensor-core kernels' two); one tile and
// several with ragged ends; causal with as many, more and fewer keys than
// queries. Rows of 20-150 keys keep each probability a visible share.
const auto kShapes =
    testing::Values(Geometry{"s20_d64_causal", 2, 20, 20, 64, true},
                    Geometry{"s130_d64_causal", 1, 130, 130, 64, true},
                    Geometry{"s70_t150_d128", 2, 70, 150, 128, false},
                    Geometry{"s64_t96_d64_causal", 3, 64, 96, 64, true},
                    Geometry{"s100_t40_d128_causal", 1, 100, 40, 128, true},
                    // A context-parallel rank's queries: keys 40..103
                    // of 160.
                    Geometry{"s64_t160_d64_positions", 2, 64, 160, 64, true,
                             twoRuns(40, 72, 32)},
                    // Two mirrored chunks: 0..31 and 128..159.
                    Geometry{"s64_t160_d64_mirrored", 2, 64, 160, 64, true,
                             twoRuns(0, 128, 32)});
std::string nameOf(const testing::TestParamInfo<Geometry> &info) {
  return info.param.name;
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBf16, kShapes, nameOf);
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBf16Bound, kShapes, nameOf);

} // namespace
} // namespace bmrt::conformance
