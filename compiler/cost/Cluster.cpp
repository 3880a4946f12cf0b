//===- Cluster.cpp - cluster presets and the cluster file loader ---------===//

#include "compiler/cost/Cluster.h"
#include "compiler/cost/TextShape.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

using namespace bm::cost;
using llvm::Expected;
using llvm::StringRef;

static constexpr double kGB = 1e9;
static constexpr double kTera = 1e12;
static constexpr double kMicro = 1e-6;

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

// Latencies: per step of a ring collective, the order of NCCL's own
// per-hop estimates (NCCL src/graph/tuning.cc: a few microseconds over
// NVLink, 5-10 us through an InfiniBand NIC).

/// AWS p3.16xlarge, the cluster of the Alpa paper (Zheng et al. 2022, OSDI,
/// section 8: 8 x V100 16 GB per node, 25 Gbps between nodes).
static Cluster alpaV100() {
  Cluster c;
  c.name = "alpa-v100";
  c.gpuName = "V100-SXM2-16GB";
  c.gpusPerNode = 8;
  // NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor core, 15.7 fp32, 900 GB/s.
  // Volta has no bf16: mixed precision there is fp16 with loss scaling.
  c.peakFlops16 = 125 * kTera;
  c.peakFlopsBf16 = 0;
  c.peakFlops32 = 15.7 * kTera;
  c.memoryBytes = 16 * kGiB;
  c.memoryBandwidth = 900 * kGB;
  // cuBLAS fp16 GEMMs on V100 reach ~75% of the tensor-core peak at large
  // sizes (NVIDIA Deep Learning Performance Guide, "Matrix Multiplication
  // Background").
  c.gemmEfficiency = 0.75;
  c.memoryEfficiency = 0.85;
  c.reservedMemoryBytes = 1.5 * kGiB;
  // NVLink2 hybrid cube-mesh: nccl-tests all-reduce bus bandwidth on DGX-1V
  // class machines is ~130 GB/s.
  c.intraNode = {130 * kGB, 2 * kMicro};
  // 25 Gb/s = 3.125 GB/s per node; ~90% is reachable through TCP sockets.
  c.interNode = {2.8 * kGB, 25 * kMicro};
  return c;
}

/// NVIDIA DGX A100 80GB: 8 x A100-SXM4-80GB, NVLink3 + NVSwitch, 8 x HDR
/// 200 Gb/s InfiniBand for compute traffic.
static Cluster dgxA100() {
  Cluster c;
  c.name = "dgx-a100-80g";
  c.gpuName = "A100-SXM4-80GB";
  c.gpusPerNode = 8;
  // NVIDIA A100 datasheet: 312 TFLOP/s dense bf16, 19.5 fp32, 2039 GB/s.
  c.peakFlops16 = 312 * kTera;
  c.peakFlopsBf16 = 312 * kTera;
  c.peakFlops32 = 19.5 * kTera;
  c.memoryBytes = 80 * kGiB;
  c.memoryBandwidth = 2039 * kGB;
  // bf16 cuBLAS GEMMs of transformer shapes (h = 2048-12288) sustain about
  // 220 TFLOP/s on A100, ~70% of peak (NVIDIA Deep Learning Performance
  // Guide, "Matrix Multiplication Background" and "Transformers" GEMM
  // throughput figures). Calibrated once here, for every model.
  c.gemmEfficiency = 0.7;
  c.memoryEfficiency = 0.85;
  c.reservedMemoryBytes = 2 * kGiB;
  // NVLink3: 600 GB/s bidirectional = 300 GB/s each way per GPU; nccl-tests
  // all-reduce reaches a bus bandwidth of ~230 GB/s on DGX A100.
  c.intraNode = {230 * kGB, 2 * kMicro};
  // 8 x 200 Gb/s = 200 GB/s per node; nccl-tests multi-node all-reduce
  // reaches ~185 GB/s of bus bandwidth per node (~92% of line rate).
  c.interNode = {185 * kGB, 6 * kMicro};
  return c;
}

/// NVIDIA DGX H100: 8 x H100-SXM5-80GB, NVLink4 + NVSwitch, 8 x NDR 400 Gb/s.
static Cluster dgxH100() {
  Cluster c;
  c.name = "dgx-h100-80g";
  c.gpuName = "H100-SXM5-80GB";
  c.gpusPerNode = 8;
  // NVIDIA H100 datasheet: 989 TFLOP/s dense bf16, 67 fp32, 3.35 TB/s.
  c.peakFlops16 = 989 * kTera;
  c.peakFlopsBf16 = 989 * kTera;
  c.peakFlops32 = 67 * kTera;
  c.memoryBytes = 80 * kGiB;
  c.memoryBandwidth = 3350 * kGB;
  // Large bf16 GEMMs on H100 SXM reach ~700 TFLOP/s in cuBLAS (~70%).
  c.gemmEfficiency = 0.7;
  c.memoryEfficiency = 0.85;
  c.reservedMemoryBytes = 2 * kGiB;
  // NVLink4: 900 GB/s bidirectional = 450 each way; nccl-tests all-reduce
  // bus bandwidth without NVLink SHARP is ~360 GB/s.
  c.intraNode = {360 * kGB, 2 * kMicro};
  // 8 x 400 Gb/s = 400 GB/s per node, ~92% reachable.
  c.interNode = {370 * kGB, 6 * kMicro};
  return c;
}

// Alphabetical.
static const std::pair<const char *, Cluster (*)()> kPresets[] = {
    {"alpa-v100", alpaV100},
    {"dgx-a100-80g", dgxA100},
    {"dgx-h100-80g", dgxH100},
};

std::vector<std::string> bm::cost::clusterPresetNames() {
  std::vector<std::string> names;
  for (const auto &preset : kPresets)
    names.push_back(preset.first);
  return names;
}

Expected<Cluster> bm::cost::getClusterPreset(StringRef name) {
  for (const auto &preset : kPresets)
    if (name == preset.first)
      return preset.second();
  return makeError("unknown cluster preset '" + name + "' (presets: " +
                   llvm::join(clusterPresetNames(), ", ") +
                   "; or give a .json / .yaml file)");
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

namespace {

/// A flat key: value entry as read from JSON or YAML.
struct Entry {
  std::string text;            // the scalar as written
  std::optional<double> number; // set when the scalar is a number
};

enum class KeyType { Number, Integer, String };

struct KeySpec {
  const char *name;
  KeyType type;
  bool required;
  const char *meaning;
};

} // namespace

// Keys of a cluster file, alphabetical. Units are in the names.
static const KeySpec kClusterKeys[] = {
    {"gemm_efficiency", KeyType::Number, false,
     "fraction of peak large GEMMs reach, in (0, 1]"},
    {"gpu", KeyType::String, false, "GPU model, for printing"},
    {"gpus_per_node", KeyType::Integer, true, "GPUs in one node"},
    {"hbm_gbps", KeyType::Number, true, "device memory bandwidth, GB/s"},
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

using EntryMap = std::map<std::string, Entry>;

static std::optional<double> parseNumber(StringRef text) {
  double value;
  if (text.trim().getAsDouble(value))
    return std::nullopt;
  return value;
}

/// The first key that the top-level object of valid JSON `text` repeats.
/// JSON is YAML's flow syntax, and the YAML parser, unlike llvm::json,
/// visits every key as written.
static std::optional<std::string> repeatedJsonKey(StringRef text) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
  llvm::yaml::Stream stream(text, sourceMgr);
  llvm::yaml::document_iterator document = stream.begin();
  if (document == stream.end())
    return std::nullopt;
  auto *mapping =
      llvm::dyn_cast_or_null<llvm::yaml::MappingNode>(document->getRoot());
  if (!mapping)
    return std::nullopt;
  std::set<std::string> seen;
  for (llvm::yaml::KeyValueNode &pair : *mapping) {
    auto *key = llvm::dyn_cast_or_null<llvm::yaml::ScalarNode>(pair.getKey());
    if (!key)
      return std::nullopt;
    llvm::SmallString<32> storage;
    std::string name = key->getValue(storage).str();
    if (!seen.insert(name).second)
      return name;
    pair.skip();
  }
  return std::nullopt;
}

/// A cluster file is a dozen flat keys; LLVM's parsers recurse per nesting
/// level and (YAML) per flow entry, so text far beyond that is refused
/// before it is parsed ("{,,,,...}" of 20,000 commas overflowed the stack).
static llvm::Error checkTextShape(StringRef text, StringRef source) {
  TextShape shape = measureText(text);
  if (shape.commas > 1024 || shape.depth > 32)
    return makeError(source + ": not a cluster file (" + llvm::Twine(shape.commas) +
                     " commas, brackets nested " + llvm::Twine(shape.depth) +
                     " deep; a cluster file is a flat list of keys)");
  return llvm::Error::success();
}

static Expected<EntryMap> readJson(StringRef text, StringRef source) {
  if (llvm::Error err = checkTextShape(text, source))
    return std::move(err);
  Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return makeError(source + ": malformed JSON: " +
                     llvm::toString(parsed.takeError()));
  const llvm::json::Object *object = parsed->getAsObject();
  if (!object)
    return makeError(source + ": expected a JSON object of key: value");
  // llvm::json keeps the last of repeated keys; a repeated key is a mistake
  // in the file, so look for one in the text.
  if (std::optional<std::string> repeated = repeatedJsonKey(text))
    return makeError(source + ": key '" + *repeated + "' is given twice");
  EntryMap entries;
  for (const auto &[key, value] : *object) {
    Entry entry;
    if (std::optional<double> number = value.getAsNumber()) {
      entry.number = *number;
      entry.text = llvm::formatv("{0}", *number).str();
    } else if (std::optional<StringRef> string = value.getAsString()) {
      entry.text = string->str();
    } else {
      return makeError(source + ": key '" + key.str() +
                       "' must be a number or a string");
    }
    entries[key.str()] = entry;
  }
  return entries;
}

static Expected<EntryMap> readYaml(StringRef text, StringRef source) {
  if (llvm::Error err = checkTextShape(text, source))
    return std::move(err);
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
  llvm::yaml::document_iterator document = stream.begin();
  if (document == stream.end())
    return makeError(source + ": empty cluster file");
  llvm::yaml::Node *root = document->getRoot();
  auto *mapping = llvm::dyn_cast_or_null<llvm::yaml::MappingNode>(root);
  EntryMap entries;
  if (mapping) {
    for (llvm::yaml::KeyValueNode &pair : *mapping) {
      auto *key = llvm::dyn_cast_or_null<llvm::yaml::ScalarNode>(pair.getKey());
      auto *value =
          llvm::dyn_cast_or_null<llvm::yaml::ScalarNode>(pair.getValue());
      if (!diagnostic.empty())
        break;
      if (!key)
        return makeError(source + ": keys must be plain scalars");
      llvm::SmallString<32> keyStorage, valueStorage;
      StringRef keyText = key->getValue(keyStorage);
      if (!value)
        return makeError(source + ": key '" + keyText +
                         "' must have a scalar value");
      Entry entry;
      entry.text = value->getValue(valueStorage).str();
      // A quoted scalar is a string even when it looks like a number.
      if (!value->getRawValue().starts_with("\"") &&
          !value->getRawValue().starts_with("'"))
        entry.number = parseNumber(entry.text);
      if (!entries.emplace(keyText.str(), entry).second)
        return makeError(source + ": key '" + keyText + "' is given twice");
    }
  }
  if (stream.failed() || !diagnostic.empty())
    return makeError(source + ": malformed YAML: " +
                     (diagnostic.empty() ? "parse error" : diagnostic));
  if (!mapping)
    return makeError(source + ": expected a YAML mapping of key: value");
  return entries;
}

static Expected<Cluster> buildCluster(const EntryMap &entries,
                                      StringRef source) {
  for (const auto &[key, entry] : entries) {
    const KeySpec *spec = llvm::find_if(
        kClusterKeys, [&](const KeySpec &s) { return key == s.name; });
    if (spec == std::end(kClusterKeys)) {
      std::vector<std::string> known;
      for (const KeySpec &s : kClusterKeys)
        known.push_back(s.name);
      return makeError(source + ": unknown key '" + key +
                       "' (known keys: " + llvm::join(known, ", ") + ")");
    }
    if (spec->type == KeyType::String)
      continue;
    if (!entry.number || !std::isfinite(*entry.number))
      return makeError(source + ": key '" + key + "' must be a number, got '" +
                       entry.text + "'");
    if (*entry.number < 0)
      return makeError(source + ": key '" + key + "' must not be negative, got " +
                       entry.text);
    if (spec->type == KeyType::Integer &&
        *entry.number != std::floor(*entry.number))
      return makeError(source + ": key '" + key +
                       "' must be an integer, got " + entry.text);
    if (spec->type == KeyType::Integer && *entry.number > kLargestCount)
      return makeError(source + ": key '" + key + "' must be at most " +
                       llvm::Twine(kLargestCount) + ", got " + entry.text);
  }
  for (const KeySpec &spec : kClusterKeys)
    if (spec.required && !entries.count(spec.name))
      return makeError(source + ": missing key '" + spec.name + "' (" +
                       spec.meaning + ")");

  auto number = [&](const char *key, double fallback) {
    auto it = entries.find(key);
    return it == entries.end() ? fallback : *it->second.number;
  };
  auto positive = [&](const char *key) -> llvm::Error {
    if (number(key, 1) <= 0)
      return makeError(source + ": key '" + key + "' must be positive");
    return llvm::Error::success();
  };
  for (const char *key :
       {"gpus_per_node", "hbm_gbps", "inter_node_gbps", "intra_node_gbps",
        "memory_gib", "peak_tflops_16bit", "peak_tflops_fp32",
        "gemm_efficiency", "memory_efficiency"})
    if (llvm::Error error = positive(key))
      return std::move(error);
  for (const char *key : {"gemm_efficiency", "memory_efficiency"})
    if (number(key, 0.5) > 1)
      return makeError(source + ": key '" + key + "' must be at most 1");

  Cluster c;
  auto name = entries.find("name");
  c.name = name != entries.end() ? name->second.text
                                 : llvm::sys::path::stem(source).str();
  auto gpu = entries.find("gpu");
  c.gpuName = gpu != entries.end() ? gpu->second.text : "GPU";
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
  if (c.reservedMemoryBytes >= c.memoryBytes)
    return makeError(source + ": reserved_gib must be smaller than memory_gib");
  return c;
}

Expected<Cluster> bm::cost::parseCluster(StringRef text, bool isYaml,
                                         StringRef sourceName) {
  Expected<EntryMap> entries =
      isYaml ? readYaml(text, sourceName) : readJson(text, sourceName);
  if (!entries)
    return entries.takeError();
  return buildCluster(*entries, sourceName);
}

Expected<Cluster> bm::cost::loadClusterFile(StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return makeError("cannot read cluster file '" + path +
                     "': " + buffer.getError().message());
  bool isJson = llvm::sys::path::extension(path).equals_insensitive(".json");
  return parseCluster((*buffer)->getBuffer(), !isJson, path);
}

Expected<Cluster> bm::cost::loadCluster(StringRef presetOrPath) {
  bool looksLikePath = presetOrPath.contains('/') ||
                       presetOrPath.contains('.');
  if (!looksLikePath)
    return getClusterPreset(presetOrPath);
  return loadClusterFile(presetOrPath);
}
