//===- GraphAnalysis.h - facts about a ModelGraph the search reuses -*- C++
//-*-===//
//
// Computed once per graph: consumers of each value, which ops are views,
// which values a fused implementation writes to memory, which factors run
// along the sequence (token) axis, which op owns each parameter, which
// parameters several parts of the model read (tied embeddings), and the
// split of the ops into searched segments (prologue, blocks, epilogue).
//
// Folding: only the searched ops (prologue, epilogue and, when folded, the
// first instance of each block class) have their sharding rules read; other
// instances are isomorphic to their class's first one (ModelGraph.h), so a
// value they produce gets the facts of the corresponding value there. The
// remaining per-op work is a scan of op indices, which keeps planning time
// nearly flat in the depth of the model.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_GRAPHANALYSIS_H
#define BM_PLAN_GRAPHANALYSIS_H

#include "cost/Cluster.h"
#include "passes/plan/ModelGraph.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bm::plan {

/// Where a segment sits: before the first layer, a layer, between two
/// layers (the ops of a stage transition in a ResNet, the encoder's final
/// norm and the decoder's embedding in T5), after the last layer.
enum class SegmentKind { Prologue, Layer, Interlude, Epilogue };

/// Ops searched as one unit. A layer segment stands for every layer instance
/// of its block class (folded) or for one layer (no-fold).
struct Segment {
  SegmentKind kind = SegmentKind::Layer;
  std::string name;
  int blockClass = -1;
  int numInstances = 1;
  std::vector<int> ops;
};

class GraphAnalysis {
public:
  /// `fold`: search each block class once (its first instance), else every
  /// layer. `runtime`: under bmrt each op is a kernel that writes its
  /// result; Megatron-LM fuses elementwise chains and reads layout ops'
  /// inputs with strides.
  GraphAnalysis(const ModelGraph &graph, bool fold,
                cost::RuntimeModel runtime = cost::RuntimeModel::Megatron);
  cost::RuntimeModel runtime() const { return runtime_; }

  const ModelGraph &graph() const { return graph_; }
  /// Ops reading `value`, in order, each once. Complete for the values of
  /// searched ops (see the constructor); others may miss readers.
  llvm::ArrayRef<int> consumers(int value) const {
    return llvm::ArrayRef<int>(consumerList_)
        .slice(consumerStart_[value],
               consumerStart_[value + 1] - consumerStart_[value]);
  }
  /// Layout-only ops (reshape, transpose, split, ...): no kernel of their
  /// own, the consumer reads the producer's buffer with strides.
  bool isView(int op) const { return isView_[op]; }
  /// Whether `factor` of `op` runs along the sequence of some input.
  bool isTokenFactor(int op, int factor) const {
    return tokenFactor_[op][factor];
  }
  /// The factor of searched op `op` that context parallelism splits: the
  /// one its first operand with a sequence dimension (contextDim) has
  /// there; -1 for ops that read no sequence. Each value then has one
  /// such dimension, the query positions: a product Q K^T splits its rows
  /// and reads K^T whole, as does the product of the probabilities and V.
  int contextFactor(int op) const { return contextFactor_[op]; }
  /// The dimension of `value` that context parallelism splits, or -1.
  /// Inputs: the first dimension of a batched integer input (token ids)
  /// other than the batch that is longer than 1.
  int contextDim(int value) const { return contextDim_[value]; }
  /// Whether some input has a sequence context parallelism can split.
  bool hasContext() const { return hasContext_; }
  /// Whether `n` divides the length of every input's sequence (T5 has two).
  bool contextDivisibleBy(int64_t n) const;
  /// Whether the searched ops mix a sequence's positions only in attention
  /// (Q K^T, the softmax over the keys, the sum over the values, or
  /// bm.attention): every other op works position by position. Then the
  /// positions may go in any order that the inputs and every table of
  /// positions (position ids, rotary tables, masks) follow alike, and
  /// context parallelism may give each rank two mirrored chunks.
  bool mixesSequenceOnlyInAttention() const;
  /// Whether `value`, written by a searched op, is part of an attention's
  /// core: from the scores Q K^T through the scale, mask and softmax to the
  /// probabilities (maybe dropped out) that multiply V. These are what
  /// selective recomputation drops and recomputes (Korthikanti et al. 2022,
  /// section 4.2).
  bool isAttentionCoreValue(int value) const {
    return attentionCoreValue_[value];
  }
  /// Whether the model has an attention core, i.e. whether selective
  /// recomputation differs from none.
  bool hasAttentionCore() const { return hasAttentionCore_; }
  /// Whether searched op `op` reads or writes an attention-core value: the
  /// ops selective recomputation repeats (Q K^T to the product with V).
  bool inAttentionCore(int op) const;
  /// Attention layers among searched `ops`: softmaxes over the product of
  /// two activations (the scores Q K^T), one per attention.
  int countAttentions(llvm::ArrayRef<int> ops) const;
  /// For each attention among searched `ops` (a block), in order, whether
  /// its transformer layer -- from its softmax to the next one -- holds an
  /// expert op. Ops before the block's first attention belong to its last
  /// (the block repeats).
  std::vector<bool> expertLayers(llvm::ArrayRef<int> ops) const;
  /// The experts a token is routed to: k of the first searched top-k that
  /// picks from the expert count (GShard's top-2 gate); 0 if none.
  int routerTopK() const { return routerTopK_; }
  /// Whether dimension `dim` of `value` runs along a sequence (known for
  /// the values the searched ops read and write).
  bool isTokenDim(int value, int dim) const {
    const std::vector<char> &dims = tokenDim_[value];
    return dim < static_cast<int>(dims.size()) && dims[dim];
  }
  /// Whether a fused implementation writes `value` to device memory: the
  /// producer is a real kernel and the value does not flow, alone, into one
  /// memory-bound consumer that the compiler fuses with it.
  bool isMaterialized(int value) const { return materialized_[value]; }
  /// Whether backward reads `value` (autograd's saved tensors): a
  /// consumer's gradient needs it (a GEMM's input, a norm's input, a
  /// softmax's output), or a fused kernel that needs a value it does not
  /// write recomputes that value from it. Known for the values of searched
  /// ops; what a layer keeps for backward is its materialized saved values.
  bool isSavedForBackward(int value) const { return saved_[value]; }
  /// Whether `op`'s backward reads its operand (or, from
  /// operands.size() on, its result) `index`, by its gradient rule.
  bool backwardReads(int op, size_t index) const;
  /// For a parameter, the first op that reads it (the op whose sharding
  /// decides how it is stored); -1 otherwise.
  int parameterOwner(int value) const { return parameterOwner_[value]; }
  /// Parameters that pipeline stages may hold apart, by value index: read
  /// by ops of several parts of the model (the prologue, a layer instance,
  /// an interlude, the epilogue), directly or through values computed from
  /// parameters alone, which every stage reading them computes again
  /// (bm-split-stages). GPT's word embedding, tied to the output layer;
  /// Llama's rotary tables, read by every layer. Readers are the ops
  /// consumers() lists, so under folding a parameter that only instances
  /// after a class's second share is missed. Expert weights are never
  /// listed, and at most kMaxSharedParameters are (the first by index).
  llvm::ArrayRef<int> sharedParameters() const { return sharedParameters_; }
  static constexpr size_t kMaxSharedParameters = 64;
  /// Bit i: whether the ops of segment `segment` (numbered as segments()
  /// returns them) read sharedParameters()[i] as above; for a layer
  /// segment, the ops of any scanned instance of its class.
  uint64_t sharedParametersRead(int segment) const {
    return sharedReads_[segment];
  }
  /// Whether training computes a gradient for `value`: floating-point
  /// values that depend on a parameter. Constants, masks built from them
  /// and the token ids have none, so no backward collective moves them.
  bool needsGradient(int value) const { return needsGradient_[value]; }
  /// Tokens per sample: the largest integer model input (the token ids).
  int64_t tokensPerSample() const {
    return tokensPerUnit_ / graph_.batchGranularity;
  }
  /// The expert factor of a mixture-of-experts op, or -1: a parallel
  /// factor of a contraction that indexes the leading dimension of a
  /// parameter of rank >= 3 (a stack of per-expert weights [E, ...]) and
  /// also an activation operand (the tokens grouped per expert). Known for
  /// searched ops.
  int expertFactor(int op) const {
    auto it = expertFactor_.find(op);
    return it == expertFactor_.end() ? -1 : it->second;
  }
  /// Whether some searched op has an expert factor.
  bool hasExperts() const { return !expertFactor_.empty(); }
  /// The smallest expert count of any expert op (0 without experts): the
  /// expert-parallel degree must divide it.
  int64_t numExperts() const { return numExperts_; }
  /// Parameter elements of the whole model.
  int64_t numParameters() const { return numParameters_; }
  /// Elements of the largest parameter tensor.
  int64_t largestParameter() const { return largestParameter_; }
  /// Forward FLOPs of the whole model for one sample.
  double forwardFlopsPerSample() const {
    return forwardFlops_ / graph_.batchGranularity;
  }
  /// Forward FLOPs of the layer instances only, for one sample.
  double layerFlopsPerSample() const {
    return layerFlops_ / graph_.batchGranularity;
  }

  /// Prologue (if any), the layer segments, epilogue (if any). Folded: one
  /// segment per block class (represented by its first instance), otherwise
  /// one per layer.
  std::vector<Segment> segments() const;
  /// The model in execution order as runs of `segments()`: (segment index,
  /// consecutive instances). Prologue and epilogue (if any) come first and
  /// last; each interlude sits between the layers it separates.
  std::vector<std::pair<int, int64_t>> sequence() const;
  /// Values that every layer of `blockClass` reads from outside the layers
  /// and that carry a gradient: read by the same operand of the same op in
  /// the class's first two consecutive instances (T5's encoder output for
  /// the decoder's cross-attention). Masks and other values made from the
  /// inputs alone, or from parameters alone, are not listed: each stage can
  /// make its own.
  llvm::ArrayRef<int> sideInputs(int blockClass) const {
    auto it = sideInputs_.find(blockClass);
    return it == sideInputs_.end() ? llvm::ArrayRef<int>()
                                   : llvm::ArrayRef<int>(it->second);
  }

private:
  // The constructor's steps, in order.
  /// Layers, prologue, interludes, epilogue, FLOPs; returns the ops whose
  /// operands are scanned for consumers.
  std::vector<int> placeOps();
  void indexConsumers(const std::vector<int> &scanned);
  void scanValues();
  void propagateGradients(const std::vector<int> &scanned);
  void analyseSearchedOps();
  void findAttentionCores(const std::vector<int> &searchedOps);
  void numberSegments();
  /// The value that `value` (produced outside the searched ops) corresponds
  /// to in the first instance of its producer's block class.
  int representativeValue(int value) const;
  void propagateTokens(int op);
  void propagateContext(int op);
  void findExpertFactor(int op);
  bool isWeight(int value) const;
  /// The contraction of two activations (Q K^T) whose product softmax `op`
  /// normalises, past scales and masks; -1 when `op` is not such a softmax
  /// (a router's softmax reads the tokens times a weight).
  int attentionScores(int op) const;
  void markAttentionCore(int softmax, int scores);
  int findRouterTopK(llvm::ArrayRef<int> searchedOps) const;
  void findSavedValues(const std::vector<int> &searchedOps);
  /// The index in segments() of scanned op `op`'s segment.
  int segmentOf(int op) const;
  /// Per value, whether it is computed from parameters (and constants)
  /// alone, not from the data: a table each stage reading it can compute
  /// again.
  std::vector<char> parametersAlone() const;
  /// The ops that read `parameter`, directly or through values computed
  /// from parameters alone (as consumers() lists them).
  std::vector<int> readersOf(int parameter,
                             const std::vector<char> &parametersAlone) const;
  void findSharedParameters();

  const ModelGraph &graph_;
  bool fold_;
  cost::RuntimeModel runtime_;
  std::vector<int> representativeLayer_; // per layer
  /// The index in `segments()` of each layer's segment, and how many layer
  /// segments there are (numbered after the prologue, in layer order).
  std::vector<int> layerSegment_;
  int numLayerSegments_ = 0;
  /// Ops of each searched (representative) layer; empty for the others.
  std::vector<std::vector<int>> layerOps_;
  std::vector<int> layerFirstOp_;    // per layer
  std::vector<int> positionInLayer_; // per op
  std::vector<char> searched_;       // per op
  std::vector<int> prologueOps_, epilogueOps_;
  /// Non-layer ops between layers: (the layer they follow, their ops).
  std::vector<std::pair<int, std::vector<int>>> interludes_;
  std::map<int, int> expertFactor_; // op -> factor
  int64_t numExperts_ = 0;
  int routerTopK_ = 0;
  // Consumers in compressed rows: those of value v are
  // consumerList_[consumerStart_[v] .. consumerStart_[v + 1]).
  std::vector<int> consumerStart_;
  std::vector<int> consumerList_;
  std::vector<char> isView_;
  std::vector<std::vector<char>> tokenFactor_;
  std::vector<int> contextFactor_; // per op
  std::vector<int> contextDim_;    // per value
  bool hasContext_ = false;
  std::vector<char> attentionSoftmax_;   // per op
  std::vector<char> attentionCoreValue_; // per value
  bool hasAttentionCore_ = false;
  /// Per value, which dimensions run along a sequence (empty when unknown).
  std::vector<std::vector<char>> tokenDim_;
  std::vector<char> materialized_;
  std::vector<char> saved_;
  std::vector<int> parameterOwner_;
  std::vector<int> sharedParameters_;
  std::vector<uint64_t> sharedReads_; // per segment
  std::vector<char> needsGradient_;
  std::map<int, std::vector<int>> sideInputs_;
  std::vector<int>
  findSideInputs(int blockClass,
                 const std::vector<char> &parametersAlone) const;
  int64_t tokensPerUnit_ = 1;
  int64_t numParameters_ = 0;
  int64_t largestParameter_ = 0;
  double forwardFlops_ = 0;
  double layerFlops_ = 0;
};

/// Dimension of a tensor whose factors include `factor`, or -1.
int dimOfFactor(const TensorFactors &tensor, int factor);

/// Shardy-style factor name: i, j, ..., z, z1, z2, ...
std::string factorName(int factor);

} // namespace bm::plan

#endif // BM_PLAN_GRAPHANALYSIS_H
