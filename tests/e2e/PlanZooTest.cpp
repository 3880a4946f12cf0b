//===- PlanZooTest.cpp - `bmc plan`'s pipeline on the model zoo -----------===//
//
// Runs what `bmc plan` runs (import, fold, extract, search) on the ONNX
// models of models/onnx, so the planner's quality bar holds for graphs as
// the importer produces them, not only for hand-built ones.
//
//===----------------------------------------------------------------------===//

#include "bm/BmDialect.h"
#include "driver/PlanDriver.h"
#include "passes/plan/GraphAnalysis.h"
#include "passes/plan/PlanOutput.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

#include <map>
#include <set>
#include <string>

using namespace bm;

namespace {

std::string modelPath(const std::string &name) {
  return std::string(BMC_SOURCE_DIR) + "/models/onnx/" + name + ".onnx";
}

/// The zoo model `name`, read once (a read failure is fatal to the test).
OnnxFile modelFile(const std::string &name) {
  return llvm::cantFail(readOnnxFile(modelPath(name)));
}

plan::ModelGraph load(mlir::MLIRContext &context, const std::string &name) {
  llvm::Expected<ModelForPlanning> model =
      loadModelForPlanning(context, modelFile(name), {});
  if (!model) {
    ADD_FAILURE() << name << ": " << llvm::toString(model.takeError());
    return {};
  }
  return std::move(model->graph);
}

using plan::test::a100;
using plan::test::trainingConfig;

/// A row of Narayanan et al. 2021 (SC'21) Table 1: the model, GPUs, global
/// batch, the paper's configuration (micro-batch and full recomputation as
/// in Megatron-LM's examples/sc21 scripts) and its measured TFLOP/s per GPU.
struct MegatronRow {
  const char *model;
  plan::test::GptDims dims; // the paper's, for its FLOP formula
  int gpus;
  int64_t batch;
  const char *paperConfig;
  double paperTflops;
};

class MegatronFromOnnxTest : public ::testing::TestWithParam<MegatronRow> {};

TEST_P(MegatronFromOnnxTest, PlanBeatsThePaperAndPredictsItsThroughput) {
  const MegatronRow &row = GetParam();
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, row.model);
  ASSERT_FALSE(graph.layerClass.empty()) << "the model did not fold";

  llvm::Expected<plan::Plan> paper = planModel(
      graph, a100(), trainingConfig(row.gpus, row.batch, row.paperConfig));
  ASSERT_TRUE(!!paper) << llvm::toString(paper.takeError());
  EXPECT_LE(paper->memory.total(), paper->deviceMemoryBytes)
      << "the paper ran this configuration on 80 GB GPUs";
  // Throughput by the paper's own FLOP formula (recomputation included),
  // so an error in the planner's FLOP count cannot hide here; the planner's
  // count must agree with it too.
  double tflops = plan::test::megatronFlops(row.dims, row.batch) /
                  (paper->stepSeconds * row.gpus) / 1e12;
  EXPECT_NEAR(tflops, row.paperTflops, 0.2 * row.paperTflops);
  EXPECT_NEAR(paper->hardwareTflopsPerGpu, tflops, 0.03 * tflops);

  llvm::Expected<plan::Plan> best =
      planModel(graph, a100(), trainingConfig(row.gpus, row.batch));
  ASSERT_TRUE(!!best) << llvm::toString(best.takeError());
  EXPECT_LE(best->stepSeconds, paper->stepSeconds * (1 + 1e-12))
      << "planner chose " << best->config.str();
  EXPECT_LE(best->memory.total(), best->deviceMemoryBytes);
}

INSTANTIATE_TEST_SUITE_P(
    Table1, MegatronFromOnnxTest,
    ::testing::Values(
        MegatronRow{"gpt3-1.7b", plan::test::megatron1_7B(), 32, 512,
                    "dp=32,tp=1,pp=1,mb=16,zero=0,recompute=full", 137},
        // Megatron-LM keeps the values between layers replicated over tp.
        MegatronRow{"gpt3-18b", plan::test::megatron18B(), 256, 1024,
                    "dp=32,tp=8,pp=1,mb=8,zero=0,recompute=full,"
                    "stream=replicated",
                    135},
        MegatronRow{"gpt3-39b", plan::test::megatron39B(), 512, 1536,
                    "dp=32,tp=8,pp=2,mb=4,zero=0,recompute=full,"
                    "schedule=1f1b,stream=replicated",
                    138}),
    [](const ::testing::TestParamInfo<MegatronRow> &info) {
      std::string name = info.param.model;
      for (char &c : name)
        if (!isalnum(static_cast<unsigned char>(c)))
          c = '_';
      return name;
    });

TEST(PlanZooTest, FoldsGpt3To175BIntoOneBlock) {
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, "gpt3-175b");
  ASSERT_EQ(graph.numLayers(), 96);
  for (int cls : graph.layerClass)
    EXPECT_EQ(cls, 0);
}

TEST(PlanZooTest, FoldedAndUnfoldedSearchAgree) {
  mlir::MLIRContext context;
  // Free, and with the values between blocks split over tp (the border of
  // the first instance comes from the prologue, the others' from a layer).
  for (const char *name : {"gpt3-350m", "llama2-tiny", "t5-tiny"}) {
    plan::ModelGraph graph = load(context, name);
    for (const char *fix : {static_cast<const char *>(nullptr),
                            "tp=4,stream=sequence", "tp=4,stream=hidden"}) {
      plan::TrainingConfig folded = trainingConfig(16, 64, fix);
      plan::TrainingConfig unfolded = folded;
      unfolded.fold = false;
      llvm::Expected<plan::Plan> a = planModel(graph, a100(), folded);
      llvm::Expected<plan::Plan> b = planModel(graph, a100(), unfolded);
      ASSERT_TRUE(a && b) << name;
      EXPECT_DOUBLE_EQ(a->stepSeconds, b->stepSeconds) << name;
      EXPECT_EQ(a->config.str(), b->config.str()) << name;
      EXPECT_EQ(a->memory.total(), b->memory.total()) << name;
    }
  }
}

TEST(PlanZooTest, EveryFullSizeModelPlans) {
  // Each family at a size and GPU count a team would use; the plan must fit.
  struct Case {
    const char *model;
    int gpus;
    int64_t batch;
  };
  mlir::MLIRContext context;
  for (Case c : {Case{"gpt3-175b", 1024, 1536}, Case{"llama2-70b", 512, 1024},
                 Case{"bert-large", 16, 256}, Case{"t5-large", 32, 256},
                 Case{"vit-h14", 64, 1024}, Case{"wresnet-101-2", 16, 512},
                 Case{"moe-10b", 64, 512}, Case{"hf-llama2-7b", 64, 512},
                 Case{"hf-gpt2-124m", 8, 64}, Case{"hf-bert-large", 16, 256}}) {
    plan::ModelGraph graph = load(context, c.model);
    llvm::Expected<plan::Plan> plan =
        planModel(graph, a100(), trainingConfig(c.gpus, c.batch));
    ASSERT_TRUE(!!plan) << c.model << ": " << llvm::toString(plan.takeError());
    EXPECT_LE(plan->memory.total(), plan->deviceMemoryBytes) << c.model;
    EXPECT_GT(plan->mfu, 0.05) << c.model;
    // No plan beats the GEMM efficiency (0.8 of peak).
    EXPECT_LT(plan->mfu, 0.8) << c.model;
  }
}

TEST(PlanZooTest, MoeExpertGemmsScaleWithTheMicroBatch) {
  // GShard groups the tokens of two samples (sequence 1024, groups of 2048):
  // the graph's batch unit is two samples, and the group dim carries the
  // batch through every GEMM of a layer, the experts' included.
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, "moe-10b");
  ASSERT_EQ(graph.batchGranularity, 2);
  for (const plan::OpInfo &op : graph.ops)
    if (op.isContraction && op.layer >= 0) {
      EXPECT_GE(op.batchFactor, 0) << op.label << " has no batch factor";
    }
  // Four times the micro-batch in a quarter of the micro-batches is the same
  // work per step; bigger GEMMs run a little more efficiently, no more.
  auto computeSeconds = [&](int mb) {
    std::string fix =
        "dp=8,tp=8,pp=1,ep=8,zero=1,recompute=none,mb=" + std::to_string(mb);
    llvm::Expected<plan::Plan> plan =
        planModel(graph, a100(), trainingConfig(64, 512, fix.c_str()));
    EXPECT_TRUE(!!plan) << llvm::toString(plan.takeError());
    return plan ? plan->time.compute : 0.0;
  };
  double small = computeSeconds(2), large = computeSeconds(8);
  EXPECT_LE(large, small);
  EXPECT_GT(large, 0.8 * small);

  llvm::Expected<plan::Plan> plan =
      planModel(graph, a100(), trainingConfig(64, 512));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  EXPECT_LT(plan->mfu, 0.8);

  // The step's FLOPs by hand (models/zoo.py: hidden H = 1536, FFN 8H, 16
  // layers alternating dense and top-2 MoE, 32 experts, groups of G = 2048
  // tokens, capacity 2G / E per expert, sequence 1024, vocabulary 32000).
  // Per token, forward: attention 8H^2 + 4 x seq x H; dense FFN 4 x H x 8H;
  // MoE FFN twice that (two expert slots per token), the gate 2 x H x E, and
  // the one-hot dispatch and combine einsums 2 x (E x capacity) x H each,
  // E x capacity = 2G; the LM head 2 x H x vocab. Training is 3 forwards.
  const double h = 1536, seq = 1024, experts = 32, group = 2048;
  const double attention = 8 * h * h + 4 * seq * h, dense = 32 * h * h;
  const double moe = 2 * dense + 2 * h * experts + 2 * (2 * 2 * group * h);
  const double perToken =
      8 * (attention + dense) + 8 * (attention + moe) + 2 * h * 32000;
  EXPECT_NEAR(plan->modelFlopsPerStep / (3 * perToken * 512 * seq), 1.0, 0.01);
}

TEST(PlanZooTest, AttentionCoresAreFoundWithAndWithoutTokenIds) {
  // The attention core (what selective recomputation repeats) runs from the
  // scores Q K^T to the product with V, in language models and in ViT, whose
  // tokens are image patches; an MoE router's softmax is not an attention.
  struct Case {
    const char *model;
    int attentionsPerBlock;
    const char *attentionScope; // every core op's label holds this
  };
  mlir::MLIRContext context;
  for (Case c : {Case{"gpt3-tiny", 1, "/attn/"}, Case{"vit-tiny", 1, "/attn/"},
                 Case{"moe-380m", 2, "/attention/"},
                 Case{"llama2-tiny", 1, "/self_attn/"}}) {
    plan::ModelGraph graph = load(context, c.model);
    plan::GraphAnalysis analysis(graph, /*fold=*/true);
    for (const plan::Segment &segment : analysis.segments()) {
      if (segment.kind != plan::SegmentKind::Layer)
        continue;
      EXPECT_EQ(analysis.countAttentions(segment.ops), c.attentionsPerBlock)
          << c.model;
      int coreOps = 0;
      for (int op : segment.ops) {
        if (!analysis.inAttentionCore(op))
          continue;
        ++coreOps;
        EXPECT_NE(graph.ops[op].label.find(c.attentionScope), std::string::npos)
            << c.model << ": " << graph.ops[op].label;
      }
      // Q K^T, the softmax and the product with V at least, per attention.
      EXPECT_GE(coreOps, 3 * c.attentionsPerBlock) << c.model;
    }
  }
  // In ViT, selective recomputation now trades compute for memory.
  plan::ModelGraph vit = load(context, "vit-h14");
  auto evaluate = [&](const char *recompute) {
    std::string fix =
        std::string("dp=8,tp=1,pp=1,mb=4,zero=1,recompute=") + recompute;
    llvm::Expected<plan::Plan> plan =
        planModel(vit, a100(), trainingConfig(8, 64, fix.c_str()));
    EXPECT_TRUE(!!plan) << llvm::toString(plan.takeError());
    return plan ? *plan : plan::Plan();
  };
  plan::Plan none = evaluate("none"), selective = evaluate("selective");
  EXPECT_LT(selective.memory.activations, none.memory.activations);
  EXPECT_GT(selective.time.compute, none.time.compute);
}

TEST(PlanZooTest, GptLayerHasMegatronsTwoAllReducesEachWay) {
  // Megatron-LM (Shoeybi et al. 2019, figure 3): with the attention and the
  // MLP split over tp, each layer all-reduces twice forward and twice
  // backward, and nothing else: constants, the causal mask and the GELU
  // coefficients have no gradient to reduce.
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, "gpt3-175b");
  llvm::Expected<plan::Plan> plan = planModel(
      graph, a100(),
      trainingConfig(1024, 1536,
                     "dp=16,tp=8,pp=8,mb=1,zero=1,recompute=none,schedule=1f1b,"
                     "stream=replicated"));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  int64_t expected = 2 * int64_t(graph.numLayers()) *
                     plan->config.numMicroBatches;
  int64_t forward = 0, backward = 0;
  for (const plan::CollectiveSummary &c : plan->collectives) {
    if (c.axis != "tp")
      continue;
    if (c.where == "lm_head" && c.kind == "all_reduce") {
      // The vocabulary-parallel head (column-parallel over the classes)
      // all-reduces its input's gradient once per micro-batch, as
      // Megatron-LM's does; the loss on its split logits gathers three
      // statistics per token (the all_gather below).
      EXPECT_EQ(c.phase, "backward");
      EXPECT_EQ(c.countPerStep, plan->config.numMicroBatches);
      continue;
    }
    if (c.where == "wte" && c.kind == "all_reduce") {
      // The vocabulary-parallel embedding (the table tied to the head,
      // split along the vocabulary) all-reduces its partial output once
      // per micro-batch, as Megatron-LM's does.
      EXPECT_EQ(c.phase, "forward");
      EXPECT_EQ(c.countPerStep, plan->config.numMicroBatches);
      continue;
    }
    if (c.kind != "all_reduce") {
      // Outside the layers only: the vocabulary-parallel embedding and LM
      // head gather their slices, and each stage gathers the 1/tp slice of
      // the boundary it received (Narayanan et al. 2021, section 4.1).
      EXPECT_TRUE(c.where == "embed" || c.where == "lm_head" ||
                  (c.where == "stage boundary" && c.kind == "all_gather"))
          << c.kind << " at " << c.where;
      continue;
    }
    (c.phase == "forward" ? forward : backward) += c.countPerStep;
  }
  EXPECT_EQ(forward, expected);
  EXPECT_EQ(backward, expected);
}


TEST(PlanZooTest, LlamaSplitsItsStreamOverTp) {
  // With the values between layers split over tp (along the sequence, as
  // Megatron-LM's sequence parallelism does, or along hidden, where
  // LLaMA's RMSNorm -- elementwise ops and a mean -- runs on slices with one
  // small all-reduce), the norms and residual adds run on slices: faster
  // than Megatron-LM's replicated stream.
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, "llama2-7b");
  const char *mesh = "dp=8,tp=8,pp=1,mb=1,zero=1,recompute=none";
  std::string pinned = std::string(mesh) + ",stream=replicated";
  llvm::Expected<plan::Plan> replicated =
      planModel(graph, a100(), trainingConfig(64, 512, pinned));
  llvm::Expected<plan::Plan> searched =
      planModel(graph, a100(), trainingConfig(64, 512, mesh));
  ASSERT_TRUE(replicated && searched);
  EXPECT_NE(searched->config.streamDim, -1);
  EXPECT_LT(searched->stepSeconds, replicated->stepSeconds * 0.99);
  EXPECT_LE(searched->memory.total(), searched->deviceMemoryBytes);
  // What --emit-mlir writes for it passes the annotate phase's verifier.
  llvm::Expected<ModelForPlanning> step =
      annotateForStep(context, modelFile("llama2-7b"), {}, *searched, graph);
  ASSERT_TRUE(!!step) << llvm::toString(step.takeError());
}

TEST(PlanZooTest, GShardGroupsSetTheBatchGranularity) {
  // moe-2.4b groups 2048 tokens of 1024-token sequences: whole groups need
  // two samples, so no micro-batch may hold one.
  mlir::MLIRContext context;
  plan::ModelGraph moe = load(context, "moe-2.4b");
  EXPECT_EQ(moe.batchGranularity, 2);
  EXPECT_EQ(load(context, "gpt3-350m").batchGranularity, 1);
  llvm::Expected<plan::Plan> plan =
      planModel(moe, a100(), trainingConfig(64, 512));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->config.microBatch % 2, 0);
  llvm::Expected<plan::Plan> odd =
      planModel(moe, a100(), trainingConfig(64, 512, "mb=1"));
  ASSERT_FALSE(!!odd);
  EXPECT_EQ(llvm::toString(odd.takeError()),
            "--fix mb=1 is not a multiple of 2: the model groups tokens of 2 "
            "samples together (its micro-batches must hold whole groups)");
}

TEST(PlanZooTest, EmittedModelsCarryTheirPlanAndVerify) {
  // --emit-mlir for families whose import differs with the batch: BERT's
  // attention mask folds on the host at batch 2 but not at 512, GShard's
  // token groups move the batch to another dim, and a dp=1 plan emits at
  // batch 1.
  struct Case {
    const char *model;
    int gpus;
    int64_t batch;
    const char *fix;
  };
  for (Case c : {Case{"hf-bert-large", 64, 512, nullptr},
                 Case{"moe-2.4b", 64, 512, nullptr},
                 Case{"moe-380m", 16, 256, "dp=16,tp=1,pp=1,ep=4"},
                 Case{"gpt3-175b", 64, 512, nullptr},
                 Case{"t5-large", 16, 256, "dp=4,tp=2,pp=2"}}) {
    mlir::MLIRContext context;
    plan::ModelGraph graph = load(context, c.model);
    llvm::Expected<plan::Plan> plan =
        planModel(graph, a100(), trainingConfig(c.gpus, c.batch, c.fix));
    ASSERT_TRUE(!!plan) << c.model << ": " << llvm::toString(plan.takeError());
    llvm::Expected<ModelForPlanning> step =
        annotateForStep(context, modelFile(c.model), {}, *plan, graph);
    ASSERT_TRUE(!!step) << c.model << ": "
                        << llvm::toString(step.takeError());
    EXPECT_TRUE(step->module->lookupSymbol("mesh")) << c.model;
  }
}


TEST(PlanZooTest, InterludesStayBetweenTheirLayers) {
  // Wide-ResNet-101-2: the first block of each stage (it downsamples) is
  // unlike the others, so the model is 4 runs of layers with 3 interludes.
  // They are planned in place, not moved to the end: on a 1F1B pipeline the
  // stages of the ops never go back.
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, "wresnet-101-2");
  llvm::Expected<plan::Plan> plan = planModel(
      graph, a100(), trainingConfig(16, 256, "dp=4,tp=1,pp=4,schedule=1f1b"));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  std::vector<std::string> names;
  for (const plan::BlockSharding &block : plan->blocks)
    names.push_back(block.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "prologue", "block 0", "after layer 1", "block 1",
                       "after layer 4", "block 2", "after layer 26",
                       "block 3", "epilogue"}));
  int layers = 0;
  for (int n : plan->layersPerStage)
    layers += n;
  EXPECT_EQ(layers, graph.numLayers());

  llvm::Expected<ModelForPlanning> step =
      annotateForStep(context, modelFile("wresnet-101-2"), {}, *plan, graph);
  ASSERT_TRUE(!!step) << llvm::toString(step.takeError());
  int64_t previous = 0;
  for (mlir::Operation &op :
       step->main.getBody().front().without_terminator()) {
    auto stage = op.getAttrOfType<mlir::IntegerAttr>(
        mlir::bm::BmDialect::kStageAttrName);
    ASSERT_TRUE(stage);
    EXPECT_GE(stage.getInt(), previous) << "stages go back";
    previous = stage.getInt();
  }
  EXPECT_EQ(previous, 3);
}


/// The "side inputs" send_recv of a plan, if any.
const plan::CollectiveSummary *sideInputs(const plan::Plan &plan) {
  for (const plan::CollectiveSummary &c : plan.collectives)
    if (c.where == "side inputs")
      return &c;
  return nullptr;
}

TEST(PlanZooTest, DecoderStagesReceiveTheEncoderOutput) {
  // T5: every decoder layer's cross-attention reads the encoder output, so
  // every pipeline stage holding decoder layers receives it (and sends its
  // gradient back). GPT's layers read nothing but the previous layer and
  // constants: no side inputs.
  mlir::MLIRContext context;
  plan::ModelGraph t5 = load(context, "t5-large");
  llvm::Expected<plan::Plan> plan = planModel(
      t5, a100(), trainingConfig(16, 256, "dp=4,tp=1,pp=4,mb=4,schedule=1f1b"));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  const plan::CollectiveSummary *side = sideInputs(*plan);
  ASSERT_TRUE(side);
  // At least the encoder output: 4 samples x 512 tokens x 1024 x 2 bytes.
  EXPECT_GE(side->bytes, 4.0 * 512 * 1024 * 2);
  // Once per micro-batch each way to each stage that starts inside the
  // decoder (layers 24 to 47); the stage that ends the encoder makes the
  // encoder output itself.
  int first = 0, receivers = 0;
  for (int layers : plan->layersPerStage) {
    ASSERT_NE(first, 24) << "the encoder's end could be on either side";
    receivers += first > 24;
    first += layers;
  }
  EXPECT_GT(receivers, 0);
  EXPECT_EQ(side->countPerStep, 2 * plan->config.numMicroBatches * receivers);

  plan::ModelGraph gpt = load(context, "gpt3-350m");
  llvm::Expected<plan::Plan> gptPlan =
      planModel(gpt, a100(),
                trainingConfig(16, 256, "dp=4,tp=1,pp=4,mb=4,schedule=1f1b"));
  ASSERT_TRUE(!!gptPlan) << llvm::toString(gptPlan.takeError());
  EXPECT_FALSE(sideInputs(*gptPlan));
}

// Each memory-bound op carries the kernel class its op names (Costs.cpp),
// which a calibrated cluster times at its own measured rate.
TEST(PlanZooTest, OpsCarryTheirMemoryKernelClass) {
  using cost::MemoryKernelClass;
  const std::map<std::string, MemoryKernelClass> expected = {
      {"bm.add", MemoryKernelClass::Elementwise},
      {"bm.concat", MemoryKernelClass::DataMovement},
      {"bm.gather", MemoryKernelClass::DataMovement},
      {"bm.layer_norm", MemoryKernelClass::Normalization},
      {"bm.mul", MemoryKernelClass::Elementwise},
      {"bm.reduce_mean", MemoryKernelClass::Reduction},
      {"bm.rms_norm", MemoryKernelClass::Normalization},
      {"bm.slice", MemoryKernelClass::DataMovement},
      {"bm.softmax", MemoryKernelClass::Softmax},
      {"bm.transpose", MemoryKernelClass::DataMovement},
  };
  mlir::MLIRContext context;
  std::set<std::string> seen;
  for (const char *name : {"gpt3-tiny", "llama2-tiny", "bert-tiny"})
    for (const plan::OpInfo &op : load(context, name).ops) {
      auto it = expected.find(op.opName);
      if (it == expected.end())
        continue;
      seen.insert(op.opName);
      EXPECT_EQ(op.memoryClass, it->second) << name << ": " << op.opName;
    }
  // The three models have softmax, norms, reductions (LLaMA's RMSNorm is
  // exported decomposed) and layout copies.
  for (const char *op : {"bm.softmax", "bm.layer_norm", "bm.reduce_mean",
                         "bm.transpose", "bm.add"})
    EXPECT_TRUE(seen.count(op)) << op;
}

// The parameters bm-split-stages gives every pipeline stage a copy of, as
// `bmc compile --fix dp=1,tp=1,pp=2` lays them out (parameter slots in both
// stage programs, their gradients partial over pp): GPT's and BERT's word
// embedding, read by the embedding and the LM head; Llama's rotary tables,
// sliced in the prologue and read by every layer, each stage slicing them
// again; T5's embedding (encoder, decoder and head) and relative position
// biases (a table every layer of the encoder, or decoder, reads).
TEST(PlanZooTest, SharedParametersAreTheOnesThePipelineStagesShare) {
  const std::map<std::string, std::set<std::string>> shared = {
      {"gpt3-tiny", {"wte.weight"}},
      {"hf-gpt2-tiny", {"transformer.wte.weight"}},
      {"bert-tiny", {"embeddings.word_embeddings.weight"}},
      {"llama2-tiny", {"buffer.rope.cos", "buffer.rope.sin"}},
      {"t5-tiny",
       {"shared.weight",
        "encoder.prelude.position.relative_attention_bias.weight",
        "decoder.prelude.position.relative_attention_bias.weight"}},
  };
  mlir::MLIRContext context;
  for (const auto &[name, expected] : shared) {
    plan::ModelGraph graph = load(context, name);
    plan::GraphAnalysis analysis(graph, /*fold=*/true);
    std::set<std::string> found;
    for (int v : analysis.sharedParameters())
      found.insert(graph.values[v].name);
    EXPECT_EQ(found, expected) << name;
  }
}

/// The fp32 AdamW plan of gpt3-tiny on dp2 x pp2 (two micro-batches of 2),
/// as bmrt runs it.
plan::Plan tinyOnBmrt(plan::ModelGraph &graph, int zero) {
  cost::Cluster bmrt = a100();
  bmrt.runtime = cost::RuntimeModel::Bmrt;
  plan::TrainingConfig config = trainingConfig(
      4, 8,
      "dp=2,tp=1,pp=2,mb=2,recompute=none,schedule=1f1b,zero=" +
          std::to_string(zero));
  config.precision = cost::Precision::Fp32;
  llvm::Expected<plan::Plan> plan = planModel(graph, bmrt, config);
  EXPECT_TRUE(!!plan) << llvm::toString(plan.takeError());
  return plan ? *plan : plan::Plan();
}

// gpt3-tiny ties its LM head to the token embedding: both pipeline stages
// hold it, with its gradient and optimizer state, and sum its gradient over
// pp once the pipeline has drained (Parallel::sumOverStages). Measured
// 2026-11-26: `bmc compile gpt3-tiny.onnx --gpus 4 --fix
// dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=Z` with a cluster file of
// `runtime: bmrt`, then `mpirun -np 4 trainer --steps 2 --log`; the peak
// memory of ranks 0-1 (stage 0) and 2-3 (stage 1), in bytes. Stage 1's
// parameters are 82,880 fp32 elements: its layer and final norm (50,112)
// and the embedding (32,768), which the planner used to count on stage 0
// alone.
TEST(PlanZooTest, TiedEmbeddingIsHeldWhereTheTrainerHoldsIt) {
  struct Measured {
    int zero;
    double params[2], grads[2], optimizer[2];
    double sumBytes; // the pp all-reduce of the embedding's gradient
  };
  const Measured runs[] = {
      {0, {335104, 331520}, {670208, 663040}, {670208, 663040}, 32768 * 4},
      {2, {335104, 331520}, {568192, 562816}, {335104, 331520}, 32768 * 2},
      {3, {298624, 296832}, {568192, 562816}, {335104, 331520}, 32768 * 2},
  };
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, "gpt3-tiny");
  for (const Measured &run : runs) {
    plan::Plan plan = tinyOnBmrt(graph, run.zero);
    ASSERT_EQ(plan.stageMemory.size(), 2u) << "zero=" << run.zero;
    for (int stage = 0; stage < 2; ++stage) {
      const plan::MemoryBreakdown &memory = plan.stageMemory[stage];
      EXPECT_EQ(memory.params, run.params[stage]) << "zero=" << run.zero;
      EXPECT_EQ(memory.grads, run.grads[stage]) << "zero=" << run.zero;
      EXPECT_EQ(memory.optimizer, run.optimizer[stage]) << "zero=" << run.zero;
    }
    if (run.zero < 3) // ZeRO 3 holds a dp shard and the gathered tensor
      EXPECT_EQ(plan.stageMemory[1].params / 4, 82880);
    // One all-reduce per pipeline rank over pp, the embedding's gradient
    // (under ZeRO 2 and 3 the dp shard), once the pipeline has drained.
    const plan::CollectiveSummary *sum = nullptr;
    for (const plan::CollectiveSummary &c : plan.collectives)
      if (c.axis == plan::kPipelineAxis && c.kind == "all_reduce")
        sum = &c;
    ASSERT_TRUE(sum) << "zero=" << run.zero;
    EXPECT_EQ(sum->bytes, run.sumBytes) << "zero=" << run.zero;
    EXPECT_EQ(sum->countPerStep, 2);
    EXPECT_EQ(sum->phase, "step");
    EXPECT_EQ(plan::inconsistency(plan), std::nullopt);
  }
}

// Megatron-LM keeps the word embedding on the first and the last stage
// too, and all-reduces its fp32 gradient over the two.
TEST(PlanZooTest, MegatronHoldsTheTiedEmbeddingOnTheLastStage) {
  mlir::MLIRContext context;
  plan::ModelGraph graph = load(context, "gpt3-tiny");
  llvm::Expected<plan::Plan> plan = planModel(
      graph, a100(),
      trainingConfig(4, 8, "dp=2,tp=1,pp=2,mb=2,zero=1,recompute=none,"
                           "schedule=1f1b"));
  ASSERT_TRUE(!!plan) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->stageMemory.size(), 2u);
  EXPECT_EQ(plan->stageMemory[1].params / 2, 82880); // bf16
  bool summed = false;
  for (const plan::CollectiveSummary &c : plan->collectives)
    if (c.axis == plan::kPipelineAxis && c.kind == "all_reduce") {
      summed = true;
      EXPECT_EQ(c.bytes, 32768 * 4);
    }
  EXPECT_TRUE(summed);
}

} // namespace
