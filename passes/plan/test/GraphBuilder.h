//===- GraphBuilder.h - hand-built ModelGraphs for tests --------*- C++ -*-===//
//
// Builds ModelGraphs with the ops and sharding rules the importer produces
// from an ONNX GPT export (GPT-2 style, pre-LayerNorm), so that the planner
// can be tested without MLIR. The graph is per sample (batch dim = 1).
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_TEST_GRAPHBUILDER_H
#define BM_PLAN_TEST_GRAPHBUILDER_H

#include "passes/plan/ModelGraph.h"

#include <string>
#include <vector>

namespace bm::plan::test {

/// Low-level builder: values and ops with their rules.
class GraphBuilder {
public:
  explicit GraphBuilder(std::string name);

  /// A model input; `batchDim` 0 for per-sample inputs, -1 for constants.
  int input(const std::string &name, std::vector<int64_t> shape,
            bool isFloat, int batchDim);
  int parameter(const std::string &name, std::vector<int64_t> shape);

  /// Ops created between these carry the layer index.
  void beginLayer(int blockClass);
  void endLayer();

  /// ([..., m, k], [k, n]) or batched ([b..., m, k], [b..., k, n]).
  int matmul(const std::string &label, int a, int b);
  /// Broadcasting elementwise binary op ("bm.add", "bm.mul", ...).
  int binary(const std::string &opName, const std::string &label, int a,
             int b);
  int unary(const std::string &opName, const std::string &label, int x);
  int layerNorm(const std::string &label, int x, int gamma, int beta);
  int softmax(const std::string &label, int x);
  /// Gather rows of `table` [V, h] at `ids` [b, s] -> [b, s, h]; the vocab
  /// factor is a reduction (vocab-parallel embedding, Shoeybi et al. 2019).
  int gather(const std::string &label, int table, int ids);
  /// Splits the last dimension into `parts` equal pieces.
  std::vector<int> split(const std::string &label, int x, int parts);
  /// [..., a*b] -> [..., a, b].
  int splitLastDim(const std::string &label, int x, int64_t major);
  /// [..., a, b] -> [..., a*b].
  int mergeLastDims(const std::string &label, int x);
  int transpose(const std::string &label, int x, std::vector<int> perm);
  /// Mixture-of-experts dispatch: tokens x [b, s, h] routed by gates
  /// [b, s, E] into per-expert slots [E, C, h] (GShard, Lepikhin et al.
  /// 2021); the slots scale with the batch.
  int moeDispatch(const std::string &label, int x, int gates,
                  int64_t capacity);
  /// The inverse: expert outputs [E, C, h] weighted by gates back to
  /// [b, s, h]; the expert and slot factors are summed over.
  int moeCombine(const std::string &label, int y, int gates);

  void setOutput(int value) { graph_.output = value; }
  const ModelGraph &graph() const { return graph_; }
  ModelGraph take() { return std::move(graph_); }

private:
  int addValue(const std::string &name, std::vector<int64_t> shape,
               int batchDim, int producer);
  /// Appends the op; returns its first result.
  int addOp(OpInfo op);
  /// Factor of each dim of `value` for an elementwise-style rule, creating
  /// factors as needed.
  const ValueInfo &value(int v) const { return graph_.values[v]; }

  ModelGraph graph_;
  int currentLayer_ = -1;
};

/// GPT model dimensions. Sources: GPT-3 (Brown et al. 2020, Table 2.1),
/// Megatron-LM (Narayanan et al. 2021, Table 1).
struct GptDims {
  std::string name = "gpt";
  int layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t sequence = 32;
  int64_t vocab = 128;
  /// Every layer its own block class when true (an unfolded import).
  bool distinctClasses = false;
  /// Mixture of experts: every `moeEvery`-th layer's MLP is `experts`
  /// experts with top-1 routing and this capacity factor (Switch
  /// Transformer, Fedus et al. 2022); 0 for a dense model.
  int experts = 0;
  int moeEvery = 2;
  double capacityFactor = 1.0;
  /// The LM head reads the token embedding, transposed (GPT-2 and GPT-3
  /// tie them), instead of a weight of its own.
  bool tiedEmbeddings = false;
};

/// A GPT-2 style decoder: token + position embeddings, `layers` pre-LN
/// blocks (fused QKV, causal attention, tanh-GELU MLP), final LayerNorm and
/// an LM head [h, vocab] (or the token embedding's transpose). Output: the
/// logits.
ModelGraph buildGpt(const GptDims &dims);

/// A stack of residual MLP blocks, x + W2 gelu(W1 x), over per-sample
/// values [1, positions..., features] after a linear stem from 16 input
/// features: a model without attention.
struct MlpStackDims {
  std::vector<int64_t> positions = {64};
  int64_t features = 256;
  int layers = 4;
  /// Whether the blocks are marked as layers of one class (what the fold
  /// finds); without, the model has no repeated layer.
  bool repeated = true;
};
ModelGraph buildMlpStack(const MlpStackDims &dims);

/// Megatron-LM Table 1 rows (Narayanan et al. 2021): seq 2048, vocab 51200.
GptDims megatron1_7B();
GptDims megatron18B();
GptDims megatron39B();
/// GPT-3 175B (Brown et al. 2020): 96 layers, hidden 12288, 96 heads.
GptDims gpt3_175B();
/// GPT-3 6.7B (Brown et al. 2020, Table 2.1): 32 layers, hidden 4096, 32
/// heads (vocab 51200 as Megatron-LM pads it).
GptDims gpt3_6_7B();

/// Megatron's FLOP count per iteration of `batch` samples, recomputation
/// included (Narayanan et al. 2021, section 5.1):
/// 96 B s l h^2 (1 + s/6h + V/16lh). The tests divide it by a predicted step
/// time to compare with the paper's TFLOP/s independently of the planner's
/// own FLOP count.
double megatronFlops(const GptDims &dims, int64_t batch);

} // namespace bm::plan::test

#endif // BM_PLAN_TEST_GRAPHBUILDER_H
