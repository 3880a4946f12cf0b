//===- CheckpointFolder.h - the atomic folder of a checkpoint ---*- C++ -*-===//
//
// Private to runtime/checkpoint: the steps of saveCheckpoint that a
// sharded save (ShardedCheckpoint.cpp) shares, where every rank writes into
// the temporary folder between the first and the last.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_CHECKPOINTFOLDER_H
#define BMRT_CHECKPOINT_CHECKPOINTFOLDER_H

#include "Checkpoint.h"

namespace bmrt {

/// The temporary sibling of `dir` a save writes into: DIR.tmp-TAG.
std::string checkpointTempFolder(const std::string &dir,
                                 const std::string &tag);
/// Checks that `dir` may be replaced (its parent exists; it is absent, empty
/// or a checkpoint) and creates `tmp` empty.
void createCheckpointTempFolder(const std::string &dir, const std::string &tmp);
/// Writes the manifest (Checkpoint.h's fields, `tensors`, and the fields
/// of `extra`) into `tmp`, syncs it, and puts `tmp` in the place of `dir`;
/// removes `tmp` if that fails.
void publishCheckpointFolder(const std::string &dir, const std::string &tmp,
                             const CheckpointInfo &info,
                             const nlohmann::json &tensors,
                             const nlohmann::json &extra);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_CHECKPOINTFOLDER_H
