//===- TrainerOptions.h - the trainer's command line ------------*- C++ -*-===//

#ifndef BMRT_TRAINER_TRAINEROPTIONS_H
#define BMRT_TRAINER_TRAINEROPTIONS_H

#include "bmrt/Device.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bmrt {

struct TrainerOptions {
  /// The folder `bmc compile` wrote (the trainer's own by default).
  std::string dir;
  /// Total steps, as Megatron-LM's --train-iters: a resumed run goes on to
  /// this step.
  int64_t steps = 100;
  /// A flat file of token ids (language models) or of float32 samples
  /// (classifiers, with `labels`); the synthetic task when empty.
  std::string data;
  /// A classifier's labels, one per sample of `data` (of `dataType`).
  std::string labels;
  /// "uint16" or "int32" (--data-type); empty: the .idx's, else uint16.
  std::string dataType;
  std::optional<float> lr, minLr, weightDecay;
  std::optional<int64_t> warmup;
  float clip = 1.0f;
  float momentum = 0.9f;
  /// LARS's trust coefficient (--trust-coefficient).
  float trustCoefficient = 1e-3f;
  uint64_t seed = 1;
  std::string log;
  std::string checkpoint;
  int64_t saveEvery = 0;
  /// Checkpoint versions kept in `checkpoint` after a save (--keep).
  int64_t keep = 2;
  /// Stop after this step as if interrupted (saving a checkpoint first); 0:
  /// run to --steps. A later --resume goes on to --steps.
  int64_t stopAt = 0;
  bool resume = false;
  int threads = 0;
  /// Seconds a rank may wait in one collective before it ends the job
  /// (--timeout, World::setTimeout); 0: wait forever. PyTorch's process
  /// groups wait 600 s. Waits long by design count alike: the ranks in a
  /// barrier while rank 0 writes a checkpoint or loads one at --resume.
  double timeoutSeconds = 600;
  /// The backend (--device); empty: trainer.json's.
  std::string device;
  /// Bytes the device may hold (--device-memory, given in GiB); 0: all of
  /// it.
  size_t deviceMemory = 0;
  /// What GEMMs read their operands in (--precision fp32|bf16); unset:
  /// trainer.json's precision. Tensors stay fp32 in memory either way.
  std::optional<ContractionPrecision> precision;
  bool quiet = false;
  /// Print the pipeline schedule's instruction lists and exit.
  bool printSchedule = false;
  /// Reduce gradients while the backward runs (--overlap) or after it,
  /// blocking (--no-overlap); unset: as trainer.json says. In buckets of at
  /// least this many MiB (--bucket-mb).
  std::optional<bool> overlap;
  double bucketMb = 4;
  /// The offloaded optimizer's phases behind the next forward
  /// (--offload-behind) or after the backward (--offload-after); unset: as
  /// the device suggests (Trainer::updatesBehind).
  std::optional<bool> offloadBehind;
};

/// --timeout's value as far as it can be read before the options are
/// parsed (the default when it cannot): it bounds the job's start, which
/// comes before the one-line errors of a bad command line.
double startTimeoutOf(const std::vector<std::string> &args);

/// The --help text.
extern const char *const kTrainerHelp;

/// Parses the command line; throws bmrt::Error with one line on a bad flag.
/// Returns nullopt after printing --help.
std::optional<TrainerOptions> parseTrainerOptions(
    const std::vector<std::string> &args, const std::string &selfDir);

} // namespace bmrt

#endif // BMRT_TRAINER_TRAINEROPTIONS_H
