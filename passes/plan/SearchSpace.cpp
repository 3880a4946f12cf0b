//===- SearchSpace.cpp - the configurations --fix allows ------------------===//

#include "passes/plan/SearchSpace.h"

#include "passes/plan/Evaluation.h"
#include "passes/plan/PlanOutput.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <unordered_set>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;
using cost::CollectiveKind;

static llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Micro-batches beyond this bring no GEMM efficiency (M = mb x seq is
/// already in the thousands) and only cost memory.
static constexpr int kLargestMicroBatch = 32;

static std::vector<int> divisors(int64_t n, int64_t limit) {
  std::vector<int> result;
  for (int64_t d = 1; d <= n && d <= limit; ++d)
    if (n % d == 0)
      result.push_back(static_cast<int>(d));
  return result;
}

/// The chunks per device the search tries for the interleaved schedule
/// unless --fix gives v.
static constexpr int kInterleaveChunks[] = {2, 3, 4, 6, 8};

/// The chunks per device Megatron's interleaved schedule can use: the
/// layers must split evenly into pp x v chunks and the micro-batches into
/// groups of pp. `fixedChunks`, when set, is the only v tried. Ascending;
/// empty without a pipeline.
static std::vector<int> interleavedChunks(int layers, int pp,
                                          int64_t microBatches,
                                          std::optional<int> fixedChunks) {
  std::vector<int> chunks;
  if (pp <= 1 || microBatches % pp != 0)
    return chunks;
  std::vector<int> tried(std::begin(kInterleaveChunks),
                         std::end(kInterleaveChunks));
  if (fixedChunks)
    tried = {*fixedChunks};
  for (int v : tried)
    if (v > 1 && layers % (pp * v) == 0)
      chunks.push_back(v);
  return chunks;
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

llvm::Error SearchSpace::validate() const {
  for (llvm::Error (SearchSpace::*check)() const :
       {&SearchSpace::validateCluster, &SearchSpace::validateMesh,
        &SearchSpace::validateModelChoices, &SearchSpace::validateMegatron,
        &SearchSpace::validateStream})
    if (llvm::Error error = (this->*check)())
      return error;
  return llvm::Error::success();
}

llvm::Error SearchSpace::validateCluster() const {
  const cost::Cluster &cluster = ctx_.cluster;
  const int gpus = ctx_.config.gpus;
  const int perNode = cluster.gpusPerNode;
  if (gpus <= 0)
    return planError("--gpus must be at least 1, got " + llvm::Twine(gpus));
  if (gpus > perNode && gpus % perNode != 0)
    return planError(llvm::formatv(
        "--gpus {0} cannot be laid out on {1} nodes of {2} GPUs: use a "
        "multiple of {2}, or at most {2}",
        gpus, cluster.name, perNode));
  if (cluster.maxNodes > 0 &&
      gpus > static_cast<int64_t>(cluster.maxNodes) * perNode)
    return planError(
        llvm::formatv("--gpus {0} exceeds cluster {1}: {2} nodes of {3} GPUs",
                      gpus, cluster.name, cluster.maxNodes, perNode));
  if (ctx_.precision == cost::Precision::Bf16Mixed && !cluster.hasBf16())
    return planError(llvm::formatv(
        "--precision bf16: the {0} GPUs of cluster {1} have no bf16; use "
        "--precision fp16 (mixed, with loss scaling) or fp32",
        cluster.gpuName, cluster.name));
  if (ctx_.config.globalBatch < 0)
    return planError("--global-batch must be positive");
  return llvm::Error::success();
}

llvm::Error SearchSpace::validateMesh() const {
  const int gpus = ctx_.config.gpus;
  const int64_t globalBatch = ctx_.globalBatch;
  const int64_t granularity = ctx_.graph.batchGranularity;
  const FixedChoices &fixed = ctx_.config.fixed;
  int64_t product = 1;
  std::string named;
  for (auto [key, value] :
       {std::pair{"dp", fixed.dp}, std::pair{"cp", fixed.cp},
        std::pair{"tp", fixed.tp}, std::pair{"tp2", fixed.tp2},
        std::pair{"pp", fixed.pp}})
    if (value) {
      product *= *value;
      named += (named.empty() ? "" : ",") + std::string(key) + "=" +
               std::to_string(*value);
    }
  if (fixed.dp && fixed.tp && fixed.pp && product != gpus)
    return planError(llvm::formatv("--fix {0} uses {1} GPUs, but --gpus is {2}",
                                   named, product, gpus));
  if (gpus % product != 0)
    return planError(
        llvm::formatv("--fix {0} does not divide --gpus {1}", named, gpus));
  int layers = std::max(ctx_.graph.numLayers(), 1);
  if (fixed.pp && *fixed.pp > layers)
    return planError(llvm::formatv(
        "--fix pp={0} exceeds the model's {1} layers", *fixed.pp, layers));
  std::optional<int> dp = fixed.dp;
  if (!dp && fixed.tp && fixed.pp)
    dp = gpus / (*fixed.tp * *fixed.pp * ctx_.cp * ctx_.tp2);
  if (dp && globalBatch % *dp != 0)
    return planError(llvm::formatv(
        "--global-batch {0} is not divisible by dp={1}", globalBatch, *dp));
  if (dp && fixed.microBatch && globalBatch % (*dp * *fixed.microBatch) != 0)
    return planError(llvm::formatv(
        "--global-batch {0} is not divisible by dp x mb = {1} x {2}",
        globalBatch, *dp, *fixed.microBatch));
  if (globalBatch % granularity != 0)
    return planError(llvm::formatv(
        "--global-batch {0} is not a multiple of {1}: the model groups tokens "
        "of {1} samples together (a step must hold whole groups)",
        globalBatch, granularity));
  if (fixed.microBatch && *fixed.microBatch % granularity != 0)
    return planError(llvm::formatv(
        "--fix mb={0} is not a multiple of {1}: the model groups tokens of "
        "{1} samples together (its micro-batches must hold whole groups)",
        *fixed.microBatch, granularity));
  return llvm::Error::success();
}

llvm::Error SearchSpace::validateModelChoices() const {
  const FixedChoices &fixed = ctx_.config.fixed;
  const GraphAnalysis &analysis = ctx_.analysis;
  if (fixed.recompute && *fixed.recompute != Recompute::None &&
      ctx_.graph.numLayers() == 0)
    return planError(llvm::formatv(
        "--fix recompute={0}: the model has no repeated layers, and "
        "recomputation works layer by layer (nothing would be recomputed); "
        "use recompute=none",
        toString(*fixed.recompute)));
  if (fixed.recompute == Recompute::Selective && ctx_.graph.fusedAttention &&
      !analysis.hasAttentionCore())
    return planError("--fix recompute=selective: attention is fused (its "
                     "backward recomputes the scores, which are never "
                     "stored), so selective recomputation drops nothing "
                     "more; use recompute=none or recompute=full");
  if (fixed.recompute == Recompute::Selective && !analysis.hasAttentionCore())
    return planError("--fix recompute=selective: the model has no attention "
                     "(no softmax over a product of two activations), so "
                     "selective recomputation drops nothing; use "
                     "recompute=none or recompute=full");
  if (fixed.ep && *fixed.ep > 1 && !analysis.hasExperts())
    return planError(llvm::formatv(
        "--fix ep={0} needs a mixture-of-experts model (no op of this one "
        "has an expert factor)",
        *fixed.ep));
  if (fixed.ep && analysis.hasExperts() &&
      analysis.numExperts() % *fixed.ep != 0)
    return planError(
        llvm::formatv("--fix ep={0} does not divide the {1} experts", *fixed.ep,
                      analysis.numExperts()));
  if (fixed.schedule && *fixed.schedule == ScheduleKind::Interleaved &&
      fixed.chunks && *fixed.chunks < 2)
    return planError("--fix schedule=interleaved needs v >= 2");
  if (llvm::Error error = validateTensor2())
    return error;
  return validateContext();
}

// What 2-D tensor parallelism runs today: dense models, without cp.
llvm::Error SearchSpace::validateTensor2() const {
  const int tp2 = ctx_.tp2;
  if (tp2 <= 1)
    return llvm::Error::success();
  const FixedChoices &fixed = ctx_.config.fixed;
  if (ctx_.config.gpus % tp2 != 0)
    return planError(llvm::formatv("--fix tp2={0} does not divide --gpus {1}",
                                   tp2, ctx_.config.gpus));
  if (fixed.tp && *fixed.tp == 1)
    return planError(llvm::formatv(
        "--fix tp2={0} is the second axis of a tp x tp2 grid and needs tp > "
        "1 (tp=1 would be data parallelism that gathers its weights, which "
        "zero=3 is)",
        tp2));
  const int64_t unit = ctx_.graph.batchGranularity;
  if (fixed.microBatch && *fixed.microBatch % (tp2 * unit) != 0)
    return planError(llvm::formatv(
        "--fix tp2={0} splits each micro-batch's samples over tp2 ranks: "
        "mb={1} is not a multiple of {2}",
        tp2, *fixed.microBatch, tp2 * unit));
  if (ctx_.analysis.hasExperts())
    return planError(llvm::formatv(
        "--fix tp2={0}: 2-D tensor parallelism of mixture-of-experts models "
        "is not built yet",
        tp2));
  if (ctx_.cp > 1)
    return planError(llvm::formatv(
        "--fix tp2={0} with cp={1}: 2-D tensor parallelism with context "
        "parallelism is not built yet",
        tp2, ctx_.cp));
  return llvm::Error::success();
}

// What context parallelism runs today: the all-gather form, dense
// models.
llvm::Error SearchSpace::validateContext() const {
  const int cp = ctx_.cp;
  if (cp <= 1)
    return llvm::Error::success();
  const GraphAnalysis &analysis = ctx_.analysis;
  if (ctx_.config.gpus % cp != 0)
    return planError(llvm::formatv("--fix cp={0} does not divide --gpus {1}",
                                   cp, ctx_.config.gpus));
  if (!analysis.hasContext())
    return planError(llvm::formatv(
        "--fix cp={0} needs a sequence to split: an integer input (token "
        "ids) with a dimension besides the batch; this model has none",
        cp));
  if (!analysis.contextDivisibleBy(cp))
    return planError(
        llvm::formatv("--fix cp={0} does not divide the sequence of {1} tokens",
                      cp, analysis.tokensPerSample()));
  if (analysis.hasExperts())
    return planError(llvm::formatv(
        "--fix cp={0}: context parallelism of mixture-of-experts models is "
        "not built yet",
        cp));
  const FixedChoices &fixed = ctx_.config.fixed;
  if (fixed.cpMirrored.value_or(false) && !ctx_.mirrorable())
    return planError(llvm::formatv(
        "--fix cp_layout=mirrored needs 2 x cp = {0} chunks to divide every "
        "sequence ({1} tokens) and attention to be the only op that mixes "
        "positions (this model's other ops must see its tokens in order)",
        2 * cp, analysis.tokensPerSample()));
  return llvm::Error::success();
}

llvm::Error SearchSpace::validateMegatron() const {
  if (!ctx_.config.megatronOnly)
    return llvm::Error::success();
  const FixedChoices &fixed = ctx_.config.fixed;
  if (ctx_.tp2 > 1)
    return planError("--export megatron: Megatron-LM has no 2-D tensor "
                     "parallelism; use tp2=1");
  if (std::optional<MegatronMismatch> mismatch =
          megatronMismatch(fixed.zeroStage, fixed.schedule, fixed.stream,
                           fixed.ep, fixed.tp, fixed.offload))
    return planError("--export megatron: " + mismatch->reason + "; use " +
                     mismatch->fix);
  if (std::optional<MegatronMismatch> mismatch = megatronOptimizerMismatch(
          ctx_.config.optimizer, fixed.offload.value_or(Offload::None)))
    return planError("--export megatron: " + mismatch->reason + "; use " +
                     mismatch->fix);
  if (std::optional<std::string> why =
          megatronModelMismatch(ctx_.graph.numLayers(), ctx_.numBlockClasses(),
                                ctx_.attentionsPerBlock()))
    return planError("--export megatron: " + *why);
  if (std::any_of(ctx_.segments.begin(), ctx_.segments.end(),
                  [](const Segment &segment) {
                    return segment.kind == SegmentKind::Interlude;
                  }))
    return planError("--export megatron: ops run between the model's "
                     "layers; Megatron-LM runs one unbroken stack of "
                     "transformer layers");
  return llvm::Error::success();
}

llvm::Error SearchSpace::validateStream() const {
  const FixedChoices &fixed = ctx_.config.fixed;
  if (!fixed.stream || *fixed.stream == StreamLayout::Replicated)
    return llvm::Error::success();
  const std::string layout = formatStream(*fixed.stream, fixed.streamDim);
  std::vector<int> splitting;
  for (int tp : tpOptions())
    if (tp > 1)
      splitting.push_back(tp);
  if (splitting.empty())
    return planError(llvm::formatv("--fix stream={0} needs tp > 1", layout));
  if (std::all_of(splitting.begin(), splitting.end(),
                  [&](int tp) { return streamOptions(tp).empty(); }))
    return planError(llvm::formatv(
        "--fix stream={0}: the values between the model's blocks have no "
        "{1} dimension{2} that splits {3} ways",
        layout, toString(*fixed.stream),
        fixed.streamDim ? " " + std::to_string(*fixed.streamDim) : "",
        fixed.tp ? std::to_string(*fixed.tp)
                 : "2 to " + std::to_string(splitting.back())));
  return llvm::Error::success();
}

std::string SearchSpace::whyFixedChoicesExcludeAll(bool passedSchedule) const {
  const FixedChoices &fixed = ctx_.config.fixed;
  if (passedSchedule) // then only the ZeRO stage can exclude them all
    return llvm::formatv("ZeRO stage {0} shards over data parallelism and "
                         "needs dp > 1",
                         fixed.zeroStage.value_or(1));
  if (fixed.schedule == ScheduleKind::None)
    return llvm::formatv("without a pipeline, no data-parallel degree divides "
                         "--global-batch {0}",
                         ctx_.globalBatch);
  if (fixed.schedule && bmrt::layoutOf(*fixed.schedule) == bmrt::StageLayout::V)
    return llvm::formatv("schedule={0} needs the model's {1} layers to split "
                         "into 2 pp chunks and pp >= 2{2}",
                         toString(*fixed.schedule), ctx_.graph.numLayers(),
                         *fixed.schedule == ScheduleKind::DualPipeV
                             ? ", with at least 2 pp micro-batches a step"
                             : "");
  if (fixed.schedule == ScheduleKind::Interleaved ||
      (fixed.chunks && *fixed.chunks > 1)) {
    std::vector<std::string> tried;
    for (int v : kInterleaveChunks)
      tried.push_back(std::to_string(v));
    std::string chunks =
        fixed.chunks
            ? std::to_string(*fixed.chunks)
            : llvm::join(llvm::drop_end(tried), ", ") + " or " + tried.back();
    return llvm::formatv("interleaving needs the model's {0} layers to split "
                         "into pp x v chunks (v = {1}) and the micro-batches "
                         "of a step to be a multiple of pp",
                         ctx_.graph.numLayers(), chunks);
  }
  return llvm::formatv("schedule={0} needs pp > 1, and the model's {1} layers "
                       "allow no pipeline here",
                       toString(*fixed.schedule), ctx_.graph.numLayers());
}

//===----------------------------------------------------------------------===//
// Enumeration
//===----------------------------------------------------------------------===//

int bm::plan::detail::largestSearchedTp(const cost::Cluster &cluster) {
  return std::max(2 * cluster.gpusPerNode, 1);
}

std::vector<int> SearchSpace::tpOptions() const {
  const FixedChoices &fixed = ctx_.config.fixed;
  return fixed.tp ? std::vector<int>{*fixed.tp}
                  : divisors(ctx_.config.gpus, largestSearchedTp(ctx_.cluster));
}

std::optional<std::string> SearchSpace::whyTensorGroupUnsearched() const {
  const FixedChoices &fixed = ctx_.config.fixed;
  if (fixed.tp || !fixed.dp || !fixed.pp)
    return std::nullopt;
  const int64_t others = int64_t{*fixed.dp} * *fixed.pp * ctx_.cp * ctx_.tp2;
  const int64_t tp = ctx_.config.gpus / std::max<int64_t>(others, 1);
  if (tp <= largestSearchedTp(ctx_.cluster))
    return std::nullopt;
  return llvm::formatv(
             "--fix {0} leaves tp={1} for the {2} GPUs, beyond the tensor "
             "groups the search tries (up to {3}: two nodes); add tp={1} to "
             "--fix to evaluate it, or let dp or pp take GPUs",
             formatFixedChoices(fixed), tp, ctx_.config.gpus,
             largestSearchedTp(ctx_.cluster))
      .str();
}

std::vector<StreamOption> SearchSpace::streamOptions(int tp) const {
  const ModelGraph &graph = ctx_.graph;
  const GraphAnalysis &analysis = ctx_.analysis;
  std::vector<StreamOption> all = {{StreamLayout::Replicated, -1}};
  if (tp > 1 && ctx_.firstLayerSegment >= 0) {
    const std::vector<int> &ops = ctx_.segments[ctx_.firstLayerSegment].ops;
    std::unordered_set<int> inside(ops.begin(), ops.end());
    for (int op : ops)
      for (int v : graph.ops[op].operands) {
        const ValueInfo &value = graph.values[v];
        if (value.kind != ValueKind::Activation || value.batchDim < 0 ||
            !analysis.needsGradient(v) || inside.count(value.producer))
          continue;
        for (int d = 0; d < static_cast<int>(value.shape.size()); ++d) {
          bool known =
              std::any_of(all.begin(), all.end(),
                          [&](const StreamOption &o) { return o.dim == d; });
          if (d != value.batchDim && value.shape[d] > 1 &&
              value.shape[d] % tp == 0 && !known)
            all.push_back({analysis.isTokenDim(v, d) ? StreamLayout::Sequence
                                                     : StreamLayout::Hidden,
                           d});
        }
      }
  }
  std::sort(all.begin(), all.end(),
            [](const StreamOption &a, const StreamOption &b) {
              return a.dim < b.dim;
            });
  const FixedChoices &fixed = ctx_.config.fixed;
  std::vector<StreamOption> allowed;
  for (const StreamOption &option : all)
    if ((!fixed.stream || *fixed.stream == option.layout) &&
        (!fixed.streamDim || *fixed.streamDim == option.dim) &&
        !(ctx_.config.megatronOnly &&
          megatronMismatch(std::nullopt, std::nullopt, option.layout)))
      allowed.push_back(option);
  return allowed;
}

std::vector<int> SearchSpace::expertDegrees(int dp) const {
  const FixedChoices &fixed = ctx_.config.fixed;
  std::vector<int> degrees;
  for (int ep : divisors(dp, dp))
    if ((fixed.ep ? ep == *fixed.ep : true) &&
        (ep == 1 ||
         (ctx_.analysis.hasExperts() && ctx_.analysis.numExperts() % ep == 0)))
      degrees.push_back(ep);
  return degrees;
}

std::vector<Recompute> SearchSpace::recomputations() const {
  const FixedChoices &fixed = ctx_.config.fixed;
  const int layers = ctx_.graph.numLayers();
  std::vector<Recompute> allowed;
  for (Recompute recompute :
       {Recompute::None, Recompute::Selective, Recompute::Full}) {
    if (fixed.recompute && *fixed.recompute != recompute)
      continue;
    // Recomputation works on layers, selective on their attention cores:
    // without them it is none under another name.
    if (recompute != Recompute::None &&
        (layers == 0 || (recompute == Recompute::Selective &&
                         !ctx_.analysis.hasAttentionCore())))
      continue;
    allowed.push_back(recompute);
  }
  return allowed;
}

// Every ZeRO stage moves at least the stage's gradients and weights once
// over dp (an all-reduce's worth), of which at most the overlapped share
// hides behind the backward, and the slowest stage holds at least an even
// share of the parameters. Expert weights sync over fewer ranks: no bound
// with experts.
double SearchSpace::syncLowerBound(int dp, int tp, int pp) const {
  if (ctx_.analysis.hasExperts())
    return 0;
  double shareOfParams =
      static_cast<double>(ctx_.analysis.numParameters()) / (tp * pp);
  double syncBytes = shareOfParams * ctx_.perParam.grads;
  double sync = ctx_.model.collectiveTime(
      CollectiveKind::AllReduce, syncBytes,
      cost::placeMesh(ctx_.cluster, dp, tp, pp, 1, ctx_.cp, ctx_.tp2).dp);
  return sync - cost::hiddenGradientReduction(sync, syncBytes, kInfinity,
                                              ctx_.cluster.gradReduceOverlap);
}

void SearchSpace::addCandidates(int tp, int pp,
                                const std::vector<StreamOption> &streams,
                                std::vector<Candidate> &out) {
  const FixedChoices &fixed = ctx_.config.fixed;
  const int layers = ctx_.graph.numLayers();
  const int grid = tp * ctx_.tp2;
  if (ctx_.config.gpus % (grid * pp * ctx_.cp))
    return;
  const int dp = ctx_.config.gpus / (grid * pp * ctx_.cp);
  if ((fixed.dp && *fixed.dp != dp) || ctx_.globalBatch % dp)
    return;
  const int64_t perReplica = ctx_.globalBatch / dp;
  const double syncBound = syncLowerBound(dp, tp, pp);
  const std::vector<int> epOptions = expertDegrees(dp);
  std::vector<int> mbOptions = fixed.microBatch
                                   ? std::vector<int>{*fixed.microBatch}
                                   : divisors(perReplica, kLargestMicroBatch);
  for (int mb : mbOptions) {
    // tp2 splits each micro-batch's samples.
    if (perReplica % mb || mb % (ctx_.graph.batchGranularity * ctx_.tp2))
      continue;
    const int m = static_cast<int>(perReplica / mb);
    for (Recompute recompute : recomputations()) {
      for (const StreamOption &stream : streams) {
        // Pipeline: m T + (sum of stage loads - T) x the schedule's bubble
        // scale is smallest for an even split T = W / pp, under the
        // schedule allowed with the smallest scale.
        double work =
            segments_.workPerMicroBatch(tp, mb, stream.dim, recompute);
        Candidate c{0, tp, pp, dp, 1, mb, m, stream, recompute};
        c.lowerBound = m * work / pp +
                       (work - work / pp) * smallestBubbleScale(c) + syncBound;
        for (int ep : epOptions)
          if (!(ctx_.config.megatronOnly &&
                megatronMismatch(std::nullopt, std::nullopt, stream.layout, ep,
                                 tp))) {
            c.ep = ep;
            out.push_back(c);
          }
      }
    }
  }
}

std::vector<Candidate> SearchSpace::candidates() {
  const FixedChoices &fixed = ctx_.config.fixed;
  const int gpus = ctx_.config.gpus;
  std::vector<Candidate> all;
  for (int tp : tpOptions()) {
    // tp2 is a grid's second axis (validateTensor2).
    if (gpus % tp || (ctx_.tp2 > 1 && tp == 1))
      continue;
    const std::vector<StreamOption> streams = streamOptions(tp);
    std::vector<int> ppOptions =
        fixed.pp ? std::vector<int>{*fixed.pp}
                 : divisors(gpus / tp, std::max(ctx_.graph.numLayers(), 1));
    for (int pp : ppOptions)
      if ((gpus / tp) % pp == 0)
        addCandidates(tp, pp, streams, all);
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return a.lowerBound < b.lowerBound;
                   });
  return all;
}

/// The model chunks per device a zero-bubble kind runs: two in a V.
static int zeroBubbleChunks(ScheduleKind kind) {
  return bmrt::layoutOf(kind) == bmrt::StageLayout::V ? 2 : 1;
}

bool SearchSpace::zeroBubbleFits(ScheduleKind kind, const Candidate &c) const {
  bmrt::ScheduleSpec spec;
  spec.kind = kind;
  spec.pp = c.pp;
  spec.v = zeroBubbleChunks(kind);
  spec.m = c.m;
  return !bmrt::scheduleProblem(spec) &&
         (spec.v == 1 || ctx_.graph.numLayers() % (c.pp * spec.v) == 0);
}

/// The least bubbleScale a schedule of `c` can have whatever its stages'
/// times, for the lower bound: W is at most a third of a pass (one of each
/// linear layer's three GEMMs), so ZB-H1 keeps at least a third of 1F1B's
/// bubble; the V schedules can reach none.
double SearchSpace::smallestBubbleScale(const Candidate &c) const {
  double smallest = 1;
  for (auto [schedule, chunks] : schedules(c)) {
    double scale = 1;
    if (schedule == ScheduleKind::Interleaved)
      scale = 1.0 / chunks;
    else if (schedule == ScheduleKind::ZeroBubbleH1)
      scale = 1.0 / 3;
    else if (bmrt::layoutOf(schedule) == bmrt::StageLayout::V)
      scale = 0;
    smallest = std::min(smallest, scale);
  }
  return smallest;
}

std::vector<std::pair<ScheduleKind, int>>
SearchSpace::schedules(const Candidate &c) const {
  const FixedChoices &fixed = ctx_.config.fixed;
  std::vector<std::pair<ScheduleKind, int>> all;
  if (c.pp == 1) {
    all.push_back({ScheduleKind::None, 1});
  } else {
    all.push_back({ScheduleKind::OneFOneB, 1});
    // GPipe has 1F1B's bubble and holds more activations (Narayanan et
    // al. 2021, section 2.2.1): it never wins, so it is scored only when
    // asked for.
    if (fixed.schedule == ScheduleKind::GPipe)
      all.push_back({ScheduleKind::GPipe, 1});
    for (int v :
         interleavedChunks(ctx_.graph.numLayers(), c.pp, c.m, fixed.chunks))
      all.push_back({ScheduleKind::Interleaved, v});
    for (ScheduleKind kind :
         {ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleV,
          ScheduleKind::DualPipeV})
      if (!ctx_.config.megatronOnly && zeroBubbleFits(kind, c))
        all.push_back({kind, zeroBubbleChunks(kind)});
  }
  std::vector<std::pair<ScheduleKind, int>> allowed;
  for (auto [schedule, chunks] : all)
    if ((!fixed.schedule || *fixed.schedule == schedule) &&
        (!fixed.chunks || *fixed.chunks == chunks))
      allowed.push_back({schedule, chunks});
  return allowed;
}

// ZeRO-3 first: it needs the least memory, so when it does not fit, no
// lower stage does either. Then 0, 1, 2; once a stage >= 1 fits, the
// higher ones are only slower. (Under --export megatron, validate() has
// refused GPipe, so only the ZeRO stage can be what Megatron lacks.)
std::vector<int> SearchSpace::zeroStages() const {
  const FixedChoices &fixed = ctx_.config.fixed;
  std::vector<int> stages;
  for (int zero : {3, 0, 1, 2})
    if ((!fixed.zeroStage || *fixed.zeroStage == zero) &&
        !(ctx_.config.megatronOnly &&
          megatronMismatch(zero, std::nullopt, std::nullopt, std::nullopt,
                           std::nullopt, fixed.offload)))
      stages.push_back(zero);
  return stages;
}

// Offloading mostly slows a step down (its copies and host step run after
// the backward, or on bmrt partly behind the next forward), so the search
// scores it for what does not fit otherwise, and where its step would be
// faster (Planner::scoreOffloads).
std::vector<Offload> SearchSpace::offloads() const {
  if (std::optional<Offload> fixed = ctx_.config.fixed.offload)
    return {*fixed};
  if (ctx_.cluster.canOffload() && !ctx_.config.megatronOnly)
    return {Offload::None, Offload::Optimizer};
  return {Offload::None};
}
