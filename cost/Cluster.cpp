//===- Cluster.cpp - cluster presets, names and equality ------------------===//

#include "cost/Cluster.h"
#include "cost/ClusterFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <tuple>

using namespace bm::cost;
using llvm::Expected;
using llvm::StringRef;

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

// Latencies: per step of a ring collective, the order of NCCL's own
// per-hop estimates (NCCL src/graph/tuning.cc: a few microseconds over
// NVLink, 5-10 us through an InfiniBand NIC).
//
// Optimizer offload (issue 29) runs on every GPU of a node at once, after
// the gradient reduction: each GPU copies its gradients to the host, the
// host steps them, the parameters come back. The presets give the rates
// one GPU sees then, effective rather than theoretical:
// - the host link: a PCIe x16 link moves about 80% of its line rate in DMA
//   copies (packet headers and flow control; CUDA's bandwidthTest with
//   pinned memory shows it), and where two GPUs share one switch's x16
//   uplink to the CPU, each gets half while both copy;
// - the host optimizer step: STREAM-class kernels reach about 75% of the
//   sockets' theoretical memory bandwidth, shared by the node's 8 GPU
//   processes (an Adam step streams its state: DeepSpeed's CPU-Adam is
//   bandwidth-bound);
// - host memory: the node's memory over its 8 GPUs, less a quarter kept for
//   the operating system, the data pipeline and the framework.

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
  // PCIe Gen3 x16: 15.75 GB/s per direction, ~12.5 effective; the board
  // (DGX-1V-like) puts two GPUs behind each PCIe switch: 6 GB/s each.
  c.hostLinkBandwidth = 6 * kGB;
  // 488 GiB per p3.16xlarge: 61 GiB per GPU, 45 offloadable.
  c.hostMemoryBytes = 45 * kGiB;
  // 2 x Xeon E5-2686 v4, 4 channels of DDR4-2400 each: 153.6 GB/s; 75%
  // over 8 GPUs is 14.4 GB/s.
  c.hostOptimizerBandwidth = 14 * kGB;
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
  // PCIe Gen4 x16 per GPU: 31.5 GB/s per direction, ~25 effective; four
  // PCIe switches hold two GPUs each, one x16 uplink per switch (DGX A100
  // System Architecture, the system's PCIe topology): 12.5 GB/s each.
  c.hostLinkBandwidth = 12.5 * kGB;
  // The 80 GB system's 2 TB (the 40 GB system: 1 TB, 2 TB optional):
  // 256 GiB per GPU, 192 offloadable.
  c.hostMemoryBytes = 192 * kGiB;
  // 2 x AMD EPYC 7742, 8 channels of DDR4-3200 each: 409.6 GB/s; 75% over
  // 8 GPUs is 38 GB/s.
  c.hostOptimizerBandwidth = 38 * kGB;
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
  // PCIe Gen5 x16 per GPU: 63 GB/s per direction, ~50 effective; two GPUs
  // taken to share each switch uplink to the CPUs, as in the DGX A100:
  // 25 GB/s each.
  c.hostLinkBandwidth = 25 * kGB;
  // 2 TB: 256 GiB per GPU, 192 offloadable.
  c.hostMemoryBytes = 192 * kGiB;
  // 2 x Xeon Platinum 8480C, 8 channels of DDR5-4800 each: 614 GB/s; 75%
  // over 8 GPUs is 58 GB/s.
  c.hostOptimizerBandwidth = 58 * kGB;
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
// Names and equality
//===----------------------------------------------------------------------===//

// Alphabetical, in enum order.
static const char *const kMemoryKernelClassNames[kNumMemoryKernelClasses] = {
    "data_movement", "elementwise", "normalization",
    "optimizer",     "reduction",   "softmax"};

const char *bm::cost::toString(MemoryKernelClass kernelClass) {
  return kMemoryKernelClassNames[static_cast<int>(kernelClass)];
}

std::optional<MemoryKernelClass>
bm::cost::parseMemoryKernelClass(StringRef text) {
  for (int i = 0; i < kNumMemoryKernelClasses; ++i)
    if (text == kMemoryKernelClassNames[i])
      return static_cast<MemoryKernelClass>(i);
  return std::nullopt;
}

bool Calibration::present() const {
  return !machine.empty() || !date.empty() || ranks || threadsPerRank ||
         !versions.empty() || !gemm.empty() || !collectives.empty() ||
         !spread.empty() || !loadAverage.empty() || !singleRank.empty() ||
         llvm::any_of(memoryKernelBandwidth, [](double r) { return r > 0; });
}

std::map<std::string, double>
bm::cost::summarizeSpread(const std::vector<GemmPoint> &gemm,
                          const std::vector<double> &memory,
                          const std::vector<CollectivePoint> &collectives) {
  std::map<std::string, double> out;
  std::vector<double> all;
  auto add = [&](const char *curve, double spread) {
    out[curve] = std::max(out[curve], spread);
    all.push_back(spread);
  };
  for (const GemmPoint &p : gemm)
    if (p.spread)
      add("gemm", *p.spread);
  for (double spread : memory)
    add("memory", spread);
  for (const CollectivePoint &p : collectives)
    if (p.spread)
      add("collectives", *p.spread);
  if (all.empty())
    return out;
  llvm::sort(all);
  size_t half = all.size() / 2;
  out["largest"] = all.back();
  out["median"] = all.size() % 2 ? all[half] : (all[half - 1] + all[half]) / 2;
  return out;
}

bool bm::cost::operator==(const GemmPoint &a, const GemmPoint &b) {
  return std::tie(a.m, a.n, a.k, a.flopsPerSecond, a.spread) ==
         std::tie(b.m, b.n, b.k, b.flopsPerSecond, b.spread);
}

bool bm::cost::operator==(const CollectivePoint &a, const CollectivePoint &b) {
  return std::tie(a.kind, a.link, a.ranks, a.bytes, a.seconds, a.busBandwidth,
                  a.spread) == std::tie(b.kind, b.link, b.ranks, b.bytes,
                                        b.seconds, b.busBandwidth, b.spread);
}

bool bm::cost::operator==(const Calibration &a, const Calibration &b) {
  return std::tie(a.machine, a.date, a.ranks, a.threadsPerRank, a.versions,
                  a.gemm, a.memoryKernelBandwidth, a.collectives, a.spread,
                  a.loadAverage, a.singleRank) ==
         std::tie(b.machine, b.date, b.ranks, b.threadsPerRank, b.versions,
                  b.gemm, b.memoryKernelBandwidth, b.collectives, b.spread,
                  b.loadAverage, b.singleRank);
}

bool bm::cost::operator==(const LinkSpec &a, const LinkSpec &b) {
  return a.busBandwidth == b.busBandwidth && a.latency == b.latency;
}

bool bm::cost::operator==(const Cluster &a, const Cluster &b) {
  return std::tie(a.name, a.gpuName, a.gpusPerNode, a.maxNodes, a.peakFlops16,
                  a.peakFlopsBf16, a.peakFlops32, a.memoryBytes,
                  a.memoryBandwidth, a.gemmEfficiency, a.memoryEfficiency,
                  a.reservedMemoryBytes, a.intraNode, a.interNode, a.runtime,
                  a.precision, a.gradReduceOverlap, a.hostLinkBandwidth,
                  a.hostMemoryBytes, a.hostOptimizerBandwidth, a.calibration) ==
         std::tie(b.name, b.gpuName, b.gpusPerNode, b.maxNodes, b.peakFlops16,
                  b.peakFlopsBf16, b.peakFlops32, b.memoryBytes,
                  b.memoryBandwidth, b.gemmEfficiency, b.memoryEfficiency,
                  b.reservedMemoryBytes, b.intraNode, b.interNode, b.runtime,
                  b.precision, b.gradReduceOverlap, b.hostLinkBandwidth,
                  b.hostMemoryBytes, b.hostOptimizerBandwidth, b.calibration);
}
