//===- TrainingStepTest.cpp - whole-model gradients of the compiled step --===//
//
// Imports each tiny zoo model, builds its training step (bm-autodiff-phase),
// lowers it to a step program and runs it on the CPU runtime with the
// model's own weights. The gradient is checked as a whole by a directional
// derivative: for a random unit direction d over all parameters,
//   (L(w + eps d) - L(w - eps d)) / (2 eps)  ~=  <grad L(w), d>.
// This checks every gradient rule and backward kernel the model uses, and
// that autodiff sums the contributions of values read twice.
//
//===----------------------------------------------------------------------===//

#include "codegen/FoldTransposes.h"
#include "codegen/OutlineBlocks.h"
#include "codegen/Parameters.h"
#include "codegen/StepProgram.h"
#include "import/OnnxImporter.h"
#include "passes/Passes.h"

#include "bmrt/Executor.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

namespace {

struct StepCase {
  const char *model;
  std::map<std::string, int64_t> dims;
  bool fuseAttention = false;
};

std::string modelPath(const char *name) {
  return std::string(BMC_SOURCE_DIR) + "/models/onnx/" + name + ".onnx";
}

/// The compiled step of one model, loaded on the CPU with its weights.
struct CompiledStep {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  bmrt::Program program;
  bmrt::Program lowered; ///< before folding, outlining and the text form
  std::unique_ptr<bmrt::Device> device = bmrt::createDevice("cpu");
  std::unique_ptr<bmrt::Executor> executor;

  /// With `fold`, transposes become GEMM flags (as bmc compile does);
  /// with `outline`, layers become block functions.
  void build(const StepCase &c, bool outline = false, bool fold = false) {
    mlir::bm::registerBmPasses();
    bm::ImportOptions options;
    options.dims = c.dims;
    auto file = bm::readOnnxFile(modelPath(c.model));
    ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
    auto imported = bm::importOnnxFile(context, *file, options);
    ASSERT_TRUE(static_cast<bool>(imported))
        << llvm::toString(imported.takeError());
    module = std::move(*imported);
    auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
    auto params = bm::readParameters(*file, main);
    ASSERT_TRUE(static_cast<bool>(params)) << llvm::toString(params.takeError());
    mlir::PassManager pm(&context);
    mlir::bm::buildFoldPhase(pm, c.fuseAttention);
    mlir::bm::buildAutodiffPhase(pm);
    ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
    auto step = module->lookupSymbol<mlir::func::FuncOp>("train_step");
    auto lowered = bm::lowerToProgram(step, c.model);
    ASSERT_TRUE(static_cast<bool>(lowered))
        << llvm::toString(lowered.takeError());
    this->lowered = *lowered;
    if (fold)
      bm::foldTransposesIntoMatmuls(*lowered);
    if (outline)
      bm::outlineBlocks(*lowered);
    // Through the text form, as the trainer reads it.
    program = bmrt::parseProgram(bmrt::printProgram(*lowered), c.model);
    executor = std::make_unique<bmrt::Executor>(program, *device);
    for (const bm::ParameterValue &p : *params)
      for (int slot : program.slotsOf(bmrt::SlotKind::Param))
        if (program.slots[slot].name == p.name)
          std::memcpy(executor->view(slot).data, p.bytes.data(),
                      p.bytes.size());
    fillInputs();
  }

  /// Token ids below the classes of the loss (the vocabulary of a language
  /// model), labels likewise, images from N(0, 1).
  void fillInputs() {
    int64_t classes = 0;
    for (const bmrt::Instr &instr : program.instrs)
      if (instr.op == "cross_entropy")
        classes = program.slots[instr.operands[0]].shape[1];
    ASSERT_GT(classes, 0);
    std::mt19937 rng(7);
    for (bmrt::SlotKind kind : {bmrt::SlotKind::Input, bmrt::SlotKind::Label})
      for (int slot : program.slotsOf(kind)) {
        const bmrt::TensorView &v = executor->view(slot);
        for (int64_t i = 0; i < v.size(); ++i) {
          if (v.dtype == bmrt::DType::I64)
            v.i64()[i] = std::uniform_int_distribution<int64_t>(
                0, classes - 1)(rng);
          else
            v.f32()[i] = std::normal_distribution<float>()(rng);
        }
      }
  }

  float loss() {
    executor->run();
    return executor->view(program.loss).f32()[0];
  }
};

/// Calls `check(name, a, b)` with each trained parameter's gradient in two
/// steps of one model (matched by the parameter's name).
template <typename Check>
void forEachGradientPair(CompiledStep &one, CompiledStep &other, Check check) {
  for (int param : one.program.slotsOf(bmrt::SlotKind::Param)) {
    const std::string &name = one.program.slots[param].name;
    int match = -1;
    for (int p : other.program.slotsOf(bmrt::SlotKind::Param))
      if (other.program.slots[p].name == name)
        match = p;
    ASSERT_GE(match, 0) << name;
    int g = one.program.gradientOf(param), h = other.program.gradientOf(match);
    ASSERT_EQ(g < 0, h < 0) << name;
    if (g >= 0)
      check(name, one.executor->view(g), other.executor->view(h));
  }
}

class WholeModelGradient : public testing::TestWithParam<StepCase> {};

std::string testName(const StepCase &c) {
  std::string name = c.model;
  for (char &ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)))
      ch = '_';
  return c.fuseAttention ? name + "_fused" : name;
}

TEST_P(WholeModelGradient, MatchesDirectionalDerivative) {
  // The program bmc compile writes: transposes folded, layers outlined.
  CompiledStep step;
  ASSERT_NO_FATAL_FAILURE(
      step.build(GetParam(), /*outline=*/true, /*fold=*/true));
  float base = step.loss();
  ASSERT_TRUE(std::isfinite(base));

  // A direction of unit norm over every trained parameter: half along the
  // gradient (so that the derivative is large against fp32 noise), half
  // random (so that every element of every gradient matters).
  std::mt19937 rng(11);
  std::vector<std::pair<int, std::vector<float>>> direction;
  double gradNorm2 = 0, randomNorm2 = 0;
  for (int param : step.program.slotsOf(bmrt::SlotKind::Param)) {
    int grad = step.program.gradientOf(param);
    if (grad < 0)
      continue;
    const bmrt::TensorView &g = step.executor->view(grad);
    std::vector<float> r(g.size());
    for (int64_t i = 0; i < g.size(); ++i) {
      r[i] = std::normal_distribution<float>()(rng);
      randomNorm2 += double(r[i]) * r[i];
      gradNorm2 += double(g.f32()[i]) * g.f32()[i];
    }
    direction.push_back({param, std::move(r)});
  }
  ASSERT_GT(gradNorm2, 0);
  double analytic = 0, dNorm2 = 0;
  for (auto &[param, d] : direction) {
    const float *g =
        step.executor->view(step.program.gradientOf(param)).f32();
    for (size_t i = 0; i < d.size(); ++i) {
      d[i] = static_cast<float>(0.5 * g[i] / std::sqrt(gradNorm2) +
                                0.5 * d[i] / std::sqrt(randomNorm2));
      dNorm2 += double(d[i]) * d[i];
    }
  }
  for (auto &[param, d] : direction) {
    const float *g =
        step.executor->view(step.program.gradientOf(param)).f32();
    for (size_t i = 0; i < d.size(); ++i) {
      d[i] = static_cast<float>(d[i] / std::sqrt(dNorm2));
      analytic += double(g[i]) * d[i];
    }
  }

  auto shifted = [&](double eps) {
    for (auto &[param, d] : direction) {
      float *w = step.executor->view(param).f32();
      for (size_t i = 0; i < d.size(); ++i)
        w[i] += static_cast<float>(eps * d[i]);
    }
    float l = step.loss();
    for (auto &[param, d] : direction) {
      float *w = step.executor->view(param).f32();
      for (size_t i = 0; i < d.size(); ++i)
        w[i] -= static_cast<float>(eps * d[i]);
    }
    return double(l);
  };
  // eps = 1e-2 along a unit direction. The loss (about 7) is computed in
  // fp32 with reductions of up to a few thousand terms: ~1e-6 relative,
  // ~1e-5 absolute rounding, which the difference quotient divides by
  // 2 eps: ~5e-4 absolute. The truncation error is eps^2 / 6 times the third
  // derivative along d: up to 0.2% of the derivative for these models
  // (measured; the derivative along d is 0.8 to 50). A rule that drops or
  // doubles one op's contribution moves it far more than 5e-4 + 1%.
  double eps = 1e-2;
  double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
  EXPECT_NEAR(analytic, numeric, 5e-4 + 0.01 * std::fabs(numeric))
      << GetParam().model << ": loss " << base << ", |grad| "
      << std::sqrt(gradNorm2);
}

/// Outlined layers run the same kernels on the same values in the same
/// order: the loss and every gradient are equal bit for bit, and the
/// program has one call per layer instead of the layers' instructions.
TEST_P(WholeModelGradient, OutliningBlocksKeepsTheStep) {
  CompiledStep flat, outlined;
  ASSERT_NO_FATAL_FAILURE(flat.build(GetParam()));
  ASSERT_NO_FATAL_FAILURE(outlined.build(GetParam(), /*outline=*/true));
  // Models without repeated layers (moe-tiny, wresnet-tiny) have nothing
  // to outline.
  EXPECT_EQ(outlined.program.functions.empty(),
            outlined.program.instrs.size() == flat.program.instrs.size());
  EXPECT_LE(outlined.program.instrs.size(), flat.program.instrs.size());
  EXPECT_EQ(flat.loss(), outlined.loss());
  forEachGradientPair(flat, outlined,
                      [](const std::string &name, const bmrt::TensorView &a,
                         const bmrt::TensorView &b) {
                        EXPECT_EQ(0, std::memcmp(a.data, b.data, a.bytes()))
                            << name;
                      });
}

/// Fused attention (bm-fuse-attention, --fuse-attention on) runs the same
/// arithmetic as the ops it replaces, in another order: the attention
/// cores become attention instructions, and the loss and every gradient
/// agree with the unfused step's to fp32 rounding. The scores' GEMM, the
/// softmax's sums and the context's GEMM sum the same terms (at most 16
/// keys here) as before, through OpenBLAS at other shapes; the CPU's
/// softmax_grad and the fused gradient's sum differ in order only. 1e-5
/// relative (of each gradient's largest element) covers that with a
/// margin; a wrong mask, scale or gradient is off by far more.
TEST_P(WholeModelGradient, FusedAttentionKeepsTheStep) {
  StepCase plainCase = GetParam(), fusedCase = GetParam();
  plainCase.fuseAttention = false;
  fusedCase.fuseAttention = true;
  CompiledStep plain, fused;
  ASSERT_NO_FATAL_FAILURE(plain.build(plainCase));
  ASSERT_NO_FATAL_FAILURE(fused.build(fusedCase));
  auto countOf = [](const bmrt::Program &program, const std::string &op) {
    return std::count_if(program.instrs.begin(), program.instrs.end(),
                         [&](const bmrt::Instr &i) { return i.op == op; });
  };
  // Each attention core's softmax became an attention; other softmaxes
  // (MoE's router) stay. Every model with attention fuses it but T5, whose
  // learned position bias keeps its cores op by op.
  EXPECT_EQ(countOf(fused.program, "attention") +
                countOf(fused.program, "softmax"),
            countOf(plain.program, "softmax"));
  EXPECT_EQ(countOf(fused.program, "attention_grad") +
                countOf(fused.program, "softmax_grad"),
            countOf(plain.program, "softmax_grad"));
  std::string model = GetParam().model;
  if (model != "t5-tiny" && model != "wresnet-tiny")
    EXPECT_GT(countOf(fused.program, "attention"), 0) << model;
  float a = plain.loss(), b = fused.loss();
  EXPECT_NEAR(a, b, 1e-5 * std::fabs(a)) << GetParam().model;
  forEachGradientPair(
      plain, fused,
      [&](const std::string &name, const bmrt::TensorView &x,
          const bmrt::TensorView &y) {
        ASSERT_EQ(x.size(), y.size()) << name;
        float largest = 0;
        for (int64_t i = 0; i < x.size(); ++i)
          largest = std::max(largest, std::fabs(x.f32()[i]));
        for (int64_t i = 0; i < x.size(); ++i)
          ASSERT_NEAR(x.f32()[i], y.f32()[i], 1e-5f * largest + 1e-9f)
              << GetParam().model << " " << name << "[" << i << "]";
      });
}

/// A frozen parameter a layer reads (GPT-2's causal-mask buffer, batch
/// norm's statistics) stays frozen, and the function argument bound to it
/// is a plain value: the outlined program round-trips through its text.
TEST(OutlineBlocks, FrozenParametersStayOutsideFunctions) {
  CompiledStep step;
  ASSERT_NO_FATAL_FAILURE(
      step.build({"hf-gpt2-tiny", {{"batch", 2}, {"seq", 16}}}));
  bmrt::Program program = step.lowered;
  std::set<int> frozen;
  for (const bmrt::Instr &instr : program.instrs)
    for (int o : instr.operands)
      if (instr.layer >= 0 && o >= 0 &&
          program.slots[o].kind == bmrt::SlotKind::Param)
        frozen.insert(o);
  ASSERT_FALSE(frozen.empty());
  for (int p : frozen)
    program.slots[p].frozen = true;
  bm::outlineBlocks(program);
  ASSERT_FALSE(program.functions.empty());
  for (const bmrt::Function &f : program.functions)
    for (const bmrt::Slot &slot : f.slots)
      EXPECT_FALSE(slot.frozen) << f.name;
  bmrt::Program again =
      bmrt::parseProgram(bmrt::printProgram(program), "outlined.bmp");
  int stillFrozen = 0;
  for (const bmrt::Slot &slot : again.slots)
    stillFrozen += slot.frozen;
  EXPECT_EQ(stillFrozen, static_cast<int>(frozen.size()));
}

INSTANTIATE_TEST_SUITE_P(
    TinyZoo, WholeModelGradient,
    testing::Values(StepCase{"gpt3-tiny", {{"batch", 2}, {"seq", 16}}},
                    StepCase{"llama2-tiny", {{"batch", 2}, {"seq", 16}}},
                    StepCase{"bert-tiny", {{"batch", 2}, {"seq", 16}}},
                    StepCase{"t5-tiny",
                             {{"batch", 2}, {"seq", 16}, {"dec_seq", 12}}},
                    StepCase{"vit-tiny", {{"batch", 2}}},
                    StepCase{"wresnet-tiny", {{"batch", 2}}},
                    StepCase{"moe-tiny", {{"batch", 2}, {"seq", 16}}},
                    StepCase{"hf-gpt2-tiny", {{"batch", 2}, {"seq", 16}}},
                    StepCase{"hf-llama2-tiny", {{"batch", 2}, {"seq", 16}}},
                    StepCase{"hf-bert-tiny", {{"batch", 2}, {"seq", 16}}}),
    [](const testing::TestParamInfo<StepCase> &info) {
      return testName(info.param);
    });

/// The directional derivative again through fused attention's gradients.
INSTANTIATE_TEST_SUITE_P(
    FusedAttention, WholeModelGradient,
    testing::Values(StepCase{"gpt3-tiny", {{"batch", 2}, {"seq", 16}}, true},
                    StepCase{"bert-tiny", {{"batch", 2}, {"seq", 16}}, true},
                    StepCase{"hf-gpt2-tiny", {{"batch", 2}, {"seq", 16}}, true},
                    StepCase{
                        "hf-llama2-tiny", {{"batch", 2}, {"seq", 16}}, true}),
    [](const testing::TestParamInfo<StepCase> &info) {
      return testName(info.param);
    });

} // namespace
