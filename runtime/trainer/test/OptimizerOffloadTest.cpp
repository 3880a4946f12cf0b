//===- OptimizerOffloadTest.cpp - the host's step behind the forward ------===//
//
// OptimizerOffload's worker on the CPU backend: the ranges it takes in the
// order given, each landing (and reported) once, in order, however far the
// trainer asks to wait; the host's copies read from the device where they
// are stale; a failing step's error reaching the trainer's thread; and the
// phases of the sequential path refused while a step is behind.
//
//===----------------------------------------------------------------------===//

#include "OptimizerOffload.h"

#include "bmrt/Backend.h"
#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace bmrt {
namespace {

class OptimizerOffloadTest : public ::testing::Test {
protected:
  void SetUp() override {
    device = createDevice("cpu", {1});
    offload = std::make_unique<OptimizerOffload>(*device, 1);
    // Range k holds k + 1 parameters valued 10 (k + 1), gradients k + 1.
    for (int k = 0; k < 3; ++k) {
      Shape shape = {k + 1};
      TensorUpdate r{
          view(*device, shape, MemoryKind::Parameters, 10.f * (k + 1)),
          view(*device, shape, MemoryKind::Gradients, k + 1.f),
          view(offload->host(), shape, MemoryKind::OptimizerState, 0),
          TensorView()};
      ranges.push_back(r);
    }
    offload->hold(ranges);
  }

  TensorView view(Device &on, const Shape &shape, MemoryKind kind,
                  float value) {
    TensorView v{on.allocate(numElements(shape) * 4, kind), DType::F32, shape};
    for (int64_t i = 0; i < v.size(); ++i)
      static_cast<float *>(v.data)[i] = value;
    return v;
  }

  static float first(const TensorView &v) {
    return static_cast<const float *>(v.data)[0];
  }

  /// A step that subtracts the gradient from the parameter.
  static void descend(const TensorUpdate &copy) {
    auto *p = static_cast<float *>(copy.value.data);
    const auto *g = static_cast<const float *>(copy.grad.data);
    for (int64_t i = 0; i < copy.value.size(); ++i)
      p[i] -= g[i];
  }

  std::unique_ptr<Device> device;
  std::unique_ptr<OptimizerOffload> offload;
  std::vector<TensorUpdate> ranges;
};

TEST_F(OptimizerOffloadTest, RangesLandInTheGivenOrderEachReportedOnce) {
  std::vector<size_t> landed;
  offload->stepBehind(ranges, device->computeStream(), {2, 0, 1}, descend,
                      [&](size_t k) { landed.push_back(k); });
  offload->awaitUpTo(0, device->computeStream());
  EXPECT_EQ(landed, (std::vector<size_t>{2}));
  // The host's copies were stale: read from the device, then stepped.
  EXPECT_EQ(first(ranges[2].value), 30.f - 3.f);
  offload->awaitUpTo(0, device->computeStream());
  offload->awaitUpTo(2, device->computeStream());
  EXPECT_EQ(landed, (std::vector<size_t>{2, 0, 1}));
  EXPECT_EQ(first(ranges[0].value), 10.f - 1.f);
  EXPECT_EQ(first(ranges[1].value), 20.f - 2.f);
  // Nothing behind: waits and settles return at once.
  offload->awaitUpTo(2, device->computeStream());
  offload->settle(device->computeStream());
  EXPECT_EQ(landed.size(), 3u);
  std::map<std::string, double> times = offload->takeTimes();
  for (const char *phase : {"copy_down", "host_step", "copy_up", "wait"})
    EXPECT_EQ(times.count(phase), 1u) << phase;

  // The next step reads the host's parameters, not the device's: a value
  // the device holds now is not read back unless it changed (a resume).
  static_cast<float *>(ranges[0].value.data)[0] = 100.f;
  offload->stepBehind(ranges, device->computeStream(), {0, 1, 2}, descend,
                      [](size_t) {});
  offload->settle(device->computeStream());
  EXPECT_EQ(first(ranges[0].value), 10.f - 2.f);
  offload->parametersChanged();
  static_cast<float *>(ranges[0].value.data)[0] = 100.f;
  offload->stepBehind(ranges, device->computeStream(), {0, 1, 2}, descend,
                      [](size_t) {});
  offload->settle(device->computeStream());
  EXPECT_EQ(first(ranges[0].value), 100.f - 1.f);
}

TEST_F(OptimizerOffloadTest, AFailingStepReachesTheTrainersThread) {
  std::vector<size_t> landed;
  offload->stepBehind(
      ranges, device->computeStream(), {0, 1, 2},
      [](const TensorUpdate &copy) {
        if (copy.value.size() == 2)
          BMRT_FAIL("the host step of range 1 failed");
        descend(copy);
      },
      [&](size_t k) { landed.push_back(k); });
  try {
    offload->settle(device->computeStream());
    FAIL() << "settle returned";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("the host step of range 1 failed"),
              std::string::npos)
        << e.what();
  }
  // The worker has ended; the next step may start.
  offload->stepBehind(ranges, device->computeStream(), {0, 1, 2}, descend,
                      [](size_t) {});
  offload->settle(device->computeStream());
}

TEST_F(OptimizerOffloadTest, TheSequentialPhasesWaitForAStepBehind) {
  offload->stepBehind(ranges, device->computeStream(), {0, 1, 2}, descend,
                      [](size_t) {});
  EXPECT_THROW(offload->copyDown(ranges, device->computeStream()), Error);
  offload->settle(device->computeStream());
  const std::vector<TensorUpdate> &copies =
      offload->copyDown(ranges, device->computeStream());
  EXPECT_EQ(first(copies[1].grad), 2.f);
}

TEST_F(OptimizerOffloadTest, ADestroyedOffloadWaitsForItsWorker) {
  offload->stepBehind(ranges, device->computeStream(), {0, 1, 2}, descend,
                      [](size_t) {});
  offload.reset();
  EXPECT_EQ(first(ranges[2].value), 30.f - 3.f);
}

} // namespace
} // namespace bmrt
