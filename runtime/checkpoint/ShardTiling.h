//===- ShardTiling.h - shards that cover a tensor exactly once --*- C++ -*-===//
//
// Private to runtime/checkpoint. A sharded manifest says where each shard
// lies; before any byte is copied, loading checks that the shards tile the
// tensor: every box inside the global shape, distinct boxes disjoint, the
// boxes' volumes summing to the tensor's, and the flat ranges of one box
// (ZeRO's) disjoint and covering it. Without this a manifest whose shards
// overlap or leave a hole would load a tensor part stale, part zero.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_SHARDTILING_H
#define BMRT_CHECKPOINT_SHARDTILING_H

#include "ShardedCheckpoint.h"

namespace bmrt {

/// Throws one line starting with `where` (the manifest) and naming the
/// tensor and the shards' ranks unless the shards of `t` tile it exactly
/// once.
void checkTiling(const std::string &where, const ShardedTensor &t);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_SHARDTILING_H
