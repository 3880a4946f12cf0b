//===- Device.h - the asynchronous device interface ------------*- C++ -*-===//
//
// DESIGN.md section 5: a backend per device kind (Backend.h). The interface
// is the one a GPU needs (device memory, in-order streams of work, events
// between them, explicit synchronisation), so that the CUDA backend slots in
// without changing the step program; on the CPU a stream runs each call
// before it returns and synchronize() has nothing to wait for.
//
// Memory is counted by kind, as the planner predicts it, so that the trainer
// can report peak memory split the same way.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_DEVICE_H
#define BMRT_DEVICE_H

#include "bmrt/Box.h"
#include "bmrt/Tensor.h"

#include <array>
#include <cstddef>
#include <memory>
#include <string>

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

/// What a device's GEMMs (matmul, gemm, einsum's pairs, convolutions and
/// their gradients) read their operands in: the first step of the plan's
/// mixed precision (DESIGN.md 5, issue 22). Only the GEMM inputs change:
/// BF16 rounds each fp32 operand to bf16 (round to nearest even) on its way
/// into the GEMM and accumulates in fp32, into an fp32 result. Weights,
/// activations, gradients and optimizer state stay fp32 in memory whatever
/// this says. F16 needs loss scaling, which the trainer does not have yet:
/// no backend computes in it (the CUDA backend refuses it).
enum class ContractionPrecision : uint8_t { F32, BF16, F16 };
/// "fp32", "bf16", "fp16": trainer.json's and --precision's spelling.
const char *nameOf(ContractionPrecision precision);
/// The inverse of nameOf; false for an unknown name.
bool parseContractionPrecision(const std::string &name,
                               ContractionPrecision &precision);

class Event;

/// An in-order queue of device work. Kernels and copies are enqueued on a
/// stream; the host sees their results after synchronize(). Work on two
/// streams of one device may overlap unless ordered by events.
class Stream {
public:
  virtual ~Stream();
  /// Blocks until everything enqueued so far has run.
  virtual void synchronize() = 0;
  /// Work enqueued on this stream from now on starts after the work that
  /// `event` recorded (on any stream of the device) has run.
  virtual void waitFor(Event &event) = 0;
};

/// A point in a stream's work: record() marks it, query() and synchronize()
/// ask the host whether the work before it has run, Stream::waitFor orders
/// another stream after it. An event never recorded has nothing to wait for.
class Event {
public:
  virtual ~Event();
  virtual void record(Stream &stream) = 0;
  /// Whether the recorded work has run; never blocks.
  virtual bool query() = 0;
  /// Blocks the host until the recorded work has run.
  virtual void synchronize() = 0;
};

struct Backend;

/// The device of one backend (Backend.h): its memory, streams and events,
/// and the copies and fills that every touch of device memory outside a
/// backend goes through. Nothing outside a backend reads or writes device
/// memory with the host's memcpy or memset.
class Device {
public:
  explicit Device(const Backend &backend) : owner(backend) {}
  virtual ~Device();
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;

  /// The backend this device belongs to: its kernels.
  const Backend &backend() const { return owner; }
  /// What its GEMMs read their operands in (DeviceOptions asks; a backend
  /// may compute in fp32 whatever was asked: the CPU, the reference, does).
  virtual ContractionPrecision contractionPrecision() const {
    return ContractionPrecision::F32;
  }
  /// "cpu", "cuda:0".
  virtual std::string name() const = 0;
  /// Whether the host may read and write this device's memory directly
  /// (the CPU's): a communicator that moves host memory (MPI) then needs
  /// no staging (StagedComm.h).
  virtual bool hostAccessible() const { return false; }
  /// Called on a host thread other than the one that made the device,
  /// before that thread enqueues work on it (the offloaded optimizer's
  /// worker): the CUDA backend makes its GPU the thread's current one, the
  /// CPU backend gives the thread's kernels the device's thread count.
  virtual void bindCallingThread() {}
  /// Page-locks `bytes` of host memory at `host` for this device's copies
  /// (cudaHostRegister: copies from and to it run asynchronously, at the
  /// link's full rate); false where the device cannot (its copies then
  /// stage through its own buffers, as from any host memory). Undone by
  /// unpinHostMemory before the memory is freed.
  virtual bool pinHostMemory(void *host, size_t bytes) { return false; }
  virtual void unpinHostMemory(void *host) {}

  /// Device memory of `bytes` (zero-filled), counted under `kind`. Throws
  /// bmrt::Error when the device is out of memory, naming the kind, the
  /// bytes asked for, what this process holds and (where the device can
  /// tell) what it has free.
  void *allocate(size_t bytes, MemoryKind kind);
  void deallocate(void *pointer, size_t bytes, MemoryKind kind);
  /// Bytes the device has free now, where it can tell (0 where not).
  virtual size_t freeBytes() const { return 0; }

  /// The stream kernels run on.
  virtual Stream &computeStream() = 0;
  /// Another stream (communication beside computation), and an event.
  virtual std::unique_ptr<Stream> createStream() = 0;
  virtual std::unique_ptr<Event> createEvent() = 0;

  /// Copies between host and device memory, ordered on `stream`. A copy to
  /// the host has landed once the stream is synchronised.
  virtual void copyToDevice(void *device, const void *host, size_t bytes,
                            Stream &stream) = 0;
  virtual void copyToHost(void *host, const void *device, size_t bytes,
                          Stream &stream) = 0;
  /// Copies between two places of device memory, ordered on `stream`; the
  /// two ranges may overlap (memmove).
  virtual void copyOnDevice(void *to, const void *from, size_t bytes,
                            Stream &stream) = 0;
  /// Sets `bytes` bytes of device memory to `value`, ordered on `stream`.
  virtual void fillBytes(void *device, uint8_t value, size_t bytes,
                         Stream &stream) = 0;
  /// Copies `rows` runs of `runBytes` bytes, the i-th from src + i *
  /// srcPitch to dst + i * dstPitch (cudaMemcpy2D's contract). The default
  /// makes one copyOnDevice per run.
  virtual void copyStrided(void *dst, size_t dstPitch, const void *src,
                           size_t srcPitch, size_t runBytes, size_t rows,
                           Stream &stream);
  /// The box copy of bmrt/Sharding.h's copyBox between two tensors in
  /// device memory, ordered on `stream`: the box must lie inside both.
  void copyBox(const void *src, const Shape &srcShape, const Shape &srcOffsets,
               void *dst, const Shape &dstShape, const Shape &dstOffsets,
               const Shape &box, size_t elementBytes, Stream &stream);

  /// Bytes allocated now and at most so far, per kind and in all.
  size_t bytesInUse(MemoryKind kind) const;
  size_t peakBytes(MemoryKind kind) const;
  size_t peakTotalBytes() const { return peakTotal; }
  /// Starts the peaks over from what is in use now: a trainer measures its
  /// steps, not the set-up before them (ZeRO 3 loads whole parameters once
  /// before it keeps their shards).
  void resetPeaks();
  /// Refuses allocations past `bytes` in all (0: only the device's own
  /// size), as a device of that size would: the trainer's --device-memory.
  void setMemoryLimit(size_t bytes) { limit = bytes; }

protected:
  /// Null when the device has no room.
  virtual void *rawAllocate(size_t bytes) = 0;
  virtual void rawDeallocate(void *pointer) = 0;

private:
  const Backend &owner;
  std::array<size_t, kNumMemoryKinds> inUse{};
  std::array<size_t, kNumMemoryKinds> peak{};
  size_t total = 0;
  size_t peakTotal = 0;
  size_t limit = 0;
};

} // namespace bmrt

#endif // BMRT_DEVICE_H
