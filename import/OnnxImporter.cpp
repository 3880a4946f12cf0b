//===- OnnxImporter.cpp - ONNX graph -> func.func @main of bm ops ---------===//
//
// The graph-level half of the importer: binds symbolic dims, turns graph
// inputs and parameters into function arguments, orders the nodes (rejecting
// cycles and dangling inputs) and hands each node to its op importer or host
// folder. Per-op work lives in OpImporters.cpp and ShapeFolding.cpp.
//
//===----------------------------------------------------------------------===//

#include "import/OnnxImporter.h"

#include "import/NodeContext.h"
#include "import/OnnxLoader.h"

#include "bm/BmDialect.h"
#include "bm/BmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <queue>
#include <set>

using namespace bm::import;
using namespace mlir;
using llvm::Twine;

namespace {

llvm::Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

/// "its symbolic dimensions: batch, seq", for messages about --dim / --seq.
std::string symbolicDimsText(const std::set<std::string> &names) {
  if (names.empty())
    return "its inputs have no symbolic dimension";
  return "its symbolic dimensions: " + llvm::join(names, ", ");
}

class GraphImporter {
public:
  GraphImporter(MLIRContext &context, const onnx::ModelProto &model,
                StringRef path, const ::bm::ImportOptions &options)
      : context(context), model(model), graph(model.graph()), path(path),
        options(options), state(&context) {}

  llvm::Expected<OwningOpRef<ModuleOp>> run();
  /// After run: the symbolic dims of the graph inputs as bound, but for
  /// those bound as the batch (BoundDims).
  ::bm::BoundDims inputDims() const;

private:
  LogicalResult fail(const Twine &message) {
    if (state.error.empty())
      state.error = message.str();
    return failure();
  }
  LogicalResult readOpset();
  LogicalResult bindDims();
  LogicalResult addInputs(SmallVectorImpl<Type> &argTypes,
                          SmallVectorImpl<DictionaryAttr> &argAttrs);
  LogicalResult addParameters(SmallVectorImpl<Type> &argTypes,
                              SmallVectorImpl<DictionaryAttr> &argAttrs);
  LogicalResult addExternalData(const onnx::TensorProto &init, int64_t count,
                                SmallVectorImpl<NamedAttribute> &attrs);
  LogicalResult checkExternalFile(const std::string &what, StringRef location,
                                  int64_t offset, int64_t bytes);
  LogicalResult checkEmbeddedData(const onnx::TensorProto &init,
                                  int64_t count);
  LogicalResult checkOpsSupported();
  LogicalResult orderNodes(std::vector<int> &order);
  LogicalResult importNode(const onnx::NodeProto &node);
  LogicalResult collectOutputs(SmallVector<Value> &results);
  Location nodeLoc(const onnx::NodeProto &node);

  MLIRContext &context;
  const onnx::ModelProto &model;
  const onnx::GraphProto &graph;
  std::string path;
  const ::bm::ImportOptions &options;
  GraphState state;
  int64_t opset = 0;
  std::map<std::string, int64_t> dims;
  /// Initializers that are function arguments, in argument order.
  std::vector<const onnx::TensorProto *> parameters;
  llvm::StringSet<> initializerNames;
};

} // namespace

/// External data must stay inside the model's folder: an attacker-supplied
/// model must not make `bmc compile` read /etc/passwd. The location is
/// checked as written (no absolute path, no ".." component) and after
/// normalisation against the folder.
bool ::bm::externalLocationIsSafe(StringRef location, StringRef modelPath) {
  if (location.empty() || location.starts_with("/") ||
      location.starts_with("\\") || (location.size() > 1 && location[1] == ':'))
    return false;
  std::string slashed = location.str();
  std::replace(slashed.begin(), slashed.end(), '\\', '/');
  SmallVector<StringRef> parts;
  StringRef(slashed).split(parts, '/');
  for (StringRef part : parts)
    if (part == "..")
      return false;
  SmallString<256> folder = llvm::sys::path::parent_path(modelPath);
  if (folder.empty())
    folder = ".";
  SmallString<256> joined = folder;
  llvm::sys::path::append(joined, location);
  llvm::sys::path::remove_dots(joined, /*remove_dot_dot=*/true);
  llvm::sys::path::remove_dots(folder, /*remove_dot_dot=*/true);
  return StringRef(joined).starts_with(folder);
}

LogicalResult GraphImporter::readOpset() {
  for (const onnx::OperatorSetIdProto &id : model.opset_import())
    if (id.domain().empty() || id.domain() == "ai.onnx")
      opset = id.version();
  if (opset == 0)
    return fail("the model imports no version of the default ONNX opset");
  if (opset > 21)
    return fail("the model uses ONNX opset " + Twine(opset) +
                "; bmc reads opsets up to 21");
  return success();
}

LogicalResult GraphImporter::bindDims() {
  if (options.useModelDefaults) {
    for (const onnx::StringStringEntryProto &entry : model.metadata_props()) {
      StringRef key = entry.key();
      if (!key.consume_front("bm.dim."))
        continue;
      int64_t value;
      if (StringRef(entry.value()).getAsInteger(10, value) || value < 0)
        return fail("model metadata 'bm.dim." + key + "' = '" + entry.value() +
                    "' is not a non-negative integer");
      dims[key.str()] = value;
    }
  }
  // The symbolic dimensions of the model's inputs: a name given that is
  // none of them is a typo that would otherwise be ignored.
  std::set<std::string> symbolic;
  for (const onnx::ValueInfoProto &input : graph.input())
    if (!initializerNames.contains(input.name()))
      for (const auto &dim : input.type().tensor_type().shape().dim())
        if (dim.has_dim_param())
          symbolic.insert(dim.dim_param());
  for (const auto &[name, value] : options.dims) {
    if (value < 0)
      return fail("dimension '" + name + "' = " + Twine(value) +
                  " must not be negative");
    // `--seq` names "seq" in case the model calls it that; it binds by
    // position otherwise (below).
    bool bySequenceFlag = name == "seq" && options.sequenceLength;
    if (!symbolic.count(name) && !bySequenceFlag)
      return fail("--dim " + name + ": the model has no symbolic dimension '" +
                  name + "' (" + symbolicDimsText(symbolic) + ")");
    dims[name] = value;
  }
  // The batch and sequence dims by position, for callers that do not know
  // what the exporter named them.
  auto bindByPosition = [&](const onnx::ValueInfoProto &input, int position,
                            int64_t value) {
    const onnx::TensorShapeProto &shape = input.type().tensor_type().shape();
    if (shape.dim_size() <= position)
      return false;
    const onnx::TensorShapeProto::Dimension &dim = shape.dim(position);
    if (!dim.has_dim_param())
      return false;
    if (!options.dims.count(dim.dim_param()))
      dims[dim.dim_param()] = value;
    return true;
  };
  bool boundSequence = symbolic.count("seq") > 0;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    if (initializerNames.contains(input.name()) ||
        !input.type().has_tensor_type())
      continue;
    if (options.batchSize) {
      const onnx::TensorShapeProto &shape = input.type().tensor_type().shape();
      if (shape.dim_size() > 0 && shape.dim(0).has_dim_param() &&
          options.dims.count(shape.dim(0).dim_param()))
        return fail("--dim " + shape.dim(0).dim_param() +
                    " binds the batch dimension of graph input '" +
                    input.name() +
                    "', which the planner sets itself (use --global-batch)");
      bindByPosition(input, 0, *options.batchSize);
    }
    int32_t elem = input.type().tensor_type().elem_type();
    bool integer =
        elem == onnx::TensorProto::INT64 || elem == onnx::TensorProto::INT32;
    if (options.sequenceLength && integer &&
        input.type().tensor_type().shape().dim_size() == 2)
      boundSequence |= bindByPosition(input, 1, *options.sequenceLength);
  }
  if (options.sequenceLength && !boundSequence)
    return fail("--seq: the model has no sequence dimension to bind (no "
                "symbolic dimension 'seq' and no [batch, sequence] integer "
                "input with a symbolic sequence; " +
                symbolicDimsText(symbolic) + ")");
  return success();
}

::bm::BoundDims GraphImporter::inputDims() const {
  std::set<std::string> batch;
  ::bm::BoundDims bound;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    if (initializerNames.contains(input.name()) ||
        !input.type().has_tensor_type())
      continue;
    const onnx::TensorShapeProto &shape = input.type().tensor_type().shape();
    for (int d = 0; d < shape.dim_size(); ++d) {
      if (!shape.dim(d).has_dim_param())
        continue;
      const std::string &name = shape.dim(d).dim_param();
      if (d == 0 && options.batchSize)
        batch.insert(name);
      else if (auto it = dims.find(name); it != dims.end())
        bound[name] = it->second;
    }
  }
  for (const std::string &name : batch)
    bound.erase(name);
  return bound;
}

LogicalResult
GraphImporter::addInputs(SmallVectorImpl<Type> &argTypes,
                         SmallVectorImpl<DictionaryAttr> &argAttrs) {
  Builder b(&context);
  for (const onnx::ValueInfoProto &input : graph.input()) {
    // IR < 4 lists initializers as inputs too; they are parameters.
    if (initializerNames.contains(input.name()))
      continue;
    std::string what = "graph input '" + input.name() + "'";
    if (!input.type().has_tensor_type())
      return fail(what + " is not a tensor (sequences, maps and optionals "
                         "are not supported)");
    const onnx::TypeProto::Tensor &tensor = input.type().tensor_type();
    Type element = elementTypeOf(&context, tensor.elem_type());
    if (!element)
      return fail(what + " has element type " + dtypeName(tensor.elem_type()) +
                  ", which bm cannot hold");
    if (!tensor.has_shape())
      return fail(what + " has no shape");
    SmallVector<int64_t> shape;
    for (auto [i, dim] : llvm::enumerate(tensor.shape().dim())) {
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 0)
          return fail(what + " has negative dimension " +
                      Twine(dim.dim_value()));
        shape.push_back(dim.dim_value());
      } else if (dim.has_dim_param()) {
        auto it = dims.find(dim.dim_param());
        if (it == dims.end())
          return fail("symbolic dimension '" + dim.dim_param() + "' of " +
                      what + " is not bound; pass --dim " + dim.dim_param() +
                      "=N");
        shape.push_back(it->second);
      } else {
        return fail(what + " has dimension " + Twine(i) +
                    " with neither a size nor a name");
      }
    }
    if (!checkedNumElements(shape))
      return fail(what + " has shape " + shapeText(shape) +
                  " whose element count overflows int64");
    argTypes.push_back(RankedTensorType::get(shape, element));
    argAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(mlir::bm::BmDialect::kParamNameAttrName,
                        b.getStringAttr(input.name())),
         b.getNamedAttr(mlir::bm::BmDialect::kParamKindAttrName,
                        b.getStringAttr(mlir::bm::BmDialect::kKindInput))}));
  }
  return success();
}

LogicalResult
GraphImporter::addParameters(SmallVectorImpl<Type> &argTypes,
                             SmallVectorImpl<DictionaryAttr> &argAttrs) {
  Builder b(&context);
  for (const onnx::TensorProto &init : graph.initializer()) {
    std::string what = "initializer '" + init.name() + "'";
    SmallVector<int64_t> shape(init.dims().begin(), init.dims().end());
    std::optional<int64_t> count = checkedNumElements(shape);
    if (!count)
      return fail(what + " has shape " + shapeText(shape) +
                  " with a negative dim or an element count that overflows "
                  "int64");
    bool external = init.data_location() == onnx::TensorProto::EXTERNAL;
    bool isParameter =
        external || (HostTensor::isFloatType(init.data_type()) && *count > 1);
    if (!isParameter) {
      std::string error;
      std::optional<HostTensor> value = decodeTensor(init, error);
      if (!value)
        return fail(what + " " + error);
      state.values[init.name()] = ImportedValue{Value(), std::move(*value), {}};
      continue;
    }
    Type element = elementTypeOf(&context, init.data_type());
    if (!element)
      return fail(what + " has element type " + dtypeName(init.data_type()) +
                  ", which bm cannot hold");
    SmallVector<NamedAttribute> attrs = {
        b.getNamedAttr(mlir::bm::BmDialect::kParamNameAttrName,
                       b.getStringAttr(init.name())),
        b.getNamedAttr(mlir::bm::BmDialect::kParamKindAttrName,
                       b.getStringAttr(mlir::bm::BmDialect::kKindParameter))};
    if (external ? failed(addExternalData(init, *count, attrs))
                 : failed(checkEmbeddedData(init, *count)))
      return failure();
    argTypes.push_back(RankedTensorType::get(shape, element));
    argAttrs.push_back(b.getDictionaryAttr(attrs));
    parameters.push_back(&init);
  }
  return success();
}

/// The initializer's external data entries become argument attributes (the
/// data is never read here: `bmc plan` works without it). The location must
/// stay in the model's folder; a length must be the tensor's size; where
/// the file exists, the range must lie inside it.
LogicalResult
GraphImporter::addExternalData(const onnx::TensorProto &init, int64_t count,
                               SmallVectorImpl<NamedAttribute> &attrs) {
  std::string what = "initializer '" + init.name() + "'";
  std::optional<std::string> location;
  int64_t offset = -1, length = -1;
  for (const onnx::StringStringEntryProto &entry : init.external_data()) {
    StringRef value = entry.value();
    if (entry.key() == "location")
      location = entry.value();
    else if ((entry.key() == "offset" &&
              (value.getAsInteger(10, offset) || offset < 0)) ||
             (entry.key() == "length" &&
              (value.getAsInteger(10, length) || length < 0)))
      return fail(what + " has an invalid external data " + entry.key() +
                  " '" + entry.value() + "'");
  }
  if (!location)
    return fail(what + " has external data without a 'location' entry");
  if (!::bm::externalLocationIsSafe(*location, path))
    return fail(what + " has external data location '" + *location +
                "' outside the model's folder; refusing to read it");
  int64_t bytes;
  if (llvm::MulOverflow(count, byteWidth(init.data_type()), bytes))
    return fail(what + " needs more than 2^63 bytes");
  if (length >= 0 && length != bytes)
    return fail(what + " has external data length " + Twine(length) +
                " but its shape " + shapeText(SmallVector<int64_t>(
                                        init.dims().begin(), init.dims().end())) +
                " of " + dtypeName(init.data_type()) + " needs " +
                Twine(bytes) + " bytes");
  if (failed(checkExternalFile(what, *location, std::max<int64_t>(offset, 0),
                               bytes)))
    return failure();
  Builder b(&context);
  attrs.push_back(b.getNamedAttr(mlir::bm::BmDialect::kExternalLocationAttrName,
                                 b.getStringAttr(*location)));
  if (offset >= 0)
    attrs.push_back(b.getNamedAttr(mlir::bm::BmDialect::kExternalOffsetAttrName,
                                   b.getI64IntegerAttr(offset)));
  if (length >= 0)
    attrs.push_back(b.getNamedAttr(mlir::bm::BmDialect::kExternalLengthAttrName,
                                   b.getI64IntegerAttr(length)));
  return success();
}

/// Where the external data file exists (it may be absent for planning), it
/// must be a file holding [offset, offset + bytes).
LogicalResult GraphImporter::checkExternalFile(const std::string &what,
                                               StringRef location,
                                               int64_t offset, int64_t bytes) {
  SmallString<256> file = llvm::sys::path::parent_path(path);
  llvm::sys::path::append(file, location);
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(file, status) ||
      status.type() == llvm::sys::fs::file_type::file_not_found)
    return success();
  if (status.type() != llvm::sys::fs::file_type::regular_file)
    return fail(what + " has external data location '" + location +
                "', which is not a file");
  int64_t end;
  if (llvm::AddOverflow(offset, bytes, end) ||
      static_cast<uint64_t>(end) > status.getSize())
    return fail(what + " has external data past the end of '" + location +
                "' (bytes " + Twine(offset) + " to " + Twine(offset) + " + " +
                Twine(bytes) + " of a " + Twine(status.getSize()) +
                "-byte file)");
  return success();
}

/// An embedded parameter's data must have exactly its shape's elements
/// (`bmc compile` copies them into the checkpoint the trainer starts from).
LogicalResult GraphImporter::checkEmbeddedData(const onnx::TensorProto &init,
                                               int64_t count) {
  int64_t stored = storedElements(init);
  if (stored == count)
    return success();
  std::string what = "initializer '" + init.name() + "'";
  if (stored < 0)
    return fail(what + " has " + Twine(init.raw_data().size()) +
                " bytes of raw data, not a whole number of " +
                dtypeName(init.data_type()) + " elements");
  return fail(what + " has " + Twine(stored) + " values for the " +
              Twine(count) + " elements of its shape " +
              shapeText(SmallVector<int64_t>(init.dims().begin(),
                                             init.dims().end())));
}

LogicalResult GraphImporter::checkOpsSupported() {
  for (const onnx::NodeProto &node : graph.node()) {
    StringRef domain = node.domain();
    bool knownDomain =
        domain.empty() || domain == "ai.onnx" || domain == "com.microsoft";
    if (knownDomain && lookupOpImporter(node.op_type()))
      continue;
    std::string op = node.op_type();
    if (!domain.empty() && domain != "ai.onnx")
      op = domain.str() + "." + op;
    std::string name =
        node.name().empty()
            ? (node.output_size() ? "producing '" + node.output(0) + "'"
                                  : std::string("(unnamed)"))
            : "'" + node.name() + "'";
    std::string list;
    for (const std::string &supported : ::bm::supportedOnnxOps())
      list += (list.empty() ? "" : ", ") + supported;
    return fail("node " + name + " has op type " + op + " (opset " +
                Twine(opset) +
                "), which bmc does not support; supported ops: " + list);
  }
  return success();
}

/// The outer values a node's subgraphs (a Loop's body, an If's branches)
/// read without taking them as inputs: they must be computed before it.
static void addCaptured(const onnx::GraphProto &g,
                        llvm::StringSet<> &definedInside,
                        std::vector<std::string> &captured) {
  for (const onnx::ValueInfoProto &input : g.input())
    definedInside.insert(input.name());
  for (const onnx::TensorProto &init : g.initializer())
    definedInside.insert(init.name());
  for (const onnx::NodeProto &node : g.node()) {
    for (const std::string &input : node.input())
      if (!input.empty() && !definedInside.contains(input))
        captured.push_back(input);
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.has_g())
        addCaptured(a.g(), definedInside, captured);
    for (const std::string &output : node.output())
      definedInside.insert(output);
  }
  for (const onnx::ValueInfoProto &output : g.output())
    if (!definedInside.contains(output.name()))
      captured.push_back(output.name());
}

static std::vector<std::string> inputsOf(const onnx::NodeProto &node) {
  std::vector<std::string> inputs(node.input().begin(), node.input().end());
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.has_g()) {
      llvm::StringSet<> definedInside;
      addCaptured(a.g(), definedInside, inputs);
    }
  return inputs;
}

LogicalResult GraphImporter::orderNodes(std::vector<int> &order) {
  int numNodes = graph.node_size();
  llvm::StringMap<int> producer;
  llvm::StringSet<> defined = initializerNames;
  for (const onnx::ValueInfoProto &input : graph.input())
    defined.insert(input.name());
  for (int i = 0; i < numNodes; ++i)
    for (const std::string &output : graph.node(i).output()) {
      if (output.empty())
        continue;
      if (defined.contains(output) || !producer.try_emplace(output, i).second)
        return fail("value '" + output + "' is defined more than once");
    }
  std::vector<int> indegree(numNodes, 0);
  std::vector<std::vector<int>> users(numNodes);
  for (int i = 0; i < numNodes; ++i) {
    const onnx::NodeProto &node = graph.node(i);
    for (const std::string &input : inputsOf(node)) {
      if (input.empty() || defined.contains(input))
        continue;
      auto it = producer.find(input);
      if (it == producer.end()) {
        NodeContext context(state, node, opset,
                            UnknownLoc::get(&this->context));
        return context.error("input '" + input +
                             "' is not produced by any node, initializer or "
                             "graph input");
      }
      ++indegree[i];
      users[it->second].push_back(i);
    }
  }
  // Kahn's algorithm, smallest index first so that an already sorted graph
  // keeps its order.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < numNodes; ++i)
    if (indegree[i] == 0)
      ready.push(i);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int user : users[i])
      if (--indegree[user] == 0)
        ready.push(user);
  }
  if (static_cast<int>(order.size()) == numNodes)
    return success();
  for (int i = 0; i < numNodes; ++i)
    if (indegree[i] > 0) {
      NodeContext context(state, graph.node(i), opset,
                          UnknownLoc::get(&this->context));
      return context.error("the graph has a cycle through this node");
    }
  return fail("the graph has a cycle");
}

Location GraphImporter::nodeLoc(const onnx::NodeProto &node) {
  std::string name = node.name();
  if (name.empty() && node.output_size() > 0)
    name = node.output(0);
  return NameLoc::get(StringAttr::get(&context, name),
                      FileLineColLoc::get(&context, path, 0, 0));
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node) {
  NodeContext nc(state, node, opset, nodeLoc(node));
  const OpImporter *importer = lookupOpImporter(node.op_type());
  if (failed(checkNodeInputs(nc, *importer)))
    return failure();
  if (nc.allInputsOnHost()) {
    if (HostFolderFn folder = lookupHostFolder(node.op_type())) {
      FailureOr<bool> folded = folder(nc);
      if (failed(folded) || !state.error.empty())
        return failure();
      if (*folded)
        return success();
    }
  }
  if (failed(importer->fn(nc))) {
    if (state.error.empty())
      return nc.error("cannot be imported");
    return failure();
  }
  if (!state.error.empty()) // an attribute of the wrong type (typedAttr)
    return failure();
  for (unsigned i = 0, e = node.output_size(); i < e; ++i)
    if (nc.hasOutput(i) && !state.values.count(node.output(i)))
      return nc.error("output " + Twine(i) + " ('" + node.output(i) +
                      "') is not supported");
  return success();
}

/// The values of the graph's outputs, in order; an output that is a
/// constant folded on the host is materialised as a bm.constant.
LogicalResult GraphImporter::collectOutputs(SmallVector<Value> &results) {
  for (const onnx::ValueInfoProto &output : graph.output()) {
    auto it = state.values.find(output.name());
    if (it == state.values.end()) {
      state.error = "graph output '" + output.name() +
                    "' is not produced by any node or input";
      return failure();
    }
    if (!it->second.value) {
      onnx::NodeProto pseudo;
      pseudo.set_op_type("Output");
      pseudo.add_input(output.name());
      NodeContext nc(state, pseudo, opset, nodeLoc(pseudo));
      if (failed(nc.value(0)))
        return failure();
    }
    results.push_back(state.values[output.name()].value);
  }
  return success();
}

llvm::Expected<OwningOpRef<ModuleOp>> GraphImporter::run() {
  context.getOrLoadDialect<mlir::bm::BmDialect>();
  context.getOrLoadDialect<func::FuncDialect>();
  std::string diagnosticNode;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error &&
        state.lastDiagnostic.empty()) {
      state.lastDiagnostic = diag.str();
      diagnosticNode.clear();
      if (auto name = dyn_cast<NameLoc>(diag.getLocation()))
        diagnosticNode = name.getName().str();
    }
    return success();
  });

  for (const onnx::TensorProto &init : graph.initializer())
    if (!initializerNames.insert(init.name()).second)
      return makeError("initializer '" + init.name() +
                       "' is defined more than once");
  if (graph.output_size() == 0)
    return makeError("the graph has no outputs: it computes nothing");
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  if (failed(readOpset()) || failed(bindDims()) ||
      failed(addInputs(argTypes, argAttrs)) ||
      failed(addParameters(argTypes, argAttrs)) || failed(checkOpsSupported()))
    return makeError(state.error);
  std::vector<int> order;
  if (failed(orderNodes(order)))
    return makeError(state.error);

  Location fileLoc = FileLineColLoc::get(&context, path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  OpBuilder &builder = state.builder;
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, fileLoc, "main",
                                   builder.getFunctionType(argTypes, {}));
  func.setAllArgAttrs(argAttrs);
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);

  unsigned arg = 0;
  auto bind = [&](const std::string &name) {
    BlockArgument value = body->getArgument(arg++);
    value.setLoc(NameLoc::get(builder.getStringAttr(name), fileLoc));
    state.values[name] = {value, std::nullopt, {}};
  };
  for (const onnx::ValueInfoProto &input : graph.input())
    if (!initializerNames.contains(input.name()))
      bind(input.name());
  for (const onnx::TensorProto *param : parameters)
    bind(param->name());

  for (int i : order)
    if (failed(importNode(graph.node(i))))
      return makeError(state.error);

  SmallVector<Value> results;
  if (failed(collectOutputs(results)))
    return makeError(state.error);
  func::ReturnOp::create(builder, fileLoc, results);
  func.setType(
      builder.getFunctionType(argTypes, ValueRange(results).getTypes()));

  state.lastDiagnostic.clear();
  if (failed(mlir::verify(*module))) {
    std::string where =
        diagnosticNode.empty() ? "" : "node '" + diagnosticNode + "': ";
    return makeError(where + (state.lastDiagnostic.empty()
                                  ? "the imported module does not verify"
                                  : state.lastDiagnostic));
  }
  return std::move(module);
}

namespace bm {
llvm::Expected<OwningOpRef<ModuleOp>>
importOnnxModel(MLIRContext &context, const onnx::ModelProto &model,
                StringRef path, const ImportOptions &options,
                BoundDims *boundDims) {
  GraphImporter importer(context, model, path, options);
  auto module = importer.run();
  if (module && boundDims)
    *boundDims = importer.inputDims();
  return module;
}

llvm::Expected<OnnxFile> readOnnxFile(StringRef path) {
  llvm::Expected<std::string> bytes = readModelBytes(path);
  if (!bytes)
    return bytes.takeError();
  auto model = parseOnnxModel(*bytes, path);
  if (!model)
    return model.takeError();
  llvm::SHA256 hasher;
  hasher.update(llvm::arrayRefFromStringRef(*bytes));
  return OnnxFile{path.str(), std::move(*model),
                  llvm::toHex(hasher.final(), /*LowerCase=*/true)};
}

llvm::Expected<OwningOpRef<ModuleOp>>
importOnnxFile(MLIRContext &context, const OnnxFile &file,
               const ImportOptions &options, BoundDims *boundDims) {
  return importOnnxModel(context, *file.model, file.path, options, boundDims);
}

llvm::Expected<OwningOpRef<ModuleOp>>
importOnnxFile(MLIRContext &context, StringRef path,
               const ImportOptions &options, BoundDims *boundDims) {
  auto file = readOnnxFile(path);
  if (!file)
    return file.takeError();
  return importOnnxFile(context, *file, options, boundDims);
}
} // namespace bm
