//===- CollectiveKernels.h - launchers of the collective ops ----*- C++ -*-===//
//
// Shared by every backend's kernel table (runtime/cpu/KernelTable.cpp, ...):
// the collectives move flat buffers through the job's communicators and
// reorder chunks with the device's box copies, so one launcher serves all
// backends; the helpers give a backend's own kernels the part of a split
// tensor this rank holds.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_PROGRAM_COLLECTIVEKERNELS_H
#define BMRT_PROGRAM_COLLECTIVEKERNELS_H

#include "bmrt/Executor.h"
#include "bmrt/Sharding.h"

namespace bmrt {

void launchAllGather(Executor &e, const Instr &i);
void launchAllReduce(Executor &e, const Instr &i);
void launchAllToAll(Executor &e, const Instr &i);
void launchReduceScatter(Executor &e, const Instr &i);
void launchShardSlice(Executor &e, const Instr &i);

/// The classes of the logits (operand 0) of a vocabulary-parallel loss
/// instruction split over its axes: how many in all, and the first this
/// rank holds.
struct ClassSplit {
  int64_t classes;
  int64_t offset;
};
ClassSplit classSplitOf(Executor &e, const Instr &i);
/// The entries of a shard_gather's table (operand 0) this rank holds.
TableShard tableShardOf(Executor &e, const Instr &i);

} // namespace bmrt

#endif // BMRT_PROGRAM_COLLECTIVEKERNELS_H
