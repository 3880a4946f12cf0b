//===- OutlineBlocks.h - one function per block class -----------*- C++ -*-===//
//
// Codegen's second half: the layers bm-fold found are the same computation
// on other slots, so their instructions become one function per block class
// and phase (forward, backward), called once per layer. The program then
// reads as the model is written (an embedding, N calls of a block, a head)
// and grows with the unique blocks, not the depth.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_CODEGEN_OUTLINEBLOCKS_H
#define BMC_CODEGEN_OUTLINEBLOCKS_H

#include "bmrt/Program.h"

namespace bm {

/// Replaces every run of a layer's instructions that matches the first run
/// of its block class (same kernels, attributes and slot types, in the same
/// pattern of reads and writes) by a call of a shared function, and drops
/// the slots only those runs used. Runs that differ stay inline. inlineCalls
/// of the result gives the original instructions on renumbered slots.
void outlineBlocks(bmrt::Program &program);

/// Drops the value and constant slots no instruction, loss or output refers
/// to any more, and renumbers the rest (inputs, labels, parameters and
/// gradients always stay).
void compactSlots(bmrt::Program &program);

} // namespace bm

#endif // BMC_CODEGEN_OUTLINEBLOCKS_H
