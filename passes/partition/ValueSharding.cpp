//===- ValueSharding.cpp - a value's sharding while partitioning ----------===//

#include "passes/partition/ValueSharding.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <algorithm>

namespace mlir::bm {

ValueSharding ValueSharding::replicated(int64_t rank) {
  ValueSharding sharding;
  sharding.dims.assign(rank, {});
  return sharding;
}

ValueSharding ValueSharding::fromAttr(ShardingAttr attr) {
  ValueSharding sharding;
  for (int64_t d = 0; d < static_cast<int64_t>(attr.getDims().size()); ++d) {
    AxisList axes;
    for (StringRef axis : attr.getDimAxes(d))
      axes.push_back(axis.str());
    sharding.dims.push_back(axes);
  }
  for (StringRef axis : attr.getPartialAxes())
    sharding.partial.push_back(axis.str());
  std::sort(sharding.partial.begin(), sharding.partial.end());
  return sharding;
}

static ArrayAttr axesAttr(MLIRContext *context, const AxisList &axes) {
  SmallVector<Attribute> names;
  for (const std::string &axis : axes)
    names.push_back(StringAttr::get(context, axis));
  return ArrayAttr::get(context, names);
}

ShardingAttr ValueSharding::toAttr(MLIRContext *context,
                                   FlatSymbolRefAttr mesh) const {
  SmallVector<Attribute> dimAttrs;
  for (const AxisList &axes : dims)
    dimAttrs.push_back(axesAttr(context, axes));
  return ShardingAttr::get(context, mesh, ArrayAttr::get(context, dimAttrs),
                           axesAttr(context, partial));
}

ValueSharding ValueSharding::withoutPartial() const {
  ValueSharding whole = *this;
  whole.partial.clear();
  return whole;
}

static std::string braces(const AxisList &axes) {
  std::string text = "{";
  for (size_t i = 0; i < axes.size(); ++i)
    text += (i ? ", " : "") + axes[i];
  return text + "}";
}

std::string ValueSharding::str() const {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d)
    text += (d ? ", " : "") + braces(dims[d]);
  text += "]";
  if (!partial.empty())
    text += " partial=" + braces(partial);
  return text;
}

int64_t groupSize(MeshAttr mesh, const AxisList &axes) {
  int64_t size = 1;
  for (const std::string &axis : axes) {
    int64_t index = mesh.findAxis(axis);
    if (index >= 0)
      size *= mesh.getAxisSizes()[index];
  }
  return size;
}

RankedTensorType localType(RankedTensorType global,
                           const ValueSharding &sharding, MeshAttr mesh) {
  SmallVector<int64_t> shape(global.getShape());
  for (size_t d = 0; d < shape.size() && d < sharding.dims.size(); ++d)
    shape[d] /= groupSize(mesh, sharding.dims[d]);
  return RankedTensorType::get(shape, global.getElementType());
}

} // namespace mlir::bm
