//===- Trainer.h - the training loop every compiled trainer runs -*- C++ -*-===//
//
// The trainer loads what `bmc compile` wrote (trainer.json, the step
// program, the step-0 parameters), places the step on the device, and runs
// optimizer steps: fill the micro-batch from the data, run the step program
// (forward, loss, backward), accumulate gradients over the plan's
// micro-batches, clip them by their global norm, and update every trained
// parameter with AdamW or SGD under a warm-up + cosine learning rate. Each
// step prints one line and appends one JSON line to the log; checkpoints
// are written atomically and a resumed run continues bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_TRAINER_H
#define BMRT_TRAINER_TRAINER_H

#include "TrainerOptions.h"

#include "bmrt/Comm.h"

namespace bmrt {

/// Runs the trainer to its last step on this rank of `world`; throws
/// bmrt::Error on anything that stops it (the last good checkpoint is kept).
void runTrainer(const TrainerOptions &options, World &world);

} // namespace bmrt

#endif // BMRT_TRAINER_TRAINER_H
