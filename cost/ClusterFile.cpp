//===- ClusterFile.cpp - JSON and YAML cluster files as one tree ----------===//

#include "cost/ClusterFile.h"
#include "cost/TextShape.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"

#include <cmath>
#include <set>

using namespace bm::cost;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

/// Cluster files nest three levels (collectives -> entry -> field); the
/// readers recurse once per level and refuse more than this.
static constexpr int kDeepestNesting = 8;

llvm::Error bm::cost::makeClusterError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string Node::describe() const {
  if (kind == Kind::Sequence)
    return "a list";
  if (kind == Kind::Mapping)
    return "a mapping";
  return "'" + text + "'";
}

const Node *Node::field(StringRef key) const {
  for (const auto &[name, value] : fields)
    if (name == key)
      return &value;
  return nullptr;
}

static std::optional<double> parseNumber(StringRef text) {
  double value;
  if (text.trim().getAsDouble(value))
    return std::nullopt;
  return value;
}

/// A cluster file is a few dozen keys and lists of a few hundred measured
/// points; LLVM's parsers recurse per nesting level and (YAML) per entry of
/// a flow collection, so text far beyond that is refused before it is
/// parsed ("{,,,,...}" of 20,000 commas overflowed the stack).
static llvm::Error checkTextShape(StringRef text, StringRef source) {
  TextShape shape = measureText(text);
  if (shape.widest > 4096 || shape.depth > 32)
    return makeClusterError(
        source + ": not a cluster file (" + Twine(shape.widest) +
        " commas in one list, brackets nested " + Twine(shape.depth) +
        " deep; a cluster file is keys and short lists)");
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// YAML (and the repeated keys of JSON)
//===----------------------------------------------------------------------===//

namespace {

/// Builds the tree of one YAML document; the first problem wins.
class YamlTreeBuilder {
public:
  explicit YamlTreeBuilder(StringRef source) : source_(source) {}

  std::optional<Node> build(llvm::yaml::Node *node, int depth) {
    if (depth > kDeepestNesting)
      return fail("nested more than " + Twine(kDeepestNesting) + " deep");
    // An empty value (`key:`) is YAML's null: an empty scalar.
    if (!node || llvm::isa<llvm::yaml::NullNode>(node))
      return Node();
    if (auto *scalar = llvm::dyn_cast_or_null<llvm::yaml::ScalarNode>(node))
      return buildScalar(*scalar);
    if (auto *seq = llvm::dyn_cast_or_null<llvm::yaml::SequenceNode>(node))
      return buildSequence(*seq, depth);
    if (auto *map = llvm::dyn_cast_or_null<llvm::yaml::MappingNode>(node))
      return buildMapping(*map, depth);
    return fail("values must be scalars, lists or mappings");
  }

  std::string problem;

private:
  std::optional<Node> fail(const Twine &what) {
    if (problem.empty())
      problem = (source_ + ": " + what).str();
    return std::nullopt;
  }

  Node buildScalar(llvm::yaml::ScalarNode &scalar) {
    Node out;
    llvm::SmallString<32> storage;
    out.text = scalar.getValue(storage).str();
    // A quoted scalar is a string even when it looks like a number.
    if (!scalar.getRawValue().starts_with("\"") &&
        !scalar.getRawValue().starts_with("'"))
      out.number = parseNumber(out.text);
    return out;
  }

  std::optional<Node> buildSequence(llvm::yaml::SequenceNode &seq, int depth) {
    Node out;
    out.kind = Node::Kind::Sequence;
    for (llvm::yaml::Node &item : seq) {
      std::optional<Node> child = build(&item, depth + 1);
      if (!child)
        return std::nullopt;
      out.items.push_back(std::move(*child));
    }
    return out;
  }

  std::optional<Node> buildMapping(llvm::yaml::MappingNode &map, int depth) {
    Node out;
    out.kind = Node::Kind::Mapping;
    std::set<std::string> seen;
    for (llvm::yaml::KeyValueNode &pair : map) {
      auto *key = llvm::dyn_cast_or_null<llvm::yaml::ScalarNode>(pair.getKey());
      if (!key)
        return fail("keys must be plain scalars");
      llvm::SmallString<32> storage;
      std::string name = key->getValue(storage).str();
      if (!seen.insert(name).second)
        return fail("key '" + name + "' is given twice");
      std::optional<Node> value = build(pair.getValue(), depth + 1);
      if (!value)
        return std::nullopt;
      out.fields.emplace_back(name, std::move(*value));
    }
    return out;
  }

  std::string source_;
};

/// Parses `text` as one YAML document into a tree; `problem` is the first
/// syntax or shape error.
struct YamlParse {
  std::optional<Node> root;
  std::string problem;
  bool syntaxError = false;
};

} // namespace

static YamlParse parseYamlTree(StringRef text, StringRef source) {
  llvm::SourceMgr sourceMgr;
  std::string diagnostic;
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diag, void *context) {
        auto *out = static_cast<std::string *>(context);
        if (out->empty())
          *out = llvm::formatv("line {0}: {1}", diag.getLineNo(),
                               diag.getMessage())
                     .str();
      },
      &diagnostic);
  llvm::yaml::Stream stream(text, sourceMgr);
  YamlParse parse;
  llvm::yaml::document_iterator document = stream.begin();
  if (document == stream.end()) {
    parse.problem = (source + ": empty cluster file").str();
    return parse;
  }
  YamlTreeBuilder builder(source);
  parse.root = builder.build(document->getRoot(), 0);
  if (stream.failed() || !diagnostic.empty()) {
    parse.syntaxError = true;
    parse.root.reset();
    parse.problem = (source + ": malformed YAML: " +
                     (diagnostic.empty() ? "parse error" : diagnostic))
                        .str();
  } else if (!parse.root) {
    parse.problem = builder.problem;
  }
  return parse;
}

Expected<Node> bm::cost::readClusterYaml(StringRef text, StringRef source) {
  if (llvm::Error err = checkTextShape(text, source))
    return std::move(err);
  YamlParse parse = parseYamlTree(text, source);
  if (!parse.root)
    return makeClusterError(parse.problem);
  if (parse.root->kind != Node::Kind::Mapping)
    return makeClusterError(source + ": expected a YAML mapping of key: value");
  return std::move(*parse.root);
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

static Expected<Node> jsonToNode(const llvm::json::Value &value,
                                 const Twine &key, StringRef source,
                                 int depth) {
  if (depth > kDeepestNesting)
    return makeClusterError(source + ": nested more than " +
                            Twine(kDeepestNesting) + " deep");
  Node out;
  auto childKey = [&](StringRef name) {
    return key.isTriviallyEmpty() ? name.str() : (key + "." + name).str();
  };
  if (std::optional<double> number = value.getAsNumber()) {
    out.number = *number;
    out.text = decimalText(*number);
  } else if (std::optional<StringRef> string = value.getAsString()) {
    out.text = string->str();
  } else if (const llvm::json::Array *array = value.getAsArray()) {
    out.kind = Node::Kind::Sequence;
    for (const auto &[i, item] : llvm::enumerate(*array)) {
      Expected<Node> child =
          jsonToNode(item, key + "[" + Twine(i) + "]", source, depth + 1);
      if (!child)
        return child.takeError();
      out.items.push_back(std::move(*child));
    }
  } else if (const llvm::json::Object *object = value.getAsObject()) {
    out.kind = Node::Kind::Mapping;
    for (const auto &[name, field] : *object) {
      Expected<Node> child =
          jsonToNode(field, childKey(name), source, depth + 1);
      if (!child)
        return child.takeError();
      out.fields.emplace_back(name.str(), std::move(*child));
    }
    // llvm::json::Object is a hash map; keep the file's keys sorted so the
    // first error does not depend on hashing.
    llvm::sort(out.fields,
               [](const auto &a, const auto &b) { return a.first < b.first; });
  } else {
    return makeClusterError(source + ": key '" + key +
                            "' must be a number, a string, a list or a "
                            "mapping");
  }
  return out;
}

Expected<Node> bm::cost::readClusterJson(StringRef text, StringRef source) {
  if (llvm::Error err = checkTextShape(text, source))
    return std::move(err);
  Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return makeClusterError(
        source + ": malformed JSON: " + llvm::toString(parsed.takeError()));
  if (!parsed->getAsObject())
    return makeClusterError(source + ": expected a JSON object of key: value");
  // llvm::json keeps the last of repeated keys; a repeated key is a mistake
  // in the file. JSON is YAML's flow syntax, and the YAML reader, unlike
  // llvm::json, sees every key as written.
  YamlParse asYaml = parseYamlTree(text, source);
  if (!asYaml.root && !asYaml.syntaxError &&
      StringRef(asYaml.problem).ends_with("is given twice"))
    return makeClusterError(asYaml.problem);
  return jsonToNode(*parsed, "", source, 0);
}

//===----------------------------------------------------------------------===//
// Field checks
//===----------------------------------------------------------------------===//

llvm::Error FieldReader::error(const Twine &key, const Twine &what) const {
  return makeClusterError(source_ + ": key '" + key + "' " + what);
}

Expected<double> FieldReader::number(const Node &node, const Twine &key) const {
  if (!node.isScalar() || !node.number || !std::isfinite(*node.number))
    return error(key, "must be a number, got " + node.describe());
  if (*node.number < 0)
    return error(key, "must not be negative, got " + node.text);
  return *node.number;
}

Expected<double> FieldReader::positive(const Node &node,
                                       const Twine &key) const {
  Expected<double> value = number(node, key);
  if (value && *value == 0)
    return error(key, "must be positive, got " + node.text);
  return value;
}

Expected<int> FieldReader::count(const Node &node, const Twine &key) const {
  Expected<double> value = number(node, key);
  if (!value)
    return value.takeError();
  if (*value != std::floor(*value))
    return error(key, "must be an integer, got " + node.text);
  if (*value > kLargestCount)
    return error(key, "must be at most " + Twine(kLargestCount) + ", got " +
                          node.text);
  return static_cast<int>(*value);
}

Expected<std::string> FieldReader::string(const Node &node,
                                          const Twine &key) const {
  if (!node.isScalar())
    return error(key, "must be a string, got " + node.describe());
  return node.text;
}

llvm::Error FieldReader::mapping(const Node &node, const Twine &key,
                                 llvm::ArrayRef<const char *> known) const {
  if (node.kind != Node::Kind::Mapping)
    return error(key, "must be a mapping, got " + node.describe());
  for (const auto &[name, value] : node.fields)
    if (llvm::none_of(known, [&](const char *k) { return name == k; }))
      return error(key + "." + name,
                   "is unknown (known keys: " + llvm::join(known, ", ") + ")");
  return llvm::Error::success();
}

llvm::Error FieldReader::sequence(const Node &node, const Twine &key) const {
  if (node.kind != Node::Kind::Sequence)
    return error(key, "must be a list, got " + node.describe());
  return llvm::Error::success();
}
