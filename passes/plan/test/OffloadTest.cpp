//===- OffloadTest.cpp - the optimizer offloaded to the host (issue 29) ---===//
//
// ZeRO-Offload (Ren et al. 2021) as the trainer runs it: the optimizer
// state, an fp32 master copy of each rank's range of the parameters and a
// copy of their gradients in host memory; each step, after the gradient
// reduction, the gradients go to the host, the host steps them, the
// parameters come back. bmrt runs all three of Adam and SGD behind the next
// forward (runtime/trainer/OptimizerOffload.h).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanAssembler.h"
#include "passes/plan/PlanOutput.h"
#include "passes/plan/Search.h"
#include "passes/plan/test/GraphBuilder.h"
#include "passes/plan/test/PlanTestSupport.h"

#include "gtest/gtest.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

namespace {

// GPT-3 6.7B (gpt3_6_7B): 6.7B parameters x 18 bytes of bf16 mixed-precision
// Adam state (Megatron-LM's fp32 gradients) do not fit in one A100's 80
// GB; without the optimizer state (12 bytes each) they do. Megatron-LM's
// 1.7B (megatron1_7B) fits on one GPU with its optimizer.

llvm::Expected<Plan> plan(const ModelGraph &graph, const cost::Cluster &cluster,
                          int gpus, int64_t batch, llvm::StringRef fix = "") {
  return searchPlan(graph, cluster, trainingConfig(gpus, batch, fix));
}

Plan planned(const ModelGraph &graph, const cost::Cluster &cluster, int gpus,
             int64_t batch, llvm::StringRef fix = "") {
  llvm::Expected<Plan> result = plan(graph, cluster, gpus, batch, fix);
  EXPECT_TRUE(!!result) << llvm::toString(result.takeError());
  return result ? std::move(*result) : Plan();
}

/// The step items of `what` (CostItem::what), summed.
double stepSeconds(const Plan &p, llvm::StringRef what) {
  double seconds = 0;
  for (const CostItem *item : stepItems(p))
    if (item->what == what)
      seconds += item->seconds;
  return seconds;
}

const CostItem *stepItem(const Plan &p, llvm::StringRef what) {
  for (const CostItem *item : stepItems(p))
    if (item->what == what)
      return item;
  return nullptr;
}

TEST(OffloadTest, OffloadsOnlyWhereNothingElseFits) {
  ModelGraph graph = buildGpt(gpt3_6_7B());
  Plan one = planned(graph, a100(), 1, 8);
  ASSERT_EQ(one.config.offload, Offload::Optimizer);
  EXPECT_NE(one.config.str().find(",offload=optimizer"), std::string::npos);
  EXPECT_EQ(one.memory.optimizer, 0);
  EXPECT_LE(one.memory.total(), one.deviceMemoryBytes);
  // The host holds the moments (8 bytes), the fp32 master (4) and the
  // fp32 gradient (4) of every parameter; the device its bf16 copy (2).
  EXPECT_EQ(one.memory.host, 8 * one.memory.params);
  EXPECT_LE(one.memory.host, a100().hostMemoryBytes);
  EXPECT_EQ(one.hostMemoryBytes, a100().hostMemoryBytes);
  // The step's tail: the gradients down, the host's step, the parameters
  // up; no optimizer step on the device.
  const CostItem *down = stepItem(one, kToHostItem);
  const CostItem *up = stepItem(one, kToDeviceItem);
  ASSERT_TRUE(down && up);
  EXPECT_EQ(down->kind, CostItem::Kind::HostCopy);
  EXPECT_EQ(down->link, "host");
  EXPECT_DOUBLE_EQ(down->bytes, one.memory.params / 2 * 4);
  EXPECT_DOUBLE_EQ(up->bytes, one.memory.params);
  EXPECT_DOUBLE_EQ(down->seconds, down->bytes / a100().hostLinkBandwidth);
  EXPECT_GT(stepSeconds(one, kHostStepItem), 0);
  EXPECT_EQ(stepSeconds(one, "optimizer step"), 0);
  EXPECT_DOUBLE_EQ(one.time.hostLink, down->seconds + up->seconds);
  EXPECT_EQ(inconsistency(one), std::nullopt);
  // Where the GPUs hold the optimizer themselves, nothing is offloaded.
  Plan eight = planned(graph, a100(), 8, 64);
  EXPECT_EQ(eight.config.offload, Offload::None);
  EXPECT_EQ(eight.memory.host, 0);
  EXPECT_EQ(eight.time.hostLink, 0);
  EXPECT_EQ(offloadLine(eight), std::nullopt);
}

TEST(OffloadTest, HostMemoryMustHoldTheOffloadedState) {
  ModelGraph graph = buildGpt(gpt3_6_7B());
  cost::Cluster small = a100();
  small.hostMemoryBytes = 64 * cost::kGiB;
  // 6.7B x 16 bytes do not fit in 64 GiB of host memory: nothing fits.
  std::string error = errorText(plan(graph, small, 1, 8));
  EXPECT_NE(error.find("no plan fits in memory"), std::string::npos) << error;
  // Offloading pinned, the smallest plan's shortfall is the host's.
  error = errorText(plan(graph, small, 1, 8, "offload=optimizer"));
  EXPECT_NE(error.find("offload=optimizer"), std::string::npos) << error;
  EXPECT_NE(error.find("GiB of host memory per GPU, the host has 64 GiB"),
            std::string::npos)
      << error;
  // Over two GPUs, each rank's ZeRO shard of the state fits.
  Plan two = planned(graph, small, 2, 8, "offload=optimizer,zero=1");
  EXPECT_EQ(two.config.offload, Offload::Optimizer);
  EXPECT_LE(two.memory.host, small.hostMemoryBytes);
}

// The reason an alternative lost says which memory it lacks, and names the
// offload where that is what made it slower.
TEST(OffloadTest, LossReasonsNameTheHost) {
  using detail::Evaluation;
  cost::Cluster cluster = a100();
  Evaluation best;
  best.fits = true;
  best.step = 10;
  best.time.compute = 10;
  Evaluation host = best;
  host.fits = false;
  host.hostFits = false;
  host.memory.params = 40 * cost::kGiB;
  host.hostNeed = 200 * cost::kGiB;
  host.config.offload = Offload::Optimizer;
  EXPECT_EQ(detail::lossReason(host, best, cluster),
            "out of host memory: its offloaded optimizer needs 200.0 GiB per "
            "GPU, the host has 192 GiB");
  Evaluation device = host;
  device.memory.params = 90 * cost::kGiB;
  EXPECT_EQ(detail::lossReason(device, best, cluster),
            "out of memory by 10.0 GiB on stage 0");
  cluster.hostLinkBandwidth = 0;
  device.memory.params = 70 * cost::kGiB;
  device.memory.host = 20 * cost::kGiB;
  EXPECT_EQ(detail::lossReason(device, best, cluster),
            "out of memory by 10.0 GiB on stage 0 with its offloaded "
            "optimizer in the same memory (the cluster's host has none "
            "apart)");
  Evaluation slower = best;
  slower.config.offload = Offload::Optimizer;
  slower.step = 13;
  slower.time.compute = 11.5; // 2 s of it the host's step, 0.5 s less
  slower.hostStep = 2;        // on the device
  slower.time.hostLink = 1.5;
  EXPECT_EQ(detail::lossReason(slower, best, a100()),
            "slower by 30.0% because the optimizer offload (host copies and "
            "step) takes 3.500 s more");
}

TEST(OffloadTest, PinnedOffloadAddsExactlyItsItems) {
  ModelGraph graph = buildGpt(megatron1_7B());
  const char *fix = "dp=8,tp=1,pp=1,mb=1,zero=1,recompute=none";
  Plan device = evaluateFixed(graph, 8, 64, fix);
  Plan host =
      evaluateFixed(graph, 8, 64, std::string(fix) + ",offload=optimizer");
  ASSERT_EQ(device.config.offload, Offload::None);
  ASSERT_EQ(host.config.offload, Offload::Optimizer);
  std::optional<OffloadSummary> offload = offloadOf(host);
  ASSERT_TRUE(offload.has_value());
  EXPECT_GT(offload->toHost, 0);
  EXPECT_GT(offload->hostStep, 0);
  EXPECT_GT(offload->toDevice, 0);
  // The host's copies and step replace the device's optimizer step; the
  // rest of the step is the same.
  double deviceStep = stepSeconds(device, "optimizer step");
  EXPECT_GT(deviceStep, 0);
  EXPECT_NEAR(host.stepSeconds - device.stepSeconds,
              offload->toHost + offload->hostStep + offload->toDevice -
                  deviceStep,
              1e-9 * host.stepSeconds);
  EXPECT_DOUBLE_EQ(host.memory.total(),
                   device.memory.total() - device.memory.optimizer);
  // ZeRO 1: each rank's dp shard goes to the host, 16 bytes for each of
  // its eighth of the parameters the device keeps at 2 bytes.
  EXPECT_DOUBLE_EQ(host.memory.host, host.memory.params);
  // The timeline's tail: sync, the copy down, the host's step, the copy
  // up, ending at the step time.
  std::vector<TimelineBar::Kind> tail;
  for (const TimelineBar &bar : host.timeline)
    if (bar.rank == 0 && bar.microBatch < 0)
      tail.push_back(bar.kind);
  EXPECT_EQ(tail,
            (std::vector<TimelineBar::Kind>{
                TimelineBar::Kind::Sync, TimelineBar::Kind::HostCopy,
                TimelineBar::Kind::Optimizer, TimelineBar::Kind::HostCopy}));
  EXPECT_EQ(inconsistency(host), std::nullopt);
}

TEST(OffloadTest, PlanFilesAndTextSayWhatIsOffloaded) {
  ModelGraph graph = buildGpt(megatron1_7B());
  const char *fix = "dp=8,tp=1,pp=1,mb=1,zero=1,recompute=none";
  Plan host =
      evaluateFixed(graph, 8, 64, std::string(fix) + ",offload=optimizer");
  llvm::Expected<std::string> json = planToCheckedJson(host);
  ASSERT_TRUE(!!json) << llvm::toString(json.takeError());
  EXPECT_NE(json->find("\"offload\": \"optimizer\""), std::string::npos);
  EXPECT_NE(json->find("\"host_link\": "), std::string::npos);
  EXPECT_NE(json->find("\"host\": "), std::string::npos);
  EXPECT_NE(json->find("\"kind\": \"host_copy\""), std::string::npos);
  Plan back = llvm::cantFail(parsePlanJson(*json));
  EXPECT_EQ(back.config.offload, Offload::Optimizer);
  EXPECT_EQ(back.memory.host, host.memory.host);
  EXPECT_EQ(back.hostMemoryBytes, host.hostMemoryBytes);
  EXPECT_EQ(back.time.hostLink, host.time.hostLink);
  EXPECT_EQ(planToJson(back), *json);
  // Without offload none of the keys is written.
  std::string plain = planToJson(evaluateFixed(graph, 8, 64, fix));
  for (const char *key : {"\"offload\"", "\"host_link\"", "\"host\"",
                          "host_memory_bytes", "host_copy"})
    EXPECT_EQ(plain.find(key), std::string::npos) << key;
  // A bad value is one line.
  std::string bad = *json;
  bad.replace(bad.find("\"offload\": \"optimizer\""), 22,
              "\"offload\": \"gpu\"");
  EXPECT_EQ(errorText(parsePlanJson(bad)),
            "plan: 'config.offload' must be none or optimizer, got 'gpu'");

  std::string text;
  llvm::raw_string_ostream os(text);
  printPlanText(host, os);
  EXPECT_NE(text.find("  host link           "), std::string::npos) << text;
  EXPECT_NE(text.find("offload     optimizer state, fp32 master weights and "
                      "gradient copies on the host: "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("of 192.00 GiB host memory"), std::string::npos) << text;
  EXPECT_NE(text.find(",offload=optimizer\n"), std::string::npos) << text;
}

TEST(OffloadTest, MegatronRunsItWithItsDistributedOptimizer) {
  ModelGraph graph = buildGpt(megatron1_7B());
  Plan zero1 =
      evaluateFixed(graph, 8, 64, "dp=8,tp=1,pp=1,zero=1,offload=optimizer");
  llvm::Expected<std::string> args = exportMegatronArguments(zero1);
  ASSERT_TRUE(!!args) << llvm::toString(args.takeError());
  EXPECT_NE(args->find("--use-distributed-optimizer"), std::string::npos);
  EXPECT_NE(args->find("--optimizer-cpu-offload --optimizer-offload-fraction "
                       "1.0 --use-precision-aware-optimizer"),
            std::string::npos)
      << *args;
  Plan zero0 =
      evaluateFixed(graph, 8, 64, "dp=8,tp=1,pp=1,zero=0,offload=optimizer");
  EXPECT_EQ(errorText(exportMegatronArguments(zero0)),
            "--export megatron: Megatron-LM offloads the optimizer "
            "(--optimizer-cpu-offload) only with its distributed optimizer "
            "(ZeRO stage 1); re-plan with --fix zero=1");
  // --export megatron searches no offload; pinned, only ZeRO 1 and Adam.
  TrainingConfig megatron = trainingConfig(1, 8);
  megatron.megatronOnly = true;
  EXPECT_NE(errorText(searchPlan(buildGpt(gpt3_6_7B()), a100(), megatron))
                .find("no plan fits in memory"),
            std::string::npos);
  TrainingConfig pinned = trainingConfig(8, 64, "offload=optimizer");
  pinned.megatronOnly = true;
  llvm::Expected<Plan> p = searchPlan(graph, a100(), pinned);
  ASSERT_TRUE(!!p) << llvm::toString(p.takeError());
  EXPECT_EQ(p->config.zeroStage, 1);
  pinned.optimizer = Optimizer::Sgd;
  EXPECT_EQ(errorText(searchPlan(graph, a100(), pinned)),
            "--export megatron: Megatron-LM offloads only Adam "
            "(--optimizer-cpu-offload), not sgd; use --optimizer adam");
}

// bmrt copies down, steps and copies up Adam's and SGD's ranges on a worker
// thread behind the next forward, each parameter's first reader waiting
// for its range: the step
// waits for the host's work before the first layer can run, or for the
// worker's lag behind the forward at the last layer, whichever is longer.
// LAMB and LARS sum norms over ranks after the backward, as Megatron-LM's
// runtime steps every optimizer: one after another.
TEST(OffloadTest, BmrtStepsBehindTheNextForward) {
  ModelGraph graph = buildGpt(megatron1_7B());
  cost::Cluster bmrt = a100();
  bmrt.runtime = cost::RuntimeModel::Bmrt;
  auto offloaded = [&](const cost::Cluster &cluster, Optimizer optimizer,
                       int microBatch) {
    TrainingConfig config = trainingConfig(
        8, 64,
        "dp=8,tp=1,pp=1,zero=1,recompute=full,offload=optimizer,mb=" +
            std::to_string(microBatch));
    config.optimizer = optimizer;
    llvm::Expected<Plan> plan = evaluateConfiguration(graph, cluster, config);
    EXPECT_TRUE(!!plan) << errorText(std::move(plan));
    return plan ? std::move(*plan) : Plan();
  };
  for (Optimizer optimizer : {Optimizer::Adam, Optimizer::Sgd}) {
    Plan small = offloaded(bmrt, optimizer, 1);
    Plan large = offloaded(bmrt, optimizer, 4);
    std::optional<OffloadSummary> a = offloadOf(small), b = offloadOf(large);
    ASSERT_TRUE(a && b);
    // The host's work is the same; a longer forward hides more of it, but
    // never what the first layer waits for (the embedding and a layer).
    auto exposed = [](const OffloadSummary &o) {
      return o.toHost + o.hostStep + o.toDevice;
    };
    double work = exposed(*a) + a->behind;
    EXPECT_NEAR(exposed(*b) + b->behind, work, 1e-12);
    EXPECT_GT(a->behind, 0);
    EXPECT_GT(b->behind, a->behind);
    EXPECT_GT(exposed(*b), work / 24);
    EXPECT_LT(exposed(*b), work * 0.2);
    const CostItem *step = stepItem(small, kHostStepItem);
    ASSERT_TRUE(step);
    EXPECT_GT(step->hiddenSeconds, 0);
    EXPECT_EQ(inconsistency(small), std::nullopt);
    EXPECT_NE(offloadLine(small)->find("run behind the next forward"),
              std::string::npos);
  }
  for (Optimizer optimizer : {Optimizer::Lamb, Optimizer::Lars})
    EXPECT_EQ(offloadOf(offloaded(bmrt, optimizer, 1))->behind, 0);
  EXPECT_EQ(offloadOf(offloaded(a100(), Optimizer::Adam, 1))->behind, 0);
}

// A cluster without a host link (a CPU, whose device memory is the host's)
// offloads only where --fix says so: the offloaded state shares the
// device's memory and the copies run at its own copy rate.
TEST(OffloadTest, WithoutAHostLinkOnlyWhenPinned) {
  cost::Cluster noLink = a100();
  noLink.hostLinkBandwidth = 0;
  EXPECT_NE(errorText(plan(buildGpt(gpt3_6_7B()), noLink, 1, 8))
                .find("no plan fits in memory"),
            std::string::npos);
  ModelGraph graph = buildGpt(megatron1_7B());
  Plan pinned = planned(graph, noLink, 1, 8, "offload=optimizer");
  EXPECT_EQ(pinned.config.offload, Offload::Optimizer);
  EXPECT_EQ(pinned.hostMemoryBytes, 0);
  EXPECT_LE(pinned.memory.total() + pinned.memory.host,
            pinned.deviceMemoryBytes);
  const CostItem *down = stepItem(pinned, kToHostItem);
  ASSERT_TRUE(down);
  // Read and written at the streaming rate of the device's memory.
  EXPECT_DOUBLE_EQ(down->seconds,
                   2 * down->bytes /
                       (noLink.memoryBandwidth * noLink.memoryEfficiency));
  std::optional<std::string> line = offloadLine(pinned);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("in the device's own memory (the cluster's host has "
                       "none apart)"),
            std::string::npos)
      << *line;
}

} // namespace
