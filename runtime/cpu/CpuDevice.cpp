//===- CpuDevice.cpp - host memory and streams that run work at once ------===//

#include "CpuBackend.h"
#include "Kernels.h"

#include <cstdlib>
#include <cstring>

namespace bmrt::cpu {
namespace {

/// Runs work as it is enqueued: nothing is ever pending, so there is
/// nothing to wait for.
class CpuStream final : public Stream {
public:
  void synchronize() override {}
  void waitFor(Event &) override {}
};

class CpuEvent final : public Event {
public:
  void record(Stream &) override {}
  bool query() override { return true; }
  void synchronize() override {}
};

class CpuDevice final : public Device {
public:
  CpuDevice(const Backend &backend, int threads)
      : Device(backend), threads(threads) {}
  std::string name() const override { return "cpu"; }
  bool hostAccessible() const override { return true; }
  void bindCallingThread() override {
    if (threads)
      setThreadsOfCallingThread(threads);
  }
  Stream &computeStream() override { return stream; }
  std::unique_ptr<Stream> createStream() override {
    return std::make_unique<CpuStream>();
  }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<CpuEvent>();
  }
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
    if (to != from)
      std::memmove(to, from, bytes);
  }
  void fillBytes(void *device, uint8_t value, size_t bytes,
                 Stream &) override {
    std::memset(device, value, bytes);
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
  /// The kernels' threads (0: the default).
  int threads;
};

} // namespace

std::unique_ptr<Device> createDevice(const Backend &backend, int threads) {
  return std::make_unique<CpuDevice>(backend, threads);
}

} // namespace bmrt::cpu
