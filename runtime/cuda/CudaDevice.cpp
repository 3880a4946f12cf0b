//===- CudaDevice.cpp - GPU memory, streams and events --------------------===//
//
// One GPU per process (the trainer's SPMD launch: a rank per GPU). Every
// copy and fill is asynchronous on the stream it is given; the host waits
// only in Stream::synchronize and Event::synchronize.
//
//===----------------------------------------------------------------------===//

#include "CudaBackend.h"
#include "CudaCheck.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

namespace bmrt::cuda {
namespace {

class CudaStream final : public Stream {
public:
  CudaStream() {
    BMRT_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
  }
  // Destructors never throw: a failure this late has nothing to report to.
  ~CudaStream() override { (void)cudaStreamDestroy(handle); }
  void synchronize() override {
    BMRT_CUDA_CHECK(cudaStreamSynchronize(handle));
  }
  void waitFor(Event &event) override;

  cudaStream_t handle = nullptr;
};

class CudaEvent final : public Event {
public:
  CudaEvent() {
    // No timing: an event without it is cheaper to record and wait for.
    BMRT_CUDA_CHECK(cudaEventCreateWithFlags(&handle, cudaEventDisableTiming));
  }
  ~CudaEvent() override { (void)cudaEventDestroy(handle); }
  void record(Stream &stream) override {
    BMRT_CUDA_CHECK(cudaEventRecord(handle, cudaStreamOf(stream)));
  }
  bool query() override {
    cudaError_t status = cudaEventQuery(handle);
    if (status == cudaErrorNotReady)
      return false;
    BMRT_CUDA_CHECK(status);
    return true;
  }
  void synchronize() override { BMRT_CUDA_CHECK(cudaEventSynchronize(handle)); }

  cudaEvent_t handle = nullptr;
};

void CudaStream::waitFor(Event &event) {
  auto *cudaEvent = dynamic_cast<CudaEvent *>(&event);
  BMRT_CHECK(cudaEvent,
             "a CUDA stream cannot wait for another backend's event");
  BMRT_CUDA_CHECK(cudaStreamWaitEvent(handle, cudaEvent->handle, 0));
}

/// The process's rank on its node, from whichever launcher started it
/// (Open MPI, Slurm, torchrun); 0 when none did.
int localRank() {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name))
      return std::max(0, std::atoi(value));
  return 0;
}

/// StreamBuffer's memory (cudaMallocAsync) comes from the device's default
/// pool, which by default hands everything back to the driver at each
/// synchronisation: every GEMM's bf16 packing then paid a real allocation
/// after each step's loss read (and after every instruction in
/// bmrt-step-timer --profile). Keeping it pooled makes the temporaries of
/// one step reused by the next.
void keepStreamOrderedMemory(int ordinal) {
  cudaMemPool_t pool = nullptr;
  BMRT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal));
  uint64_t keepAll = UINT64_MAX;
  BMRT_CUDA_CHECK(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keepAll));
}

class CudaDevice final : public Device {
public:
  CudaDevice(const Backend &backend, int ordinal,
             ContractionPrecision precision)
      : Device(backend), ordinal(ordinal), precision(precision) {
    BMRT_CUDA_CHECK(cudaSetDevice(ordinal));
    keepStreamOrderedMemory(ordinal);
    // Created after cudaSetDevice, so that it belongs to this GPU.
    stream = std::make_unique<CudaStream>();
  }

  std::string name() const override {
    return "cuda:" + std::to_string(ordinal);
  }
  void bindCallingThread() override { BMRT_CUDA_CHECK(cudaSetDevice(ordinal)); }
  // A registration refused (a locked-memory limit) leaves the memory
  // pageable: slower copies, the same results.
  bool pinHostMemory(void *host, size_t bytes) override {
    if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) == cudaSuccess)
      return true;
    (void)cudaGetLastError();
    return false;
  }
  void unpinHostMemory(void *host) override {
    if (cudaHostUnregister(host) != cudaSuccess)
      (void)cudaGetLastError();
  }
  size_t freeBytes() const override {
    // Asked while an out-of-memory error is being written: never throws.
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return free;
  }

  ContractionPrecision contractionPrecision() const override {
    return precision;
  }

  Stream &computeStream() override { return *stream; }
  std::unique_ptr<Stream> createStream() override {
    BMRT_CUDA_CHECK(cudaSetDevice(ordinal));
    return std::make_unique<CudaStream>();
  }
  std::unique_ptr<Event> createEvent() override {
    BMRT_CUDA_CHECK(cudaSetDevice(ordinal));
    return std::make_unique<CudaEvent>();
  }

  // cudaMemcpyDefault: unified addressing tells host from device pointers.
  void copyToDevice(void *device, const void *host, size_t bytes,
                    Stream &s) override {
    if (bytes)
      BMRT_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyDefault,
                                      cudaStreamOf(s)));
  }
  void copyToHost(void *host, const void *device, size_t bytes,
                  Stream &s) override {
    if (bytes)
      BMRT_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDefault,
                                      cudaStreamOf(s)));
  }
  void copyOnDevice(void *to, const void *from, size_t bytes,
                    Stream &s) override;
  void fillBytes(void *device, uint8_t value, size_t bytes,
                 Stream &s) override {
    if (bytes)
      BMRT_CUDA_CHECK(cudaMemsetAsync(device, value, bytes, cudaStreamOf(s)));
  }
  void copyStrided(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
                   size_t runBytes, size_t rows, Stream &s) override;

protected:
  void *rawAllocate(size_t bytes) override {
    if (bytes == 0)
      return nullptr;
    BMRT_CUDA_CHECK(cudaSetDevice(ordinal));
    void *pointer = nullptr;
    cudaError_t status = cudaMalloc(&pointer, bytes);
    if (status == cudaErrorMemoryAllocation) {
      // Device::allocate turns null into the out-of-memory message.
      (void)cudaGetLastError();
      return nullptr;
    }
    BMRT_CUDA_CHECK(status);
    // Device::allocate promises zeros. Waiting here keeps that true for
    // every stream, not only the compute stream the fill is ordered on.
    BMRT_CUDA_CHECK(cudaMemsetAsync(pointer, 0, bytes, stream->handle));
    BMRT_CUDA_CHECK(cudaStreamSynchronize(stream->handle));
    return pointer;
  }
  // Called from destructors (the executor's): a failure, such as the
  // driver already shutting down at exit, is not thrown.
  void rawDeallocate(void *pointer) override { (void)cudaFree(pointer); }

private:
  int ordinal;
  /// fp32 or bf16 GEMM inputs (CublasLt.h); tensors stay fp32 either way.
  ContractionPrecision precision;
  std::unique_ptr<CudaStream> stream;
};

void CudaDevice::copyOnDevice(void *to, const void *from, size_t bytes,
                              Stream &s) {
  if (to == from || bytes == 0)
    return;
  cudaStream_t handle = cudaStreamOf(s);
  const char *a = static_cast<const char *>(to);
  const char *b = static_cast<const char *>(from);
  bool overlap = a < b + bytes && b < a + bytes;
  if (!overlap) {
    BMRT_CUDA_CHECK(
        cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, handle));
    return;
  }
  // cudaMemcpy does not promise memmove's semantics for overlapping ranges:
  // go through a temporary.
  StreamBuffer staging(bytes, handle);
  BMRT_CUDA_CHECK(cudaMemcpyAsync(staging.data(), from, bytes,
                                  cudaMemcpyDeviceToDevice, handle));
  BMRT_CUDA_CHECK(cudaMemcpyAsync(to, staging.data(), bytes,
                                  cudaMemcpyDeviceToDevice, handle));
}

void CudaDevice::copyStrided(void *dst, size_t dstPitch, const void *src,
                             size_t srcPitch, size_t runBytes, size_t rows,
                             Stream &s) {
  if (runBytes == 0 || rows == 0)
    return;
  // cudaMemcpy2D wants each pitch at least the run and below the device's
  // limit (2^31 on current GPUs), and rows that do not overlap; a single
  // run is a plain copy (which handles overlap).
  constexpr size_t kMaxPitch = INT_MAX;
  if (rows == 1 || dstPitch < runBytes || srcPitch < runBytes ||
      dstPitch > kMaxPitch || srcPitch > kMaxPitch)
    return Device::copyStrided(dst, dstPitch, src, srcPitch, runBytes, rows, s);
  BMRT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, runBytes,
                                    rows, cudaMemcpyDeviceToDevice,
                                    cudaStreamOf(s)));
}

} // namespace

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver, or no GPU: not an error, just no device.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Device> createDevice(const Backend &backend,
                                     const DeviceOptions &options) {
  // Checked first, so that a machine without a GPU says it too.
  BMRT_CHECK(options.contractionPrecision != ContractionPrecision::F16,
             "the CUDA backend does not compute in fp16 yet: fp16 GEMMs need "
             "loss scaling, which is not built yet; run with --precision "
             "bf16 or fp32");
  int count = deviceCount();
  BMRT_CHECK(count > 0, "no CUDA device on this machine");
  int ordinal = options.ordinal >= 0 ? options.ordinal : localRank() % count;
  BMRT_CHECK(ordinal < count, "CUDA device " + std::to_string(ordinal) +
                                  " asked for, but this machine has " +
                                  std::to_string(count));
  return std::make_unique<CudaDevice>(backend, ordinal,
                                      options.contractionPrecision);
}

cudaStream_t cudaStreamOf(Stream &stream) {
  auto *cudaStream = dynamic_cast<CudaStream *>(&stream);
  BMRT_CHECK(cudaStream, "a CUDA kernel was given another backend's stream");
  return cudaStream->handle;
}

StreamBuffer::StreamBuffer(size_t bytes, cudaStream_t stream) : stream(stream) {
  BMRT_CUDA_CHECK(cudaMallocAsync(&pointer, bytes, stream));
}

StreamBuffer::~StreamBuffer() { (void)cudaFreeAsync(pointer, stream); }

} // namespace bmrt::cuda
