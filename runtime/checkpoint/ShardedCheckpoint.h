//===- ShardedCheckpoint.h - checkpoints written by every rank --*- C++ -*-===//
//
// A job partitioned over a mesh saves each rank's own shards, as
// Megatron-Core's dist_checkpointing and PyTorch's DCP do:
//
//   manifest.json                 Checkpoint.h's manifest, plus "mesh" and,
//                                 per tensor, its global shape and shards:
//                                 {"file", "rank", "offsets", "shape",
//                                  "coordinates": {"tp": 1, ...}} and, for
//                                 ZeRO's flat shards, "flat_range": [b, e]
//   shards/rank00003.safetensors  rank 3's boxes of the global tensors,
//                                 named as in an unsharded checkpoint
//
// A replicated tensor is written once: by the replica at coordinate 0 along
// every axis that does not split it. Saving is atomic as for an unsharded
// checkpoint: every rank writes into one temporary folder, rank 0 adds the
// manifest last and renames the folder into place; the caller orders the
// three steps with barriers. Loading (loadCheckpoint) assembles the global
// tensors from the shards, whatever mesh wrote them, so a checkpoint moves
// between meshes, ZeRO stages and rank counts, and `bmc export` merges it.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_SHARDEDCHECKPOINT_H
#define BMRT_CHECKPOINT_SHARDEDCHECKPOINT_H

#include "Checkpoint.h"

#include <map>

namespace bmrt {

/// One rank's box of a global tensor, or (ZeRO, as Megatron's
/// ShardedTensor.flattened_range) the elements [flatBegin, flatEnd) of the
/// box flattened, held as a 1-D tensor.
struct TensorShard {
  int rank = 0;
  Shape offsets, shape;
  int64_t flatBegin = 0, flatEnd = -1; // -1: the whole box
  bool flat() const { return flatEnd >= 0; }
  /// The rank's place on the mesh, axis name -> coordinate.
  std::map<std::string, int> coordinates;
};

/// A tensor of a sharded checkpoint: named as in an unsharded one.
struct ShardedTensor {
  std::string name;
  TensorKind kind = TensorKind::Parameter;
  DType dtype = DType::F32;
  Shape global;
  std::vector<TensorShard> shards;
};

/// "shards/rank00003.safetensors".
std::string shardFileOf(int rank);

/// Rank 0, first: checks that `dir` may be replaced and creates the empty
/// temporary folder every rank writes into.
void beginShardedSave(const std::string &dir);
/// Every rank, after beginShardedSave: writes (and fsyncs) its shards.
void writeRankShards(const std::string &dir, int rank,
                     const std::vector<TensorRef> &shards);
/// Rank 0, once every rank has written: the manifest, then the folder
/// takes the place of `dir`.
void finishShardedSave(const std::string &dir, const CheckpointInfo &info,
                       const std::map<std::string, int> &mesh,
                       const std::vector<ShardedTensor> &tensors);

/// Whether a manifest is a sharded checkpoint's.
bool isShardedManifest(const nlohmann::json &manifest);
/// Assembles every global tensor of the sharded checkpoint in `folder`
/// (`dir` names it in messages): one line naming the file when a shard
/// file is missing, truncated or lacks a shard, or when the shards do not
/// cover a tensor.
void readShardedTensors(const std::string &dir, const std::string &folder,
                        const nlohmann::json &manifest,
                        std::vector<HostTensor> &parameters,
                        std::vector<HostTensor> &optimizerState);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_SHARDEDCHECKPOINT_H
