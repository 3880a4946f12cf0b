//===- NodeContext.h - what an op importer sees of one ONNX node -*- C++
//-*-===//
//
// Op importers (OpImporters.cpp) and host folders (ShapeFolding.cpp) are
// functions of a NodeContext: the node's inputs (each an mlir::Value, a host
// constant or both), its attributes, and ways to create bm ops with checked
// result types and to report one-line errors naming the node.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_IMPORT_NODECONTEXT_H
#define BMC_IMPORT_NODECONTEXT_H

#include "import/HostTensor.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>

namespace bm::import {

/// What one ONNX value is while importing: an SSA value, a host constant,
/// or both once the constant has been materialised; or a sequence of host
/// constants (SequenceEmpty / SequenceInsert in loops the importer
/// evaluates), which never becomes an SSA value.
struct ImportedValue {
  mlir::Value value;
  std::optional<HostTensor> host;
  std::optional<std::vector<HostTensor>> sequence;
};

/// State shared by all nodes of one graph.
struct GraphState {
  mlir::OpBuilder builder;
  llvm::StringMap<ImportedValue> values;
  /// The last error diagnostic MLIR emitted (inference, verifiers).
  std::string lastDiagnostic;
  /// The first error; import stops at it.
  std::string error;

  explicit GraphState(mlir::MLIRContext *context) : builder(context) {}
};

class NodeContext {
public:
  NodeContext(GraphState &graph, const onnx::NodeProto &node, int64_t opset,
              mlir::Location loc)
      : graph(graph), node(node), opset(opset), loc(loc) {}

  const onnx::NodeProto &proto() const { return node; }
  int64_t getOpset() const { return opset; }
  mlir::OpBuilder &builder() { return graph.builder; }
  mlir::MLIRContext *context() { return graph.builder.getContext(); }

  //===--- inputs ---------------------------------------------------------===//
  unsigned numInputs() const { return node.input_size(); }
  /// Optional inputs may be missing or named "".
  bool hasInput(unsigned i) const {
    return i < static_cast<unsigned>(node.input_size()) &&
           !node.input(i).empty();
  }
  /// The host constant of input i, or null.
  const HostTensor *host(unsigned i) const;
  /// The host sequence of input i, or null.
  const std::vector<HostTensor> *hostSequence(unsigned i) const;
  /// Input i as an SSA value (host constants become bm.constant once).
  mlir::FailureOr<mlir::Value> value(unsigned i);
  /// Appends optional input i to `operands` when the node gives it.
  mlir::LogicalResult appendIfGiven(unsigned i,
                                    llvm::SmallVectorImpl<mlir::Value> &operands);
  /// The tensor type of input i (also for host constants).
  mlir::RankedTensorType type(unsigned i) const;
  /// Input i must be a host constant of integers (shape, axes, k...).
  mlir::FailureOr<std::vector<int64_t>> constInts(unsigned i,
                                                  llvm::StringRef what);
  /// The `axes` of a node: the attribute of older opsets or constant input
  /// i of newer ones; nullopt when the node gives neither.
  mlir::FailureOr<std::optional<std::vector<int64_t>>> axes(unsigned i);
  /// All present inputs are host constants or host sequences.
  bool allInputsOnHost() const;
  /// A sequence reaching an op that does not take sequences (every op but
  /// the sequence ops and Loop) is this node's error.
  mlir::LogicalResult checkSequenceInputs();

  //===--- outputs --------------------------------------------------------===//
  unsigned numOutputs() const { return node.output_size(); }
  bool hasOutput(unsigned i) const {
    return i < static_cast<unsigned>(node.output_size()) &&
           !node.output(i).empty();
  }
  void setOutput(unsigned i, mlir::Value value);
  void setOutput(unsigned i, HostTensor tensor);
  void setSequenceOutput(unsigned i, std::vector<HostTensor> sequence);
  /// Binds `name` in the graph's values (a loop body's inputs, a branch's
  /// outputs); for control flow evaluated on the host.
  void bind(const std::string &name, ImportedValue value);
  /// The value named `name`, or null.
  const ImportedValue *lookup(const std::string &name) const;
  GraphState &graphState() { return graph; }

  //===--- attributes -----------------------------------------------------===//
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  int64_t getInt(llvm::StringRef name, int64_t fallback) const;
  float getFloat(llvm::StringRef name, float fallback) const;
  std::string getString(llvm::StringRef name, llvm::StringRef fallback) const;
  std::optional<std::vector<int64_t>> getInts(llvm::StringRef name) const;
  /// The attribute `name` if it has one of the `accepted` types (the first
  /// is the one an error names); an attribute of another type records the
  /// node's error and reads as absent.
  const onnx::AttributeProto *
  typedAttr(llvm::StringRef name,
            std::initializer_list<onnx::AttributeProto::AttributeType>
                accepted) const;

  //===--- building -------------------------------------------------------===//
  /// Creates `opName` from operands and attributes. Result types are
  /// inferred by the op unless given; an inference or verifier failure is
  /// reported as this node's error.
  mlir::FailureOr<mlir::Operation *>
  create(llvm::StringRef opName, mlir::ValueRange operands,
         llvm::ArrayRef<mlir::NamedAttribute> attrs = {},
         mlir::TypeRange resultTypes = {}, unsigned numResults = 1);
  /// Single-result form of create().
  mlir::FailureOr<mlir::Value>
  build(llvm::StringRef opName, mlir::ValueRange operands,
        llvm::ArrayRef<mlir::NamedAttribute> attrs = {},
        mlir::Type resultType = {});
  /// create() and build() of the bm op class `OpTy` (nc.build<AddOp>(...)).
  /// They go through the generic path above rather than `OpTy::create`:
  /// the generated inferring builders abort on bad input (an axis out of
  /// range, shapes that do not broadcast) where the importer must report it
  /// as the node's error.
  template <typename OpTy>
  mlir::FailureOr<mlir::Operation *>
  create(mlir::ValueRange operands,
         llvm::ArrayRef<mlir::NamedAttribute> attrs = {},
         mlir::TypeRange resultTypes = {}, unsigned numResults = 1) {
    return create(OpTy::getOperationName(), operands, attrs, resultTypes,
                  numResults);
  }
  template <typename OpTy>
  mlir::FailureOr<mlir::Value>
  build(mlir::ValueRange operands,
        llvm::ArrayRef<mlir::NamedAttribute> attrs = {},
        mlir::Type resultType = {}) {
    return build(OpTy::getOperationName(), operands, attrs, resultType);
  }
  /// A bm.constant holding `tensor`.
  mlir::FailureOr<mlir::Value> constant(const HostTensor &tensor);
  mlir::NamedAttribute named(llvm::StringRef name, mlir::Attribute value) {
    return builder().getNamedAttr(name, value);
  }

  //===--- errors ---------------------------------------------------------===//
  /// Records "node 'NAME' (OP): message" and returns failure.
  mlir::LogicalResult error(const llvm::Twine &message);
  /// Normalises a possibly negative axis into [0, rank).
  mlir::FailureOr<int64_t> axis(int64_t axis, int64_t rank,
                                llvm::StringRef what = "axis");
  /// axis() of each of `axes` in turn, in their order; `check`, when given,
  /// vets each one (as given and normalised) before the next is read.
  mlir::FailureOr<llvm::SmallVector<int64_t>> normaliseAxes(
      llvm::ArrayRef<int64_t> axes, int64_t rank, llvm::StringRef what,
      llvm::function_ref<mlir::LogicalResult(int64_t given, int64_t axis)>
          check = nullptr);
  std::string describe() const;
  /// Gather's error for an index outside the data's `axis` (of size `dim`),
  /// naming the data: a position table shorter than --seq shows up here.
  mlir::LogicalResult gatherIndexError(int64_t index, int64_t axis,
                                       int64_t dim);

private:
  GraphState &graph;
  const onnx::NodeProto &node;
  int64_t opset;
  mlir::Location loc;
};

/// One importer per ONNX op type (OpImporters.cpp, alphabetical).
using OpImporterFn = mlir::LogicalResult (*)(NodeContext &);
struct OpImporter {
  llvm::StringLiteral opType;
  /// Inputs that must be present (non-empty names) before the importer or
  /// a host folder runs; checked once for all ops.
  unsigned minInputs;
  OpImporterFn fn;
};
/// Returns null for an unsupported op type.
const OpImporter *lookupOpImporter(llvm::StringRef opType);

/// Host folders for shape-like ops (ShapeFolding.cpp, alphabetical). Called
/// when all inputs are host constants; returns true when the outputs were
/// set, false when the op must be emitted (result too large, not foldable).
using HostFolderFn = mlir::FailureOr<bool> (*)(NodeContext &);
HostFolderFn lookupHostFolder(llvm::StringRef opType);

/// Fails on an attribute the model's opset no longer has because it became
/// an input (OpsetChanges.cpp).
mlir::LogicalResult checkAttributesOfOpset(NodeContext &nc);
/// What every node is checked for before its folder or importer runs: its
/// opset's attributes, the inputs its op needs, no sequence where the op
/// takes none.
mlir::LogicalResult checkNodeInputs(NodeContext &nc,
                                    const OpImporter &importer);

//===--- small builders shared by the op importers ------------------------===//

/// Sets output `output` to `value` unless building it failed.
mlir::LogicalResult setResult(NodeContext &nc,
                              mlir::FailureOr<mlir::Value> value,
                              unsigned output = 0);
mlir::Attribute i64(NodeContext &nc, int64_t v);
mlir::Attribute f32(NodeContext &nc, double v);
mlir::Attribute array(NodeContext &nc, llvm::ArrayRef<int64_t> v);
mlir::Attribute boolean(NodeContext &nc, bool v);
mlir::RankedTensorType typeOf(mlir::Value v);
/// A rank-0 constant of `like`'s element type.
mlir::FailureOr<mlir::Value> scalarLike(NodeContext &nc, mlir::Value like,
                                        double value);
/// Broadcasting binary op `OpTy` (result type inferred).
template <typename OpTy>
mlir::FailureOr<mlir::Value> binaryOf(NodeContext &nc, mlir::Value a,
                                      mlir::Value b) {
  return nc.build<OpTy>({a, b});
}
/// Elementwise unary op `OpTy` keeping x's type.
template <typename OpTy>
mlir::FailureOr<mlir::Value> unaryOf(NodeContext &nc, mlir::Value x) {
  return nc.build<OpTy>({x}, {}, x.getType());
}
/// The attributes of a reduction (bm.reduce_*) over `axes`.
llvm::SmallVector<mlir::NamedAttribute, 2>
reduceAttrs(NodeContext &nc, llvm::ArrayRef<int64_t> axes, bool keepDims);
/// Reduction `OpTy` (a bm.reduce_* op) of x over `axes`.
template <typename OpTy>
mlir::FailureOr<mlir::Value> reduceOf(NodeContext &nc, mlir::Value x,
                                      llvm::ArrayRef<int64_t> axes,
                                      bool keepDims) {
  return nc.build<OpTy>({x}, reduceAttrs(nc, axes, keepDims));
}
/// x - mean and sqrt(mean((x - mean)^2) + epsilon), the means over `axes`
/// kept as size 1; `mean` is x's. Emitted in that order: sub, mul,
/// reduce_mean, constant, add, sqrt.
struct CenteredDeviation {
  mlir::Value centered, deviation;
};
mlir::FailureOr<CenteredDeviation>
centeredDeviation(NodeContext &nc, mlir::Value x, mlir::Value mean,
                  llvm::ArrayRef<int64_t> axes, double epsilon);

//===--- shape rules shared by op importers and host folders --------------===//

/// The target shape a Reshape node gives: the `shape` attribute of opsets
/// before 5, constant input 1 from opset 5.
mlir::FailureOr<std::vector<int64_t>> reshapeTargetOf(NodeContext &nc);
/// ONNX Reshape's target: 0 copies the input dim (unless `allowZero`), one
/// -1 takes the remaining elements.
mlir::FailureOr<llvm::SmallVector<int64_t>>
reshapeTarget(NodeContext &nc, llvm::ArrayRef<int64_t> inShape,
              llvm::ArrayRef<int64_t> target, bool allowZero);
/// ONNX Expand's result: numpy broadcast of the input and target shapes.
mlir::FailureOr<llvm::SmallVector<int64_t>>
expandTarget(NodeContext &nc, llvm::ArrayRef<int64_t> inShape,
             llvm::ArrayRef<int64_t> target);

/// Slice bounds per dim, clamped and normalised as ONNX specifies.
struct SliceBounds {
  llvm::SmallVector<int64_t> starts, limits, strides;
  /// Axes sliced with a negative step, with the indices they take in order;
  /// their starts/limits/strides cover the whole dim and a gather follows.
  llvm::SmallVector<std::pair<int64_t, std::vector<int64_t>>> reversed;
};
/// Reads starts/ends/axes/steps (inputs from opset 10, attributes before).
mlir::FailureOr<SliceBounds> sliceBounds(NodeContext &nc,
                                         llvm::ArrayRef<int64_t> shape);
/// Normalised, sorted Squeeze axes (all size-1 dims when none are given).
mlir::FailureOr<llvm::SmallVector<int64_t>>
squeezeAxes(NodeContext &nc, llvm::ArrayRef<int64_t> shape);
/// Normalised, sorted Unsqueeze axes (positions in the result).
mlir::FailureOr<llvm::SmallVector<int64_t>> unsqueezeAxes(NodeContext &nc,
                                                          int64_t inRank);
/// The number of elements of Range(start, limit, delta): scalar bounds, a
/// delta other than 0 and a finite length, else the node's error.
mlir::FailureOr<int64_t> rangeLength(NodeContext &nc, const HostTensor &start,
                                     const HostTensor &limit,
                                     const HostTensor &delta);
/// The result shape of Squeeze / Unsqueeze.
llvm::SmallVector<int64_t> squeezedShape(llvm::ArrayRef<int64_t> shape,
                                         llvm::ArrayRef<int64_t> axes);
llvm::SmallVector<int64_t> unsqueezedShape(llvm::ArrayRef<int64_t> shape,
                                           llvm::ArrayRef<int64_t> axes);

} // namespace bm::import

#endif // BMC_IMPORT_NODECONTEXT_H
