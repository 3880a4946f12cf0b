//===- HostTensor.cpp - small tensors known at import time ----------------===//

#include "import/HostTensor.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstring>

using namespace bm::import;
using onnx::TensorProto;

// Data types newer than the ONNX 1.12 protobuf enum (float8, int4, float4).
namespace {
enum : int32_t {
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUint4 = 21,
  kInt4 = 22,
};

/// Semantics of the small float types stored as bit patterns.
const llvm::fltSemantics *smallFloatSemantics(int32_t dtype) {
  switch (dtype) {
  case TensorProto::FLOAT16:
    return &llvm::APFloat::IEEEhalf();
  case TensorProto::BFLOAT16:
    return &llvm::APFloat::BFloat();
  case kFloat8E4M3FN:
    return &llvm::APFloat::Float8E4M3FN();
  case kFloat8E4M3FNUZ:
    return &llvm::APFloat::Float8E4M3FNUZ();
  case kFloat8E5M2:
    return &llvm::APFloat::Float8E5M2();
  case kFloat8E5M2FNUZ:
    return &llvm::APFloat::Float8E5M2FNUZ();
  default:
    return nullptr;
  }
}

double smallFloatToDouble(int32_t dtype, uint64_t bits) {
  const llvm::fltSemantics &sem = *smallFloatSemantics(dtype);
  llvm::APFloat value(sem,
                      llvm::APInt(llvm::APFloat::getSizeInBits(sem), bits));
  bool lost;
  value.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
                &lost);
  return value.convertToDouble();
}

/// Integer bit width of an integer data type (bool is 1).
unsigned intWidth(int32_t dtype) {
  switch (dtype) {
  case TensorProto::BOOL:
    return 1;
  case kUint4:
  case kInt4:
    return 4;
  case TensorProto::INT8:
  case TensorProto::UINT8:
    return 8;
  case TensorProto::INT16:
  case TensorProto::UINT16:
    return 16;
  case TensorProto::INT32:
  case TensorProto::UINT32:
    return 32;
  default:
    return 64;
  }
}

/// A double as int64, truncated: NaN is 0 and values beyond the int64 range
/// saturate (a plain cast would be undefined behaviour).
int64_t saturatingToInt64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 9.2e18)
    return INT64_MAX;
  if (v <= -9.2e18)
    return INT64_MIN;
  return static_cast<int64_t>(v);
}

bool isUnsigned(int32_t dtype) {
  return dtype == TensorProto::UINT8 || dtype == TensorProto::UINT16 ||
         dtype == TensorProto::UINT32 || dtype == TensorProto::UINT64 ||
         dtype == kUint4;
}
} // namespace

int64_t bm::import::byteWidth(int32_t dtype) {
  switch (dtype) {
  case TensorProto::BOOL:
  case TensorProto::INT8:
  case TensorProto::UINT8:
  case kFloat8E4M3FN:
  case kFloat8E4M3FNUZ:
  case kFloat8E5M2:
  case kFloat8E5M2FNUZ:
    return 1;
  case TensorProto::INT16:
  case TensorProto::UINT16:
  case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16:
    return 2;
  case TensorProto::INT32:
  case TensorProto::UINT32:
  case TensorProto::FLOAT:
    return 4;
  case TensorProto::INT64:
  case TensorProto::UINT64:
  case TensorProto::DOUBLE:
    return 8;
  default:
    return 0;
  }
}

bool HostTensor::isFloatType(int32_t dtype) {
  return dtype == TensorProto::FLOAT || dtype == TensorProto::DOUBLE ||
         smallFloatSemantics(dtype) != nullptr;
}

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t HostTensor::getInt(int64_t i) const {
  int64_t at = splat ? 0 : i;
  return isFloat() ? saturatingToInt64(floats[at]) : ints[at];
}

double HostTensor::getFloat(int64_t i) const {
  int64_t at = splat ? 0 : i;
  return isFloat() ? floats[at] : static_cast<double>(ints[at]);
}

HostTensor HostTensor::zeros(int32_t dtype, llvm::ArrayRef<int64_t> shape,
                             bool splat) {
  HostTensor t;
  t.dtype = dtype;
  t.shape.assign(shape.begin(), shape.end());
  t.splat = splat;
  int64_t n = splat ? 1 : t.numElements();
  if (t.isFloat())
    t.floats.assign(n, 0.0);
  else
    t.ints.assign(n, 0);
  return t;
}

HostTensor HostTensor::fromInts(llvm::ArrayRef<int64_t> values,
                                llvm::ArrayRef<int64_t> shape, int32_t dtype) {
  HostTensor t;
  t.dtype = dtype;
  t.shape.assign(shape.begin(), shape.end());
  t.ints.assign(values.begin(), values.end());
  return t;
}

void HostTensor::setInt(int64_t i, int64_t value) {
  if (isFloat()) {
    set(i, static_cast<double>(value));
    return;
  }
  unsigned width = intWidth(dtype);
  if (width == 1)
    value = value != 0;
  else if (width < 64)
    value = isUnsigned(dtype)
                ? static_cast<int64_t>(llvm::maskTrailingOnes<uint64_t>(width) &
                                       static_cast<uint64_t>(value))
                : llvm::SignExtend64(static_cast<uint64_t>(value), width);
  ints[i] = value;
}

void HostTensor::set(int64_t i, double value) {
  if (!isFloat()) {
    if (intWidth(dtype) == 1) {
      ints[i] = value != 0.0;
      return;
    }
    setInt(i, saturatingToInt64(value));
    return;
  }
  if (dtype == TensorProto::FLOAT)
    value = static_cast<float>(value);
  else if (const llvm::fltSemantics *sem = smallFloatSemantics(dtype)) {
    llvm::APFloat f(value);
    bool lost;
    f.convert(*sem, llvm::APFloat::rmNearestTiesToEven, &lost);
    f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    value = f.convertToDouble();
  }
  floats[i] = value;
}

HostTensor HostTensor::cast(int32_t toType) const {
  HostTensor out = zeros(toType, shape, splat);
  int64_t n = splat ? 1 : numElements();
  for (int64_t i = 0; i < n; ++i) {
    if (isFloat())
      out.set(i, floats[i]);
    else
      out.setInt(i, ints[i]);
  }
  return out;
}

std::vector<int64_t> HostTensor::toInts() const {
  int64_t n = numElements();
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i)
    out[i] = getInt(i);
  return out;
}

mlir::Type bm::import::elementTypeOf(mlir::MLIRContext *context,
                                     int32_t dtype) {
  mlir::Builder b(context);
  switch (dtype) {
  case TensorProto::FLOAT:
    return b.getF32Type();
  case TensorProto::DOUBLE:
    return b.getF64Type();
  case TensorProto::FLOAT16:
    return b.getF16Type();
  case TensorProto::BFLOAT16:
    return b.getBF16Type();
  case kFloat8E4M3FN:
    return mlir::Float8E4M3FNType::get(context);
  case kFloat8E4M3FNUZ:
    return mlir::Float8E4M3FNUZType::get(context);
  case kFloat8E5M2:
    return mlir::Float8E5M2Type::get(context);
  case kFloat8E5M2FNUZ:
    return mlir::Float8E5M2FNUZType::get(context);
  case TensorProto::BOOL:
  case TensorProto::INT8:
  case TensorProto::UINT8:
  case TensorProto::INT16:
  case TensorProto::UINT16:
  case TensorProto::INT32:
  case TensorProto::UINT32:
  case TensorProto::INT64:
  case TensorProto::UINT64:
  case kUint4:
  case kInt4:
    // bm works on signless integers; the sign only matters to kernels.
    return b.getIntegerType(intWidth(dtype));
  default:
    return nullptr;
  }
}

int32_t bm::import::dtypeOf(mlir::Type type) {
  if (type.isF32())
    return TensorProto::FLOAT;
  if (type.isF64())
    return TensorProto::DOUBLE;
  if (type.isF16())
    return TensorProto::FLOAT16;
  if (type.isBF16())
    return TensorProto::BFLOAT16;
  if (llvm::isa<mlir::Float8E4M3FNType>(type))
    return kFloat8E4M3FN;
  if (llvm::isa<mlir::Float8E4M3FNUZType>(type))
    return kFloat8E4M3FNUZ;
  if (llvm::isa<mlir::Float8E5M2Type>(type))
    return kFloat8E5M2;
  if (llvm::isa<mlir::Float8E5M2FNUZType>(type))
    return kFloat8E5M2FNUZ;
  if (type.isInteger(1))
    return TensorProto::BOOL;
  if (type.isInteger(4))
    return kInt4;
  if (type.isInteger(8))
    return TensorProto::INT8;
  if (type.isInteger(16))
    return TensorProto::INT16;
  if (type.isInteger(32))
    return TensorProto::INT32;
  if (type.isInteger(64))
    return TensorProto::INT64;
  return TensorProto::UNDEFINED;
}

std::string bm::import::dtypeName(int32_t dtype) {
  if (TensorProto::DataType_IsValid(dtype))
    return TensorProto::DataType_Name(
        static_cast<TensorProto::DataType>(dtype));
  switch (dtype) {
  case kFloat8E4M3FN:
    return "FLOAT8E4M3FN";
  case kFloat8E4M3FNUZ:
    return "FLOAT8E4M3FNUZ";
  case kFloat8E5M2:
    return "FLOAT8E5M2";
  case kFloat8E5M2FNUZ:
    return "FLOAT8E5M2FNUZ";
  case kUint4:
    return "UINT4";
  case kInt4:
    return "INT4";
  default:
    return "data type " + std::to_string(dtype);
  }
}

std::string bm::import::shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    text += (i ? ", " : "") + std::to_string(d);
  return text + "]";
}

std::optional<int64_t>
bm::import::checkedNumElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  }
  return n;
}

int64_t bm::import::storedElements(const TensorProto &proto) {
  int64_t width = byteWidth(proto.data_type());
  if (proto.has_raw_data())
    return width == 0 || proto.raw_data().size() % width
               ? -1
               : static_cast<int64_t>(proto.raw_data().size()) / width;
  switch (proto.data_type()) {
  case TensorProto::FLOAT:
    return proto.float_data_size();
  case TensorProto::DOUBLE:
    return proto.double_data_size();
  case TensorProto::INT64:
    return proto.int64_data_size();
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    return proto.uint64_data_size();
  default:
    return proto.int32_data_size();
  }
}

/// The `n` values of `t` from `proto`'s raw bytes (little endian, `width`
/// bytes each).
static void decodeRawData(const onnx::TensorProto &proto, int64_t n,
                          int64_t width, HostTensor &t) {
  const bool isFloat = t.isFloat();
  const std::string &raw = proto.raw_data();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, raw.data() + i * width, width); // little endian
    switch (t.dtype) {
    case TensorProto::FLOAT: {
      float f;
      std::memcpy(&f, &bits, 4);
      t.floats[i] = f;
      break;
    }
    case TensorProto::DOUBLE: {
      double f;
      std::memcpy(&f, &bits, 8);
      t.floats[i] = f;
      break;
    }
    default:
      if (isFloat)
        t.floats[i] = smallFloatToDouble(t.dtype, bits);
      else
        t.setInt(i, static_cast<int64_t>(bits));
    }
  }
}

/// The `n` values of `t` from `proto`'s typed fields.
static void decodeTypedData(const onnx::TensorProto &proto, int64_t n,
                            HostTensor &t) {
  const bool isFloat = t.isFloat();
  switch (t.dtype) {
  case TensorProto::FLOAT:
    for (int64_t i = 0; i < n; ++i)
      t.floats[i] = proto.float_data(i);
    return;
  case TensorProto::DOUBLE:
    for (int64_t i = 0; i < n; ++i)
      t.floats[i] = proto.double_data(i);
    return;
  case TensorProto::INT64:
    for (int64_t i = 0; i < n; ++i)
      t.ints[i] = proto.int64_data(i);
    return;
  case TensorProto::UINT32:
  case TensorProto::UINT64:
    for (int64_t i = 0; i < n; ++i)
      t.setInt(i, static_cast<int64_t>(proto.uint64_data(i)));
    return;
  default:
    // Everything narrower travels in int32_data (floats as bit patterns).
    for (int64_t i = 0; i < n; ++i) {
      if (isFloat)
        t.floats[i] = smallFloatToDouble(
            t.dtype, static_cast<uint32_t>(proto.int32_data(i)));
      else
        t.setInt(i, proto.int32_data(i));
    }
    return;
  }
}

std::optional<HostTensor>
bm::import::decodeTensor(const onnx::TensorProto &proto, std::string &error) {
  HostTensor t;
  t.dtype = proto.data_type();
  for (int64_t d : proto.dims())
    t.shape.push_back(d);
  std::optional<int64_t> count = checkedNumElements(t.shape);
  if (!count) {
    error = "has a negative or overflowing shape";
    return std::nullopt;
  }
  if (proto.data_location() == TensorProto::EXTERNAL) {
    error = "holds external data, which the importer does not read";
    return std::nullopt;
  }
  int64_t width = byteWidth(t.dtype);
  if (width == 0) {
    error = "has element type " + dtypeName(t.dtype) + ", which bm cannot hold";
    return std::nullopt;
  }
  bool isFloat = t.isFloat();
  int64_t n = *count;
  // Check the stored count before allocating: dims may claim terabytes.
  int64_t stored = storedElements(proto);
  if (stored != n) {
    error = "has " + std::to_string(stored) + " values for " +
            std::to_string(n) + " elements";
    return std::nullopt;
  }
  if (isFloat)
    t.floats.resize(n);
  else
    t.ints.resize(n);
  if (proto.has_raw_data())
    decodeRawData(proto, n, width, t);
  else
    decodeTypedData(proto, n, t);
  return t;
}

mlir::DenseElementsAttr
bm::import::toElementsAttr(const HostTensor &tensor,
                           mlir::RankedTensorType type) {
  mlir::Type element = type.getElementType();
  int64_t n = tensor.numElements() == 0 ? 0
              : tensor.splat            ? 1
                                        : tensor.numElements();
  if (element.isInteger(1)) {
    llvm::SmallVector<bool> values(n);
    for (int64_t i = 0; i < n; ++i)
      values[i] = tensor.getInt(i) != 0;
    return mlir::DenseElementsAttr::get(type, llvm::ArrayRef<bool>(values));
  }
  if (auto intType = llvm::dyn_cast<mlir::IntegerType>(element)) {
    llvm::SmallVector<llvm::APInt> values;
    values.reserve(n);
    for (int64_t i = 0; i < n; ++i)
      values.push_back(llvm::APInt(intType.getWidth(),
                                   static_cast<uint64_t>(tensor.getInt(i)),
                                   /*isSigned=*/true, /*implicitTrunc=*/true));
    return mlir::DenseElementsAttr::get(type, values);
  }
  auto floatType = llvm::cast<mlir::FloatType>(element);
  llvm::SmallVector<llvm::APFloat> values;
  values.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    llvm::APFloat value(tensor.getFloat(i));
    bool lost;
    value.convert(floatType.getFloatSemantics(),
                  llvm::APFloat::rmNearestTiesToEven, &lost);
    values.push_back(value);
  }
  return mlir::DenseElementsAttr::get(type, values);
}

std::optional<llvm::SmallVector<int64_t, 4>>
bm::import::broadcastShapes(llvm::ArrayRef<int64_t> a,
                            llvm::ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  llvm::SmallVector<int64_t, 4> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t bm::import::broadcastIndex(int64_t outIndex,
                                   llvm::ArrayRef<int64_t> outShape,
                                   llvm::ArrayRef<int64_t> shape) {
  int64_t index = 0, stride = 1;
  size_t offset = outShape.size() - shape.size();
  for (size_t i = outShape.size(); i-- > 0;) {
    int64_t coord = outIndex % outShape[i];
    outIndex /= outShape[i];
    if (i < offset)
      continue;
    int64_t dim = shape[i - offset];
    if (dim != 1)
      index += coord * stride;
    stride *= dim;
  }
  return index;
}
