//===- CollectiveKernels.h - launchers of the collective ops ----*- C++ -*-===//
//
// Private to runtime/program: KernelTable.cpp lists these beside the
// compute kernels.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_PROGRAM_COLLECTIVEKERNELS_H
#define BMRT_PROGRAM_COLLECTIVEKERNELS_H

#include "bmrt/Executor.h"

namespace bmrt {

void launchAllGather(Executor &e, const Instr &i);
void launchAllReduce(Executor &e, const Instr &i);
void launchAllToAll(Executor &e, const Instr &i);
/// The vocabulary-parallel loss's kernels that need this rank's classes.
void launchCrossEntropyGradFromStats(Executor &e, const Instr &i);
void launchCrossEntropyStats(Executor &e, const Instr &i);
void launchReduceScatter(Executor &e, const Instr &i);
/// The vocabulary-parallel embedding's gather from this rank's rows.
void launchShardGather(Executor &e, const Instr &i);
void launchShardSlice(Executor &e, const Instr &i);

} // namespace bmrt

#endif // BMRT_PROGRAM_COLLECTIVEKERNELS_H
