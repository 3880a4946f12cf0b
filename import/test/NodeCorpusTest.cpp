//===- NodeCorpusTest.cpp - ONNX backend node tests as an import corpus ---===//
//
// Debian's libonnx-testdata installs ONNX's backend node tests (one small
// model per op variant). Every test whose ops are all in the importer's
// supported list must import, except the variants allow-listed below with
// the reason bm cannot express them.
//
//===----------------------------------------------------------------------===//

#include "import/OnnxImporter.h"
#include "import/OnnxLoader.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace {

constexpr const char *kCorpus = "/usr/include/onnx/backend/test/data/node";

/// Node tests of supported ops whose variant bm does not express, and why.
/// A test is allowed to fail if its name contains one of these patterns; an
/// allow-listed test that imports is a failure (the entry is stale).
const std::vector<std::pair<std::string, std::string>> kAllowedFailures = {
    // Training-mode batch norm also updates running statistics; bmc derives
    // training from the inference graph instead.
    {"_training_mode", "training_mode=1"},
    // bm has no string, optional or sequence types.
    {"_STRING", "string tensors"},
    {"test_equal_string", "string tensors"},
    {"test_identity_opt", "optional types"},
    {"test_if_opt", "optional types"},
    {"test_identity_sequence", "sequence types"},
    // Sequences exist only while a loop over constants is evaluated: not as
    // graph inputs or outputs.
    {"test_if_seq", "a sequence graph output"},
    {"test_loop13_seq", "a sequence graph input"},
    {"test_loop16_seq_none", "an optional sequence graph input"},
    {"test_sequence_insert_at_", "a sequence graph input"},
    // Loops run on the host over constants only; these loop over run-time
    // start, limit and delta.
    {"test_range_float_type_positive_delta_expanded",
     "a loop over run-time values"},
    {"test_range_int32_type_negative_delta_expanded",
     "a loop over run-time values"},
    // Pad imports as concats of constants: constant mode only.
    {"test_edge_pad", "edge padding"},
    {"test_reflect_pad", "reflect padding"},
    // bm pooling has no dilations, no argmax output and float inputs only.
    {"test_maxpool_2d_dilations", "pooling dilations"},
    {"test_maxpool_2d_uint8", "integer pooling"},
    {"test_maxpool_with_argmax", "argmax output"},
};

/// The allow-list entry `test` matches, or null.
const std::pair<std::string, std::string> *
allowedFailure(const std::string &test) {
  auto it = llvm::find_if(kAllowedFailures, [&](const auto &entry) {
    return test.find(entry.first) != std::string::npos;
  });
  return it == kAllowedFailures.end() ? nullptr : &*it;
}

/// Whether every node of `model` is of an op the importer takes only when
/// it folds (Mod, Floor, ...: shape arithmetic, no kernel).
bool onlyFoldOnlyOps(const onnx::ModelProto &model) {
  std::vector<std::string> list = bm::foldOnlyOnnxOps();
  return llvm::all_of(model.graph().node(), [&](const onnx::NodeProto &node) {
    return llvm::is_contained(list, node.op_type());
  });
}

/// Node tests pass shapes, axes and bounds as graph inputs; in real models
/// they are constants, and bm needs them to know static shapes. This turns
/// the integer and scalar inputs, and those no node takes as its data
/// (input 0), into Constant nodes holding the test's data; in a test of
/// fold-only ops, every input.
onnx::ModelProto freezeShapeInputs(const onnx::ModelProto &model,
                                   llvm::StringRef dir) {
  std::set<std::string> data;
  if (!onlyFoldOnlyOps(model))
    for (const onnx::NodeProto &node : model.graph().node())
      if (node.input_size() > 0)
        data.insert(node.input(0));
  onnx::ModelProto frozen = model;
  onnx::GraphProto *graph = frozen.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  int index = 0;
  for (const onnx::ValueInfoProto &input : model.graph().input()) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "test_data_set_0",
                            "input_" + std::to_string(index++) + ".pb");
    onnx::TensorProto value;
    auto buffer = llvm::MemoryBuffer::getFile(path);
    int32_t type = input.type().tensor_type().elem_type();
    bool integer =
        type == onnx::TensorProto::INT64 || type == onnx::TensorProto::INT32;
    if (buffer &&
        value.ParseFromArray((*buffer)->getBufferStart(),
                             (*buffer)->getBufferSize()) &&
        (integer || value.dims_size() == 0 || !data.count(input.name()))) {
      // A Constant node, not an initializer: float initializers with more
      // than one element are parameters. The importer orders nodes itself.
      onnx::NodeProto *constant = graph->add_node();
      constant->set_op_type("Constant");
      constant->add_output(input.name());
      onnx::AttributeProto *attr = constant->add_attribute();
      attr->set_name("value");
      attr->set_type(onnx::AttributeProto::TENSOR);
      *attr->mutable_t() = value;
      continue;
    }
    *kept.Add() = input;
  }
  graph->mutable_input()->Swap(&kept);
  return frozen;
}

/// Binds each symbolic dim of the graph inputs to the size the test's
/// first data set gives it (2 if there is none).
std::map<std::string, int64_t> dimsFromTestData(const onnx::ModelProto &model,
                                                llvm::StringRef dir) {
  std::map<std::string, int64_t> dims;
  std::set<std::string> initializers;
  for (const onnx::TensorProto &t : model.graph().initializer())
    initializers.insert(t.name());
  int index = 0;
  for (const onnx::ValueInfoProto &input : model.graph().input()) {
    if (initializers.count(input.name()))
      continue;
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "test_data_set_0",
                            "input_" + std::to_string(index++) + ".pb");
    onnx::TensorProto data;
    auto buffer = llvm::MemoryBuffer::getFile(path);
    bool haveData = buffer && data.ParseFromArray((*buffer)->getBufferStart(),
                                                  (*buffer)->getBufferSize());
    const auto &shape = input.type().tensor_type().shape();
    for (int d = 0; d < shape.dim_size(); ++d)
      if (shape.dim(d).has_dim_param())
        dims.emplace(shape.dim(d).dim_param(),
                     haveData && d < data.dims_size() ? data.dims(d) : 2);
  }
  return dims;
}

TEST(NodeCorpusTest, SupportedNodeTestsImport) {
  // scripts/setup installs the corpus: without it this test would check
  // nothing, so it fails instead of skipping.
  ASSERT_TRUE(llvm::sys::fs::is_directory(kCorpus))
      << kCorpus << " is missing (scripts/setup installs libonnx-testdata)";
  std::vector<std::string> supportedList = bm::supportedOnnxOps();
  std::set<std::string> supported(supportedList.begin(), supportedList.end());

  std::vector<std::string> dirs;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(kCorpus, ec), end; it != end && !ec;
       it.increment(ec))
    dirs.push_back(it->path());
  std::sort(dirs.begin(), dirs.end());

  int total = 0, candidates = 0, imported = 0, allowed = 0, afterFreezing = 0,
      unreadable = 0;
  std::set<std::string> unsupportedOps;
  std::vector<std::string> failures;
  for (const std::string &dir : dirs) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "model.onnx");
    auto model = bm::loadOnnxModel(path);
    if (!model) {
      llvm::consumeError(model.takeError());
      ++unreadable;
      continue;
    }
    ++total;
    bool allSupported = true;
    for (const onnx::NodeProto &node : (*model)->graph().node())
      if (!supported.count(node.op_type()) ||
          !(node.domain().empty() || node.domain() == "ai.onnx")) {
        allSupported = false;
        unsupportedOps.insert(node.op_type());
      }
    if (!allSupported) {
      // Imported anyway: it must fail with one line, not crash.
      mlir::MLIRContext context;
      bm::ImportOptions options;
      options.dims = dimsFromTestData(**model, dir);
      auto module = bm::importOnnxModel(context, **model, path, options);
      if (module)
        ADD_FAILURE() << dir << " has an unsupported op but imported";
      else if (llvm::toString(module.takeError()).find('\n') !=
               std::string::npos)
        ADD_FAILURE() << dir << " gave a multi-line error";
      continue;
    }
    ++candidates;
    std::string name = llvm::sys::path::filename(dir).str();
    mlir::MLIRContext context;
    bm::ImportOptions options;
    options.dims = dimsFromTestData(**model, dir);
    auto module = bm::importOnnxModel(context, **model, path, options);
    std::string error;
    if (!module) {
      error = llvm::toString(module.takeError());
      if (error.find("must be a constant") != std::string::npos ||
          error.find("must be constants") != std::string::npos) {
        onnx::ModelProto frozen = freezeShapeInputs(**model, dir);
        auto retry = bm::importOnnxModel(context, frozen, path, options);
        if (retry) {
          error.clear();
          ++afterFreezing;
        } else
          error = llvm::toString(retry.takeError());
      }
    }
    const auto *allowList = allowedFailure(name);
    if (error.empty()) {
      ++imported;
      if (allowList)
        failures.push_back(name + ": imported, but the allow-list entry \"" +
                           allowList->first + "\" (" + allowList->second +
                           ") expects it to fail; remove or narrow the entry");
      continue;
    }
    if (allowList) {
      ++allowed;
      continue;
    }
    failures.push_back(name + ": " + error);
  }
  std::cout << "imported " << imported << " of " << candidates
            << " node tests whose op is supported (" << unsupportedOps.size()
            << " unsupported ops skipped)\n"
            << "  " << allowed << " failed as allow-listed variants; "
            << afterFreezing
            << " imported after turning run-time shape inputs into "
               "constants; "
            << total - candidates
            << " tests with unsupported ops were rejected with one line; "
            << unreadable << " unreadable\n";
  for (const std::string &failure : failures)
    ADD_FAILURE() << failure;
  // Every corpus model loads, and the corpus is the one that was counted
  // (588 tests with supported ops in Debian 12's libonnx-testdata): an
  // empty or truncated corpus must not pass.
  EXPECT_EQ(unreadable, 0);
  EXPECT_GE(candidates, 500);
}

} // namespace
