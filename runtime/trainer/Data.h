//===- Data.h - token files and learnable synthetic tasks -------*- C++ -*-===//
//
// What the trainer feeds the step program:
//  - TokenFile: a flat file of token ids (nanoGPT's train.bin, Megatron's
//    .bin without its index), read in order and wrapped at the end;
//  - SyntheticLanguage and SyntheticClassification: tasks a model can learn
//    in a few hundred steps, so that a falling loss shows the whole
//    training step (forward, backward, optimizer) is right.
// Every source's position is one integer the checkpoint saves, so a resumed
// run reads exactly the data the uninterrupted run would have.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_DATA_H
#define BMRT_TRAINER_DATA_H

#include "bmrt/Tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bmrt {

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//

/// The element type of a token file (the file has no header): uint16
/// (nanoGPT, vocabularies below 65536) or int32.
enum class TokenType : uint8_t { U16, I32 };
/// "uint16" / "int32" (also "u16" / "i32"); false for anything else.
bool parseTokenType(const std::string &name, TokenType &type);
const char *nameOf(TokenType type);

/// The element type of token file `path`: the one Megatron's index names
/// where `path` is X.bin and X.idx exists (an `asked` type that differs is
/// an error), else `asked` ("uint16", "int32"), else uint16.
TokenType tokenTypeOf(const std::string &path, const std::string &asked);

/// Little-endian token ids read in order; next() wraps to the start at the
/// end of the file. Errors (unreadable, empty or truncated file, a token
/// outside the vocabulary, ids that look like the other width) are
/// bmrt::Error with one line.
class TokenFile {
public:
  /// Opens `path` and checks its size against the element size.
  TokenFile(const std::string &path, TokenType type);

  /// Reads the whole file once (memory mapped) and throws on the first id
  /// outside [0, vocab), or where the ids look like the other width: read
  /// as uint16, every second id (the high halves of int32 ids below 65536)
  /// is 0 and the others are not; read as int32, some ids are outside the
  /// vocabulary while the same bytes as uint16 are all inside it.
  void checkVocab(int64_t vocab);
  /// Writes the next `count` tokens to `out` (wrapping as often as needed).
  void next(int64_t *out, int64_t count);

  /// The index of the token next() reads first: the checkpoint's data
  /// position.
  int64_t position() const { return cursor; }
  /// Throws unless 0 <= position < size() (a checkpoint of another file).
  void setPosition(int64_t position);

  /// Tokens in the file.
  int64_t size() const { return tokens; }
  const std::string &path() const { return name; }

private:
  void readRun(int64_t *out, int64_t count);

  /// Closes the file descriptor.
  struct Closer {
    void operator()(int *fd) const;
  };
  std::string name;
  TokenType type;
  /// Read with pread at explicit offsets: no stdio buffer that could hold
  /// stale bytes, and no shared file offset.
  std::unique_ptr<int, Closer> fd;
  int64_t tokens = 0;
  int64_t cursor = 0;
  std::vector<uint8_t> scratch;
};

//===----------------------------------------------------------------------===//
// Synthetic tasks
//===----------------------------------------------------------------------===//

/// splitmix64 (Steele, Lea and Flood 2014): one uint64 of state, so the
/// checkpoint stores it whole, and the same stream on every platform (the
/// standard library's distributions are not portable).
class Rng {
public:
  explicit Rng(uint64_t seed = 0) : s(seed) {}
  uint64_t next();
  /// Uniform in [0, n), n >= 1.
  uint64_t below(uint64_t n);
  /// Uniform in [0, 1), 53 bits.
  double uniform();

  uint64_t state() const { return s; }
  void setState(uint64_t state) { s = state; }

private:
  uint64_t s;
};

/// Sequences in which every token determines the next one:
/// t_{i+1} = (a t_i + c) mod vocab, a bijection (a is coprime with vocab),
/// from a start token drawn at random. The next-token loss falls from
/// ln(vocab) towards 0 once a model has learnt the map.
class SyntheticLanguage {
public:
  /// vocab >= 1; the map depends only on vocab, the starts on `seed`.
  SyntheticLanguage(int64_t vocab, uint64_t seed);

  int64_t successor(int64_t token) const;
  /// `shape` [..., length]: every row of `length` tokens is one chain.
  void sample(int64_t *tokens, const Shape &shape);
  /// inputs and labels, both of `shape` [..., length]: a chain of length + 1
  /// tokens per row, labels shifted by one (labels[i] = inputs[i + 1]).
  void fillBatch(int64_t *inputs, int64_t *labels, const Shape &shape);

  int64_t vocab() const { return vocabSize; }
  uint64_t rngState() const { return rng.state(); }
  void setRngState(uint64_t state) { rng.setState(state); }

private:
  int64_t vocabSize, multiplier, increment;
  Rng rng;
};

/// Images (or any float items) whose label fixes a pattern: per class, an
/// offset per channel plus a sinusoidal grating of a class-specific
/// frequency, direction and phase across the spatial dims, under Gaussian
/// noise. Channel offsets survive global average pooling and gratings are
/// what convolutions detect, so a small conv net learns it; a ViT's patch
/// embedding and an MLP see a fixed pattern per class. Items are
/// [channels, spatial...] (rank 0 or 1 items have one channel).
class SyntheticClassification {
public:
  /// classes >= 1; the patterns depend only on `classes`, the draws on
  /// `seed`.
  SyntheticClassification(int64_t classes, uint64_t seed);

  /// `shape` is [N, item...]: writes N items to `images` and their labels
  /// (in [0, classes)) to `labels`. The same as N draws then render.
  void fill(float *images, int64_t *labels, const Shape &shape);
  /// The next item's label and the key its noise is hashed from: all an
  /// item takes from the generator, so items can be drawn one by one (a
  /// sample with its other inputs) and rendered together.
  void draw(int64_t &label, uint64_t &key);
  /// Writes the items of `labels` and `keys` (shape [N, item...]).
  void render(float *images, const int64_t *labels, const uint64_t *keys,
              const Shape &shape) const;
  /// The noiseless value of element `index` of an item of shape `item` of
  /// class `label` (what fill() adds noise to).
  float pattern(int64_t label, const Shape &item, int64_t index) const;

  /// The noise's standard deviation.
  static constexpr float kNoise = 0.5f;

  int64_t classes() const { return numClasses; }
  uint64_t rngState() const { return rng.state(); }
  void setRngState(uint64_t state) { rng.setState(state); }

private:
  int64_t numClasses;
  Rng rng;
};

} // namespace bmrt

#endif // BMRT_TRAINER_DATA_H
