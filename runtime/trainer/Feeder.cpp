//===- Feeder.cpp - fills the step's inputs and labels --------------------===//

#include "Feeder.h"

#include "bmrt/ContextLayout.h"
#include "bmrt/Error.h"
#include "bmrt/Sharding.h"

#include <algorithm>
#include <cmath>

namespace bmrt {
namespace {

constexpr int64_t kSyntheticClasses = 10;

/// N(0, 1), Box-Muller from two uniforms.
float normal(Rng &rng) {
  double u = std::max(rng.uniform(), 1e-12), w = rng.uniform();
  return static_cast<float>(std::sqrt(-2 * std::log(u)) *
                            std::cos(2 * M_PI * w));
}

} // namespace

int64_t Feeder::lossClasses(const Program &program) {
  return bmrt::lossClasses(program);
}

Feeder::Feeder(const Program &program, Executor &executor,
               const std::string &task, const TrainerOptions &options,
               const Mesh &mesh, int rank, int64_t lossClassCount,
               bool mirrored)
    : program(program), executor(executor), mesh(mesh), rank(rank),
      mirrored(mirrored), noise(options.seed ^ 0x5eed) {
  lm = task == "language-model";
  regression = task == "regression";
  classes = lossClassCount ? lossClassCount : lossClasses(program);
  std::vector<int> labelSlots = program.slotsOf(SlotKind::Label);
  labels = labelSlots.empty() ? -1 : labelSlots.front();
  for (int slot : program.slotsOf(SlotKind::Input)) {
    if (lm && labels >= 0 && program.slots[slot].dtype == DType::I64 &&
        program.slots[slot].shape == program.slots[labels].shape)
      target = slot;
    else
      others.push_back(slot);
  }
  // The target stream is the last integer input shaped like the labels; any
  // earlier one (T5's encoder ids) is another input.
  if (lm)
    BMRT_CHECK(target >= 0, "a language-model step needs an integer input "
                            "shaped like its labels");
  if (!lm && !regression && labels >= 0)
    findClassifierSource();
  if (!options.data.empty() && !lm) {
    openSamples(options, task);
  } else if (!options.data.empty()) {
    BMRT_CHECK(options.labels.empty(),
               "--labels is for classifiers; a language model's labels are "
               "the next tokens of --data");
    file.emplace(options.data, tokenTypeOf(options.data, options.dataType));
    file->checkVocab(classes);
  } else if (lm) {
    language.emplace(classes, options.seed);
  } else if (regression) {
    BMRT_CHECK(labels >= 0 && program.slots[labels].dtype == DType::F32,
               "a regression step needs float targets");
  } else if (image >= 0) {
    images.emplace(syntheticClasses(), options.seed);
  }
  items = labels >= 0 ? numElements(allRanks(labels)) : mesh.numRanks();
  findSamples();
  if (regression) {
    items = sampleCount;
    Rng draw(options.seed ^ 0x7a59e7);
    targetPattern.resize(size_t(numElements(oneSample(labels))));
    for (float &t : targetPattern)
      t = normal(draw);
  }
}

/// What a classifier's classes are drawn into: its largest float input
/// (the images; any other float input is noise), or else its first integer
/// input with a batch dim (the tokens of a text classifier, whose label is
/// then its first token's, modulo the synthetic classes).
void Feeder::findClassifierSource() {
  int64_t batch =
      program.slots[labels].shape.empty() ? 0 : program.slots[labels].shape[0];
  for (int slot : others) {
    const Slot &s = program.slots[slot];
    if (s.dtype == DType::F32 &&
        (image < 0 ||
         numElements(s.shape) > numElements(program.slots[image].shape)))
      image = slot;
    if (s.dtype == DType::I64 && tokenSource < 0 && !s.shape.empty() &&
        s.shape[0] == batch)
      tokenSource = slot;
  }
  BMRT_CHECK(image >= 0 || tokenSource >= 0,
             "a classifier step needs an input to draw its classes into: a "
             "float input (images) or an integer one (tokens)");
  if (image >= 0) {
    tokenSource = -1;
    others.erase(std::find(others.begin(), others.end(), image));
  }
}

/// The slots fill() writes, how many samples a micro-batch has (the
/// leading dim of the first of them with one: the task's slots come first)
/// and the bound of each integer input's ids.
void Feeder::findSamples() {
  for (int slot : {target, labels, image})
    if (slot >= 0)
      filled.push_back(slot);
  filled.insert(filled.end(), others.begin(), others.end());
  for (int slot : filled)
    if (sampleCount == 0 && !allRanks(slot).empty())
      sampleCount = allRanks(slot)[0];
  BMRT_CHECK(lm || image < 0 || numElements(allRanks(labels)) == sampleCount,
             "a classifier step needs one label per sample, it has " +
                 formatShape(allRanks(labels)));
  ids.resize(program.slots.size());
  floats.resize(program.slots.size());
  idBounds.resize(program.slots.size(), 0);
  for (int slot : others) {
    const Slot &s = program.slots[slot];
    BMRT_CHECK(s.dtype == DType::I64 || s.dtype == DType::F32,
               "input '" + s.name + "' is " + nameOf(s.dtype) +
                   "; the trainer fills i64 and f32 inputs");
    // A language model's ids are below its vocabulary; a classifier's
    // class count says nothing of its inputs.
    if (s.dtype == DType::I64)
      idBounds[slot] = idBound(program, slot, lm ? classes : 0);
  }
}

/// A classifier's --data: float32 samples of the image input's shape, one
/// per label of --labels, read in order.
void Feeder::openSamples(const TrainerOptions &options,
                         const std::string &task) {
  BMRT_CHECK(task == "classifier",
             "--data feeds language models (tokens) and classifiers "
             "(samples and --labels); this model is " + task);
  BMRT_CHECK(image >= 0, "--data feeds a classifier's float samples; this "
                         "classifier reads tokens, which the trainer draws");
  BMRT_CHECK(!options.labels.empty(),
             "a classifier's --data needs --labels FILE (one label per "
             "sample)");
  file.emplace(options.labels, tokenTypeOf(options.labels, options.dataType));
  file->checkVocab(classes);
  samples.emplace(options.data);
  samplesPath = options.data;
  const Shape &shape = program.slots[image].shape;
  uint64_t sampleBytes = numElements(shape) / shape[0] * sizeof(float);
  BMRT_CHECK(samples->size() % sampleBytes == 0,
             "'" + options.data + "' has " + std::to_string(samples->size()) +
                 " bytes, not a whole number of float32 samples of " +
                 formatShape(Shape(shape.begin() + 1, shape.end())));
  BMRT_CHECK(int64_t(samples->size() / sampleBytes) == file->size(),
             "'" + options.data + "' holds " +
                 std::to_string(samples->size() / sampleBytes) +
                 " samples but '" + options.labels + "' " +
                 std::to_string(file->size()) + " labels");
}

std::string Feeder::describe() const {
  if (samples)
    return "data: " + std::to_string(file->size()) + " samples of '" +
           samplesPath + "' labelled by '" + file->path() + "'";
  if (file)
    return "data: tokens of '" + file->path() + "' (" +
           std::to_string(file->size()) + " tokens)";
  if (language)
    return "data: synthetic next-token task (vocabulary " +
           std::to_string(classes) + ")";
  if (tokenSource >= 0)
    return "data: synthetic text classification (the label is the first "
           "token of '" +
           program.slots[tokenSource].name + "' modulo " +
           std::to_string(syntheticClasses()) + ")";
  if (regression)
    return "data: synthetic regression task (one pattern of " +
           std::to_string(targetPattern.size()) +
           " targets for every sample, inputs N(0, 1))";
  if (images)
    return "data: synthetic classification task (" +
           std::to_string(images->classes()) + " of the model's " +
           std::to_string(classes) + " classes)";
  return "data: synthetic inputs";
}

/// Draws the micro-batch sample by sample, each sample's inputs and
/// labels together (the task's part, then the other inputs in slot order),
/// so that a step's samples do not depend on how its batch is split into
/// micro-batches or over dp ranks (every rank draws the whole micro-batch
/// and keeps its rows).
void Feeder::fill() {
  startBatch();
  for (int64_t s = 0; s < sampleCount; ++s)
    drawSample(s);
  // An input without the samples' leading dim is drawn whole after them.
  for (int slot : others)
    if (!bySample(slot))
      drawOther(slot, 0, allRanks(slot));
  if (images)
    images->render(floats[image].data(), ids[labels].data(), itemKeys.data(),
                   allRanks(image));
  for (int slot : filled)
    if (program.slots[slot].dtype == DType::F32)
      upload(slot, floats[slot]);
    else
      upload(slot, ids[slot]);
  executor.stream().synchronize();
}

/// Sizes the host buffers of the micro-batch of all ranks.
void Feeder::startBatch() {
  for (int slot : filled) {
    size_t n = static_cast<size_t>(numElements(allRanks(slot)));
    if (program.slots[slot].dtype == DType::F32)
      floats[slot].resize(n);
    else
      ids[slot].resize(n);
  }
  itemKeys.resize(static_cast<size_t>(sampleCount));
}

void Feeder::drawSample(int64_t s) {
  // Noise for the inputs no task fills follows the task's RNG from the
  // sample's start, so that a checkpoint's data state covers it.
  if (language || images)
    noise.setState(rngState() ^ 0x9e3779b97f4a7c15ull);
  if (lm)
    drawLanguageSample(s);
  else if (regression)
    drawRegressionSample(s);
  else if (image >= 0)
    drawClassifierSample(s);
  for (int slot : others)
    if (bySample(slot))
      drawOther(slot, s * numElements(oneSample(slot)), oneSample(slot));
  if (tokenSource >= 0)
    ids[labels][size_t(s)] =
        ids[tokenSource][size_t(s * numElements(oneSample(tokenSource)))] %
        std::max<int64_t>(1, syntheticClasses());
}

/// The slot's sharding; without a mesh line, dim 0 (the batch) over dp.
static std::vector<std::vector<std::string>> dataSharding(const Program &program,
                                                          int slot) {
  const Slot &s = program.slots[slot];
  if (!program.mesh.empty() || s.shape.empty())
    return s.sharding;
  std::vector<std::vector<std::string>> sharding(s.shape.size());
  sharding[0] = {"dp"};
  return sharding;
}

/// Every rank draws the whole batch and keeps its box, so that N ranks see
/// exactly the samples one device would.
Shape Feeder::allRanks(int slot) const {
  return globalShape(program.slots[slot].shape, dataSharding(program, slot),
                     mesh);
}

/// Writes this rank's box of `global` (the slot's data for all ranks) into
/// the slot.
template <typename T>
void Feeder::upload(int slot, const std::vector<T> &natural) const {
  const TensorView &view = executor.view(slot);
  const Shape &local = program.slots[slot].shape;
  std::vector<T> laid;
  if (mirrored)
    laid = inMirroredLayout(slot, natural);
  const std::vector<T> &global = mirrored ? laid : natural;
  std::vector<T> box(view.size());
  copyBox(global.data(), allRanks(slot),
          shardOffsets(local, dataSharding(program, slot), mesh, rank),
          box.data(), local, Shape(local.size(), 0), local, sizeof(T));
  executor.device().copyToDevice(view.data, box.data(), view.bytes(),
                                 executor.stream());
}

/// `global` (the slot's data for all ranks) with the dim that cp splits
/// reordered into context parallelism's mirrored layout.
template <typename T>
std::vector<T> Feeder::inMirroredLayout(int slot,
                                        const std::vector<T> &global) const {
  const Shape shape = allRanks(slot);
  const std::vector<std::vector<std::string>> sharding =
      dataSharding(program, slot);
  int dim = -1;
  for (size_t d = 0; d < sharding.size(); ++d)
    if (std::find(sharding[d].begin(), sharding[d].end(), "cp") !=
        sharding[d].end())
      dim = static_cast<int>(d);
  if (dim < 0)
    return global;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  const int64_t cp = mesh.axisSize("cp");
  BMRT_CHECK(shape[dim] % (2 * cp) == 0,
             "the mirrored layout cuts a sequence into 2 x cp = " +
                 std::to_string(2 * cp) + " chunks; slot '" +
                 program.slots[slot].name + "' has " +
                 std::to_string(shape[dim]) + " positions");
  const std::vector<int64_t> order = mirroredOrder(shape[dim], cp);
  std::vector<T> laid(global.size());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < order.size(); ++p)
      std::copy_n(global.begin() + (o * shape[dim] + order[p]) * inner, inner,
                  laid.begin() + (o * shape[dim] + int64_t(p)) * inner);
  return laid;
}

/// Sample s's rows of the token stream and their labels (the stream
/// shifted by one).
void Feeder::drawLanguageSample(int64_t s) {
  Shape shape = oneSample(labels);
  int64_t n = numElements(shape);
  int64_t *inputs = ids[target].data() + s * n;
  int64_t *targets = ids[labels].data() + s * n;
  if (language) {
    language->fillBatch(inputs, targets, shape);
    return;
  }
  int64_t length = shape.back();
  row.resize(length + 1);
  for (int64_t r = 0; r < n / length; ++r) {
    file->next(row.data(), length + 1);
    std::copy(row.begin(), row.end() - 1, inputs + r * length);
    std::copy(row.begin() + 1, row.end(), targets + r * length);
  }
}

/// Sample s's label and item: read from the files, or drawn (and rendered
/// with the others in fill()).
void Feeder::drawClassifierSample(int64_t s) {
  int64_t &label = ids[labels][size_t(s)];
  if (!samples) {
    images->draw(label, itemKeys[size_t(s)]);
    return;
  }
  int64_t per = numElements(oneSample(image));
  int64_t index = file->position();
  file->next(&label, 1);
  samples->read(uint64_t(index) * per * sizeof(float),
                floats[image].data() + s * per, per * sizeof(float));
}

int64_t Feeder::syntheticClasses() const {
  return std::min<int64_t>(classes, kSyntheticClasses);
}

void Feeder::drawRegressionSample(int64_t s) {
  std::copy(targetPattern.begin(), targetPattern.end(),
            floats[labels].data() + s * int64_t(targetPattern.size()));
}

bool Feeder::bySample(int slot) const {
  Shape shape = allRanks(slot);
  return !shape.empty() && shape[0] == sampleCount;
}

Shape Feeder::oneSample(int slot) const {
  Shape shape = allRanks(slot);
  if (!shape.empty())
    shape[0] = 1;
  return shape;
}

/// The elements from `offset` on of an input no task fills, `shape` of
/// them (one sample's, or the whole slot's): more tokens for integer inputs
/// (an encoder's ids), N(0, 1) for float ones, drawn so that the data's
/// position and RNG state alone reproduce them.
void Feeder::drawOther(int slot, int64_t offset, const Shape &shape) {
  int64_t n = numElements(shape);
  if (program.slots[slot].dtype == DType::I64) {
    int64_t *out = ids[slot].data() + offset;
    if (file && lm) {
      file->next(out, n);
    } else if (language && idBounds[slot] >= classes) {
      language->sample(out, shape);
    } else {
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<int64_t>(noise.below(uint64_t(idBounds[slot])));
    }
    return;
  }
  float *out = floats[slot].data() + offset;
  for (int64_t i = 0; i < n; ++i)
    out[i] = normal(noise);
}

uint64_t Feeder::rngState() const {
  if (language)
    return language->rngState();
  if (images)
    return images->rngState();
  return noise.state();
}

DataState Feeder::state() const {
  return {file ? file->position() : 0, rngState()};
}

void Feeder::restore(const DataState &state) {
  if (file)
    file->setPosition(state.position);
  if (language)
    language->setRngState(state.rngState);
  else if (images)
    images->setRngState(state.rngState);
  else
    noise.setState(state.rngState);
}

} // namespace bmrt
