//===- CommTestMain.cpp - GoogleTest under mpirun -------------------------===//
//
// Each rank runs all tests. Rank 0 prints GoogleTest's usual output; the
// others print only their failures, each line marked with the rank, so that
// N copies of the same report do not bury them. Every rank exits with the
// job's verdict, and rank 0 ends with one line saying which ranks failed.
//
//===----------------------------------------------------------------------===//

#include "CommTestSupport.h"

#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace bmrt::test {

static World *world;
static Device *device;

World &testWorld() { return *world; }
Device &testDevice() { return *device; }

namespace {

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
  std::unique_ptr<bmrt::Device> device = bmrt::createCpuDevice();
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
  device.reset();
  world.reset();
  return failedRanks.empty() ? 0 : 1;
}
