//===- Cluster.h - the machines a plan runs on ------------------*- C++ -*-===//
//
// A cluster is a set of identical nodes, each with `gpusPerNode` GPUs joined
// by an intra-node fabric (NVLink), the nodes joined by a network
// (InfiniBand / Ethernet). The planner needs only this analytic description:
// nobody should need the GPUs to plan for them (DESIGN.md section 1).
//
// Presets ship for the clusters of the papers we compare against; anything
// else is a JSON or YAML file with the keys documented in Cluster.cpp
// (kClusterKeys) and in passes/plan/PLAN_SCHEMA.md. `bmc calibrate` writes
// such a file with measured curves (`Calibration`) that replace the analytic
// numbers where they apply (CostModel.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef BM_COST_CLUSTER_H
#define BM_COST_CLUSTER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bm::cost {

/// The largest count the planner takes (GPUs, GPUs per node, nodes, the
/// degrees of --fix): counts are held in an int, and a product of a few of
/// them must stay in an int64.
inline constexpr int kLargestCount = 1 << 24;

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// Whose kernels and memory management the planner models on a cluster.
enum class RuntimeModel {
  /// bmrt (this project's trainer): one kernel per op, each writing its
  /// result; a pipeline stage's arena plus a stash of the saved values per
  /// micro-batch in flight; gradients written whole beside their sums;
  /// ZeRO-3 gathering one parameter at a time; gathered copies kept for the
  /// backward.
  Bmrt,
  /// Megatron-LM on GPUs (Narayanan et al. 2021; Korthikanti et al. 2022):
  /// elementwise chains fused and layout ops read with strides, gradients
  /// accumulated in place, sequence-parallel inputs gathered again in the
  /// backward, ZeRO-3 as DeepSpeed (a layer prefetched).
  Megatron,
};

enum class CollectiveKind { AllGather, AllReduce, AllToAll, ReduceScatter,
                            SendRecv };
enum class LinkClass { IntraNode, InterNode };

/// "all_gather", "all_reduce", ... as nccl-tests and the files name them.
const char *toString(CollectiveKind kind);
std::optional<CollectiveKind> parseCollectiveKind(llvm::StringRef text);
/// "nvlink" or "network", for printing.
const char *toString(LinkClass link);

/// What the planner times memory-bound ops by: each class has its own
/// measured traffic rate (gather and transpose copies stream differently
/// from an add or a softmax). Alphabetical; the names are the file's.
enum class MemoryKernelClass {
  DataMovement,
  Elementwise,
  Normalization,
  Optimizer,
  Reduction,
  Softmax
};
inline constexpr int kNumMemoryKernelClasses = 6;

/// "data_movement", "elementwise", ...
const char *toString(MemoryKernelClass kernelClass);
std::optional<MemoryKernelClass> parseMemoryKernelClass(llvm::StringRef text);

/// One measured GEMM rate: C (m x n) = A (m x k) * B (k x n).
struct GemmPoint {
  double m = 0, n = 0, k = 0;
  double flopsPerSecond = 0;
  /// The relative interquartile range of the repeated samples, where the
  /// file gives it (files older than issue 24 do not).
  std::optional<double> spread;
};

/// One measured collective call (nccl-tests' definitions: `bytes` is the
/// all-reduce buffer, the all-gather output, the reduce-scatter input, the
/// per-rank all-to-all buffer, the send / recv message).
struct CollectivePoint {
  CollectiveKind kind = CollectiveKind::AllReduce;
  LinkClass link = LinkClass::IntraNode;
  int ranks = 0;
  double bytes = 0;
  double seconds = 0;
  /// Bus bandwidth at this size, bytes/s.
  double busBandwidth = 0;
  /// As GemmPoint::spread.
  std::optional<double> spread;
};

/// What `bmc calibrate` measured on a machine: where and when, and the
/// curves that replace the analytic model. Every part is optional.
struct Calibration {
  std::string machine;
  /// UTC, ISO 8601.
  std::string date;
  int ranks = 0;
  int threadsPerRank = 0;
  /// Library versions by name (openblas, mpi, compiler, bmrt).
  std::map<std::string, std::string> versions;
  /// A full grid over sizes per dimension, sorted by (m, n, k).
  std::vector<GemmPoint> gemm;
  /// Traffic rate per MemoryKernelClass, bytes/s; 0 where not measured.
  std::array<double, kNumMemoryKernelClasses> memoryKernelBandwidth{};
  /// Sorted by (kind, link, ranks, bytes).
  std::vector<CollectivePoint> collectives;
  /// How steady the measurements were (issue 24), by the names the file
  /// uses: the largest relative interquartile range of each curve ("gemm",
  /// "memory", "collectives"), and over every point the "largest" and the
  /// "median". Empty for files older than the spread.
  std::map<std::string, double> spread;
  /// The 1-minute load average `bmc calibrate` saw "before" and "after"
  /// measuring, and the "cores" it could use; empty where not recorded.
  std::map<std::string, double> loadAverage;
  /// The compute rates measured again with one rank alone, where the curves
  /// above were measured with every rank busy: "peak_tflops_fp32",
  /// "hbm_gbps" and "<class>_gbps" per memory-kernel class, in the units
  /// the names give. Empty for one rank.
  std::map<std::string, double> singleRank;

  /// Whether the file had any calibration key at all.
  bool present() const;
};

/// The measured relative spreads' summary for Calibration::spread: each
/// curve's largest point spread, the largest and the median over all.
/// Empty when no point has a spread.
std::map<std::string, double>
summarizeSpread(const std::vector<GemmPoint> &gemm,
                const std::vector<double> &memory,
                const std::vector<CollectivePoint> &collectives);

/// "bmrt" or "megatron".
const char *toString(RuntimeModel runtime);
std::optional<RuntimeModel> parseRuntimeModel(llvm::StringRef text);

/// One class of link, as an NCCL collective sees it.
struct LinkSpec {
  /// Bus bandwidth in bytes/s as nccl-tests reports it ("busbw"), i.e. the
  /// algorithm bandwidth times the collective's bus factor. Intra-node: per
  /// GPU. Inter-node: the node's aggregate network bandwidth (all NICs).
  double busBandwidth = 0;
  /// Latency of one step of a ring collective or of one send, in seconds.
  double latency = 0;
};

struct Cluster {
  std::string name;
  std::string gpuName;
  int gpusPerNode = 0;
  /// Largest number of nodes available; 0 when unlimited.
  int maxNodes = 0;
  /// Dense tensor-core peak for fp16 inputs, FLOP/s per GPU.
  double peakFlops16 = 0;
  /// The same for bf16; 0 when the GPU has no bf16 (V100).
  double peakFlopsBf16 = 0;
  /// fp32 peak, FLOP/s per GPU (used when training in fp32).
  double peakFlops32 = 0;
  /// Device memory, bytes.
  double memoryBytes = 0;
  /// Device memory bandwidth, bytes/s.
  double memoryBandwidth = 0;
  /// Fraction of peak that large, well-shaped GEMMs reach (cuBLAS).
  double gemmEfficiency = 0.8;
  /// Fraction of memory bandwidth that streaming kernels reach.
  double memoryEfficiency = 0.85;
  /// Memory the framework holds outside the plan: CUDA context, cuBLAS and
  /// NCCL workspaces, allocator fragmentation. Bytes.
  double reservedMemoryBytes = 0;
  LinkSpec intraNode;
  LinkSpec interNode;
  /// Whose kernels run there: Megatron-LM's on the GPU presets; bmrt's on a
  /// cluster that `bmc calibrate` measured.
  RuntimeModel runtime = RuntimeModel::Megatron;
  /// What the devices train in ("bf16", "fp16", "fp32"); "" = bf16 where the
  /// GPUs have it, else fp16 (defaultPrecision).
  std::string precision;
  /// Fraction in [0, 1] of the data-parallel gradient reduction's time that
  /// runs hidden while the backward pass computes, given enough backward to
  /// hide behind: 1 where the collectives have their own engine (NCCL kernels
  /// on a stream of their own, as Megatron-LM's --overlap-grad-reduce and
  /// PyTorch DDP use them), the presets' and a file's default; what `bmc
  /// calibrate` measures elsewhere.
  double gradReduceOverlap = 1.0;
  /// Optimizer offload to the host (ZeRO-Offload, Ren et al. 2021; issue
  /// 29): the copy bandwidth between host memory and one GPU, per direction
  /// and with every GPU of the node copying at once, bytes/s (0: the
  /// cluster cannot offload); the host memory per GPU that offloaded state
  /// may take, bytes; and the traffic rate (bytes read + written) of the
  /// optimizer step on the host cores one GPU's process gets, bytes/s. A
  /// cluster with a host link has a host optimizer rate (parseCluster
  /// checks); host memory 0 says the host's memory is the device's (a CPU):
  /// the offloaded state then counts in `memoryBytes`.
  double hostLinkBandwidth = 0;
  double hostMemoryBytes = 0;
  double hostOptimizerBandwidth = 0;
  Calibration calibration;

  bool hasBf16() const { return peakFlopsBf16 > 0; }
  bool canOffload() const { return hostLinkBandwidth > 0; }
  /// Whether offloaded state takes the device's own memory: no host link
  /// (an offload --fix pins), or no host memory apart from the device's.
  bool offloadSharesDeviceMemory() const {
    return !canOffload() || hostMemoryBytes <= 0;
  }
  /// Network bandwidth that one GPU can use: its share of the node's NICs.
  double interNodeBandwidthPerGpu() const {
    return interNode.busBandwidth / gpusPerNode;
  }
};

bool operator==(const GemmPoint &a, const GemmPoint &b);
bool operator==(const CollectivePoint &a, const CollectivePoint &b);
bool operator==(const Calibration &a, const Calibration &b);
bool operator==(const LinkSpec &a, const LinkSpec &b);
bool operator==(const Cluster &a, const Cluster &b);

/// Names of the shipped presets, alphabetical.
std::vector<std::string> clusterPresetNames();

/// A preset by name; an error that lists the presets otherwise.
llvm::Expected<Cluster> getClusterPreset(llvm::StringRef name);

/// Parses a cluster description (JSON, or YAML when `isYaml`). `sourceName`
/// prefixes error messages.
llvm::Expected<Cluster> parseCluster(llvm::StringRef text, bool isYaml,
                                     llvm::StringRef sourceName);

/// Reads a JSON (.json) or YAML (.yaml / .yml, or anything else) file.
llvm::Expected<Cluster> loadClusterFile(llvm::StringRef path);

/// The cluster as a YAML file that parseCluster reads back equal: every
/// key, in a stable order, with its unit in a comment.
std::string writeClusterYaml(const Cluster &cluster);

/// What `--cluster` accepts: a preset name, or a path to a file.
llvm::Expected<Cluster> loadCluster(llvm::StringRef presetOrPath);

} // namespace bm::cost

#endif // BM_COST_CLUSTER_H
