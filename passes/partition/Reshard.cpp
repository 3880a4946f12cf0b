//===- Reshard.cpp - collectives that move a value between shardings ------===//

#include "passes/partition/Reshard.h"

#include "bm/BmOps.h"

#include <algorithm>
#include <optional>

namespace mlir::bm {

namespace {

AxisList minus(const AxisList &from, const AxisList &remove) {
  AxisList kept;
  for (const std::string &axis : from)
    if (std::find(remove.begin(), remove.end(), axis) == remove.end())
      kept.push_back(axis);
  return kept;
}

size_t commonPrefix(const AxisList &a, const AxisList &b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n])
    ++n;
  return n;
}

bool sameAxes(AxisList a, AxisList b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

/// Emits one collective at a time, keeping the current value and sharding.
struct Mover {
  OpBuilder &b;
  Location loc;
  ShardingState &state;
  Value current;
  ValueSharding sharding;

  ArrayAttr axesAttr(const AxisList &axes) {
    SmallVector<StringRef> names(axes.begin(), axes.end());
    return b.getStrArrayAttr(names);
  }
  /// Values keep their global type until partitioning ends.
  Type type() { return current.getType(); }
  /// Strided dims of the value, which the collectives leave as they are
  /// (each moves other dims, or reduces).
  SmallVector<StridedDim, 1> strided;

  void record(Value made, ValueSharding now) {
    current = made;
    sharding = std::move(now);
    state.of[made] = sharding;
    if (!strided.empty())
      state.strided[made] = strided;
  }

  void reducePartials(const ValueSharding &to) {
    AxisList extra = minus(sharding.partial, to.partial);
    if (extra.empty())
      return;
    ValueSharding now = sharding;
    now.partial = minus(sharding.partial, extra);
    for (size_t d = 0; d < to.dims.size(); ++d) {
      if (!sharding.dims[d].empty() || !sameAxes(to.dims[d], extra))
        continue;
      now.dims[d] = to.dims[d];
      return record(ReduceScatterOp::create(b, loc, type(), current,
                                            state.meshRef,
                                            axesAttr(to.dims[d]),
                                            b.getI64IntegerAttr(d), nullptr),
                    now);
    }
    record(AllReduceOp::create(b, loc, type(), current, state.meshRef,
                               axesAttr(extra), nullptr),
           now);
  }

  /// Axes that leave the minor end of one dim for the minor end of
  /// another: one all_to_all (the tokens of expert parallelism).
  void moveAxes(const ValueSharding &to) {
    for (size_t from = 0; from < to.dims.size(); ++from) {
      const AxisList &have = sharding.dims[from];
      size_t keep = commonPrefix(have, to.dims[from]);
      AxisList moving(have.begin() + keep, have.end());
      if (moving.empty())
        continue;
      for (size_t into = 0; into < to.dims.size(); ++into) {
        AxisList grown = sharding.dims[into];
        grown.insert(grown.end(), moving.begin(), moving.end());
        if (into == from || to.dims[into] != grown)
          continue;
        ValueSharding now = sharding;
        now.dims[into] = grown;
        now.dims[from].resize(keep);
        record(AllToAllOp::create(b, loc, type(), current, state.meshRef,
                                  axesAttr(moving), b.getI64IntegerAttr(into),
                                  b.getI64IntegerAttr(from)),
               now);
        break;
      }
    }
  }

  /// Keeps the longest prefix of each dim's axes that `to` keeps too.
  void gather(const ValueSharding &to) {
    for (size_t d = 0; d < to.dims.size(); ++d) {
      const AxisList &have = sharding.dims[d];
      size_t common = commonPrefix(have, to.dims[d]);
      if (common == have.size())
        continue;
      ValueSharding now = sharding;
      AxisList dropped(have.begin() + common, have.end());
      now.dims[d].resize(common);
      record(AllGatherOp::create(b, loc, type(), current, state.meshRef,
                                 axesAttr(dropped), b.getI64IntegerAttr(d)),
             now);
    }
  }

  void slice(const ValueSharding &to) {
    for (size_t d = 0; d < to.dims.size(); ++d) {
      const AxisList &have = sharding.dims[d], &want = to.dims[d];
      if (want.size() == have.size())
        continue;
      ValueSharding now = sharding;
      now.dims[d] = want;
      AxisList added(want.begin() + have.size(), want.end());
      record(ShardSliceOp::create(b, loc, type(), current, state.meshRef,
                                  axesAttr(added), b.getI64IntegerAttr(d)),
             now);
    }
  }
};

} // namespace

/// Whether `value`, a broadcast (expand) that one op alone reads, can be
/// made in the sharding `to` in place: `to` only adds axes to dims the
/// broadcast creates, so each device broadcasts to its own share (ViT's
/// class token expanded over the batch: split over dp, its gradient is a
/// partial sum over dp like any parameter's, not gathered).
static bool broadcastsInto(Value value, const ValueSharding &to,
                           const ShardingState &state) {
  auto expand = value.getDefiningOp<ExpandOp>();
  // (A reshard's gradient reads its input for the sharding alone.)
  auto readers = llvm::count_if(value.getUsers(), [](Operation *user) {
    return !isa<ReshardGradOp>(user);
  });
  if (!expand || readers != 1 || state.strided.count(value))
    return false;
  const ValueSharding &have = state[value];
  if (have.partial != to.partial || have.dims.size() != to.dims.size())
    return false;
  auto in = cast<RankedTensorType>(expand.getInput().getType());
  auto out = cast<RankedTensorType>(expand.getType());
  int64_t offset = out.getRank() - in.getRank();
  bool adds = false;
  for (size_t d = 0; d < to.dims.size(); ++d) {
    if (to.dims[d] == have.dims[d])
      continue;
    int64_t from = static_cast<int64_t>(d) - offset;
    bool broadcast = from < 0 || in.getDimSize(from) == 1;
    if (!broadcast || !have.dims[d].empty())
      return false;
    adds = true;
  }
  return adds;
}

FailureOr<Value> reshardValue(OpBuilder &b, Location loc, Value value,
                              const ValueSharding &to, ShardingState &state) {
  if (broadcastsInto(value, to, state)) {
    state.of[value] = to;
    return value;
  }
  // A strided dim that changes its axes is made whole first.
  SmallVector<StridedDim, 1> strided = state.strided.lookup(value);
  llvm::sort(strided, [](const StridedDim &a, const StridedDim &b) {
    return a.dim > b.dim;
  });
  for (const StridedDim &dim : strided) {
    if (dim.dim < to.dims.size() && to.dims[dim.dim] == dim.axes())
      continue;
    FailureOr<Value> whole = fromStrided(b, loc, value, dim, state);
    if (failed(whole))
      return failure();
    value = *whole;
  }
  Mover mover{b, loc, state, value, state[value], state.strided.lookup(value)};
  if (mover.sharding == to)
    return value;
  if (!minus(to.partial, mover.sharding.partial).empty())
    return emitError(loc, "cannot make a partial sum of a value sharded ")
           << mover.sharding.str() << " (wanted " << to.str() << ")";
  mover.reducePartials(to);
  mover.moveAxes(to);
  mover.gather(to);
  mover.slice(to);
  return mover.current;
}

namespace {

/// `value` (global type) with dim `dim.dim` seen as its factors, labelled
/// like `sharding` with the factors split as `dim` says where `split`, else
/// whole.
Value splitDim(OpBuilder &b, Location loc, Value value, const StridedDim &dim,
               ValueSharding sharding, bool split, ShardingState &state) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape().take_front(dim.dim));
  shape.append(dim.factorSizes.begin(), dim.factorSizes.end());
  shape.append(type.getShape().begin() + dim.dim + 1, type.getShape().end());
  Value factored = ReshapeOp::create(b, loc, type.clone(shape), value);
  sharding.dims.erase(sharding.dims.begin() + dim.dim);
  sharding.dims.insert(sharding.dims.begin() + dim.dim,
                       dim.factorSizes.size(), AxisList{});
  if (split)
    for (size_t i = 0; i < dim.factorAxes.size(); ++i)
      sharding.dims[dim.dim + i] = dim.factorAxes[i];
  state.of[factored] = sharding;
  return factored;
}

/// `sharding` of the factored value with the dim's factors whole.
ValueSharding factorsWhole(ValueSharding sharding, const StridedDim &dim) {
  for (size_t i = 0; i < dim.factorSizes.size(); ++i)
    sharding.dims[dim.dim + i].clear();
  return sharding;
}

/// The merged form of a value `splitDim` made, labelled like `like`.
Value mergeDim(OpBuilder &b, Location loc, Value split, Type type,
               const ValueSharding &like, ShardingState &state) {
  Value merged = ReshapeOp::create(b, loc, type, split);
  state.of[merged] = like;
  return merged;
}

} // namespace

/// A strided `value` made whole along the dim: its factors, the split one
/// gathered, merged again.
FailureOr<Value> fromStrided(OpBuilder &b, Location loc, Value value,
                             const StridedDim &dim, ShardingState &state) {
  ValueSharding label = state[value];
  Value split = splitDim(b, loc, value, dim, label, /*split=*/true, state);
  FailureOr<Value> gathered =
      reshardValue(b, loc, split, factorsWhole(state[split], dim), state);
  if (failed(gathered))
    return failure();
  label.dims[dim.dim].clear();
  Value merged = mergeDim(b, loc, *gathered, value.getType(), label, state);
  // The other dims (all before this one: destrided goes from the last)
  // keep their layout.
  for (const StridedDim &other : state.strided.lookup(value))
    if (other.dim != dim.dim)
      state.strided[merged].push_back(other);
  return merged;
}

/// The contiguous split of a dim over `axes` seen per factor: the axes
/// fill the factors major to minor (a factor takes axes while their
/// devices divide it), or none where they do not fit.
std::optional<StridedDim> contiguousFactors(const StridedDim &like,
                                            const AxisList &axes,
                                            MeshAttr mesh) {
  StridedDim dim = like;
  size_t next = 0;
  for (size_t i = 0; i < dim.factorSizes.size(); ++i) {
    dim.factorAxes[i].clear();
    int64_t left = dim.factorSizes[i];
    while (next < axes.size() && left % groupSize(mesh, {axes[next]}) == 0) {
      left /= groupSize(mesh, {axes[next]});
      dim.factorAxes[i].push_back(axes[next++]);
    }
    if (next < axes.size() && left > 1 && !dim.factorAxes[i].empty())
      return std::nullopt; // a factor partly split, the next one too
  }
  if (next != axes.size() || !dim.contiguous(mesh))
    return std::nullopt;
  return dim;
}

FailureOr<Value> toStrided(OpBuilder &b, Location loc, Value value,
                           const StridedDim &dim, const ValueSharding &want,
                           ShardingState &state) {
  // From the contiguous split seen per factor, where it is one: each factor
  // then moves on its own (often a slice); else from the whole dim.
  ValueSharding whole = state[value];
  std::optional<StridedDim> have =
      contiguousFactors(dim, whole.dims[dim.dim], state.mesh);
  FailureOr<Value> source = value;
  if (!have) {
    whole.dims[dim.dim].clear();
    source = reshardValue(b, loc, value, whole, state);
  }
  if (failed(source))
    return failure();
  Value factored = have ? splitDim(b, loc, *source, *have, whole,
                                   /*split=*/true, state)
                        : splitDim(b, loc, *source, dim, whole,
                                   /*split=*/false, state);
  whole.dims[dim.dim].clear();
  ValueSharding sliced = state[factored];
  for (size_t i = 0; i < dim.factorAxes.size(); ++i)
    sliced.dims[dim.dim + i] = dim.factorAxes[i];
  FailureOr<Value> share = reshardValue(b, loc, factored, sliced, state);
  if (failed(share))
    return failure();
  ValueSharding label = whole;
  label.dims[dim.dim] = want.dims[dim.dim];
  Value merged = mergeDim(b, loc, *share, value.getType(), label, state);
  for (const StridedDim &other : state.strided.lookup(value))
    if (other.dim != dim.dim)
      state.strided[merged].push_back(other);
  state.strided[merged].push_back(dim);
  return merged;
}

FailureOr<Value> destrided(OpBuilder &b, Location loc, Value value,
                           ShardingState &state) {
  auto it = state.strided.find(value);
  if (it == state.strided.end())
    return value;
  SmallVector<StridedDim, 1> dims = it->second;
  llvm::sort(dims, [](const StridedDim &a, const StridedDim &b) {
    return a.dim > b.dim;
  });
  for (const StridedDim &dim : dims) {
    FailureOr<Value> whole = fromStrided(b, loc, value, dim, state);
    if (failed(whole))
      return failure();
    value = *whole;
  }
  return value;
}

bool StridedDim::contiguous(MeshAttr mesh) const {
  bool partlyHeld = false;
  for (size_t i = 0; i < factorSizes.size(); ++i) {
    int64_t devices = groupSize(mesh, factorAxes[i]);
    if (partlyHeld && devices > 1)
      return false;
    partlyHeld |= factorSizes[i] / devices > 1;
  }
  return true;
}

Value scaledValue(OpBuilder &b, Location loc, Value value, double factor,
                  ShardingState &state) {
  auto type = cast<RankedTensorType>(value.getType());
  auto scalarType = RankedTensorType::get({}, type.getElementType());
  Value scale = ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(scalarType,
                             b.getFloatAttr(type.getElementType(), factor)));
  Value product = MulOp::create(b, loc, value, scale);
  // A copy: inserting into `of` may move what state[value] refers to.
  ValueSharding sharding = state[value];
  state.of[scale] = ValueSharding::replicated(0);
  state.of[product] = std::move(sharding);
  // The product holds the shares as the value does (a strided loss
  // gradient: rows of a batch and a split sequence flattened).
  if (auto strided = state.strided.find(value); strided != state.strided.end())
    state.strided[product] = SmallVector<StridedDim, 1>(strided->second);
  return product;
}

} // namespace mlir::bm
