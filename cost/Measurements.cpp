//===- Measurements.cpp - a cluster from what bmrt-calibrate measured -----===//

#include "cost/Measurements.h"

#include "cost/ClusterFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace bm::cost;
using llvm::Expected;
using llvm::StringRef;
namespace json = llvm::json;

namespace {

/// Reads one JSON object of the measurements; the first problem becomes the
/// error, named by its path ("gemm[3].m").
class Fields {
public:
  Fields(const json::Object *object, std::string path, std::string &error)
      : object_(object), path_(std::move(path)), error_(error) {}

  bool ok() const { return error_.empty(); }

  double number(StringRef key) {
    const json::Value *value = get(key);
    std::optional<double> number = value ? value->getAsNumber() : std::nullopt;
    if (value && (!number || !std::isfinite(*number) || *number < 0))
      fail("'" + name(key) + "' must be a non-negative number");
    return number && ok() ? *number : 0;
  }
  double positive(StringRef key) {
    double value = number(key);
    if (ok() && value <= 0)
      fail("'" + name(key) + "' must be positive");
    return value;
  }
  std::string string(StringRef key) {
    const json::Value *value = get(key);
    std::optional<StringRef> text = value ? value->getAsString() : std::nullopt;
    if (value && !text)
      fail("'" + name(key) + "' must be a string");
    return text ? text->str() : std::string();
  }
  Fields object(StringRef key) {
    const json::Value *value = get(key);
    const json::Object *inner = value ? value->getAsObject() : nullptr;
    if (value && !inner)
      fail("'" + name(key) + "' must be an object");
    return Fields(inner, name(key), error_);
  }
  /// Each element of array `key` as Fields.
  std::vector<Fields> objects(StringRef key) {
    std::vector<Fields> out;
    const json::Value *value = get(key);
    const json::Array *array = value ? value->getAsArray() : nullptr;
    if (value && !array)
      fail("'" + name(key) + "' must be an array");
    for (size_t i = 0; array && i < array->size() && ok(); ++i) {
      std::string at = llvm::formatv("{0}[{1}]", name(key), i).str();
      const json::Object *element = (*array)[i].getAsObject();
      if (!element)
        fail("'" + at + "' must be an object");
      out.emplace_back(element, at, error_);
    }
    return out;
  }
  bool has(StringRef key) const { return object_ && object_->get(key); }
  /// Every member that is a string, for the library versions.
  std::map<std::string, std::string> strings() const {
    std::map<std::string, std::string> out;
    for (const auto &[key, value] : object_ ? *object_ : json::Object())
      if (std::optional<StringRef> text = value.getAsString())
        out[key.str()] = text->str();
    return out;
  }
  void fail(const std::string &message) {
    if (ok())
      error_ = message;
  }

private:
  const json::Value *get(StringRef key) {
    const json::Value *value = object_ && ok() ? object_->get(key) : nullptr;
    if (!value && object_ && ok())
      fail("missing '" + name(key) + "'");
    return value;
  }
  std::string name(StringRef key) const {
    return path_.empty() ? key.str() : path_ + "." + key.str();
  }

  const json::Object *object_;
  std::string path_;
  std::string &error_;
};

} // namespace

/// `spread` to 3 significant digits: it says roughly how steady a rate
/// was, and 17 digits of it would only crowd the cluster file.
static double roundSpread(double spread) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", spread);
  return std::strtod(text, nullptr);
}

/// The point's "spread", where bmrt-calibrate wrote one (since issue 24).
static std::optional<double> optionalSpread(Fields &point) {
  if (!point.has("spread"))
    return std::nullopt;
  return roundSpread(point.number("spread"));
}

static void readGemm(Fields &root, Calibration &calibration,
                     double &fastest) {
  for (Fields &point : root.objects("gemm")) {
    GemmPoint p;
    p.m = point.positive("m");
    p.n = point.positive("n");
    p.k = point.positive("k");
    p.flopsPerSecond = point.positive("flops_per_second");
    p.spread = optionalSpread(point);
    fastest = std::max(fastest, p.flopsPerSecond);
    calibration.gemm.push_back(p);
  }
  llvm::sort(calibration.gemm, [](const GemmPoint &a, const GemmPoint &b) {
    return std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
  });
  if (root.ok() && calibration.gemm.empty())
    root.fail("'gemm' has no measurements");
}

/// `spreads` gets each kernel class's spread, where given.
static void readKernels(Fields &root, Calibration &calibration,
                        std::vector<double> &spreads) {
  for (Fields &kernel : root.objects("kernels")) {
    std::string name = kernel.string("class");
    std::optional<MemoryKernelClass> kernelClass =
        parseMemoryKernelClass(name);
    if (kernel.ok() && !kernelClass)
      kernel.fail("unknown kernel class '" + name + "'");
    double rate = kernel.positive("bytes_per_second");
    if (std::optional<double> spread = optionalSpread(kernel))
      spreads.push_back(*spread);
    if (kernel.ok())
      calibration.memoryKernelBandwidth[static_cast<int>(*kernelClass)] = rate;
  }
}

static void readCollectives(Fields &root, Calibration &calibration,
                            LinkClass link) {
  if (!root.has("collectives"))
    return;
  for (Fields &entry : root.objects("collectives")) {
    CollectivePoint p;
    std::string kind = entry.string("kind");
    std::optional<CollectiveKind> parsed = parseCollectiveKind(kind);
    if (entry.ok() && !parsed)
      entry.fail("unknown collective '" + kind + "'");
    p.kind = parsed.value_or(CollectiveKind::AllReduce);
    p.link = link;
    p.ranks = static_cast<int>(entry.positive("ranks"));
    p.bytes = entry.positive("bytes");
    p.seconds = entry.positive("seconds");
    p.busBandwidth = entry.positive("busbw_bytes_per_second");
    p.spread = optionalSpread(entry);
    calibration.collectives.push_back(p);
  }
  llvm::sort(calibration.collectives,
             [](const CollectivePoint &a, const CollectivePoint &b) {
               return std::tie(a.kind, a.link, a.ranks, a.bytes) <
                      std::tie(b.kind, b.link, b.ranks, b.bytes);
             });
}

/// The flat link keys from the all-reduce curve, as nccl-tests reports a
/// link: the bus bandwidth of the largest message, and the latency per ring
/// step from the smallest (2(n-1) steps).
static LinkSpec fitLink(const Calibration &calibration) {
  const CollectivePoint *smallest = nullptr, *largest = nullptr;
  for (const CollectivePoint &p : calibration.collectives) {
    if (p.kind != CollectiveKind::AllReduce)
      continue;
    if (!smallest || p.bytes < smallest->bytes)
      smallest = &p;
    if (!largest || p.bytes > largest->bytes)
      largest = &p;
  }
  if (!largest)
    return {};
  return {largest->busBandwidth,
          smallest->seconds / (2.0 * std::max(smallest->ranks - 1, 1))};
}

static void readProvenance(Fields &root, Cluster &c, int &hosts) {
  Fields machine = root.object("machine");
  std::string host = machine.string("host");
  std::string cpu = machine.string("cpu");
  hosts = static_cast<int>(machine.positive("hosts"));
  double memory = machine.positive("memory_bytes");
  Calibration &calibration = c.calibration;
  calibration.date = root.string("date");
  calibration.ranks = static_cast<int>(root.positive("ranks"));
  calibration.threadsPerRank =
      static_cast<int>(root.positive("threads_per_rank"));
  calibration.versions = root.object("versions").strings();
  calibration.machine = host + " (" + cpu + ")";
  if (!root.ok())
    return;
  c.name = "calibrated-" + host;
  c.gpuName = llvm::formatv("{0}, {1} thread(s) per rank", cpu,
                            calibration.threadsPerRank)
                  .str();
  c.gpusPerNode = std::max(calibration.ranks / std::max(hosts, 1), 1);
  // The host's memory is shared by its ranks.
  c.memoryBytes = memory / c.gpusPerNode;
}

/// What offloading the optimizer to the host costs (issue 29), where
/// bmrt-calibrate measured it: files without these keys give 0, and the
/// cluster does not offload. host_memory_gib is the host memory apart from
/// the device's: 0 on the CPU backend, whose device memory is the host's
/// (the offloaded state then shares it).
static void readHostRates(Fields &root, Cluster &c) {
  auto optional = [&](StringRef key) {
    return root.has(key) ? root.number(key) : 0.0;
  };
  c.hostLinkBandwidth = optional("host_link_gbps") * kGB;
  c.hostOptimizerBandwidth = optional("host_optimizer_gbps") * kGB;
  c.hostMemoryBytes = optional("host_memory_gib") * kGiB;
}

Expected<Cluster> bm::cost::clusterFromMeasurements(StringRef text,
                                                    StringRef source) {
  Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return llvm::createStringError(
        source + ": not the JSON bmrt-calibrate writes: " +
        llvm::toString(parsed.takeError()));
  std::string error;
  Fields root(parsed->getAsObject(), "", error);
  if (!parsed->getAsObject())
    root.fail("expected a JSON object");
  if (root.ok() && root.string("format") != "bmrt-calibration-1")
    root.fail("'format' must be \"bmrt-calibration-1\"");

  Cluster c;
  int hosts = 1;
  readProvenance(root, c, hosts);
  double fastest = 0;
  readGemm(root, c.calibration, fastest);
  std::vector<double> memorySpreads;
  readKernels(root, c.calibration, memorySpreads);
  LinkClass link = hosts > 1 ? LinkClass::InterNode : LinkClass::IntraNode;
  readCollectives(root, c.calibration, link);
  readHostRates(root, c);
  Fields memory = root.object("memory");
  double copy = memory.positive("stream_copy_bytes_per_second");
  if (memory.has("stream_copy_spread"))
    memorySpreads.push_back(roundSpread(memory.number("stream_copy_spread")));
  c.calibration.spread = summarizeSpread(c.calibration.gemm, memorySpreads,
                                         c.calibration.collectives);
  if (root.ok() && root.has("overlap"))
    c.gradReduceOverlap =
        std::min(root.object("overlap").number("grad_reduce"), 1.0);
  else
    c.gradReduceOverlap = 0; // nothing measured: assume nothing hides
  if (!root.ok())
    return llvm::createStringError(source + ": " + error);

  // The runtime computes in fp32 here; the measured curves carry the shape
  // and kernel dependence, so the flat efficiencies are 1.
  c.precision = "fp32";
  c.runtime = RuntimeModel::Bmrt;
  c.peakFlops32 = c.peakFlops16 = fastest;
  c.peakFlopsBf16 = 0;
  c.gemmEfficiency = 1;
  c.memoryBandwidth = copy;
  c.memoryEfficiency = 1;
  c.reservedMemoryBytes = 0;
  // One rank measures no link: then a transfer is taken to cost a memory
  // copy, so that plans for more ranks still have a number.
  LinkSpec measured = fitLink(c.calibration);
  if (measured.busBandwidth <= 0)
    measured = {copy / 2, 1e-6};
  c.intraNode = measured;
  c.interNode = {measured.busBandwidth * c.gpusPerNode, measured.latency};
  // Through the file's own reader: what calibrate writes is what --cluster
  // accepts.
  return parseCluster(writeClusterYaml(c), /*isYaml=*/true, source);
}
