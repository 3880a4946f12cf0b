//===- SafetensorsTest.cpp - round trips and every malformed input --------===//

#include "Safetensors.h"

#include "TestFiles.h"

#include <cstring>
#include <vector>

namespace bmrt::test {
namespace {

/// A safetensors file byte for byte: the header's length (or `length`),
/// the header, the data.
std::string rawFile(const std::string &header, const std::string &data = "",
                    uint64_t length = UINT64_MAX) {
  if (length == UINT64_MAX)
    length = header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[i] = char(length >> (8 * i));
  return bytes + header + data;
}

/// The error reading a file of these bytes.
std::string readError(const ScratchDir &dir, const std::string &bytes) {
  std::string path = dir.path("bad.safetensors");
  writeBytes(path, bytes);
  return errorOf([&] { readSafetensors(path); });
}

#define EXPECT_INVALID(bytes, text)                                            \
  do {                                                                         \
    std::string message_ = readError(dir, bytes);                              \
    EXPECT_NE(message_.find("is not a valid safetensors file: "),              \
              std::string::npos)                                               \
        << message_;                                                           \
    EXPECT_NE(message_.find(text), std::string::npos) << message_;             \
    EXPECT_EQ(message_.find('\n'), std::string::npos) << message_;             \
  } while (false)

TEST(Safetensors, RoundTripEveryDType) {
  ScratchDir dir;
  std::vector<float> f = {1.5f, -2, 3, 4, 5, 6.25f};
  std::vector<int64_t> i64 = {1, -2, int64_t(1) << 40};
  int32_t i32 = -7;
  std::vector<uint8_t> mask = {1, 0, 1};
  std::vector<TensorRef> tensors = {
      {"layer.weight", DType::F32, {2, 3}, f.data()},
      {"ids", DType::I64, {3}, i64.data()},
      {"scalar", DType::I32, {}, &i32},
      {"mask", DType::Bool, {3}, mask.data()},
      {"empty", DType::F32, {0, 4}, nullptr},
  };
  std::string path = dir.path("t.safetensors");
  writeSafetensors(path, tensors, {{"format", "pt"}, {"step", "3"}});

  SafetensorsFile file = readSafetensors(path);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("step"), "3");
  for (const TensorRef &t : tensors) {
    const HostTensor *r = findTensor(file.tensors, t.name);
    ASSERT_TRUE(r) << t.name;
    EXPECT_EQ(r->dtype, t.dtype) << t.name;
    EXPECT_EQ(r->shape, t.shape) << t.name;
    ASSERT_EQ(r->data.size(), t.bytes()) << t.name;
    if (t.bytes()) {
      EXPECT_EQ(std::memcmp(r->data.data(), t.data, t.bytes()), 0) << t.name;
    }
  }
  EXPECT_EQ(findTensor(file.tensors, "missing"), nullptr);
}

TEST(Safetensors, LayoutFollowsTheFormat) {
  ScratchDir dir;
  float value = 2.0f;
  std::string path = dir.path("t.safetensors");
  writeSafetensors(path, {{"x", DType::F32, {1}, &value}});
  std::string bytes = readBytes(path);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  // The data starts 8-aligned; the header is JSON padded with spaces.
  EXPECT_EQ(length % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + length + 4);
  std::string header = bytes.substr(8, length);
  EXPECT_EQ(header.rfind("{\"x\":{", 0), 0u) << header;
  EXPECT_NE(header.find("\"dtype\":\"F32\""), std::string::npos) << header;
  EXPECT_NE(header.find("\"data_offsets\":[0,4]"), std::string::npos) << header;
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  float back;
  std::memcpy(&back, bytes.data() + 8 + length, 4);
  EXPECT_EQ(back, 2.0f);
}

TEST(Safetensors, ReadsAForeignFileWithoutMetadata) {
  ScratchDir dir;
  std::string path = dir.path("t.safetensors");
  // As another writer might lay it out: unpadded header, tensors out of
  // name order.
  std::string data(12, '\0');
  data[0] = 1; // b: I32 [1]
  data[4] = 7; // a: I64 7, little-endian
  writeBytes(path,
             rawFile(R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                     R"("a":{"dtype":"I64","shape":[],"data_offsets":[4,12]}})",
                     data));
  SafetensorsFile file = readSafetensors(path);
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[0].name, "b"); // in data order
  EXPECT_EQ(file.tensors[1].i64()[0], 7);
  EXPECT_TRUE(file.metadata.empty());
}

TEST(Safetensors, WriteErrors) {
  ScratchDir dir;
  float v = 0;
  EXPECT_ERROR(writeSafetensors(dir.path("no/such/folder/t.safetensors"),
                                {{"x", DType::F32, {1}, &v}}),
               "cannot create '");
  EXPECT_ERROR(
      writeSafetensors(dir.path("t.safetensors"), {{"x", DType::F32, {1}, &v},
                                                   {"x", DType::F32, {1}, &v}}),
      "the tensor name 'x' is used twice");
  EXPECT_ERROR(writeSafetensors(dir.path("t.safetensors"),
                                {{"__metadata__", DType::F32, {1}, &v}}),
               "is reserved");
}

TEST(Safetensors, DiskFullIsOneLine) {
  // /dev/full accepts the open and fails every write with ENOSPC.
  if (!std::filesystem::exists("/dev/full"))
    GTEST_SKIP() << "no /dev/full on this system";
  std::vector<float> big(1 << 16);
  EXPECT_ERROR(
      writeSafetensors("/dev/full", {{"x", DType::F32, {1 << 16}, big.data()}}),
      "cannot write '/dev/full': No space left on device");
}

TEST(Safetensors, MissingFile) {
  ScratchDir dir;
  EXPECT_ERROR(readSafetensors(dir.path("none.safetensors")),
               "cannot open '" + dir.path("none.safetensors") +
                   "': No such file or directory");
  EXPECT_ERROR(readSafetensors(dir.path("")), "is a folder, not a file");
}

TEST(Safetensors, TruncatedHeaderLength) {
  ScratchDir dir;
  EXPECT_INVALID(std::string("\x10\0\0", 3),
                 "it has 3 bytes, fewer than the 8 of the header length");
  EXPECT_INVALID(std::string(), "it has 0 bytes");
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  ScratchDir dir;
  EXPECT_INVALID(rawFile("{}", "", 4096),
                 "the header length 4096 goes beyond the file's 10 bytes");
  // A length near 2^64 must not wrap around or be allocated.
  EXPECT_INVALID(rawFile("{}", "", UINT64_MAX - 1),
                 "goes beyond the file's 10 bytes");
}

TEST(Safetensors, BadJson) {
  ScratchDir dir;
  EXPECT_INVALID(rawFile(R"({"x": {"dtype": "F32",)"),
                 "the header is not valid JSON (syntax error at byte");
  EXPECT_INVALID(rawFile(""), "the header is not valid JSON");
  EXPECT_INVALID(rawFile("[1, 2]"), "the header is not a JSON object");
  EXPECT_INVALID(rawFile(R"({"x": 3})"),
                 "the entry of tensor 'x' is not a JSON object");
  EXPECT_INVALID(rawFile(std::string(10000, '[') + std::string(10000, ']')),
                 "nests deeper than a safetensors header does");
  // Brackets inside strings do not count as nesting.
  EXPECT_INVALID(rawFile(R"({"__metadata__": {"k": "[[[[{{{{\"]"}, "x": 1})"),
                 "the entry of tensor 'x' is not a JSON object");
}

TEST(Safetensors, DuplicateTensorName) {
  ScratchDir dir;
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              std::string(8, '\0')),
      "the header names tensor 'x' twice");
}

TEST(Safetensors, MissingOrMistypedFields) {
  ScratchDir dir;
  EXPECT_INVALID(rawFile(R"({"x":{"shape":[1],"data_offsets":[0,4]}})",
                         std::string(4, '\0')),
                 "tensor 'x' has no \"dtype\" string");
  EXPECT_INVALID(rawFile(R"({"x":{"dtype":"F32","data_offsets":[0,4]}})",
                         std::string(4, '\0')),
                 "tensor 'x' has no \"shape\" array");
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
              std::string(4, '\0')),
      "tensor 'x' has a shape [-1] whose dims are not all integers");
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
              std::string(4, '\0')),
      "whose dims are not all integers");
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
      "tensor 'x' has no \"data_offsets\" pair");
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
              std::string(8, '\0')),
      "no \"data_offsets\" pair");
  EXPECT_INVALID(rawFile(R"({"__metadata__":{"k":1}})"),
                 "\"__metadata__\" maps 'k' to something other than a string");
  EXPECT_INVALID(rawFile(R"({"__metadata__":[]})"),
                 "\"__metadata__\" is not a JSON object");
}

TEST(Safetensors, UnknownDType) {
  ScratchDir dir;
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})",
              std::string(4, '\0')),
      "tensor 'x' has dtype 'F16', which bmrt does not read");
}

TEST(Safetensors, OffsetsOutOfRange) {
  ScratchDir dir;
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
              std::string(4, '\0')),
      "tensor 'x' has data_offsets [0, 8] outside the 4 bytes of "
      "data");
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
              std::string(8, '\0')),
      "data_offsets [8, 4] outside");
  // A file cut short in its data.
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"I64","shape":[4],"data_offsets":[0,32]}})",
              std::string(20, '\0')),
      "outside the 20 bytes of data");
}

TEST(Safetensors, ShapeAndLengthMismatch) {
  ScratchDir dir;
  EXPECT_INVALID(
      rawFile(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
              std::string(20, '\0')),
      "tensor 'x' is F32[2,3] (24 bytes) but its data_offsets [0, "
      "20] span 20 bytes");
  // A shape whose byte count overflows 64 bits is a mismatch, not a wrap.
  EXPECT_INVALID(
      rawFile(
          R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      "(too large) but its data_offsets [0, 0] span 0 bytes");
}

TEST(Safetensors, OverlapsAndHoles) {
  ScratchDir dir;
  std::string data(12, '\0');
  EXPECT_INVALID(
      rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              data),
      "tensors 'a' and 'b' overlap (bytes [0, 8) and [4, 12))");
  EXPECT_INVALID(
      rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
              data),
      "bytes [4, 8) of the data belong to no tensor");
  EXPECT_INVALID(
      rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              data),
      "bytes [4, 12) of the data belong to no tensor");
  // Empty tensors may sit anywhere in range.
  std::string path = dir.path("ok.safetensors");
  writeBytes(
      path, rawFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                    R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                    data));
  EXPECT_EQ(readSafetensors(path).tensors.size(), 2u);
}

} // namespace
} // namespace bmrt::test
