//===- Data.cpp - token files and learnable synthetic tasks ---------------===//

#include "Data.h"

#include "bmrt/Random.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace bmrt {

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//

bool parseTokenType(const std::string &name, TokenType &type) {
  if (name == "uint16" || name == "u16")
    type = TokenType::U16;
  else if (name == "int32" || name == "i32")
    type = TokenType::I32;
  else
    return false;
  return true;
}

const char *nameOf(TokenType type) {
  return type == TokenType::U16 ? "uint16" : "int32";
}

namespace {

int64_t bytesPerToken(TokenType type) { return type == TokenType::U16 ? 2 : 4; }

/// Decodes little-endian ids byte by byte, so the file means the same on
/// any host.
void decodeTokens(const uint8_t *bytes, int64_t count, TokenType type,
                  int64_t *out) {
  if (type == TokenType::U16) {
    for (int64_t i = 0; i < count; ++i)
      out[i] = int64_t(bytes[2 * i]) | int64_t(bytes[2 * i + 1]) << 8;
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t *b = bytes + 4 * i;
    uint32_t u = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 |
                 uint32_t(b[3]) << 24;
    out[i] = int64_t(int32_t(u));
  }
}

} // namespace

void TokenFile::Closer::operator()(int *fd) const {
  ::close(*fd);
  delete fd;
}

TokenFile::TokenFile(const std::string &path, TokenType type)
    : name(path), type(type) {
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BMRT_CHECK(raw >= 0, "cannot open the token file '" + path +
                           "': " + std::strerror(errno));
  fd.reset(new int(raw));
  struct stat st;
  BMRT_CHECK(::fstat(raw, &st) == 0, "cannot read the token file '" + path +
                                         "': " + std::strerror(errno));
  BMRT_CHECK(!S_ISDIR(st.st_mode),
             "the token file '" + path + "' is a folder, not a file");
  int64_t bytes = int64_t(st.st_size);
  BMRT_CHECK(bytes > 0, "the token file '" + path + "' is empty");
  int64_t width = bytesPerToken(type);
  BMRT_CHECK(bytes % width == 0,
             "the token file '" + path + "' has " + std::to_string(bytes) +
                 " bytes, not a multiple of " + std::to_string(width) + " (" +
                 nameOf(type) +
                 " tokens): is it truncated, or of another dtype?");
  tokens = bytes / width;
}

void TokenFile::setPosition(int64_t position) {
  BMRT_CHECK(position >= 0 && position < tokens,
             "data position " + std::to_string(position) +
                 " is outside the token file '" + name + "' (" +
                 std::to_string(tokens) +
                 " tokens): was the checkpoint written with another file?");
  cursor = position;
}

void TokenFile::next(int64_t *out, int64_t count) {
  while (count > 0) {
    int64_t run = std::min(count, tokens - cursor);
    readRun(out, run);
    out += run;
    count -= run;
    cursor = (cursor + run) % tokens;
  }
}

/// Reads `count` tokens from the cursor on, none past the end of the file.
void TokenFile::readRun(int64_t *out, int64_t count) {
  int64_t width = bytesPerToken(type);
  scratch.resize(size_t(count * width));
  size_t done = 0;
  while (done < scratch.size()) {
    ssize_t n = ::pread(*fd, scratch.data() + done, scratch.size() - done,
                        off_t(cursor * width) + off_t(done));
    if (n < 0 && errno == EINTR)
      continue;
    BMRT_CHECK(n > 0, "cannot read the token file '" + name + "' at position " +
                          std::to_string(cursor) + ": " +
                          (n < 0 ? std::strerror(errno) : "it became shorter"));
    done += size_t(n);
  }
  decodeTokens(scratch.data(), count, type, out);
}

namespace {

/// A read-only mapping of a whole file, unmapped when it goes.
class MappedFile {
public:
  MappedFile(int fd, size_t bytes, const std::string &path) : bytes(bytes) {
    void *p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    BMRT_CHECK(p != MAP_FAILED, "cannot map the token file '" + path +
                                    "': " + std::strerror(errno));
    data = static_cast<const uint8_t *>(p);
    ::madvise(p, bytes, MADV_SEQUENTIAL);
  }
  ~MappedFile() { ::munmap(const_cast<uint8_t *>(data), bytes); }
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  const uint8_t *data = nullptr;
  size_t bytes;
};

uint32_t u16At(const uint8_t *b, int64_t i) {
  return uint32_t(b[2 * i]) | uint32_t(b[2 * i + 1]) << 8;
}

int64_t i32At(const uint8_t *b, int64_t i) {
  return int64_t(int32_t(u16At(b, 2 * i) | u16At(b, 2 * i + 1) << 16));
}

} // namespace

void TokenFile::checkVocab(int64_t vocab) {
  MappedFile map(*fd, size_t(tokens * bytesPerToken(type)), name);
  const uint8_t *b = map.data;
  std::string other = type == TokenType::U16 ? "int32" : "uint16";
  std::string widthHint = "; are they " + other + " (--data-type " + other +
                          ", or a Megatron .idx beside the .bin)?";
  if (type == TokenType::U16) {
    // int32 ids below 65536 read as uint16: every odd id is a zero high half.
    bool oddAllZero = tokens % 2 == 0, evenAllZero = true;
    for (int64_t i = 0; i < tokens; ++i) {
      uint32_t id = u16At(b, i);
      BMRT_CHECK(id < uint64_t(vocab),
                 "token id " + std::to_string(id) + " at position " +
                     std::to_string(i) + " of '" + name +
                     "' is outside the vocabulary of " + std::to_string(vocab));
      (i % 2 ? oddAllZero : evenAllZero) &= id == 0;
    }
    BMRT_CHECK(!oddAllZero || evenAllZero,
               "every second id of the token file '" + name +
                   "' read as uint16 is 0, as the high halves of int32 ids "
                   "are" + widthHint);
    return;
  }
  for (int64_t i = 0; i < tokens; ++i) {
    int64_t id = i32At(b, i);
    if (id >= 0 && id < vocab)
      continue;
    // uint16 ids read as int32: pairs of ids, mostly past the vocabulary.
    bool asU16 = true;
    for (int64_t j = 0; j < 2 * tokens && asU16; ++j)
      asU16 = u16At(b, j) < uint64_t(vocab);
    BMRT_FAIL("token id " + std::to_string(id) + " at position " +
              std::to_string(i) + " of '" + name +
              "' is outside the vocabulary of " + std::to_string(vocab) +
              (asU16 ? ", while the file read as uint16 is all inside it" +
                           widthHint
                     : std::string()));
  }
}

namespace {

/// Megatron's MMIDIDX index (megatron/core/datasets/indexed_dataset.py):
/// "MMIDIDX\0\0", a uint64 version (1), a uint8 dtype code, then counts.
constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

/// The dtype code of index `idx`'s header.
TokenType indexTokenType(const std::string &idx) {
  int raw = ::open(idx.c_str(), O_RDONLY | O_CLOEXEC);
  BMRT_CHECK(raw >= 0, "cannot open the Megatron index '" + idx +
                           "': " + std::strerror(errno));
  uint8_t header[18] = {};
  ssize_t n = ::pread(raw, header, sizeof header, 0);
  ::close(raw);
  BMRT_CHECK(n == ssize_t(sizeof header) &&
                 std::memcmp(header, kIndexMagic, sizeof kIndexMagic) == 0,
             "'" + idx + "' is not a Megatron index (no MMIDIDX header)");
  uint64_t version = 0;
  for (int i = 0; i < 8; ++i)
    version |= uint64_t(header[9 + i]) << (8 * i);
  BMRT_CHECK(version == 1, "the Megatron index '" + idx + "' has version " +
                               std::to_string(version) +
                               "; this trainer reads version 1");
  // Codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
  // 7 float32, 8 uint16.
  static const char *const kNames[] = {"?",     "uint8",   "int8",
                                       "int16", "int32",   "int64",
                                       "float64", "float32", "uint16"};
  int code = header[17];
  BMRT_CHECK(code == 4 || code == 8,
             "the Megatron index '" + idx + "' says its tokens are " +
                 (code >= 1 && code <= 8 ? std::string(kNames[code])
                                         : "dtype code " + std::to_string(code)) +
                 "; this trainer reads uint16 and int32");
  return code == 4 ? TokenType::I32 : TokenType::U16;
}

} // namespace

TokenType tokenTypeOf(const std::string &path, const std::string &asked) {
  TokenType type = TokenType::U16;
  BMRT_CHECK(asked.empty() || parseTokenType(asked, type),
             "--data-type must be uint16 or int32, got '" + asked + "'");
  const std::string suffix = ".bin";
  if (path.size() <= suffix.size() ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return type;
  std::string idx = path.substr(0, path.size() - suffix.size()) + ".idx";
  struct stat st;
  if (::stat(idx.c_str(), &st) != 0)
    return type;
  TokenType indexed = indexTokenType(idx);
  BMRT_CHECK(asked.empty() || indexed == type,
             "--data-type " + asked + " disagrees with the Megatron index '" +
                 idx + "', which says " + nameOf(indexed));
  return indexed;
}

//===----------------------------------------------------------------------===//
// Random numbers
//===----------------------------------------------------------------------===//

namespace {

constexpr uint64_t kGolden = kSplitMixGamma;
uint64_t mix(uint64_t z) { return splitMix(z); }

/// Uniform in (0, 1): never 0, so its log is finite.
double openUniform(uint64_t bits) {
  return (double(bits >> 11) + 0.5) * 0x1.0p-53;
}

/// A standard normal determined by `key` (Box-Muller on two hashes).
double hashNormal(uint64_t key) {
  // The second hash mixes the first, not a neighbouring key: neighbouring
  // keys are other elements' noise.
  uint64_t first = mix(key);
  double u1 = openUniform(first), u2 = openUniform(mix(first));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

} // namespace

uint64_t Rng::next() {
  s += kGolden;
  return mix(s);
}

uint64_t Rng::below(uint64_t n) {
  // Lemire's multiply-shift: the bias is below n / 2^64, far below anything
  // a training run could notice.
  return uint64_t((unsigned __int128)next() * n >> 64);
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

//===----------------------------------------------------------------------===//
// Synthetic language
//===----------------------------------------------------------------------===//

namespace {

/// The multiplier of the successor map: coprime with vocab (so the map is a
/// bijection and chains visit many tokens) and near vocab / golden ratio
/// (so consecutive tokens look unrelated).
int64_t coprimeMultiplier(int64_t vocab) {
  if (vocab <= 2)
    return 1;
  int64_t a = std::max<int64_t>(2, int64_t(double(vocab) * 0.6180339887));
  while (std::gcd(a, vocab) != 1)
    ++a;
  return a;
}

} // namespace

SyntheticLanguage::SyntheticLanguage(int64_t vocab, uint64_t seed)
    : vocabSize(vocab), multiplier(coprimeMultiplier(vocab)),
      increment(vocab > 1 ? 7 % vocab : 0), rng(seed) {
  BMRT_CHECK(vocab >= 1, "the synthetic language needs a vocabulary of at "
                         "least 1 token, not " +
                             std::to_string(vocab));
}

int64_t SyntheticLanguage::successor(int64_t token) const {
  // 128-bit product: a * t overflows int64 for vocabularies above 2^31.
  return int64_t(
      ((unsigned __int128)multiplier * uint64_t(token) + uint64_t(increment)) %
      uint64_t(vocabSize));
}

void SyntheticLanguage::sample(int64_t *tokens, const Shape &shape) {
  int64_t length = shape.empty() ? 1 : shape.back();
  int64_t rows = length ? numElements(shape) / length : 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t *row = tokens + r * length;
    row[0] = int64_t(rng.below(uint64_t(vocabSize)));
    for (int64_t i = 1; i < length; ++i)
      row[i] = successor(row[i - 1]);
  }
}

void SyntheticLanguage::fillBatch(int64_t *inputs, int64_t *labels,
                                  const Shape &shape) {
  int64_t length = shape.empty() ? 1 : shape.back();
  int64_t rows = length ? numElements(shape) / length : 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t token = int64_t(rng.below(uint64_t(vocabSize)));
    for (int64_t i = 0; i < length; ++i) {
      inputs[r * length + i] = token;
      token = successor(token);
      labels[r * length + i] = token;
    }
  }
}

//===----------------------------------------------------------------------===//
// Synthetic classification
//===----------------------------------------------------------------------===//

namespace {

/// Keys of the class patterns: fixed, so that every seed samples the same
/// task.
constexpr uint64_t kPatternKey = 0x5eed0fc1a55e5ULL;

/// How strongly offsets and gratings stand out of the noise (kNoise): each
/// is well above it per element, so a few steps separate the classes.
constexpr double kOffsetScale = 0.5, kGratingAmplitude = 1.0;

/// What one class looks like on items of `channels` channels and
/// `spatialRank` spatial dims.
struct ClassPattern {
  double frequency = 0;              // cycles across the item
  std::vector<double> direction;     // unit vector over the spatial dims
  std::vector<double> offset, phase; // per channel
};

ClassPattern classPattern(int64_t label, int64_t channels, size_t spatialRank) {
  uint64_t base = mix(kPatternKey + uint64_t(label) * kGolden);
  auto key = [&](uint64_t what, uint64_t i) {
    return mix(base ^ (what << 56) ^ i);
  };
  ClassPattern p;
  p.frequency = 1.0 + 3.0 * openUniform(key(1, 0));
  double norm = 0;
  for (size_t d = 0; d < spatialRank; ++d) {
    p.direction.push_back(hashNormal(key(2, d)));
    norm += p.direction.back() * p.direction.back();
  }
  for (double &d : p.direction)
    d /= std::sqrt(std::max(norm, 1e-12));
  for (int64_t c = 0; c < channels; ++c) {
    p.offset.push_back(kOffsetScale * hashNormal(key(3, uint64_t(c))));
    p.phase.push_back(6.283185307179586 * openUniform(key(4, uint64_t(c))));
  }
  return p;
}

/// The grating's argument at each spatial position: 2 pi f (direction . u)
/// with u the position scaled to [0, 1) per dim.
std::vector<double> gratingArguments(const ClassPattern &p,
                                     const Shape &spatial) {
  int64_t positions = numElements(spatial);
  std::vector<double> args(static_cast<size_t>(positions));
  for (int64_t s = 0; s < positions; ++s) {
    double dot = 0;
    int64_t rest = s;
    for (size_t d = spatial.size(); d-- > 0;) {
      int64_t coordinate = rest % spatial[d];
      rest /= spatial[d];
      dot += p.direction[d] * double(coordinate) / double(spatial[d]);
    }
    args[size_t(s)] = 6.283185307179586 * p.frequency * dot;
  }
  return args;
}

/// Splits an item shape into channels and spatial dims.
void splitItem(const Shape &item, int64_t &channels, Shape &spatial) {
  channels = item.size() >= 2 ? item[0] : 1;
  spatial = item.size() >= 2 ? Shape(item.begin() + 1, item.end()) : item;
}

} // namespace

SyntheticClassification::SyntheticClassification(int64_t classes, uint64_t seed)
    : numClasses(classes), rng(seed) {
  BMRT_CHECK(classes >= 1, "the synthetic classification task needs at "
                           "least 1 class, not " +
                               std::to_string(classes));
}

float SyntheticClassification::pattern(int64_t label, const Shape &item,
                                       int64_t index) const {
  int64_t channels;
  Shape spatial;
  splitItem(item, channels, spatial);
  ClassPattern p = classPattern(label, channels, spatial.size());
  int64_t positions = numElements(spatial);
  int64_t c = index / positions, s = index % positions;
  double arg = gratingArguments(p, spatial)[size_t(s)];
  return float(p.offset[size_t(c)] +
               kGratingAmplitude * std::sin(arg + p.phase[size_t(c)]));
}

void SyntheticClassification::fill(float *images, int64_t *labels,
                                   const Shape &shape) {
  int64_t n = shape.empty() ? 1 : shape[0];
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    draw(labels[i], keys[size_t(i)]);
  render(images, labels, keys.data(), shape);
}

void SyntheticClassification::draw(int64_t &label, uint64_t &key) {
  label = int64_t(rng.below(uint64_t(numClasses)));
  key = rng.next();
}

// Labels and noise keys come from the sequential generator; the elements
// are hashed from the keys, so items render in parallel and the result does
// not depend on the thread count.
void SyntheticClassification::render(float *images, const int64_t *labels,
                                     const uint64_t *keys,
                                     const Shape &shape) const {
  int64_t n = shape.empty() ? 1 : shape[0];
  Shape item = shape.empty() ? Shape{} : Shape(shape.begin() + 1, shape.end());
  int64_t channels;
  Shape spatial;
  splitItem(item, channels, spatial);
  int64_t positions = numElements(spatial), itemSize = channels * positions;
#pragma omp parallel for schedule(static) if (n * itemSize >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    ClassPattern p = classPattern(labels[i], channels, spatial.size());
    std::vector<double> args = gratingArguments(p, spatial);
    float *out = images + i * itemSize;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t s = 0; s < positions; ++s) {
        int64_t e = c * positions + s;
        double clean =
            p.offset[size_t(c)] +
            kGratingAmplitude * std::sin(args[size_t(s)] + p.phase[size_t(c)]);
        double noise = hashNormal(keys[i] + uint64_t(e) * kGolden);
        out[e] = float(clean + kNoise * noise);
      }
  }
}

} // namespace bmrt
