//===- KernelTable.cpp - step-program ops -> CPU kernels ------------------===//
//
// One launcher per op a step program may name (bmrt/OpSpec.h: the bm
// dialect's mnemonics, forward and backward), in one alphabetical table. A
// launcher reads the instruction's attributes (named as in the dialect) and
// calls the kernel of runtime/cpu/Kernels.h on the executor's views; the
// collectives are every backend's (runtime/program/CollectiveKernels.h).
//
//===----------------------------------------------------------------------===//

#include "CpuBackend.h"
#include "Kernels.h"
#include "runtime/program/CollectiveKernels.h"

#include "bmrt/Error.h"
#include "bmrt/Executor.h"

#include <algorithm>
#include <cstring>

namespace bmrt::cpu {
namespace {

using E = Executor;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <UnaryOp Op> void launchUnary(E &e, const Instr &i) {
  unary(e.stream(), Op, e.operand(i, 0), e.result(i, 0));
}

void launchGelu(E &e, const Instr &i) {
  UnaryOp op = i.getInt("tanh_approximation", 0) ? UnaryOp::GeluTanh
                                                 : UnaryOp::Gelu;
  unary(e.stream(), op, e.operand(i, 0), e.result(i, 0));
}

template <BinaryOp Op> void launchBinary(E &e, const Instr &i) {
  binary(e.stream(), Op, e.operand(i, 0), e.operand(i, 1), e.result(i, 0));
}

/// The forward op's mnemonic -> its UnaryOp, for unary_grad.
UnaryOp unaryOpNamed(const Instr &i) {
  static const std::pair<const char *, UnaryOp> kOps[] = {
      {"abs", UnaryOp::Abs},   {"cos", UnaryOp::Cos},
      {"erf", UnaryOp::Erf},   {"exp", UnaryOp::Exp},
      {"gelu", UnaryOp::Gelu}, {"log", UnaryOp::Log},
      {"neg", UnaryOp::Neg},   {"reciprocal", UnaryOp::Reciprocal},
      {"relu", UnaryOp::Relu}, {"sigmoid", UnaryOp::Sigmoid},
      {"sin", UnaryOp::Sin},   {"sqrt", UnaryOp::Sqrt},
      {"tanh", UnaryOp::Tanh},
  };
  const std::string &name = i.getString("op");
  for (auto [n, op] : kOps)
    if (name == n) {
      if (op == UnaryOp::Gelu && i.getInt("tanh_approximation", 0))
        return UnaryOp::GeluTanh;
      return op;
    }
  BMRT_FAIL("unary_grad of unknown op '" + name + "'");
}

void launchUnaryGrad(E &e, const Instr &i) {
  unaryGrad(e.stream(), unaryOpNamed(i), e.operand(i, 0), e.operand(i, 1),
            e.result(i, 0));
}

void launchWhere(E &e, const Instr &i) {
  where(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
        e.result(i, 0));
}

void launchCast(E &e, const Instr &i) {
  cast(e.stream(), e.operand(i, 0), e.result(i, 0));
}

/// reshape, squeeze, unsqueeze, flatten: the same bytes under another shape.
void launchCopy(E &e, const Instr &i) {
  copy(e.stream(), e.operand(i, 0), e.result(i, 0));
}

void launchFill(E &e, const Instr &i) {
  fill(e.stream(), e.result(i, 0), i.getFloat("value"));
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

void launchMatmul(E &e, const Instr &i) {
  matmul(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
         i.getInt("trans_a", 0), i.getInt("trans_b", 0));
}

void launchGemm(E &e, const Instr &i) {
  gemm(e.stream(), e.operand(i, 0), e.operand(i, 1), e.optionalOperand(i, 2),
       e.result(i, 0), static_cast<float>(i.getFloat("alpha")),
       static_cast<float>(i.getFloat("beta")), i.getInt("trans_a", 0),
       i.getInt("trans_b", 0));
}

void launchEinsum(E &e, const Instr &i) {
  std::vector<TensorView> inputs;
  for (size_t k = 0; k < i.operands.size(); ++k)
    inputs.push_back(e.operand(i, k));
  einsum(e.stream(), i.getString("equation"), inputs, e.result(i, 0));
}

void launchConv(E &e, const Instr &i) {
  conv(e.stream(), e.operand(i, 0), e.operand(i, 1), e.optionalOperand(i, 2),
       e.result(i, 0), i.getInts("strides"), i.getInts("pads"),
       i.getInts("dilations"), i.getInt("group", 1));
}

void launchConvGradInput(E &e, const Instr &i) {
  convGradInput(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
                i.getInts("strides"), i.getInts("pads"),
                i.getInts("dilations"), i.getInt("group", 1));
}

void launchConvGradWeight(E &e, const Instr &i) {
  convGradWeight(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
                 i.getInts("strides"), i.getInts("pads"),
                 i.getInts("dilations"), i.getInt("group", 1));
}

//===----------------------------------------------------------------------===//
// Fused attention
//===----------------------------------------------------------------------===//

float scaleOf(const Instr &i) {
  return static_cast<float>(i.getFloat("scale"));
}

void launchAttention(E &e, const Instr &i) {
  attention(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
            e.result(i, 0), scaleOf(i), i.getInt("causal", 0),
            e.optionalOperand(i, 3));
}

/// Operands q, kt, v, result, result_grad[, positions]; results dq, dkt,
/// dv.
void launchAttentionGrad(E &e, const Instr &i) {
  attentionGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
                e.operand(i, 3), e.operand(i, 4), e.result(i, 0),
                e.result(i, 1), e.result(i, 2), scaleOf(i),
                i.getInt("causal", 0), e.optionalOperand(i, 5));
}

//===----------------------------------------------------------------------===//
// Softmax, normalisation, loss
//===----------------------------------------------------------------------===//

void launchSoftmax(E &e, const Instr &i) {
  softmax(e.stream(), e.operand(i, 0), e.result(i, 0), i.getInt("axis"));
}

void launchLogSoftmax(E &e, const Instr &i) {
  logSoftmax(e.stream(), e.operand(i, 0), e.result(i, 0), i.getInt("axis"));
}

void launchSoftmaxGrad(E &e, const Instr &i) {
  softmaxGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
              i.getInt("axis"));
}

void launchLogSoftmaxGrad(E &e, const Instr &i) {
  logSoftmaxGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
                 i.getInt("axis"));
}

float epsilonOf(const Instr &i) {
  return static_cast<float>(i.getFloat("epsilon"));
}

void launchLayerNorm(E &e, const Instr &i) {
  layerNorm(e.stream(), e.operand(i, 0), e.operand(i, 1),
            e.optionalOperand(i, 2), e.result(i, 0), i.getInt("axis"),
            epsilonOf(i));
}

/// Operands x, scale, dy; results dx, dscale and (optional) dbias.
void launchLayerNormGrad(E &e, const Instr &i) {
  const TensorView *dbias = i.results.size() > 2 ? &e.result(i, 2) : nullptr;
  layerNormGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
                e.result(i, 0), e.result(i, 1), dbias, i.getInt("axis"),
                epsilonOf(i));
}

void launchRmsNorm(E &e, const Instr &i) {
  rmsNorm(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
          i.getInt("axis"), epsilonOf(i));
}

void launchRmsNormGrad(E &e, const Instr &i) {
  rmsNormGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
              e.result(i, 0), e.result(i, 1), i.getInt("axis"), epsilonOf(i));
}

void launchBatchNorm(E &e, const Instr &i) {
  batchNorm(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
            e.operand(i, 3), e.operand(i, 4), e.result(i, 0), epsilonOf(i));
}

/// Operands x, scale, mean, variance, dy; results dx, dscale, dbias.
void launchBatchNormGrad(E &e, const Instr &i) {
  batchNormGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
                e.operand(i, 3), e.operand(i, 4), e.result(i, 0),
                e.result(i, 1), e.result(i, 2), epsilonOf(i));
}

void launchCrossEntropy(E &e, const Instr &i) {
  crossEntropy(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0));
}

void launchCrossEntropyFromStats(E &e, const Instr &i) {
  crossEntropyFromStats(e.stream(), e.operand(i, 0), e.operand(i, 1),
                        e.result(i, 0));
}

void launchCrossEntropyGrad(E &e, const Instr &i) {
  crossEntropyGrad(e.stream(), e.operand(i, 0), e.operand(i, 1),
                   e.operand(i, 2), e.result(i, 0));
}

void launchCrossEntropyStats(E &e, const Instr &i) {
  ClassSplit split = classSplitOf(e, i);
  crossEntropyStats(e.stream(), e.operand(i, 0), e.operand(i, 1), split.offset,
                    split.classes, e.result(i, 0));
}

void launchCrossEntropyGradFromStats(E &e, const Instr &i) {
  ClassSplit split = classSplitOf(e, i);
  crossEntropyGradFromStats(e.stream(), e.operand(i, 0), e.operand(i, 1),
                            e.operand(i, 2), e.operand(i, 3), split.offset,
                            split.classes, e.result(i, 0));
}

//===----------------------------------------------------------------------===//
// Reductions, scans, selection
//===----------------------------------------------------------------------===//

template <ReduceOp Op> void launchReduce(E &e, const Instr &i) {
  reduce(e.stream(), Op, e.operand(i, 0), e.result(i, 0), i.getInts("axes"));
}

void launchGlobalAvgPool(E &e, const Instr &i) {
  Ints spatial;
  for (int64_t d = 2; d < e.operand(i, 0).rank(); ++d)
    spatial.push_back(d);
  reduce(e.stream(), ReduceOp::Mean, e.operand(i, 0), e.result(i, 0), spatial);
}

void launchCumsum(E &e, const Instr &i) {
  cumsum(e.stream(), e.operand(i, 0), e.result(i, 0), i.getInt("axis"),
         i.getInt("exclusive", 0), i.getInt("reverse", 0));
}

void launchTopK(E &e, const Instr &i) {
  topK(e.stream(), e.operand(i, 0), e.result(i, 0), e.result(i, 1),
       i.getInt("k"), i.getInt("axis"), i.getInt("largest", 1));
}

void launchOneHot(E &e, const Instr &i) {
  oneHot(e.stream(), e.operand(i, 0), e.result(i, 0), i.getInt("depth"),
         i.getInt("axis"), i.getFloat("on_value"), i.getFloat("off_value"));
}

void launchIota(E &e, const Instr &i) {
  iota(e.stream(), e.result(i, 0), i.getFloat("start"), i.getFloat("delta"));
}

void launchTrilu(E &e, const Instr &i) {
  trilu(e.stream(), e.operand(i, 0), e.result(i, 0), i.getInt("k", 0),
        i.getInt("upper", 1));
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

void launchTranspose(E &e, const Instr &i) {
  transpose(e.stream(), e.operand(i, 0), e.result(i, 0),
            i.getInts("permutation"));
}

void launchGather(E &e, const Instr &i) {
  gather(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
         i.getInt("axis"));
}

void launchGatherGrad(E &e, const Instr &i) {
  gatherGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
             i.getInt("axis"));
}

void launchGatherElements(E &e, const Instr &i) {
  gatherElements(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
                 i.getInt("axis"));
}

void launchScatterElements(E &e, const Instr &i) {
  scatterElements(e.stream(), e.operand(i, 0), e.operand(i, 1), e.operand(i, 2),
                  e.result(i, 0), i.getInt("axis"), scatterReductionOf(i));
}

void launchShardGather(E &e, const Instr &i) {
  gather(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
         i.getInt("axis"), tableShardOf(e, i));
}

void launchConcat(E &e, const Instr &i) {
  std::vector<TensorView> inputs;
  for (size_t k = 0; k < i.operands.size(); ++k)
    inputs.push_back(e.operand(i, k));
  concat(e.stream(), inputs, e.result(i, 0), i.getInt("axis"));
}

void launchSplit(E &e, const Instr &i) {
  std::vector<TensorView> outputs;
  for (size_t k = 0; k < i.results.size(); ++k)
    outputs.push_back(e.result(i, k));
  split(e.stream(), e.operand(i, 0), outputs, i.getInt("axis"));
}

void launchSlice(E &e, const Instr &i) {
  slice(e.stream(), e.operand(i, 0), e.result(i, 0), i.getInts("starts"),
        i.getInts("strides"));
}

void launchSliceGrad(E &e, const Instr &i) {
  sliceGrad(e.stream(), e.operand(i, 0), e.result(i, 0), i.getInts("starts"),
            i.getInts("strides"));
}

void launchExpand(E &e, const Instr &i) {
  expand(e.stream(), e.operand(i, 0), e.result(i, 0));
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

void launchMaxPool(E &e, const Instr &i) {
  maxPool(e.stream(), e.operand(i, 0), e.result(i, 0),
          i.getInts("kernel_shape"), i.getInts("strides"), i.getInts("pads"));
}

void launchMaxPoolGrad(E &e, const Instr &i) {
  maxPoolGrad(e.stream(), e.operand(i, 0), e.operand(i, 1), e.result(i, 0),
              i.getInts("kernel_shape"), i.getInts("strides"),
              i.getInts("pads"));
}

void launchAvgPool(E &e, const Instr &i) {
  avgPool(e.stream(), e.operand(i, 0), e.result(i, 0),
          i.getInts("kernel_shape"), i.getInts("strides"), i.getInts("pads"));
}

void launchAvgPoolGrad(E &e, const Instr &i) {
  avgPoolGrad(e.stream(), e.operand(i, 0), e.result(i, 0),
              i.getInts("kernel_shape"), i.getInts("strides"),
              i.getInts("pads"));
}

// Alphabetical.
const KernelTable::Entry kKernels[] = {
    {"abs", launchUnary<UnaryOp::Abs>},
    {"add", launchBinary<BinaryOp::Add>},
    {"all_gather", launchAllGather},
    {"all_reduce", launchAllReduce},
    {"all_to_all", launchAllToAll},
    {"and", launchBinary<BinaryOp::And>},
    {"attention", launchAttention},
    {"attention_grad", launchAttentionGrad},
    {"avg_pool", launchAvgPool},
    {"avg_pool_grad", launchAvgPoolGrad},
    {"batch_norm", launchBatchNorm},
    {"batch_norm_grad", launchBatchNormGrad},
    {"cast", launchCast},
    {"concat", launchConcat},
    {"conv", launchConv},
    {"conv_grad_input", launchConvGradInput},
    {"conv_grad_weight", launchConvGradWeight},
    {"copy", launchCopy},
    {"cos", launchUnary<UnaryOp::Cos>},
    {"cross_entropy", launchCrossEntropy},
    {"cross_entropy_from_stats", launchCrossEntropyFromStats},
    {"cross_entropy_grad", launchCrossEntropyGrad},
    {"cross_entropy_grad_from_stats", launchCrossEntropyGradFromStats},
    {"cross_entropy_stats", launchCrossEntropyStats},
    {"cumsum", launchCumsum},
    {"div", launchBinary<BinaryOp::Div>},
    {"einsum", launchEinsum},
    {"equal", launchBinary<BinaryOp::Equal>},
    {"erf", launchUnary<UnaryOp::Erf>},
    {"exp", launchUnary<UnaryOp::Exp>},
    {"expand", launchExpand},
    {"fill", launchFill},
    {"flatten", launchCopy},
    {"gather", launchGather},
    {"gather_elements", launchGatherElements},
    {"gather_grad", launchGatherGrad},
    {"gelu", launchGelu},
    {"gemm", launchGemm},
    {"global_avg_pool", launchGlobalAvgPool},
    {"greater", launchBinary<BinaryOp::Greater>},
    {"iota", launchIota},
    {"layer_norm", launchLayerNorm},
    {"layer_norm_grad", launchLayerNormGrad},
    {"less", launchBinary<BinaryOp::Less>},
    {"log", launchUnary<UnaryOp::Log>},
    {"log_softmax", launchLogSoftmax},
    {"log_softmax_grad", launchLogSoftmaxGrad},
    {"matmul", launchMatmul},
    {"max", launchBinary<BinaryOp::Max>},
    {"max_pool", launchMaxPool},
    {"max_pool_grad", launchMaxPoolGrad},
    {"min", launchBinary<BinaryOp::Min>},
    {"mul", launchBinary<BinaryOp::Mul>},
    {"neg", launchUnary<UnaryOp::Neg>},
    {"not", launchUnary<UnaryOp::Not>},
    {"one_hot", launchOneHot},
    {"or", launchBinary<BinaryOp::Or>},
    {"pow", launchBinary<BinaryOp::Pow>},
    {"reciprocal", launchUnary<UnaryOp::Reciprocal>},
    {"reduce_max", launchReduce<ReduceOp::Max>},
    {"reduce_mean", launchReduce<ReduceOp::Mean>},
    {"reduce_scatter", launchReduceScatter},
    {"reduce_sum", launchReduce<ReduceOp::Sum>},
    {"relu", launchUnary<UnaryOp::Relu>},
    {"reshape", launchCopy},
    {"rms_norm", launchRmsNorm},
    {"rms_norm_grad", launchRmsNormGrad},
    {"scatter_elements", launchScatterElements},
    {"shard_gather", launchShardGather},
    {"shard_slice", launchShardSlice},
    {"sigmoid", launchUnary<UnaryOp::Sigmoid>},
    {"sin", launchUnary<UnaryOp::Sin>},
    {"slice", launchSlice},
    {"slice_grad", launchSliceGrad},
    {"softmax", launchSoftmax},
    {"softmax_grad", launchSoftmaxGrad},
    {"split", launchSplit},
    {"sqrt", launchUnary<UnaryOp::Sqrt>},
    {"squeeze", launchCopy},
    {"sub", launchBinary<BinaryOp::Sub>},
    {"tanh", launchUnary<UnaryOp::Tanh>},
    {"top_k", launchTopK},
    {"transpose", launchTranspose},
    {"trilu", launchTrilu},
    {"unary_grad", launchUnaryGrad},
    {"unsqueeze", launchCopy},
    {"where", launchWhere},
};

} // namespace

const KernelTable &kernelTable() {
  static const KernelTable table(kKernels);
  return table;
}

} // namespace bmrt::cpu
