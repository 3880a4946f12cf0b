//===- ClusterReader.cpp - a cluster file's keys into a Cluster -----------===//

#include "cost/ClusterFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <map>

using namespace bm::cost;
using llvm::Expected;
using llvm::StringRef;

// Keys of a cluster file, alphabetical. Units are in the names.
static const KeySpec kClusterKeys[] = {
    {"gemm_efficiency", KeyType::Number, false,
     "fraction of peak large GEMMs reach, in (0, 1]"},
    {"gpu", KeyType::String, false, "GPU model, for printing"},
    {"gpus_per_node", KeyType::Integer, true, "GPUs in one node"},
    {"hbm_gbps", KeyType::Number, true, "device memory bandwidth, GB/s"},
    {"host_link_gbps", KeyType::Number, false,
     "host <-> GPU copy bandwidth per GPU and direction, every GPU copying, "
     "GB/s; 0 = cannot offload"},
    {"host_memory_gib", KeyType::Number, false,
     "host memory per GPU for offloaded optimizer state, GiB; 0 = the "
     "device's own (a CPU)"},
    {"host_optimizer_gbps", KeyType::Number, false,
     "traffic rate of the optimizer step on one GPU's host cores, GB/s"},
    {"inter_node_gbps", KeyType::Number, true,
     "network bus bandwidth per node (all NICs), GB/s"},
    {"inter_node_latency_us", KeyType::Number, false,
     "network latency per collective step, us"},
    {"intra_node_gbps", KeyType::Number, true,
     "NVLink bus bandwidth per GPU (nccl-tests busbw), GB/s"},
    {"intra_node_latency_us", KeyType::Number, false,
     "NVLink latency per collective step, us"},
    {"max_nodes", KeyType::Integer, false, "nodes available, 0 = unlimited"},
    {"memory_efficiency", KeyType::Number, false,
     "fraction of hbm_gbps streaming kernels reach, in (0, 1]"},
    {"memory_gib", KeyType::Number, true, "device memory, GiB"},
    {"name", KeyType::String, false, "cluster name"},
    {"peak_tflops_16bit", KeyType::Number, true,
     "dense fp16 tensor-core peak per GPU, TFLOP/s"},
    {"peak_tflops_bf16", KeyType::Number, false,
     "dense bf16 peak per GPU, TFLOP/s; 0 = no bf16 (default: "
     "peak_tflops_16bit)"},
    {"peak_tflops_fp32", KeyType::Number, true, "fp32 peak per GPU, TFLOP/s"},
    {"reserved_gib", KeyType::Number, false,
     "memory held by the framework (context, workspaces), GiB"},
};

llvm::ArrayRef<KeySpec> bm::cost::clusterKeySpecs() { return kClusterKeys; }

// Keys other than the flat ones, alphabetical (section B of issue 15).
static const char *const kTrainingKeys[] = {"grad_reduce_overlap", "precision",
                                            "runtime"};

using FlatValues = std::map<std::string, const Node *>;

/// Every top-level key of the file, alphabetical.
static std::vector<const char *> knownTopLevelKeys() {
  std::vector<const char *> known;
  for (const KeySpec &spec : kClusterKeys)
    known.push_back(spec.name);
  llvm::append_range(known, calibrationKeys());
  llvm::append_range(known, kTrainingKeys);
  llvm::sort(known, [](const char *a, const char *b) {
    return StringRef(a) < StringRef(b);
  });
  return known;
}

/// Checks each flat key's type and range; returns them by name.
static Expected<FlatValues>
checkFlatKeys(const Node &root, const FieldReader &reader, StringRef source) {
  std::vector<const char *> known = knownTopLevelKeys();
  FlatValues flat;
  for (const auto &[key, value] : root.fields) {
    if (llvm::none_of(known, [&](const char *k) { return key == k; }))
      return makeClusterError(source + ": unknown key '" + key +
                              "' (known keys: " + llvm::join(known, ", ") +
                              ")");
    const KeySpec *spec = llvm::find_if(
        kClusterKeys, [&](const KeySpec &s) { return key == s.name; });
    if (spec == std::end(kClusterKeys))
      continue;
    llvm::Error problem = llvm::Error::success();
    if (spec->type == KeyType::String)
      problem = reader.string(value, key).takeError();
    else if (spec->type == KeyType::Integer)
      problem = reader.count(value, key).takeError();
    else
      problem = reader.number(value, key).takeError();
    if (problem)
      return std::move(problem);
    flat[key] = &value;
  }
  for (const KeySpec &spec : kClusterKeys)
    if (spec.required && !flat.count(spec.name))
      return makeClusterError(source + ": missing key '" + spec.name + "' (" +
                              spec.meaning + ")");
  return flat;
}

/// A host link without the host's optimizer rate cannot be priced.
static llvm::Error checkHostKeys(const FlatValues &flat, StringRef source) {
  auto given = [&](const char *key) {
    auto it = flat.find(key);
    return it == flat.end() ? 0.0 : *it->second->number;
  };
  if (given("host_link_gbps") <= 0 || given("host_optimizer_gbps") > 0)
    return llvm::Error::success();
  return makeClusterError(
      source + ": host_link_gbps is " + flat.at("host_link_gbps")->text +
      " but host_optimizer_gbps is " +
      (flat.count("host_optimizer_gbps") ? "0" : "not given") +
      ": offloading the optimizer needs the host's step rate (without "
      "host_link_gbps, or with it 0, the cluster does not offload)");
}

static llvm::Error checkFlatRanges(const FlatValues &flat, StringRef source) {
  auto number = [&](const char *key, double fallback) {
    auto it = flat.find(key);
    return it == flat.end() ? fallback : *it->second->number;
  };
  for (const char *key :
       {"gpus_per_node", "hbm_gbps", "inter_node_gbps", "intra_node_gbps",
        "memory_gib", "peak_tflops_16bit", "peak_tflops_fp32",
        "gemm_efficiency", "memory_efficiency"})
    if (number(key, 1) <= 0)
      return makeClusterError(source + ": key '" + key + "' must be positive");
  for (const char *key : {"gemm_efficiency", "memory_efficiency"})
    if (number(key, 0.5) > 1)
      return makeClusterError(source + ": key '" + key + "' must be at most 1");
  if (number("reserved_gib", 2) >= number("memory_gib", 0))
    return makeClusterError(source +
                            ": reserved_gib must be smaller than memory_gib");
  return checkHostKeys(flat, source);
}

static Cluster buildCluster(const FlatValues &flat, StringRef source) {
  auto number = [&](const char *key, double fallback) {
    auto it = flat.find(key);
    return it == flat.end() ? fallback : *it->second->number;
  };
  auto text = [&](const char *key, std::string fallback) {
    auto it = flat.find(key);
    return it == flat.end() ? fallback : it->second->text;
  };
  Cluster c;
  c.name = text("name", llvm::sys::path::stem(source).str());
  c.gpuName = text("gpu", "GPU");
  c.gpusPerNode = static_cast<int>(number("gpus_per_node", 0));
  c.maxNodes = static_cast<int>(number("max_nodes", 0));
  c.peakFlops16 = number("peak_tflops_16bit", 0) * kTera;
  c.peakFlopsBf16 =
      number("peak_tflops_bf16", number("peak_tflops_16bit", 0)) * kTera;
  c.peakFlops32 = number("peak_tflops_fp32", 0) * kTera;
  c.memoryBytes = number("memory_gib", 0) * kGiB;
  c.memoryBandwidth = number("hbm_gbps", 0) * kGB;
  c.gemmEfficiency = number("gemm_efficiency", 0.8);
  c.memoryEfficiency = number("memory_efficiency", 0.85);
  c.reservedMemoryBytes = number("reserved_gib", 2) * kGiB;
  c.intraNode = {number("intra_node_gbps", 0) * kGB,
                 number("intra_node_latency_us", 2) * kMicro};
  c.interNode = {number("inter_node_gbps", 0) * kGB,
                 number("inter_node_latency_us", 6) * kMicro};
  c.hostLinkBandwidth = number("host_link_gbps", 0) * kGB;
  c.hostMemoryBytes = number("host_memory_gib", 0) * kGiB;
  c.hostOptimizerBandwidth = number("host_optimizer_gbps", 0) * kGB;
  return c;
}

/// `precision`, `grad_reduce_overlap` and `runtime`.
static llvm::Error readTrainingKeys(const Node &root, const FieldReader &reader,
                                    Cluster &c) {
  if (const Node *runtime = root.field("runtime")) {
    Expected<std::string> text = reader.string(*runtime, "runtime");
    if (!text)
      return text.takeError();
    std::optional<RuntimeModel> parsed = parseRuntimeModel(*text);
    if (!parsed)
      return reader.error("runtime",
                          "must be bmrt or megatron, got '" + *text + "'");
    c.runtime = *parsed;
  }
  if (const Node *precision = root.field("precision")) {
    Expected<std::string> text = reader.string(*precision, "precision");
    if (!text)
      return text.takeError();
    if (!llvm::is_contained({"bf16", "fp16", "fp32"}, *text))
      return reader.error("precision",
                          "must be bf16, fp16 or fp32, got '" + *text + "'");
    if (*text == "bf16" && !c.hasBf16())
      return reader.error("precision",
                          "is bf16, but peak_tflops_bf16 is 0 (no bf16)");
    c.precision = *text;
  }
  if (const Node *overlap = root.field("grad_reduce_overlap")) {
    Expected<double> value = reader.number(*overlap, "grad_reduce_overlap");
    if (!value)
      return value.takeError();
    if (*value > 1)
      return reader.error("grad_reduce_overlap",
                          "must be in [0, 1], got " + overlap->text);
    c.gradReduceOverlap = *value;
  }
  return llvm::Error::success();
}

Expected<Cluster> bm::cost::parseCluster(StringRef text, bool isYaml,
                                         StringRef sourceName) {
  Expected<Node> root = isYaml ? readClusterYaml(text, sourceName)
                               : readClusterJson(text, sourceName);
  if (!root)
    return root.takeError();
  FieldReader reader(sourceName);
  Expected<FlatValues> flat = checkFlatKeys(*root, reader, sourceName);
  if (!flat)
    return flat.takeError();
  if (llvm::Error error = checkFlatRanges(*flat, sourceName))
    return std::move(error);
  Cluster c = buildCluster(*flat, sourceName);
  if (llvm::Error error = readTrainingKeys(*root, reader, c))
    return std::move(error);
  Expected<Calibration> calibration = readCalibration(*root, reader);
  if (!calibration)
    return calibration.takeError();
  c.calibration = std::move(*calibration);
  return c;
}

Expected<Cluster> bm::cost::loadClusterFile(StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return makeClusterError("cannot read cluster file '" + path +
                            "': " + buffer.getError().message());
  bool isJson = llvm::sys::path::extension(path).equals_insensitive(".json");
  return parseCluster((*buffer)->getBuffer(), !isJson, path);
}

Expected<Cluster> bm::cost::loadCluster(StringRef presetOrPath) {
  bool looksLikePath = presetOrPath.contains('/') || presetOrPath.contains('.');
  if (!looksLikePath)
    return getClusterPreset(presetOrPath);
  return loadClusterFile(presetOrPath);
}
