//===- OnnxImporterTest.cpp - importer unit tests -------------------------===//

#include "import/OnnxImporter.h"

#include "import/HostTensor.h"

#include "mlir/IR/MLIRContext.h"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

namespace {

/// Sorted without duplicates: a duplicate would make one entry unreachable.
bool strictlySorted(const std::vector<std::string> &names) {
  return std::adjacent_find(names.begin(), names.end(),
                            std::greater_equal<>()) == names.end();
}

// lookupOpImporter() and lookupHostFolder() binary-search their tables.
TEST(OnnxImporterTest, OpTablesAreSorted) {
  std::vector<std::string> ops = bm::supportedOnnxOps();
  EXPECT_TRUE(strictlySorted(ops));
  EXPECT_GT(ops.size(), 60u);
  std::vector<std::string> folded = bm::hostFoldedOnnxOps();
  EXPECT_TRUE(strictlySorted(folded));
  EXPECT_GT(folded.size(), 20u);
}

onnx::ModelProto tinyMatMulModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto *graph = model.mutable_graph();
  onnx::ValueInfoProto *x = graph->add_input();
  x->set_name("x");
  auto *tensor = x->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx::TensorProto::FLOAT);
  tensor->mutable_shape()->add_dim()->set_dim_param("batch");
  tensor->mutable_shape()->add_dim()->set_dim_value(4);
  onnx::TensorProto *w = graph->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(3);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto *location = w->add_external_data();
  location->set_key("location");
  location->set_value("weights.bin");
  onnx::NodeProto *node = graph->add_node();
  node->set_name("mm");
  node->set_op_type("MatMul");
  node->add_input("x");
  node->add_input("w");
  node->add_output("y");
  graph->add_output()->set_name("y");
  return model;
}

TEST(OnnxImporterTest, ImportsMatMulWithBoundDim) {
  mlir::MLIRContext context;
  bm::ImportOptions options;
  options.dims["batch"] = 2;
  auto module =
      bm::importOnnxModel(context, tinyMatMulModel(), "m.onnx", options);
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  std::string text;
  llvm::raw_string_ostream os(text);
  (*module)->print(os);
  EXPECT_NE(text.find("bm.matmul"), std::string::npos) << text;
  EXPECT_NE(text.find("tensor<2x3xf32>"), std::string::npos) << text;
  EXPECT_NE(text.find("bm.external_location = \"weights.bin\""),
            std::string::npos)
      << text;
}

TEST(OnnxImporterTest, UnboundDimIsAnError) {
  mlir::MLIRContext context;
  auto module = bm::importOnnxModel(context, tinyMatMulModel(), "m.onnx", {});
  ASSERT_FALSE(static_cast<bool>(module));
  EXPECT_EQ(llvm::toString(module.takeError()),
            "symbolic dimension 'batch' of graph input 'x' is not bound; "
            "pass --dim batch=N");
}

TEST(OnnxImporterTest, PoolingStepsNeedOneEntryPerSpatialDim) {
  // A 2-D MaxPool with one dilation: before, SAME padding read past the end
  // of the dilations.
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto *graph = model.mutable_graph();
  auto *tensor = graph->add_input();
  tensor->set_name("x");
  auto *type = tensor->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : {1, 2, 8, 8})
    type->mutable_shape()->add_dim()->set_dim_value(dim);
  onnx::NodeProto *pool = graph->add_node();
  pool->set_name("pool");
  pool->set_op_type("MaxPool");
  pool->add_input("x");
  pool->add_output("y");
  auto addInts = [&](const char *name, std::initializer_list<int64_t> ints) {
    onnx::AttributeProto *attribute = pool->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::INTS);
    for (int64_t i : ints)
      attribute->add_ints(i);
  };
  addInts("kernel_shape", {3, 3});
  addInts("dilations", {1});
  onnx::AttributeProto *autoPad = pool->add_attribute();
  autoPad->set_name("auto_pad");
  autoPad->set_type(onnx::AttributeProto::STRING);
  autoPad->set_s("SAME_UPPER");
  graph->add_output()->set_name("y");
  mlir::MLIRContext context;
  auto module = bm::importOnnxModel(context, model, "pool.onnx", {});
  ASSERT_FALSE(static_cast<bool>(module));
  EXPECT_NE(llvm::toString(module.takeError())
                .find("strides and dilations need one entry >= 1 per spatial "
                      "dim"),
            std::string::npos);
}

TEST(OnnxImporterTest, GatherOutOfRangeNamesTheData) {
  // Folded on the host (both inputs constant) and imported (a weight table
  // with constant positions): the error names the table and its size.
  for (bool folded : {true, false}) {
    onnx::ModelProto model;
    model.set_ir_version(8);
    model.add_opset_import()->set_version(17);
    onnx::GraphProto *graph = model.mutable_graph();
    auto addConstant = [&](const char *name, std::vector<int64_t> values) {
      onnx::NodeProto *node = graph->add_node();
      node->set_op_type("Constant");
      node->add_output(name);
      onnx::AttributeProto *value = node->add_attribute();
      value->set_name("value");
      value->set_type(onnx::AttributeProto::TENSOR);
      onnx::TensorProto *tensor = value->mutable_t();
      tensor->set_data_type(onnx::TensorProto::INT64);
      tensor->add_dims(static_cast<int64_t>(values.size()));
      for (int64_t v : values)
        tensor->add_int64_data(v);
    };
    if (folded) {
      addConstant("table", {7, 8, 9});
    } else {
      onnx::TensorProto *table = graph->add_initializer();
      table->set_name("table");
      table->set_data_type(onnx::TensorProto::FLOAT);
      table->add_dims(3);
      table->add_dims(2);
      for (int i = 0; i < 6; ++i)
        table->add_float_data(static_cast<float>(i));
    }
    addConstant("positions", {0, 3});
    onnx::NodeProto *gather = graph->add_node();
    gather->set_name("wpe");
    gather->set_op_type("Gather");
    gather->add_input("table");
    gather->add_input("positions");
    gather->add_output("y");
    graph->add_output()->set_name("y");
    mlir::MLIRContext context;
    auto module = bm::importOnnxModel(context, model, "gather.onnx", {});
    ASSERT_FALSE(static_cast<bool>(module));
    EXPECT_EQ(llvm::toString(module.takeError()),
              "node 'wpe' (Gather): gather index 3 is out of range for "
              "'table', whose dim 0 holds 3")
        << (folded ? "folded" : "imported");
  }
}

TEST(OnnxImporterTest, ExternalDataMustStayInTheModelFolder) {
  for (const char *location :
       {"../w.bin", "/etc/passwd", "a/../../w.bin", "..\\w.bin"}) {
    onnx::ModelProto model = tinyMatMulModel();
    model.mutable_graph()
        ->mutable_initializer(0)
        ->mutable_external_data(0)
        ->set_value(location);
    mlir::MLIRContext context;
    bm::ImportOptions options;
    options.dims["batch"] = 2;
    auto module = bm::importOnnxModel(context, model, "dir/m.onnx", options);
    ASSERT_FALSE(static_cast<bool>(module)) << location;
    EXPECT_NE(llvm::toString(module.takeError()).find("outside the model"),
              std::string::npos);
  }
}

/// An opset-4 model: Reshape of a Constant with the target in the `shape`
/// attribute (opset 5 moved it to input 1).
onnx::ModelProto opset4ConstantReshapeModel() {
  onnx::ModelProto model;
  model.set_ir_version(3);
  model.add_opset_import()->set_version(4);
  onnx::GraphProto *graph = model.mutable_graph();
  onnx::NodeProto *constant = graph->add_node();
  constant->set_op_type("Constant");
  constant->add_output("c");
  onnx::AttributeProto *value = constant->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto *t = value->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(2);
  t->add_dims(3);
  for (int64_t v = 0; v < 6; ++v)
    t->add_int64_data(v);
  onnx::NodeProto *reshape = graph->add_node();
  reshape->set_name("r");
  reshape->set_op_type("Reshape");
  reshape->add_input("c");
  reshape->add_output("y");
  onnx::AttributeProto *shape = reshape->add_attribute();
  shape->set_name("shape");
  shape->set_type(onnx::AttributeProto::INTS);
  shape->add_ints(3);
  shape->add_ints(-1);
  graph->add_output()->set_name("y");
  return model;
}

// The host folder must read the pre-opset-5 attribute like the importer.
TEST(OnnxImporterTest, FoldsOpset4ReshapeOfAConstant) {
  mlir::MLIRContext context;
  auto module =
      bm::importOnnxModel(context, opset4ConstantReshapeModel(), "m.onnx", {});
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  std::string text;
  llvm::raw_string_ostream os(text);
  (*module)->print(os);
  EXPECT_NE(text.find("dense<[[0, 1], [2, 3], [4, 5]]> : tensor<3x2xi64>"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("bm.reshape"), std::string::npos) << text;
}

TEST(HostTensorTest, BroadcastIndex) {
  using bm::import::broadcastIndex;
  // [2, 3] output from a [3] operand: columns repeat.
  EXPECT_EQ(broadcastIndex(4, {2, 3}, {3}), 1);
  // [2, 3] output from a [2, 1] operand: rows repeat.
  EXPECT_EQ(broadcastIndex(4, {2, 3}, {2, 1}), 1);
  EXPECT_EQ(broadcastIndex(2, {2, 3}, {2, 1}), 0);
}

// `bmc plan` imports more than one model in one context.
TEST(OnnxImporterTest, ImportsTwiceInOneContext) {
  mlir::MLIRContext context;
  bm::ImportOptions options;
  options.dims["batch"] = 2;
  for (int i = 0; i < 2; ++i) {
    auto module =
        bm::importOnnxModel(context, tinyMatMulModel(), "m.onnx", options);
    ASSERT_TRUE(static_cast<bool>(module))
        << llvm::toString(module.takeError());
  }
}

TEST(HostTensorTest, DecodesRawFloat16AndChecksTheCount) {
  onnx::TensorProto proto;
  proto.set_data_type(onnx::TensorProto::FLOAT16);
  proto.add_dims(2);
  proto.set_raw_data(std::string("\x00\x3c\x00\xc0", 4)); // 1.0, -2.0
  std::string error;
  auto tensor = bm::import::decodeTensor(proto, error);
  ASSERT_TRUE(tensor.has_value()) << error;
  EXPECT_EQ(tensor->getFloat(0), 1.0);
  EXPECT_EQ(tensor->getFloat(1), -2.0);
  // Dims that claim more elements than stored must not be allocated.
  proto.set_dims(0, int64_t(1) << 40);
  EXPECT_FALSE(bm::import::decodeTensor(proto, error).has_value());
  EXPECT_EQ(error, "has 2 values for 1099511627776 elements");
}

TEST(HostTensorTest, CastWrapsIntegersAndTruncatesFloats) {
  bm::import::HostTensor t =
      bm::import::HostTensor::zeros(onnx::TensorProto::DOUBLE, {3});
  t.set(0, 300.7);
  t.set(1, -1.5);
  t.set(2, 1e30);
  bm::import::HostTensor i8 = t.cast(onnx::TensorProto::INT8);
  EXPECT_EQ(i8.getInt(0), 44); // 300 wraps to 44
  EXPECT_EQ(i8.getInt(1), -1);
  // 1e30 saturates to INT64_MAX (no undefined float-to-int cast), which then
  // wraps like any integer: its low byte is all ones.
  EXPECT_EQ(i8.getInt(2), -1);
  bm::import::HostTensor i64 = t.cast(onnx::TensorProto::INT64);
  EXPECT_EQ(i64.getInt(2), INT64_MAX);
  bm::import::HostTensor b = t.cast(onnx::TensorProto::BOOL);
  EXPECT_EQ(b.getInt(1), 1);
}

} // namespace
