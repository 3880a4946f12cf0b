//===- WatchdogTest.cpp - the collective timeout while nothing is late ----===//
//
// What the timeout costs and leaves alone: a thread only for a job of
// several ranks with a timeout set, and waits that each stay under it never
// end the job, however long they last together. A wait past it ending the
// job is check_failure.sh's (CommFailure.cpp's timeout and stopped modes).
//
//===----------------------------------------------------------------------===//

#include "CommTestSupport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <numeric>
#include <thread>

using namespace bmrt;
using namespace bmrt::test;

namespace {

/// This process's threads, as Linux lists them.
size_t threadCount() {
  auto tasks = std::filesystem::directory_iterator("/proc/self/task");
  return std::distance(begin(tasks), end(tasks));
}

TEST(WatchdogTest, AThreadOnlyForSeveralRanksWithATimeout) {
  World &world = testWorld();
  size_t before = threadCount();
  world.setTimeout(0);
  EXPECT_EQ(threadCount(), before);
  world.setTimeout(60);
  EXPECT_EQ(threadCount(), before + (world.size() > 1 ? 1 : 0));
  world.setTimeout(0);
  EXPECT_EQ(threadCount(), before);
}

TEST(WatchdogTest, GroupsKnowTheirWorldRanks) {
  std::vector<int> everyone(testWorld().size());
  std::iota(everyone.begin(), everyone.end(), 0);
  EXPECT_EQ(allRanks()->worldRanks(), everyone);
}

TEST(WatchdogTest, ShortWaitsNeverAddUpToTheTimeout) {
  // Ten waits of about 0.3 s each (rank 0 comes late), half again the
  // timeout together: each wait starts the clock again.
  World &world = testWorld();
  if (world.size() == 1)
    GTEST_SKIP() << "one rank never waits for another";
  world.setTimeout(2);
  auto comm = allRanks();
  Stream &stream = testDevice().computeStream();
  float value = 1, expected = 1;
  for (int i = 0; i < 10; ++i) {
    if (world.rank() == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (i % 2) {
      comm->barrier();
      continue;
    }
    comm->allReduceAsync(&value, &value, 1, DType::F32, stream).wait();
    expected *= world.size();
  }
  world.setTimeout(0);
  EXPECT_EQ(value, expected);
}

} // namespace
