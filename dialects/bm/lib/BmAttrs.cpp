//===- BmAttrs.cpp - mesh and sharding attributes -------------------------===//
//
// Assembly:
//   #bm.mesh<["dp"=4, "tp"=8]>
//   #bm.sharding<@mesh, [{"dp"}, {}, {"tp"}], partial={"tp"}>
//
//===----------------------------------------------------------------------===//

#include "bm/BmAttrs.h"
#include "bm/BmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::bm;

#define GET_ATTRDEF_CLASSES
#include "bm/BmAttrs.cpp.inc"

void BmDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "bm/BmAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SmallVector<StringAttr> names;
  SmallVector<int64_t> sizes;
  auto parseAxis = [&]() -> ParseResult {
    std::string name;
    int64_t size;
    if (parser.parseString(&name) || parser.parseEqual() ||
        parser.parseInteger(size))
      return failure();
    names.push_back(parser.getBuilder().getStringAttr(name));
    sizes.push_back(size);
    return success();
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                     parseAxis) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<MeshAttr>(parser.getContext(), names, sizes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  for (auto [i, name, size] :
       llvm::enumerate(getAxisNames(), getAxisSizes())) {
    if (i)
      printer << ", ";
    printer << "\"" << name.getValue() << "\"=" << size;
  }
  printer << "]>";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<StringAttr> names,
                               ArrayRef<int64_t> sizes) {
  if (names.size() != sizes.size())
    return emitError() << "mesh has " << names.size() << " axis names but "
                       << sizes.size() << " sizes";
  llvm::SmallSet<StringRef, 4> seen;
  for (auto [name, size] : llvm::zip(names, sizes)) {
    if (name.getValue().empty())
      return emitError() << "mesh axis names must not be empty";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis \"" << name.getValue()
                         << "\" appears twice";
    if (size < 1)
      return emitError() << "mesh axis \"" << name.getValue()
                         << "\" has size " << size << ", expected >= 1";
  }
  return success();
}

int64_t MeshAttr::findAxis(StringRef name) const {
  for (auto [i, axis] : llvm::enumerate(getAxisNames()))
    if (axis.getValue() == name)
      return static_cast<int64_t>(i);
  return -1;
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

/// Parses `{"a", "b"}` into an array of string attributes.
static ParseResult parseAxisSet(AsmParser &parser, ArrayAttr &result) {
  SmallVector<Attribute> axes;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Braces, [&] {
        std::string name;
        if (parser.parseString(&name))
          return failure();
        axes.push_back(parser.getBuilder().getStringAttr(name));
        return success();
      }))
    return failure();
  result = parser.getBuilder().getArrayAttr(axes);
  return success();
}

static void printAxisSet(AsmPrinter &printer, ArrayAttr axes) {
  printer << "{";
  llvm::interleaveComma(axes, printer, [&](Attribute axis) {
    printer << "\"" << cast<StringAttr>(axis).getValue() << "\"";
  });
  printer << "}";
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  FlatSymbolRefAttr mesh;
  SmallVector<Attribute> dims;
  ArrayAttr partial = parser.getBuilder().getArrayAttr({});
  if (parser.parseLess() || parser.parseAttribute(mesh) ||
      parser.parseComma() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        ArrayAttr axes;
        if (parseAxisSet(parser, axes))
          return failure();
        dims.push_back(axes);
        return success();
      }))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        parseAxisSet(parser, partial))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ShardingAttr>(
      parser.getContext(), mesh, parser.getBuilder().getArrayAttr(dims),
      partial);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<" << getMesh() << ", [";
  llvm::interleaveComma(getDims(), printer, [&](Attribute dim) {
    printAxisSet(printer, cast<ArrayAttr>(dim));
  });
  printer << "]";
  if (!getPartial().empty()) {
    printer << ", partial=";
    printAxisSet(printer, getPartial());
  }
  printer << ">";
}

LogicalResult
ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     FlatSymbolRefAttr mesh, ArrayAttr dims,
                     ArrayAttr partial) {
  if (!mesh)
    return emitError() << "sharding needs a mesh symbol";
  llvm::SmallSet<StringRef, 4> seen;
  auto checkAxis = [&](Attribute axis) -> LogicalResult {
    auto name = dyn_cast<StringAttr>(axis);
    if (!name)
      return emitError() << "sharding axes must be strings, got " << axis;
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis \"" << name.getValue()
                         << "\" is used more than once in a sharding";
    return success();
  };
  for (Attribute dim : dims) {
    auto axes = dyn_cast<ArrayAttr>(dim);
    if (!axes)
      return emitError() << "sharding dims must be arrays of axes, got "
                         << dim;
    for (Attribute axis : axes)
      if (failed(checkAxis(axis)))
        return failure();
  }
  for (Attribute axis : partial)
    if (failed(checkAxis(axis)))
      return failure();
  return success();
}

SmallVector<StringRef> mlir::bm::axisNamesOf(ArrayAttr axes) {
  SmallVector<StringRef> names;
  for (Attribute axis : axes)
    names.push_back(cast<StringAttr>(axis).getValue());
  return names;
}

SmallVector<StringRef> ShardingAttr::getDimAxes(int64_t dim) const {
  return axisNamesOf(cast<ArrayAttr>(getDims()[dim]));
}

SmallVector<StringRef> ShardingAttr::getPartialAxes() const {
  return axisNamesOf(getPartial());
}

LogicalResult
ShardingAttr::verifyFor(Type type, MeshAttr mesh,
                        function_ref<InFlightDiagnostic()> emitError) const {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return emitError() << "a sharding needs a ranked tensor, got " << type;
  if (static_cast<int64_t>(getDims().size()) != tensor.getRank())
    return emitError() << "sharding has " << getDims().size()
                       << " dims for a tensor of rank " << tensor.getRank();
  auto axisSize = [&](StringRef axis) -> int64_t {
    int64_t index = mesh.findAxis(axis);
    return index < 0 ? -1 : mesh.getAxisSizes()[index];
  };
  for (StringRef axis : getPartialAxes())
    if (axisSize(axis) < 0)
      return emitError() << "sharding names axis \"" << axis
                         << "\" that mesh " << getMesh() << " lacks";
  for (int64_t dim = 0; dim < tensor.getRank(); ++dim) {
    int64_t parts = 1;
    for (StringRef axis : getDimAxes(dim)) {
      int64_t size = axisSize(axis);
      if (size < 0)
        return emitError() << "sharding names axis \"" << axis
                           << "\" that mesh " << getMesh() << " lacks";
      parts *= size;
    }
    if (tensor.getDimSize(dim) % parts != 0)
      return emitError() << "dim " << dim << " of size "
                         << tensor.getDimSize(dim)
                         << " does not divide evenly into " << parts
                         << " shards";
  }
  return success();
}
