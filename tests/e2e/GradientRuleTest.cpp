//===- GradientRuleTest.cpp - every gradient rule against finite differences -===//
//
// One small @main per case, around one op (or one variant of it: a
// broadcast, a transpose flag, a rank-1 operand). Its float arguments marked
// `bm.kind = "parameter"` are what autodiff differentiates; the output is
// either a scalar, reduce_sum(y * w) with w a random input of y's shape (so
// that every element of y matters, each with its own weight), or logits that
// autodiff ends with a cross-entropy. The test runs the autodiff phase,
// lowers @train_step to a step program, runs it on the CPU runtime, and
// compares every element of every gradient with the central difference
//   (L(x + h) - L(x - h)) / 2h
// of the same compiled step run with that one element moved.
//
// A second test checks that the registry has a rule for every bm op with
// GradientOpInterface: each such op must occur in a case below (or in the
// module of non-differentiable ops), and the rule of every op instance builds
// gradients typed like their operands.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "codegen/StepProgram.h"
#include "passes/Passes.h"

#include "bmrt/Executor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace {

/// An argument's values: uniform in [lo, hi] (by bm.name, or "argN" for an
/// unnamed input).
struct Range {
  const char *name;
  float lo, hi;
};

struct GradCase {
  const char *name;
  /// The arguments of @main (without the weight w).
  const char *args;
  /// Ops computing %y from the arguments.
  const char *body;
  /// y's shape ("2x3x4", "" for a scalar); null when `args` is a whole
  /// module (its own loss or logits) and `body` is unused.
  const char *yShape;
  std::vector<Range> ranges = {};
  /// Every float argument element (parameters and inputs together, N in
  /// all, `ranges` ignored) takes a different point of an even grid over
  /// [-1, 1]: about 2 / N apart (> 2h in every case here), none within 1 / N
  /// of 0, so no ties for max / min / top_k / pooling and no kink of abs or
  /// relu within h of any value.
  bool distinct = false;
  /// |analytic - numeric| <= atol + rtol |numeric|; see the test.
  double atol = 1e-3, rtol = 5e-3;
};

void PrintTo(const GradCase &c, std::ostream *os) { *os << c.name; }

#define P(name) " {bm.kind = \"parameter\", bm.name = \"" name "\"}"

// clang-format off
const GradCase kCases[] = {
    // Elementwise, unary.
    {"abs", "%x: tensor<2x3xf32>" P("x"), "%y = bm.abs %x : tensor<2x3xf32>", "2x3", {}, true},
    {"cast", "%x: tensor<2x3xf32>" P("x"), "%y = bm.cast %x : tensor<2x3xf32> -> tensor<2x3xf32>", "2x3"},
    {"cos", "%x: tensor<2x3xf32>" P("x"), "%y = bm.cos %x : tensor<2x3xf32>", "2x3", {{"x", -3, 3}}},
    {"erf", "%x: tensor<2x3xf32>" P("x"), "%y = bm.erf %x : tensor<2x3xf32>", "2x3", {{"x", -2, 2}}},
    {"exp", "%x: tensor<2x3xf32>" P("x"), "%y = bm.exp %x : tensor<2x3xf32>", "2x3"},
    {"gelu", "%x: tensor<2x3xf32>" P("x"), "%y = bm.gelu %x : tensor<2x3xf32>", "2x3", {{"x", -3, 3}}},
    {"gelu_tanh", "%x: tensor<2x3xf32>" P("x"), "%y = bm.gelu %x {tanh_approximation = true} : tensor<2x3xf32>", "2x3", {{"x", -3, 3}}},
    // The two forms' derivatives differ by 5e-4 to 9e-4 on [-2.3, -1.8]
    // (under the default tolerance elsewhere): there, with weights of at
    // least 0.5 and a loss near 0 (little rounding), a tolerance of 1.5e-4
    // tells them apart.
    {"gelu_tail", "%x: tensor<2x3xf32>" P("x"), "%y = bm.gelu %x : tensor<2x3xf32>", "2x3",
     {{"x", -2.3f, -1.8f}, {"w", 0.5f, 1}}, false, 5e-5, 1e-3},
    {"gelu_tanh_tail", "%x: tensor<2x3xf32>" P("x"), "%y = bm.gelu %x {tanh_approximation = true} : tensor<2x3xf32>", "2x3",
     {{"x", -2.3f, -1.8f}, {"w", 0.5f, 1}}, false, 5e-5, 1e-3},
    {"log", "%x: tensor<2x3xf32>" P("x"), "%y = bm.log %x : tensor<2x3xf32>", "2x3", {{"x", 0.8f, 2}}},
    {"neg", "%x: tensor<2x3xf32>" P("x"), "%y = bm.neg %x : tensor<2x3xf32>", "2x3"},
    {"reciprocal", "%x: tensor<2x3xf32>" P("x"), "%y = bm.reciprocal %x : tensor<2x3xf32>", "2x3", {{"x", 0.8f, 2}}},
    {"relu", "%x: tensor<2x3xf32>" P("x"), "%y = bm.relu %x : tensor<2x3xf32>", "2x3", {}, true},
    {"sigmoid", "%x: tensor<2x3xf32>" P("x"), "%y = bm.sigmoid %x : tensor<2x3xf32>", "2x3", {{"x", -3, 3}}},
    {"sin", "%x: tensor<2x3xf32>" P("x"), "%y = bm.sin %x : tensor<2x3xf32>", "2x3", {{"x", -3, 3}}},
    {"sqrt", "%x: tensor<2x3xf32>" P("x"), "%y = bm.sqrt %x : tensor<2x3xf32>", "2x3", {{"x", 0.5f, 2}}},
    {"tanh", "%x: tensor<2x3xf32>" P("x"), "%y = bm.tanh %x : tensor<2x3xf32>", "2x3", {{"x", -2, 2}}},

    // Elementwise, binary (both operands broadcast where they can be).
    {"add", "%a: tensor<2x1x4xf32>" P("a") ", %b: tensor<3x1xf32>" P("b"),
     "%y = bm.add %a, %b : tensor<2x1x4xf32>, tensor<3x1xf32>", "2x3x4"},
    {"sub", "%a: tensor<2x1x4xf32>" P("a") ", %b: tensor<3x1xf32>" P("b"),
     "%y = bm.sub %a, %b : tensor<2x1x4xf32>, tensor<3x1xf32>", "2x3x4"},
    {"mul", "%a: tensor<2x1x4xf32>" P("a") ", %b: tensor<3x1xf32>" P("b"),
     "%y = bm.mul %a, %b : tensor<2x1x4xf32>, tensor<3x1xf32>", "2x3x4"},
    // One value read by two ops and twice by one: autodiff sums three
    // contributions.
    {"mul_self", "%x: tensor<2x3xf32>" P("x"),
     "%s = bm.mul %x, %x : tensor<2x3xf32>, tensor<2x3xf32>\n"
     "%y = bm.add %s, %x : tensor<2x3xf32>, tensor<2x3xf32>", "2x3"},
    {"div", "%a: tensor<2x3xf32>" P("a") ", %b: tensor<3xf32>" P("b"),
     "%y = bm.div %a, %b : tensor<2x3xf32>, tensor<3xf32>", "2x3", {{"b", 0.8f, 2}}},
    {"pow_constant", "%x: tensor<2x3xf32>" P("x"),
     "%e = bm.constant dense<3.0> : tensor<f32>\n"
     "%y = bm.pow %x, %e : tensor<2x3xf32>, tensor<f32>", "2x3", {{"x", 0.5f, 1.5f}}},
    {"pow_tensor", "%a: tensor<2x3xf32>" P("a") ", %b: tensor<3xf32>" P("b"),
     "%y = bm.pow %a, %b : tensor<2x3xf32>, tensor<3xf32>", "2x3", {{"a", 0.5f, 2}, {"b", -1, 2}}},
    {"max", "%a: tensor<2x3xf32>" P("a") ", %b: tensor<3xf32>" P("b"),
     "%y = bm.max %a, %b : tensor<2x3xf32>, tensor<3xf32>", "2x3", {}, true},
    {"min", "%a: tensor<2x3xf32>" P("a") ", %b: tensor<3xf32>" P("b"),
     "%y = bm.min %a, %b : tensor<2x3xf32>, tensor<3xf32>", "2x3", {}, true},
    {"where", "%a: tensor<2x3xf32>" P("a") ", %b: tensor<3xf32>" P("b")
     ", %p: tensor<2x3xf32>, %q: tensor<2x3xf32>",
     "%c = bm.greater %p, %q : tensor<2x3xf32>, tensor<2x3xf32>\n"
     "%y = bm.where %c, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>", "2x3"},

    // Contractions.
    {"matmul_2d", "%a: tensor<3x4xf32>" P("a") ", %b: tensor<4x2xf32>" P("b"),
     "%y = bm.matmul %a, %b : tensor<3x4xf32>, tensor<4x2xf32>", "3x2"},
    {"matmul_batched", "%a: tensor<2x3x4xf32>" P("a") ", %b: tensor<2x4x5xf32>" P("b"),
     "%y = bm.matmul %a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32>", "2x3x5"},
    {"matmul_broadcast_batch", "%a: tensor<2x1x3x4xf32>" P("a") ", %b: tensor<3x4x2xf32>" P("b"),
     "%y = bm.matmul %a, %b : tensor<2x1x3x4xf32>, tensor<3x4x2xf32>", "2x3x3x2"},
    {"matmul_vector_lhs", "%a: tensor<4xf32>" P("a") ", %b: tensor<2x4x3xf32>" P("b"),
     "%y = bm.matmul %a, %b : tensor<4xf32>, tensor<2x4x3xf32>", "2x3"},
    {"matmul_vector_rhs", "%a: tensor<2x3x4xf32>" P("a") ", %b: tensor<4xf32>" P("b"),
     "%y = bm.matmul %a, %b : tensor<2x3x4xf32>, tensor<4xf32>", "2x3"},
    {"matmul_vector_vector", "%a: tensor<4xf32>" P("a") ", %b: tensor<4xf32>" P("b"),
     "%y = bm.matmul %a, %b : tensor<4xf32>, tensor<4xf32>", ""},
    {"matmul_2d_weight", "%a: tensor<2x3x4xf32>" P("a") ", %b: tensor<4x5xf32>" P("b"),
     "%y = bm.matmul %a, %b : tensor<2x3x4xf32>, tensor<4x5xf32>", "2x3x5"},
    {"gemm", "%a: tensor<3x4xf32>" P("a") ", %b: tensor<4x2xf32>" P("b") ", %c: tensor<2xf32>" P("c"),
     "%y = bm.gemm %a, %b, %c {alpha = 0.5 : f32, beta = 2.0 : f32} : tensor<3x4xf32>, tensor<4x2xf32>, tensor<2xf32>", "3x2"},
    {"gemm_trans_a", "%a: tensor<4x3xf32>" P("a") ", %b: tensor<4x2xf32>" P("b") ", %c: tensor<1x2xf32>" P("c"),
     "%y = bm.gemm %a, %b, %c {alpha = 0.5 : f32, beta = 2.0 : f32, trans_a = true} : tensor<4x3xf32>, tensor<4x2xf32>, tensor<1x2xf32>", "3x2"},
    {"gemm_trans_b", "%a: tensor<3x4xf32>" P("a") ", %b: tensor<2x4xf32>" P("b") ", %c: tensor<3x1xf32>" P("c"),
     "%y = bm.gemm %a, %b, %c {alpha = 0.5 : f32, beta = 2.0 : f32, trans_b = true} : tensor<3x4xf32>, tensor<2x4xf32>, tensor<3x1xf32>", "3x2"},
    {"gemm_trans_ab", "%a: tensor<4x3xf32>" P("a") ", %b: tensor<2x4xf32>" P("b") ", %c: tensor<2xf32>" P("c"),
     "%y = bm.gemm %a, %b, %c {alpha = 1.5 : f32, beta = 0.5 : f32, trans_a = true, trans_b = true} : tensor<4x3xf32>, tensor<2x4xf32>, tensor<2xf32>", "3x2"},
    {"gemm_no_c", "%a: tensor<3x4xf32>" P("a") ", %b: tensor<2x4xf32>" P("b"),
     "%y = bm.gemm %a, %b {alpha = 2.0 : f32, trans_b = true} : tensor<3x4xf32>, tensor<2x4xf32>", "3x2"},
    {"einsum_moe_dispatch", "%a: tensor<2x3x2x2xf32>" P("a") ", %b: tensor<2x3x3xf32>" P("b"),
     "%y = bm.einsum \"gsec,gsm->egcm\" %a, %b : tensor<2x3x2x2xf32>, tensor<2x3x3xf32>", "2x2x2x3"},
    {"einsum_linear", "%a: tensor<2x3x4xf32>" P("a") ", %b: tensor<4x2xf32>" P("b"),
     "%y = bm.einsum \"bsm,me->bse\" %a, %b : tensor<2x3x4xf32>, tensor<4x2xf32>", "2x3x2"},
    {"einsum_chain", "%a: tensor<2x3xf32>" P("a") ", %b: tensor<3x4xf32>" P("b") ", %c: tensor<4x2xf32>" P("c"),
     "%y = bm.einsum \"ij,jk,kl->il\" %a, %b, %c : tensor<2x3xf32>, tensor<3x4xf32>, tensor<4x2xf32>", "2x2"},
    {"conv_grouped", "%x: tensor<1x4x5x5xf32>" P("x") ", %k: tensor<4x2x3x3xf32>" P("k") ", %c: tensor<4xf32>" P("c"),
     "%y = bm.conv %x, %k, %c {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x4x5x5xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>", "1x4x3x3"},
    {"conv_dilated_1d", "%x: tensor<2x2x6xf32>" P("x") ", %k: tensor<3x2x2xf32>" P("k"),
     "%y = bm.conv %x, %k {dilations = array<i64: 2>, pads = array<i64: 1, 0>, strides = array<i64: 1>} : tensor<2x2x6xf32>, tensor<3x2x2xf32>", "2x3x5"},

    // Softmax and normalisation.
    {"softmax", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.softmax %x {axis = 1 : i64} : tensor<2x3x4xf32>", "2x3x4", {{"x", -2, 2}}},
    {"log_softmax", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.log_softmax %x {axis = 2 : i64} : tensor<2x3x4xf32>", "2x3x4", {{"x", -2, 2}}},
    {"layer_norm", "%x: tensor<2x3x4xf32>" P("x") ", %s: tensor<4xf32>" P("s") ", %c: tensor<4xf32>" P("c"),
     "%y = bm.layer_norm %x, %s, %c {axis = 2 : i64, epsilon = 1.0e-5 : f32} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>", "2x3x4", {}, true},
    {"layer_norm_no_bias", "%x: tensor<2x3x4xf32>" P("x") ", %s: tensor<3x4xf32>" P("s"),
     "%y = bm.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : tensor<2x3x4xf32>, tensor<3x4xf32>", "2x3x4", {}, true},
    {"rms_norm", "%x: tensor<2x3x4xf32>" P("x") ", %s: tensor<4xf32>" P("s"),
     "%y = bm.rms_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-6 : f32} : tensor<2x3x4xf32>, tensor<4xf32>", "2x3x4", {}, true},
    // Running mean and variance are inputs: constants of the step.
    {"batch_norm", "%x: tensor<2x3x2x2xf32>" P("x") ", %s: tensor<3xf32>" P("s") ", %c: tensor<3xf32>" P("c")
     ", %m: tensor<3xf32> {bm.name = \"m\"}, %v: tensor<3xf32> {bm.name = \"v\"}",
     "%y = bm.batch_norm %x, %s, %c, %m, %v {epsilon = 1.0e-5 : f32} : tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>",
     "2x3x2x2", {{"v", 0.5f, 2}}},

    // Reductions, scans, selection.
    {"reduce_sum_keep", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.reduce_sum %x {axes = array<i64: 1>} : tensor<2x3x4xf32>", "2x1x4"},
    {"reduce_sum_drop", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.reduce_sum %x {axes = array<i64: 0, 2>, keep_dims = false} : tensor<2x3x4xf32>", "3"},
    {"reduce_mean", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.reduce_mean %x {axes = array<i64: 1, 2>, keep_dims = false} : tensor<2x3x4xf32>", "2"},
    {"reduce_mean_keep", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.reduce_mean %x {axes = array<i64: 0>} : tensor<2x3x4xf32>", "1x3x4"},
    {"reduce_max", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.reduce_max %x {axes = array<i64: 2>, keep_dims = false} : tensor<2x3x4xf32>", "2x3", {}, true},
    {"reduce_max_keep", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.reduce_max %x {axes = array<i64: 0, 1>} : tensor<2x3x4xf32>", "1x1x4", {}, true},
    {"cumsum", "%x: tensor<2x5xf32>" P("x"), "%y = bm.cumsum %x {axis = 1 : i64} : tensor<2x5xf32>", "2x5"},
    {"cumsum_exclusive", "%x: tensor<2x5xf32>" P("x"), "%y = bm.cumsum %x {axis = 1 : i64, exclusive = true} : tensor<2x5xf32>", "2x5"},
    {"cumsum_reverse", "%x: tensor<2x5xf32>" P("x"), "%y = bm.cumsum %x {axis = 1 : i64, reverse = true} : tensor<2x5xf32>", "2x5"},
    {"cumsum_exclusive_reverse", "%x: tensor<3x2xf32>" P("x"), "%y = bm.cumsum %x {axis = 0 : i64, exclusive = true, reverse = true} : tensor<3x2xf32>", "3x2"},
    {"top_k", "%x: tensor<3x5xf32>" P("x"), "%y, %i = bm.top_k %x {axis = 1 : i64, k = 2 : i64} : tensor<3x5xf32>", "3x2", {}, true},
    {"top_k_smallest_axis0", "%x: tensor<3x5xf32>" P("x"), "%y, %i = bm.top_k %x {axis = 0 : i64, k = 2 : i64, largest = false} : tensor<3x5xf32>", "2x5", {}, true},
    {"trilu_upper", "%x: tensor<3x4xf32>" P("x"), "%y = bm.trilu %x {k = 1 : i64} : tensor<3x4xf32>", "3x4"},
    {"trilu_lower", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.trilu %x {k = -1 : i64, upper = false} : tensor<2x3x4xf32>", "2x3x4"},

    // Data movement.
    {"reshape", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>", "6x4"},
    {"flatten", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.flatten %x {axis = 1 : i64} : tensor<2x3x4xf32>", "2x12"},
    {"squeeze", "%x: tensor<2x1x3xf32>" P("x"), "%y = bm.squeeze %x {axes = array<i64: 1>} : tensor<2x1x3xf32>", "2x3"},
    {"unsqueeze", "%x: tensor<2x3xf32>" P("x"), "%y = bm.unsqueeze %x {axes = array<i64: 0, 2>} : tensor<2x3xf32>", "1x2x1x3"},
    {"transpose", "%x: tensor<2x3x4xf32>" P("x"), "%y = bm.transpose %x {permutation = array<i64: 2, 0, 1>} : tensor<2x3x4xf32>", "4x2x3"},
    {"expand", "%x: tensor<3x1xf32>" P("x"), "%y = bm.expand %x : tensor<3x1xf32> -> tensor<2x3x4xf32>", "2x3x4"},
    {"gather_rows", "%x: tensor<5x3xf32>" P("x"),
     "%i = bm.constant dense<[[0, 2], [0, 4]]> : tensor<2x2xi64>\n"
     "%y = bm.gather %x, %i {axis = 0 : i64} : tensor<5x3xf32>, tensor<2x2xi64>", "2x2x3"},
    {"gather_columns", "%x: tensor<3x5xf32>" P("x"),
     "%i = bm.constant dense<[1, 1, 3, 0]> : tensor<4xi64>\n"
     "%y = bm.gather %x, %i {axis = 1 : i64} : tensor<3x5xf32>, tensor<4xi64>", "3x4"},
    // Repeated and negative indices: the scatter-add of the gradient sums
    // the repeats (x[0, 1] is read twice, x[2, 4] as -1 and as 4).
    {"gather_elements_axis1", "%x: tensor<3x5xf32>" P("x"),
     "%i = bm.constant dense<[[1, 1, 0, 4], [3, 2, 2, 0], [-1, 4, 0, 1]]> : tensor<3x4xi64>\n"
     "%y = bm.gather_elements %x, %i {axis = 1 : i64} : tensor<3x5xf32>, tensor<3x4xi64>", "3x4"},
    // Indices shorter than the data in the other dim: x's last row unread.
    {"gather_elements_axis0_short", "%x: tensor<4x3xf32>" P("x"),
     "%i = bm.constant dense<[[3, 0], [1, 3]]> : tensor<2x2xi32>\n"
     "%y = bm.gather_elements %x, %i {axis = 0 : i64} : tensor<4x3xf32>, tensor<2x2xi32>", "2x2"},
    // A plain write: the overwritten elements of d get no gradient.
    {"scatter_elements_none", "%d: tensor<3x4xf32>" P("d") ", %u: tensor<3x2xf32>" P("u"),
     "%i = bm.constant dense<[[0, 3], [2, 1], [-1, 0]]> : tensor<3x2xi64>\n"
     "%y = bm.scatter_elements %d, %i, %u {axis = 1 : i64} : tensor<3x4xf32>, tensor<3x2xi64>, tensor<3x2xf32>", "3x4"},
    {"scatter_elements_add", "%d: tensor<4x3xf32>" P("d") ", %u: tensor<3x3xf32>" P("u"),
     "%i = bm.constant dense<[[1, 1, 0], [1, 3, 0], [2, 1, 1]]> : tensor<3x3xi64>\n"
     "%y = bm.scatter_elements %d, %i, %u {axis = 0 : i64, reduction = \"add\"} : tensor<4x3xf32>, tensor<3x3xi64>, tensor<3x3xf32>", "4x3"},
    // Fused attention: causal with more keys than queries (query 0 sees 3
    // of 4 keys), and non-causal with e != d; q, kt and v all trained.
    {"attention_causal", "%q: tensor<2x3x2xf32>" P("q") ", %k: tensor<2x2x4xf32>" P("k") ", %v: tensor<2x4x3xf32>" P("v"),
     "%y = bm.attention %q, %k, %v {causal = true, scale = 0.7 : f32} : tensor<2x3x2xf32>, tensor<2x2x4xf32>, tensor<2x4x3xf32>", "2x3x3"},
    {"attention", "%q: tensor<1x2x3x2xf32>" P("q") ", %k: tensor<1x2x2x3xf32>" P("k") ", %v: tensor<1x2x3x4xf32>" P("v"),
     "%y = bm.attention %q, %k, %v {scale = 1.3 : f32} : tensor<1x2x3x2xf32>, tensor<1x2x2x3xf32>, tensor<1x2x3x4xf32>", "1x2x3x4"},
    {"concat", "%a: tensor<2x3xf32>" P("a") ", %b: tensor<2x1xf32>" P("b") ", %c: tensor<2x2xf32>" P("c"),
     "%y = bm.concat %a, %b, %c {axis = 1 : i64} : tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x2xf32>", "2x6"},
    // The middle piece is read by nothing: its gradient is zeros.
    {"split", "%x: tensor<2x6xf32>" P("x"),
     "%p:3 = bm.split %x {axis = 1 : i64, sizes = array<i64: 1, 3, 2>} : tensor<2x6xf32>\n"
     "%y = bm.concat %p#2, %p#0 {axis = 1 : i64} : tensor<2x2xf32>, tensor<2x1xf32>", "2x3"},
    {"slice", "%x: tensor<4x6xf32>" P("x"),
     "%y = bm.slice %x {limits = array<i64: 4, 6>, starts = array<i64: 1, 0>, strides = array<i64: 2, 3>} : tensor<4x6xf32>", "2x2"},

    // Pooling.
    {"max_pool", "%x: tensor<1x2x4x4xf32>" P("x"),
     "%y = bm.max_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x2x4x4xf32>", "1x2x2x2", {}, true},
    {"max_pool_overlapping_padded", "%x: tensor<1x2x4x4xf32>" P("x"),
     "%y = bm.max_pool %x {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x2x4x4xf32>", "1x2x2x2", {}, true},
    {"avg_pool", "%x: tensor<1x2x4x4xf32>" P("x"),
     "%y = bm.avg_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x2x4x4xf32>", "1x2x2x2"},
    {"avg_pool_overlapping_padded", "%x: tensor<1x2x4x4xf32>" P("x"),
     "%y = bm.avg_pool %x {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x2x4x4xf32>", "1x2x2x2"},
    {"global_avg_pool", "%x: tensor<2x3x2x2xf32>" P("x"), "%y = bm.global_avg_pool %x : tensor<2x3x2x2xf32>", "2x3x1x1"},

    // Losses: logits that autodiff ends with a cross-entropy against a new
    // label argument, and a cross-entropy in the model, ignoring label -100.
    {"logits", R"(
func.func @main(%x: tensor<2x3x4xf32>, %w: tensor<4x5xf32>)" P("w") R"() -> tensor<2x3x5xf32> {
  %y = bm.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x5xf32>
  return %y : tensor<2x3x5xf32>
})", "", nullptr, {{"w", -2, 2}}},
    {"cross_entropy", R"(
func.func @main(%z: tensor<4x5xf32>)" P("z") R"() -> tensor<f32> {
  %labels = bm.constant dense<[1, -100, 4, 0]> : tensor<4xi64>
  %loss = bm.cross_entropy %z, %labels : tensor<4x5xf32>, tensor<4xi64> -> tensor<f32>
  return %loss : tensor<f32>
})", "", nullptr, {{"z", -2, 2}}},
};
// clang-format on

/// Ops with a rule that never differentiates (nothing flows through them),
/// for the registry check; not run.
const char *kNonDifferentiable = R"(
func.func @main(%x: tensor<2x3xf32>, %b: tensor<2x3xi1>, %i: tensor<2x3xi64>) {
  %0 = bm.and %b, %b : tensor<2x3xi1>, tensor<2x3xi1>
  %1 = bm.or %b, %b : tensor<2x3xi1>, tensor<2x3xi1>
  %2 = bm.not %b : tensor<2x3xi1>
  %3 = bm.equal %x, %x : tensor<2x3xf32>, tensor<2x3xf32>
  %4 = bm.less %x, %x : tensor<2x3xf32>, tensor<2x3xf32>
  %5 = bm.greater %x, %x : tensor<2x3xf32>, tensor<2x3xf32>
  %6 = bm.iota {delta = 1.0 : f64, start = 0.0 : f64} : tensor<4xf32>
  %7 = bm.one_hot %i {axis = 2 : i64, depth = 4 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x3xi64> -> tensor<2x3x4xf32>
  %8 = bm.cast %x : tensor<2x3xf32> -> tensor<2x3xi64>
  %9 = bm.relu %i : tensor<2x3xi64>
  %10 = bm.abs %i : tensor<2x3xi64>
  %11 = bm.reduce_sum %i {axes = array<i64: 0>} : tensor<2x3xi64>
  return
}
)";

/// Ops whose gradient partitioning lowers before any kernel runs it (a
/// reshard's is a bm.reshard_grad), for the registry check; not run.
const char *kPartitioned = R"(
bm.mesh @mesh = <["tp"=2]>
func.func @main(%x: tensor<2x4xf32>) {
  %0 = bm.reshard %x {sharding = #bm.sharding<@mesh, [{}, {"tp"}]>} : tensor<2x4xf32>
  return
}
)";

int64_t rankOf(const std::string &shape) {
  return shape.empty() ? 0 : 1 + std::count(shape.begin(), shape.end(), 'x');
}

/// The case's module: @main with the loss reduce_sum(y * w) appended.
std::string moduleText(const GradCase &c) {
  if (!c.yShape)
    return c.args;
  std::string y = std::string("tensor<") + c.yShape + (*c.yShape ? "x" : "") +
                  "f32>";
  std::string text = std::string("func.func @main(") + c.args + ", %w: " + y +
                     " {bm.name = \"w\"}) -> tensor<f32> {\n" + c.body + "\n";
  text += "%wy = bm.mul %y, %w : " + y + ", " + y + "\n";
  int64_t rank = rankOf(c.yShape);
  if (rank == 0) {
    text += "return %wy : tensor<f32>\n}\n";
    return text;
  }
  std::string axes;
  for (int64_t d = 0; d < rank; ++d)
    axes += (d ? ", " : "") + std::to_string(d);
  text += "%loss = bm.reduce_sum %wy {axes = array<i64: " + axes +
          ">, keep_dims = false} : " + y + "\nreturn %loss : tensor<f32>\n}\n";
  return text;
}

void loadDialects(mlir::MLIRContext &context) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::bm::BmDialect, mlir::func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

/// Collects every diagnostic's text, for failure messages.
struct Diagnostics {
  std::string text;
  mlir::ScopedDiagnosticHandler handler;
  explicit Diagnostics(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &d) {
          text += d.str() + "\n";
          return mlir::success();
        }) {}
};

/// The compiled training step of one case on the CPU runtime.
struct Step {
  mlir::MLIRContext context;
  bmrt::Program program;
  std::unique_ptr<bmrt::Device> device = bmrt::createDevice("cpu");
  std::unique_ptr<bmrt::Executor> executor;

  void build(const GradCase &c) {
    loadDialects(context);
    Diagnostics diagnostics(context);
    std::string text = moduleText(c);
    auto module = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
    ASSERT_TRUE(module) << diagnostics.text << text;
    mlir::PassManager pm(&context);
    mlir::bm::buildAutodiffPhase(pm);
    ASSERT_TRUE(mlir::succeeded(pm.run(*module))) << diagnostics.text << text;
    auto step = module->lookupSymbol<mlir::func::FuncOp>("train_step");
    auto lowered = bm::lowerToProgram(step, c.name);
    ASSERT_TRUE(static_cast<bool>(lowered))
        << llvm::toString(lowered.takeError());
    // Through the text form, as the trainer reads it.
    program = bmrt::parseProgram(bmrt::printProgram(*lowered), c.name);
    executor = std::make_unique<bmrt::Executor>(program, *device);
    fill(c);
  }

  /// Float parameters and inputs from their ranges, labels below the
  /// classes of the loss.
  void fill(const GradCase &c) {
    std::mt19937 rng(1234);
    auto rangeOf = [&](const std::string &name) {
      for (const Range &r : c.ranges)
        if (name == r.name)
          return std::make_pair(r.lo, r.hi);
      return std::make_pair(-1.0f, 1.0f);
    };
    std::vector<int> floats, ints;
    for (bmrt::SlotKind kind : {bmrt::SlotKind::Param, bmrt::SlotKind::Input,
                                bmrt::SlotKind::Label})
      for (int slot : program.slotsOf(kind))
        (program.slots[slot].dtype == bmrt::DType::F32 ? floats : ints)
            .push_back(slot);

    int64_t classes = 1;
    for (const bmrt::Instr &instr : program.instrs)
      if (instr.op == "cross_entropy")
        classes = program.slots[instr.operands[0]].shape[1];
    for (int slot : ints) {
      const bmrt::TensorView &v = executor->view(slot);
      ASSERT_EQ(v.dtype, bmrt::DType::I64);
      for (int64_t i = 0; i < v.size(); ++i)
        v.i64()[i] =
            std::uniform_int_distribution<int64_t>(0, classes - 1)(rng);
    }

    if (!c.distinct) {
      for (int slot : floats) {
        const bmrt::TensorView &v = executor->view(slot);
        auto [lo, hi] = rangeOf(program.slots[slot].name);
        for (int64_t i = 0; i < v.size(); ++i)
          v.f32()[i] = std::uniform_real_distribution<float>(lo, hi)(rng);
      }
      return;
    }
    // An even count of grid points: the middle of a symmetric range falls
    // between two of them.
    int64_t count = 0;
    for (int slot : floats)
      count += executor->view(slot).size();
    int64_t points = count + count % 2;
    auto [lo, hi] = rangeOf("");
    std::vector<float> grid(points);
    for (int64_t k = 0; k < points; ++k)
      grid[k] = lo + (k + 0.5f) * (hi - lo) / points;
    std::shuffle(grid.begin(), grid.end(), rng);
    int64_t next = 0;
    for (int slot : floats) {
      const bmrt::TensorView &v = executor->view(slot);
      for (int64_t i = 0; i < v.size(); ++i)
        v.f32()[i] = grid[next++];
    }
  }

  double loss() {
    executor->run();
    return executor->view(program.loss).f32()[0];
  }
};

class GradientRule : public testing::TestWithParam<GradCase> {};

TEST_P(GradientRule, MatchesCentralDifferences) {
  const GradCase &c = GetParam();
  Step step;
  ASSERT_NO_FATAL_FAILURE(step.build(c));
  ASSERT_TRUE(std::isfinite(step.loss()));

  std::vector<int> params = step.program.slotsOf(bmrt::SlotKind::Param);
  ASSERT_FALSE(params.empty());
  // Every argument of each case is reached by a gradient.
  std::vector<std::vector<float>> analytic;
  for (int param : params) {
    int grad = step.program.gradientOf(param);
    ASSERT_GE(grad, 0) << "no gradient of '" << step.program.slots[param].name
                       << "'";
    const bmrt::TensorView &g = step.executor->view(grad);
    analytic.emplace_back(g.f32(), g.f32() + g.size());
  }

  // h = 1e-2 (the quotient divides by the difference of the values
  // actually set). Each loss is a sum of at most 36 weighted terms of size
  // <~1 computed in fp32, so it is off by a few ulps of <~10 (~5e-6), which
  // the quotient divides by 2h: <~3e-4. Truncation is h^2 / 6 times the
  // third derivative along the element (times its weight < 1): at most
  // 2.5e-4 for the ranges chosen above (the largest, reciprocal on [0.8, 2],
  // has |6 / x^4| < 15), and zero for linear and piecewise linear ops away
  // from their kinks. So the default 1e-3 + 0.5% of the derivative holds
  // with margin (the worst case measured is 6% of it, in layer and RMS
  // norm), while a wrong rule (a dropped broadcast sum, a missing alpha or
  // beta, a transposed operand, a flipped scan, a gradient routed to the
  // wrong element) is off by O(0.1..1).
  const double h = 1e-2, atol = c.atol, rtol = c.rtol;
  double worst = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    float *x = step.executor->view(params[p]).f32();
    const std::string &name = step.program.slots[params[p]].name;
    double largest = 0;
    for (size_t i = 0; i < analytic[p].size(); ++i) {
      float saved = x[i];
      // The difference of the values actually set, not 2h: x + h rounds.
      float up = saved + float(h), down = saved - float(h);
      x[i] = up;
      double lossUp = step.loss();
      x[i] = down;
      double lossDown = step.loss();
      x[i] = saved;
      double numeric = (lossUp - lossDown) / (double(up) - double(down));
      largest = std::max(largest, std::fabs(numeric));
      double error = std::fabs(analytic[p][i] - numeric);
      worst = std::max(worst, error / (atol + rtol * std::fabs(numeric)));
      EXPECT_NEAR(analytic[p][i], numeric, atol + rtol * std::fabs(numeric))
          << c.name << ": d loss / d " << name << "[" << i << "] at "
          << saved;
    }
    // Not vacuous: the parameter moves the loss.
    EXPECT_GT(largest, 0.02) << c.name << ": the loss hardly depends on "
                             << name;
  }
  RecordProperty("worst_error_over_tolerance", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    EveryRule, GradientRule, testing::ValuesIn(kCases),
    [](const testing::TestParamInfo<GradCase> &info) {
      return std::string(info.param.name);
    });

/// Every bm op with GradientOpInterface occurs in a case (or among the
/// non-differentiable ops), and the registry builds gradients for each
/// instance, typed like the operands they are for, that verify.
TEST(GradientRegistry, CoversEveryOpWithTheInterface) {
  mlir::MLIRContext context;
  loadDialects(context);
  Diagnostics diagnostics(context);

  std::vector<std::string> texts = {kNonDifferentiable, kPartitioned};
  for (const GradCase &c : kCases)
    texts.push_back(moduleText(c));

  std::set<std::string> seen;
  for (const std::string &text : texts) {
    auto module = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
    ASSERT_TRUE(module) << diagnostics.text << text;
    std::vector<mlir::Operation *> ops;
    module->walk([&](mlir::Operation *op) {
      if (mlir::isa<mlir::bm::GradientOpInterface>(op))
        ops.push_back(op);
    });
    for (mlir::Operation *op : ops) {
      seen.insert(op->getName().getStringRef().str());
      // Each float result stands in for its own gradient.
      llvm::SmallVector<mlir::Value> dys;
      for (mlir::Value result : op->getResults())
        dys.push_back(
            mlir::isa<mlir::FloatType>(
                mlir::cast<mlir::ShapedType>(result.getType()).getElementType())
                ? result
                : mlir::Value());
      mlir::OpBuilder builder(op->getContext());
      builder.setInsertionPointAfter(op);
      llvm::SmallVector<mlir::Value> dxs;
      ASSERT_TRUE(mlir::succeeded(
          mlir::bm::buildGradientsFromRegistry(op, builder, dys, dxs)))
          << diagnostics.text;
      ASSERT_EQ(dxs.size(), op->getNumOperands());
      for (auto [operand, dx] : llvm::zip(op->getOperands(), dxs)) {
        if (dx) {
          EXPECT_EQ(dx.getType(), operand.getType())
              << op->getName().getStringRef().str();
        }
      }
    }
    EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)))
        << diagnostics.text << text;
  }

  std::vector<std::string> missing;
  size_t withInterface = 0;
  for (mlir::RegisteredOperationName name :
       context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "bm" ||
        !name.hasInterface<mlir::bm::GradientOpInterface>())
      continue;
    ++withInterface;
    if (!seen.count(name.getStringRef().str()))
      missing.push_back(name.getStringRef().str());
  }
  EXPECT_TRUE(missing.empty())
      << "ops with GradientOpInterface in no case: "
      << llvm::join(missing, ", ");
  // Not vacuous: the dialect's compute ops carry the interface.
  EXPECT_GT(withInterface, 50u);
  EXPECT_EQ(seen.size(), withInterface);
}

} // namespace
