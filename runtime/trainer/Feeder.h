//===- Feeder.h - fills the step's inputs and labels ------------*- C++ -*-===//
//
// Each micro-batch, the feeder writes the step program's input and label
// slots from the data: a token file (language models: each row is the next
// length + 1 tokens, labels shifted by one) or the synthetic tasks of
// Data.h. It draws sample by sample, all of a sample's inputs together
// (T5's decoder and encoder ids), so a step trains on the same samples
// however its batch is split into micro-batches and over dp ranks. Its
// position is part of a checkpoint, so a resumed run sees the same data as
// one that never stopped.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_FEEDER_H
#define BMRT_TRAINER_FEEDER_H

#include "Data.h"
#include "TrainerOptions.h"
#include "TrainingState.h"

#include "runtime/checkpoint/FileIO.h"

#include "bmrt/Executor.h"
#include "bmrt/Mesh.h"

#include <memory>
#include <optional>

namespace bmrt {

class Feeder {
public:
  /// `task` is trainer.json's: language-model, classifier, regression or
  /// own-loss.
  /// Every rank draws the global batch and keeps its box of each input and
  /// label: by the slot's sharding over `mesh`, or in a program without a
  /// mesh line, its rows of the batch (dim 0 over the mesh's dp ranks).
  /// `classes` is the loss's class count (the vocabulary of a language
  /// model) where `program` has no loss of its own (a pipeline stage
  /// before the last, which draws the same batches to keep its inputs);
  /// 0 reads it off `program`.
  /// `mirrored`: the sequences lie in context parallelism's mirrored
  /// layout (bmrt/ContextLayout.h) along each slot's dim split over cp.
  Feeder(const Program &program, Executor &executor, const std::string &task,
         const TrainerOptions &options, const Mesh &mesh, int rank,
         int64_t classes = 0, bool mirrored = false);

  /// The class count of the step's cross-entropy, or 0 without one.
  static int64_t lossClasses(const Program &program);

  /// Writes the next micro-batch into the input and label slots.
  void fill();
  /// Tokens (language models) or samples per micro-batch of all ranks, and
  /// their name.
  int64_t itemsPerMicroBatch() const { return items; }
  const char *itemName() const { return lm ? "tokens" : "samples"; }
  /// "synthetic next-token task (vocabulary 512)", "tokens of 'x.bin'".
  std::string describe() const;

  /// Where the data stands: the token file's position and the RNG state.
  DataState state() const;
  void restore(const DataState &state);

private:
  void openSamples(const TrainerOptions &options, const std::string &task);
  void findClassifierSource();
  /// A synthetic classification task's classes: ten of the model's, or
  /// fewer, which a tiny model visibly learns within a minute (a thousand
  /// classes of a few samples each per step it does not).
  int64_t syntheticClasses() const;
  void findSamples();
  void startBatch();
  /// Draws every input and label of sample `s` of the micro-batch.
  void drawSample(int64_t s);
  void drawLanguageSample(int64_t s);
  void drawClassifierSample(int64_t s);
  /// A regression's targets: the same pattern for every sample, drawn once
  /// from the seed (N(0, 1) per element), so that the loss can fall from
  /// the output's mean square plus one towards zero as the model learns it.
  void drawRegressionSample(int64_t s);
  void drawOther(int slot, int64_t offset, const Shape &shape);
  /// Whether the slot's global leading dim is the micro-batch's samples.
  bool bySample(int slot) const;
  /// The global shape of one sample's part of a slot.
  Shape oneSample(int slot) const;
  uint64_t rngState() const;
  /// The global shape of a slot's data, and where this rank's box starts.
  Shape allRanks(int slot) const;
  template <typename T>
  void upload(int slot, const std::vector<T> &global) const;
  template <typename T>
  std::vector<T> inMirroredLayout(int slot, const std::vector<T> &global) const;

  const Program &program;
  Executor &executor;
  const Mesh &mesh;
  int rank;
  /// Sequences in context parallelism's mirrored layout (constructor).
  bool mirrored = false;
  bool lm = false, regression = false;
  int labels = -1, target = -1, image = -1, tokenSource = -1;
  int64_t classes = 0, items = 0;
  std::vector<int> others;
  /// Token ids (language models) or a classifier's labels.
  std::optional<TokenFile> file;
  /// A classifier's samples, one per label of `file`.
  std::optional<FileReader> samples;
  std::string samplesPath;
  std::optional<SyntheticLanguage> language;
  std::optional<SyntheticClassification> images;
  std::vector<float> targetPattern;
  Rng noise;
  std::vector<int64_t> row;
  /// The slots fill() writes: the task's, then the other inputs.
  std::vector<int> filled;
  /// Samples per micro-batch of all ranks.
  int64_t sampleCount = 0;
  /// The micro-batch of all ranks per slot, integer or float, drawn sample
  /// by sample; the synthetic items' noise keys; each integer input's id
  /// bound.
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> floats;
  std::vector<uint64_t> itemKeys;
  std::vector<int64_t> idBounds;
};

} // namespace bmrt

#endif // BMRT_TRAINER_FEEDER_H
