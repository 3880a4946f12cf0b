//===- AttentionKernelsTest.cpp - fused attention on the CPU --------------===//
//
// The forward against a double-precision loop written from the definition
// (softmax over the keys each query sees, then the weighted values), and the
// gradient against central finite differences of the forward, for causal
// masks with as many, more and fewer keys than queries.
//
//===----------------------------------------------------------------------===//

#include "KernelTestSupport.h"

#include "bmrt/Attention.h"

namespace bmrt::test {
namespace {

struct Geometry {
  int64_t batch, s, t, d, e;
  bool causal;
};

Owned reference(const Geometry &g, const Owned &q, const Owned &kt,
                const Owned &v, double scale) {
  Owned out(DType::F32, {g.batch, g.s, g.e});
  AttentionShape a{g.batch, g.s, g.t, g.d, g.e, g.causal};
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.s; ++i) {
      int64_t n = a.visibleKeys(i);
      std::vector<double> p(n);
      double max = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < g.d; ++c)
          dot += double(q.view.f32()[(b * g.s + i) * g.d + c]) *
                 kt.view.f32()[(b * g.d + c) * g.t + j];
        p[j] = scale * dot;
        max = std::max(max, p[j]);
      }
      for (double &x : p)
        sum += x = std::exp(x - max);
      for (int64_t c = 0; c < g.e; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j)
          acc += p[j] / sum * v.view.f32()[(b * g.t + j) * g.e + c];
        out.f((b * g.s + i) * g.e + c) = static_cast<float>(acc);
      }
    }
  return out;
}

class AttentionKernel : public testing::TestWithParam<Geometry> {};

TEST_P(AttentionKernel, ForwardMatchesDefinition) {
  Geometry g = GetParam();
  Owned q = randomF32({g.batch, g.s, g.d}, 1),
        kt = randomF32({g.batch, g.d, g.t}, 2);
  Owned v = randomF32({g.batch, g.t, g.e}, 3),
        out(DType::F32, {g.batch, g.s, g.e});
  cpu::attention(cpuStream(), q.view, kt.view, v.view, out.view, 0.6f,
                 g.causal);
  // Softmax-weighted means of values in [-1, 1] over at most 9 keys, in
  // fp32 against double: a few ulps of 1.
  expectClose(out, reference(g, q, kt, v, 0.6f), 1e-6);
  // A query that sees no key (fewer keys than queries) gets zeros.
  AttentionShape a{g.batch, g.s, g.t, g.d, g.e, g.causal};
  for (int64_t i = 0; i < g.s; ++i)
    if (a.visibleKeys(i) == 0)
      for (int64_t c = 0; c < g.e; ++c)
        EXPECT_EQ(out.f(i * g.e + c), 0.f) << "query " << i;
}

TEST_P(AttentionKernel, GradientMatchesFiniteDifferences) {
  Geometry g = GetParam();
  Owned q = randomF32({g.batch, g.s, g.d}, 4),
        kt = randomF32({g.batch, g.d, g.t}, 5);
  Owned v = randomF32({g.batch, g.t, g.e}, 6),
        w = randomF32({g.batch, g.s, g.e}, 7);
  Owned out(DType::F32, {g.batch, g.s, g.e});
  Owned dq(DType::F32, q.view.shape), dkt(DType::F32, kt.view.shape),
      dv(DType::F32, v.view.shape);
  const float scale = 0.8f;
  cpu::attention(cpuStream(), q.view, kt.view, v.view, out.view, scale,
                 g.causal);
  cpu::attentionGrad(cpuStream(), q.view, kt.view, v.view, out.view, w.view,
                     dq.view, dkt.view, dv.view, scale, g.causal);
  auto forward = [&](const Owned &q1, const Owned &k1, const Owned &v1) {
    Owned y(DType::F32, {g.batch, g.s, g.e});
    cpu::attention(cpuStream(), q1.view, k1.view, v1.view, y.view, scale,
                   g.causal);
    return y;
  };
  expectGradientMatches([&](const Owned &x) { return forward(x, kt, v); }, q, w,
                        dq);
  expectGradientMatches([&](const Owned &x) { return forward(q, x, v); }, kt, w,
                        dkt);
  expectGradientMatches([&](const Owned &x) { return forward(q, kt, x); }, v, w,
                        dv);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernel,
                         testing::Values(Geometry{2, 4, 4, 3, 3, false},
                                         Geometry{2, 5, 5, 4, 2, true},
                                         Geometry{1, 3, 7, 2, 5, true},
                                         Geometry{2, 6, 3, 3, 4, true},
                                         Geometry{3, 1, 9, 4, 4, false}),
                         [](const testing::TestParamInfo<Geometry> &info) {
                           const Geometry &g = info.param;
                           return "s" + std::to_string(g.s) + "t" +
                                  std::to_string(g.t) + "d" +
                                  std::to_string(g.d) + "e" +
                                  std::to_string(g.e) +
                                  (g.causal ? "causal" : "");
                         });

TEST(AttentionKernelPositions, DecreasingPositionsAreOneLineError) {
  // Each query's keys must be a prefix of the next one's: positions that
  // go back are refused, not computed with a wrong mask.
  Owned q = randomF32({1, 3, 4}, 1), kt = randomF32({1, 4, 6}, 2);
  Owned v = randomF32({1, 6, 4}, 3), out(DType::F32, {1, 3, 4});
  Owned positions = i64({3}, {4, 2, 5});
  try {
    cpu::attention(cpuStream(), q.view, kt.view, v.view, out.view, 0.5f, true,
                   &positions.view);
    FAIL() << "decreasing positions were accepted";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("positions decrease"),
              std::string::npos)
        << error.what();
  }
}

} // namespace
} // namespace bmrt::test
