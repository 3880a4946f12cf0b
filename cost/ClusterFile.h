//===- ClusterFile.h - the parsed tree of a cluster file --------*- C++ -*-===//
//
// Internal to cost: JSON and YAML cluster files are read into one
// small tree (Node), so that the key checks and the calibration sections are
// written once for both syntaxes. The trees of cluster files are shallow
// (three levels); the readers refuse deeper ones before recursing.
//
//===----------------------------------------------------------------------===//

#ifndef BM_COST_CLUSTERFILE_H
#define BM_COST_CLUSTERFILE_H

#include "cost/Cluster.h"

#include "llvm/ADT/Twine.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bm::cost {

// Units of the files' keys (the names say which: _gbps, _tflops, _us).
inline constexpr double kGB = 1e9;
inline constexpr double kTera = 1e12;
inline constexpr double kMicro = 1e-6;

/// A value of a cluster file.
struct Node {
  enum class Kind { Scalar, Sequence, Mapping };
  Kind kind = Kind::Scalar;
  /// A scalar as written (unquoted).
  std::string text;
  /// Set when the scalar is an (unquoted) number.
  std::optional<double> number;
  std::vector<Node> items;
  /// A mapping's keys and values in file order; keys are unique.
  std::vector<std::pair<std::string, Node>> fields;

  bool isScalar() const { return kind == Kind::Scalar; }
  /// A mapping's value at `key`, or null.
  const Node *field(llvm::StringRef key) const;
  /// "a list", "a mapping", or the scalar in quotes, for messages.
  std::string describe() const;
};

llvm::Error makeClusterError(const llvm::Twine &message);

/// The text of a cluster file as a tree whose root is a mapping; an error
/// prefixed with `source` for malformed text, a repeated key at any level,
/// or text no cluster file has (see checkTextShape in ClusterFile.cpp).
llvm::Expected<Node> readClusterJson(llvm::StringRef text,
                                     llvm::StringRef source);
llvm::Expected<Node> readClusterYaml(llvm::StringRef text,
                                     llvm::StringRef source);

/// Checks of one value of the file at `key` (a path such as
/// "collectives[3].bytes"); errors name the source, the key and the value.
class FieldReader {
public:
  explicit FieldReader(llvm::StringRef source) : source_(source) {}

  llvm::Error error(const llvm::Twine &key, const llvm::Twine &what) const;
  /// A finite number >= 0.
  llvm::Expected<double> number(const Node &node, const llvm::Twine &key) const;
  /// A finite number > 0.
  llvm::Expected<double> positive(const Node &node,
                                  const llvm::Twine &key) const;
  /// An integer in [0, kLargestCount].
  llvm::Expected<int> count(const Node &node, const llvm::Twine &key) const;
  /// Any scalar, as written.
  llvm::Expected<std::string> string(const Node &node,
                                     const llvm::Twine &key) const;
  /// Checks `node` is a mapping whose keys are all in `known`.
  llvm::Error mapping(const Node &node, const llvm::Twine &key,
                      llvm::ArrayRef<const char *> known) const;
  llvm::Error sequence(const Node &node, const llvm::Twine &key) const;

private:
  std::string source_;
};

enum class KeyType { Number, Integer, String };

/// One flat key of a cluster file.
struct KeySpec {
  const char *name;
  KeyType type;
  bool required;
  /// What it means, with its unit: error messages and the writer's comments.
  const char *meaning;
};

/// The flat keys, alphabetical.
llvm::ArrayRef<KeySpec> clusterKeySpecs();

/// Reads the optional keys `calibration`, `gemm_tflops`,
/// `memory_kernel_gbps` and `collectives` of the root mapping.
llvm::Expected<Calibration> readCalibration(const Node &root,
                                            const FieldReader &reader);

/// Names of the top-level keys readCalibration takes, alphabetical.
llvm::ArrayRef<const char *> calibrationKeys();

/// The shortest decimal text t with strtod(t) * scale == value; without an
/// exponent where one of at most 17 digits exists (1000, not 1e+03).
std::string decimalText(double value, double scale = 1);

/// "intra_node" / "inter_node", as files name links.
const char *linkKeyName(LinkClass link);

} // namespace bm::cost

#endif // BM_COST_CLUSTERFILE_H
