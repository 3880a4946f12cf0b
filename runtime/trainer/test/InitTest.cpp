//===- InitTest.cpp - step-0 weights generated from a seed ----------------===//

#include "bmrt/Init.h"
#include "bmrt/Box.h"
#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace bmrt;

namespace {

InitSpec normal(const std::string &name, Shape shape, double stddev = 0.02) {
  InitSpec spec;
  spec.name = name;
  spec.shape = std::move(shape);
  spec.kind = InitKind::Normal;
  spec.stddev = stddev;
  return spec;
}

std::vector<float> whole(const InitSpec &spec, uint64_t seed) {
  std::vector<float> out(numElements(spec.shape));
  fillInit(spec, seed, out.data());
  return out;
}

TEST(Init, SameSeedAndNameGiveTheSameValues) {
  InitSpec w = normal("h.0.attn.qkv.weight", {16, 48});
  EXPECT_EQ(whole(w, 7), whole(w, 7));
}

TEST(Init, AnotherSeedOrNameGivesOtherValues) {
  InitSpec w = normal("h.0.attn.qkv.weight", {16, 48});
  InitSpec v = normal("h.1.attn.qkv.weight", {16, 48});
  std::vector<float> base = whole(w, 7);
  for (const std::vector<float> &other : {whole(w, 8), whole(v, 7)}) {
    size_t equal = 0;
    for (size_t i = 0; i < base.size(); ++i)
      equal += base[i] == other[i];
    EXPECT_EQ(equal, 0u); // 768 floats of N(0, 0.02): no coincidences
  }
}

// The generator is specified bit for bit (core/Init.cpp): these values must
// not change with the machine, the compiler or the order of generation.
TEST(Init, ValuesArePinned) {
  uint64_t key = initTensorKey(1, "wte.weight");
  EXPECT_EQ(key, 0x277625f5c7abe400ull);
  EXPECT_EQ(initStandardNormal(key, 0), 0x1.3586c337b3635p-3);
  EXPECT_EQ(initStandardNormal(key, 1), 0x1.81a95cf275712p+0);
  EXPECT_EQ(initStandardNormal(key, 1000000007), -0x1.9ee50ae69c85fp+0);
}

// n = 10^6 standard normals: the sample mean has standard error 1e-3, the
// variance sqrt(2 / n) = 1.4e-3, the fourth moment sqrt(96 / n) = 9.8e-3,
// the share within one sigma sqrt(p (1 - p) / n) = 4.7e-4. Each bound is
// five standard errors, so a correct generator fails with p < 1e-6.
TEST(Init, NormalsHaveTheirMoments) {
  constexpr int64_t n = 1000000;
  uint64_t key = initTensorKey(3, "h.3.mlp.fc.weight");
  double sum = 0, sum2 = 0, sum4 = 0;
  int64_t within = 0;
  for (int64_t i = 0; i < n; ++i) {
    double z = initStandardNormal(key, i);
    sum += z;
    sum2 += z * z;
    sum4 += z * z * z * z;
    within += std::fabs(z) < 1.0;
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_LT(std::fabs(mean), 5e-3);
  EXPECT_LT(std::fabs(var - 1.0), 5 * std::sqrt(2.0 / n));
  EXPECT_LT(std::fabs(sum4 / n - 3.0), 5 * std::sqrt(96.0 / n));
  EXPECT_LT(std::fabs(double(within) / n - 0.682689492), 5 * 4.66e-4);
}

TEST(Init, ScaledByTheStddev) {
  InitSpec w = normal("w", {1000, 100}, 0.02);
  std::vector<float> v = whole(w, 1);
  double sum2 = 0;
  for (float x : v)
    sum2 += double(x) * x;
  // sqrt of the mean square, n = 10^5: standard error 0.02 / sqrt(2 n).
  EXPECT_NEAR(std::sqrt(sum2 / v.size()), 0.02, 5 * 0.02 / std::sqrt(2e5));
}

// A rank's box, generated alone, is that box of the whole tensor, also
// when the program sees the tensor in a factored view.
TEST(Init, ABoxIsTheBoxOfTheWhole) {
  InitSpec w = normal("h.0.attn.qkv.weight", {8, 6, 10});
  std::vector<float> all = whole(w, 5);
  Shape offsets = {2, 3, 4}, box = {4, 2, 5};
  std::vector<float> expected(numElements(box)), got(numElements(box));
  copyBox(all.data(), w.shape, offsets, expected.data(), box, Shape(3, 0), box,
          sizeof(float));
  fillInitBox(w, 5, w.shape, offsets, box, got.data());
  EXPECT_EQ(got, expected);

  Shape factored = {8, 2, 3, 10};
  std::vector<float> viewed(numElements(factored));
  fillInitBox(w, 5, factored, Shape(4, 0), factored, viewed.data());
  EXPECT_EQ(viewed, all);
}

TEST(Init, OnesZerosAndCausalMasks) {
  InitSpec ones{"ln.weight", DType::F32, {5}, InitKind::Ones, 0};
  InitSpec zeros{"ln.bias", DType::F32, {5}, InitKind::Zeros, 0};
  EXPECT_EQ(whole(ones, 1), std::vector<float>(5, 1.0f));
  EXPECT_EQ(whole(zeros, 1), std::vector<float>(5, 0.0f));
  InitSpec mask{"attn.bias", DType::Bool, {1, 3, 3}, InitKind::CausalMask, 0};
  std::vector<uint8_t> m(9);
  fillInit(mask, 1, m.data());
  EXPECT_EQ(m, (std::vector<uint8_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
}

TEST(Init, PlansReadBackToTheSameBits) {
  InitPlan plan;
  plan.seed = 18446744073709551557ull;
  plan.tensors.push_back(
      normal("conv.weight", {4, 3, 3, 3}, std::sqrt(2.0 / 27.0)));
  plan.tensors.push_back({"ln.weight", DType::F32, {4}, InitKind::Ones, 0});
  plan.tensors.push_back(
      {"attn.bias", DType::Bool, {1, 1, 4, 4}, InitKind::CausalMask, 0});
  InitPlan back = parseInitPlan(printInitPlan(plan), "'init.json'");
  ASSERT_EQ(back.tensors.size(), 3u);
  EXPECT_EQ(back.seed, plan.seed);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.tensors[i].name, plan.tensors[i].name);
    EXPECT_EQ(back.tensors[i].dtype, plan.tensors[i].dtype);
    EXPECT_EQ(back.tensors[i].shape, plan.tensors[i].shape);
    EXPECT_EQ(back.tensors[i].kind, plan.tensors[i].kind);
    EXPECT_EQ(std::memcmp(&back.tensors[i].stddev, &plan.tensors[i].stddev,
                          sizeof(double)),
              0);
  }
}

std::string parseError(const std::string &text) {
  try {
    parseInitPlan(text, "'init.json'");
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(Init, BadSpecsAreOneLineNamingTheTensor) {
  auto with = [](const std::string &tensor) {
    return R"({"format": 1, "seed": 1, "tensors": [)" + tensor + "]}";
  };
  EXPECT_EQ(parseError(with(R"({"name": "w", "dtype": "f32", "shape": [2],
                                 "kind": "uniform"})")),
            "'init.json': 'w' has kind 'uniform'; expected ones, zeros, "
            "normal or causal_mask");
  EXPECT_EQ(parseError(with(R"({"name": "w", "dtype": "f32", "shape": [2],
                                 "kind": "normal"})")),
            "'init.json': 'w' is 'normal' without a numeric \"stddev\"");
  EXPECT_EQ(parseError(with(R"({"name": "m", "dtype": "i1", "shape": [2, 3],
                                 "kind": "causal_mask"})")),
            "'init.json': 'm' is a causal mask of i1[2,3]; a causal mask is "
            "i1[..., n, n]");
  EXPECT_EQ(parseError(with(R"({"name": "w", "dtype": "i64", "shape": [2],
                                 "kind": "ones"})")),
            "'init.json': 'w' is i64 but 'ones' fills f32 tensors");
  EXPECT_EQ(parseError(with(R"({"name": "w", "dtype": "f32", "shape": [-2],
                                 "kind": "ones"})")),
            "'init.json': 'w' has a shape entry that is not a non-negative "
            "integer: -2");
  EXPECT_EQ(parseError(R"({"format": 1, "tensors": []})"),
            "'init.json' has no \"seed\" (a non-negative integer)");
  EXPECT_EQ(parseError("{"), "'init.json' is not valid JSON");
}

} // namespace
