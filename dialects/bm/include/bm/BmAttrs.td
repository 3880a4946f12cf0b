//===- BmAttrs.td - mesh and sharding attributes -----------*- tablegen -*-===//

#ifndef BM_ATTRS_TD
#define BM_ATTRS_TD

include "bm/BmDialect.td"

def Bm_MeshAttr : Bm_Attr<"Mesh", "mesh"> {
  let summary = "a device mesh with named axes";
  let description = [{
    `<["dp"=4, "tp"=8, "pp"=2]>`: named axes and their sizes, major to
    minor. Device d has coordinates given by d in row-major order, so the last
    axis is the one whose devices are adjacent (inside a node).
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$axisNames,
                        ArrayRefParameter<"int64_t">:$axisSizes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Index of the axis called `name`, or -1.
    int64_t findAxis(::llvm::StringRef name) const;
  }];
}

def Bm_ShardingAttr : Bm_Attr<"Sharding", "sharding"> {
  let summary = "how a tensor is split over the axes of a mesh";
  let description = [{
    `<@mesh, [{"dp"}, {}, {"tp"} ]>` lists, for each tensor dimension, the
    mesh axes that split it (major to minor); `partial={"tp"}` names the axes
    over which the value is a partial sum that is not yet reduced. An axis
    appears at most once in all of a sharding.
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$mesh,
                        "::mlir::ArrayAttr":$dims,
                        "::mlir::ArrayAttr":$partial);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axes splitting dimension `dim`.
    ::llvm::SmallVector<::llvm::StringRef> getDimAxes(int64_t dim) const;
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxes() const;
    /// Checks this sharding against a tensor type and the mesh it names:
    /// the rank matches, every axis exists, and every sharded dimension
    /// divides evenly by the product of its axes.
    ::llvm::LogicalResult verifyFor(::mlir::Type type, MeshAttr mesh,
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError) const;
  }];
}

#endif // BM_ATTRS_TD
