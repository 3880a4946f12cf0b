//===- CalibrationReader.cpp - the measured sections of a cluster file ----===//
//
// The keys `bmc calibrate` writes (issue 15, section B): provenance
// (`calibration`), the GEMM rate grid (`gemm_tflops`), the memory-bound
// kernel rates (`memory_kernel_gbps`) and the collectives (`collectives`).
// Units are in the key names; every check names the file, the key and the
// value.
//
//===----------------------------------------------------------------------===//

#include "cost/ClusterFile.h"

#include "llvm/ADT/STLExtras.h"

#include <set>
#include <tuple>

using namespace bm::cost;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

// Alphabetical.
static const char *const kCalibrationKeys[] = {
    "calibration", "collectives", "gemm_tflops", "memory_kernel_gbps"};
static const char *const kProvenanceKeys[] = {
    "date",        "load_average", "machine",          "ranks",
    "single_rank", "spread",       "threads_per_rank", "versions"};
static const char *const kCollectiveKeys[] = {
    "busbw_gbps", "bytes", "link", "op", "ranks", "spread", "time_us"};
/// The keys every collective entry has; `spread` is newer (issue 24) and
/// optional.
static const char *const kRequiredCollectiveKeys[] = {
    "busbw_gbps", "bytes", "link", "op", "ranks", "time_us"};
static const char *const kSpreadKeys[] = {"collectives", "gemm", "largest",
                                          "median", "memory"};
static const char *const kLoadAverageKeys[] = {"after", "before",
                                               "busy_cores_before", "cores"};

llvm::ArrayRef<const char *> bm::cost::calibrationKeys() {
  return kCalibrationKeys;
}

const char *bm::cost::linkKeyName(LinkClass link) {
  return link == LinkClass::InterNode ? "inter_node" : "intra_node";
}

//===----------------------------------------------------------------------===//
// calibration: provenance
//===----------------------------------------------------------------------===//

static llvm::Error readVersions(const Node &node, const FieldReader &reader,
                                Calibration &out) {
  if (node.kind != Node::Kind::Mapping)
    return reader.error("calibration.versions",
                        "must be a mapping, got " + node.describe());
  for (const auto &[name, value] : node.fields) {
    Expected<std::string> text =
        reader.string(value, "calibration.versions." + name);
    if (!text)
      return text.takeError();
    out.versions[name] = *text;
  }
  return llvm::Error::success();
}

/// A mapping of numbers >= 0 whose keys are in `known`, or, with `known`
/// empty, any keys (single_rank names kernel classes).
static llvm::Error readNumberMap(const Node &node, const std::string &key,
                                 llvm::ArrayRef<const char *> known,
                                 const FieldReader &reader,
                                 std::map<std::string, double> &out) {
  if (known.empty() && node.kind != Node::Kind::Mapping)
    return reader.error(key, "must be a mapping, got " + node.describe());
  if (!known.empty())
    if (llvm::Error error = reader.mapping(node, key, known))
      return error;
  for (const auto &[name, value] : node.fields) {
    Expected<double> number = reader.number(value, key + "." + name);
    if (!number)
      return number.takeError();
    out[name] = *number;
  }
  return llvm::Error::success();
}

static llvm::Error readProvenance(const Node &node, const FieldReader &reader,
                                  Calibration &out) {
  if (llvm::Error error = reader.mapping(node, "calibration", kProvenanceKeys))
    return error;
  for (const auto &[name, value] : node.fields) {
    std::string key = "calibration." + name;
    llvm::Error problem = llvm::Error::success();
    if (name == "versions") {
      problem = readVersions(value, reader, out);
    } else if (name == "spread") {
      problem = readNumberMap(value, key, kSpreadKeys, reader, out.spread);
    } else if (name == "load_average") {
      problem =
          readNumberMap(value, key, kLoadAverageKeys, reader, out.loadAverage);
    } else if (name == "single_rank") {
      problem = readNumberMap(value, key, {}, reader, out.singleRank);
    } else if (name == "ranks" || name == "threads_per_rank") {
      Expected<int> count = reader.count(value, key);
      if (count)
        (name == "ranks" ? out.ranks : out.threadsPerRank) = *count;
      problem = count.takeError();
    } else {
      Expected<std::string> text = reader.string(value, key);
      if (text)
        (name == "date" ? out.date : out.machine) = *text;
      problem = text.takeError();
    }
    if (problem)
      return problem;
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// gemm_tflops: [m, n, k, tflops], a full grid
//===----------------------------------------------------------------------===//

static Expected<GemmPoint> readGemmPoint(const Node &node, size_t index,
                                         const FieldReader &reader) {
  std::string key = "gemm_tflops[" + std::to_string(index) + "]";
  // The fifth item, the spread, is newer (issue 24): older files lack it.
  size_t items = node.items.size();
  if (node.kind != Node::Kind::Sequence || items < 4 || items > 5)
    return reader.error(key, "must be a list [m, n, k, tflops] or [m, n, k, "
                             "tflops, spread], got " +
                                 node.describe());
  double values[4];
  for (int i = 0; i < 4; ++i) {
    Expected<double> value = reader.positive(node.items[i], key);
    if (!value)
      return value.takeError();
    values[i] = *value;
  }
  GemmPoint point{values[0], values[1], values[2], values[3] * kTera, {}};
  if (items == 5) {
    Expected<double> spread = reader.number(node.items[4], key);
    if (!spread)
      return spread.takeError();
    point.spread = *spread;
  }
  return point;
}

static std::string shapeText(double m, double n, double k) {
  return "(m, n, k) = (" + decimalText(m) + ", " + decimalText(n) + ", " +
         decimalText(k) + ")";
}

/// Every (m, n, k) of the product of the sizes each dimension takes, once.
static llvm::Error checkFullGrid(const std::vector<GemmPoint> &points,
                                 const FieldReader &reader) {
  std::set<std::tuple<double, double, double>> seen;
  std::set<double> ms, ns, ks;
  for (const GemmPoint &p : points) {
    if (!seen.insert({p.m, p.n, p.k}).second)
      return reader.error("gemm_tflops",
                          "gives " + shapeText(p.m, p.n, p.k) + " twice");
    ms.insert(p.m);
    ns.insert(p.n);
    ks.insert(p.k);
  }
  for (double m : ms)
    for (double n : ns)
      for (double k : ks)
        if (!seen.count({m, n, k}))
          return reader.error("gemm_tflops",
                              "is not a full grid: no entry for " +
                                  shapeText(m, n, k));
  return llvm::Error::success();
}

static llvm::Error readGemm(const Node &node, const FieldReader &reader,
                            Calibration &out) {
  if (llvm::Error error = reader.sequence(node, "gemm_tflops"))
    return error;
  for (const auto &[i, item] : llvm::enumerate(node.items)) {
    Expected<GemmPoint> point = readGemmPoint(item, i, reader);
    if (!point)
      return point.takeError();
    out.gemm.push_back(*point);
  }
  if (llvm::Error error = checkFullGrid(out.gemm, reader))
    return error;
  llvm::sort(out.gemm, [](const GemmPoint &a, const GemmPoint &b) {
    return std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
  });
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// memory_kernel_gbps: {class: GB/s}
//===----------------------------------------------------------------------===//

static llvm::Error readKernelRates(const Node &node, const FieldReader &reader,
                                   Calibration &out) {
  std::vector<const char *> classes;
  for (int i = 0; i < kNumMemoryKernelClasses; ++i)
    classes.push_back(toString(static_cast<MemoryKernelClass>(i)));
  if (llvm::Error error = reader.mapping(node, "memory_kernel_gbps", classes))
    return error;
  for (const auto &[name, value] : node.fields) {
    Expected<double> rate =
        reader.positive(value, "memory_kernel_gbps." + name);
    if (!rate)
      return rate.takeError();
    MemoryKernelClass kernelClass = *parseMemoryKernelClass(name);
    out.memoryKernelBandwidth[static_cast<int>(kernelClass)] = *rate * kGB;
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// collectives: {op, link, ranks, bytes, time_us, busbw_gbps}
//===----------------------------------------------------------------------===//

static Expected<CollectiveKind> readCollectiveKind(const Node &node,
                                                   const std::string &key,
                                                   const FieldReader &reader) {
  Expected<std::string> text = reader.string(node, key);
  if (!text)
    return text.takeError();
  if (std::optional<CollectiveKind> kind = parseCollectiveKind(*text))
    return *kind;
  return reader.error(key, "must be all_gather, all_reduce, all_to_all, "
                           "reduce_scatter or send_recv, got '" +
                               *text + "'");
}

static Expected<LinkClass> readLink(const Node &node, const std::string &key,
                                    const FieldReader &reader) {
  Expected<std::string> text = reader.string(node, key);
  if (!text)
    return text.takeError();
  for (LinkClass link : {LinkClass::IntraNode, LinkClass::InterNode})
    if (*text == linkKeyName(link))
      return link;
  return reader.error(key,
                      "must be intra_node or inter_node, got '" + *text + "'");
}

/// Reads the fields of one entry whose keys mapping() has checked.
static llvm::Error readCollectiveFields(const Node &node,
                                        const std::string &key,
                                        const FieldReader &reader,
                                        CollectivePoint &point) {
  for (const char *name : kRequiredCollectiveKeys)
    if (!node.field(name))
      return reader.error(key, "lacks '" + Twine(name) + "'");
  auto at = [&](const char *name) { return key + "." + name; };
  Expected<CollectiveKind> kind =
      readCollectiveKind(*node.field("op"), at("op"), reader);
  Expected<LinkClass> link = readLink(*node.field("link"), at("link"), reader);
  Expected<int> ranks = reader.count(*node.field("ranks"), at("ranks"));
  Expected<double> bytes = reader.positive(*node.field("bytes"), at("bytes"));
  Expected<double> time =
      reader.positive(*node.field("time_us"), at("time_us"));
  Expected<double> busbw =
      reader.positive(*node.field("busbw_gbps"), at("busbw_gbps"));
  llvm::Error problems[] = {kind.takeError(),  link.takeError(),
                            ranks.takeError(), bytes.takeError(),
                            time.takeError(),  busbw.takeError()};
  llvm::Error first = llvm::Error::success();
  for (llvm::Error &problem : problems) {
    if (!first)
      first = std::move(problem);
    else
      llvm::consumeError(std::move(problem));
  }
  if (first)
    return first;
  if (*ranks < 2)
    return reader.error(at("ranks"),
                        "must be at least 2, got " + node.field("ranks")->text);
  point = {*kind, *link, *ranks, *bytes, *time * kMicro, *busbw * kGB, {}};
  if (const Node *spread = node.field("spread")) {
    Expected<double> value = reader.number(*spread, at("spread"));
    if (!value)
      return value.takeError();
    point.spread = *value;
  }
  return llvm::Error::success();
}

static auto collectiveOrder(const CollectivePoint &p) {
  return std::make_tuple(static_cast<int>(p.kind), static_cast<int>(p.link),
                         p.ranks, p.bytes);
}

static llvm::Error readCollectives(const Node &node, const FieldReader &reader,
                                   Calibration &out) {
  if (llvm::Error error = reader.sequence(node, "collectives"))
    return error;
  for (const auto &[i, item] : llvm::enumerate(node.items)) {
    std::string key = "collectives[" + std::to_string(i) + "]";
    CollectivePoint point;
    if (llvm::Error error = reader.mapping(item, key, kCollectiveKeys))
      return error;
    if (llvm::Error error = readCollectiveFields(item, key, reader, point))
      return error;
    out.collectives.push_back(point);
  }
  llvm::sort(out.collectives, [](const auto &a, const auto &b) {
    return collectiveOrder(a) < collectiveOrder(b);
  });
  for (size_t i = 1; i < out.collectives.size(); ++i) {
    const CollectivePoint &p = out.collectives[i];
    if (collectiveOrder(p) == collectiveOrder(out.collectives[i - 1]))
      return reader.error("collectives",
                          Twine("gives ") + toString(p.kind) + " over " +
                              linkKeyName(p.link) + " on " + Twine(p.ranks) +
                              " ranks at " + decimalText(p.bytes) +
                              " bytes twice");
  }
  return llvm::Error::success();
}

Expected<Calibration> bm::cost::readCalibration(const Node &root,
                                                const FieldReader &reader) {
  Calibration out;
  using Section =
      llvm::Error (*)(const Node &, const FieldReader &, Calibration &);
  // In the order of kCalibrationKeys.
  const Section sections[] = {readProvenance, readCollectives, readGemm,
                              readKernelRates};
  for (size_t i = 0; i < std::size(kCalibrationKeys); ++i)
    if (const Node *node = root.field(kCalibrationKeys[i]))
      if (llvm::Error error = sections[i](*node, reader, out))
        return std::move(error);
  return out;
}
