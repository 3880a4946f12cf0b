//===- ClusterWriter.cpp - a Cluster as a YAML cluster file ---------------===//
//
// The inverse of parseCluster: every key, flat keys in kClusterKeys order
// with their meaning (and unit) as a comment, then the training keys and the
// calibration sections. Numbers are written with the fewest digits that
// read back to the same double after the reader's unit scaling, so that
// parse(write(c)) == c.
//
//===----------------------------------------------------------------------===//

#include "cost/ClusterFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace bm::cost;
using llvm::StringRef;

std::string bm::cost::decimalText(double value, double scale) {
  double inFileUnits = value / scale;
  char buffer[40];
  for (bool exponentAllowed : {false, true})
    for (double candidate :
         {inFileUnits, std::nextafter(inFileUnits, -INFINITY),
          std::nextafter(inFileUnits, INFINITY)})
      for (int digits = 1; digits <= 17; ++digits) {
        snprintf(buffer, sizeof buffer, "%.*g", digits, candidate);
        if ((exponentAllowed || !strchr(buffer, 'e')) &&
            std::strtod(buffer, nullptr) * scale == value)
          return buffer;
      }
  snprintf(buffer, sizeof buffer, "%.17g", inFileUnits);
  return buffer;
}

/// A double-quoted YAML scalar.
static std::string quoted(StringRef text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c < 0x20 || c == 0x7f) {
      char escape[8];
      snprintf(escape, sizeof escape, "\\x%02x", c);
      out += escape;
      continue;
    }
    out += static_cast<char>(c);
  }
  return out + "\"";
}

/// The file text of each flat key.
static std::string flatValue(const Cluster &c, StringRef key) {
  if (key == "gemm_efficiency")
    return decimalText(c.gemmEfficiency, 1);
  if (key == "gpu")
    return quoted(c.gpuName);
  if (key == "gpus_per_node")
    return std::to_string(c.gpusPerNode);
  if (key == "hbm_gbps")
    return decimalText(c.memoryBandwidth, kGB);
  if (key == "host_link_gbps")
    return decimalText(c.hostLinkBandwidth, kGB);
  if (key == "host_memory_gib")
    return decimalText(c.hostMemoryBytes, kGiB);
  if (key == "host_optimizer_gbps")
    return decimalText(c.hostOptimizerBandwidth, kGB);
  if (key == "inter_node_gbps")
    return decimalText(c.interNode.busBandwidth, kGB);
  if (key == "inter_node_latency_us")
    return decimalText(c.interNode.latency, kMicro);
  if (key == "intra_node_gbps")
    return decimalText(c.intraNode.busBandwidth, kGB);
  if (key == "intra_node_latency_us")
    return decimalText(c.intraNode.latency, kMicro);
  if (key == "max_nodes")
    return std::to_string(c.maxNodes);
  if (key == "memory_efficiency")
    return decimalText(c.memoryEfficiency, 1);
  if (key == "memory_gib")
    return decimalText(c.memoryBytes, kGiB);
  if (key == "name")
    return quoted(c.name);
  if (key == "peak_tflops_16bit")
    return decimalText(c.peakFlops16, kTera);
  if (key == "peak_tflops_bf16")
    return decimalText(c.peakFlopsBf16, kTera);
  if (key == "peak_tflops_fp32")
    return decimalText(c.peakFlops32, kTera);
  return decimalText(c.reservedMemoryBytes, kGiB); // reserved_gib
}

static void writeFlatKeys(const Cluster &c, llvm::raw_ostream &os) {
  for (const KeySpec &spec : clusterKeySpecs())
    os << spec.name << ": " << flatValue(c, spec.name) << "  # " << spec.meaning
       << "\n";
}

static void writeTrainingKeys(const Cluster &c, llvm::raw_ostream &os) {
  if (!c.precision.empty())
    os << "precision: " << c.precision
       << "  # what the devices train in; bmc plan / compile's default\n";
  os << "runtime: " << toString(c.runtime)
     << "  # whose kernels and memory management run there: bmrt or "
        "megatron\n";
  os << "grad_reduce_overlap: " << decimalText(c.gradReduceOverlap, 1)
     << "  # fraction of the data-parallel gradient reduction hidden "
        "behind backward, in [0, 1]\n";
}

/// `  name: {key: number, ...}  # comment`, nothing for an empty map.
static void writeNumberMap(StringRef name,
                           const std::map<std::string, double> &values,
                           StringRef comment, llvm::raw_ostream &os) {
  if (values.empty())
    return;
  os << "  " << name << ": {";
  llvm::interleave(
      values, os,
      [&](const auto &v) { os << v.first << ": " << decimalText(v.second); },
      ", ");
  os << "}  # " << comment << "\n";
}

static void writeProvenance(const Calibration &cal, llvm::raw_ostream &os) {
  os << "calibration:  # where and when the curves below were measured\n"
     << "  machine: " << quoted(cal.machine) << "\n"
     << "  date: " << quoted(cal.date) << "  # UTC\n"
     << "  ranks: " << cal.ranks << "\n"
     << "  threads_per_rank: " << cal.threadsPerRank << "\n"
     << "  versions: {";
  llvm::interleave(
      cal.versions, os,
      [&](const auto &v) { os << quoted(v.first) << ": " << quoted(v.second); },
      ", ");
  os << "}\n";
  writeNumberMap("spread", cal.spread,
                 "relative interquartile range of the repeated samples: "
                 "the largest per curve, the largest and median of all",
                 os);
  writeNumberMap("load_average", cal.loadAverage,
                 "1-minute load average before and after measuring, the "
                 "cores busy in the second before, and the cores available",
                 os);
  writeNumberMap("single_rank", cal.singleRank,
                 "the compute rates with one rank alone (the curves below: "
                 "every rank busy), TFLOP/s and GB/s",
                 os);
}

static void writeGemm(const Calibration &cal, llvm::raw_ostream &os) {
  os << "gemm_tflops:  # measured GEMM rate over a full grid: [m, n, k, "
        "TFLOP/s(, spread)]\n";
  for (const GemmPoint &p : cal.gemm) {
    os << "  - [" << decimalText(p.m, 1) << ", " << decimalText(p.n, 1) << ", "
       << decimalText(p.k, 1) << ", " << decimalText(p.flopsPerSecond, kTera);
    if (p.spread)
      os << ", " << decimalText(*p.spread);
    os << "]\n";
  }
}

static void writeKernelRates(const Calibration &cal, llvm::raw_ostream &os) {
  os << "memory_kernel_gbps:  # traffic (bytes read + written) rate of each "
        "memory-bound kernel class, GB/s\n";
  for (int i = 0; i < kNumMemoryKernelClasses; ++i)
    if (cal.memoryKernelBandwidth[i] > 0)
      os << "  " << toString(static_cast<MemoryKernelClass>(i)) << ": "
         << decimalText(cal.memoryKernelBandwidth[i], kGB) << "\n";
}

static void writeCollectives(const Calibration &cal, llvm::raw_ostream &os) {
  os << "collectives:  # one call: bytes as nccl-tests' size, time in us, "
        "bus bandwidth in GB/s\n";
  for (const CollectivePoint &p : cal.collectives) {
    os << "  - {op: " << toString(p.kind) << ", link: " << linkKeyName(p.link)
       << ", ranks: " << p.ranks << ", bytes: " << decimalText(p.bytes, 1)
       << ", time_us: " << decimalText(p.seconds, kMicro)
       << ", busbw_gbps: " << decimalText(p.busBandwidth, kGB);
    if (p.spread)
      os << ", spread: " << decimalText(*p.spread);
    os << "}\n";
  }
}

std::string bm::cost::writeClusterYaml(const Cluster &cluster) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "# bmc cluster file (--cluster); units are in the key names\n";
  writeFlatKeys(cluster, os);
  writeTrainingKeys(cluster, os);
  const Calibration &cal = cluster.calibration;
  bool hasProvenance = !cal.machine.empty() || !cal.date.empty() || cal.ranks ||
                       cal.threadsPerRank || !cal.versions.empty() ||
                       !cal.spread.empty() || !cal.loadAverage.empty() ||
                       !cal.singleRank.empty();
  if (hasProvenance)
    writeProvenance(cal, os);
  if (!cal.gemm.empty())
    writeGemm(cal, os);
  if (llvm::any_of(cal.memoryKernelBandwidth, [](double r) { return r > 0; }))
    writeKernelRates(cal, os);
  if (!cal.collectives.empty())
    writeCollectives(cal, os);
  return text;
}
