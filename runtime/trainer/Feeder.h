//===- Feeder.h - fills the step's inputs and labels ------------*- C++ -*-===//
//
// Each micro-batch, the feeder writes the step program's input and label
// slots from the data: a token file (language models: each row is the next
// length + 1 tokens, labels shifted by one) or the synthetic tasks of
// Data.h. Its position is part of a checkpoint, so a resumed run sees the
// same data as one that never stopped.
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
  /// `task` is trainer.json's: language-model, classifier or own-loss.
  /// Every rank draws the global batch and keeps its box of each input and
  /// label: by the slot's sharding over `mesh`, or in a program without a
  /// mesh line, its rows of the batch (dim 0 over the mesh's dp ranks).
  /// `classes` is the loss's class count (the vocabulary of a language
  /// model) where `program` has no loss of its own (a pipeline stage
  /// before the last, which draws the same batches to keep its inputs);
  /// 0 reads it off `program`.
  Feeder(const Program &program, Executor &executor, const std::string &task,
         const TrainerOptions &options, const Mesh &mesh, int rank,
         int64_t classes = 0);

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
  void fillLanguageModel();
  void fillClassifier();
  void openSamples(const TrainerOptions &options, const std::string &task);
  void fillOther(int slot);
  /// Ids of an integer input must index the tables it is gathered from.
  int64_t idBound(int slot) const;
  uint64_t rngState() const;
  /// The global shape of a slot's data, and where this rank's box starts.
  Shape allRanks(int slot) const;
  template <typename T>
  void upload(int slot, const std::vector<T> &global) const;

  const Program &program;
  Executor &executor;
  const Mesh &mesh;
  int rank;
  bool lm = false;
  int labels = -1, target = -1, image = -1;
  int64_t classes = 0, items = 0;
  std::vector<int> others;
  /// Token ids (language models) or a classifier's labels.
  std::optional<TokenFile> file;
  /// A classifier's samples, one per label of `file`.
  std::optional<FileReader> samples;
  std::string samplesPath;
  std::optional<SyntheticLanguage> language;
  std::optional<SyntheticClassification> images;
  Rng noise;
  std::vector<int64_t> row;
};

} // namespace bmrt

#endif // BMRT_TRAINER_FEEDER_H
