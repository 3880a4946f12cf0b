//===- Device.cpp - tensor helpers, memory accounting, the CPU device -----===//

#include "bmrt/Device.h"
#include "bmrt/Error.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace bmrt {

size_t sizeOf(DType type) {
  switch (type) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::I64:
    return 8;
  case DType::Bool:
    return 1;
  }
  return 0;
}

const char *nameOf(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::Bool:
    return "i1";
  }
  return "?";
}

bool parseDType(const std::string &name, DType &type) {
  for (DType t : {DType::F32, DType::I64, DType::I32, DType::Bool})
    if (name == nameOf(t)) {
      type = t;
      return true;
    }
  return false;
}

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string formatShape(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

namespace {

/// The running products of `shape`'s dims other than 1.
std::vector<int64_t> runningProducts(const Shape &shape) {
  std::vector<int64_t> products;
  int64_t n = 1;
  for (int64_t d : shape)
    if (d != 1)
      products.push_back(n *= d);
  return products;
}

bool isSubsequence(const std::vector<int64_t> &part,
                   const std::vector<int64_t> &whole) {
  return std::includes(whole.begin(), whole.end(), part.begin(), part.end());
}

} // namespace

bool sameElementOrder(const Shape &a, const Shape &b) {
  if (a == b)
    return true;
  if (numElements(a) != numElements(b))
    return false;
  // One shape's dims are runs of the other's where every running product
  // of the coarser is one of the finer.
  std::vector<int64_t> pa = runningProducts(a), pb = runningProducts(b);
  return isSubsequence(pa, pb) || isSubsequence(pb, pa);
}

std::string Error::where() const {
  return std::string(file) + ":" + std::to_string(line);
}

const char *nameOf(MemoryKind kind) {
  switch (kind) {
  case MemoryKind::Parameters:
    return "parameters";
  case MemoryKind::Gradients:
    return "gradients";
  case MemoryKind::OptimizerState:
    return "optimizer_state";
  case MemoryKind::Activations:
    return "activations";
  case MemoryKind::Workspace:
    return "workspace";
  }
  return "?";
}

Stream::~Stream() = default;
Device::~Device() = default;

void *Device::allocate(size_t bytes, MemoryKind kind) {
  void *pointer = rawAllocate(bytes);
  BMRT_CHECK(pointer || bytes == 0,
             std::string("out of memory on ") + name() + ": cannot allocate " +
                 std::to_string(bytes) + " bytes of " + nameOf(kind));
  size_t k = static_cast<size_t>(kind);
  inUse[k] += bytes;
  peak[k] = std::max(peak[k], inUse[k]);
  total += bytes;
  peakTotal = std::max(peakTotal, total);
  return pointer;
}

void Device::deallocate(void *pointer, size_t bytes, MemoryKind kind) {
  if (!pointer)
    return;
  rawDeallocate(pointer);
  inUse[static_cast<size_t>(kind)] -= bytes;
  total -= bytes;
}

size_t Device::bytesInUse(MemoryKind kind) const {
  return inUse[static_cast<size_t>(kind)];
}

void Device::resetPeaks() {
  peak = inUse;
  peakTotal = total;
}

size_t Device::peakBytes(MemoryKind kind) const {
  return peak[static_cast<size_t>(kind)];
}

namespace {

/// Runs work as it is enqueued: nothing is ever pending.
class CpuStream final : public Stream {
public:
  void synchronize() override {}
};

class CpuDevice final : public Device {
public:
  const char *name() const override { return "cpu"; }
  Stream &computeStream() override { return stream; }
  void copyToDevice(void *device, const void *host, size_t bytes,
                    Stream &) override {
    std::memcpy(device, host, bytes);
  }
  void copyToHost(void *host, const void *device, size_t bytes,
                  Stream &) override {
    std::memcpy(host, device, bytes);
  }
  void copyOnDevice(void *to, const void *from, size_t bytes,
                    Stream &) override {
    std::memcpy(to, from, bytes);
  }

protected:
  void *rawAllocate(size_t bytes) override {
    if (bytes == 0)
      return nullptr;
    // 64-byte lines for vector loads; aligned_alloc wants a multiple.
    size_t rounded = (bytes + 63) / 64 * 64;
    void *pointer = std::aligned_alloc(64, rounded);
    if (pointer)
      std::memset(pointer, 0, rounded);
    return pointer;
  }
  void rawDeallocate(void *pointer) override { std::free(pointer); }

private:
  CpuStream stream;
};

} // namespace

std::unique_ptr<Device> createCpuDevice() {
  return std::make_unique<CpuDevice>();
}

} // namespace bmrt
