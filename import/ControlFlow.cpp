//===- ControlFlow.cpp - Loop, If and sequences evaluated on the host -----===//
//
// bm has no control flow. The dynamo exporter writes some shape arithmetic
// as an ONNX Loop over sequences: torchlib's as_strided (ConvNeXt's and
// Swin's dynamo exports) builds the gather indices of a strided view in a
// Loop over the view's rank, with an If inside and the shapes and strides
// as constants. Such a loop depends on constants only, so the importer
// runs it: each iteration folds the body's nodes on the host, and the
// loop's outputs are constants. A body node that reads a run-time value is
// an error naming it; bm does not lower loops over tensors.
//
//===----------------------------------------------------------------------===//

#include "import/OpImporters.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using llvm::Twine;

namespace bm::import {
namespace {

/// More iterations than this are not shape arithmetic: the loop is refused.
constexpr int64_t kMaxHostIterations = 1 << 16;

const onnx::GraphProto *graphAttr(NodeContext &nc, llvm::StringRef name) {
  const onnx::AttributeProto *a = nc.attr(name);
  return a && a->has_g() ? &a->g() : nullptr;
}

HostTensor scalar(int32_t dtype, int64_t value) {
  return HostTensor::fromInts({value}, {}, dtype);
}

/// Input i as one number (a trip count, a condition, a position).
FailureOr<int64_t> scalarInput(NodeContext &nc, unsigned i,
                               llvm::StringRef what) {
  const HostTensor *t = nc.host(i);
  if (!t || t->numElements() != 1) {
    (void)nc.error("its " + what + " must be one number");
    return failure();
  }
  return t->getInt(0);
}

/// Runs every node of `body` on the host, in order (ONNX keeps subgraphs
/// topologically sorted), with the values bound so far; the first node
/// that does not fold is the loop's error.
LogicalResult foldBody(NodeContext &outer, const onnx::GraphProto &body) {
  for (const onnx::NodeProto &node : body.node()) {
    NodeContext nc(outer.graphState(), node, outer.getOpset(),
                   outer.builder().getUnknownLoc());
    std::string name = node.name().empty() && node.output_size()
                           ? node.output(0)
                           : node.name();
    const OpImporter *importer = lookupOpImporter(node.op_type());
    if (!importer)
      return outer.error("the node '" + name + "' of its body has op type " +
                         node.op_type() + ", which bmc does not support");
    if (failed(checkNodeInputs(nc, *importer)))
      return failure();
    // A Constant's importer makes a host value, as in the outer graph.
    if (node.op_type() == "Constant") {
      if (failed(importer->fn(nc)))
        return failure();
      continue;
    }
    HostFolderFn folder = lookupHostFolder(node.op_type());
    if (!folder || !nc.allInputsOnHost())
      return outer.error(
          "the " + node.op_type() + " node '" + name + "' of its body " +
          (folder ? "reads a run-time value" : "has no host evaluation") +
          "; bm runs control flow only over constants");
    FailureOr<bool> folded = folder(nc);
    if (failed(folded) || !outer.graphState().error.empty())
      return failure();
    if (!*folded)
      return outer.error("the " + node.op_type() + " node '" + name +
                         "' of its body does not fold (a result too large)");
  }
  return success();
}

/// The value of `name` after a body ran, for the node's output `i`.
LogicalResult forward(NodeContext &nc, const std::string &name, unsigned i) {
  const ImportedValue *v = nc.lookup(name);
  if (!v || (!v->host && !v->sequence))
    return nc.error("its body's output '" + name + "' is not a constant");
  if (v->sequence)
    nc.setSequenceOutput(i, *v->sequence);
  else
    nc.setOutput(i, *v->host);
  return success();
}

/// The loop's bound: the trip count (input 0) and the condition (input 1),
/// each optional.
FailureOr<int64_t> tripCount(NodeContext &nc) {
  int64_t trips = kMaxHostIterations;
  if (nc.hasInput(0)) {
    FailureOr<int64_t> given = scalarInput(nc, 0, "trip count");
    if (failed(given))
      return failure();
    trips = *given;
  }
  if (trips > kMaxHostIterations) {
    (void)nc.error("the loop runs " + Twine(trips) +
                   " times; bm evaluates loops of shape arithmetic (at most " +
                   Twine(kMaxHostIterations) + " iterations)");
    return failure();
  }
  return trips;
}

} // namespace

FailureOr<bool> foldIf(NodeContext &nc) {
  FailureOr<int64_t> cond = scalarInput(nc, 0, "condition");
  if (failed(cond))
    return failure();
  const onnx::GraphProto *branch =
      graphAttr(nc, *cond ? "then_branch" : "else_branch");
  if (!branch)
    return nc.error("has no then_branch or else_branch graph");
  if (failed(foldBody(nc, *branch)))
    return failure();
  for (int i = 0; i < branch->output_size(); ++i)
    if (failed(forward(nc, branch->output(i).name(), i)))
      return failure();
  return true;
}

/// ONNX Loop: inputs M, cond, v_initial...; body (i, cond, v...) -> (cond,
/// v..., scan...); outputs v_final..., scans stacked along a new axis 0.
FailureOr<bool> foldLoop(NodeContext &nc) {
  const onnx::GraphProto *body = graphAttr(nc, "body");
  if (!body)
    return nc.error("has no body graph");
  int carried = static_cast<int>(nc.numInputs()) - 2;
  if (carried < 0 || body->input_size() != carried + 2 ||
      body->output_size() < carried + 1)
    return nc.error("its body takes " + Twine(body->input_size()) +
                    " inputs and gives " + Twine(body->output_size()) +
                    " outputs for " + Twine(std::max(carried, 0)) +
                    " carried values");
  FailureOr<int64_t> trips = tripCount(nc);
  if (failed(trips))
    return failure();
  FailureOr<int64_t> cond =
      nc.hasInput(1) ? scalarInput(nc, 1, "condition") : FailureOr<int64_t>(1);
  if (failed(cond))
    return failure();
  bool running = *cond != 0;
  for (int v = 0; v < carried; ++v) {
    if (!nc.hasInput(v + 2))
      return nc.error("carried value " + Twine(v) + " has no initial value");
    nc.bind(body->input(v + 2).name(), *nc.lookup(nc.proto().input(v + 2)));
  }
  int scans = body->output_size() - carried - 1;
  std::vector<std::vector<HostTensor>> scanned(scans);
  int64_t i = 0;
  for (; running && i < *trips; ++i) {
    nc.bind(body->input(0).name(),
            ImportedValue{Value(), scalar(onnx::TensorProto::INT64, i), {}});
    nc.bind(body->input(1).name(),
            ImportedValue{Value(), scalar(onnx::TensorProto::BOOL, 1), {}});
    if (failed(foldBody(nc, *body)))
      return failure();
    const ImportedValue *next = nc.lookup(body->output(0).name());
    running = next && next->host && next->host->numElements() == 1 &&
              next->host->getInt(0) != 0;
    for (int v = 0; v < carried; ++v) {
      const ImportedValue *next = nc.lookup(body->output(v + 1).name());
      if (!next)
        return nc.error("its body gives no '" + body->output(v + 1).name() +
                        "'");
      ImportedValue copy = *next;
      nc.bind(body->input(v + 2).name(), std::move(copy));
    }
    for (int s = 0; s < scans; ++s) {
      const ImportedValue *out =
          nc.lookup(body->output(carried + 1 + s).name());
      if (!out || !out->host)
        return nc.error("its scan output " + Twine(s) + " is not a tensor");
      scanned[s].push_back(*out->host);
    }
  }
  if (running && !nc.hasInput(0))
    return nc.error("runs more than " + Twine(kMaxHostIterations) +
                    " iterations");
  for (int v = 0; v < carried; ++v)
    if (failed(forward(nc, body->input(v + 2).name(), v)))
      return failure();
  for (int s = 0; s < scans; ++s) {
    if (scanned[s].empty())
      return nc.error("its scan output " + Twine(s) + " has no iteration");
    llvm::SmallVector<int64_t> shape = {
        static_cast<int64_t>(scanned[s].size())};
    shape.append(scanned[s][0].shape.begin(), scanned[s][0].shape.end());
    HostTensor stacked = HostTensor::zeros(scanned[s][0].dtype, shape);
    int64_t per = scanned[s][0].numElements(), at = 0;
    for (const HostTensor &t : scanned[s])
      for (int64_t e = 0; e < per; ++e)
        stacked.copyElement(at++, t, t.splat ? 0 : e);
    nc.setOutput(carried + s, std::move(stacked));
  }
  return true;
}

FailureOr<bool> foldSequenceEmpty(NodeContext &nc) {
  nc.setSequenceOutput(0, {});
  return true;
}

/// SequenceConstruct(tensors...): the sequence of its inputs.
FailureOr<bool> foldSequenceConstruct(NodeContext &nc) {
  std::vector<HostTensor> out;
  for (unsigned i = 0; i < nc.numInputs(); ++i) {
    const HostTensor *t = nc.host(i);
    if (!t)
      return nc.error("input " + Twine(i) + " is not a tensor");
    out.push_back(*t);
  }
  nc.setSequenceOutput(0, std::move(out));
  return true;
}

/// SequenceInsert(sequence, tensor[, position]): at the end by default.
FailureOr<bool> foldSequenceInsert(NodeContext &nc) {
  const std::vector<HostTensor> *in = nc.hostSequence(0);
  const HostTensor *tensor = nc.host(1);
  if (!in || !tensor)
    return nc.error("needs a sequence and a tensor");
  std::vector<HostTensor> out = *in;
  int64_t size = static_cast<int64_t>(out.size());
  FailureOr<int64_t> position = nc.hasInput(2) ? scalarInput(nc, 2, "position")
                                               : FailureOr<int64_t>(size);
  if (failed(position))
    return failure();
  int64_t at = *position;
  if (at < 0)
    at += size;
  if (at < 0 || at > size)
    return nc.error("position " + Twine(at) + " is outside a sequence of " +
                    Twine(size));
  out.insert(out.begin() + at, *tensor);
  nc.setSequenceOutput(0, std::move(out));
  return true;
}

/// CastLike(x, like): Cast to like's element type.
FailureOr<bool> foldCastLike(NodeContext &nc) {
  const HostTensor *in = nc.host(0), *like = nc.host(1);
  if (!in || !like)
    return false;
  nc.setOutput(0, in->cast(like->dtype));
  return true;
}

} // namespace bm::import
