//===- ShardedCheckpoint.h - checkpoints written by every rank --*- C++ -*-===//
//
// A job partitioned over a mesh saves each rank's own shards, as
// Megatron-Core's dist_checkpointing and PyTorch's DCP do. Its versions
// (Checkpoint.h has the folder around them) hold:
//
//   manifest.json                 Checkpoint.h's manifest, plus "mesh" and,
//                                 per tensor, its global shape and shards:
//                                 {"file", "rank", "offsets", "shape",
//                                  "coordinates": {"tp": 1, ...}} and, for
//                                 ZeRO's flat shards, "flat_range": [b, e];
//                                 "files" has each shard file's size and CRC
//   shards/rank00003.safetensors  rank 3's boxes of the global tensors,
//                                 named as in an unsharded checkpoint
//
// A replicated tensor is written once: by the replica at coordinate 0 along
// every axis that does not split it. Saving is a version's save spread over
// the ranks: rank 0 creates the temporary folder and shares its name, every
// rank writes its file and contributes its size and CRC (computed while
// writing), and rank 0 adds the manifest last and publishes the version;
// one all-reduce the caller provides carries both exchanges. Loading
// (loadCheckpoint) checks every file against its CRC, that the shards tile
// every tensor exactly once and that every tensor of every file is
// claimed, then assembles the global tensors, whatever mesh wrote them: a
// checkpoint moves between meshes, ZeRO stages and rank counts, and `bmc
// export` merges it.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_SHARDEDCHECKPOINT_H
#define BMRT_CHECKPOINT_SHARDEDCHECKPOINT_H

#include "Checkpoint.h"

#include <functional>
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

/// How a sharded save reaches the other ranks of its job.
struct SaveRanks {
  int rank = 0, size = 1;
  /// Sums `values` element-wise over every rank, in place (an all-reduce
  /// of int64): every rank calls it with equally many values, and none
  /// returns before all have called it, so it also orders a save's steps.
  std::function<void(std::vector<int64_t> &)> sum;
};

/// Every rank: writes its shards `mine` (none: no file) into version
/// info.step of `dir`. Rank 0, which also lists every rank's shards in
/// `tensors`, then writes the manifest with every file's size and CRC and
/// publishes the version, keeping the newest `keep`.
void saveShardedCheckpoint(const std::string &dir, const CheckpointInfo &info,
                           const std::map<std::string, int> &mesh,
                           const std::vector<ShardedTensor> &tensors,
                           const std::vector<TensorRef> &mine,
                           const SaveRanks &ranks, int64_t keep);

/// Whether a manifest is a sharded checkpoint's.
bool isShardedManifest(const nlohmann::json &manifest);
/// Assembles every global tensor of a sharded version. Refuses in one line
/// naming the file or tensor: a shard file that is missing, a link, or not
/// of its recorded size and CRC; a shard whose "file" is not its rank's or
/// whose rank is outside the mesh; shards that do not tile a tensor
/// exactly once (ShardTiling.h); a tensor of a file that no shard, or two,
/// claim.
void readShardedTensors(const CheckpointVersion &version,
                        const nlohmann::json &manifest,
                        std::vector<HostTensor> &parameters,
                        std::vector<HostTensor> &optimizerState);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_SHARDEDCHECKPOINT_H
