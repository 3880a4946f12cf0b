//===- IntraOpSearch.cpp - per-op tensor-parallel sharding of a block -----===//

#include "passes/plan/IntraOpSearch.h"

#include "passes/plan/MinSumSolver.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

using namespace bm;
using namespace bm::plan;
using cost::CollectiveKind;

const char *bm::plan::toString(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::Backward:
    return "backward";
  case Phase::Step:
    return "step";
  }
  return "forward";
}

namespace {

/// Layout of a value over the tensor axis: replicated, a partial sum, or
/// split along one dimension (>= 0).
constexpr int kReplicated = -1;
constexpr int kPartial = -2;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

class SegmentCoster {
public:
  SegmentCoster(const GraphAnalysis &analysis, const Segment &segment,
                const cost::CostModel &model, const cost::CommGroup &tpGroup,
                int microBatch, int streamDim, double stepWeight,
                const MeshSplits &splits)
      : analysis_(analysis), graph_(analysis.graph()), segment_(segment),
        model_(model), group_(tpGroup), tp_(tpGroup.size),
        microBatch_(microBatch), streamDim_(streamDim), stepWeight_(stepWeight),
        splits_(splits) {
    local_.reserve(segment.ops.size());
    for (size_t i = 0; i < segment.ops.size(); ++i)
      local_.push_back({segment.ops[i], static_cast<int>(i)});
    std::sort(local_.begin(), local_.end());
    sequenceParallel_ = streamOnSequence();
    for (int op : segment.ops)
      strategies_.push_back(strategiesOf(op));
    findProducers();
  }

  SegmentSolution solve();

private:
  std::vector<int> strategiesOf(int op) const;
  /// The factor of a parameter read by several ops that `op` looks up
  /// (see strategiesOf), or -1.
  int sharedLookupFactor(int op) const;
  /// The factor of parameter operand `operand` of `op` that `op` looks up
  /// (a reduction no other operand carries: a table's gathered rows), or -1.
  int lookupFactor(int op, int operand) const;
  /// Whether the stream layout splits the border values along a sequence.
  bool streamOnSequence() const;
  double valueBytes(int value) const;
  double forwardComputeTime(int op, int factor) const;
  double trafficBytes(int op) const;
  void gemmShape(int op, int factor, double &m, double &n, double &k) const;

  int resultState(int op, int result, int factor) const;
  int operandState(int op, int operand, int factor) const;
  int gradientEmitted(int op, int operand, int factor) const;
  /// Layout of a value that crosses the segment's border (see
  /// solveSegment's `streamDim`).
  int borderState(int value) const;
  static int gradientNeeded(int produced) {
    return produced == kPartial ? kReplicated : produced;
  }
  /// Seconds to move `value` from layout `from` to `to`; records the
  /// collective when `out` is given.
  double reshard(int from, int to, int value, int op, Phase phase,
                 std::vector<SegmentCollective> *out) const;

  /// Seconds of the loss's collectives on the model output `v`, which
  /// `op` leaves in layout `produced`; records them when `out` is given.
  double lossCost(int op, int v, int produced,
                  std::vector<SegmentCollective> *out) const;
  /// Costs attached to one op alone (compute, edges to the outside).
  double unaryCost(int localOp, int factor,
                   std::vector<SegmentCollective> *out) const;
  /// Costs of the edges from `producer` to `consumer` inside the segment.
  double edgeCost(int producer, int producerFactor, int consumer,
                  int consumerFactor,
                  std::vector<SegmentCollective> *out) const;
  /// The local index of `op`, or -1 when it is outside the segment.
  int localIndex(int op) const {
    auto it = std::lower_bound(local_.begin(), local_.end(),
                               std::pair<int, int>{op, -1});
    return it != local_.end() && it->first == op ? it->second : -1;
  }
  bool insideSegment(int op) const { return localIndex(op) >= 0; }
  /// The segment ops (local indices, ascending, each once) whose results
  /// segment op `localOp` reads.
  llvm::ArrayRef<int> producersOf(int localOp) const {
    return llvm::ArrayRef<int>(producers_).slice(
        producerStart_[localOp],
        producerStart_[localOp + 1] - producerStart_[localOp]);
  }
  void findProducers();

  void account(const std::vector<int> &choice, SegmentSolution &solution);
  double gatheredSavedBytes(int localOp, const std::vector<int> &choice) const;
  void accountExperts(const std::vector<int> &choice,
                      SegmentSolution &solution);

  const GraphAnalysis &analysis_;
  const ModelGraph &graph_;
  const Segment &segment_;
  const cost::CostModel &model_;
  cost::CommGroup group_;
  int tp_;
  int microBatch_;
  int streamDim_;
  /// Weight of once-per-step collectives in the per-micro-batch objective.
  double stepWeight_;
  MeshSplits splits_;
  /// Samples on one GPU of a value or an op: the tp2-th of the micro-batch
  /// where it has a batch, the cp-th of that where cp splits its sequence
  /// too.
  double samples(bool batched, bool context) const {
    if (!batched)
      return 1;
    double share = static_cast<double>(microBatch_) / splits_.tp2;
    return context ? share / splits_.cp : share;
  }
  double valueSamples(int value) const {
    return samples(graph_.values[value].batchDim >= 0,
                   analysis_.contextDim(value) >= 0);
  }
  double opSamples(int op) const {
    return samples(graph_.ops[op].batchFactor >= 0,
                   analysis_.contextFactor(op) >= 0);
  }
  /// A fused causal attention split over cp in contiguous chunks: the
  /// rank holding the last queries sees the most keys, sl (S - sl / 2)
  /// pairs against the mean S^2 / 2cp (sl = S / cp), (2cp - 1) / cp times
  /// the share the FLOPs give, and every rank waits for it at the next
  /// collective. Mirrored chunks (Megatron-Core's balancing) even it out.
  /// Unfused, every rank computes all its rows' scores: no imbalance.
  double causalImbalance(int op) const {
    const int cp = splits_.cp;
    if (cp <= 1 || splits_.mirrored || !graph_.ops[op].isCausalAttention ||
        analysis_.contextFactor(op) < 0)
      return 1;
    return (2.0 * cp - 1) / cp;
  }
  /// Seconds of the all-gathers over cp of `op`'s operands whose sequence
  /// it reads whole, and of their gradients' reduce-scatters, under tp
  /// factor `factor`; records them when `out` is given.
  double contextGathers(int op, int factor,
                        std::vector<SegmentCollective> *out) const;
  /// Seconds of one collective of `op` over cp (`overContext`) or tp2;
  /// recorded when `out` is given.
  double splitCollective(int op, CollectiveKind kind, Phase phase, double bytes,
                         bool overContext,
                         std::vector<SegmentCollective> *out) const;
  /// The dimension tp2 splits of parameter operand `operand` of `op` under
  /// tp factor `factor` (tensor2Dim), -1 where tp2 leaves it whole.
  int tensor2DimOf(int op, int operand, int factor) const;
  /// Seconds of the all-gathers over tp2 of `op`'s parameters (forward,
  /// and again for backward) and of their gradients' reduce-scatters;
  /// records them when `out` is given.
  double tensor2Gathers(int op, int factor,
                        std::vector<SegmentCollective> *out) const;
  /// Megatron-LM's sequence parallelism (Korthikanti et al. 2022): with the
  /// stream split along the sequence, the ops outside the GEMMs and the
  /// attention core may split the sequence too.
  bool sequenceParallel_ = false;
  /// (op, local index), sorted by op: the segment's ops are few, and a
  /// sorted vector costs one allocation where a hash map costs one per op.
  std::vector<std::pair<int, int>> local_;
  std::vector<std::vector<int>> strategies_;
  /// producersOf(i) is producers_[producerStart_[i], producerStart_[i + 1]).
  std::vector<int> producers_, producerStart_;
};

} // namespace

bool SegmentCoster::streamOnSequence() const {
  if (streamDim_ < 0 || tp_ <= 1)
    return false;
  auto onSequence = [&](int v) {
    return analysis_.needsGradient(v) && analysis_.isTokenDim(v, streamDim_);
  };
  for (int op : segment_.ops) {
    const OpInfo &info = graph_.ops[op];
    for (int v : info.operands) {
      int producer = graph_.values[v].producer;
      if (producer >= 0 && !insideSegment(producer) && onSequence(v))
        return true;
    }
    for (int v : info.results)
      for (int user : analysis_.consumers(v))
        if (!insideSegment(user) && onSequence(v))
          return true;
  }
  return false;
}

// A parameter that several ops read (an embedding table tied to the LM
// head) is stored once; an op that looks it up (a factor of it that is a
// reduction no other operand carries: the gathered rows) reads a split of
// that factor in place (Megatron's vocabulary-parallel embedding; the
// partitioner stores such a table as its other readers split it) and
// leaves a partial sum. Other splits of it would move the table to and
// from this op's layout every step, which is not priced: not offered.
int SegmentCoster::sharedLookupFactor(int op) const {
  const OpInfo &info = graph_.ops[op];
  for (size_t i = 0; i < info.operands.size(); ++i)
    if (analysis_.consumers(info.operands[i]).size() >= 2)
      if (int f = lookupFactor(op, static_cast<int>(i)); f >= 0)
        return f;
  return -1;
}

int SegmentCoster::lookupFactor(int op, int operand) const {
  const OpInfo &info = graph_.ops[op];
  if (graph_.values[info.operands[operand]].kind != ValueKind::Parameter)
    return -1;
  for (const auto &dim : info.rule.operandFactors[operand])
    for (int f : dim) {
      if (info.rule.factorKinds[f] != FactorKind::Reduction)
        continue;
      bool elsewhere = false;
      for (size_t j = 0; j < info.operands.size(); ++j)
        if (static_cast<int>(j) != operand &&
            dimOfFactor(info.rule.operandFactors[j], f) >= 0)
          elsewhere = true;
      if (!elsewhere)
        return f;
    }
  return -1;
}

std::vector<int> SegmentCoster::strategiesOf(int op) const {
  std::vector<int> result = {-1};
  if (tp_ <= 1)
    return result;
  const OpInfo &info = graph_.ops[op];
  int lookup = sharedLookupFactor(op);
  if (lookup >= 0 && info.rule.factorSizes[lookup] % tp_ == 0)
    return {lookup};
  const bool sequenceSplits =
      sequenceParallel_ && !info.isContraction &&
      !analysis_.inAttentionCore(op);
  for (int f = 0; f < info.rule.numFactors(); ++f) {
    if (f == info.batchFactor ||
        (analysis_.isTokenFactor(op, f) && !sequenceSplits))
      continue;
    // Experts are split by the expert-parallel axis, whose degree is chosen
    // after this search; tp splits inside each expert (its hidden dim), as
    // DeepSpeed-MoE's tensor slicing does. Letting tp split the experts too
    // would need experts % (ep x tp) == 0 for every ep tried later.
    if (f == analysis_.expertFactor(op))
      continue;
    if (info.rule.factorKinds[f] == FactorKind::NeedReplication)
      continue;
    if (info.rule.factorSizes[f] % tp_ != 0)
      continue;
    result.push_back(f);
  }
  return result;
}

double SegmentCoster::valueBytes(int value) const {
  const ValueInfo &v = graph_.values[value];
  double elementBytes = v.isFloat ? model_.activationBytes() : v.elementBytes;
  return static_cast<double>(v.numElements()) * valueSamples(value) *
         elementBytes;
}

// Bytes a fused implementation moves: operands not fused in from a
// memory-bound producer, parameters (only the rows read, for gathers), and
// the results it materialises.
double SegmentCoster::trafficBytes(int op) const {
  const OpInfo &info = graph_.ops[op];
  double written = 0;
  for (int r : info.results)
    if (analysis_.isMaterialized(r))
      written += valueBytes(r);
  double resultBytes = 0;
  for (int r : info.results)
    resultBytes += valueBytes(r);
  double read = 0;
  for (int v : info.operands) {
    const ValueInfo &value = graph_.values[v];
    if (value.kind == ValueKind::Parameter) {
      read += std::min(valueBytes(v), resultBytes);
      continue;
    }
    if (value.producer >= 0 && !analysis_.isMaterialized(v))
      continue;
    read += valueBytes(v);
  }
  return read + written;
}

// GEMM shape from the rule: M = factors of the first operand and the result
// only, N = of the second operand and the result only, K = the contracted
// ones; batch factors (in all three) do not enter the efficiency.
void SegmentCoster::gemmShape(int op, int factor, double &m, double &n,
                              double &k) const {
  const OpInfo &info = graph_.ops[op];
  const ShardingRule &rule = info.rule;
  m = n = k = 1;
  if (info.opName == "bm.attention") {
    // Per head, fused attention runs [s, d] x [d, t] and [s, t] x [t, e]
    // (dims never split: its rule replicates them); the first's shape
    // stands for both.
    auto sizeOf = [&](const TensorFactors &dims, size_t fromEnd) {
      double size = 1;
      for (int f : dims[dims.size() - fromEnd])
        size *= static_cast<double>(rule.factorSizes[f]);
      return size;
    };
    m = sizeOf(rule.operandFactors[0], 2);
    k = sizeOf(rule.operandFactors[0], 1);
    n = sizeOf(rule.operandFactors[1], 1);
    return;
  }
  if (rule.operandFactors.size() < 2 || rule.resultFactors.empty()) {
    m = n = k = 4096;
    return;
  }
  for (int f = 0; f < rule.numFactors(); ++f) {
    bool inA = dimOfFactor(rule.operandFactors[0], f) >= 0;
    bool inB = dimOfFactor(rule.operandFactors[1], f) >= 0;
    bool inResult = dimOfFactor(rule.resultFactors[0], f) >= 0;
    double size = static_cast<double>(rule.factorSizes[f]);
    if (f == info.batchFactor)
      size *= opSamples(op);
    if (f == factor)
      size /= tp_;
    if (inA && inB && !inResult)
      k *= size;
    else if (inA && !inB && inResult)
      m *= size;
    else if (!inA && inB && inResult)
      n *= size;
  }
}

double SegmentCoster::forwardComputeTime(int op, int factor) const {
  if (analysis_.isView(op))
    return 0;
  const OpInfo &info = graph_.ops[op];
  double split = factor >= 0 ? tp_ : 1;
  if (info.isContraction) {
    double samples = opSamples(op);
    double m, n, k;
    gemmShape(op, factor, m, n, k);
    return model_.gemmTime(info.flops * samples / split, m, n, k) *
           causalImbalance(op);
  }
  return model_.memoryTime(trafficBytes(op) / split, info.memoryClass);
}

int SegmentCoster::resultState(int op, int result, int factor) const {
  if (factor < 0)
    return kReplicated;
  const ShardingRule &rule = graph_.ops[op].rule;
  int dim = dimOfFactor(rule.resultFactors[result], factor);
  if (dim >= 0)
    return dim;
  return rule.factorKinds[factor] == FactorKind::Reduction ? kPartial
                                                           : kReplicated;
}

int SegmentCoster::operandState(int op, int operand, int factor) const {
  if (factor < 0)
    return kReplicated;
  int dim = dimOfFactor(graph_.ops[op].rule.operandFactors[operand], factor);
  return dim >= 0 ? dim : kReplicated;
}

// The gradient of an operand that does not carry the split factor is a sum
// over that factor's slices: each device holds a partial sum.
int SegmentCoster::gradientEmitted(int op, int operand, int factor) const {
  if (factor >= 0 &&
      dimOfFactor(graph_.ops[op].rule.operandFactors[operand], factor) < 0)
    return kPartial;
  return operandState(op, operand, factor);
}

int SegmentCoster::borderState(int v) const {
  const ValueInfo &value = graph_.values[v];
  // The stream is the per-sample values with a gradient; the others (masks,
  // rotary tables) stay whole and each consumer slices what it needs.
  if (streamDim_ < 0 || tp_ <= 1 || value.kind != ValueKind::Activation ||
      value.batchDim < 0 || !analysis_.needsGradient(v) ||
      streamDim_ >= static_cast<int>(value.shape.size()) ||
      streamDim_ == value.batchDim ||
      value.shape[streamDim_] % tp_ != 0)
    return kReplicated;
  return streamDim_;
}

double SegmentCoster::reshard(int from, int to, int value, int op, Phase phase,
                              std::vector<SegmentCollective> *out) const {
  if (from == to)
    return 0;
  double bytes = valueBytes(value);
  CollectiveKind kind;
  if (from == kReplicated) {
    if (to == kPartial)
      return kInfinity;
    return 0; // slicing a replicated value is local
  }
  if (to == kPartial)
    return kInfinity;
  if (from == kPartial) {
    kind = to == kReplicated ? CollectiveKind::AllReduce
                             : CollectiveKind::ReduceScatter;
  } else if (to == kReplicated) {
    kind = CollectiveKind::AllGather;
  } else {
    kind = CollectiveKind::AllToAll;
    bytes /= tp_;
  }
  double seconds = model_.collectiveTime(kind, bytes, group_);
  if (out)
    out->push_back({kind, phase, op, bytes, seconds});
  return seconds;
}

// An operand whose own sequence dim is not where the op's context factor
// lies (K^T in Q K^T, V in P V) is read whole: its cp shares are gathered
// forward, and its gradient, a partial sum of every rank's queries, is
// reduce-scattered back to the shares.
double
SegmentCoster::contextGathers(int op, int factor,
                              std::vector<SegmentCollective> *out) const {
  const int cf = analysis_.contextFactor(op);
  if (splits_.cp <= 1 || cf < 0)
    return 0;
  const OpInfo &info = graph_.ops[op];
  double total = 0;
  for (size_t i = 0; i < info.operands.size(); ++i) {
    const int v = info.operands[i];
    const int dim = analysis_.contextDim(v);
    if (dim < 0 || graph_.values[v].kind != ValueKind::Activation ||
        dim >= static_cast<int>(info.rule.operandFactors[i].size()) ||
        llvm::is_contained(info.rule.operandFactors[i][dim], cf))
      continue;
    double bytes = valueBytes(v) * splits_.cp;
    if (operandState(op, static_cast<int>(i), factor) >= 0)
      bytes /= tp_;
    total += splitCollective(op, CollectiveKind::AllGather, Phase::Forward,
                             bytes, /*overContext=*/true, out);
    if (analysis_.needsGradient(v))
      total +=
          splitCollective(op, CollectiveKind::ReduceScatter, Phase::Backward,
                          bytes, /*overContext=*/true, out);
  }
  return total;
}

double
SegmentCoster::splitCollective(int op, CollectiveKind kind, Phase phase,
                               double bytes, bool overContext,
                               std::vector<SegmentCollective> *out) const {
  double seconds = model_.collectiveTime(
      kind, bytes, overContext ? splits_.cpGroup : splits_.tp2Group);
  if (out)
    out->push_back({kind, phase, op, bytes, seconds,
                    analysis_.inAttentionCore(op), overContext, !overContext});
  return seconds;
}

int SegmentCoster::tensor2DimOf(int op, int operand, int factor) const {
  const OpInfo &info = graph_.ops[op];
  const ValueInfo &value = graph_.values[info.operands[operand]];
  if (splits_.tp2 <= 1 || value.kind != ValueKind::Parameter)
    return -1;
  return tensor2Dim(value.shape, operandState(op, operand, factor),
                    splits_.tp2);
}

// Every reader of a parameter gathers its tp2 shards forward (a reshard the
// partitioner lowers to an all-gather, in the compute precision) and, where
// its backward reads it, again for that (autodiff's regatherParameterRows:
// the gathered copy is not kept), and the gradient, a partial sum over
// tp2's samples, is reduce-scattered to the shards (the reshard's
// transpose).
double
SegmentCoster::tensor2Gathers(int op, int factor,
                              std::vector<SegmentCollective> *out) const {
  const OpInfo &info = graph_.ops[op];
  double total = 0;
  for (size_t i = 0; i < info.operands.size(); ++i) {
    if (tensor2DimOf(op, static_cast<int>(i), factor) < 0)
      continue;
    const ValueInfo &value = graph_.values[info.operands[i]];
    double bytes =
        static_cast<double>(value.numElements()) * model_.activationBytes();
    if (operandState(op, static_cast<int>(i), factor) >= 0)
      bytes /= tp_;
    // A lookup smaller than its table, which tp splits along the rows it
    // looks up, reads its tp2 shard in place and gathers the rows it looked
    // up (bm-partition's gatherReadsInPlace); its backward reads neither.
    const int rows = lookupFactor(op, static_cast<int>(i));
    const double looked = valueBytes(info.results[0]);
    if (rows >= 0 && looked < bytes &&
        operandState(op, static_cast<int>(i), factor) ==
            dimOfFactor(info.rule.operandFactors[i], rows)) {
      total += splitCollective(op, CollectiveKind::AllGather, Phase::Forward,
                               looked, /*overContext=*/false, out);
      continue;
    }
    total += splitCollective(op, CollectiveKind::AllGather, Phase::Forward,
                             bytes, /*overContext=*/false, out);
    if (analysis_.backwardReads(op, i))
      total += splitCollective(op, CollectiveKind::AllGather, Phase::Backward,
                               bytes, /*overContext=*/false, out);
    total += splitCollective(op, CollectiveKind::ReduceScatter, Phase::Backward,
                             bytes, /*overContext=*/false, out);
  }
  return total;
}

double SegmentCoster::unaryCost(int localOp, int factor,
                                std::vector<SegmentCollective> *out) const {
  const int op = segment_.ops[localOp];
  const OpInfo &info = graph_.ops[op];
  // Forward, and backward at twice the forward (Kaplan et al. 2020, section
  // 2.1; Narayanan et al. 2021, section 5.1).
  double total = 3 * forwardComputeTime(op, factor) +
                 contextGathers(op, factor, out) +
                 tensor2Gathers(op, factor, out);
  for (size_t i = 0; i < info.operands.size(); ++i) {
    int v = info.operands[i];
    const ValueInfo &value = graph_.values[v];
    if (value.kind == ValueKind::Parameter) {
      // Replicated weights used by a split op get partial gradients.
      if (gradientEmitted(op, static_cast<int>(i), factor) == kPartial &&
          analysis_.parameterOwner(v) == op) {
        double bytes = static_cast<double>(value.numElements()) *
                       model_.activationBytes();
        if (tensor2DimOf(op, static_cast<int>(i), factor) >= 0)
          bytes /= splits_.tp2;
        double seconds =
            model_.collectiveTime(CollectiveKind::AllReduce, bytes, group_);
        if (out)
          out->push_back(
              {CollectiveKind::AllReduce, Phase::Step, op, bytes, seconds});
        total += stepWeight_ * seconds;
      }
      continue;
    }
    if (value.producer >= 0 && insideSegment(value.producer))
      continue;
    int required = operandState(op, static_cast<int>(i), factor);
    int border = borderState(v);
    total += reshard(border, required, v, op, Phase::Forward, out);
    if (value.kind == ValueKind::Activation && analysis_.needsGradient(v))
      total += reshard(gradientEmitted(op, static_cast<int>(i), factor),
                       border, v, op, Phase::Backward, out);
  }
  for (size_t r = 0; r < info.results.size(); ++r) {
    int v = info.results[r];
    bool leaves = v == graph_.output;
    for (int user : analysis_.consumers(v))
      leaves |= !insideSegment(user);
    if (!leaves)
      continue;
    int produced = resultState(op, static_cast<int>(r), factor);
    if (v == graph_.output) {
      total += lossCost(op, v, produced, out);
      continue;
    }
    int required = borderState(v);
    total += reshard(produced, required, v, op, Phase::Forward, out);
    if (analysis_.needsGradient(v))
      total += reshard(required, gradientNeeded(produced), v, op,
                       Phase::Backward, out);
  }
  return total;
}

// The loss reads the model's output in any layout but a partial sum, which
// it reduces first. Logits split along their classes (a vocabulary-split LM
// head) get the vocabulary-parallel cross-entropy (bm-partition's
// VocabParallelLoss): its one collective gathers three fp32 statistics per
// row from every device; the gradient needs no communication.
double SegmentCoster::lossCost(int op, int v, int produced,
                               std::vector<SegmentCollective> *out) const {
  if (produced == kPartial)
    return reshard(kPartial, kReplicated, v, op, Phase::Forward, out);
  const ValueInfo &value = graph_.values[v];
  if (tp_ <= 1 || value.shape.empty() ||
      produced != static_cast<int>(value.shape.size()) - 1)
    return 0;
  double samples = valueSamples(v);
  double rows = static_cast<double>(value.numElements()) * samples /
                static_cast<double>(value.shape.back());
  double bytes = 3 * rows * 4 * tp_;
  double seconds =
      model_.collectiveTime(CollectiveKind::AllGather, bytes, group_);
  if (out)
    out->push_back({CollectiveKind::AllGather, Phase::Forward, op, bytes,
                    seconds});
  return seconds;
}

double SegmentCoster::edgeCost(int producer, int producerFactor, int consumer,
                               int consumerFactor,
                               std::vector<SegmentCollective> *out) const {
  const OpInfo &from = graph_.ops[producer];
  const OpInfo &to = graph_.ops[consumer];
  double total = 0;
  for (size_t r = 0; r < from.results.size(); ++r) {
    int v = from.results[r];
    for (size_t i = 0; i < to.operands.size(); ++i) {
      if (to.operands[i] != v)
        continue;
      int produced = resultState(producer, static_cast<int>(r), producerFactor);
      int required = operandState(consumer, static_cast<int>(i), consumerFactor);
      // Forward collectives run right after the producer, backward ones
      // right after the consumer's backward: name them so.
      total += reshard(produced, required, v, producer, Phase::Forward, out);
      if (analysis_.needsGradient(v))
        total += reshard(
            gradientEmitted(consumer, static_cast<int>(i), consumerFactor),
            gradientNeeded(produced), v, consumer, Phase::Backward, out);
    }
  }
  return total;
}

void SegmentCoster::findProducers() {
  producerStart_.reserve(segment_.ops.size() + 1);
  for (int op : segment_.ops) {
    producerStart_.push_back(static_cast<int>(producers_.size()));
    const size_t begin = producers_.size();
    for (int v : graph_.ops[op].operands) {
      int producer = graph_.values[v].producer;
      int local = producer >= 0 ? localIndex(producer) : -1;
      if (local >= 0)
        producers_.push_back(local);
    }
    std::sort(producers_.begin() + begin, producers_.end());
    producers_.erase(std::unique(producers_.begin() + begin, producers_.end()),
                     producers_.end());
  }
  producerStart_.push_back(static_cast<int>(producers_.size()));
}

SegmentSolution SegmentCoster::solve() {
  const int numOps = static_cast<int>(segment_.ops.size());
  std::vector<int> domains;
  for (const std::vector<int> &s : strategies_)
    domains.push_back(static_cast<int>(s.size()));
  MinSumSolver solver(domains);
  std::vector<double> costs;
  for (int i = 0; i < numOps; ++i) {
    costs.clear();
    for (int factor : strategies_[i])
      costs.push_back(unaryCost(i, factor, nullptr));
    solver.addUnary(i, costs);
  }
  // One pairwise table per producer -> consumer pair.
  for (int c = 0; c < numOps; ++c) {
    for (int p : producersOf(c)) {
      std::vector<double> pairCosts;
      pairCosts.reserve(strategies_[p].size() * strategies_[c].size());
      for (int pf : strategies_[p])
        for (int cf : strategies_[c])
          pairCosts.push_back(edgeCost(segment_.ops[p], pf, segment_.ops[c],
                                       cf, nullptr));
      solver.addPairwise(p, c, std::move(pairCosts));
    }
  }
  SegmentSolution solution;
  solution.tp = tp_;
  std::vector<int> choice = solver.solve();
  account(choice, solution);
  return solution;
}

// Under bmrt, a saved value that its producer leaves split over tp and this
// op reads whole is gathered for it, and the backward reads the gathered
// copy (the logits that the loss reads whole under a vocabulary-split LM
// head): the rest of its bytes are kept too. Megatron-LM gathers such
// inputs again in the backward (Korthikanti et al. 2022, section 4.2.2).
double SegmentCoster::gatheredSavedBytes(int localOp,
                                         const std::vector<int> &choice) const {
  if (analysis_.runtime() != cost::RuntimeModel::Bmrt)
    return 0;
  const int op = segment_.ops[localOp];
  const int factor = strategies_[localOp][choice[localOp]];
  const OpInfo &info = graph_.ops[op];
  double bytes = 0;
  for (int p : producersOf(localOp)) {
    const OpInfo &producer = graph_.ops[segment_.ops[p]];
    const int producerFactor = strategies_[p][choice[p]];
    for (size_t r = 0; r < producer.results.size(); ++r) {
      int v = producer.results[r];
      if (!analysis_.isMaterialized(v) || !analysis_.isSavedForBackward(v) ||
          resultState(segment_.ops[p], static_cast<int>(r), producerFactor) < 0)
        continue;
      for (size_t o = 0; o < info.operands.size(); ++o)
        if (info.operands[o] == v &&
            operandState(op, static_cast<int>(o), factor) == kReplicated) {
          bytes += valueBytes(v) * (1 - 1.0 / tp_);
          break;
        }
    }
  }
  return bytes;
}

void SegmentCoster::account(const std::vector<int> &choice,
                            SegmentSolution &solution) {
  const int numOps = static_cast<int>(segment_.ops.size());
  std::vector<SegmentCollective> &collectives = solution.collectives;
  std::unordered_set<int> counted; // segment inputs already counted
  for (int i = 0; i < numOps; ++i) {
    const int op = segment_.ops[i];
    const int factor = strategies_[i][choice[i]];
    solution.tpFactor.push_back(factor);
    const OpInfo &info = graph_.ops[op];
    double forward = forwardComputeTime(op, factor);
    solution.forwardCompute += forward;
    solution.backwardCompute += 2 * forward;
    size_t before = collectives.size();
    unaryCost(i, factor, &collectives);
    for (int p : producersOf(i))
      edgeCost(segment_.ops[p], strategies_[p][choice[p]], op, factor,
               &collectives);
    if (analysis_.inAttentionCore(op)) {
      solution.attentionCoreCompute += forward;
      for (size_t c = before; c < collectives.size(); ++c) {
        collectives[c].attentionCore = true;
        if (collectives[c].phase == Phase::Forward)
          solution.attentionCoreComm += collectives[c].seconds;
      }
    } else if (info.isContraction) {
      solution.gemmCompute += forward;
    }
    // Activations this op keeps for backward, and parameters it owns.
    for (size_t r = 0; r < info.results.size(); ++r) {
      int v = info.results[r];
      if (!analysis_.isMaterialized(v) || !analysis_.isSavedForBackward(v))
        continue;
      int state = resultState(op, static_cast<int>(r), factor);
      double bytes = valueBytes(v) / (state >= 0 ? tp_ : 1);
      if (v == graph_.output) // the loss keeps fp32 logits and their grads
        bytes += bytes * 4.0 / model_.activationBytes();
      solution.storedBytes += bytes;
      if (!analysis_.isAttentionCoreValue(v))
        solution.storedBytesSelective += bytes;
    }
    solution.storedBytes += gatheredSavedBytes(i, choice);
    // A contraction keeps its operands for backward: the whole sequence of
    // the keys (values) it gathered over cp.
    for (size_t c = before; c < collectives.size(); ++c)
      if (collectives[c].overContext && info.isContraction &&
          collectives[c].kind == CollectiveKind::AllGather) {
        solution.storedBytes += collectives[c].bytes;
        solution.storedBytesSelective += collectives[c].bytes;
      }
    for (size_t o = 0; o < info.operands.size(); ++o) {
      int v = info.operands[o];
      const ValueInfo &value = graph_.values[v];
      if (value.kind == ValueKind::Parameter) {
        if (analysis_.parameterOwner(v) != op)
          continue;
        double elements = static_cast<double>(value.numElements());
        solution.paramsTotal += elements;
        bool split = operandState(op, static_cast<int>(o), factor) >= 0;
        bool rows = tensor2DimOf(op, static_cast<int>(o), factor) >= 0;
        solution.paramsPerGpu +=
            elements / (split ? tp_ : 1) / (rows ? splits_.tp2 : 1);
        continue;
      }
      if (value.producer >= 0 && insideSegment(value.producer))
        continue;
      bool entering = value.kind == ValueKind::Activation ||
                      (value.kind == ValueKind::Input && value.batchDim >= 0);
      if (entering && counted.insert(v).second)
        solution.inputBytes +=
            valueBytes(v) / (borderState(v) == kReplicated ? 1 : tp_);
    }
    for (int v : info.results) {
      bool leaves = false;
      for (int user : analysis_.consumers(v))
        leaves |= !insideSegment(user);
      if (leaves)
        solution.outputBytes += valueBytes(v);
    }
  }
  accountExperts(choice, solution);
  for (const SegmentCollective &c : collectives) {
    if (c.overTensor2) {
      solution.tensor2Comm += c.seconds;
      if (c.kind == CollectiveKind::AllGather)
        (c.phase == Phase::Forward ? solution.tensor2ForwardGathers
                                   : solution.tensor2BackwardGathers) +=
            c.seconds;
    }
    if (c.overContext && c.phase != Phase::Step) {
      solution.contextComm += c.seconds;
      if (c.phase == Phase::Forward) {
        solution.contextForwardComm += c.seconds;
        if (c.attentionCore)
          solution.contextCoreComm += c.seconds;
      }
    }
    if (c.phase == Phase::Forward)
      solution.forwardComm += c.seconds;
    else if (c.phase == Phase::Backward)
      solution.backwardComm += c.seconds;
    else
      solution.stepComm += c.seconds;
  }
}

// Expert region: the expert ops and the elementwise ops fed only by them
// (the activation between the two expert GEMMs). Values crossing its border
// are exchanged all-to-all over the expert-parallel axis (GShard, Lepikhin
// et al. 2021, section 2.2: dispatch and combine).
void SegmentCoster::accountExperts(const std::vector<int> &choice,
                                   SegmentSolution &solution) {
  if (!analysis_.hasExperts())
    return;
  std::unordered_set<int> region;
  for (size_t i = 0; i < segment_.ops.size(); ++i) {
    const int op = segment_.ops[i];
    const OpInfo &info = graph_.ops[op];
    const int expert = analysis_.expertFactor(op);
    bool inRegion = expert >= 0;
    if (!inRegion && !info.isContraction) {
      bool anyActivation = false, allFromRegion = true;
      for (int v : info.operands) {
        if (graph_.values[v].kind != ValueKind::Activation)
          continue;
        anyActivation = true;
        allFromRegion &= region.count(graph_.values[v].producer) != 0;
      }
      inRegion = anyActivation && allFromRegion;
    }
    if (!inRegion)
      continue;
    region.insert(op);
    if (expert < 0)
      continue;
    const int factor = strategies_[i][choice[i]];
    for (size_t o = 0; o < info.operands.size(); ++o) {
      int v = info.operands[o];
      const ValueInfo &value = graph_.values[v];
      if (value.kind != ValueKind::Parameter ||
          analysis_.parameterOwner(v) != op ||
          dimOfFactor(info.rule.operandFactors[o], expert) != 0)
        continue;
      bool split = operandState(op, static_cast<int>(o), factor) >= 0;
      solution.expertParamsPerGpu +=
          static_cast<double>(value.numElements()) / (split ? tp_ : 1);
    }
  }
  auto exchange = [&](int v, int state) {
    solution.expertExchangeBytes += valueBytes(v) / (state >= 0 ? tp_ : 1);
    ++solution.expertExchanges;
  };
  for (size_t i = 0; i < segment_.ops.size(); ++i) {
    const int op = segment_.ops[i];
    if (!region.count(op))
      continue;
    const OpInfo &info = graph_.ops[op];
    const int factor = strategies_[i][choice[i]];
    for (size_t o = 0; o < info.operands.size(); ++o) {
      int v = info.operands[o];
      if (graph_.values[v].kind == ValueKind::Activation &&
          !region.count(graph_.values[v].producer))
        exchange(v, operandState(op, static_cast<int>(o), factor));
    }
    for (size_t r = 0; r < info.results.size(); ++r) {
      int v = info.results[r];
      bool leaves = false;
      for (int user : analysis_.consumers(v))
        leaves |= !region.count(user);
      if (leaves)
        exchange(v, resultState(op, static_cast<int>(r), factor));
    }
  }
}

SegmentSolution bm::plan::solveSegment(const GraphAnalysis &analysis,
                                       const Segment &segment,
                                       const cost::CostModel &model,
                                       const cost::CommGroup &tpGroup,
                                       int microBatch, int streamDim,
                                       double stepWeight,
                                       const MeshSplits &splits) {
  SegmentCoster coster(analysis, segment, model, tpGroup, microBatch, streamDim,
                       stepWeight, splits);
  return coster.solve();
}

BlockSharding bm::plan::describeSegment(const GraphAnalysis &analysis,
                                        const Segment &segment,
                                        const SegmentSolution &solution,
                                        int expertParallel, int contextParallel,
                                        int tensor2) {
  const ModelGraph &graph = analysis.graph();
  BlockSharding block;
  block.name = segment.name;
  block.blockClass = segment.blockClass;
  block.numInstances = segment.numInstances;
  for (size_t i = 0; i < segment.ops.size(); ++i) {
    const int op = segment.ops[i];
    const OpInfo &info = graph.ops[op];
    const int factor = i < solution.tpFactor.size() ? solution.tpFactor[i] : -1;
    OpSharding sharding;
    sharding.op = op;
    sharding.opName = info.opName;
    sharding.label = info.label;
    sharding.rule = info.rule.str();
    const int expert =
        expertParallel > 1 ? analysis.expertFactor(op) : -1;
    const int context = contextParallel > 1 ? analysis.contextFactor(op) : -1;
    auto axesOf = [&](int f) {
      std::vector<const char *> axes;
      if (f == info.batchFactor)
        axes.push_back(kDataAxis);
      if (f == info.batchFactor && tensor2 > 1)
        axes.push_back(kTensor2Axis);
      if (f == context)
        axes.push_back(kContextAxis);
      if (f == expert)
        axes.push_back(kExpertAxis);
      if (f == factor && solution.tp > 1)
        axes.push_back(kTensorAxis);
      return axes;
    };
    for (int f = 0; f < info.rule.numFactors(); ++f)
      for (const char *axis : axesOf(f))
        sharding.factorAxes.push_back({factorName(f), axis});
    auto describe = [&](const TensorFactors &tensor, bool partial) {
      TensorSharding t;
      for (const DimFactors &dim : tensor) {
        std::vector<std::string> axes;
        for (int f : dim)
          for (const char *axis : axesOf(f))
            axes.push_back(axis);
        t.dims.push_back(std::move(axes));
      }
      if (partial)
        t.partialAxes.push_back(kTensorAxis);
      return t;
    };
    // A result without the context factor, when cp splits a reduction
    // over it (a sum over the sequence), is a partial sum over cp.
    const bool contextReduced =
        context >= 0 && info.rule.factorKinds[context] == FactorKind::Reduction;
    for (const TensorFactors &operand : info.rule.operandFactors)
      sharding.operands.push_back(describe(operand, false));
    bool reduction = factor >= 0 && solution.tp > 1 &&
                     info.rule.factorKinds[factor] == FactorKind::Reduction;
    for (const TensorFactors &result : info.rule.resultFactors) {
      TensorSharding t =
          describe(result, reduction && dimOfFactor(result, factor) < 0);
      if (contextReduced && dimOfFactor(result, context) < 0)
        t.partialAxes.push_back(kContextAxis);
      sharding.results.push_back(std::move(t));
    }
    block.ops.push_back(std::move(sharding));
  }
  return block;
}
