//===- OnnxMutator.cpp - structure-aware mutations of ONNX models ---------===//
//
// Each mutation targets what the importer checks or computes with: the
// dims and element types of graph inputs, outputs and value_info, node
// attributes (of the right type or not), the edges between nodes (a rewired
// input can make a cycle or a dangling name), initializer shapes against
// their data, external-data entries, the opset and the op types. A generic
// reflection mutation reaches every other scalar field.
//
//===----------------------------------------------------------------------===//

#include "fuzz/OnnxMutator.h"

#include "import/OnnxImporter.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace bm::fuzz {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

/// Sizes and indices where off-by-one, overflow and sign bugs live.
constexpr int64_t kInterestingInts[] = {
    -1,      0,       1,          2,          3,          4,
    7,       8,       16,         64,         255,        65536,
    65537,   1 << 30, 2147483647, 2147483648, 1LL << 40,  -2147483648LL,
    INT64_MAX, INT64_MIN, INT64_MAX / 2, -9,  1000000007, 4294967296LL};

constexpr const char *kAttributeNames[] = {
    "alpha", "auto_pad", "axes", "axis", "batch_dims", "beta", "ceil_mode",
    "dilations", "direction", "epsilon", "group", "kernel_shape", "keepdims",
    "mode", "num_outputs", "pads", "perm", "split", "stash_type", "strides",
    "to", "transA", "transB", "value", "value_int", "value_ints"};

constexpr const char *kStrings[] = {"", "NOTSET", "SAME_UPPER", "SAME_LOWER",
                                    "VALID", "tanh", "none", "constant",
                                    "reflect", "edge", "x", "..", "/etc/passwd"};

struct ScalarField {
  Message *message;
  const FieldDescriptor *field;
};

class ModelMutator {
public:
  ModelMutator(onnx::ModelProto &model, std::mt19937_64 &rng)
      : model(model), graph(*model.mutable_graph()), rng(rng) {}

  void mutateOnce();

private:
  size_t below(size_t n) { return n ? rng() % n : 0; }
  bool coin() { return rng() & 1; }
  int64_t interestingInt(int64_t old);
  float interestingFloat();
  std::string anyValueName();
  onnx::NodeProto *anyNode();

  void mutateDim();
  void mutateElementType();
  void mutateAttribute(onnx::AttributeProto &attribute);
  void mutateSomeAttribute();
  void addAttribute();
  void rewireEdge();
  void renameValue();
  void mutateInitializer();
  void makeExternal(onnx::TensorProto &tensor);
  void mutateOpset();
  void mutateNodeList();
  void mutateAnyScalar();
  void mutateScalar(const ScalarField &scalar);
  void collectScalars(Message &message, std::vector<ScalarField> &out);

  onnx::ModelProto &model;
  onnx::GraphProto &graph;
  std::mt19937_64 &rng;
};

int64_t ModelMutator::interestingInt(int64_t old) {
  switch (below(4)) {
  case 0: // a neighbour, wrapping around at the ends of int64
    return static_cast<int64_t>(static_cast<uint64_t>(old) + below(5) - 2);
  case 1:
    return static_cast<int64_t>(below(130)) - 2;
  default:
    return kInterestingInts[below(std::size(kInterestingInts))];
  }
}

float ModelMutator::interestingFloat() {
  constexpr float values[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-12f, 1e30f,
                              std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::denorm_min()};
  return values[below(std::size(values))];
}

std::string ModelMutator::anyValueName() {
  std::vector<const std::string *> names;
  for (const onnx::ValueInfoProto &input : graph.input())
    names.push_back(&input.name());
  for (const onnx::TensorProto &init : graph.initializer())
    names.push_back(&init.name());
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &output : node.output())
      names.push_back(&output);
  if (names.empty() || below(8) == 0)
    return below(2) ? "" : "fuzz_" + std::to_string(below(4));
  return *names[below(names.size())];
}

onnx::NodeProto *ModelMutator::anyNode() {
  if (graph.node_size() == 0)
    return nullptr;
  return graph.mutable_node(static_cast<int>(below(graph.node_size())));
}

void ModelMutator::mutateDim() {
  std::vector<onnx::TensorShapeProto *> shapes;
  auto add = [&](onnx::ValueInfoProto &info) {
    if (info.type().has_tensor_type())
      shapes.push_back(
          info.mutable_type()->mutable_tensor_type()->mutable_shape());
  };
  for (onnx::ValueInfoProto &info : *graph.mutable_input())
    add(info);
  for (onnx::ValueInfoProto &info : *graph.mutable_output())
    add(info);
  for (onnx::ValueInfoProto &info : *graph.mutable_value_info())
    add(info);
  if (shapes.empty())
    return;
  onnx::TensorShapeProto &shape = *shapes[below(shapes.size())];
  if (shape.dim_size() == 0 || below(6) == 0) {
    shape.add_dim()->set_dim_value(interestingInt(1));
    return;
  }
  int index = static_cast<int>(below(shape.dim_size()));
  onnx::TensorShapeProto::Dimension &dim = *shape.mutable_dim(index);
  switch (below(5)) {
  case 0:
    dim.set_dim_param(below(2) ? "batch" : "seq");
    break;
  case 1:
    dim.Clear();
    break;
  case 2:
    shape.mutable_dim()->DeleteSubrange(index, 1);
    break;
  default:
    dim.set_dim_value(interestingInt(dim.dim_value()));
  }
}

void ModelMutator::mutateElementType() {
  int32_t type = static_cast<int32_t>(below(27));
  std::vector<onnx::TypeProto::Tensor *> types;
  for (auto *list :
       {graph.mutable_input(), graph.mutable_output(), graph.mutable_value_info()})
    for (onnx::ValueInfoProto &info : *list)
      types.push_back(info.mutable_type()->mutable_tensor_type());
  if (!types.empty() && coin()) {
    types[below(types.size())]->set_elem_type(type);
    return;
  }
  if (graph.initializer_size() > 0)
    graph.mutable_initializer(static_cast<int>(below(graph.initializer_size())))
        ->set_data_type(type);
}

void ModelMutator::mutateAttribute(onnx::AttributeProto &attribute) {
  switch (attribute.type()) {
  case onnx::AttributeProto::INT:
    attribute.set_i(interestingInt(attribute.i()));
    return;
  case onnx::AttributeProto::FLOAT:
    attribute.set_f(interestingFloat());
    return;
  case onnx::AttributeProto::STRING:
    attribute.set_s(kStrings[below(std::size(kStrings))]);
    return;
  case onnx::AttributeProto::INTS:
    if (attribute.ints_size() == 0 || below(4) == 0)
      attribute.add_ints(interestingInt(0));
    else if (below(3) == 0)
      attribute.mutable_ints()->RemoveLast();
    else {
      int i = static_cast<int>(below(attribute.ints_size()));
      attribute.set_ints(i, interestingInt(attribute.ints(i)));
    }
    return;
  case onnx::AttributeProto::TENSOR:
    attribute.mutable_t()->add_dims(interestingInt(1));
    return;
  default:
    // The wrong kind of value for the attribute's name.
    attribute.set_type(onnx::AttributeProto::INT);
    attribute.set_i(interestingInt(0));
  }
}

void ModelMutator::mutateSomeAttribute() {
  onnx::NodeProto *node = anyNode();
  if (!node)
    return;
  if (node->attribute_size() == 0 || below(5) == 0) {
    addAttribute();
    return;
  }
  int index = static_cast<int>(below(node->attribute_size()));
  if (below(6) == 0) {
    node->mutable_attribute()->DeleteSubrange(index, 1);
    return;
  }
  onnx::AttributeProto &attribute = *node->mutable_attribute(index);
  if (below(6) == 0) // a type that disagrees with the stored value
    attribute.set_type(static_cast<onnx::AttributeProto::AttributeType>(
        below(15)));
  mutateAttribute(attribute);
}

void ModelMutator::addAttribute() {
  onnx::NodeProto *node = anyNode();
  if (!node)
    return;
  onnx::AttributeProto &attribute = *node->add_attribute();
  attribute.set_name(kAttributeNames[below(std::size(kAttributeNames))]);
  constexpr onnx::AttributeProto::AttributeType kinds[] = {
      onnx::AttributeProto::INT, onnx::AttributeProto::INTS,
      onnx::AttributeProto::FLOAT, onnx::AttributeProto::STRING};
  attribute.set_type(kinds[below(std::size(kinds))]);
  mutateAttribute(attribute);
}

void ModelMutator::rewireEdge() {
  onnx::NodeProto *node = anyNode();
  if (!node)
    return;
  std::string name = anyValueName();
  if (node->input_size() == 0 || below(5) == 0)
    node->add_input(name);
  else if (below(6) == 0)
    node->mutable_input()->RemoveLast();
  else
    node->set_input(static_cast<int>(below(node->input_size())), name);
}

void ModelMutator::renameValue() {
  std::string from = anyValueName(), to = anyValueName();
  bool everywhere = coin(); // else only one occurrence: a dangling edge
  auto rename = [&](std::string &name) {
    if (name != from)
      return false;
    name = to;
    return !everywhere;
  };
  for (onnx::NodeProto &node : *graph.mutable_node()) {
    for (std::string &name : *node.mutable_input())
      if (rename(name))
        return;
    for (std::string &name : *node.mutable_output())
      if (rename(name))
        return;
  }
  for (auto *list : {graph.mutable_input(), graph.mutable_output()})
    for (onnx::ValueInfoProto &info : *list)
      if (rename(*info.mutable_name()))
        return;
  for (onnx::TensorProto &init : *graph.mutable_initializer())
    if (rename(*init.mutable_name()))
      return;
}

void ModelMutator::makeExternal(onnx::TensorProto &tensor) {
  tensor.set_data_location(onnx::TensorProto::EXTERNAL);
  tensor.clear_raw_data();
  tensor.clear_float_data();
  auto add = [&](const char *key, const std::string &value) {
    onnx::StringStringEntryProto &entry = *tensor.add_external_data();
    entry.set_key(key);
    entry.set_value(value);
  };
  add("location", kStrings[below(std::size(kStrings))] +
                      std::string(coin() ? "weights.bin" : ""));
  if (coin())
    add("offset", std::to_string(interestingInt(0)));
  if (coin())
    add("length", coin() ? std::to_string(interestingInt(16)) : "12abc");
}

void ModelMutator::mutateInitializer() {
  if (graph.initializer_size() == 0)
    return;
  onnx::TensorProto &tensor = *graph.mutable_initializer(
      static_cast<int>(below(graph.initializer_size())));
  switch (below(6)) {
  case 0:
    tensor.add_dims(interestingInt(2));
    break;
  case 1:
    if (tensor.dims_size() > 0) {
      int i = static_cast<int>(below(tensor.dims_size()));
      tensor.set_dims(i, interestingInt(tensor.dims(i)));
    }
    break;
  case 2:
    if (tensor.dims_size() > 0)
      tensor.mutable_dims()->RemoveLast();
    break;
  case 3: // data that disagrees with the dims
    if (!tensor.raw_data().empty())
      tensor.mutable_raw_data()->resize(below(tensor.raw_data().size() * 2 + 2));
    else
      tensor.add_int64_data(interestingInt(0));
    break;
  case 4:
    makeExternal(tensor);
    break;
  default:
    tensor.set_data_type(static_cast<int32_t>(below(27)));
  }
}

void ModelMutator::mutateOpset() {
  if (model.opset_import_size() == 0 || below(6) == 0) {
    onnx::OperatorSetIdProto &id = *model.add_opset_import();
    id.set_domain(coin() ? "" : "com.microsoft");
    id.set_version(interestingInt(17));
    return;
  }
  onnx::OperatorSetIdProto &id = *model.mutable_opset_import(
      static_cast<int>(below(model.opset_import_size())));
  id.set_version(coin() ? static_cast<int64_t>(below(26)) - 1
                        : interestingInt(id.version()));
}

void ModelMutator::mutateNodeList() {
  if (graph.node_size() == 0)
    return;
  int index = static_cast<int>(below(graph.node_size()));
  onnx::NodeProto *node = graph.mutable_node(index);
  switch (below(4)) {
  case 0: { // another op on the same edges
    static const std::vector<std::string> ops = bm::supportedOnnxOps();
    node->set_op_type(ops[below(ops.size())]);
    break;
  }
  case 1:
    *graph.add_node() = *node;
    break;
  case 2:
    graph.mutable_node()->DeleteSubrange(index, 1);
    break;
  default:
    graph.mutable_node()->SwapElements(
        index, static_cast<int>(below(graph.node_size())));
  }
}

void ModelMutator::collectScalars(Message &message,
                                  std::vector<ScalarField> &out) {
  const Reflection *reflection = message.GetReflection();
  const google::protobuf::Descriptor *descriptor = message.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor *field = descriptor->field(i);
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      out.push_back({&message, field});
      continue;
    }
    if (field->is_repeated()) {
      for (int j = 0, e = reflection->FieldSize(message, field); j < e; ++j)
        collectScalars(*reflection->MutableRepeatedMessage(&message, field, j),
                       out);
    } else if (reflection->HasField(message, field)) {
      collectScalars(*reflection->MutableMessage(&message, field), out);
    }
  }
}

void ModelMutator::mutateScalar(const ScalarField &scalar) {
  Message &m = *scalar.message;
  const Reflection *r = m.GetReflection();
  const FieldDescriptor *f = scalar.field;
  if (f->is_repeated()) {
    int size = r->FieldSize(m, f);
    if (size > 0 && coin()) {
      r->RemoveLast(&m, f);
      return;
    }
    // Growing a repeated scalar: add one, then mutate it below as an int.
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT64)
      r->AddInt64(&m, f, interestingInt(1));
    else if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT32)
      r->AddInt32(&m, f, static_cast<int32_t>(interestingInt(1)));
    else if (f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT)
      r->AddFloat(&m, f, interestingFloat());
    else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING)
      r->AddString(&m, f, anyValueName());
    return;
  }
  switch (f->cpp_type()) {
  case FieldDescriptor::CPPTYPE_INT64:
    r->SetInt64(&m, f, interestingInt(r->GetInt64(m, f)));
    break;
  case FieldDescriptor::CPPTYPE_INT32:
    r->SetInt32(&m, f, static_cast<int32_t>(interestingInt(r->GetInt32(m, f))));
    break;
  case FieldDescriptor::CPPTYPE_UINT64:
    r->SetUInt64(&m, f, static_cast<uint64_t>(interestingInt(0)));
    break;
  case FieldDescriptor::CPPTYPE_FLOAT:
    r->SetFloat(&m, f, interestingFloat());
    break;
  case FieldDescriptor::CPPTYPE_DOUBLE:
    r->SetDouble(&m, f, interestingFloat());
    break;
  case FieldDescriptor::CPPTYPE_BOOL:
    r->SetBool(&m, f, !r->GetBool(m, f));
    break;
  case FieldDescriptor::CPPTYPE_ENUM: {
    const google::protobuf::EnumDescriptor *e = f->enum_type();
    r->SetEnum(&m, f, e->value(static_cast<int>(below(e->value_count()))));
    break;
  }
  case FieldDescriptor::CPPTYPE_STRING: {
    std::string value = r->GetString(m, f);
    if (!value.empty() && coin())
      value.resize(below(value.size()));
    else
      value = anyValueName();
    r->SetString(&m, f, value);
    break;
  }
  default:
    break;
  }
}

void ModelMutator::mutateAnyScalar() {
  std::vector<ScalarField> scalars;
  collectScalars(model, scalars);
  if (!scalars.empty())
    mutateScalar(scalars[below(scalars.size())]);
}

void ModelMutator::mutateOnce() {
  switch (below(10)) {
  case 0:
    mutateDim();
    break;
  case 1:
    mutateElementType();
    break;
  case 2:
  case 3:
    mutateSomeAttribute();
    break;
  case 4:
    rewireEdge();
    break;
  case 5:
    renameValue();
    break;
  case 6:
    mutateInitializer();
    break;
  case 7:
    if (below(3) == 0)
      mutateOpset();
    else
      mutateNodeList();
    break;
  default:
    mutateAnyScalar();
  }
}

} // namespace

void mutateOnnxModel(onnx::ModelProto &model, std::mt19937_64 &rng) {
  ModelMutator mutator(model, rng);
  for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n)
    mutator.mutateOnce();
}

} // namespace bm::fuzz
