//===- Safetensors.h - Hugging Face's safetensors format --------*- C++ -*-===//
//
// The format: an 8-byte little-endian header length N, N bytes of a JSON
// object (padded with spaces) mapping each tensor's name to its dtype,
// shape and [begin, end) byte range in the data that follows, plus an
// optional "__metadata__" object of strings; then the raw little-endian,
// row-major data. Ranges are relative to the start of the data, cover it
// without overlaps or holes, and each spans exactly its shape's bytes.
//
// The reader treats the file as untrusted: every number is checked before
// it is used, nothing is allocated beyond the file's size, and any problem
// is a one-line bmrt::Error naming the file.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_SAFETENSORS_H
#define BMRT_CHECKPOINT_SAFETENSORS_H

#include "FileIO.h"

#include "bmrt/Tensor.h"

#include <map>
#include <string>
#include <vector>

namespace bmrt {

/// A tensor to write: a name, its type and shape and borrowed host bytes
/// (numElements(shape) * sizeOf(dtype) of them).
struct TensorRef {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  const void *data = nullptr;

  size_t bytes() const { return numElements(shape) * sizeOf(dtype); }
};

/// A tensor in host memory that owns its bytes.
struct HostTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<uint8_t> data;

  TensorRef ref() const { return {name, dtype, shape, data.data()}; }
  const float *f32() const {
    return reinterpret_cast<const float *>(data.data());
  }
  const int64_t *i64() const {
    return reinterpret_cast<const int64_t *>(data.data());
  }
};

/// The "__metadata__" strings.
using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  /// In the order of their data in the file.
  std::vector<HostTensor> tensors;
  SafetensorsMetadata metadata;
};

/// "F32", "I64", "I32", "BOOL".
const char *safetensorsName(DType type);
/// The inverse of safetensorsName; false for a dtype bmrt does not use.
bool parseSafetensorsDType(const std::string &name, DType &type);

/// Writes the tensors in the given order (names must be distinct) and
/// fsyncs the file; returns its size and CRC (of the bytes written).
/// Throws bmrt::Error when it cannot be written (the file may then be
/// partial: checkpoints write to a temporary folder).
FileDigest writeSafetensors(const std::string &path,
                            const std::vector<TensorRef> &tensors,
                            const SafetensorsMetadata &metadata = {});

/// Reads and validates a whole file; with `digest`, also its size and CRC,
/// computed from the bytes as they are read.
SafetensorsFile readSafetensors(const std::string &path,
                                FileDigest *digest = nullptr);

/// The tensor called `name`, or null.
/// The tensor `name` of `tensors`, which must have `view`'s dtype and
/// shape; otherwise throws one line naming `where` (the file), the tensor
/// and both types. Given the `model` shape of a parameter (Slot::model, or
/// its global shape), any shape that is a view of both with the same
/// element order (sameElementOrder) is that parameter too: the model's
/// shape, or the factored view another plan stored it in.
const HostTensor &requireTensor(const std::vector<HostTensor> &tensors,
                                const std::string &name,
                                const TensorView &view,
                                const std::string &where,
                                const Shape &model = {});

const HostTensor *findTensor(const std::vector<HostTensor> &tensors,
                             const std::string &name);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_SAFETENSORS_H
