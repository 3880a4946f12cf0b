//===- Device.h - the asynchronous device interface ------------*- C++ -*-===//
//
// DESIGN.md section 5: a backend per device kind. The interface is the one a
// GPU needs (device memory, an in-order stream of work, explicit
// synchronisation), so that the CUDA backend slots in without changing the
// step program; on the CPU a stream runs each call before it returns and
// synchronize() has nothing to wait for.
//
// Memory is counted by kind, as the planner predicts it, so that the trainer
// can report peak memory split the same way.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_DEVICE_H
#define BMRT_DEVICE_H

#include "bmrt/Tensor.h"

#include <array>
#include <cstddef>
#include <memory>

namespace bmrt {

/// The planner's memory kinds (passes/plan: parameters, gradients, optimizer
/// state, activations, buffers and workspace).
enum class MemoryKind : uint8_t {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  Workspace,
};
inline constexpr int kNumMemoryKinds = 5;
const char *nameOf(MemoryKind kind);

/// An in-order queue of device work. Kernels and copies are enqueued on a
/// stream; the host sees their results after synchronize().
class Stream {
public:
  virtual ~Stream();
  /// Blocks until everything enqueued so far has run.
  virtual void synchronize() = 0;
};

class Device {
public:
  virtual ~Device();
  virtual const char *name() const = 0;

  /// Device memory of `bytes` (zero-filled), counted under `kind`. Throws
  /// bmrt::Error when the device is out of memory.
  void *allocate(size_t bytes, MemoryKind kind);
  void deallocate(void *pointer, size_t bytes, MemoryKind kind);

  /// The stream kernels run on.
  virtual Stream &computeStream() = 0;
  /// Copies between host and device memory, ordered on `stream`.
  virtual void copyToDevice(void *device, const void *host, size_t bytes,
                            Stream &stream) = 0;
  virtual void copyToHost(void *host, const void *device, size_t bytes,
                          Stream &stream) = 0;
  /// Copies between two places of device memory, ordered on `stream`.
  virtual void copyOnDevice(void *to, const void *from, size_t bytes,
                            Stream &stream) = 0;

  /// Bytes allocated now and at most so far, per kind and in all.
  size_t bytesInUse(MemoryKind kind) const;
  size_t peakBytes(MemoryKind kind) const;
  size_t peakTotalBytes() const { return peakTotal; }
  /// Starts the peaks over from what is in use now: a trainer measures its
  /// steps, not the set-up before them (ZeRO 3 loads whole parameters once
  /// before it keeps their shards).
  void resetPeaks();

protected:
  virtual void *rawAllocate(size_t bytes) = 0;
  virtual void rawDeallocate(void *pointer) = 0;

private:
  std::array<size_t, kNumMemoryKinds> inUse{};
  std::array<size_t, kNumMemoryKinds> peak{};
  size_t total = 0;
  size_t peakTotal = 0;
};

/// The CPU backend: host memory (64-byte aligned), a stream that runs work
/// as it is enqueued.
std::unique_ptr<Device> createCpuDevice();

} // namespace bmrt

#endif // BMRT_DEVICE_H
