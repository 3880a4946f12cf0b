//===- GraphAnalysis.cpp - facts about a ModelGraph the search reuses -----===//

#include "passes/plan/GraphAnalysis.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <map>

using namespace bm;
using namespace bm::plan;

int bm::plan::dimOfFactor(const TensorFactors &tensor, int factor) {
  if (factor < 0)
    return -1;
  for (size_t d = 0; d < tensor.size(); ++d)
    if (std::find(tensor[d].begin(), tensor[d].end(), factor) !=
        tensor[d].end())
      return static_cast<int>(d);
  return -1;
}

std::string bm::plan::factorName(int factor) {
  constexpr int kLetters = 'z' - 'i' + 1;
  if (factor < kLetters)
    return std::string(1, static_cast<char>('i' + factor));
  return "z" + std::to_string(factor - kLetters + 1);
}

GraphAnalysis::GraphAnalysis(const ModelGraph &graph, bool fold,
                             cost::RuntimeModel runtime)
    : graph_(graph), fold_(fold), runtime_(runtime) {
  const size_t numValues = graph.values.size();
  const size_t numOps = graph.ops.size();
  parameterOwner_.assign(numValues, -1);
  isView_.assign(numOps, 0);
  tokenFactor_.assign(numOps, {});
  contextFactor_.assign(numOps, -1);
  contextDim_.assign(numValues, -1);
  attentionSoftmax_.assign(numOps, 0);
  attentionCoreValue_.assign(numValues, 0);
  materialized_.assign(numValues, 0);
  searched_.assign(numOps, 0);
  positionInLayer_.assign(numOps, -1);
  const std::vector<int> scanned = placeOps();
  indexConsumers(scanned);
  scanValues();
  propagateGradients(scanned);
  analyseSearchedOps();
  std::vector<int> searchedOps;
  for (size_t o = 0; o < numOps; ++o)
    if (searched_[o])
      searchedOps.push_back(static_cast<int>(o));
  findAttentionCores(searchedOps);
  routerTopK_ = findRouterTopK(searchedOps);
  findSavedValues(searchedOps);
  // Side inputs once per block class: the search asks for them on every
  // stage it scores.
  const std::vector<char> tables = parametersAlone();
  for (int cls : graph.layerClass)
    if (!sideInputs_.count(cls))
      sideInputs_[cls] = findSideInputs(cls, tables);
  numberSegments();
  findSharedParameters();
}

// Puts every op in its layer, the prologue, an interlude or the epilogue,
// sums the FLOPs, and returns the ops scanned for consumers.
std::vector<int> GraphAnalysis::placeOps() {
  const ModelGraph &graph = graph_;
  const size_t numOps = graph_.ops.size();
  const int numLayers = graph_.numLayers();
  // Which layer stands for which: the first instance of each class.
  representativeLayer_.assign(numLayers, -1);
  std::map<int, int> firstOfClass;
  for (int layer = 0; layer < numLayers; ++layer)
    representativeLayer_[layer] =
        fold_
            ? firstOfClass.emplace(graph.layerClass[layer], layer).first->second
            : layer;
  layerOps_.assign(numLayers, {});
  layerFirstOp_.assign(numLayers, -1);
  bool sawLayerOp = false;
  int lastLayer = -1;

  // The one pass over every op: layers, prologue / epilogue, FLOPs, and the
  // ops whose operands are scanned for consumers: the searched ops and the
  // layer after each searched instance (a block's values are read inside the
  // block and by the next one; the epilogue is searched). The rest of the
  // analysis touches the searched ops only, which keeps the folded analysis
  // nearly independent of the depth.
  std::vector<int> scanned;
  for (size_t o = 0; o < numOps; ++o) {
    const OpInfo &op = graph.ops[o];
    const int layer = op.layer;
    forwardFlops_ += op.flops;
    const bool inLayer = layer >= 0 && layer < numLayers;
    if (inLayer) {
      // Layers are contiguous runs of ops (bm-verify-folded), so a position
      // is an offset from the layer's first op; only searched layers keep
      // their op lists.
      if (layerFirstOp_[layer] < 0)
        layerFirstOp_[layer] = static_cast<int>(o);
      positionInLayer_[o] = static_cast<int>(o) - layerFirstOp_[layer];
      if (representativeLayer_[layer] == layer)
        layerOps_[layer].push_back(static_cast<int>(o));
      layerFlops_ += op.flops;
    } else {
      // Non-layer ops after a layer are held until it is known whether
      // another layer follows (an interlude) or not (the epilogue).
      (layerOps_.empty() || !sawLayerOp ? prologueOps_ : epilogueOps_)
          .push_back(static_cast<int>(o));
    }
    if (inLayer && !epilogueOps_.empty()) {
      interludes_.push_back({lastLayer, std::move(epilogueOps_)});
      epilogueOps_.clear();
    }
    if (inLayer)
      lastLayer = layer;
    sawLayerOp |= inLayer;
    searched_[o] = !inLayer || representativeLayer_[layer] == layer;
    bool afterSearched =
        inLayer && layer > 0 && representativeLayer_[layer - 1] == layer - 1;
    if (searched_[o] || afterSearched)
      scanned.push_back(static_cast<int>(o));
  }
  return scanned;
}

// The readers of every value, from the scanned ops, as one flat list.
void GraphAnalysis::indexConsumers(const std::vector<int> &scanned) {
  const ModelGraph &graph = graph_;
  const size_t numValues = graph_.values.size();
  consumerStart_.assign(numValues + 1, 0);
  std::vector<int> lastReader(numValues, -1);
  for (int o : scanned)
    for (int v : graph.ops[o].operands)
      if (lastReader[v] != static_cast<int>(o)) {
        lastReader[v] = static_cast<int>(o);
        ++consumerStart_[v + 1];
      }
  for (size_t v = 0; v < numValues; ++v)
    consumerStart_[v + 1] += consumerStart_[v];
  consumerList_.resize(consumerStart_[numValues]);
  std::vector<int> fill(consumerStart_.begin(), consumerStart_.end() - 1);
  std::fill(lastReader.begin(), lastReader.end(), -1);
  for (int o : scanned)
    for (int v : graph.ops[o].operands)
      if (lastReader[v] != static_cast<int>(o)) {
        lastReader[v] = static_cast<int>(o);
        consumerList_[fill[v]++] = static_cast<int>(o);
      }
}

// Parameter owners, where gradients start, tokens and parameter counts.
void GraphAnalysis::scanValues() {
  const ModelGraph &graph = graph_;
  const size_t numValues = graph_.values.size();
  // One pass over the values (the graph's largest array): parameter owners,
  // where gradients start, the token count and the parameter count.
  needsGradient_.assign(numValues, 0);
  for (size_t v = 0; v < numValues; ++v) {
    const ValueInfo &value = graph.values[v];
    if (value.kind == ValueKind::Parameter) {
      if (consumerStart_[v + 1] > consumerStart_[v])
        parameterOwner_[v] = consumerList_[consumerStart_[v]];
      needsGradient_[v] = value.isFloat;
      numParameters_ += value.numElements();
      largestParameter_ = std::max(largestParameter_, value.numElements());
    } else if (value.kind == ValueKind::Input && !value.isFloat) {
      tokensPerUnit_ = std::max(tokensPerUnit_, value.numElements());
    }
  }
}

// Which values need a gradient.
void GraphAnalysis::propagateGradients(const std::vector<int> &scanned) {
  const ModelGraph &graph = graph_;
  // Gradients flow from the parameters forward through every op they reach.
  // Only the scanned ops are visited, in order; a value from an instance
  // that is not searched has the gradient of its counterpart in the class's
  // first instance (which comes earlier, so it is already known).
  for (int o : scanned) {
    const OpInfo &op = graph.ops[o];
    bool reached = false;
    for (int v : op.operands)
      reached |=
          needsGradient_[v] != 0 || needsGradient_[representativeValue(v)] != 0;
    if (reached)
      for (int v : op.results)
        needsGradient_[v] = graph.values[v].isFloat;
  }
}

// Deep facts, for the searched ops only: views, token and expert factors,
// which values are written to memory.
void GraphAnalysis::analyseSearchedOps() {
  const ModelGraph &graph = graph_;
  const size_t numValues = graph_.values.size();
  const size_t numOps = graph_.ops.size();
  const bool kernelPerOp = runtime_ == cost::RuntimeModel::Bmrt;
  tokenDim_.assign(numValues, {});
  for (size_t o = 0; o < numOps; ++o) {
    if (!searched_[o])
      continue;
    isView_[o] = !kernelPerOp && graph.ops[o].isView;
    propagateTokens(static_cast<int>(o));
    propagateContext(static_cast<int>(o));
    findExpertFactor(static_cast<int>(o));
  }
  for (size_t o = 0; o < numOps; ++o) {
    if (!searched_[o])
      continue;
    for (int v : graph.ops[o].results) {
      llvm::ArrayRef<int> users = consumers(v);
      // Fusion stays inside a layer: a block boundary is a kernel (and maybe
      // a pipeline-stage) boundary, and every instance of a class must cost
      // the same whatever follows it.
      bool fusedAway = !kernelPerOp && users.size() == 1 &&
                       graph.ops[users[0]].layer == graph.ops[o].layer &&
                       !graph.ops[o].isContraction && !isView_[o] &&
                       !graph.ops[users[0]].isContraction &&
                       !graph.ops[users[0]].isView &&
                       static_cast<int>(v) != graph.output;
      materialized_[v] = !isView_[o] && !fusedAway;
    }
    for (int v : graph.ops[o].operands) {
      int producer = graph.values[v].producer;
      if (producer >= 0 && searched_[producer])
        continue;
      // A value from an instance that is not searched: written to memory
      // exactly when its counterpart in the class's first instance is (a
      // block's output is never fused across the block boundary), and with
      // a gradient exactly when that counterpart has one.
      if (producer >= 0) {
        const int source = representativeValue(v);
        materialized_[v] = materialized_[source] ||
                           graph.ops[producer].layer != graph.ops[o].layer;
        needsGradient_[v] = needsGradient_[v] || needsGradient_[source];
      }
    }
  }
}

// The softmaxes over a product of two activations and their cores.
void GraphAnalysis::findAttentionCores(const std::vector<int> &searchedOps) {
  for (int o : searchedOps) {
    int scores = attentionScores(o);
    if (scores >= 0) {
      attentionSoftmax_[o] = 1;
      hasAttentionCore_ = true;
      markAttentionCore(o, scores);
    }
  }
}

// Segment numbers: the prologue first, then one per representative layer
// in the order they first occur.
void GraphAnalysis::numberSegments() {
  const int numLayers = graph_.numLayers();
  const int firstLayerSegment = prologueOps_.empty() ? 0 : 1;
  std::map<int, int> segmentOfRepresentative;
  layerSegment_.assign(numLayers, -1);
  for (int layer = 0; layer < numLayers; ++layer)
    layerSegment_[layer] =
        segmentOfRepresentative
            .emplace(representativeLayer_[layer],
                     firstLayerSegment +
                         static_cast<int>(segmentOfRepresentative.size()))
            .first->second;
  numLayerSegments_ = static_cast<int>(segmentOfRepresentative.size());
}

int GraphAnalysis::segmentOf(int op) const {
  const int layer = graph_.ops[op].layer;
  if (layer >= 0 && layer < graph_.numLayers())
    return layerSegment_[layer];
  // Outside the layers, numbered as segments() lists them: the prologue,
  // (the layer segments,) the epilogue, then the interludes.
  const int prologue = prologueOps_.empty() ? 0 : 1;
  auto holds = [&](const std::vector<int> &ops) {
    return std::binary_search(ops.begin(), ops.end(), op);
  };
  if (holds(prologueOps_))
    return 0;
  const int epilogue = prologue + numLayerSegments_;
  if (holds(epilogueOps_))
    return epilogue;
  const int firstInterlude = epilogue + (epilogueOps_.empty() ? 0 : 1);
  for (size_t i = 0; i < interludes_.size(); ++i)
    if (holds(interludes_[i].second))
      return firstInterlude + static_cast<int>(i);
  return -1;
}

std::vector<char> GraphAnalysis::parametersAlone() const {
  // Ops are in order: one pass, as over the FLOPs.
  enum : char { kData = 1, kParameters = 2 };
  std::vector<char> cone(graph_.values.size(), 0);
  for (size_t v = 0; v < graph_.values.size(); ++v)
    if (graph_.values[v].kind == ValueKind::Parameter)
      cone[v] = kParameters;
    else if (graph_.values[v].kind == ValueKind::Input)
      cone[v] = kData;
  for (const OpInfo &op : graph_.ops) {
    char in = 0;
    for (int v : op.operands)
      in |= cone[v];
    for (int v : op.results)
      cone[v] = in;
  }
  for (char &c : cone)
    c = c == kParameters;
  return cone;
}

std::vector<int>
GraphAnalysis::readersOf(int parameter,
                         const std::vector<char> &parametersAlone) const {
  std::vector<int> readers;
  std::vector<int> pending = {parameter};
  while (!pending.empty()) {
    const int v = pending.back();
    pending.pop_back();
    for (int op : consumers(v)) {
      if (std::find(readers.begin(), readers.end(), op) != readers.end())
        continue;
      readers.push_back(op);
      for (int result : graph_.ops[op].results)
        if (parametersAlone[result])
          pending.push_back(result);
    }
  }
  return readers;
}

// What bm-split-stages gives every stage a copy of (and the trainer sums
// over pp): parameters whose readers fall into several parts of the model.
// Two instances of a layer class are two parts (a weight shared by every
// layer), which their common segment does not tell apart.
void GraphAnalysis::findSharedParameters() {
  const int numLayers = graph_.numLayers();
  auto partOf = [&](int op) {
    const int layer = graph_.ops[op].layer;
    return layer >= 0 && layer < numLayers ? layer : numLayers + segmentOf(op);
  };
  size_t numSegments = (prologueOps_.empty() ? 0 : 1) + numLayerSegments_ +
                       (epilogueOps_.empty() ? 0 : 1) + interludes_.size();
  sharedReads_.assign(numSegments, 0);
  const std::vector<char> tables = parametersAlone();
  for (size_t v = 0; v < graph_.values.size(); ++v) {
    if (graph_.values[v].kind != ValueKind::Parameter ||
        sharedParameters_.size() == kMaxSharedParameters)
      continue;
    std::vector<int> readers = readersOf(static_cast<int>(v), tables);
    bool several = llvm::any_of(
        readers, [&](int op) { return partOf(op) != partOf(readers.front()); });
    bool expert =
        llvm::any_of(readers, [&](int op) { return expertFactor(op) >= 0; });
    if (!several || expert)
      continue;
    const uint64_t bit = uint64_t(1) << sharedParameters_.size();
    sharedParameters_.push_back(static_cast<int>(v));
    for (int op : readers)
      sharedReads_[segmentOf(op)] |= bit;
  }
}

void GraphAnalysis::findExpertFactor(int o) {
  const OpInfo &op = graph_.ops[o];
  const ShardingRule &rule = op.rule;
  if (!op.isContraction)
    return;
  for (size_t i = 0; i < op.operands.size() && i < rule.operandFactors.size();
       ++i) {
    const ValueInfo &weights = graph_.values[op.operands[i]];
    if (weights.kind != ValueKind::Parameter || weights.shape.size() < 3 ||
        rule.operandFactors[i].empty() || rule.operandFactors[i][0].size() != 1)
      continue;
    int factor = rule.operandFactors[i][0][0];
    if (rule.factorKinds[factor] != FactorKind::Parallel ||
        factor == op.batchFactor)
      continue;
    for (size_t j = 0; j < op.operands.size() && j < rule.operandFactors.size();
         ++j)
      if (graph_.values[op.operands[j]].kind == ValueKind::Activation &&
          dimOfFactor(rule.operandFactors[j], factor) >= 0) {
        expertFactor_[o] = factor;
        int64_t experts = rule.factorSizes[factor];
        numExperts_ =
            numExperts_ == 0 ? experts : std::min(numExperts_, experts);
        return;
      }
  }
}

int GraphAnalysis::representativeValue(int value) const {
  int producer = graph_.values[value].producer;
  if (producer < 0 || searched_[producer])
    return value;
  int layer = graph_.ops[producer].layer;
  if (layer < 0)
    return value;
  const std::vector<int> &repOps = layerOps_[representativeLayer_[layer]];
  int position = positionInLayer_[producer];
  if (position < 0 || position >= static_cast<int>(repOps.size()))
    return value;
  const std::vector<int> &results = graph_.ops[producer].results;
  const std::vector<int> &repResults = graph_.ops[repOps[position]].results;
  for (size_t r = 0; r < results.size() && r < repResults.size(); ++r)
    if (results[r] == value)
      return repResults[r];
  return value;
}

// Token dimensions start at the model inputs' non-batch dimensions and follow
// the rules' factors through the graph.
void GraphAnalysis::propagateTokens(int o) {
  std::vector<std::vector<char>> &tokenDim = tokenDim_;
  const OpInfo &op = graph_.ops[o];
  const ShardingRule &rule = op.rule;
  tokenFactor_[o].assign(rule.numFactors(), 0);
  for (size_t i = 0; i < op.operands.size() && i < rule.operandFactors.size();
       ++i) {
    const int v = op.operands[i];
    if (tokenDim[v].empty()) {
      const ValueInfo &value = graph_.values[v];
      tokenDim[v].assign(value.shape.size(), 0);
      if (value.kind == ValueKind::Input) {
        for (size_t d = 0; d < value.shape.size(); ++d)
          tokenDim[v][d] =
              static_cast<int>(d) != value.batchDim && value.shape[d] > 1;
      } else if (value.kind == ValueKind::Activation) {
        int source = representativeValue(v);
        if (source != v && tokenDim[source].size() == value.shape.size())
          tokenDim[v] = tokenDim[source];
      }
    }
    const std::vector<char> &dims = tokenDim[v];
    for (size_t d = 0; d < dims.size() && d < rule.operandFactors[i].size();
         ++d)
      if (dims[d])
        for (int f : rule.operandFactors[i][d])
          tokenFactor_[o][f] = 1;
  }
  for (size_t r = 0; r < op.results.size() && r < rule.resultFactors.size();
       ++r) {
    std::vector<char> &dims = tokenDim[op.results[r]];
    const std::vector<int64_t> &shape = graph_.values[op.results[r]].shape;
    dims.assign(shape.size(), 0);
    // A dim longer than 1 with a token factor runs along the sequence, also
    // a batch dim with the tokens folded in ([b * s, h] before a 2-D GEMM).
    for (size_t d = 0; d < dims.size() && d < rule.resultFactors[r].size(); ++d)
      for (int f : rule.resultFactors[r][d])
        if (tokenFactor_[o][f] && shape[d] > 1)
          dims[d] = 1;
  }
}

void GraphAnalysis::propagateContext(int o) {
  const OpInfo &op = graph_.ops[o];
  const ShardingRule &rule = op.rule;
  int factor = -1;
  for (size_t i = 0; i < op.operands.size() && i < rule.operandFactors.size();
       ++i) {
    const int v = op.operands[i];
    const ValueInfo &value = graph_.values[v];
    // An input's sequence: the first of its token dims (propagateTokens,
    // run just before), for token ids, not images.
    if (value.kind == ValueKind::Input && !value.isFloat &&
        value.batchDim >= 0 && contextDim_[v] < 0)
      for (size_t d = 0; d < value.shape.size(); ++d)
        if (isTokenDim(v, static_cast<int>(d))) {
          contextDim_[v] = static_cast<int>(d);
          hasContext_ = true;
          break;
        }
    if (value.kind == ValueKind::Activation && value.producer >= 0 &&
        !searched_[value.producer])
      contextDim_[v] = contextDim_[representativeValue(v)];
    const int dim = contextDim_[v];
    if (dim < 0 || dim >= static_cast<int>(rule.operandFactors[i].size()))
      continue;
    // A dim of merged factors ([b * s] before a 2-D GEMM) splits along
    // its innermost factor that is not the batch.
    for (int f : rule.operandFactors[i][dim])
      if (f != op.batchFactor)
        factor = f;
    if (factor >= 0)
      break;
  }
  contextFactor_[o] = factor;
  if (factor < 0)
    return;
  for (size_t r = 0; r < op.results.size() && r < rule.resultFactors.size();
       ++r)
    contextDim_[op.results[r]] = dimOfFactor(rule.resultFactors[r], factor);
}

// Whether `value` is a weight: a parameter, possibly through views.
bool GraphAnalysis::isWeight(int value) const {
  for (int step = 0; step < 8; ++step) {
    const ValueInfo &info = graph_.values[value];
    if (info.kind == ValueKind::Parameter)
      return true;
    if (info.producer < 0 || !isView_[info.producer] ||
        graph_.ops[info.producer].operands.empty())
      return false;
    value = graph_.ops[info.producer].operands.front();
  }
  return false;
}

/// The operand a walk from the softmax back to the scores follows: the
/// largest, the scores rather than a mask or a scale.
static int largestOperand(const ModelGraph &graph, const OpInfo &op) {
  return *llvm::max_element(op.operands, [&](int a, int b) {
    return graph.values[a].numElements() < graph.values[b].numElements();
  });
}

int GraphAnalysis::attentionScores(int op) const {
  const OpInfo &softmax = graph_.ops[op];
  if (!softmax.isSoftmax || softmax.operands.empty())
    return -1;
  int value = softmax.operands.front();
  for (int step = 0; step < 8; ++step) {
    int producer = graph_.values[value].producer;
    if (producer < 0 || !searched_[producer])
      return -1;
    const OpInfo &info = graph_.ops[producer];
    if (info.isContraction)
      return info.operands.size() == 2 &&
                     llvm::none_of(info.operands,
                                   [&](int v) { return isWeight(v); })
                 ? producer
                 : -1;
    if (info.operands.empty())
      return -1;
    value = largestOperand(graph_, info);
  }
  return -1;
}

void GraphAnalysis::markAttentionCore(int softmax, int scores) {
  // Back from the softmax to the scores, along the walk that found them.
  int value = graph_.ops[softmax].operands.front();
  for (;;) {
    attentionCoreValue_[value] = 1;
    int producer = graph_.values[value].producer;
    if (producer == scores)
      break;
    value = largestOperand(graph_, graph_.ops[producer]);
  }
  // Forward from the probabilities through dropout, casts and views to the
  // contractions with V (not their results).
  std::vector<int> pending(graph_.ops[softmax].results.begin(),
                           graph_.ops[softmax].results.end());
  for (int budget = 64; budget > 0 && !pending.empty(); --budget) {
    int v = pending.back();
    pending.pop_back();
    if (attentionCoreValue_[v])
      continue;
    attentionCoreValue_[v] = 1;
    for (int user : consumers(v))
      if (searched_[user] && !graph_.ops[user].isContraction)
        pending.insert(pending.end(), graph_.ops[user].results.begin(),
                       graph_.ops[user].results.end());
  }
}

bool GraphAnalysis::contextDivisibleBy(int64_t n) const {
  for (size_t v = 0; v < graph_.values.size(); ++v) {
    const int dim = contextDim_[v];
    if (dim >= 0 && graph_.values[v].kind == ValueKind::Input &&
        graph_.values[v].shape[dim] % n != 0)
      return false;
  }
  return true;
}

bool GraphAnalysis::mixesSequenceOnlyInAttention() const {
  for (size_t o = 0; o < graph_.ops.size(); ++o) {
    const int factor = contextFactor_[o];
    if (!searched_[o] || factor < 0)
      continue;
    const OpInfo &op = graph_.ops[o];
    if (op.opName == "bm.attention" || inAttentionCore(static_cast<int>(o)))
      continue;
    if (op.rule.factorKinds[factor] != FactorKind::Parallel)
      return false;
    // An operand read along a sequence that is not the op's own.
    for (size_t i = 0; i < op.operands.size(); ++i) {
      const int dim = contextDim_[op.operands[i]];
      if (dim >= 0 &&
          dim < static_cast<int>(op.rule.operandFactors[i].size()) &&
          !llvm::is_contained(op.rule.operandFactors[i][dim], factor))
        return false;
    }
  }
  return true;
}

bool GraphAnalysis::inAttentionCore(int op) const {
  const OpInfo &info = graph_.ops[op];
  auto core = [&](int v) { return attentionCoreValue_[v] != 0; };
  return llvm::any_of(info.operands, core) || llvm::any_of(info.results, core);
}

int GraphAnalysis::countAttentions(llvm::ArrayRef<int> ops) const {
  return static_cast<int>(
      llvm::count_if(ops, [&](int op) { return attentionSoftmax_[op] != 0; }));
}

std::vector<bool> GraphAnalysis::expertLayers(llvm::ArrayRef<int> ops) const {
  std::vector<bool> layers(countAttentions(ops), false);
  if (layers.empty())
    return layers;
  int current = static_cast<int>(layers.size()) - 1; // before the first
  bool first = true;
  for (int op : ops) {
    if (attentionSoftmax_[op]) {
      current = first ? 0 : current + 1;
      first = false;
    }
    if (expertFactor(op) >= 0)
      layers[current] = true;
  }
  return layers;
}

int GraphAnalysis::findRouterTopK(llvm::ArrayRef<int> ops) const {
  if (numExperts_ == 0)
    return 0;
  for (int op : ops) {
    const OpInfo &info = graph_.ops[op];
    if (!info.isTopK || info.operands.empty() || info.results.empty())
      continue;
    const std::vector<int64_t> &scores =
        graph_.values[info.operands.front()].shape;
    const std::vector<int64_t> &picked =
        graph_.values[info.results.front()].shape;
    // The top-k axis is the dim that shrinks from the experts to k.
    for (size_t d = 0; d < scores.size() && d < picked.size(); ++d)
      if (scores[d] == numExperts_ && picked[d] < scores[d])
        return static_cast<int>(picked[d]);
  }
  return 0;
}

std::vector<Segment> GraphAnalysis::segments() const {
  std::vector<Segment> result;
  // Prologue, epilogue and interludes: ops outside the layers, searched as
  // they are.
  auto addOutsideLayers = [&](SegmentKind kind, std::string name,
                              const std::vector<int> &ops) {
    Segment segment;
    segment.kind = kind;
    segment.name = std::move(name);
    segment.ops = ops;
    result.push_back(std::move(segment));
  };
  if (!prologueOps_.empty())
    addOutsideLayers(SegmentKind::Prologue, "prologue", prologueOps_);
  for (int layer = 0; layer < graph_.numLayers(); ++layer) {
    const size_t index = layerSegment_[layer];
    if (index == result.size()) { // the class's first layer
      Segment s;
      s.kind = SegmentKind::Layer;
      s.blockClass = graph_.layerClass[layer];
      s.numInstances = 0;
      s.name = fold_ ? "block " + std::to_string(s.blockClass)
                     : "layer " + std::to_string(layer);
      s.ops = layerOps_[representativeLayer_[layer]];
      result.push_back(std::move(s));
    }
    ++result[index].numInstances;
  }
  if (!epilogueOps_.empty())
    addOutsideLayers(SegmentKind::Epilogue, "epilogue", epilogueOps_);
  // Interludes last, so that the indices above stay as layerSegment_
  // numbers them; sequence() puts them in place.
  for (const auto &[after, ops] : interludes_)
    addOutsideLayers(SegmentKind::Interlude,
                     "after layer " + std::to_string(after), ops);
  return result;
}

std::vector<std::pair<int, int64_t>> GraphAnalysis::sequence() const {
  const int prologue = prologueOps_.empty() ? -1 : 0;
  const int firstLayer = prologueOps_.empty() ? 0 : 1;
  const int epilogue =
      epilogueOps_.empty() ? -1 : firstLayer + numLayerSegments_;
  int nextInterlude = firstLayer + numLayerSegments_ + (epilogue >= 0 ? 1 : 0);

  std::vector<std::pair<int, int64_t>> result;
  auto push = [&](int segment) {
    if (!result.empty() && result.back().first == segment)
      ++result.back().second;
    else
      result.push_back({segment, 1});
  };
  if (prologue >= 0)
    push(prologue);
  size_t interlude = 0;
  for (int layer = 0; layer < graph_.numLayers(); ++layer) {
    push(layerSegment_[layer]);
    // Interludes are numbered in order; each follows one layer.
    while (interlude < interludes_.size() &&
           interludes_[interlude].first == layer) {
      result.push_back({nextInterlude++, 1});
      ++interlude;
    }
  }
  if (epilogue >= 0)
    push(epilogue);
  return result;
}

std::vector<int>
GraphAnalysis::findSideInputs(int blockClass,
                              const std::vector<char> &parametersAlone) const {
  // The class's first instance and the instance right after it, if that is
  // of the same class (both are scanned, so their operands are known).
  int first = -1;
  for (int layer = 0; layer + 1 < graph_.numLayers(); ++layer)
    if (graph_.layerClass[layer] == blockClass &&
        graph_.layerClass[layer + 1] == blockClass) {
      first = layer;
      break;
    }
  if (first < 0 || layerFirstOp_[first] < 0 || layerFirstOp_[first + 1] < 0)
    return {};
  const int a = layerFirstOp_[first], b = layerFirstOp_[first + 1];
  const int size = b - a;
  std::vector<int> result;
  for (int k = 0; k < size; ++k) {
    const OpInfo &x = graph_.ops[a + k];
    const OpInfo &y = graph_.ops[b + k];
    if (x.opName != y.opName || x.operands.size() != y.operands.size())
      return {};
    for (size_t i = 0; i < x.operands.size(); ++i) {
      int v = x.operands[i];
      int producer = graph_.values[v].producer;
      // The same value in both instances, made outside both of them (not
      // the previous layer's output, which differs from one to the next).
      // A table made from parameters alone (T5's decoder position bias)
      // crosses no stage boundary: bm-split-stages gives each stage the
      // parameter and the ops that make it.
      if (v != y.operands[i] || producer < 0 ||
          (producer >= a && producer < b + size) || !needsGradient_[v] ||
          parametersAlone[v])
        continue;
      if (std::find(result.begin(), result.end(), v) == result.end())
        result.push_back(v);
    }
  }
  return result;
}
