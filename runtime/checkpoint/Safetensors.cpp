//===- Safetensors.cpp - Hugging Face's safetensors format ----------------===//

#include "Safetensors.h"

#include "FileIO.h"

#include "bmrt/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

// The format is little-endian and tensors are written as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");

namespace bmrt {

using json = nlohmann::json;

const char *safetensorsName(DType type) {
  switch (type) {
  case DType::F32:
    return "F32";
  case DType::I64:
    return "I64";
  case DType::I32:
    return "I32";
  case DType::Bool:
    return "BOOL";
  }
  return "?";
}

bool parseSafetensorsDType(const std::string &name, DType &type) {
  for (DType t : {DType::F32, DType::I64, DType::I32, DType::Bool})
    if (name == safetensorsName(t)) {
      type = t;
      return true;
    }
  return false;
}

const HostTensor *findTensor(const std::vector<HostTensor> &tensors,
                             const std::string &name) {
  for (const HostTensor &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

const HostTensor &requireTensor(const std::vector<HostTensor> &tensors,
                                const std::string &name,
                                const TensorView &view,
                                const std::string &where, const Shape &model) {
  const HostTensor *t = findTensor(tensors, name);
  BMRT_CHECK(t, where + " has no tensor '" + name + "'");
  bool shaped = t->shape == view.shape ||
                (!model.empty() && sameElementOrder(t->shape, view.shape) &&
                 sameElementOrder(t->shape, model));
  BMRT_CHECK(t->dtype == view.dtype && shaped,
             where + ": '" + name + "' is " + nameOf(t->dtype) +
                 formatShape(t->shape) + ", the program needs " +
                 nameOf(view.dtype) + formatShape(view.shape));
  return *t;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// The JSON header, padded with spaces so that the data starts on an
/// 8-byte boundary (as the reference implementation writes it).
std::string buildHeader(const std::vector<TensorRef> &tensors,
                        const SafetensorsMetadata &metadata,
                        const std::string &path) {
  json header = json::object();
  uint64_t offset = 0;
  for (const TensorRef &t : tensors) {
    BMRT_CHECK(t.name != "__metadata__" && !header.contains(t.name),
               "cannot write '" + path + "': the tensor name '" + t.name +
                   "' is " +
                   (t.name == "__metadata__" ? "reserved" : "used twice"));
    uint64_t bytes = t.bytes();
    header[t.name] = {{"dtype", safetensorsName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void writeLittleEndian64(FileWriter &out, uint64_t value) {
  uint8_t bytes[8];
  for (int i = 0; i < 8; ++i)
    bytes[i] = uint8_t(value >> (8 * i));
  out.write(bytes, 8);
}

} // namespace

FileDigest writeSafetensors(const std::string &path,
                            const std::vector<TensorRef> &tensors,
                            const SafetensorsMetadata &metadata) {
  std::string header = buildHeader(tensors, metadata, path);
  FileWriter out(path);
  writeLittleEndian64(out, header.size());
  out.write(header.data(), header.size());
  for (const TensorRef &t : tensors)
    if (t.bytes())
      out.write(t.data, t.bytes());
  out.finish();
  return out.digest();
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

/// The reference implementation's limit: real headers are a few MB.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
/// A header nests at most three deep (object, tensor, shape): deeper JSON
/// is rejected before parsing, so no input drives the parser deep.
constexpr int kMaxDepth = 3;

/// One tensor's entry in the header, checked.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

class Reader {
public:
  explicit Reader(const std::string &path) : path(path), file(path) {}
  SafetensorsFile read();
  /// The file's digest, once read() has read it (in order, start to end).
  FileDigest digest() const {
    std::optional<FileDigest> whole = file.wholeDigest();
    return whole ? *whole : digestOfFile(path);
  }

private:
  [[noreturn]] void invalid(const std::string &problem) const {
    BMRT_FAIL("'" + path + "' is not a valid safetensors file: " + problem);
  }
  std::string readHeader();
  json parseHeader(const std::string &text);
  void checkDepth(const std::string &text);
  Entry parseEntry(const std::string &name, const json &value);
  Shape parseShape(const std::string &name, const json &value);
  SafetensorsMetadata parseMetadata(const json &value);
  void checkCoverage(std::vector<Entry> &entries);

  std::string path;
  FileReader file;
  uint64_t dataStart = 0, dataBytes = 0;
};

std::string Reader::readHeader() {
  uint64_t size = file.size();
  if (size < 8)
    invalid("it has " + std::to_string(size) +
            " bytes, fewer than the 8 of the header length (truncated?)");
  uint8_t bytes[8];
  file.read(0, bytes, 8);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= uint64_t(bytes[i]) << (8 * i);
  if (length > size - 8)
    invalid("the header length " + std::to_string(length) +
            " goes beyond the file's " + std::to_string(size) +
            " bytes (truncated?)");
  if (length > kMaxHeaderBytes)
    invalid("the header length " + std::to_string(length) +
            " is above the format's limit of 100 MiB");
  dataStart = 8 + length;
  dataBytes = size - dataStart;
  std::string text(size_t(length), '\0');
  file.read(8, text.data(), text.size());
  return text;
}

void Reader::checkDepth(const std::string &text) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth)
        invalid("the header nests deeper than a safetensors header does "
                "(at byte " +
                std::to_string(i) + ")");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

json Reader::parseHeader(const std::string &text) {
  checkDepth(text);
  // JSON keeps the last of two equal keys; a tensor named twice would
  // silently hide the first, so note it while parsing.
  std::set<std::string> names;
  std::string duplicate;
  auto noteKeys = [&](int depth, json::parse_event_t event, json &parsed) {
    if (depth == 1 && event == json::parse_event_t::key &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(text, noteKeys);
  } catch (const json::parse_error &e) {
    invalid("the header is not valid JSON (syntax error at byte " +
            std::to_string(e.byte) + ")");
  } catch (const json::out_of_range &) {
    invalid("the header is not valid JSON (a number too large for a double)");
  }
  if (!header.is_object())
    invalid("the header is not a JSON object");
  if (!duplicate.empty())
    invalid("the header names tensor '" + duplicate + "' twice");
  return header;
}

Shape Reader::parseShape(const std::string &name, const json &value) {
  if (!value.is_array())
    invalid("tensor '" + name + "' has no \"shape\" array");
  Shape shape;
  for (const json &d : value) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
      invalid("tensor '" + name + "' has a shape " + value.dump() +
              " whose dims are not all integers >= 0");
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

Entry Reader::parseEntry(const std::string &name, const json &value) {
  if (!value.is_object())
    invalid("the entry of tensor '" + name + "' is not a JSON object");
  Entry e{name, DType::F32, {}, 0, 0};
  json dtype = value.value("dtype", json());
  if (!dtype.is_string())
    invalid("tensor '" + name + "' has no \"dtype\" string");
  if (!parseSafetensorsDType(dtype.get<std::string>(), e.dtype))
    invalid("tensor '" + name + "' has dtype '" + dtype.get<std::string>() +
            "', which bmrt does not read (it reads F32, I64, I32 and BOOL)");
  e.shape = parseShape(name, value.value("shape", json()));
  json offsets = value.value("data_offsets", json());
  if (!offsets.is_array() || offsets.size() != 2 ||
      !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    invalid("tensor '" + name +
            "' has no \"data_offsets\" pair of integers >= 0");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  std::string range =
      "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end || e.end > dataBytes)
    invalid("tensor '" + name + "' has data_offsets " + range +
            " outside the " + std::to_string(dataBytes) + " bytes of data");
  // The shape's byte count, stopping before it overflows: anything above
  // the data's size is a mismatch anyway.
  uint64_t bytes = sizeOf(e.dtype);
  bool tooBig = false;
  for (int64_t d : e.shape)
    tooBig = tooBig || __builtin_mul_overflow(bytes, uint64_t(d), &bytes);
  if (tooBig || bytes != e.end - e.begin)
    invalid(
        "tensor '" + name + "' is " + safetensorsName(e.dtype) +
        formatShape(e.shape) +
        (tooBig ? " (too large)" : " (" + std::to_string(bytes) + " bytes)") +
        " but its data_offsets " + range + " span " +
        std::to_string(e.end - e.begin) + " bytes");
  return e;
}

SafetensorsMetadata Reader::parseMetadata(const json &value) {
  if (!value.is_object())
    invalid("\"__metadata__\" is not a JSON object");
  SafetensorsMetadata metadata;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it.value().is_string())
      invalid("\"__metadata__\" maps '" + it.key() +
              "' to something other than a string");
    metadata[it.key()] = it.value().get<std::string>();
  }
  return metadata;
}

/// Sorts the entries by offset and checks that they cover the data exactly
/// once: no two tensors share bytes and no byte belongs to none (the
/// format forbids holes, so a file cannot hide other content).
void Reader::checkCoverage(std::vector<Entry> &entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry &a, const Entry &b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  const Entry *last = nullptr;
  for (const Entry &e : entries) {
    if (e.begin == e.end)
      continue;
    if (e.begin < covered)
      invalid("tensors '" + last->name + "' and '" + e.name +
              "' overlap (bytes [" + std::to_string(last->begin) + ", " +
              std::to_string(last->end) + ") and [" + std::to_string(e.begin) +
              ", " + std::to_string(e.end) + "))");
    if (e.begin > covered)
      invalid("bytes [" + std::to_string(covered) + ", " +
              std::to_string(e.begin) + ") of the data belong to no tensor");
    covered = e.end;
    last = &e;
  }
  if (covered < dataBytes)
    invalid("bytes [" + std::to_string(covered) + ", " +
            std::to_string(dataBytes) + ") of the data belong to no tensor");
}

SafetensorsFile Reader::read() {
  json header = parseHeader(readHeader());
  SafetensorsFile result;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__")
      result.metadata = parseMetadata(it.value());
    else
      entries.push_back(parseEntry(it.key(), it.value()));
  }
  checkCoverage(entries);
  // Only now, with every range inside the file and none overlapping, is
  // the memory allocated: at most the file's size in all.
  for (Entry &e : entries) {
    HostTensor t{e.name, e.dtype, std::move(e.shape), {}};
    t.data.resize(size_t(e.end - e.begin));
    file.read(dataStart + e.begin, t.data.data(), t.data.size());
    result.tensors.push_back(std::move(t));
  }
  return result;
}

} // namespace

SafetensorsFile readSafetensors(const std::string &path,
                                FileDigest *digest) {
  Reader reader(path);
  SafetensorsFile file = reader.read();
  if (digest)
    *digest = reader.digest();
  return file;
}

} // namespace bmrt
