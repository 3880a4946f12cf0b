//===- DataTest.cpp - token files, the RNG, the synthetic tasks -----------===//

#include "Data.h"

#include "runtime/checkpoint/test/TestFiles.h"

#include "runtime/cpu/Kernels.h"

#include <omp.h>

#include <cmath>
#include <limits>
#include <set>

namespace bmrt::test {
namespace {

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//

/// A token file of `ids` in little-endian uint16 or int32.
std::string tokenBytes(const std::vector<int64_t> &ids, TokenType type) {
  std::string bytes;
  int width = type == TokenType::U16 ? 2 : 4;
  for (int64_t id : ids)
    for (int b = 0; b < width; ++b)
      bytes.push_back(char(uint64_t(id) >> (8 * b)));
  return bytes;
}

std::vector<int64_t> take(TokenFile &file, int64_t count) {
  std::vector<int64_t> out(size_t(count), -1);
  file.next(out.data(), count);
  return out;
}

TEST(TokenFile, ParsesTypes) {
  TokenType t;
  EXPECT_TRUE(parseTokenType("uint16", t));
  EXPECT_EQ(t, TokenType::U16);
  EXPECT_TRUE(parseTokenType("int32", t));
  EXPECT_EQ(t, TokenType::I32);
  EXPECT_FALSE(parseTokenType("float32", t));
  EXPECT_STREQ(nameOf(TokenType::U16), "uint16");
}

TEST(TokenFile, ReadsInOrderAndWraps) {
  ScratchDir dir;
  std::string path = dir.path("x.bin");
  writeBytes(path, tokenBytes({10, 11, 12, 13, 14}, TokenType::U16));
  TokenFile file(path, TokenType::U16);
  EXPECT_EQ(file.size(), 5);
  EXPECT_EQ(take(file, 3), (std::vector<int64_t>{10, 11, 12}));
  EXPECT_EQ(take(file, 4), (std::vector<int64_t>{13, 14, 10, 11}));
  EXPECT_EQ(file.position(), 2);
  // More than the whole file at once wraps as often as needed.
  EXPECT_EQ(take(file, 12), (std::vector<int64_t>{12, 13, 14, 10, 11, 12, 13,
                                                  14, 10, 11, 12, 13}));
  EXPECT_EQ(file.position(), 4);
}

TEST(TokenFile, DecodesLittleEndian) {
  ScratchDir dir;
  writeBytes(dir.path("u16.bin"), std::string("\x34\x12\xff\xff", 4));
  TokenFile u16(dir.path("u16.bin"), TokenType::U16);
  EXPECT_EQ(take(u16, 2), (std::vector<int64_t>{0x1234, 65535}));
  writeBytes(dir.path("i32.bin"), tokenBytes({0x01020304, -3}, TokenType::I32));
  TokenFile i32(dir.path("i32.bin"), TokenType::I32);
  EXPECT_EQ(take(i32, 2), (std::vector<int64_t>{0x01020304, -3}));
}

TEST(TokenFile, PositionSavesAndRestores) {
  ScratchDir dir;
  std::string path = dir.path("x.bin");
  std::vector<int64_t> ids;
  for (int i = 0; i < 100; ++i)
    ids.push_back(i * 7 % 50);
  writeBytes(path, tokenBytes(ids, TokenType::I32));
  TokenFile a(path, TokenType::I32);
  take(a, 37);
  int64_t saved = a.position();
  std::vector<int64_t> expected = take(a, 80);

  TokenFile b(path, TokenType::I32);
  b.setPosition(saved);
  EXPECT_EQ(take(b, 80), expected);
  EXPECT_ERROR(b.setPosition(100),
               "data position 100 is outside the token file '" + path +
                   "' (100 tokens)");
  EXPECT_ERROR(b.setPosition(-1), "data position -1 is outside");
}

TEST(TokenFile, OutOfVocabularyNamesTheTokenAndPosition) {
  ScratchDir dir;
  std::string path = dir.path("x.bin");
  std::vector<int64_t> ids(1235, 5);
  ids[1234] = 600;
  writeBytes(path, tokenBytes(ids, TokenType::U16));
  TokenFile file(path, TokenType::U16);
  // The whole file, once, before the first step: not at the batch that
  // reaches it.
  EXPECT_ERROR(file.checkVocab(512), "token id 600 at position 1234 of '" +
                                         path +
                                         "' is outside the vocabulary of 512");
}

TEST(TokenFile, IdsOfTheOtherWidthAreFlagged) {
  ScratchDir dir;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 1000; ++i)
    ids.push_back(i * 7 % 512);
  std::string wide = dir.path("wide.bin"), narrow = dir.path("narrow.bin");
  writeBytes(wide, tokenBytes(ids, TokenType::I32));
  writeBytes(narrow, tokenBytes(ids, TokenType::U16));
  TokenFile asNarrow(wide, TokenType::U16);
  EXPECT_ERROR(asNarrow.checkVocab(512),
               "every second id of the token file '" + wide +
                   "' read as uint16 is 0, as the high halves of int32 ids "
                   "are; are they int32");
  TokenFile asWide(narrow, TokenType::I32);
  EXPECT_ERROR(asWide.checkVocab(512),
               "while the file read as uint16 is all inside it; are they "
               "uint16");
  TokenFile right(narrow, TokenType::U16);
  right.checkVocab(512);
  EXPECT_EQ(take(right, 1000), ids);
}

TEST(TokenFile, MegatronIndexGivesTheType) {
  ScratchDir dir;
  std::string bin = dir.path("d.bin"), idx = dir.path("d.idx");
  writeBytes(bin, tokenBytes({1, 2, 3, 4}, TokenType::U16));
  EXPECT_EQ(tokenTypeOf(bin, ""), TokenType::U16);
  EXPECT_EQ(tokenTypeOf(bin, "int32"), TokenType::I32);
  auto index = [&](char code) {
    std::string h("MMIDIDX\0\0", 9);
    h += std::string("\x01\0\0\0\0\0\0\0", 8);
    h += code;
    h += std::string(16, '\0');
    writeBytes(idx, h);
  };
  index(4);
  EXPECT_EQ(tokenTypeOf(bin, ""), TokenType::I32);
  EXPECT_EQ(tokenTypeOf(bin, "int32"), TokenType::I32);
  EXPECT_ERROR(tokenTypeOf(bin, "uint16"),
               "--data-type uint16 disagrees with the Megatron index '" + idx +
                   "', which says int32");
  index(8);
  EXPECT_EQ(tokenTypeOf(bin, ""), TokenType::U16);
  index(7);
  EXPECT_ERROR(tokenTypeOf(bin, ""), "says its tokens are float32");
  writeBytes(idx, "not an index at all");
  EXPECT_ERROR(tokenTypeOf(bin, ""), "is not a Megatron index");
}

TEST(TokenFile, NegativeIdsAreOutOfVocabulary) {
  ScratchDir dir;
  std::string path = dir.path("x.bin");
  writeBytes(path, tokenBytes({1, -3, 2}, TokenType::I32));
  TokenFile file(path, TokenType::I32);
  EXPECT_ERROR(file.checkVocab(10), "token id -3 at position 1 of '" + path +
                                        "' is outside the vocabulary of 10");
}

TEST(TokenFile, BadFiles) {
  ScratchDir dir;
  EXPECT_ERROR(TokenFile(dir.path("none.bin"), TokenType::U16),
               "cannot open the token file '" + dir.path("none.bin") +
                   "': No such file or directory");
  writeBytes(dir.path("empty.bin"), "");
  EXPECT_ERROR(TokenFile(dir.path("empty.bin"), TokenType::U16),
               "the token file '" + dir.path("empty.bin") + "' is empty");
  writeBytes(dir.path("odd.bin"), std::string(7, '\1'));
  EXPECT_ERROR(TokenFile(dir.path("odd.bin"), TokenType::U16),
               "has 7 bytes, not a multiple of 2 (uint16 tokens): is it "
               "truncated, or of another dtype?");
  writeBytes(dir.path("six.bin"), std::string(6, '\1'));
  EXPECT_ERROR(TokenFile(dir.path("six.bin"), TokenType::I32),
               "not a multiple of 4 (int32 tokens)");
  EXPECT_ERROR(TokenFile(dir.path(""), TokenType::U16), "is a folder");
}

TEST(TokenFile, FileThatShrinksWhileOpen) {
  ScratchDir dir;
  std::string path = dir.path("x.bin");
  writeBytes(path, tokenBytes({1, 2, 3, 4}, TokenType::U16));
  TokenFile file(path, TokenType::U16);
  writeBytes(path, tokenBytes({1}, TokenType::U16));
  EXPECT_ERROR(take(file, 4), "cannot read the token file '" + path +
                                  "' at position 0: it became shorter");
}

//===----------------------------------------------------------------------===//
// Random numbers
//===----------------------------------------------------------------------===//

TEST(Rng, DeterministicAndRestorable) {
  Rng a(42), b(42), c(43);
  EXPECT_EQ(a.next(), b.next());
  EXPECT_NE(a.next(), c.next());
  uint64_t saved = a.state();
  std::vector<uint64_t> expected = {a.next(), a.next(), a.below(10)};
  Rng d;
  d.setState(saved);
  EXPECT_EQ((std::vector<uint64_t>{d.next(), d.next(), d.below(10)}), expected);
}

TEST(Rng, KnownSplitmix64Values) {
  // splitmix64 from seed 0 (the reference implementation's first outputs):
  // a change here would change every synthetic data set.
  Rng r(0);
  EXPECT_EQ(r.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(r.next(), 0x6e789e6aa1b965f4ULL);
}

TEST(Rng, RangesAndRoughUniformity) {
  Rng r(7);
  std::vector<int> counts(10);
  for (int i = 0; i < 100000; ++i) {
    uint64_t k = r.below(10);
    ASSERT_LT(k, 10u);
    ++counts[k];
    double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  for (int c : counts)
    EXPECT_NEAR(c, 10000, 500);
}

//===----------------------------------------------------------------------===//
// Synthetic language
//===----------------------------------------------------------------------===//

TEST(SyntheticLanguage, SuccessorIsABijection) {
  for (int64_t vocab : {1, 2, 3, 10, 512, 1000, 50257}) {
    SyntheticLanguage task(vocab, 1);
    std::set<int64_t> images;
    for (int64_t t = 0; t < vocab; ++t) {
      int64_t next = task.successor(t);
      ASSERT_GE(next, 0);
      ASSERT_LT(next, vocab);
      images.insert(next);
    }
    EXPECT_EQ(int64_t(images.size()), vocab) << vocab;
  }
  // Big vocabularies do not overflow.
  SyntheticLanguage huge(int64_t(1) << 40, 1);
  EXPECT_LT(huge.successor((int64_t(1) << 40) - 1), int64_t(1) << 40);
}

TEST(SyntheticLanguage, BatchesFollowTheMap) {
  SyntheticLanguage task(512, 3);
  const int64_t rows = 4, length = 16;
  std::vector<int64_t> inputs(rows * length), labels(rows * length);
  task.fillBatch(inputs.data(), labels.data(), {rows, length});
  std::set<int64_t> starts;
  for (int64_t r = 0; r < rows; ++r) {
    starts.insert(inputs[r * length]);
    for (int64_t i = 0; i < length; ++i) {
      int64_t k = r * length + i;
      ASSERT_EQ(labels[k], task.successor(inputs[k]));
      if (i + 1 < length) {
        ASSERT_EQ(inputs[k + 1], labels[k]);
      }
    }
  }
  EXPECT_GT(starts.size(), 1u);

  std::vector<int64_t> chain(3 * 5);
  task.sample(chain.data(), {3, 5});
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 1; i < 5; ++i)
      ASSERT_EQ(chain[r * 5 + i], task.successor(chain[r * 5 + i - 1]));
}

TEST(SyntheticLanguage, DeterministicAndRestorable) {
  auto batch = [](SyntheticLanguage &task) {
    std::vector<int64_t> in(2 * 8), out(2 * 8);
    task.fillBatch(in.data(), out.data(), {2, 8});
    return in;
  };
  SyntheticLanguage a(1000, 5), b(1000, 5), c(1000, 6);
  EXPECT_EQ(batch(a), batch(b));
  EXPECT_NE(batch(a), batch(c));
  uint64_t saved = a.rngState();
  std::vector<int64_t> expected = batch(a);
  SyntheticLanguage d(1000, 99);
  d.setRngState(saved);
  EXPECT_EQ(batch(d), expected);
}

TEST(SyntheticLanguage, BadVocabulary) {
  EXPECT_ERROR(SyntheticLanguage(0, 1),
               "needs a vocabulary of at least 1 token, not 0");
}

//===----------------------------------------------------------------------===//
// Synthetic classification
//===----------------------------------------------------------------------===//

struct Batch {
  std::vector<float> images;
  std::vector<int64_t> labels;
};

Batch draw(SyntheticClassification &task, const Shape &shape) {
  Batch b;
  b.images.resize(size_t(numElements(shape)));
  b.labels.resize(size_t(shape[0]));
  task.fill(b.images.data(), b.labels.data(), shape);
  return b;
}

TEST(SyntheticClassification, LabelsAndDeterminism) {
  SyntheticClassification a(10, 1), b(10, 1), c(10, 2);
  Batch x = draw(a, {64, 3, 8, 8}), y = draw(b, {64, 3, 8, 8}),
        z = draw(c, {64, 3, 8, 8});
  EXPECT_EQ(x.images, y.images);
  EXPECT_EQ(x.labels, y.labels);
  EXPECT_NE(x.images, z.images);
  std::set<int64_t> seen(x.labels.begin(), x.labels.end());
  EXPECT_GT(seen.size(), 5u);
  for (int64_t l : x.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
  }
}

TEST(SyntheticClassification, RestorableAndThreadIndependent) {
  SyntheticClassification a(5, 11);
  draw(a, {7, 2, 4, 4});
  uint64_t saved = a.rngState();
  int threads = omp_get_max_threads();
  cpu::setThreads(1);
  // Large enough for the parallel loop.
  Batch expected = draw(a, {64, 4, 16, 16});
  cpu::setThreads(3);
  SyntheticClassification b(5, 0);
  b.setRngState(saved);
  Batch again = draw(b, {64, 4, 16, 16});
  cpu::setThreads(threads);
  EXPECT_EQ(again.images, expected.images);
  EXPECT_EQ(again.labels, expected.labels);
}

TEST(SyntheticClassification, ItemsDrawnOneByOneAreTheBatch) {
  // The feeder draws a sample's item beside its other inputs, then renders
  // the micro-batch: the same items (bit for bit) as one fill.
  SyntheticClassification a(10, 4), b(10, 4);
  Shape shape{6, 3, 4, 4};
  Batch whole = draw(a, shape);
  std::vector<int64_t> labels(6);
  std::vector<uint64_t> keys(6);
  for (size_t i = 0; i < 6; ++i)
    b.draw(labels[i], keys[i]);
  std::vector<float> images(size_t(numElements(shape)));
  b.render(images.data(), labels.data(), keys.data(), shape);
  EXPECT_EQ(labels, whole.labels);
  EXPECT_EQ(images, whole.images);
  EXPECT_EQ(b.rngState(), a.rngState());
}

TEST(SyntheticClassification, NoiseAroundTheClassPattern) {
  SyntheticClassification task(4, 3);
  Shape item = {3, 8, 8};
  Batch b = draw(task, {256, 3, 8, 8});
  double sum = 0, squares = 0;
  int64_t n = 0;
  for (size_t i = 0; i < b.labels.size(); ++i)
    for (int64_t e = 0; e < 192; ++e) {
      double d = b.images[i * 192 + e] - task.pattern(b.labels[i], item, e);
      sum += d;
      squares += d * d;
      ++n;
    }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(squares / n), SyntheticClassification::kNoise, 0.01);
}

/// The share of items whose nearest class pattern (the Bayes-optimal
/// classifier under Gaussian noise) is their own: how learnable the task is.
double nearestPatternAccuracy(SyntheticClassification &task,
                              const Shape &shape) {
  Batch b = draw(task, shape);
  Shape item(shape.begin() + 1, shape.end());
  int64_t size = numElements(item);
  int right = 0;
  for (int64_t i = 0; i < shape[0]; ++i) {
    int64_t best = -1;
    double bestDistance = std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < task.classes(); ++k) {
      double d = 0;
      for (int64_t e = 0; e < size; ++e) {
        double diff = b.images[i * size + e] - task.pattern(k, item, e);
        d += diff * diff;
      }
      if (d < bestDistance) {
        bestDistance = d;
        best = k;
      }
    }
    right += best == b.labels[i];
  }
  return double(right) / double(shape[0]);
}

TEST(SyntheticClassification, ClassesAreSeparable) {
  SyntheticClassification images(10, 1);
  EXPECT_GE(nearestPatternAccuracy(images, {100, 3, 8, 8}), 0.99);
  // Any item shape: feature vectors and scalars.
  SyntheticClassification vectors(10, 1);
  EXPECT_GE(nearestPatternAccuracy(vectors, {100, 32}), 0.95);
}

TEST(SyntheticClassification, ChannelMeansDifferBetweenClasses) {
  // What survives a conv net's global average pooling: each class's
  // per-channel mean differs from every other class's somewhere.
  SyntheticClassification task(10, 1);
  Shape item = {3, 16, 16};
  std::vector<std::vector<double>> means(10, std::vector<double>(3));
  for (int64_t k = 0; k < 10; ++k)
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t s = 0; s < 256; ++s)
        means[k][c] += task.pattern(k, item, c * 256 + s) / 256.0;
    }
  for (int64_t k = 0; k < 10; ++k)
    for (int64_t j = 0; j < k; ++j) {
      double distance = 0;
      for (int64_t c = 0; c < 3; ++c)
        distance = std::max(distance, std::fabs(means[k][c] - means[j][c]));
      EXPECT_GT(distance, 0.05) << "classes " << j << " and " << k;
    }
}

TEST(SyntheticClassification, BadClasses) {
  EXPECT_ERROR(SyntheticClassification(0, 1), "at least 1 class, not 0");
}

} // namespace
} // namespace bmrt::test
