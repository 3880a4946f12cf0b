//===- ShardingRules.cpp - the sharding rule of every bm op ---------------===//
//
// One rule builder per kind of op, and one alphabetical table from op name to
// builder. Rules follow Shardy's factor model (see bm/ShardingRule.h).
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"

#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::bm;
using ::bm::DimFactors;
using ::bm::FactorKind;
using ::bm::ShardingRule;
using ::bm::TensorFactors;

static ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// Dims of size 1 are never sharded: they map to no factor.
static DimFactors single(int factor, int64_t size) {
  return size == 1 ? DimFactors{} : DimFactors{factor};
}

/// A fresh factor per result dim; every operand maps its dims to them,
/// right-aligned, numpy-style, except dims it broadcasts (size 1). Dims in
/// `kinds` get that kind instead of parallel.
static ShardingRule
broadcastRule(Operation *op,
              llvm::function_ref<FactorKind(int64_t)> kindOf = nullptr) {
  ShardingRule rule;
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  TensorFactors result;
  for (auto [d, size] : llvm::enumerate(out)) {
    int f = rule.addFactor(size, kindOf ? kindOf(d) : FactorKind::Parallel);
    result.push_back(single(f, size));
  }
  for (Value operand : op->getOperands()) {
    ArrayRef<int64_t> in = shapeOf(operand);
    size_t offset = out.size() - in.size();
    TensorFactors dims;
    for (auto [d, size] : llvm::enumerate(in))
      dims.push_back(size == out[offset + d] ? result[offset + d]
                                             : DimFactors{});
    rule.operandFactors.push_back(dims);
  }
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    rule.resultFactors.push_back(result);
  return rule;
}

static ShardingRule elementwiseRule(Operation *op) { return broadcastRule(op); }

/// Softmax-like ops: the axis needs the whole row.
static ShardingRule axisNeedsReplicationRule(Operation *op) {
  int64_t axis = cast<IntegerAttr>(op->getAttr("axis")).getInt();
  return broadcastRule(op, [&](int64_t d) {
    return d == axis ? FactorKind::NeedReplication : FactorKind::Parallel;
  });
}

/// Trilu's mask depends on global row and column indices.
static ShardingRule triluRule(Operation *op) {
  int64_t rank = shapeOf(op->getResult(0)).size();
  return broadcastRule(op, [&](int64_t d) {
    return d >= rank - 2 ? FactorKind::NeedReplication : FactorKind::Parallel;
  });
}

/// Layer / RMS norm: dims before `axis` are parallel; normalised dims need
/// the whole row (the statistics span it); scale and bias follow them.
static ShardingRule normRule(Operation *op) {
  int64_t axis = cast<IntegerAttr>(op->getAttr("axis")).getInt();
  ShardingRule rule;
  TensorFactors input;
  for (auto [d, size] : llvm::enumerate(shapeOf(op->getOperand(0)))) {
    int f = rule.addFactor(size, static_cast<int64_t>(d) < axis
                                     ? FactorKind::Parallel
                                     : FactorKind::NeedReplication);
    input.push_back(single(f, size));
  }
  rule.operandFactors.push_back(input);
  for (Value param : op->getOperands().drop_front())
    rule.operandFactors.push_back(TensorFactors(
        input.begin() + (input.size() - shapeOf(param).size()), input.end()));
  rule.resultFactors.push_back(input);
  return rule;
}

/// Batch norm (inference statistics): every dim parallel; the 1-D
/// parameters follow the channel dim.
static ShardingRule batchNormRule(Operation *op) {
  ShardingRule rule;
  TensorFactors input;
  for (int64_t size : shapeOf(op->getOperand(0)))
    input.push_back(single(rule.addFactor(size, FactorKind::Parallel), size));
  rule.operandFactors.push_back(input);
  for (unsigned i = 1; i < op->getNumOperands(); ++i)
    rule.operandFactors.push_back({input[1]});
  rule.resultFactors.push_back(input);
  return rule;
}

/// Einsum-style rule from one letter string per operand and result: letters
/// absent from the result are reductions.
static ShardingRule letterRule(ArrayRef<std::string> inputs,
                               StringRef output, ArrayRef<Value> operands) {
  ShardingRule rule;
  llvm::DenseMap<char, int> factorOf;
  auto factor = [&](char c, int64_t size) {
    auto it = factorOf.find(c);
    if (it != factorOf.end())
      return it->second;
    bool reduced = output.find(c) == StringRef::npos;
    int f = rule.addFactor(size, reduced ? FactorKind::Reduction
                                         : FactorKind::Parallel);
    factorOf[c] = f;
    return f;
  };
  llvm::DenseMap<char, int64_t> sizeOf;
  for (auto [term, operand] : llvm::zip(inputs, operands)) {
    TensorFactors dims;
    for (auto [c, size] : llvm::zip(term, shapeOf(operand))) {
      sizeOf[c] = std::max(sizeOf.lookup(c), size);
      dims.push_back(single(factor(c, sizeOf[c]), size));
    }
    rule.operandFactors.push_back(dims);
  }
  TensorFactors result;
  for (char c : output)
    result.push_back(single(factorOf[c], sizeOf[c]));
  rule.resultFactors.push_back(result);
  for (auto [c, f] : factorOf)
    rule.factorSizes[f] = sizeOf[c];
  return rule;
}

/// Letters for the dims of a numpy matmul: shared (broadcast) batch letters,
/// then i, k and k, j.
static ShardingRule matmulRule(Operation *op) {
  ArrayRef<int64_t> lhs = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> rhs = shapeOf(op->getOperand(1));
  // Batch dims: all but the last two of a matrix operand (a vector has
  // none), right-aligned.
  auto batchRank = [](size_t rank) { return rank < 2 ? size_t(0) : rank - 2; };
  size_t batch = std::max(batchRank(lhs.size()), batchRank(rhs.size()));
  std::string batchLetters;
  for (size_t i = 0; i < batch; ++i)
    batchLetters.push_back('A' + i);
  auto batchOf = [&](size_t rank) {
    return batchLetters.substr(batch - batchRank(rank));
  };
  std::string l = lhs.size() == 1 ? "k" : batchOf(lhs.size()) + "ik";
  std::string r = rhs.size() == 1 ? "k" : batchOf(rhs.size()) + "kj";
  std::string out = batchLetters;
  if (lhs.size() > 1)
    out += "i";
  if (rhs.size() > 1)
    out += "j";
  // Broadcast batch dims of size 1 are mapped to no factor by letterRule.
  return letterRule({l, r}, out, {op->getOperand(0), op->getOperand(1)});
}

static ShardingRule gemmRule(Operation *op) {
  auto gemm = cast<GemmOp>(op);
  std::string a = gemm.getTransA() ? "ki" : "ik";
  std::string b = gemm.getTransB() ? "jk" : "kj";
  SmallVector<std::string> terms = {a, b};
  SmallVector<Value> operands = {gemm.getA(), gemm.getB()};
  ShardingRule rule = letterRule(terms, "ij", operands);
  if (Value c = gemm.getC()) {
    // The bias broadcasts to [i, j].
    ArrayRef<int64_t> bias = shapeOf(c);
    const TensorFactors &result = rule.resultFactors[0];
    TensorFactors dims;
    size_t offset = 2 - bias.size();
    for (auto [d, size] : llvm::enumerate(bias))
      dims.push_back(size == 1 ? DimFactors{} : result[offset + d]);
    rule.operandFactors.push_back(dims);
  }
  return rule;
}

static ShardingRule einsumRule(Operation *op) {
  std::string error;
  FailureOr<EinsumEquation> eq =
      parseEinsum(cast<EinsumOp>(op).getEquation(), error);
  if (failed(eq))
    return {};
  return letterRule(eq->inputs, eq->output, llvm::to_vector(op->getOperands()));
}

/// Conv: batch and output channels parallel, input channels a reduction;
/// output spatial dims need their input halo, so they need replication.
static ShardingRule convRule(Operation *op) {
  auto conv = cast<ConvOp>(op);
  ArrayRef<int64_t> in = shapeOf(conv.getInput());
  ArrayRef<int64_t> w = shapeOf(conv.getWeight());
  ArrayRef<int64_t> out = shapeOf(conv.getResult());
  ShardingRule rule;
  int n = rule.addFactor(in[0], FactorKind::Parallel);
  int cout = rule.addFactor(w[0], FactorKind::Parallel);
  bool grouped = conv.getGroup() > 1;
  int cin = rule.addFactor(w[1], FactorKind::Reduction);
  TensorFactors input = {single(n, in[0]),
                         grouped ? DimFactors{} : single(cin, in[1])};
  TensorFactors weight = {single(cout, w[0]), single(cin, w[1])};
  TensorFactors result = {single(n, out[0]), single(cout, out[1])};
  for (size_t d = 2; d < out.size(); ++d) {
    input.push_back({});
    weight.push_back({});
    result.push_back(
        single(rule.addFactor(out[d], FactorKind::NeedReplication), out[d]));
  }
  rule.operandFactors = {input, weight};
  if (conv.getBias())
    rule.operandFactors.push_back({single(cout, w[0])});
  rule.resultFactors = {result};
  return rule;
}

/// Pools: batch and channels parallel, output spatial dims need their input
/// window; global pooling reduces the spatial dims.
static ShardingRule poolRule(Operation *op) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  bool global = isa<GlobalAvgPoolOp>(op);
  ShardingRule rule;
  TensorFactors input, result;
  for (int d = 0; d < 2; ++d) {
    int f = rule.addFactor(in[d], FactorKind::Parallel);
    input.push_back(single(f, in[d]));
    result.push_back(single(f, in[d]));
  }
  for (size_t d = 2; d < in.size(); ++d) {
    if (global) {
      input.push_back(single(rule.addFactor(in[d], FactorKind::Reduction), in[d]));
      result.push_back({});
    } else {
      input.push_back({});
      result.push_back(
          single(rule.addFactor(out[d], FactorKind::NeedReplication), out[d]));
    }
  }
  rule.operandFactors = {input};
  rule.resultFactors = {result};
  return rule;
}

/// Reductions: reduced dims are reduction factors, the rest parallel.
static ShardingRule reduceRule(Operation *op) {
  ArrayRef<int64_t> axes =
      cast<DenseI64ArrayAttr>(op->getAttr("axes")).asArrayRef();
  bool keepDims = cast<BoolAttr>(op->getAttr("keep_dims")).getValue();
  ShardingRule rule;
  TensorFactors input, result;
  for (auto [d, size] : llvm::enumerate(shapeOf(op->getOperand(0)))) {
    bool reduced = llvm::is_contained(axes, static_cast<int64_t>(d));
    int f = rule.addFactor(size, reduced ? FactorKind::Reduction
                                         : FactorKind::Parallel);
    input.push_back(single(f, size));
    if (!reduced)
      result.push_back(single(f, size));
    else if (keepDims)
      result.push_back({});
  }
  rule.operandFactors = {input};
  rule.resultFactors = {result};
  return rule;
}

/// Top-k keeps the dims other than `axis` and changes that one's size: the
/// axis needs the whole row, and maps to no factor in the results.
static ShardingRule topKRule(Operation *op) {
  int64_t axis = cast<TopKOp>(op).getAxis();
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  TensorFactors dims;
  for (auto [d, size] : llvm::enumerate(in))
    dims.push_back(static_cast<int64_t>(d) == axis
                       ? DimFactors{}
                       : single(rule.addFactor(size, FactorKind::Parallel),
                                size));
  rule.operandFactors = {dims};
  if (in[axis] != 1)
    rule.operandFactors[0][axis] = {
        rule.addFactor(in[axis], FactorKind::NeedReplication)};
  rule.resultFactors.assign(op->getNumResults(), dims);
  return rule;
}

static ShardingRule sliceRule(Operation *op) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  ShardingRule rule;
  TensorFactors input, result;
  for (auto [d, size] : llvm::enumerate(in)) {
    if (size == out[d]) {
      int f = rule.addFactor(size, FactorKind::Parallel);
      input.push_back(single(f, size));
      result.push_back(single(f, size));
    } else {
      input.push_back({});
      result.push_back({});
    }
  }
  rule.operandFactors = {input};
  rule.resultFactors = {result};
  return rule;
}

/// Concat of equal pieces mirrors split: the joined dim is compound,
/// {pieces, piece}, each operand's dim the piece factor (a split's
/// gradient joins the parts of a fused projection). Unequal pieces leave
/// the dim without a factor.
static ShardingRule concatRule(Operation *op) {
  int64_t axis = cast<ConcatOp>(op).getAxis();
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  ShardingRule rule;
  bool equal = op->getNumOperands() > 1 &&
               llvm::all_of(op->getOperands(), [&](Value v) {
                 return shapeOf(v)[axis] == shapeOf(op->getOperand(0))[axis];
               });
  TensorFactors operand, result;
  for (auto [d, size] : llvm::enumerate(out)) {
    if (static_cast<int64_t>(d) != axis) {
      DimFactors dim = single(rule.addFactor(size, FactorKind::Parallel), size);
      operand.push_back(dim);
      result.push_back(dim);
    } else if (equal && shapeOf(op->getOperand(0))[axis] > 1) {
      int pieces = rule.addFactor(op->getNumOperands(),
                                  FactorKind::NeedReplication);
      int piece = rule.addFactor(shapeOf(op->getOperand(0))[axis],
                                 FactorKind::Parallel);
      operand.push_back({piece});
      result.push_back({pieces, piece});
    } else {
      operand.push_back({});
      result.push_back({});
    }
  }
  rule.operandFactors.assign(op->getNumOperands(), operand);
  rule.resultFactors = {result};
  return rule;
}

/// Split into equal pieces makes the split dim compound: {pieces, piece}.
/// The piece factor is shared by all results; `pieces` cannot be sharded.
static ShardingRule splitRule(Operation *op) {
  auto split = cast<SplitOp>(op);
  int64_t axis = split.getAxis();
  ArrayRef<int64_t> sizes = split.getSizes();
  ArrayRef<int64_t> in = shapeOf(split.getInput());
  bool equal = llvm::all_equal(sizes);
  ShardingRule rule;
  TensorFactors input, result;
  for (auto [d, size] : llvm::enumerate(in)) {
    if (static_cast<int64_t>(d) != axis) {
      int f = rule.addFactor(size, FactorKind::Parallel);
      input.push_back(single(f, size));
      result.push_back(single(f, size));
    } else if (equal && !sizes.empty()) {
      // A single piece is the whole dim; pieces of size 1 leave no factor.
      DimFactors dim;
      if (sizes.size() > 1)
        dim.push_back(
            rule.addFactor(sizes.size(), FactorKind::NeedReplication));
      DimFactors piece;
      if (sizes[0] != 1)
        piece.push_back(rule.addFactor(sizes[0], FactorKind::Parallel));
      dim.insert(dim.end(), piece.begin(), piece.end());
      input.push_back(dim);
      result.push_back(piece);
    } else {
      input.push_back({});
      result.push_back({});
    }
  }
  rule.operandFactors = {input};
  rule.resultFactors.assign(op->getNumResults(), result);
  return rule;
}

/// Reshape (and flatten): dims are grouped where the running products of
/// the two shapes meet, and each group is split into factors that both
/// sides are runs of (see below).
static ShardingRule reshapeRule(Operation *op) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  ShardingRule rule;
  TensorFactors input(in.size()), result(out.size());
  // An empty tensor has no running products to match: tie no factor.
  if (llvm::is_contained(in, 0) || llvm::is_contained(out, 0)) {
    rule.operandFactors = {input};
    rule.resultFactors = {result};
    return rule;
  }
  size_t i = 0, o = 0;
  while (i < in.size() || o < out.size()) {
    // Size-1 dims are free to come and go.
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (o < out.size() && out[o] == 1) {
      ++o;
      continue;
    }
    if (i == in.size() || o == out.size())
      break;
    size_t i0 = i, o0 = o;
    int64_t pi = in[i++], po = out[o++];
    while (pi != po) {
      if (pi < po && i < in.size())
        pi *= in[i++];
      else if (po < pi && o < out.size())
        po *= out[o++];
      else
        break;
    }
    // Split the group into factors that both sides are runs of: walking
    // both, the smaller of the two remaining sizes is the next factor, which
    // works while it divides the larger ({b, s} -> b*s, 4096 -> {32, 128},
    // {256, 1024} -> {128, 2048} as {128, 2}, {1024} -> {128}, {2, 1024}).
    // Otherwise (6x4 -> 4x6) the group is a true re-layout: no factor.
    struct Piece {
      int64_t size;
      size_t inDim, outDim;
    };
    SmallVector<Piece> pieces;
    size_t a = i0, c = o0;
    int64_t leftIn = in[a], leftOut = out[c];
    bool clean = true;
    while (clean && a < i && c < o) {
      if (leftIn == 1) {
        if (++a < i)
          leftIn = in[a];
        continue;
      }
      if (leftOut == 1) {
        if (++c < o)
          leftOut = out[c];
        continue;
      }
      int64_t small = std::min(leftIn, leftOut);
      if (std::max(leftIn, leftOut) % small != 0) {
        clean = false;
        break;
      }
      pieces.push_back({small, a, c});
      leftIn /= small;
      leftOut /= small;
    }
    if (!clean)
      continue;
    for (const Piece &piece : pieces) {
      int f = rule.addFactor(piece.size, FactorKind::Parallel);
      input[piece.inDim].push_back(f);
      result[piece.outDim].push_back(f);
    }
  }
  rule.operandFactors = {input};
  rule.resultFactors = {result};
  return rule;
}

static ShardingRule transposeRule(Operation *op) {
  ArrayRef<int64_t> perm = cast<TransposeOp>(op).getPermutation();
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  ShardingRule rule;
  TensorFactors input, result;
  for (int64_t size : in)
    input.push_back(single(rule.addFactor(size, FactorKind::Parallel), size));
  for (int64_t p : perm)
    result.push_back(input[p]);
  rule.operandFactors = {input};
  rule.resultFactors = {result};
  return rule;
}

/// Gather: the indexed axis of `data` is a reduction (Megatron's
/// vocab-parallel embedding: each shard looks up the rows it holds, zeros
/// elsewhere, and the partial results are summed).
static ShardingRule gatherRule(Operation *op) {
  auto gather = cast<GatherOp>(op);
  int64_t axis = gather.getAxis();
  ArrayRef<int64_t> data = shapeOf(gather.getData());
  ArrayRef<int64_t> indices = shapeOf(gather.getIndices());
  ShardingRule rule;
  TensorFactors dataDims, indexDims, result;
  for (auto [d, size] : llvm::enumerate(data)) {
    if (static_cast<int64_t>(d) == axis) {
      dataDims.push_back(
          single(rule.addFactor(size, FactorKind::Reduction), size));
      for (int64_t isize : indices) {
        DimFactors f = single(rule.addFactor(isize, FactorKind::Parallel), isize);
        indexDims.push_back(f);
        result.push_back(f);
      }
      continue;
    }
    DimFactors f = single(rule.addFactor(size, FactorKind::Parallel), size);
    dataDims.push_back(f);
    result.push_back(f);
  }
  rule.operandFactors = {dataDims, indexDims};
  rule.resultFactors = {result};
  return rule;
}

/// gather_elements (data, indices) -> [indices] and scatter_elements (data,
/// indices, updates) -> [data]: a dim where the indices are as long as the
/// data is parallel in every tensor. The indexed axis of the data needs the
/// whole axis (an index may point anywhere in it); so does a dim the
/// indices cover only in part, on both sides, because an index row reads the
/// data row of the same global number. The gather's own axis over the
/// indices is parallel: each index is looked up alone. The scatter's is not
/// (a shard of updates would write a shard's worth into the whole data).
static ShardingRule elementIndexRule(Operation *op) {
  bool gathers = isa<GatherElementsOp>(op);
  int64_t axis = cast<IntegerAttr>(op->getAttr("axis")).getInt();
  ArrayRef<int64_t> data = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> indices = shapeOf(op->getOperand(1));
  ShardingRule rule;
  TensorFactors dataDims, indexDims;
  for (auto [d, size] : llvm::enumerate(data)) {
    int64_t isize = indices[d];
    if (static_cast<int64_t>(d) != axis && isize == size) {
      DimFactors f = single(rule.addFactor(size, FactorKind::Parallel), size);
      dataDims.push_back(f);
      indexDims.push_back(f);
      continue;
    }
    dataDims.push_back(
        single(rule.addFactor(size, FactorKind::NeedReplication), size));
    bool parallel = gathers && static_cast<int64_t>(d) == axis;
    indexDims.push_back(
        single(rule.addFactor(isize, parallel ? FactorKind::Parallel
                                              : FactorKind::NeedReplication),
               isize));
  }
  if (gathers) {
    rule.operandFactors = {dataDims, indexDims};
    rule.resultFactors = {indexDims};
  } else {
    rule.operandFactors = {dataDims, indexDims, indexDims};
    rule.resultFactors = {dataDims};
  }
  return rule;
}

/// Squeeze, unsqueeze and expand keep the dims whose size is unchanged.
static ShardingRule sameDimsRule(Operation *op) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  ShardingRule rule;
  TensorFactors input(in.size()), result(out.size());
  if (isa<ExpandOp>(op)) {
    // Right-aligned numpy broadcasting.
    size_t offset = out.size() - in.size();
    for (auto [d, size] : llvm::enumerate(out)) {
      int f = rule.addFactor(size, FactorKind::Parallel);
      result[d] = single(f, size);
      if (d >= offset && in[d - offset] == size)
        input[d - offset] = result[d];
    }
  } else {
    // Match the non-unit dims in order.
    size_t o = 0;
    for (auto [d, size] : llvm::enumerate(in)) {
      if (size == 1)
        continue;
      while (o < out.size() && out[o] == 1)
        ++o;
      int f = rule.addFactor(size, FactorKind::Parallel);
      input[d] = {f};
      if (o < out.size())
        result[o++] = {f};
    }
  }
  rule.operandFactors = {input};
  rule.resultFactors = {result};
  return rule;
}

/// Ops with no operands (constant, iota): result dims are parallel (each
/// device can make its own slice).
static ShardingRule sourceRule(Operation *op) { return broadcastRule(op); }

/// One-hot: the new depth dim is parallel (each shard compares against its
/// own range of classes).
static ShardingRule oneHotRule(Operation *op) {
  auto oneHot = cast<OneHotOp>(op);
  ArrayRef<int64_t> in = shapeOf(oneHot.getIndices());
  ShardingRule rule;
  TensorFactors input;
  for (int64_t size : in)
    input.push_back(single(rule.addFactor(size, FactorKind::Parallel), size));
  TensorFactors result = input;
  int64_t depth = oneHot.getDepth();
  result.insert(result.begin() + oneHot.getAxis(),
                single(rule.addFactor(depth, FactorKind::Parallel), depth));
  rule.operandFactors = {input};
  rule.resultFactors = {result};
  return rule;
}

using RuleBuilder = ShardingRule (*)(Operation *);

//===----------------------------------------------------------------------===//
// Backward ops (autodiff's), for partitioning the training step. A factor
// that a result lacks is summed over for that result (a parameter's
// gradient sums over the rows), so sharding it leaves partial sums there.
//===----------------------------------------------------------------------===//

/// One factor per dim of `shape`: parallel before `axis`, needing the whole
/// row from `axis` on (norm statistics span it).
static TensorFactors rowFactors(ShardingRule &rule, ArrayRef<int64_t> shape,
                                int64_t axis) {
  TensorFactors dims;
  for (auto [d, size] : llvm::enumerate(shape))
    dims.push_back(single(rule.addFactor(size, static_cast<int64_t>(d) < axis
                                                   ? FactorKind::Parallel
                                                   : FactorKind::NeedReplication),
                          size));
  return dims;
}

/// attention (q, kt, v[, positions]) -> result and attention_grad (q, kt,
/// v, result, dresult[, positions]) -> (dq, dkt, dv): the leading dims
/// (batch, heads) are parallel; keys and both head dims need replication (a
/// query's softmax runs over every key). The queries split where each
/// knows its place among the keys: without a causal mask, or with the
/// positions (context parallelism); attention_grad's dkt and dv are then
/// sums over the queries (a reduction).
static ShardingRule attentionRule(Operation *op) {
  ArrayRef<int64_t> q = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> v = shapeOf(op->getOperand(2));
  size_t rank = q.size();
  const bool isGrad = isa<AttentionGradOp>(op);
  Value positions = isGrad ? cast<AttentionGradOp>(op).getPositions()
                           : cast<AttentionOp>(op).getPositions();
  const bool causal = op->hasAttrOfType<BoolAttr>("causal") &&
                      cast<BoolAttr>(op->getAttr("causal")).getValue();
  ShardingRule rule;
  TensorFactors lead;
  for (int64_t size : q.drop_back(2))
    lead.push_back(single(rule.addFactor(size, FactorKind::Parallel), size));
  auto replicated = [&](int64_t size) {
    return single(rule.addFactor(size, FactorKind::NeedReplication), size);
  };
  FactorKind queries = causal && !positions ? FactorKind::NeedReplication
                       : isGrad             ? FactorKind::Reduction
                                            : FactorKind::Parallel;
  DimFactors s = single(rule.addFactor(q[rank - 2], queries), q[rank - 2]);
  DimFactors d = replicated(q[rank - 1]);
  DimFactors t = replicated(v[rank - 2]), e = replicated(v[rank - 1]);
  auto tensor = [&](DimFactors rows, DimFactors cols) {
    TensorFactors dims = lead;
    dims.push_back(rows);
    dims.push_back(cols);
    return dims;
  };
  TensorFactors qDims = tensor(s, d), ktDims = tensor(d, t),
                vDims = tensor(t, e), out = tensor(s, e);
  rule.operandFactors = {qDims, ktDims, vDims};
  if (isGrad) {
    rule.operandFactors.push_back(out);
    rule.operandFactors.push_back(out);
    rule.resultFactors = {qDims, ktDims, vDims};
  } else {
    rule.resultFactors = {out};
  }
  if (positions)
    rule.operandFactors.push_back({s});
  return rule;
}

/// layer_norm_grad, rms_norm_grad: (x, scale, dy) -> (dx, dscale[, dbias]).
static ShardingRule normGradRule(Operation *op) {
  int64_t axis = cast<IntegerAttr>(op->getAttr("axis")).getInt();
  ShardingRule rule;
  TensorFactors input = rowFactors(rule, shapeOf(op->getOperand(0)), axis);
  TensorFactors params(input.begin() + (input.size() -
                                        shapeOf(op->getOperand(1)).size()),
                       input.end());
  rule.operandFactors = {input, params, input};
  rule.resultFactors.push_back(input);
  for (unsigned r = 1; r < op->getNumResults(); ++r)
    rule.resultFactors.push_back(params);
  return rule;
}

/// batch_norm_grad (inference form): elementwise in x and dy; the 1-D
/// operands and parameter gradients follow the channel dim.
static ShardingRule batchNormGradRule(Operation *op) {
  ShardingRule rule;
  TensorFactors input = rowFactors(rule, shapeOf(op->getOperand(0)),
                                   shapeOf(op->getOperand(0)).size());
  TensorFactors channel = {input[1]};
  rule.operandFactors = {input, channel, channel, channel, input};
  rule.resultFactors = {input, channel, channel};
  return rule;
}

/// conv_grad_input (dy, w) -> dx and conv_grad_weight (dy, x) -> dw: the
/// batch and both channel counts as in conv; spatial dims need their
/// windows. Grouped convolutions keep their channels whole.
static ShardingRule convGradRule(Operation *op) {
  bool wantsInput = isa<ConvGradInputOp>(op);
  bool grouped = cast<IntegerAttr>(op->getAttr("group")).getInt() > 1;
  ArrayRef<int64_t> dy = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> other = shapeOf(op->getOperand(1));
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  ArrayRef<int64_t> x = wantsInput ? out : other, w = wantsInput ? other : out;
  ShardingRule rule;
  FactorKind channels = grouped ? FactorKind::NeedReplication
                                : FactorKind::Parallel;
  int n = rule.addFactor(dy[0], FactorKind::Parallel);
  int cout = rule.addFactor(dy[1], channels);
  int cin = rule.addFactor(x[1], channels);
  TensorFactors dyDims = {single(n, dy[0]), single(cout, dy[1])};
  TensorFactors xDims = {single(n, x[0]), single(cin, x[1])};
  TensorFactors wDims = {single(cout, w[0]), single(cin, w[1])};
  for (size_t d = 2; d < dy.size(); ++d) {
    dyDims.push_back(single(rule.addFactor(dy[d], FactorKind::NeedReplication),
                            dy[d]));
    xDims.push_back(
        single(rule.addFactor(x[d], FactorKind::NeedReplication), x[d]));
    wDims.push_back({});
  }
  rule.operandFactors = {dyDims, wantsInput ? wDims : xDims};
  rule.resultFactors = {wantsInput ? xDims : wDims};
  return rule;
}

/// gather_grad (dy, indices) -> data: the data's other dims are parallel;
/// the indices' dims are summed over (scatter-add), and the gathered axis
/// of the data needs the whole table.
static ShardingRule gatherGradRule(Operation *op) {
  int64_t axis = cast<IntegerAttr>(op->getAttr("axis")).getInt();
  ArrayRef<int64_t> data = shapeOf(op->getResult(0));
  ArrayRef<int64_t> indices = shapeOf(op->getOperand(1));
  ShardingRule rule;
  TensorFactors dataDims, indexDims, dyDims;
  for (auto [d, size] : llvm::enumerate(data))
    dataDims.push_back(single(
        rule.addFactor(size, static_cast<int64_t>(d) == axis
                                 ? FactorKind::NeedReplication
                                 : FactorKind::Parallel),
        size));
  for (int64_t size : indices)
    indexDims.push_back(single(rule.addFactor(size, FactorKind::Reduction), size));
  dyDims.insert(dyDims.end(), dataDims.begin(), dataDims.begin() + axis);
  dyDims.insert(dyDims.end(), indexDims.begin(), indexDims.end());
  dyDims.insert(dyDims.end(), dataDims.begin() + axis + 1, dataDims.end());
  rule.operandFactors = {dyDims, indexDims};
  rule.resultFactors = {dataDims};
  return rule;
}

/// Backward ops whose result has the input's shape and whose first float
/// operand of that shape is read elementwise except along dims whose size
/// differs (pool windows, slices): those need replication.
static ShardingRule windowGradRule(Operation *op) {
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  ArrayRef<int64_t> dy = shapeOf(op->getOperands().back());
  bool pooled = isa<MaxPoolGradOp, AvgPoolGradOp>(op);
  ShardingRule rule;
  TensorFactors result, dyDims;
  for (auto [d, size] : llvm::enumerate(out)) {
    bool whole = dy[d] != size || (pooled && d >= 2);
    int f = rule.addFactor(size, whole ? FactorKind::NeedReplication
                                       : FactorKind::Parallel);
    result.push_back(single(f, size));
    dyDims.push_back(whole ? DimFactors{} : single(f, size));
  }
  for (unsigned i = 0; i + 1 < op->getNumOperands(); ++i)
    rule.operandFactors.push_back(result);
  rule.operandFactors.push_back(dyDims);
  rule.resultFactors = {result};
  return rule;
}

/// cross_entropy (logits [N, C], labels [N]) -> mean loss: the rows are
/// averaged over; the classes need the whole row (log-sum-exp).
/// cross_entropy_grad (logits, labels, dloss) -> dlogits keeps the rows.
static ShardingRule crossEntropyRule(Operation *op) {
  ArrayRef<int64_t> logits = shapeOf(op->getOperand(0));
  bool isGrad = isa<CrossEntropyGradOp>(op);
  ShardingRule rule;
  int rows = rule.addFactor(logits[0], isGrad ? FactorKind::Parallel
                                              : FactorKind::Reduction);
  int classes = rule.addFactor(logits[1], FactorKind::NeedReplication);
  TensorFactors logitDims = {single(rows, logits[0]),
                             single(classes, logits[1])};
  rule.operandFactors = {logitDims, {single(rows, logits[0])}};
  if (isGrad)
    rule.operandFactors.push_back({});
  rule.resultFactors = {isGrad ? logitDims : TensorFactors{}};
  return rule;
}

/// Alphabetical by op name.
static const llvm::StringMap<RuleBuilder> &ruleTable() {
  static const llvm::StringMap<RuleBuilder> table = {
      {AbsOp::getOperationName(), elementwiseRule},
      {AddOp::getOperationName(), elementwiseRule},
      {AndOp::getOperationName(), elementwiseRule},
      {AttentionOp::getOperationName(), attentionRule},
      {AttentionGradOp::getOperationName(), attentionRule},
      {AvgPoolOp::getOperationName(), poolRule},
      {AvgPoolGradOp::getOperationName(), windowGradRule},
      {BatchNormOp::getOperationName(), batchNormRule},
      {BatchNormGradOp::getOperationName(), batchNormGradRule},
      {CastOp::getOperationName(), elementwiseRule},
      {ConcatOp::getOperationName(), concatRule},
      {ConstantOp::getOperationName(), sourceRule},
      {ConvOp::getOperationName(), convRule},
      {ConvGradInputOp::getOperationName(), convGradRule},
      {ConvGradWeightOp::getOperationName(), convGradRule},
      {CosOp::getOperationName(), elementwiseRule},
      {CrossEntropyOp::getOperationName(), crossEntropyRule},
      {CrossEntropyGradOp::getOperationName(), crossEntropyRule},
      {CumSumOp::getOperationName(), axisNeedsReplicationRule},
      {DivOp::getOperationName(), elementwiseRule},
      {EinsumOp::getOperationName(), einsumRule},
      {EqualOp::getOperationName(), elementwiseRule},
      {ErfOp::getOperationName(), elementwiseRule},
      {ExpOp::getOperationName(), elementwiseRule},
      {ExpandOp::getOperationName(), sameDimsRule},
      {FlattenOp::getOperationName(), reshapeRule},
      {GatherOp::getOperationName(), gatherRule},
      {GatherElementsOp::getOperationName(), elementIndexRule},
      {GatherGradOp::getOperationName(), gatherGradRule},
      {GeluOp::getOperationName(), elementwiseRule},
      {GemmOp::getOperationName(), gemmRule},
      {GlobalAvgPoolOp::getOperationName(), poolRule},
      {GreaterOp::getOperationName(), elementwiseRule},
      {IotaOp::getOperationName(), sourceRule},
      {LayerNormOp::getOperationName(), normRule},
      {LayerNormGradOp::getOperationName(), normGradRule},
      {LessOp::getOperationName(), elementwiseRule},
      {LogOp::getOperationName(), elementwiseRule},
      {LogSoftmaxOp::getOperationName(), axisNeedsReplicationRule},
      {LogSoftmaxGradOp::getOperationName(), axisNeedsReplicationRule},
      {MatMulOp::getOperationName(), matmulRule},
      {MaxOp::getOperationName(), elementwiseRule},
      {MaxPoolOp::getOperationName(), poolRule},
      {MaxPoolGradOp::getOperationName(), windowGradRule},
      {MinOp::getOperationName(), elementwiseRule},
      {MulOp::getOperationName(), elementwiseRule},
      {NegOp::getOperationName(), elementwiseRule},
      {NotOp::getOperationName(), elementwiseRule},
      {OneHotOp::getOperationName(), oneHotRule},
      {OrOp::getOperationName(), elementwiseRule},
      {PowOp::getOperationName(), elementwiseRule},
      {ReciprocalOp::getOperationName(), elementwiseRule},
      {ReduceMaxOp::getOperationName(), reduceRule},
      {ReduceMeanOp::getOperationName(), reduceRule},
      {ReduceSumOp::getOperationName(), reduceRule},
      {ReluOp::getOperationName(), elementwiseRule},
      {ReshapeOp::getOperationName(), reshapeRule},
      {RmsNormOp::getOperationName(), normRule},
      {RmsNormGradOp::getOperationName(), normGradRule},
      {ScatterElementsOp::getOperationName(), elementIndexRule},
      {SigmoidOp::getOperationName(), elementwiseRule},
      {SinOp::getOperationName(), elementwiseRule},
      {SliceOp::getOperationName(), sliceRule},
      {SliceGradOp::getOperationName(), windowGradRule},
      {SoftmaxOp::getOperationName(), axisNeedsReplicationRule},
      {SoftmaxGradOp::getOperationName(), axisNeedsReplicationRule},
      {SplitOp::getOperationName(), splitRule},
      {SqrtOp::getOperationName(), elementwiseRule},
      {SqueezeOp::getOperationName(), sameDimsRule},
      {SubOp::getOperationName(), elementwiseRule},
      {TanhOp::getOperationName(), elementwiseRule},
      {TopKOp::getOperationName(), topKRule},
      {TransposeOp::getOperationName(), transposeRule},
      {TriluOp::getOperationName(), triluRule},
      {UnaryGradOp::getOperationName(), elementwiseRule},
      {UnsqueezeOp::getOperationName(), sameDimsRule},
      {WhereOp::getOperationName(), elementwiseRule},
  };
  return table;
}

ShardingRule mlir::bm::lookupShardingRule(Operation *op) {
  auto it = ruleTable().find(op->getName().getStringRef());
  if (it == ruleTable().end())
    return {};
  return it->second(op);
}

bool mlir::bm::hasShardingRule(StringRef opName) {
  return ruleTable().contains(opName);
}
