//===- CommTestMain.cpp - GoogleTest under mpirun -------------------------===//
//
// Each rank runs all tests. Rank 0 prints GoogleTest's usual output; the
// others print only their failures, each line marked with the rank, so that
// N copies of the same report do not bury them. Every rank exits with the
// job's verdict, and rank 0 ends with one line saying which ranks failed.
//
//===----------------------------------------------------------------------===//

#include "CommTestSupport.h"

#include "bmrt/Backend.h"
#include "bmrt/DeviceComm.h"
#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>

namespace bmrt::test {

static World *world;
static Device *device;

World &testWorld() { return *world; }
Device &testDevice() { return *device; }

/// The transports of the communicators the tests made, counted.
static std::map<std::string, int> transports;

std::unique_ptr<Communicator> staged(std::unique_ptr<Communicator> comm) {
  comm = deviceCommunicator(std::move(comm), *device);
  ++transports[comm->transport()];
  return comm;
}

namespace {

/// The CPU's memory under a device that says the host cannot address it:
/// the communicators must stage every buffer through copies, which it
/// counts (a GPU's memory, as far as the staging can tell).
class FarDevice final : public Device {
public:
  explicit FarDevice(std::unique_ptr<Device> cpu)
      : Device(cpu->backend()), cpu(std::move(cpu)) {}
  /// Bytes copied between the host and this device so far.
  size_t stagedBytes() const { return staged; }
  std::string name() const override { return "far"; }
  Stream &computeStream() override { return cpu->computeStream(); }
  std::unique_ptr<Stream> createStream() override {
    return cpu->createStream();
  }
  std::unique_ptr<Event> createEvent() override { return cpu->createEvent(); }
  void copyToDevice(void *to, const void *from, size_t bytes,
                    Stream &stream) override {
    staged += bytes;
    cpu->copyToDevice(to, from, bytes, stream);
  }
  void copyToHost(void *to, const void *from, size_t bytes,
                  Stream &stream) override {
    staged += bytes;
    cpu->copyToHost(to, from, bytes, stream);
  }
  void copyOnDevice(void *to, const void *from, size_t bytes,
                    Stream &stream) override {
    cpu->copyOnDevice(to, from, bytes, stream);
  }
  void fillBytes(void *to, uint8_t value, size_t bytes,
                 Stream &stream) override {
    cpu->fillBytes(to, value, bytes, stream);
  }

protected:
  void *rawAllocate(size_t bytes) override {
    void *pointer = cpu->allocate(bytes, MemoryKind::Workspace);
    sizes[pointer] = bytes;
    return pointer;
  }
  void rawDeallocate(void *pointer) override {
    cpu->deallocate(pointer, sizes.at(pointer), MemoryKind::Workspace);
    sizes.erase(pointer);
  }

private:
  std::unique_ptr<Device> cpu;
  std::map<void *, size_t> sizes;
  size_t staged = 0;
};

class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit FailurePrinter(int rank) : rank(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult &result) override {
    if (!result.failed())
      return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank,
                 result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
  void OnTestEnd(const ::testing::TestInfo &info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank,
                   info.test_suite_name(), info.name());
  }

private:
  int rank;
};

} // namespace
} // namespace bmrt::test

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<bmrt::World> world;
  try {
    world = bmrt::createWorld();
  } catch (const bmrt::Error &e) {
    bmrt::abortJob(e.what());
  }
  // BMRT_TEST_DEVICE=cuda: the buffers on the GPU, where the communicators
  // are NCCL's (one GPU per rank) or staged (ranks sharing one).
  const char *backend = std::getenv("BMRT_TEST_DEVICE");
  std::unique_ptr<bmrt::Device> device;
  try {
    device = bmrt::createDevice(backend && *backend ? backend : "cpu");
  } catch (const bmrt::Error &e) {
    bmrt::abortJob(e.what());
  }
  if (const char *mode = std::getenv("BMRT_TEST_STAGED"); mode && *mode == '1')
    device = std::make_unique<bmrt::test::FarDevice>(std::move(device));
  bmrt::test::world = world.get();
  bmrt::test::device = device.get();

  ::testing::TestEventListeners &listeners =
      ::testing::UnitTest::GetInstance()->listeners();
  if (world->rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new bmrt::test::FailurePrinter(world->rank()));
  }
  int failed = RUN_ALL_TESTS() != 0;

  // Gather the verdicts so every rank exits alike and rank 0 names the
  // ranks that failed.
  std::vector<int32_t> verdicts(world->size());
  {
    auto all = world->all();
    int32_t mine = failed;
    all->allGather(&mine, verdicts.data(), 1, bmrt::DType::I32,
                   device->computeStream());
  }
  std::string failedRanks;
  for (int r = 0; r < world->size(); ++r)
    if (verdicts[r])
      failedRanks += " " + std::to_string(r);
  if (world->rank() == 0)
    std::printf(
        "comm tests (%s, %d ranks): %s\n", world->backend(), world->size(),
        failedRanks.empty() ? "every rank passed"
                            : ("failed on rank(s)" + failedRanks).c_str());
  // Staging that never happened would pass every test without testing it.
  if (auto *far = dynamic_cast<bmrt::test::FarDevice *>(device.get());
      far && far->stagedBytes() == 0) {
    std::fprintf(stderr, "BMRT_TEST_STAGED=1, but no buffer was staged\n");
    failedRanks += " " + std::to_string(world->rank());
  }
  // BMRT_TEST_TRANSPORT=nccl: the tests must have run over that transport.
  if (const char *want = std::getenv("BMRT_TEST_TRANSPORT");
      want && *want && bmrt::test::transports[want] == 0) {
    std::fprintf(stderr,
                 "BMRT_TEST_TRANSPORT=%s, but no communicator of "
                 "the tests was one\n",
                 want);
    failedRanks += " " + std::to_string(world->rank());
  }
  if (world->rank() == 0)
    for (const auto &[transport, count] : bmrt::test::transports)
      std::printf("communicators made: %d %s\n", count, transport.c_str());
  device.reset();
  world.reset();
  return failedRanks.empty() ? 0 : 1;
}
