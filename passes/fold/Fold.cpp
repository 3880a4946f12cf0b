//===- Fold.cpp - find repeated layers by structural hashing --------------===//
//
// See BmFoldPass in passes/Passes.td for the algorithm. The pass is linear
// in the number of ops apart from a small constant number of candidate
// periods, so a 960-layer model folds about ten times slower than a 96-layer
// one, not a hundred.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"
#include "passes/fold/SemanticAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMFOLDPASS
#include "passes/Passes.h.inc"

namespace {

/// The ops of one function body in order, with what folding needs to know
/// of each.
struct OpSequence {
  SmallVector<Operation *> ops;
  DenseMap<Operation *, int64_t> index;
  SmallVector<llvm::hash_code> signature;
  /// semanticAttrs of each op, made once (building a dictionary is the
  /// costliest part of comparing two ops).
  SmallVector<DictionaryAttr> attrs;

  explicit OpSequence(Block &body) {
    for (Operation &op : body.without_terminator()) {
      index[&op] = static_cast<int64_t>(ops.size());
      ops.push_back(&op);
      attrs.push_back(semanticAttrs(&op));
    }
    for (auto [i, op] : llvm::enumerate(ops))
      signature.push_back(hashOp(op, attrs[i]));
  }

  int64_t size() const { return static_cast<int64_t>(ops.size()); }

  /// A coarse signature: what the op computes and on what types, but not
  /// where its operands come from, which depends on the layer boundaries
  /// that are not known yet. Instances are checked exactly later.
  static llvm::hash_code hashOp(Operation *op, DictionaryAttr opAttrs) {
    llvm::hash_code h = llvm::hash_combine(op->getName().getAsOpaquePointer(),
                                           opAttrs.getAsOpaquePointer());
    for (Type type : op->getResultTypes())
      h = llvm::hash_combine(h, type.getAsOpaquePointer());
    for (Value operand : op->getOperands())
      h = llvm::hash_combine(h, operand.getType().getAsOpaquePointer());
    return h;
  }

  bool sameSignature(int64_t a, int64_t b) const {
    return signature[a] == signature[b];
  }

  /// Exact check that the block of `period` ops starting at `other` is an
  /// instance of the one starting at `first`: op for op the same
  /// computation, operands from inside the block at the same places, and
  /// operands from outside (the layer input, parameters) mapped one to one.
  bool sameBlock(int64_t first, int64_t other, int64_t period) const {
    DenseMap<Value, Value> outside;
    DenseMap<Value, Value> outsideInverse;
    for (int64_t k = 0; k < period; ++k) {
      Operation *x = ops[first + k], *y = ops[other + k];
      if (x->getName() != y->getName() ||
          x->getNumOperands() != y->getNumOperands() ||
          x->getResultTypes() != y->getResultTypes() ||
          attrs[first + k] != attrs[other + k])
        return false;
      for (auto [u, v] : llvm::zip(x->getOperands(), y->getOperands())) {
        int64_t du = definedAt(u), dv = definedAt(v);
        bool insideU = du >= first && du < first + period;
        bool insideV = dv >= other && dv < other + period;
        if (insideU != insideV)
          return false;
        if (insideU) {
          if (du - first != dv - other ||
              cast<OpResult>(u).getResultNumber() !=
                  cast<OpResult>(v).getResultNumber())
            return false;
          continue;
        }
        if (u.getType() != v.getType())
          return false;
        auto [it, inserted] = outside.try_emplace(u, v);
        auto [jt, insertedInverse] = outsideInverse.try_emplace(v, u);
        if (it->second != v || jt->second != u)
          return false;
      }
    }
    return true;
  }

  /// Position of the op defining `v`, or -1 for a function argument.
  int64_t definedAt(Value v) const {
    Operation *def = v.getDefiningOp();
    if (!def)
      return -1;
    auto it = index.find(def);
    return it == index.end() ? -1 : it->second;
  }
};

/// A run of `count` consecutive instances of a block of `period` ops, the
/// first starting at op `start`.
struct Run {
  int64_t start = 0, period = 0, count = 0;
  int64_t coverage() const { return period * count; }
};

/// Number of op results live across the boundary before each op position
/// (function arguments and constants are not counted: parameters do not
/// flow between layers, constants can be made anywhere).
static SmallVector<int64_t> liveAcrossBoundaries(const OpSequence &seq) {
  SmallVector<int64_t> diff(seq.size() + 2, 0);
  for (auto [i, op] : llvm::enumerate(seq.ops)) {
    // Constants can be rematerialised anywhere: they do not tie layers.
    if (op->hasTrait<OpTrait::ConstantLike>())
      continue;
    for (Value result : op->getResults()) {
      int64_t lastUse = static_cast<int64_t>(i);
      for (Operation *user : result.getUsers()) {
        auto it = seq.index.find(user);
        lastUse = std::max(lastUse,
                           it == seq.index.end() ? seq.size() : it->second);
      }
      if (lastUse > static_cast<int64_t>(i)) {
        ++diff[i + 1];
        --diff[lastUse + 1];
      }
    }
  }
  SmallVector<int64_t> live(seq.size() + 1, 0);
  int64_t running = 0;
  for (int64_t b = 0; b <= seq.size(); ++b) {
    running += diff[b];
    live[b] = running;
  }
  return live;
}

/// Candidate periods: the most frequent gaps between equal signatures in
/// [begin, end). A block repeated k times makes every one of its ops
/// contribute k-1 gaps of the block's length.
static SmallVector<int64_t> candidatePeriods(const OpSequence &seq,
                                             int64_t begin, int64_t end) {
  DenseMap<llvm::hash_code, int64_t> last;
  DenseMap<int64_t, int64_t> gapCount;
  for (int64_t i = begin; i < end; ++i) {
    auto [it, inserted] = last.try_emplace(seq.signature[i], i);
    if (!inserted) {
      ++gapCount[i - it->second];
      it->second = i;
    }
  }
  SmallVector<std::pair<int64_t, int64_t>> gaps(gapCount.begin(),
                                                gapCount.end());
  llvm::sort(gaps, [](auto a, auto b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  SmallVector<int64_t> periods;
  for (auto [gap, count] : gaps) {
    if (periods.size() == 8)
      break;
    if (gap >= 2)
      periods.push_back(gap);
  }
  return periods;
}

/// Whether instance `m` of `run` consumes something instance `m - 1`
/// produced: layers form a chain (the residual stream); side-by-side
/// repeats such as the Q, K and V projections of one layer do not.
static bool instancesChain(const OpSequence &seq, const Run &run) {
  if (run.count < 2)
    return false;
  int64_t begin = run.start + run.period, end = begin + run.period;
  for (int64_t i = begin; i < end; ++i)
    for (Value operand : seq.ops[i]->getOperands()) {
      int64_t d = seq.definedAt(operand);
      if (d >= run.start && d < begin)
        return true;
    }
  return false;
}

/// The best run in [begin, end): most ops covered, then the shorter period.
static std::optional<Run> findRun(const OpSequence &seq,
                                  ArrayRef<int64_t> live, int64_t begin,
                                  int64_t end, unsigned minRepeats) {
  std::optional<Run> best;
  for (int64_t period : candidatePeriods(seq, begin, end)) {
    int64_t i = begin;
    while (i + period < end) {
      if (!seq.sameSignature(i, i + period)) {
        ++i;
        continue;
      }
      // Ops [i, j + period) look periodic with this period.
      int64_t j = i;
      while (j + period < end && seq.sameSignature(j, j + period))
        ++j;
      int64_t regionEnd = j + period;
      // Put the layer boundary where the fewest values cross it (the
      // residual stream); among such places, the one that leaves the most
      // whole instances in the region (a transformer layer also has a
      // one-value cut between attention and MLP: a boundary there would
      // cut a layer in two at each end).
      int64_t phase = 0;
      auto instances = [&](int64_t p) { return (regionEnd - i - p) / period; };
      for (int64_t p = 1; p < period && i + p < regionEnd; ++p)
        if (live[i + p] < live[i + phase] ||
            (live[i + p] == live[i + phase] && instances(p) > instances(phase)))
          phase = p;
      Run run{i + phase, period, 1};
      // Keep the instances that are exact copies of the first.
      while (run.start + (run.count + 1) * period <= regionEnd &&
             seq.sameBlock(run.start, run.start + run.count * period, period))
        ++run.count;
      if (run.count >= static_cast<int64_t>(minRepeats) &&
          instancesChain(seq, run) &&
          (!best || run.coverage() > best->coverage() ||
           (run.coverage() == best->coverage() && period < best->period)))
        best = run;
      i = j + 1;
    }
  }
  return best;
}

/// Moves `op` just after `insertionPoint` (the top of `body` when null),
/// which then becomes `op`: ops moved in turn keep their order.
static void moveToTop(Block &body, Operation &op, Operation *&insertionPoint) {
  if (insertionPoint)
    op.moveAfter(insertionPoint);
  else
    op.moveBefore(&body, body.begin());
  insertionPoint = &op;
}

/// Moves operand-free constants to the top of the function, in order, and
/// merges equal ones. Exporters share small constants (0.5 in GELU, the
/// mask fill value) between layers, so the first layer would otherwise hold
/// the constants all layers use and differ from the others; generators that
/// repeat them per layer would list each a hundred times.
static void hoistConstants(Block &body) {
  Operation *insertionPoint = nullptr;
  llvm::DenseMap<std::pair<Attribute, Type>, Operation *> seen;
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
    if (op.getNumOperands() != 0 || op.getNumResults() != 1 ||
        !op.hasTrait<OpTrait::ConstantLike>())
      continue;
    auto constant = dyn_cast<ConstantOp>(op);
    TypedAttr value =
        constant ? dyn_cast<TypedAttr>(constant.getValue()) : TypedAttr();
    if (value) {
      auto [it, inserted] =
          seen.try_emplace({value, op.getResult(0).getType()}, &op);
      if (!inserted) {
        op.getResult(0).replaceAllUsesWith(it->second->getResult(0));
        op.erase();
        continue;
      }
    }
    moveToTop(body, op, insertionPoint);
  }
}

/// What a value is computed from: data inputs, parameters, both (the
/// residual stream starts where the embedding reads ids and a table) or
/// neither (constants).
enum Sources : unsigned {
  kNoSource = 0,
  kFromInput = 1,
  kFromParameter = 2,
  kFromBoth = 3
};

static unsigned sourcesOfArgument(BlockArgument arg) {
  auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
  auto kind = func ? func.getArgAttrOfType<StringAttr>(
                         arg.getArgNumber(), BmDialect::kParamKindAttrName)
                   : StringAttr();
  // An argument of no known kind may be either.
  if (!kind)
    return kFromBoth;
  if (kind.getValue() == BmDialect::kKindParameter)
    return kFromParameter;
  return kind.getValue() == BmDialect::kKindInput ? kFromInput : kFromBoth;
}

/// The ops that compute from inputs alone or from parameters alone (and
/// constants): the same value whichever layer computes it.
static DenseSet<Operation *> layerInvariantOps(Block &body) {
  DenseMap<Value, unsigned> sources;
  auto sourcesOf = [&](Value v) -> unsigned {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return sourcesOfArgument(arg);
    auto it = sources.find(v);
    return it == sources.end() ? kFromBoth : it->second;
  };
  DenseSet<Operation *> invariant;
  for (Operation &op : body.without_terminator()) {
    unsigned from = kNoSource;
    for (Value operand : op.getOperands())
      from |= sourcesOf(operand);
    if (op.getNumRegions() != 0 || !isPure(&op))
      from = kFromBoth;
    for (Value result : op.getResults())
      sources[result] = from;
    if (from != kFromBoth && !op.hasTrait<OpTrait::ConstantLike>())
      invariant.insert(&op);
  }
  return invariant;
}

/// Moves what all layers share to just after the hoisted constants: rotary
/// tables, masks and position ids, which exporters compute once inside the
/// first layer (Llama, Qwen, Gemma, Falcon), so that layer would differ from
/// the others and the model would fold one layer short. Shared means layer
/// invariant and read by ops at least half a layer apart, the layer's
/// length being the sequence's most frequent period: a value two layers
/// read. An invariant op every layer repeats (a weight's transpose, each
/// layer's own unsqueeze of the rotary table) is read within its layer and
/// stays there. With a shared op go the invariant ops it is made from.
static void hoistSharedValues(Block &body) {
  DenseSet<Operation *> invariant = layerInvariantOps(body);
  OpSequence seq(body);
  SmallVector<int64_t> periods = candidatePeriods(seq, 0, seq.size());
  if (periods.empty())
    return;
  int64_t halfLayer = std::max<int64_t>(1, periods.front() / 2);
  SetVector<Operation *> shared;
  for (Operation *op : seq.ops) {
    if (!invariant.contains(op))
      continue;
    int64_t first = seq.size(), last = -1;
    for (Operation *user : op->getUsers()) {
      auto it = seq.index.find(user);
      int64_t at = it == seq.index.end() ? seq.size() : it->second;
      first = std::min(first, at);
      last = std::max(last, at);
    }
    if (last - first >= halfLayer)
      shared.insert(op);
  }
  // The producers of shared values, found backwards; the worklist grows.
  for (size_t i = 0; i < shared.size(); ++i)
    for (Value operand : shared[i]->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && invariant.contains(def))
        shared.insert(def);
  Operation *insertionPoint = nullptr;
  for (Operation &op : body.without_terminator())
    if (op.hasTrait<OpTrait::ConstantLike>() && op.getNumOperands() == 0)
      insertionPoint = &op;
    else
      break;
  // Program order keeps every producer before its users.
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator()))
    if (shared.contains(&op))
      moveToTop(body, op, insertionPoint);
}

struct FoldPass : impl::BmFoldPassBase<FoldPass> {
  using BmFoldPassBase::BmFoldPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    hoistConstants(func.getBody().front());
    hoistSharedValues(func.getBody().front());
    OpSequence seq(func.getBody().front());
    SmallVector<int64_t> live = liveAcrossBoundaries(seq);

    // Find runs greedily, largest first, in the stretches not yet folded.
    SmallVector<Run> runs;
    SmallVector<std::pair<int64_t, int64_t>> stretches = {{0, seq.size()}};
    while (!stretches.empty()) {
      auto [begin, end] = stretches.pop_back_val();
      std::optional<Run> run = findRun(seq, live, begin, end, minRepeats);
      if (!run)
        continue;
      runs.push_back(*run);
      stretches.push_back({begin, run->start});
      stretches.push_back({run->start + run->coverage(), end});
    }
    llvm::sort(runs, [](const Run &a, const Run &b) { return a.start < b.start; });

    // Runs whose blocks are the same op for op share a block class.
    SmallVector<int64_t> classOfRun;
    int64_t numClasses = 0;
    for (auto [r, run] : llvm::enumerate(runs)) {
      int64_t cls = -1;
      for (size_t q = 0; q < r && cls < 0; ++q) {
        const Run &other = runs[q];
        if (other.period != run.period)
          continue;
        if (seq.sameBlock(other.start, run.start, run.period))
          cls = classOfRun[q];
      }
      if (cls < 0)
        cls = numClasses++;
      classOfRun.push_back(cls);
    }

    Builder builder(func.getContext());
    int64_t layer = 0;
    for (auto [run, cls] : llvm::zip(runs, classOfRun)) {
      for (int64_t m = 0; m < run.count; ++m, ++layer)
        for (int64_t k = 0; k < run.period; ++k) {
          Operation *op = seq.ops[run.start + m * run.period + k];
          op->setAttr(BmDialect::kLayerAttrName,
                      builder.getI64IntegerAttr(layer));
          op->setAttr(BmDialect::kBlockClassAttrName,
                      builder.getI64IntegerAttr(cls));
        }
    }
  }
};

} // namespace
} // namespace mlir::bm
