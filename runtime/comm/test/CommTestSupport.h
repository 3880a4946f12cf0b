//===- CommTestSupport.h - the world and device the tests share -*- C++ -*-===//
//
// Every rank runs every test (SPMD), so a test that communicates must make
// the same calls in the same order on every rank, and may only skip on
// what all ranks agree on (the job's size).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_COMM_TEST_COMMTESTSUPPORT_H
#define BMRT_COMM_TEST_COMMTESTSUPPORT_H

#include "bmrt/Comm.h"
#include "bmrt/Device.h"

#include <memory>
#include <vector>

namespace bmrt::test {

/// Created once by CommTestMain.cpp, before any test runs.
World &testWorld();
/// The CPU's memory; with BMRT_TEST_STAGED=1 in the environment, a device
/// that says the host cannot address it, so that every communicator of the
/// tests goes through bmrt/StagedComm.h (as ranks sharing a GPU do).
Device &testDevice();
/// `comm` over testDevice()'s memory (bmrt/DeviceComm.h): itself on the
/// CPU, staged through host memory on a device the host cannot address,
/// NCCL's on GPUs of their own (BMRT_TEST_DEVICE=cuda).
std::unique_ptr<Communicator> staged(std::unique_ptr<Communicator> comm);
/// All ranks: staged(testWorld().all()).
inline std::unique_ptr<Communicator> allRanks() {
  return staged(testWorld().all());
}

/// Device memory for `count` elements of T, filled from and read back to
/// host vectors through the device's copies.
template <typename T> class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t count)
      : count(count), bytes(count * sizeof(T)),
        pointer(testDevice().allocate(bytes, MemoryKind::Workspace)) {}
  explicit DeviceBuffer(const std::vector<T> &values)
      : DeviceBuffer(values.size()) {
    testDevice().copyToDevice(pointer, values.data(), bytes, stream());
  }
  ~DeviceBuffer() {
    testDevice().deallocate(pointer, bytes, MemoryKind::Workspace);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  /// Element `offset` on, for in-place calls.
  T *data(size_t offset = 0) { return static_cast<T *>(pointer) + offset; }
  std::vector<T> read() {
    std::vector<T> values(count);
    testDevice().copyToHost(values.data(), pointer, bytes, stream());
    stream().synchronize();
    return values;
  }
  static Stream &stream() { return testDevice().computeStream(); }

private:
  size_t count;
  size_t bytes;
  void *pointer;
};

} // namespace bmrt::test

#endif // BMRT_COMM_TEST_COMMTESTSUPPORT_H
