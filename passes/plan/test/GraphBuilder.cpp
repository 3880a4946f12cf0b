//===- GraphBuilder.cpp - hand-built ModelGraphs for tests ----------------===//

#include "passes/plan/test/GraphBuilder.h"

#include "passes/plan/GraphAnalysis.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cmath>
#include <numeric>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::test;

static int64_t product(const std::vector<int64_t> &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

GraphBuilder::GraphBuilder(std::string name) { graph_.name = std::move(name); }

int GraphBuilder::addValue(const std::string &name, std::vector<int64_t> shape,
                           int batchDim, int producer) {
  ValueInfo v;
  v.name = name;
  v.shape = std::move(shape);
  v.batchDim = batchDim;
  v.producer = producer;
  graph_.values.push_back(std::move(v));
  return static_cast<int>(graph_.values.size()) - 1;
}

int GraphBuilder::input(const std::string &name, std::vector<int64_t> shape,
                        bool isFloat, int batchDim) {
  int v = addValue(name, std::move(shape), batchDim, -1);
  graph_.values[v].kind = ValueKind::Input;
  graph_.values[v].isFloat = isFloat;
  graph_.values[v].elementBytes = isFloat ? 4 : 8;
  return v;
}

int GraphBuilder::parameter(const std::string &name,
                            std::vector<int64_t> shape) {
  int v = addValue(name, std::move(shape), -1, -1);
  graph_.values[v].kind = ValueKind::Parameter;
  return v;
}

void GraphBuilder::beginLayer(int blockClass) {
  currentLayer_ = graph_.numLayers();
  graph_.layerClass.push_back(blockClass);
}

void GraphBuilder::endLayer() { currentLayer_ = -1; }

int GraphBuilder::addOp(OpInfo op) {
  op.layer = currentLayer_;
  int index = static_cast<int>(graph_.ops.size());
  for (int r : op.results)
    graph_.values[r].producer = index;
  int firstResult = op.results.empty() ? -1 : op.results[0];
  graph_.ops.push_back(std::move(op));
  return firstResult;
}

/// What the backward of the bm op `name` reads, as its gradient rule does
/// (graphs built here have no GradientReads, which ExtractModelGraph takes
/// from the rules themselves). Alphabetical; ops not listed read their
/// operands (the safe default).
static BackwardReads backwardReadsOf(llvm::StringRef name) {
  static const std::pair<const char *, BackwardReads> kTable[] = {
      {"bm.add", BackwardReads::Nothing},
      {"bm.and", BackwardReads::Nothing},
      {"bm.avg_pool", BackwardReads::Nothing},
      {"bm.cast", BackwardReads::Nothing},
      {"bm.concat", BackwardReads::Nothing},
      {"bm.constant", BackwardReads::Nothing},
      {"bm.conv", BackwardReads::OtherOperands},
      {"bm.cumsum", BackwardReads::Nothing},
      {"bm.div", BackwardReads::Divide},
      {"bm.einsum", BackwardReads::OtherOperands},
      {"bm.equal", BackwardReads::Nothing},
      {"bm.exp", BackwardReads::Output},
      {"bm.expand", BackwardReads::Nothing},
      {"bm.flatten", BackwardReads::Nothing},
      {"bm.gemm", BackwardReads::OtherOperands},
      {"bm.global_avg_pool", BackwardReads::Nothing},
      {"bm.greater", BackwardReads::Nothing},
      {"bm.iota", BackwardReads::Nothing},
      {"bm.less", BackwardReads::Nothing},
      {"bm.log_softmax", BackwardReads::Output},
      {"bm.matmul", BackwardReads::OtherOperands},
      {"bm.mul", BackwardReads::OtherOperands},
      {"bm.neg", BackwardReads::Nothing},
      {"bm.not", BackwardReads::Nothing},
      {"bm.one_hot", BackwardReads::Nothing},
      {"bm.or", BackwardReads::Nothing},
      {"bm.reduce_mean", BackwardReads::Nothing},
      {"bm.reduce_sum", BackwardReads::Nothing},
      {"bm.reshape", BackwardReads::Nothing},
      {"bm.slice", BackwardReads::Nothing},
      {"bm.softmax", BackwardReads::Output},
      {"bm.split", BackwardReads::Nothing},
      {"bm.squeeze", BackwardReads::Nothing},
      {"bm.sub", BackwardReads::Nothing},
      {"bm.transpose", BackwardReads::Nothing},
      {"bm.trilu", BackwardReads::Nothing},
      {"bm.unsqueeze", BackwardReads::Nothing},
      {"bm.where", BackwardReads::Condition},
  };
  for (const auto &[op, reads] : kTable)
    if (name == op)
      return reads;
  return BackwardReads::Operands;
}

/// Views as the Bm_View trait marks them.
static bool isViewName(llvm::StringRef name) {
  return llvm::is_contained({"bm.flatten", "bm.reshape", "bm.split",
                             "bm.squeeze", "bm.transpose", "bm.unsqueeze"},
                            name);
}

/// An op `opName` labelled `label` that reads `operands`, rule still empty.
static OpInfo newOp(std::string opName, std::string label,
                    std::vector<int> operands) {
  OpInfo op;
  op.isView = isViewName(opName);
  op.isSoftmax = opName == "bm.softmax";
  op.isTopK = opName == "bm.top_k";
  op.backwardReads = backwardReadsOf(opName);
  op.opName = std::move(opName);
  op.label = std::move(label);
  op.operands = std::move(operands);
  return op;
}

/// One parallel factor for each of the first `count` dimensions of `v`;
/// the one of its batch dimension becomes the op's batch factor.
static TensorFactors leadingFactors(OpInfo &op, const ValueInfo &v,
                                    size_t count) {
  TensorFactors factors;
  for (size_t d = 0; d < count; ++d) {
    int f = op.rule.addFactor(v.shape[d], FactorKind::Parallel);
    factors.push_back({f});
    if (static_cast<int>(d) == v.batchDim)
      op.batchFactor = f;
  }
  return factors;
}

int GraphBuilder::matmul(const std::string &label, int a, int b) {
  std::vector<int64_t> aShape = value(a).shape, bShape = value(b).shape;
  size_t rank = aShape.size();
  bool batched = bShape.size() == rank;
  OpInfo op = newOp("bm.matmul", label, {a, b});
  op.isContraction = true;
  ShardingRule &rule = op.rule;
  TensorFactors aF = leadingFactors(op, value(a), rank - 2);
  TensorFactors rF = aF, bF = batched ? aF : TensorFactors();
  int m = rule.addFactor(aShape[rank - 2], FactorKind::Parallel);
  if (value(a).batchDim == static_cast<int>(rank) - 2)
    op.batchFactor = m; // e.g. expert slots, which scale with the batch
  int k = rule.addFactor(aShape[rank - 1], FactorKind::Reduction);
  int n = rule.addFactor(bShape.back(), FactorKind::Parallel);
  aF.push_back({m});
  aF.push_back({k});
  bF.push_back({k});
  bF.push_back({n});
  rF.push_back({m});
  rF.push_back({n});
  rule.operandFactors = {aF, bF};
  rule.resultFactors = {rF};
  std::vector<int64_t> shape(aShape.begin(), aShape.end() - 1);
  shape.push_back(bShape.back());
  op.flops = 2.0 * product(shape) * aShape.back();
  op.results = {addValue(label, shape, dimOfFactor(rF, op.batchFactor), -1)};
  return addOp(std::move(op));
}

int GraphBuilder::binary(const std::string &opName, const std::string &label,
                         int a, int b) {
  const ValueInfo &va = value(a), &vb = value(b);
  size_t rank = std::max(va.shape.size(), vb.shape.size());
  int batchDim = va.batchDim >= 0
                     ? va.batchDim + static_cast<int>(rank - va.shape.size())
                 : vb.batchDim >= 0
                     ? vb.batchDim + static_cast<int>(rank - vb.shape.size())
                     : -1;
  OpInfo op = newOp(opName, label, {a, b});
  std::vector<int64_t> shape(rank, 1);
  std::vector<int> factors(rank);
  for (size_t d = 0; d < rank; ++d) {
    for (const ValueInfo *v : {&va, &vb}) {
      size_t offset = rank - v->shape.size();
      if (d >= offset)
        shape[d] = std::max(shape[d], v->shape[d - offset]);
    }
    factors[d] = op.rule.addFactor(shape[d], FactorKind::Parallel);
    if (static_cast<int>(d) == batchDim)
      op.batchFactor = factors[d];
  }
  for (const ValueInfo *v : {&va, &vb}) {
    TensorFactors tf;
    size_t offset = rank - v->shape.size();
    for (size_t d = 0; d < v->shape.size(); ++d) {
      int dim = static_cast<int>(d + offset);
      bool broadcast = v->shape[d] != shape[dim] ||
                       (dim == batchDim && v->batchDim != static_cast<int>(d));
      tf.push_back(broadcast ? DimFactors{} : DimFactors{factors[dim]});
    }
    op.rule.operandFactors.push_back(tf);
  }
  TensorFactors rF;
  for (int f : factors)
    rF.push_back({f});
  op.rule.resultFactors = {rF};
  op.flops = static_cast<double>(product(shape));
  op.results = {addValue(label, shape, batchDim, -1)};
  return addOp(std::move(op));
}

int GraphBuilder::unary(const std::string &opName, const std::string &label,
                        int x) {
  const ValueInfo &vx = value(x);
  OpInfo op = newOp(opName, label, {x});
  TensorFactors tf = leadingFactors(op, vx, vx.shape.size());
  op.rule.operandFactors = {tf};
  op.rule.resultFactors = {tf};
  op.flops = static_cast<double>(vx.numElements());
  op.results = {addValue(label, vx.shape, vx.batchDim, -1)};
  return addOp(std::move(op));
}

/// Rule shared by LayerNormalization and Softmax: every dimension parallel
/// but the last, which the op normalises over and so must see whole.
static OpInfo normalisation(const char *opName, const std::string &label,
                            const ValueInfo &vx, int x) {
  OpInfo op = newOp(opName, label, {x});
  TensorFactors tf = leadingFactors(op, vx, vx.shape.size() - 1);
  tf.push_back(
      {op.rule.addFactor(vx.shape.back(), FactorKind::NeedReplication)});
  op.rule.operandFactors = {tf};
  op.rule.resultFactors = {tf};
  return op;
}

int GraphBuilder::layerNorm(const std::string &label, int x, int gamma,
                            int beta) {
  const ValueInfo &vx = value(x);
  OpInfo op = normalisation("bm.layer_norm", label, vx, x);
  op.memoryClass = cost::MemoryKernelClass::Normalization;
  int last = op.rule.numFactors() - 1;
  op.operands = {x, gamma, beta};
  op.rule.operandFactors.push_back({{last}});
  op.rule.operandFactors.push_back({{last}});
  // Mean, variance, normalise, scale, shift: ~8 FLOPs per element.
  op.flops = 8.0 * vx.numElements();
  op.results = {addValue(label, vx.shape, vx.batchDim, -1)};
  return addOp(std::move(op));
}

int GraphBuilder::softmax(const std::string &label, int x) {
  const ValueInfo &vx = value(x);
  OpInfo op = normalisation("bm.softmax", label, vx, x);
  op.memoryClass = cost::MemoryKernelClass::Softmax;
  // Max, subtract, exp, sum, divide.
  op.flops = 5.0 * vx.numElements();
  op.results = {addValue(label, vx.shape, vx.batchDim, -1)};
  return addOp(std::move(op));
}

int GraphBuilder::gather(const std::string &label, int table, int ids) {
  const ValueInfo &vt = value(table), &vi = value(ids);
  OpInfo op = newOp("bm.gather", label, {table, ids});
  op.memoryClass = cost::MemoryKernelClass::DataMovement;
  int b = op.rule.addFactor(vi.shape[0], FactorKind::Parallel);
  int s = op.rule.addFactor(vi.shape[1], FactorKind::Parallel);
  // Each device looks up the rows of its vocab slice and zeros elsewhere:
  // the result is a partial sum over the vocab (Megatron's vocab-parallel
  // embedding), hence a reduction factor.
  int v = op.rule.addFactor(vt.shape[0], FactorKind::Reduction);
  int h = op.rule.addFactor(vt.shape[1], FactorKind::Parallel);
  op.rule.operandFactors = {{{v}, {h}}, {{b}, {s}}};
  op.rule.resultFactors = {{{b}, {s}, {h}}};
  op.batchFactor = vi.batchDim == 0 ? b : -1;
  op.results = {addValue(label, {vi.shape[0], vi.shape[1], vt.shape[1]},
                         vi.batchDim == 0 ? 0 : -1, -1)};
  return addOp(std::move(op));
}

std::vector<int> GraphBuilder::split(const std::string &label, int x,
                                     int parts) {
  const ValueInfo &vx = value(x);
  OpInfo op = newOp("bm.split", label, {x});
  op.memoryClass = cost::MemoryKernelClass::DataMovement;
  TensorFactors leading = leadingFactors(op, vx, vx.shape.size() - 1);
  // The piece index cannot be sharded: each result is one whole piece.
  int piece = op.rule.addFactor(parts, FactorKind::NeedReplication);
  int inner = op.rule.addFactor(vx.shape.back() / parts, FactorKind::Parallel);
  TensorFactors operand = leading;
  operand.push_back({piece, inner});
  op.rule.operandFactors = {operand};
  TensorFactors result = leading;
  result.push_back({inner});
  std::vector<int64_t> shape = vx.shape;
  shape.back() /= parts;
  int batchDim = vx.batchDim;
  for (int p = 0; p < parts; ++p) {
    op.rule.resultFactors.push_back(result);
    op.results.push_back(
        addValue(label + "_" + std::to_string(p), shape, batchDim, -1));
  }
  std::vector<int> results = op.results;
  addOp(std::move(op));
  return results;
}

int GraphBuilder::splitLastDim(const std::string &label, int x,
                               int64_t major) {
  const ValueInfo &vx = value(x);
  OpInfo op = newOp("bm.reshape", label, {x});
  TensorFactors leading = leadingFactors(op, vx, vx.shape.size() - 1);
  int a = op.rule.addFactor(major, FactorKind::Parallel);
  int b = op.rule.addFactor(vx.shape.back() / major, FactorKind::Parallel);
  TensorFactors operand = leading, result = leading;
  operand.push_back({a, b});
  result.push_back({a});
  result.push_back({b});
  op.rule.operandFactors = {operand};
  op.rule.resultFactors = {result};
  std::vector<int64_t> shape(vx.shape.begin(), vx.shape.end() - 1);
  shape.push_back(major);
  shape.push_back(vx.shape.back() / major);
  op.results = {addValue(label, shape, vx.batchDim, -1)};
  return addOp(std::move(op));
}

int GraphBuilder::mergeLastDims(const std::string &label, int x) {
  const ValueInfo &vx = value(x);
  OpInfo op = newOp("bm.reshape", label, {x});
  size_t rank = vx.shape.size();
  TensorFactors leading = leadingFactors(op, vx, rank - 2);
  int a = op.rule.addFactor(vx.shape[rank - 2], FactorKind::Parallel);
  int b = op.rule.addFactor(vx.shape[rank - 1], FactorKind::Parallel);
  TensorFactors operand = leading, result = leading;
  operand.push_back({a});
  operand.push_back({b});
  result.push_back({a, b});
  op.rule.operandFactors = {operand};
  op.rule.resultFactors = {result};
  std::vector<int64_t> shape(vx.shape.begin(), vx.shape.end() - 2);
  shape.push_back(vx.shape[rank - 2] * vx.shape[rank - 1]);
  op.results = {addValue(label, shape, vx.batchDim, -1)};
  return addOp(std::move(op));
}

int GraphBuilder::transpose(const std::string &label, int x,
                            std::vector<int> perm) {
  const ValueInfo &vx = value(x);
  OpInfo op = newOp("bm.transpose", label, {x});
  op.memoryClass = cost::MemoryKernelClass::DataMovement;
  TensorFactors operand = leadingFactors(op, vx, vx.shape.size());
  TensorFactors result;
  std::vector<int64_t> shape;
  int batchDim = -1;
  for (size_t d = 0; d < perm.size(); ++d) {
    result.push_back(operand[perm[d]]);
    shape.push_back(vx.shape[perm[d]]);
    if (perm[d] == vx.batchDim)
      batchDim = static_cast<int>(d);
  }
  op.rule.operandFactors = {operand};
  op.rule.resultFactors = {result};
  op.results = {addValue(label, shape, batchDim, -1)};
  return addOp(std::move(op));
}

int GraphBuilder::moeDispatch(const std::string &label, int x, int gates,
                              int64_t capacity) {
  const ValueInfo &vx = value(x), &vg = value(gates);
  OpInfo op = newOp("bm.moe_dispatch", label, {x, gates});
  int b = op.rule.addFactor(vx.shape[0], FactorKind::Parallel);
  // Each slot sums the one-hot selected tokens: the sequence is reduced.
  int s = op.rule.addFactor(vx.shape[1], FactorKind::Reduction);
  int h = op.rule.addFactor(vx.shape[2], FactorKind::Parallel);
  int e = op.rule.addFactor(vg.shape[2], FactorKind::Parallel);
  int c = op.rule.addFactor(capacity, FactorKind::Parallel);
  op.rule.operandFactors = {{{b}, {s}, {h}}, {{b}, {s}, {e}}};
  op.rule.resultFactors = {{{e}, {c}, {h}}};
  op.batchFactor = c;
  op.results = {addValue(label, {vg.shape[2], capacity, vx.shape[2]},
                         /*batchDim=*/1, -1)};
  return addOp(std::move(op));
}

int GraphBuilder::moeCombine(const std::string &label, int y, int gates) {
  const ValueInfo &vy = value(y), &vg = value(gates);
  OpInfo op = newOp("bm.moe_combine", label, {y, gates});
  int e = op.rule.addFactor(vy.shape[0], FactorKind::Reduction);
  int c = op.rule.addFactor(vy.shape[1], FactorKind::Reduction);
  int h = op.rule.addFactor(vy.shape[2], FactorKind::Parallel);
  int b = op.rule.addFactor(vg.shape[0], FactorKind::Parallel);
  int s = op.rule.addFactor(vg.shape[1], FactorKind::Parallel);
  op.rule.operandFactors = {{{e}, {c}, {h}}, {{b}, {s}, {e}}};
  op.rule.resultFactors = {{{b}, {s}, {h}}};
  op.batchFactor = b;
  op.results = {addValue(label, {vg.shape[0], vg.shape[1], vy.shape[2]},
                         /*batchDim=*/0, -1)};
  return addOp(std::move(op));
}

//===----------------------------------------------------------------------===//
// GPT
//===----------------------------------------------------------------------===//

static int gptBlock(GraphBuilder &g, const GptDims &dims, int layer, int x,
                    int mask, bool moe) {
  const int64_t h = dims.hidden, a = dims.heads;
  std::string p = "layer" + std::to_string(layer) + ".";
  auto param = [&](const std::string &name, std::vector<int64_t> shape) {
    return g.parameter(p + name, std::move(shape));
  };
  auto scalar = [&](const std::string &name) {
    return g.input(p + name, {}, true, -1);
  };
  int ln1 = g.layerNorm(p + "ln_1", x, param("ln_1.weight", {h}),
                        param("ln_1.bias", {h}));
  int qkv = g.matmul(p + "attn.c_attn", ln1, param("attn.c_attn.weight",
                                                   {h, 3 * h}));
  qkv = g.binary("bm.add", p + "attn.c_attn.bias_add", qkv,
                 param("attn.c_attn.bias", {3 * h}));
  std::vector<int> parts = g.split(p + "attn.split_qkv", qkv, 3);
  auto heads = [&](const std::string &name, int v, std::vector<int> perm) {
    int r = g.splitLastDim(p + "attn." + name + "_heads", v, a);
    return g.transpose(p + "attn." + name + "_transpose", r, perm);
  };
  int q = heads("q", parts[0], {0, 2, 1, 3});
  int k = heads("k", parts[1], {0, 2, 3, 1});
  int v = heads("v", parts[2], {0, 2, 1, 3});
  int scores = g.matmul(p + "attn.scores", q, k);
  scores = g.binary("bm.mul", p + "attn.scale", scores, scalar("attn.scale"));
  scores = g.binary("bm.add", p + "attn.mask", scores, mask);
  int probs = g.softmax(p + "attn.softmax", scores);
  int context = g.matmul(p + "attn.context", probs, v);
  context = g.transpose(p + "attn.context_transpose", context, {0, 2, 1, 3});
  context = g.mergeLastDims(p + "attn.merge_heads", context);
  int attn = g.matmul(p + "attn.c_proj", context,
                      param("attn.c_proj.weight", {h, h}));
  attn = g.binary("bm.add", p + "attn.c_proj.bias_add", attn,
                  param("attn.c_proj.bias", {h}));
  x = g.binary("bm.add", p + "residual_1", x, attn);
  int ln2 = g.layerNorm(p + "ln_2", x, param("ln_2.weight", {h}),
                        param("ln_2.bias", {h}));
  if (moe) {
    // Switch MLP: router, top-1 dispatch, expert FFNs [E, h, 4h] and
    // [E, 4h, h], combine (Fedus et al. 2022, section 2.1).
    const int64_t experts = dims.experts;
    const int64_t capacity = static_cast<int64_t>(std::ceil(
        dims.capacityFactor * static_cast<double>(dims.sequence) / experts));
    int logits = g.matmul(p + "moe.router", ln2,
                          param("moe.router.weight", {h, experts}));
    int gates = g.softmax(p + "moe.gates", logits);
    int slots = g.moeDispatch(p + "moe.dispatch", ln2, gates, capacity);
    int up = g.matmul(p + "moe.experts.fc", slots,
                      param("moe.experts.fc.weight", {experts, h, 4 * h}));
    up = g.unary("bm.gelu", p + "moe.experts.gelu", up);
    int down = g.matmul(p + "moe.experts.proj", up,
                        param("moe.experts.proj.weight", {experts, 4 * h, h}));
    int combined = g.moeCombine(p + "moe.combine", down, gates);
    return g.binary("bm.add", p + "residual_2", x, combined);
  }
  int fc = g.matmul(p + "mlp.c_fc", ln2, param("mlp.c_fc.weight", {h, 4 * h}));
  fc = g.binary("bm.add", p + "mlp.c_fc.bias_add", fc,
                param("mlp.c_fc.bias", {4 * h}));
  // GELU, tanh approximation as exported by PyTorch / HF GPT-2:
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  int cube = g.binary("bm.mul", p + "mlp.gelu.square", fc, fc);
  cube = g.binary("bm.mul", p + "mlp.gelu.cube", cube, fc);
  cube = g.binary("bm.mul", p + "mlp.gelu.scale_cube", cube,
                  scalar("mlp.gelu.c0"));
  int inner = g.binary("bm.add", p + "mlp.gelu.add", fc, cube);
  inner = g.binary("bm.mul", p + "mlp.gelu.scale", inner,
                   scalar("mlp.gelu.c1"));
  inner = g.unary("bm.tanh", p + "mlp.gelu.tanh", inner);
  inner = g.binary("bm.add", p + "mlp.gelu.one_plus", inner,
                   scalar("mlp.gelu.one"));
  int gelu = g.binary("bm.mul", p + "mlp.gelu.times_x", inner, fc);
  gelu = g.binary("bm.mul", p + "mlp.gelu.half", gelu, scalar("mlp.gelu.half"));
  int proj = g.matmul(p + "mlp.c_proj", gelu,
                      param("mlp.c_proj.weight", {4 * h, h}));
  proj = g.binary("bm.add", p + "mlp.c_proj.bias_add", proj,
                  param("mlp.c_proj.bias", {h}));
  return g.binary("bm.add", p + "residual_2", x, proj);
}

ModelGraph bm::plan::test::buildGpt(const GptDims &dims) {
  GraphBuilder g(dims.name);
  const int64_t s = dims.sequence, h = dims.hidden, vocab = dims.vocab;
  int ids = g.input("input_ids", {1, s}, false, 0);
  int positions = g.input("position_ids", {1, s}, false, -1);
  int mask = g.input("causal_mask", {1, 1, s, s}, true, -1);
  int wte = g.parameter("wte.weight", {vocab, h});
  int tokens = g.gather("wte", wte, ids);
  int pos = g.gather("wpe", g.parameter("wpe.weight", {s, h}), positions);
  int x = g.binary("bm.add", "embed_add", tokens, pos);
  for (int layer = 0; layer < dims.layers; ++layer) {
    bool moe = dims.experts > 0 && layer % dims.moeEvery == dims.moeEvery - 1;
    g.beginLayer(dims.distinctClasses ? layer : moe ? 1 : 0);
    x = gptBlock(g, dims, layer, x, mask, moe);
    g.endLayer();
  }
  x = g.layerNorm("ln_f", x, g.parameter("ln_f.weight", {h}),
                  g.parameter("ln_f.bias", {h}));
  int head = dims.tiedEmbeddings
                 ? g.transpose("lm_head.transpose", wte, {1, 0})
                 : g.parameter("lm_head.weight", {h, vocab});
  int logits = g.matmul("lm_head", x, head);
  g.setOutput(logits);
  return g.take();
}

ModelGraph bm::plan::test::buildMlpStack(const MlpStackDims &dims) {
  GraphBuilder g("mlp");
  const int64_t h = dims.features;
  std::vector<int64_t> shape = {1};
  shape.insert(shape.end(), dims.positions.begin(), dims.positions.end());
  shape.push_back(16);
  int pixels = g.input("x", shape, true, 0);
  // The stem's weight gives the values between blocks a gradient.
  int x = g.matmul("stem", pixels, g.parameter("stem.weight", {16, h}));
  for (int layer = 0; layer < dims.layers; ++layer) {
    std::string p = "layer" + std::to_string(layer) + ".";
    if (dims.repeated)
      g.beginLayer(0);
    int up = g.matmul(p + "up", x, g.parameter(p + "up.weight", {h, 4 * h}));
    int act = g.unary("bm.gelu", p + "gelu", up);
    int down =
        g.matmul(p + "down", act, g.parameter(p + "down.weight", {4 * h, h}));
    x = g.binary("bm.add", p + "residual", x, down);
    if (dims.repeated)
      g.endLayer();
  }
  g.setOutput(x);
  return g.take();
}

GptDims bm::plan::test::megatron1_7B() {
  return {"megatron-1.7b", 24, 2304, 24, 2048, 51200, false};
}
GptDims bm::plan::test::megatron18B() {
  return {"megatron-18b", 40, 6144, 48, 2048, 51200, false};
}
GptDims bm::plan::test::megatron39B() {
  return {"megatron-39b", 48, 8192, 64, 2048, 51200, false};
}
GptDims bm::plan::test::gpt3_175B() {
  return {"gpt3-175b", 96, 12288, 96, 2048, 51200, false};
}
GptDims bm::plan::test::gpt3_6_7B() {
  return {"gpt3-6.7b", 32, 4096, 32, 2048, 51200, false};
}

double bm::plan::test::megatronFlops(const GptDims &d, int64_t batch) {
  double s = d.sequence, l = d.layers, h = d.hidden, v = d.vocab;
  return 96.0 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
}
