//===- CasesContraction.cpp - matmul, gemm, einsum, convolutions ----------===//
//
// Contractions over at most 64 terms (kReduction's bound, Tolerance.h),
// every layout the kernels distinguish: batched and broadcast batches,
// transposed operands, rank-1 operands, gemm with and without c, grouped
// and dilated convolutions with pads and strides. Each names the operands
// that meet in its GEMMs (gemmInputs), so that it also runs on bf16 devices
// within the bf16 bound (Tolerance.h).
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

namespace bmrt::conformance {
namespace {

Case matmul(const std::string &suffix, Shape a, Shape b, Shape out,
            uint32_t seed, int transA = 0, int transB = 0) {
  Build c("matmul_" + suffix, "matmul");
  c.in(uniform(std::move(a), seed))
      .in(uniform(std::move(b), seed + 1))
      .out(std::move(out))
      .tol(kReduction)
      .gemmInputs(2);
  if (transA)
    c.i("trans_a", 1);
  if (transB)
    c.i("trans_b", 1);
  return c;
}

Case gemm(const std::string &suffix, Shape a, Shape b, HostTensor bias,
          Shape out, int transA, int transB, double alpha, double beta) {
  return Build("gemm_" + suffix, "gemm")
      .in(uniform(std::move(a), 201))
      .in(uniform(std::move(b), 202))
      .in(std::move(bias))
      .out(std::move(out))
      .f("alpha", alpha)
      .f("beta", beta)
      .i("trans_a", transA)
      .i("trans_b", transB)
      .tol(kReduction)
      .gemmInputs(2);
}

/// The 1-D convolution: x [2,3,10], w [4,3,3], stride 2, pads 1+1 -> y
/// [2,4,5]; and the 2-D grouped one: x [2,4,7,6], w [6,2,3,3], group 2,
/// strides [2,1], pads [1,0]+[1,2], dilations [1,2] -> y [2,6,4,4].
struct ConvGeometry {
  std::string name;
  Shape x, w, y;
  std::vector<int64_t> strides, pads, dilations;
  int64_t group;
};

const ConvGeometry kConv1d{"1d", {2, 3, 10}, {4, 3, 3}, {2, 4, 5},
                           {2}, {1, 1}, {1}, 1};
const ConvGeometry kConv2dGrouped{"2d_grouped",
                                  {2, 4, 7, 6},
                                  {6, 2, 3, 3},
                                  {2, 6, 4, 4},
                                  {2, 1},
                                  {1, 0, 1, 2},
                                  {1, 2},
                                  2};

Build &geometry(Build &c, const ConvGeometry &g) {
  return c.ints("strides", g.strides)
      .ints("pads", g.pads)
      .ints("dilations", g.dilations)
      .i("group", g.group)
      .tol(kReduction)
      .gemmInputs(2);
}

Case conv(const ConvGeometry &g, bool bias) {
  Build c("conv_" + g.name + (bias ? "_bias" : ""), "conv");
  c.in(uniform(g.x, 211)).in(uniform(g.w, 212));
  if (bias)
    c.in(uniform({g.w[0]}, 213));
  c.out(g.y);
  return geometry(c, g);
}

Case convGradInput(const ConvGeometry &g) {
  Build c("conv_grad_input_" + g.name, "conv_grad_input");
  c.in(uniform(g.y, 214)).in(uniform(g.w, 215)).out(g.x);
  return geometry(c, g);
}

Case convGradWeight(const ConvGeometry &g) {
  Build c("conv_grad_weight_" + g.name, "conv_grad_weight");
  c.in(uniform(g.y, 216)).in(uniform(g.x, 217)).out(g.w);
  return geometry(c, g);
}

Case einsum(const std::string &suffix, const std::string &equation,
            std::vector<Shape> inputs, Shape out) {
  Build c("einsum_" + suffix, "einsum");
  uint32_t seed = 221;
  for (Shape &in : inputs)
    c.in(uniform(std::move(in), seed++));
  return c.s("equation", equation)
      .out(std::move(out))
      .tol(kReduction)
      .gemmInputs(static_cast<int>(inputs.size()));
}

} // namespace

std::vector<Case> contractionCases() {
  return {
      conv(kConv1d, true),
      conv(kConv2dGrouped, false),
      convGradInput(kConv1d),
      convGradInput(kConv2dGrouped),
      convGradWeight(kConv1d),
      convGradWeight(kConv2dGrouped),
      einsum("batched", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, {2, 3, 5}),
      einsum("implicit_output", "ij,jk", {{3, 4}, {4, 5}}, {3, 5}),
      einsum("moe_dispatch", "gsec,gsm->egcm", {{2, 3, 2, 4}, {2, 3, 5}},
             {2, 2, 4, 5}),
      einsum("one_input_sum", "ijk->ki", {{3, 4, 5}}, {5, 3}),
      gemm("bias_row", {5, 7}, {7, 3}, uniform({3}, 203), {5, 3}, 0, 0, 1.0,
           1.0),
      gemm("bias_full_scaled", {5, 7}, {7, 3}, uniform({5, 3}, 204), {5, 3}, 0,
           0, 0.5, 2.0),
      gemm("no_c", {5, 7}, {7, 3}, absent(), {5, 3}, 0, 0, 1.0, 0.0),
      gemm("trans_a_trans_b", {7, 5}, {3, 7}, uniform({5, 1}, 205), {5, 3}, 1,
           1, 1.5, 0.5),
      matmul("2d", {5, 7}, {7, 3}, {5, 3}, 231),
      matmul("batched", {4, 5, 7}, {4, 7, 3}, {4, 5, 3}, 233),
      matmul("broadcast_batch", {2, 1, 5, 7}, {3, 7, 4}, {2, 3, 5, 4}, 235),
      matmul("rank1_a", {7}, {2, 7, 3}, {2, 3}, 237),
      matmul("rank1_b", {2, 5, 7}, {7}, {2, 5}, 239),
      matmul("rank1_both", {16}, {16}, {}, 241),
      matmul("trans_a", {2, 7, 5}, {2, 7, 3}, {2, 5, 3}, 243, 1, 0),
      matmul("trans_b", {5, 7}, {3, 3, 7}, {3, 5, 3}, 245, 0, 1),
      matmul("trans_both", {7, 5}, {3, 7}, {5, 3}, 247, 1, 1),
  };
}

} // namespace bmrt::conformance
