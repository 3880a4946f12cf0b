//===- ModelGraph.h - what the planner sees of a model ----------*- C++ -*-===//
//
// The planner's search and cost model work on this plain C++ description of
// a model rather than on MLIR directly, so that they are fast, testable with
// GoogleTest without an MLIR context, and independent of the importer.
// passes/plan/ExtractModelGraph.cpp builds it from folded `bm` IR; unit tests
// build it by hand.
//
// Conventions:
//  - The graph is the forward pass for ONE batch unit: one sample for most
//    models, `batchGranularity` samples for models that group tokens across
//    samples (GShard's expert groups), whose group dim would otherwise be
//    half a group per sample. A micro-batch of b samples scales every op's
//    batch factor (and every activation's batch dimension) by
//    b / batchGranularity (`unitsOf`). Parameters do not scale.
//  - Ops are in topological order.
//  - Folding: ops that belong to a repeated layer carry the layer index;
//    layers carry their block class. All layers of one class are isomorphic:
//    op k of one instance corresponds to op k of every other instance.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_MODELGRAPH_H
#define BM_PLAN_MODELGRAPH_H

#include "bm/ShardingRule.h"
#include "cost/Cluster.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bm::plan {

enum class ValueKind { Input, Parameter, Activation };

struct ValueInfo {
  std::string name;            // parameter / input name, or producer's name
  std::vector<int64_t> shape;  // static, per batch unit
  int elementBytes = 4;        // bytes per element as stored in the model
  bool isFloat = true;         // false for token ids, masks, indices
  ValueKind kind = ValueKind::Activation;
  int producer = -1;           // op index, -1 for inputs and parameters
  /// Dimension that carries the batch (sample) index, or -1 (parameters,
  /// constants, batch-independent values).
  int batchDim = -1;

  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// Per operand j of an op: whether the gradient of operand j reads each of
/// the op's operands (indices 0..n-1) and results (n..n+r-1).
using GradientReads = std::vector<std::vector<bool>>;

/// What an op's backward reads besides the incoming gradient, in classes:
/// what a graph built by hand (without GradientReads) says instead.
enum class BackwardReads {
  Nothing,       // linear in each operand, no state (add, views, sums)
  Operands,      // its activation operands (norms, pointwise nonlinearity)
  OtherOperands, // bilinear: operand i when another operand has a gradient
  Condition,     // where: only the mask
  Divide,        // a / b: b, and a when b has a gradient
  Output,        // its own result (softmax, exp)
};

struct OpInfo {
  std::string opName;          // "bm.matmul"
  std::string label;           // the ONNX node name, for printing
  std::vector<int> operands;   // indices into ModelGraph::values
  std::vector<int> results;
  ShardingRule rule;
  /// Factor that carries the batch, or -1 (e.g. ops on parameters only).
  int batchFactor = -1;
  /// Forward FLOPs for one batch unit (multiply-add = 2 FLOPs).
  double flops = 0;
  /// Contraction ops (matmul, gemm, einsum, conv) run on tensor cores and
  /// follow the GEMM efficiency curve; the others are memory-bound.
  bool isContraction = false;
  /// The kernel class a memory-bound op is timed as (its measured rate in a
  /// calibrated cluster); the op says which (CostOpInterface).
  cost::MemoryKernelClass memoryClass = cost::MemoryKernelClass::Elementwise;
  /// Layer instance this op belongs to, or -1 (prologue / epilogue).
  int layer = -1;
  // Facts of the op's kind, read from its ODS traits and class by
  // ExtractModelGraph (the analyses here link no MLIR).
  /// It only changes the layout (the Bm_View trait).
  bool isView = false;
  /// A softmax (attention probabilities, when over a product of two
  /// activations) and a top-k (a mixture-of-experts router).
  bool isSoftmax = false, isTopK = false;
  /// A fused causal attention (its kernels skip the masked key blocks).
  bool isCausalAttention = false;
  /// What its gradient rule reads (GradientReads.h); empty when unknown, for
  /// graphs built by hand: then `backwardReads` says.
  GradientReads gradientReads;
  BackwardReads backwardReads = BackwardReads::Operands;
};

struct ModelGraph {
  std::string name;
  std::vector<ValueInfo> values;
  std::vector<OpInfo> ops;
  /// Block class of each layer instance (layers are numbered in order).
  std::vector<int> layerClass;
  /// Index of the loss value (scalar) or of the model output when the model
  /// has no loss; the planner adds a loss of negligible cost.
  int output = -1;
  /// Samples in one batch unit; micro-batches must hold whole units. A model
  /// that groups tokens across samples (GShard's expert groups of S tokens,
  /// with sequences shorter than S) only has whole groups at such batches.
  int batchGranularity = 1;
  /// The symbolic dimensions of the model's inputs as the import bound
  /// them, but for the batch ("seq" -> 16, "dec_seq" -> 12): another import
  /// of the same model with these builds the same graph. Empty for graphs
  /// built by hand.
  std::map<std::string, int64_t> symbolicDims;
  /// Whether the fold phase made each attention core one bm.attention (the
  /// trainer's backend runs fused attention; ImportOptions::fuseAttention).
  bool fusedAttention = false;

  int numLayers() const { return static_cast<int>(layerClass.size()); }
  /// Batch units in `samples` samples (a multiple of batchGranularity).
  int64_t unitsOf(int64_t samples) const { return samples / batchGranularity; }
};

} // namespace bm::plan

#endif // BM_PLAN_MODELGRAPH_H
