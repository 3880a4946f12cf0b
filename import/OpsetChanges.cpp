//===- OpsetChanges.cpp - attributes that later opsets turned into inputs -===//
//
// ONNX moved several attributes to inputs (Squeeze's axes in opset 13, the
// reductions' axes in 18, ...). The importers read either form, so a model
// that gives the attribute at an opset without it would silently import
// with a meaning onnxruntime refuses; an exporter that mixed opsets wrote
// it. Such a node is an error naming the node, the op and the opset.
//
//===----------------------------------------------------------------------===//

#include "import/NodeContext.h"

#include "llvm/ADT/STLExtras.h"

namespace bm::import {

namespace {

struct RemovedAttribute {
  const char *op;
  const char *attribute;
  /// The first opset without it (where it is an input instead).
  int64_t removedIn;
};

// Alphabetical by op, then attribute.
constexpr RemovedAttribute kRemovedAttributes[] = {
    {"Clip", "max", 11},           {"Clip", "min", 11},
    {"Pad", "pads", 11},           {"Pad", "value", 11},
    {"ReduceL1", "axes", 18},      {"ReduceL2", "axes", 18},
    {"ReduceLogSum", "axes", 18},  {"ReduceLogSumExp", "axes", 18},
    {"ReduceMax", "axes", 18},     {"ReduceMean", "axes", 18},
    {"ReduceMin", "axes", 18},     {"ReduceProd", "axes", 18},
    {"ReduceSum", "axes", 13},     {"ReduceSumSquare", "axes", 18},
    {"Reshape", "shape", 5},       {"Slice", "axes", 10},
    {"Slice", "ends", 10},         {"Slice", "starts", 10},
    {"Split", "split", 13},        {"Squeeze", "axes", 13},
    {"TopK", "k", 10},             {"Unsqueeze", "axes", 13},
    {"Upsample", "scales", 9},
};

} // namespace

mlir::LogicalResult checkAttributesOfOpset(NodeContext &nc) {
  const onnx::NodeProto &node = nc.proto();
  for (const onnx::AttributeProto &attribute : node.attribute()) {
    const RemovedAttribute *removed =
        llvm::find_if(kRemovedAttributes, [&](const RemovedAttribute &r) {
          return node.op_type() == r.op && attribute.name() == r.attribute;
        });
    if (removed == std::end(kRemovedAttributes) ||
        nc.getOpset() < removed->removedIn)
      continue;
    return nc.error("attribute '" + attribute.name() + "' was removed in opset " +
                    llvm::Twine(removed->removedIn) + " (an input since), but "
                    "the model uses opset " + llvm::Twine(nc.getOpset()));
  }
  return mlir::success();
}

} // namespace bm::import
