//===- PlanOutputTest.cpp - text, JSON and Megatron-LM output -------------===//

#include "passes/plan/PlanOutput.h"
#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "llvm/Support/FormatVariadic.h"
#include "gtest/gtest.h"

#include <map>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

/// An 8-layer GPT of hidden 1024.
ModelGraph smallGpt() {
  GptDims dims;
  dims.layers = 8;
  dims.hidden = 1024;
  dims.heads = 16;
  dims.sequence = 512;
  dims.vocab = 8192;
  return buildGpt(dims);
}

Plan makePlan(const char *fix = nullptr) {
  ModelGraph graph = smallGpt();
  TrainingConfig config = trainingConfig(16, 64);
  cost::Cluster cluster = a100();
  if (fix) {
    config.fixed = llvm::cantFail(parseFixedChoices(fix));
    return llvm::cantFail(evaluateConfiguration(graph, cluster, config));
  }
  return llvm::cantFail(searchPlan(graph, cluster, config));
}

TEST(PlanJsonTest, SameInputSameBytes) {
  EXPECT_EQ(planToJson(makePlan()), planToJson(makePlan()));
}

TEST(PlanJsonTest, RoundTrips) {
  Plan plan = makePlan("dp=2,tp=4,pp=2,mb=2,zero=1,recompute=selective,"
                       "schedule=interleaved,v=2");
  std::string json = planToJson(plan);
  EXPECT_NE(json.find("\"schema_version\": 1"), std::string::npos);
  llvm::Expected<Plan> read = parsePlanJson(json);
  ASSERT_TRUE(!!read) << llvm::toString(read.takeError());
  EXPECT_EQ(read->config, plan.config);
  EXPECT_EQ(read->layersPerStage, plan.layersPerStage);
  ASSERT_EQ(read->blocks.size(), plan.blocks.size());
  EXPECT_EQ(read->blocks[1].ops.size(), plan.blocks[1].ops.size());
  EXPECT_EQ(planToJson(*read), json);
  Plan split = makePlan("dp=4,tp=4,pp=1,mb=1,stream=hidden");
  ASSERT_EQ(split.config.streamDim, 2);
  llvm::Expected<Plan> readSplit = parsePlanJson(planToJson(split));
  ASSERT_TRUE(!!readSplit) << llvm::toString(readSplit.takeError());
  EXPECT_EQ(readSplit->config, split.config);
  split.precision = Precision::Fp16Mixed;
  llvm::Expected<Plan> readFp16 = parsePlanJson(planToJson(split));
  ASSERT_TRUE(!!readFp16) << llvm::toString(readFp16.takeError());
  EXPECT_EQ(readFp16->precision, Precision::Fp16Mixed);
  // Experts, written only for models that have them.
  EXPECT_EQ(json.find("\"experts\""), std::string::npos);
  plan.numExperts = 8;
  plan.routerTopK = 2;
  plan.expertLayersPerBlock = {true, false};
  llvm::Expected<Plan> readExperts = parsePlanJson(planToJson(plan));
  ASSERT_TRUE(!!readExperts) << llvm::toString(readExperts.takeError());
  EXPECT_EQ(readExperts->numExperts, 8);
  EXPECT_EQ(readExperts->routerTopK, 2);
  EXPECT_EQ(readExperts->expertLayersPerBlock, plan.expertLayersPerBlock);
  EXPECT_EQ(planToJson(*readExperts), planToJson(plan));
}

/// The symbolic dimensions the plan's model was imported with: written
/// (sorted by name) where `sequence_length` does not say them all, read back
/// as written; a plan whose only one is "seq" at the sequence length keeps
/// the bytes it had before the key (`bmc compile --plan` binds the sequence
/// for it).
TEST(PlanJsonTest, SymbolicDimsRoundTrip) {
  Plan plan = makePlan("dp=2,tp=4,pp=2");
  ASSERT_EQ(plan.sequenceLength, 512);
  EXPECT_TRUE(plan.symbolicDims.empty()); // graph built by hand
  const std::string before = planToJson(plan);
  EXPECT_EQ(before.find("symbolic_dims"), std::string::npos);

  plan.symbolicDims = {{"seq", 512}};
  EXPECT_EQ(planToJson(plan), before);
  llvm::Expected<Plan> seqOnly = parsePlanJson(before);
  ASSERT_TRUE(!!seqOnly) << llvm::toString(seqOnly.takeError());
  EXPECT_TRUE(seqOnly->symbolicDims.empty());

  // An encoder-decoder: the decoder's length is a dimension of its own.
  plan.symbolicDims = {{"seq", 512}, {"dec_seq", 12}};
  std::string json = planToJson(plan);
  size_t at = json.find("\"symbolic_dims\": {\n    \"dec_seq\": 12,\n"
                        "    \"seq\": 512\n  }");
  EXPECT_NE(at, std::string::npos) << json.substr(0, 400);
  EXPECT_LT(json.find("\"sequence_length\""), at);
  llvm::Expected<Plan> read = parsePlanJson(json);
  ASSERT_TRUE(!!read) << llvm::toString(read.takeError());
  EXPECT_EQ(read->symbolicDims, plan.symbolicDims);
  EXPECT_EQ(planToJson(*read), json);

  // One dimension that is not "seq", or "seq" at another length, is
  // written too: the sequence length alone would not bind it.
  for (std::map<std::string, int64_t> dims :
       {std::map<std::string, int64_t>{{"tokens", 512}},
        std::map<std::string, int64_t>{{"seq", 256}}}) {
    plan.symbolicDims = dims;
    llvm::Expected<Plan> one = parsePlanJson(planToJson(plan));
    ASSERT_TRUE(!!one) << llvm::toString(one.takeError());
    EXPECT_EQ(one->symbolicDims, dims);
  }

  auto errorOf = [](std::string text) {
    return errorText(parsePlanJson(text));
  };
  const size_t value = json.find("12", json.find("\"dec_seq\""));
  std::string bad = json;
  bad.replace(value, 2, "-1");
  EXPECT_EQ(errorOf(bad),
            "plan: 'symbolic_dims.dec_seq' must be a non-negative integer");
  bad = json;
  bad.replace(value, 2, "\"x\"");
  EXPECT_EQ(errorOf(bad),
            "plan: 'symbolic_dims.dec_seq' must be a non-negative integer");
  bad = before;
  at = bad.find("\"precision\"");
  bad.insert(at, "\"symbolic_dims\": [1],\n  ");
  EXPECT_EQ(errorOf(bad), "plan: 'symbolic_dims' must be an object");
}

TEST(PlanJsonTest, ReaderErrors) {
  auto errorOf = [](llvm::StringRef text) {
    return errorText(parsePlanJson(text));
  };
  EXPECT_EQ(errorOf("{\"schema_version\": 2}"),
            "plan: schema_version 2 is not supported (this bmc reads "
            "version 1)");
  EXPECT_EQ(errorOf("[]"), "plan: expected a JSON object");
  EXPECT_EQ(errorOf("{}"), "plan: missing 'schema_version'");
  EXPECT_EQ(errorOf("{").rfind("plan: malformed JSON: ", 0), 0u);
  std::string json = planToJson(makePlan());
  size_t at = json.find("\"tp\": ");
  json.replace(at, 7, "\"tp\": \"x\"");
  EXPECT_EQ(errorOf(json).rfind("plan: 'config.tp' must be an integer", 0), 0u)
      << errorOf(json);
  Plan moe = makePlan();
  moe.numExperts = 8;
  moe.routerTopK = 2;
  moe.expertLayersPerBlock = {true};
  json = planToJson(moe);
  at = json.find("true", json.find("\"layers_per_block\""));
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 4, "1");
  EXPECT_EQ(errorOf(json),
            "plan: 'experts.layers_per_block' must hold booleans");
}

TEST(PlanTextTest, ReportHasEverySection) {
  Plan plan = makePlan();
  std::string text;
  llvm::raw_string_ostream os(text);
  printPlanText(plan, os, /*explain=*/true);
  for (const char *section :
       {"mesh        dp=", "fold        8 layers -> 1 unique block",
        "step time", "comm (nvlink)", "comm (network)", "pipeline bubble",
        "MFU", "memory per GPU", "optimizer state", "collectives per step",
        "alternatives", "block 0 (8 instances)", "layer0.attn.c_attn",
        "--fix       dp="})
    EXPECT_NE(text.find(section), std::string::npos) << section;
}

TEST(PlanTextTest, CollectivesAreWhatOneDeviceSees) {
  // Four pipeline ranks each send and receive their own boundaries: the
  // text shows one rank's calls and time (the busiest), not the four
  // ranks' sum, which would add up transfers that run side by side.
  Plan plan = makePlan("dp=2,tp=2,pp=4,mb=1,zero=0,recompute=none");
  int64_t busiestCalls = 0, allCalls = 0;
  std::map<int, int64_t> callsPerStage;
  for (const CostItem &item : plan.items)
    if (item.axis == kPipelineAxis && item.what == "send_recv") {
      callsPerStage[item.stage] += item.count;
      allCalls += item.count * item.devices;
    }
  for (const auto &[stage, calls] : callsPerStage)
    busiestCalls = std::max(busiestCalls, calls);
  ASSERT_GT(busiestCalls, 0);
  ASSERT_LT(busiestCalls, allCalls);
  std::string text;
  llvm::raw_string_ostream os(text);
  printPlanText(plan, os, /*explain=*/false);
  EXPECT_NE(text.find("collectives per step on one device"), std::string::npos)
      << text;
  std::string line = llvm::formatv("  pp  send_recv       forward+backward  "
                                   "{0,7} calls",
                                   busiestCalls)
                         .str();
  EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

TEST(PlanTextTest, AlternativesThatTieSaySo) {
  // Blocks over a square grid of tokens: splitting the stream along the
  // rows or along the columns costs the same, so one of the two is chosen
  // and the other is listed as an equal choice, not "slower by 0.0%". (The
  // features, 260, do not split 8 ways.)
  MlpStackDims dims;
  dims.positions = {32, 32};
  dims.features = 260;
  ModelGraph graph = buildMlpStack(dims);
  TrainingConfig config = trainingConfig(8, 8);
  config.fixed =
      llvm::cantFail(parseFixedChoices("dp=1,tp=8,pp=1,stream=sequence"));
  config.numAlternatives = 20;
  llvm::Expected<Plan> searched = searchPlan(graph, a100(), config);
  ASSERT_TRUE(!!searched) << llvm::toString(searched.takeError());
  const Plan &plan = *searched;
  ASSERT_EQ(plan.config.stream, StreamLayout::Sequence) << plan.config.str();
  const int other = plan.config.streamDim == 1 ? 2 : 1;
  ASSERT_TRUE(plan.config.streamDim == 1 || plan.config.streamDim == 2)
      << plan.config.str();
  bool found = false;
  for (const Alternative &alternative : plan.alternatives)
    if (alternative.config.stream == StreamLayout::Sequence &&
        alternative.config.streamDim == other &&
        alternative.config.microBatch == plan.config.microBatch &&
        alternative.config.recompute == plan.config.recompute &&
        alternative.config.zeroStage == plan.config.zeroStage) {
      found = true;
      EXPECT_EQ(alternative.stepSeconds, plan.stepSeconds);
      EXPECT_EQ(alternative.reason, "as fast and as large: an equal choice");
    }
  EXPECT_TRUE(found) << "no alternative splits dim " << other;
}

TEST(MegatronExportTest, PaperStyleArguments) {
  Plan plan = makePlan("dp=2,tp=4,pp=2,mb=2,zero=1,recompute=full,"
                       "schedule=interleaved,v=2,stream=replicated");
  EXPECT_EQ(llvm::cantFail(exportMegatronArguments(plan)),
            "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 2 --num-layers 8 "
            "--micro-batch-size 2 --global-batch-size 64 --seq-length 512 "
            "--recompute-granularity full --recompute-method uniform "
            "--recompute-num-layers 1 --use-distributed-optimizer --bf16 "
            "--optimizer adam");
}

TEST(MegatronExportTest, Fp16AndFp32) {
  Plan plan = makePlan("dp=2,tp=4,pp=2,mb=2,zero=1,stream=replicated,schedule=1f1b");
  plan.precision = Precision::Fp16Mixed;
  std::string args = llvm::cantFail(exportMegatronArguments(plan));
  EXPECT_NE(args.find("--fp16"), std::string::npos) << args;
  EXPECT_EQ(args.find("--bf16"), std::string::npos) << args;
  plan.precision = Precision::Fp32;
  args = llvm::cantFail(exportMegatronArguments(plan));
  EXPECT_EQ(args.find("--fp16"), std::string::npos) << args;
  EXPECT_EQ(args.find("--bf16"), std::string::npos) << args;
}

TEST(MegatronExportTest, RefusesWhatMegatronCannotRun) {
  Plan plan = makePlan("dp=4,tp=4,pp=1,mb=1,zero=3");
  EXPECT_EQ(errorText(exportMegatronArguments(plan)),
            "--export megatron: Megatron-LM has no ZeRO stage 3 (its "
            "distributed optimizer is stage 1); re-plan with --fix zero=1");
  EXPECT_EQ(errorText(exportMegatronArguments(
                makePlan("dp=4,tp=4,pp=1,mb=1,stream=hidden"))),
            "--export megatron: Megatron-LM cannot split the values between "
            "layers along hidden over tp; re-plan with --fix "
            "stream=sequence or stream=replicated");
}

TEST(MegatronExportTest, SequenceParallelStream) {
  std::string args = llvm::cantFail(
      exportMegatronArguments(makePlan("dp=4,tp=4,pp=1,mb=1,stream=sequence")));
  EXPECT_NE(args.find("--tensor-model-parallel-size 4 "), std::string::npos);
  EXPECT_NE(args.find(" --sequence-parallel "), std::string::npos) << args;
}

TEST(MegatronExportTest, FirstAndLastStagesOfTheirOwn) {
  Plan plan = makePlan("dp=4,tp=1,pp=4,mb=1,zero=1,stream=replicated,schedule=1f1b");
  plan.layersPerStage = {1, 3, 3, 1};
  std::string args = llvm::cantFail(exportMegatronArguments(plan));
  EXPECT_NE(args.find("--pipeline-model-parallel-size 4 "
                      "--decoder-first-pipeline-num-layers 1 "
                      "--decoder-last-pipeline-num-layers 1 --num-layers 8 "),
            std::string::npos)
      << args;
  plan.layersPerStage = {2, 2, 2, 2};
  args = llvm::cantFail(exportMegatronArguments(plan));
  EXPECT_EQ(args.find("--decoder-first"), std::string::npos) << args;
  // Middle stages that differ have no Megatron-LM arguments.
  plan.layersPerStage = {1, 3, 2, 2};
  EXPECT_EQ(errorText(exportMegatronArguments(plan)),
            "--export megatron: Megatron-LM gives every pipeline stage but "
            "the first and the last the same number of layers; this plan's "
            "stages hold 1, 3, 2, 2");
}

TEST(MegatronExportTest, InterleavedStagesMustBeEven) {
  Plan plan = makePlan("dp=2,tp=4,pp=2,mb=2,zero=1,schedule=interleaved,v=2,"
                       "stream=replicated");
  plan.layersPerStage = {1, 3, 2, 2};
  EXPECT_EQ(errorText(exportMegatronArguments(plan)),
            "--export megatron: Megatron-LM's interleaved schedule gives every "
            "virtual stage the same number of layers; this plan's hold 1, 3, "
            "2, 2");
}

TEST(MegatronExportTest, CountsAttentionLayersNotBlocks) {
  // An MoE model folded in (dense, expert) pairs: Megatron-LM counts two
  // layers per block.
  Plan plan = makePlan("dp=2,tp=4,pp=2,mb=2,zero=1,schedule=interleaved,v=2,"
                       "stream=replicated");
  ASSERT_EQ(plan.attentionsPerBlock, 1);
  plan.attentionsPerBlock = 2;
  std::string args = llvm::cantFail(exportMegatronArguments(plan));
  EXPECT_NE(args.find("--num-layers-per-virtual-pipeline-stage 4 "
                      "--num-layers 16 "),
            std::string::npos)
      << args;
}

TEST(MegatronExportTest, DescribesTheExperts) {
  // GShard's pattern: blocks of (expert, dense) layers, top-2 routing.
  Plan plan = makePlan("dp=8,tp=2,pp=1,mb=1,zero=1,stream=sequence");
  plan.config.ep = 4;
  plan.attentionsPerBlock = 2;
  plan.numExperts = 8;
  plan.routerTopK = 2;
  plan.expertLayersPerBlock = {true, false};
  std::string args = llvm::cantFail(exportMegatronArguments(plan));
  EXPECT_NE(args.find("--expert-model-parallel-size 4 "), std::string::npos)
      << args;
  EXPECT_NE(args.find("--num-layers 16 --num-experts 8 --moe-router-topk 2 "
                      "--moe-layer-freq '([1,0]*8)' "
                      "--moe-token-dispatcher-type alltoall "),
            std::string::npos)
      << args;
  // Every layer an expert layer: Megatron's default frequency.
  plan.expertLayersPerBlock = {true, true};
  args = llvm::cantFail(exportMegatronArguments(plan));
  EXPECT_EQ(args.find("--moe-layer-freq"), std::string::npos) << args;

  auto errorOf = [](const Plan &p) {
    return errorText(exportMegatronArguments(p));
  };
  Plan noTopK = plan;
  noTopK.routerTopK = 0;
  EXPECT_EQ(errorOf(noTopK),
            "--export megatron: the model has experts but its router's top-k "
            "(a top_k over the experts) was not found");
  Plan shortPattern = plan;
  shortPattern.expertLayersPerBlock = {true};
  EXPECT_EQ(errorOf(shortPattern),
            "--export megatron: the plan marks 1 layers of the block as "
            "expert or dense; the block has 2");
  Plan replicated = plan;
  replicated.config.stream = StreamLayout::Replicated;
  EXPECT_EQ(errorOf(replicated),
            "--export megatron: Megatron-LM combines expert and tensor "
            "parallelism only with sequence parallelism; re-plan with --fix "
            "stream=sequence");
}

TEST(MegatronExportTest, RefusesModelsWithoutOneStackOfLayers) {
  EXPECT_EQ(megatronModelMismatch(0, 0, 0),
            "no repeated layers were found in the model; Megatron-LM runs a "
            "stack of identical transformer layers");
  EXPECT_EQ(megatronModelMismatch(48, 2, 0),
            "the model's layers are of 2 kinds; these arguments describe one "
            "stack of identical transformer layers");
  EXPECT_EQ(megatronModelMismatch(12, 1, 0),
            "the model's repeated block has no attention; Megatron-LM trains "
            "transformer layers");
  EXPECT_EQ(megatronModelMismatch(12, 1, 1), std::nullopt);
  Plan plan = makePlan("dp=4,tp=4,pp=1,mb=1,zero=1,stream=replicated");
  plan.numBlockClasses = 2;
  plan.attentionsPerBlock = 0;
  EXPECT_EQ(errorText(exportMegatronArguments(plan)),
            "--export megatron: the model's layers are of 2 kinds; these "
            "arguments describe one stack of identical transformer layers");
}

TEST(MegatronExportTest, SearchKeepsToMegatronLayouts) {
  // A vocabulary large enough that the balanced stages are uneven: under
  // --export megatron the search keeps to first / even middle / last, and
  // the export describes exactly the stages it priced.
  GptDims dims;
  dims.layers = 16;
  dims.hidden = 1024;
  dims.heads = 16;
  dims.sequence = 512;
  dims.vocab = 65536;
  ModelGraph graph = buildGpt(dims);
  TrainingConfig config = trainingConfig(32, 128);
  config.fixed = llvm::cantFail(parseFixedChoices("pp=8,schedule=1f1b"));
  Plan free = llvm::cantFail(searchPlan(graph, a100(), config));
  config.megatronOnly = true;
  Plan megatron = llvm::cantFail(searchPlan(graph, a100(), config));
  const std::vector<int> &stages = megatron.layersPerStage;
  ASSERT_EQ(stages.size(), 8u);
  for (size_t s = 2; s + 1 < stages.size(); ++s)
    EXPECT_EQ(stages[s], stages[1]);
  EXPECT_NE(stages.front(), stages.back()) << "the LM head lightens the last";
  std::string args = llvm::cantFail(exportMegatronArguments(megatron));
  EXPECT_NE(args.find("--decoder-first-pipeline-num-layers " +
                      std::to_string(stages.front()) +
                      " --decoder-last-pipeline-num-layers " +
                      std::to_string(stages.back())),
            std::string::npos)
      << args;
  // Megatron's layouts are a subset: never faster than the free search.
  EXPECT_GE(megatron.stepSeconds, free.stepSeconds * (1 - 1e-12));
}

} // namespace

namespace {

/// GPT on 16 GPUs under pure data parallelism, on A100s whose gradient
/// reduction overlaps the backward by `overlap`.
Plan dataParallelPlan(double overlap, const char *zero) {
  cost::Cluster cluster = a100();
  cluster.gradReduceOverlap = overlap;
  TrainingConfig config = trainingConfig(
      16, 64, (std::string("dp=16,tp=1,pp=1,mb=1,") + zero).c_str());
  return llvm::cantFail(evaluateConfiguration(smallGpt(), cluster, config));
}

double hiddenSeconds(const Plan &plan) {
  double hidden = 0;
  for (const CostItem &item : plan.items)
    hidden += item.hiddenSeconds;
  return hidden;
}

} // namespace

TEST(PlanOverlapTest, GradientReductionBehindTheBackwardLeavesTheStep) {
  Plan exposed = dataParallelPlan(0.0, "zero=0");
  Plan overlapped = dataParallelPlan(1.0, "zero=0");
  Plan half = dataParallelPlan(0.5, "zero=0");
  EXPECT_EQ(hiddenSeconds(exposed), 0);
  double hidden = hiddenSeconds(overlapped);
  EXPECT_GT(hidden, 0);
  EXPECT_NEAR(hiddenSeconds(half), hidden / 2, 1e-12);
  // What hides leaves the step time, and the items still add up to it.
  EXPECT_NEAR(exposed.stepSeconds - overlapped.stepSeconds, hidden, 1e-12);
  EXPECT_EQ(inconsistency(overlapped), std::nullopt);
  // Only the all-reduce of the gradients hides.
  for (const CostItem &item : overlapped.items)
    if (item.hiddenSeconds > 0)
      EXPECT_EQ(item.what + " " + item.where, "all_reduce gradients");
  // The text report says how much runs behind the backward.
  std::string text;
  llvm::raw_string_ostream os(text);
  printPlanText(overlapped, os, /*explain=*/false);
  EXPECT_NE(text.find("behind the backward"), std::string::npos) << text;
}

TEST(PlanOverlapTest, ZeroTwoHidesEachMicroBatchsReduction) {
  // ZeRO 2 reduce-scatters each micro-batch's gradients during its backward
  // (as the trainer does): each can hide behind its own backward, so more
  // hides than behind the last backward alone.
  Plan zero2 = dataParallelPlan(1.0, "zero=2");
  Plan zero0 = dataParallelPlan(1.0, "zero=0");
  double scatters = 0;
  for (const CostItem &item : zero2.items)
    if (item.what == "reduce_scatter")
      scatters += item.seconds + item.hiddenSeconds;
  EXPECT_GT(hiddenSeconds(zero2), hiddenSeconds(zero0));
  EXPECT_LT(hiddenSeconds(zero2), scatters);
  EXPECT_EQ(inconsistency(zero2), std::nullopt);
  EXPECT_EQ(zero2.config.numMicroBatches, 4);
}
