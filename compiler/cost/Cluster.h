//===- Cluster.h - the machines a plan runs on ------------------*- C++ -*-===//
//
// A cluster is a set of identical nodes, each with `gpusPerNode` GPUs joined
// by an intra-node fabric (NVLink), the nodes joined by a network
// (InfiniBand / Ethernet). The planner needs only this analytic description:
// nobody should need the GPUs to plan for them (DESIGN.md section 1).
//
// Presets ship for the clusters of the papers we compare against; anything
// else is a JSON or YAML file with the keys documented in Cluster.cpp
// (kClusterKeys) and in passes/plan/PLAN_SCHEMA.md.
//
//===----------------------------------------------------------------------===//

#ifndef BM_COST_CLUSTER_H
#define BM_COST_CLUSTER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

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
  /// Fraction of the data-parallel gradient reduction's time that runs
  /// hidden while the backward pass computes, given enough backward to hide
  /// behind: 1 where the collectives have their own engine (NCCL kernels on
  /// a stream of their own, as Megatron-LM's --overlap-grad-reduce and
  /// PyTorch DDP use them), what `bmc calibrate` measures elsewhere.
  double gradReduceOverlap = 1.0;

  bool hasBf16() const { return peakFlopsBf16 > 0; }
  /// Network bandwidth that one GPU can use: its share of the node's NICs.
  double interNodeBandwidthPerGpu() const {
    return interNode.busBandwidth / gpusPerNode;
  }
};

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

/// What `--cluster` accepts: a preset name, or a path to a file.
llvm::Expected<Cluster> loadCluster(llvm::StringRef presetOrPath);

} // namespace bm::cost

#endif // BM_COST_CLUSTER_H
